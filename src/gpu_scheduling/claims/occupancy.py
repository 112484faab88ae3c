"""Who holds which GPU of which node, how many are free, and where the sources disagree: the one answer the board,
`kubectl gpu nodes` and `kubectl gpu health` show and the agent publishes as `inUseBy`. Pure and total: the
decoders read objects of any shape and never raise (a field of the wrong type reads as absent, an object that cannot
be read is a finding), and what they keep is bounded.

A GPU's holders come from three sources, as the scheduler's ledger counts them (claims.ledger):
  * "map": a live bound pod's `gpu-scheduling-map` entry;
  * "claim": a live bound claim pod's allocation annotation;
  * "lease": the pods its GPU Lease names (the cluster-wide lock; a Lease that names nobody still counts).
The inventory agent's `inUseBy` (a copy that lags by up to its period) and the kubelet's assignment
(`kubeletPods`, from gpu-device-plugin) are compared with them.

Findings, each of one kind (FINDINGS gives its severity):
  * foreign-inventory: a GpuNodeStatus whose spec.nodeName names another node (its inventory is ignored);
  * lease-unreadable: a Lease with the GPU Lease label but no node or GPU label that can be read;
  * lease-without-holder: a GPU Lease that names nobody (the scheduler deletes a Lease when its last holder goes);
  * lease-without-allocation: a Lease naming a pod that is gone, finished, or bound holding other GPUs;
  * lease-names-unbound-pod: a Lease naming a live pod that is not bound (the scheduler takes the Lease just before
    the bind, so this lasts a moment unless the bind failed and the Lease was not released);
  * allocation-without-lease: a bound claim pod's GPU that no Lease names it for;
  * exclusive-shared: an Exclusive GPU with more than one holder;
  * unknown-gpu: a GPU held on a node whose inventory does not list it;
  * in-use-by-out-of-step (a warning): the agent's `inUseBy` names other pods than the holders;
  * kubelet-disagrees: the kubelet gave a device of a GPU to a pod gpu-scheduler did not give that GPU.

`node` computes one node from what is known of it (the board calls it per node, incrementally); `cluster` decodes a
whole list of objects and computes every node (the CLI).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, Generic, Literal, Protocol, TypeVar

from gpu_scheduling import constants, devices, gpumap
from gpu_scheduling.claims import objects
from gpu_scheduling.claims.ledger import Hold, LeaseRecord

JSON = dict[str, Any]
Kind = Literal[
    "foreign-inventory",
    "lease-unreadable",
    "lease-without-holder",
    "lease-without-allocation",
    "lease-names-unbound-pod",
    "allocation-without-lease",
    "exclusive-shared",
    "unknown-gpu",
    "in-use-by-out-of-step",
    "kubelet-disagrees",
]
Severity = Literal["error", "warning"]
Source = Literal["map", "claim", "lease"]

#: Every kind of finding, with its severity.
FINDINGS: Final[Mapping[Kind, Severity]] = {
    "foreign-inventory": "error",
    "lease-unreadable": "error",
    "lease-without-holder": "error",
    "lease-without-allocation": "error",
    "lease-names-unbound-pod": "error",
    "allocation-without-lease": "error",
    "exclusive-shared": "error",
    "unknown-gpu": "error",
    "in-use-by-out-of-step": "warning",
    "kubelet-disagrees": "error",
}

#: Bounds on what one object may add.
MAX_MESSAGE: Final = 1024  # characters of a finding's message
MAX_TEXT: Final = 253  # characters of other copied text (island, health, claim names)
MAX_GPU_ID: Final = 999_999  # the largest GPU id a Lease label can carry (6 digits); larger ids are ignored
MAX_GPUS_PER_HOLD: Final = 256  # distinct GPU ids one pod can be read holding
MAX_HOLDERS_PER_LEASE: Final = 256  # holders read from one Lease
MAX_DEVICES: Final = 1024  # devices read from one GpuNodeStatus
MAX_IN_USE_BY: Final = 256  # inUseBy / kubeletPods entries read per device
_SHOWN = 5  # items named in a message before "and N more"

FINISHED: Final = ("Succeeded", "Failed")
_SOURCE_ORDER: Final[Mapping[str, int]] = {"map": 0, "claim": 1, "lease": 2}
_LEASE_NAME_RE = re.compile(r"^gpu-(.+)-([0-9]{1,6})$")


# ---- reading fields of any type ----------------------------------------------------------------------------------

_EMPTY: Mapping[str, Any] = {}  # never modified


def mapping(value: object) -> Mapping[str, Any]:
    if type(value) is dict:  # the common case, checked first: isinstance against an ABC is slow
        return value
    return value if isinstance(value, Mapping) else _EMPTY


def string(value: object) -> str | None:
    """`value` when it is a non-empty string (an identity: never cut), else None."""
    return value if type(value) is str and value else None


def text(value: object, limit: int = MAX_TEXT) -> str | None:
    """`value` cut to `limit` characters when it is a string (for display), else None."""
    return value[:limit] if type(value) is str else None


def integer(value: object) -> int | None:
    return value if type(value) is int else None  # not a bool, nor a float


def strings(value: object) -> dict[str, str]:
    """The string-to-string items of a mapping (labels, annotations); anything else is dropped."""
    if type(value) is not dict and not isinstance(value, Mapping):
        return {}
    return {k: v for k, v in value.items() if type(k) is str and type(v) is str}


def items(value: object) -> list[Any]:
    return value if type(value) is list else []


def listing(names: Sequence[str]) -> str:
    shown = ", ".join(names[:_SHOWN])
    return shown + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")


# ---- what is read of each object -----------------------------------------------------------------------------------


class PodLike(Protocol):
    """What the model reads of a pod (the board keeps more of it; `Pod` is the plain one)."""

    @property
    def key(self) -> str: ...
    @property
    def uid(self) -> str: ...
    @property
    def ref(self) -> str: ...
    @property
    def node(self) -> str | None: ...
    @property
    def phase(self) -> str | None: ...
    @property
    def hold(self) -> Hold | None: ...
    @property
    def allocated(self) -> str | None: ...
    @property
    def finished(self) -> bool: ...


P = TypeVar("P", bound=PodLike)


def pod_hold(
    uid: str,
    namespace: str,
    name: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    node: str | None,
    maps: gpumap.ParseCache | None = None,
) -> Hold | None:
    """What a bound pod holds (objects.hold_from_pod on well-typed fields), its GPU ids bounded; None when it holds
    nothing or its annotations cannot be read."""
    if node is None:
        return None
    clean = {
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "labels": labels, "annotations": annotations},
        "spec": {"nodeName": node},
    }
    hold = objects.hold_from_pod(clean, maps)
    if hold is None:
        return None
    ids = hold.gpu_ids
    if len(ids) > 1 or not 0 <= ids[0] <= MAX_GPU_ID:
        ids = tuple(dict.fromkeys(g for g in ids if 0 <= g <= MAX_GPU_ID))[:MAX_GPUS_PER_HOLD]
        if not ids:
            return None
    if ids is hold.gpu_ids and len(hold.exclusivity) <= 64 and len(hold.claim) <= MAX_TEXT:
        return hold
    return dataclasses.replace(hold, gpu_ids=ids, exclusivity=hold.exclusivity[:64], claim=hold.claim[:MAX_TEXT])


@dataclasses.dataclass(frozen=True, slots=True)
class Pod:
    key: str  # "<namespace>/<name>", or "<name>" without a namespace (as an informer keys it)
    uid: str
    namespace: str
    name: str
    node: str | None  # spec.nodeName
    phase: str | None
    hold: Hold | None  # what it holds: live and bound only
    allocated: str | None  # the allocation annotation, for messages

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def finished(self) -> bool:
        return self.phase in FINISHED


def read_pod(obj: object, maps: gpumap.ParseCache | None = None) -> Pod | None:
    """A pod as the model reads it (its map parsed through `maps` when the caller keeps a cache); None when it has no
    name."""
    obj = mapping(obj)
    meta = mapping(obj.get("metadata"))
    name = string(meta.get("name"))
    if name is None:
        return None
    namespace = string(meta.get("namespace")) or ""
    uid = string(meta.get("uid")) or ""
    annotations = strings(meta.get("annotations"))
    node = string(mapping(obj.get("spec")).get("nodeName"))
    phase = text(mapping(obj.get("status")).get("phase"), 64)
    hold = None
    if phase not in FINISHED:
        hold = pod_hold(uid, namespace, name, strings(meta.get("labels")), annotations, node, maps)
    allocated = text(annotations.get(constants.ALLOCATED_ANNOTATION))
    return Pod(f"{namespace}/{name}" if namespace else name, uid, namespace, name, node, phase, hold, allocated)


@dataclasses.dataclass(frozen=True, slots=True)
class Lease:
    key: str  # "<namespace>/<name>"
    name: str
    record: LeaseRecord | None  # None: unreadable (no node or GPU label)
    node: str | None  # the node it is shown on: the record's, else the best guess (labels, then its name)


def read_lease(obj: object) -> Lease | None:
    """A GPU Lease (one carrying the GPU Lease label); None for anything else."""
    obj = mapping(obj)
    meta = mapping(obj.get("metadata"))
    name = string(meta.get("name"))
    labels = strings(meta.get("labels"))
    if name is None or labels.get(constants.LEASE_LABEL) != constants.LEASE_LABEL_VALUE:
        return None
    namespace = string(meta.get("namespace"))
    key = f"{namespace}/{name}" if namespace else name
    annotations = strings(meta.get("annotations"))
    holder = string(mapping(obj.get("spec")).get("holderIdentity"))
    # Only well-typed fields, and no resourceVersion: a renewal that changes nothing else changes nothing here.
    clean = {
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {"holderIdentity": holder},
    }
    record = objects.lease_record(clean)
    if record is not None and record.gpu > MAX_GPU_ID:
        record = None
    if record is not None:
        if len(record.holders) > 1 or len(record.exclusivity) > 64:
            holders = tuple(dict.fromkeys(record.holders))[:MAX_HOLDERS_PER_LEASE]
            record = dataclasses.replace(
                record,
                holders=holders,
                pods={uid: record.pods[uid] for uid in holders if uid in record.pods},
                exclusivity=record.exclusivity[:64],
            )
        return Lease(key, name, record, record.node)
    match = _LEASE_NAME_RE.match(name)
    guess = (
        annotations.get(constants.LEASE_NODE_ANNOTATION)
        or labels.get(constants.LEASE_NODE_LABEL)
        or (match.group(1) if match else None)
    )
    return Lease(key, name, None, guess)


@dataclasses.dataclass(frozen=True, slots=True)
class Device:
    id: int
    island: str
    health: str
    in_use_by: tuple[str, ...] | None  # the agent's copy (None: it wrote none)
    kubelet_pods: tuple[str, ...] | None  # the pods the kubelet gave a device of it (None: no device plugin)
    fields: JSON  # what the inventory alone says of the GPU, for display (never modified)

    @property
    def healthy(self) -> bool:
        return self.health == "Healthy"


def _names(value: object) -> tuple[str, ...] | None:
    if type(value) is not list:
        return None
    return tuple(dict.fromkeys(u[:MAX_TEXT] for u in value[:MAX_IN_USE_BY] if type(u) is str))


def read_device(value: object) -> Device | None:
    device = mapping(value)
    get = device.get
    gpu = get("id")
    if type(gpu) is not int or not 0 <= gpu <= MAX_GPU_ID:
        return None
    island = text(get("island")) or "default"
    health = text(get("health"), 64) or "Healthy"
    return Device(
        gpu,
        island,
        health,
        _names(get("inUseBy")),
        _names(get("kubeletPods")),
        {
            "id": gpu,
            "known": True,
            "island": island,
            "bandwidthGBps": integer(get("bandwidthGBps")) or 0,
            "health": health,
            "memoryTotalMiB": integer(get("memoryTotalMiB")),
            "memoryUsedMiB": integer(get("memoryUsedMiB")),
            "utilizationPercent": integer(get("utilizationPercent")),
        },
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Inventory:
    """A GpuNodeStatus."""

    name: str
    foreign: str | None  # spec.nodeName when it names another node: the inventory is then ignored
    devices: tuple[Device, ...]  # by id, each id once (the first entry wins); none when foreign


def read_inventory(obj: object) -> Inventory | None:
    """A GpuNodeStatus; None when it has no name."""
    obj = mapping(obj)
    name = string(mapping(obj.get("metadata")).get("name"))
    if name is None:
        return None
    spec_node = string(mapping(obj.get("spec")).get("nodeName"))
    if objects.inventory_node({"metadata": {"name": name}, "spec": {"nodeName": spec_node}}) is None:
        return Inventory(name, spec_node, ())
    found: dict[int, Device] = {}
    for value in items(mapping(obj.get("status")).get("devices"))[:MAX_DEVICES]:
        device = read_device(value)
        if device is not None:
            found.setdefault(device.id, device)
    return Inventory(name, None, tuple(found[g] for g in sorted(found)))


# ---- the model -----------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Finding:
    kind: Kind
    node: str | None  # None: a Lease that names no node
    gpu: int | None  # None: about the node (or the object) as a whole
    message: str  # in the board's words; the fields below let another reader word it its own way
    lease: str = ""  # the Lease's name, where one is concerned
    pod: str = ""  # the pod concerned ("<namespace>/<name>", or as a Lease names it)
    why: str = ""  # lease-without-allocation: "gone", "finished" or "elsewhere" (it holds other GPUs)
    allocated: str | None = None  # the pod's allocation annotation, where a pod is concerned

    @property
    def severity(self) -> Severity:
        return FINDINGS[self.kind]

    @property
    def lease_finding(self) -> bool:
        """Whether it is about the GPU Leases against the pods' allocations (kubectl gpu health's gpu-leases)."""
        return self.kind.startswith("lease-") or self.kind == "allocation-without-lease"


def _finding(kind: Kind, node: str | None, gpu: int | None, message: str, **fields: Any) -> Finding:
    return Finding(kind, node, gpu, message[:MAX_MESSAGE], **fields)


def _finding_order(finding: Finding) -> tuple[str, str]:
    return (finding.kind, finding.message)


@dataclasses.dataclass(slots=True)
class Holder(Generic[P]):
    """A pod holding a GPU, by every source that says so."""

    uid: str
    pod: str  # "<namespace>/<name>", or what the Lease names it (its uid where it gives no name)
    known: P | None  # the pod, when it is known
    sources: list[Source]  # map, claim, lease order


@dataclasses.dataclass(frozen=True, slots=True)
class Gpu(Generic[P]):
    id: int
    device: Device | None  # None: the inventory does not list it
    holders: tuple[Holder[P], ...]  # by pod, then uid
    exclusivity: str | None  # Exclusive when any source says so, else Shared, else whatever they say; None: free
    findings: tuple[Finding, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class NodeOccupancy(Generic[P]):
    name: str
    inventory: bool  # a GpuNodeStatus describes it (and is not ignored)
    gpus: tuple[Gpu[P], ...]  # by id: the listed GPUs and any other that is held or leased
    findings: tuple[Finding, ...]  # about the node as a whole
    total: int  # GPUs the inventory lists
    allocated: int  # GPUs with a holder
    free: int  # listed, healthy GPUs with no holder
    unhealthy: int  # listed GPUs that are not Healthy

    def all_findings(self) -> list[Finding]:
        return [*self.findings, *(f for g in self.gpus for f in g.findings)]

    def gpu(self, gpu: int) -> Gpu[P] | None:
        return next((g for g in self.gpus if g.id == gpu), None)


def _ids(ids: Iterable[int]) -> str:
    return ",".join(str(i) for i in ids)


def _exclusivity(kinds: set[str] | None) -> str | None:
    if not kinds:
        return None
    if "Exclusive" in kinds:
        return "Exclusive"
    return "Shared" if "Shared" in kinds else min(kinds)


def _out_of_step(in_use_by: tuple[str, ...], holders: Sequence[Holder[Any]]) -> bool:
    """The agent's inUseBy names other pods than the holders (it writes a Lease holder's uid where the Lease gives
    no name, so a uid matches its holder too)."""
    if not in_use_by:
        return bool(holders)
    named = set(in_use_by)
    if any(h.pod not in named and h.uid not in named for h in holders):
        return True
    return bool(named - {h.pod for h in holders} - {h.uid for h in holders})


class _Builder(Generic[P]):
    """The holders, exclusivities and findings of one node's GPUs while `node` reads its sources."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.holders: dict[int, dict[str, Holder[P]]] = {}  # GPU -> holder key -> holder
        self.exclusivity: dict[int, set[str]] = {}
        self.findings: dict[int, list[Finding]] = {}
        self.leased: dict[int, set[str]] = {}  # GPU -> uids its Leases name

    def hold(self, gpu: int, pod: P, source: Source) -> None:
        holders = self.holders.setdefault(gpu, {})
        key = pod.uid or f"pod:{pod.key}"
        holder = holders.get(key)
        if holder is None:
            holders[key] = Holder(pod.uid, pod.ref, pod, [source])
        elif source not in holder.sources:
            holder.sources.append(source)

    def lease_holder(self, gpu: int, uid: str, who: str) -> None:
        """A Lease holder whose pod is not known: named as the Lease names it."""
        holders = self.holders.setdefault(gpu, {})
        holder = holders.get(uid)
        if holder is None:
            holders[uid] = Holder(uid, who, None, ["lease"])
        elif "lease" not in holder.sources:
            holder.sources.append("lease")

    def flag(self, gpu: int, kind: Kind, message: str, **fields: Any) -> None:
        self.findings.setdefault(gpu, []).append(_finding(kind, self.name, gpu, message, **fields))

    def pods(self, holding: Iterable[P]) -> list[P]:
        """Count the holds of `holding`; the claim pods among them."""
        claim_pods = []
        for pod in holding:
            hold = pod.hold
            if hold is None:
                continue
            for gpu in hold.gpu_ids:
                self.hold(gpu, pod, hold.source)
                self.exclusivity.setdefault(gpu, set()).add(hold.exclusivity)
            if hold.source == "claim":
                claim_pods.append(pod)
        return claim_pods

    def unleased(self, claim_pods: Iterable[P]) -> None:
        """Flag each GPU of a claim pod that no Lease names it for (once every Lease was read)."""
        for pod in claim_pods:
            hold = pod.hold
            assert hold is not None
            for gpu in hold.gpu_ids:
                if pod.uid not in self.leased.get(gpu, ()):
                    self.flag(
                        gpu,
                        "allocation-without-lease",
                        f"pod {pod.ref} holds GPU {gpu} of {self.name} ({constants.ALLOCATED_ANNOTATION} "
                        f"{pod.allocated}), but no Lease names it",
                        pod=pod.ref,
                        allocated=pod.allocated,
                    )

    def lease(self, lease: Lease, record: LeaseRecord, pod_of: Callable[[str], P | None]) -> None:
        name, gpu = self.name, record.gpu
        self.leased.setdefault(gpu, set()).update(record.holders)
        self.exclusivity.setdefault(gpu, set()).add(record.exclusivity)
        if not record.holders:
            self.flag(
                gpu,
                "lease-without-holder",
                f"Lease {lease.name} of GPU {gpu} of {name} names no holder",
                lease=lease.name,
            )
        for uid in record.holders:
            named = pod_of(uid)
            if named is None:
                who = record.pods.get(uid) or f"uid:{uid}"
                self.lease_holder(gpu, uid, who)
                message = f"Lease {lease.name} names pod {who}, which is gone"
                self.flag(gpu, "lease-without-allocation", message, lease=lease.name, pod=who, why="gone")
                continue
            self.hold(gpu, named, "lease")
            hold = named.hold
            if named.finished:
                self.flag(
                    gpu,
                    "lease-without-allocation",
                    f"Lease {lease.name} names pod {named.ref}, which is finished ({named.phase})",
                    lease=lease.name,
                    pod=named.ref,
                    why="finished",
                    allocated=named.allocated,
                )
            elif named.node is None:
                self.flag(
                    gpu,
                    "lease-names-unbound-pod",
                    f"Lease {lease.name} names pod {named.ref} for GPU {gpu} of {name}, but the pod is not bound "
                    "(the scheduler binds it just after taking the Lease)",
                    lease=lease.name,
                    pod=named.ref,
                    allocated=named.allocated,
                )
            elif hold is None or hold.source != "claim" or hold.node != name or gpu not in hold.gpu_ids:
                if hold is not None and hold.source == "map":
                    what = f"its {constants.MAP_ANNOTATION} entry ({hold.node}:{_ids(hold.gpu_ids)})"
                else:
                    what = f"{constants.ALLOCATED_ANNOTATION} {named.allocated or '<none>'}"
                self.flag(
                    gpu,
                    "lease-without-allocation",
                    f"Lease {lease.name} names pod {named.ref} for GPU {gpu} of {name}, but the pod holds {what}",
                    lease=lease.name,
                    pod=named.ref,
                    why="elsewhere",
                    allocated=named.allocated,
                )

    def gpu(self, gpu: int, device: Device | None, listed: bool) -> Gpu[P]:
        """GPU `gpu` with its holders and every finding about it (`listed`: the node has an inventory)."""
        name = self.name
        found = self.holders.get(gpu)
        shown = sorted(found.values(), key=lambda h: (h.pod, h.uid)) if found else []
        for h in shown:
            if len(h.sources) > 1:
                h.sources.sort(key=_SOURCE_ORDER.__getitem__)
        exclusive = _exclusivity(self.exclusivity.get(gpu))
        pods = [h.pod for h in shown]
        if exclusive == "Exclusive" and len(shown) > 1:
            self.flag(
                gpu,
                "exclusive-shared",
                f"GPU {gpu} of {name} is Exclusive but has {len(shown)} holder pods: {listing(pods)}",
            )
        if device is None and listed and shown:
            self.flag(
                gpu,
                "unknown-gpu",
                f"GPU {gpu} of {name} is held by {listing(pods)}, but the GpuNodeStatus of {name} does not list it",
            )
        if device is not None and device.in_use_by is not None and _out_of_step(device.in_use_by, shown):
            self.flag(
                gpu,
                "in-use-by-out-of-step",
                f"the GpuNodeStatus of {name} says GPU {gpu} is in use by [{listing(device.in_use_by)}], the "
                f"holders are [{listing(pods)}] (the agent's copy lags by up to its period)",
            )
        if device is not None and device.kubelet_pods:
            strangers = devices.kubelet_disagreements(device.kubelet_pods, pods)
            if strangers:
                self.flag(
                    gpu,
                    "kubelet-disagrees",
                    f"the kubelet of {name} gave a device of GPU {gpu} to {listing(strangers)}, which "
                    f"gpu-scheduler did not give GPU {gpu} (its holders: [{listing(pods)}])",
                )
        findings = self.findings.get(gpu) or []
        if len(findings) > 1:
            findings.sort(key=_finding_order)
        return Gpu(gpu, device, tuple(shown), exclusive, tuple(findings))


def _unreadable(lease: Lease, node: str | None) -> Finding:
    return _finding(
        "lease-unreadable",
        node,
        None,
        f"Lease {lease.name} carries the GPU Lease label but no node or GPU label that can be read",
        lease=lease.name,
    )


def node(
    name: str,
    inventory: Inventory | None,
    holding: Iterable[P],
    leases: Iterable[Lease],
    pod_of: Callable[[str], P | None],
) -> NodeOccupancy[P]:
    """Node `name` from its GpuNodeStatus (`inventory`), the live bound pods holding its GPUs (`holding`, each with
    a `hold` on this node), the GPU Leases shown on it (`leases`) and the pods by uid (`pod_of`: any pod, bound or
    not, on any node; None when no pod has that uid). Holders and findings come in the order given."""
    foreign = inventory.foreign if inventory is not None else None
    listed = {d.id: d for d in inventory.devices} if inventory is not None and foreign is None else {}
    node_findings: list[Finding] = []
    if foreign is not None:
        node_findings.append(
            _finding(
                "foreign-inventory",
                name,
                None,
                f"GpuNodeStatus {name} names node {foreign} in spec.nodeName; its inventory is ignored "
                "(an inventory may describe only the node it is named after)",
            )
        )
    b: _Builder[P] = _Builder(name)
    claim_pods = b.pods(holding)
    for lease in leases:
        if lease.record is None:
            node_findings.append(_unreadable(lease, name))
        else:
            b.lease(lease, lease.record, pod_of)
    b.unleased(claim_pods)
    gpus = tuple(
        b.gpu(gpu, listed.get(gpu), bool(listed)) for gpu in sorted(listed.keys() | b.holders.keys() | b.leased.keys())
    )
    node_findings.sort(key=_finding_order)
    return NodeOccupancy(
        name,
        inventory is not None and foreign is None,
        gpus,
        tuple(node_findings),
        total=len(listed),
        allocated=sum(1 for g in gpus if g.holders),
        free=sum(1 for g in gpus if g.device is not None and g.device.healthy and not g.holders),
        unhealthy=sum(1 for g in gpus if g.device is not None and not g.device.healthy),
    )


@dataclasses.dataclass(frozen=True)
class Occupancy:
    """Every node of a cluster, and the findings about no node (a GPU Lease that names none)."""

    nodes: Mapping[str, NodeOccupancy[Pod]]  # by name
    findings: tuple[Finding, ...]

    def all_findings(self) -> list[Finding]:
        return [*self.findings, *(f for name in sorted(self.nodes) for f in self.nodes[name].all_findings())]


def read_pods(objs: Iterable[object]) -> tuple[dict[str, Pod], dict[str, Pod]]:
    """The pods of `objs` by key (of two with one key the later counts, as an informer's ADDED replaces what it
    had) and by uid (the first in key order), read through a parse cache of this reading's own (the pods of one
    workload carry one map)."""
    maps = gpumap.ParseCache()
    by_key = {p.key: p for p in (read_pod(obj, maps) for obj in objs) if p is not None}
    by_uid: dict[str, Pod] = {}
    for key in sorted(by_key):
        if by_key[key].uid:
            by_uid.setdefault(by_key[key].uid, by_key[key])
    return by_key, by_uid


def cluster(inventories: Iterable[object], pods: Iterable[object], leases: Iterable[object]) -> Occupancy:
    """The occupancy of every node any of the objects names (GpuNodeStatuses, pods, GPU Leases: objects of any
    shape; what is not a GPU Lease among `leases` is left out)."""
    # Of two objects with one key, the later counts (as an informer's ADDED replaces what it had).
    by_inventory = {i.name: i for i in map(read_inventory, inventories) if i is not None}
    by_key, by_uid = read_pods(pods)
    by_lease = {lease.key: lease for lease in map(read_lease, leases) if lease is not None}
    holding: dict[str, list[Pod]] = {}
    for key in sorted(by_key):
        pod = by_key[key]
        if pod.hold is not None:
            holding.setdefault(pod.hold.node, []).append(pod)
    by_node: dict[str, list[Lease]] = {}
    orphans: list[Finding] = []
    for key in sorted(by_lease):
        lease = by_lease[key]
        if lease.node is not None:
            by_node.setdefault(lease.node, []).append(lease)
        else:
            orphans.append(_unreadable(lease, None))
    names = by_inventory.keys() | holding.keys() | by_node.keys()
    return Occupancy(
        {
            name: node(name, by_inventory.get(name), holding.get(name, ()), by_node.get(name, ()), by_uid.get)
            for name in sorted(names)
        },
        tuple(orphans),
    )
