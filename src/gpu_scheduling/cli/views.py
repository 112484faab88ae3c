"""What `kubectl gpu` shows, computed from plain API objects: the GPUs each node has and who holds them, the rows
of the node and claim tables, pending pods, the policy, the leader, and whether the GPU Leases agree with the pods'
allocations. Pure: objects in, rows and findings out (the commands fetch, this module reads).

Who holds a GPU, how many are free and where the sources disagree is the occupancy model's answer
(claims.occupancy), the one the board shows: the holders of its GPU Lease, the live map pods bound to its node
(which take no Lease) and the allocation annotation of live claim pods. The inventory agent's `inUseBy` is not
used: it is a copy that lags by up to its period.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from gpu_scheduling import constants
from gpu_scheduling.claims import occupancy
from gpu_scheduling.claims.occupancy import Finding
from gpu_scheduling.cli.output import NONE, created_age, parse_time

JSON = dict[str, Any]
FINISHED = occupancy.FINISHED


def finished(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in FINISHED


def ref(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


# ---- nodes -----------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class NodeView:
    name: str
    total: int
    free: int
    allocated: int
    unhealthy: int
    #: island -> (free, total), islands in name order.
    islands: dict[str, tuple[int, int]]
    #: Mean utilizationPercent of the healthy GPUs that report one; None when none does.
    utilization: float | None
    memory_used_mib: int | None
    memory_total_mib: int | None
    unhealthy_ids: tuple[int, ...]
    node: Mapping[str, Any] | None
    inventory: Mapping[str, Any]

    @property
    def exists(self) -> bool:
        return self.node is not None


def node_views(
    inventories: Iterable[Mapping[str, Any]],
    nodes: Iterable[Mapping[str, Any]],
    leases: Iterable[Mapping[str, Any]] = (),
    pods: Iterable[Mapping[str, Any]] = (),
) -> list[NodeView]:
    """One view per GpuNodeStatus the scheduler reads (one naming another node in spec.nodeName is ignored, as the
    scheduler ignores it), in name order; its GPUs held by `pods` and `leases` (the GPU Leases)."""
    inventories = list(inventories)
    by_name = {n["metadata"]["name"]: n for n in nodes}
    model = occupancy.cluster(inventories, pods, leases)
    views: list[NodeView] = []
    for inv in inventories:
        read = occupancy.read_inventory(inv)
        if read is None or read.foreign is not None or any(v.name == read.name for v in views):
            continue
        counts = model.nodes[read.name]
        islands: dict[str, list[int]] = {}
        utils: list[int] = []
        mem_used = mem_total = 0
        mem_reported = False
        for gpu in counts.gpus:
            d = gpu.device
            if d is None:
                continue
            island = islands.setdefault(d.island, [0, 0])
            island[1] += 1
            if d.healthy and not gpu.holders:
                island[0] += 1
            if d.healthy and d.fields["utilizationPercent"] is not None:
                utils.append(d.fields["utilizationPercent"])
            if d.fields["memoryTotalMiB"] is not None:
                mem_reported = True
                mem_total += d.fields["memoryTotalMiB"]
                mem_used += d.fields["memoryUsedMiB"] or 0
        views.append(
            NodeView(
                name=read.name,
                total=counts.total,
                free=counts.free,
                allocated=counts.allocated,
                unhealthy=counts.unhealthy,
                islands={k: (v[0], v[1]) for k, v in sorted(islands.items())},
                utilization=sum(utils) / len(utils) if utils else None,
                memory_used_mib=mem_used if mem_reported else None,
                memory_total_mib=mem_total if mem_reported else None,
                unhealthy_ids=tuple(g.id for g in counts.gpus if g.device is not None and not g.device.healthy),
                node=by_name.get(read.name),
                inventory=inv,
            )
        )
    return sorted(views, key=lambda v: v.name)


def _gib(mib: int) -> str:
    value = mib / 1024
    return f"{value:.0f}" if value >= 100 or value == int(value) else f"{value:.1f}"


def node_row(view: NodeView, now: datetime.datetime, wide: bool) -> list[str]:
    util = "-" if view.utilization is None else f"{view.utilization:.0f}%"
    node_age = created_age(view.node, now) if view.node is not None else "<no node>"
    row = [
        view.name,
        str(view.total),
        str(view.free),
        str(view.unhealthy),
        str(len(view.islands)),
        util,
        node_age,
    ]
    if wide:
        memory = (
            "-"
            if view.memory_total_mib is None or view.memory_used_mib is None
            else f"{_gib(view.memory_used_mib)}/{_gib(view.memory_total_mib)}GiB"
        )
        per_island = ",".join(f"{k}={free}" for k, (free, _) in view.islands.items()) or NONE
        row += [memory, per_island]
    return row


NODE_HEADERS = ["NAME", "GPUS", "FREE", "UNHEALTHY", "ISLANDS", "UTIL", "AGE"]
NODE_WIDE_HEADERS = [*NODE_HEADERS, "MEMORY", "FREE-BY-ISLAND"]


# ---- claims ----------------------------------------------------------------------------------------------------


def pods_by_claim(pods: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], list[str]]:
    """(namespace, claim) -> names of the pods naming it, in name order."""
    out: dict[tuple[str, str], list[str]] = defaultdict(list)
    for pod in pods:
        meta = pod.get("metadata") or {}
        claim = ((meta.get("annotations") or {}).get(constants.CLAIM_ANNOTATION) or "").strip()
        if claim:
            out[(str(meta.get("namespace")), claim)].append(str(meta.get("name")))
    return {k: sorted(v) for k, v in out.items()}


def claim_gpus(claim: Mapping[str, Any]) -> str:
    """The allocated ids ("0,1"), or the count asked for in parentheses while none are allocated ("(2)")."""
    status = claim.get("status") or {}
    ids = status.get("gpuIds")
    if ids:
        return ",".join(str(i) for i in ids)
    count = ((claim.get("spec") or {}).get("devices") or {}).get("count")
    return f"({count})" if count is not None else NONE


def claim_strategy(claim: Mapping[str, Any]) -> str:
    """The strategy that placed it (status), else the one it asks for (spec), else `<default>`."""
    return (claim.get("status") or {}).get("strategy") or (claim.get("spec") or {}).get("strategy") or "<default>"


def claim_phase(claim: Mapping[str, Any]) -> str:
    return str((claim.get("status") or {}).get("phase") or NONE)


def claim_row(
    claim: Mapping[str, Any],
    now: datetime.datetime,
    *,
    all_namespaces: bool,
    wide: bool,
    pods: Mapping[tuple[str, str], list[str]],
) -> list[str]:
    meta = claim["metadata"]
    status = claim.get("status") or {}
    row = [meta["name"], claim_phase(claim), status.get("nodeName") or NONE, claim_gpus(claim), claim_strategy(claim)]
    row.append(created_age(claim, now))
    if all_namespaces:
        row.insert(0, meta.get("namespace", ""))
    if wide:
        named = pods.get((meta.get("namespace", ""), meta["name"])) or []
        row += [",".join(named) or NONE, _one_line(status.get("message")) or NONE]
    return row


def claim_headers(all_namespaces: bool, wide: bool) -> list[str]:
    headers = ["NAME", "PHASE", "NODE", "GPUS", "STRATEGY", "AGE"]
    if all_namespaces:
        headers.insert(0, "NAMESPACE")
    if wide:
        headers += ["PODS", "MESSAGE"]
    return headers


def phase_counts(claims: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Claims per phase, the CRD's phases first (with zeros), then `<none>` for claims no scheduler has seen."""
    counts: dict[str, int] = dict.fromkeys(constants.CLAIM_PHASES, 0)
    for claim in claims:
        phase = claim_phase(claim)
        counts[phase] = counts.get(phase, 0) + 1
    return counts


def _one_line(text: Any) -> str:
    return " ".join(str(text or "").split())


# ---- pending pods ----------------------------------------------------------------------------------------------


def pending_pods(pods: Iterable[Mapping[str, Any]], namespace: str | None) -> list[Mapping[str, Any]]:
    """The scheduler's pods not bound yet (nor finished nor being deleted), of `namespace` (None: every one), by
    creation time then name."""
    out = [
        p
        for p in pods
        if not (p.get("spec") or {}).get("nodeName")
        and not finished(p)
        and not p["metadata"].get("deletionTimestamp")
        and (namespace is None or p["metadata"].get("namespace") == namespace)
    ]
    return sorted(out, key=lambda p: (p["metadata"].get("creationTimestamp") or "", ref(p)))


def gpu_source(pod: Mapping[str, Any]) -> str:
    """`claim/<name>`, `map`, or `<none>`: where a pod takes its GPUs from."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    claim = (annotations.get(constants.CLAIM_ANNOTATION) or "").strip()
    if claim:
        return f"claim/{claim}"
    return "map" if constants.MAP_ANNOTATION in annotations else NONE


def why_pending(pod: Mapping[str, Any]) -> str:
    """The PodScheduled=False message the scheduler wrote, or `<none>` when it has written none yet."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return _one_line(cond.get("message") or cond.get("reason")) or NONE
    return NONE


# ---- policy and leader -----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PolicyView:
    exists: bool
    generation: int | None
    observed: int | None
    default_strategy: str | None
    queue_order: str | None
    applied_strategy: str | None
    applied_queue_order: str | None
    message: str

    @property
    def up_to_date(self) -> bool:
        return (
            self.exists
            and self.observed is not None
            and self.generation is not None
            and self.observed >= self.generation
        )

    def observed_text(self) -> str:
        if not self.exists:
            return "no GpuSchedulingPolicy: the scheduler applies its own flags"
        if self.observed is None:
            return f"generation {self.generation}, not observed by a scheduler yet"
        if self.up_to_date:
            return f"generation {self.generation}, observed (up to date)"
        return f"generation {self.generation}, scheduler still applies generation {self.observed}"


def policy_view(policy: Mapping[str, Any] | None) -> PolicyView:
    if policy is None:
        return PolicyView(False, None, None, None, None, None, None, "")
    spec = policy.get("spec") or {}
    status = policy.get("status") or {}
    observed = status.get("observedGeneration")
    return PolicyView(
        True,
        policy["metadata"].get("generation"),
        int(observed) if observed is not None else None,
        spec.get("defaultStrategy"),
        spec.get("queueOrder"),
        status.get("strategy"),
        status.get("queueOrder"),
        _one_line(status.get("message")),
    )


@dataclasses.dataclass(frozen=True)
class LeaderView:
    holder: str
    renewed_ago: float | None
    duration: int | None

    @property
    def current(self) -> bool:
        """Held and renewed within its lease duration (as seen on this machine's clock)."""
        return (
            bool(self.holder)
            and self.renewed_ago is not None
            and self.duration is not None
            and (self.renewed_ago <= self.duration)
        )

    def text(self) -> str:
        if not self.holder:
            return "none (the leader Lease is released)"
        renewed = "never renewed" if self.renewed_ago is None else f"renewed {max(self.renewed_ago, 0):.0f}s ago"
        duration = f"lease {self.duration}s" if self.duration is not None else "no lease duration"
        return f"{self.holder} ({renewed}, {duration})"


def leader_view(lease: Mapping[str, Any] | None, now: datetime.datetime) -> LeaderView | None:
    if lease is None:
        return None
    spec = lease.get("spec") or {}
    renewed = parse_time(spec.get("renewTime")) or parse_time(spec.get("acquireTime"))
    duration = spec.get("leaseDurationSeconds")
    return LeaderView(
        str(spec.get("holderIdentity") or ""),
        (now - renewed).total_seconds() if renewed is not None else None,
        int(duration) if duration is not None else None,
    )


# ---- leases against allocations (health) -----------------------------------------------------------------------


def findings(
    inventories: Iterable[Mapping[str, Any]], leases: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
) -> list[Finding]:
    """Every finding of the occupancy model (the board's flags) on these objects, the GPU Lease findings first."""
    found = occupancy.cluster(inventories, pods, leases).all_findings()
    return sorted(found, key=lambda f: (f.lease_finding is False, f.lease or f.pod or f.node or "", f.gpu or 0))


def finding_text(finding: Finding) -> str:
    """One finding as kubectl gpu words it (the board words it as `finding.message`)."""
    where = f"({finding.node} GPU {finding.gpu})"
    if finding.kind == "lease-unreadable":
        return f"Lease {finding.lease} carries the GPU Lease label but no node or GPU label"
    if finding.kind == "lease-without-holder":
        return f"Lease {finding.lease} {where} names no holder"
    if finding.kind == "lease-without-allocation" and finding.why in ("gone", "finished"):
        return f"Lease {finding.lease} {where} names pod {finding.pod}, which is gone or finished"
    if finding.kind in ("lease-without-allocation", "lease-names-unbound-pod"):
        return f"Lease {finding.lease} {where} names pod {finding.pod}, whose allocation is {finding.allocated or NONE}"
    if finding.kind == "allocation-without-lease":
        return (
            f"pod {finding.pod} holds GPU {finding.gpu} of {finding.node} ({constants.ALLOCATED_ANNOTATION}), but no "
            "Lease names it"
        )
    return finding.message
