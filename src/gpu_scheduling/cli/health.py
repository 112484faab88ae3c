"""`kubectl gpu health`: is the GPU scheduling of this cluster working? Each check prints one line or more,
`OK|WARN|FAIL  <check>  <detail>`; the exit status is 1 when any FAILs.

- scheduler-leader: the leader-election Lease `<LEASE_NAMESPACE>/<scheduler name>` is held and was renewed within
  its lease duration (on this machine's clock).
- webhook: a server-side dry run (`dryRun=All`: nothing is stored, admission runs) of a map pod comes back with
  CUDA_VISIBLE_DEVICES set from its map entry in every container.
- inventories: every GpuNodeStatus names an existing node (and itself); nodes with unhealthy GPUs WARN.
- chart workloads: where the chart's Deployments and DaemonSet exist (label app.kubernetes.io/part-of), each has
  all its replicas ready; where they do not (the programs run as processes), OK saying so.
- gpu-leases: the occupancy model's findings (claims.occupancy, the board's flags): every GPU Lease names a holder,
  and only live bound pods whose allocation annotation holds that GPU; every GPU of a bound claim pod has a Lease
  naming it; no Exclusive GPU has two holders, no held GPU is missing from its node's inventory, and the kubelet gave
  a GPU's devices only to its holders (`inventory/<node>`). The scheduler releases a Lease moments after its pod
  goes, so a finding counts only if it is still there after `--settle` seconds.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from typing import Any

from gpu_scheduling import constants
from gpu_scheduling.claims import occupancy
from gpu_scheduling.cli import views
from gpu_scheduling.cli.api import (
    DAEMONSETS,
    DEPLOYMENTS,
    GPU_NODE_STATUSES,
    LEASES,
    NODES,
    PODS,
    Api,
    CliError,
    Resource,
    api_error,
)
from gpu_scheduling.cli.context import Ctx
from gpu_scheduling.cli.output import STATE_STYLES, dump, table
from gpu_scheduling.kube.errors import ApiError

JSON = dict[str, Any]
OK, WARN, FAIL = "OK", "WARN", "FAIL"
#: The label the chart puts on its workloads, and its value (charts/gpu-scheduler/templates/_helpers.tpl).
PART_OF_LABEL = "app.kubernetes.io/part-of"
PART_OF = "gpu-scheduling"
#: A probe pod's name: its `-0` suffix is the map index the webhook resolves.
PROBE_POD = "kubectl-gpu-health-probe-0"
PROBE_IMAGE = "registry.k8s.io/pause:3.10"
#: Findings listed per check before "and N more".
MAX_FINDINGS = 10


@dataclasses.dataclass(frozen=True)
class Check:
    status: str
    name: str
    detail: str


async def _guard(name: str, run: Callable[[], Awaitable[list[Check]]]) -> list[Check]:
    """A check the API would not let us make is a WARN (we cannot tell), not a crash of the whole command."""
    try:
        return await run()
    except CliError as exc:
        return [Check(WARN, name, f"cannot check: {exc.message}")]
    except ApiError as exc:
        return [Check(WARN, name, f"cannot check: {api_error(exc).message}")]


async def leader(api: Api, ctx: Ctx) -> list[Check]:
    name = "scheduler-leader"
    ref = f"{constants.LEASE_NAMESPACE}/{ctx.scheduler_name}"
    lease = await api.get_optional(LEASES, ctx.scheduler_name, constants.LEASE_NAMESPACE)
    view = views.leader_view(lease, ctx.now)
    if view is None:
        return [Check(FAIL, name, f"no Lease {ref}: no gpu-scheduler runs with leader election")]
    if not view.holder:
        return [Check(FAIL, name, f"Lease {ref} is released: no leader")]
    if not view.current:
        return [Check(FAIL, name, f"Lease {ref}: {view.text()}, longer ago than its lease duration")]
    return [Check(OK, name, f"Lease {ref} held by {view.text()}")]


def probe_pod(scheduler_name: str, node: str) -> JSON:
    container = {
        "name": "probe",
        "image": PROBE_IMAGE,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 65535,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": PROBE_POD, "annotations": {constants.MAP_ANNOTATION: f"0={node}:0"}},
        "spec": {
            "schedulerName": scheduler_name,
            "automountServiceAccountToken": False,
            "restartPolicy": "Never",
            "containers": [container],
        },
    }


async def webhook(api: Api, ctx: Ctx, node: str) -> list[Check]:
    name = "webhook"
    namespace = ctx.namespace
    try:
        pod = await api.create(PODS, probe_pod(ctx.scheduler_name, node), namespace, dry_run=True)
    except ApiError as exc:
        return [Check(FAIL, name, f"a dry-run map pod in namespace {namespace} was refused: {exc.message}")]
    values = [
        [e.get("value") for e in c.get("env") or [] if e.get("name") == constants.CUDA_ENV]
        for c in (pod.get("spec") or {}).get("containers") or []
    ]
    if values and all(v == ["0"] for v in values):
        return [Check(OK, name, f"a dry-run map pod in namespace {namespace} got {constants.CUDA_ENV}=0")]
    return [
        Check(
            FAIL,
            name,
            f"a dry-run map pod in namespace {namespace} came back with {constants.CUDA_ENV} {values} instead of "
            "['0']: is the MutatingWebhookConfiguration registered?",
        )
    ]


def inventories(inventory_objs: list[JSON], nodes: list[JSON]) -> list[Check]:
    name = "inventories"
    if not inventory_objs:
        return [Check(WARN, name, "no GpuNodeStatus: no claim can be placed (is the inventory agent running?)")]
    existing = {n["metadata"]["name"] for n in nodes}
    checks = []
    read = [i for i in map(occupancy.read_inventory, inventory_objs) if i is not None]
    for inv in sorted(read, key=lambda i: i.name):
        if inv.foreign is not None:
            checks.append(
                Check(FAIL, f"inventory/{inv.name}", f"spec.nodeName is {inv.foreign!r}: ignored by the scheduler")
            )
        elif inv.name not in existing:
            checks.append(
                Check(FAIL, f"inventory/{inv.name}", f"node {inv.name} does not exist (a stale GpuNodeStatus)")
            )
    found = views.node_views(inventory_objs, nodes)
    for view in found:
        if view.unhealthy:
            ids = ",".join(str(i) for i in view.unhealthy_ids)
            checks.append(
                Check(WARN, f"inventory/{view.name}", f"{view.unhealthy} of {view.total} GPUs unhealthy: {ids}")
            )
    if not checks:
        total = sum(view.total for view in found)
        checks.append(Check(OK, name, f"{len(inventory_objs)} nodes, {total} GPUs, all healthy, every node exists"))
    return checks


def _ready(res: Resource, obj: JSON) -> tuple[int, int]:
    status = obj.get("status") or {}
    if res is DAEMONSETS:
        return int(status.get("numberReady") or 0), int(status.get("desiredNumberScheduled") or 0)
    spec_replicas = (obj.get("spec") or {}).get("replicas")
    return int(status.get("readyReplicas") or 0), int(1 if spec_replicas is None else spec_replicas)


async def workloads(api: Api) -> list[Check]:
    selector = f"{PART_OF_LABEL}={PART_OF}"
    found = await asyncio.gather(*(api.list(res, None, labelSelector=selector) for res in (DEPLOYMENTS, DAEMONSETS)))
    checks = []
    for res, objs in zip((DEPLOYMENTS, DAEMONSETS), found, strict=True):
        for obj in sorted(objs, key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"])):
            ready, wanted = _ready(res, obj)
            ref = f"{res.kind.lower()}/{obj['metadata']['namespace']}/{obj['metadata']['name']}"
            checks.append(Check(OK if ready >= wanted else FAIL, ref, f"{ready}/{wanted} ready"))
    if not checks:
        return [Check(OK, "chart-workloads", f"not deployed by the chart here (no Deployment or DaemonSet {selector})")]
    return checks


def occupancy_checks(inventory_objs: list[JSON], lease_objs: list[JSON], pods: list[JSON]) -> list[Check]:
    """The findings of the occupancy model (the board's flags) on these objects, one check each: those about the
    GPU Leases and the allocations as `gpu-leases`, the others as `inventory/<node>`. Left out: foreign-inventory
    (`inventories` says it) and in-use-by-out-of-step (the agent's inUseBy is a copy that lags by up to its period,
    a warning on the board)."""
    out = []
    for finding in views.findings(inventory_objs, lease_objs, pods):
        if finding.kind in ("foreign-inventory", "in-use-by-out-of-step"):
            continue
        status = FAIL if finding.severity == "error" else WARN
        name = "gpu-leases" if finding.lease_finding else f"inventory/{finding.node}"
        out.append(Check(status, name, views.finding_text(finding)))
    return out


async def leases(api: Api, ctx: Ctx, settle: float) -> list[Check]:
    name = "gpu-leases"

    async def findings() -> tuple[list[Check], int, int]:
        inventory_objs, lease_objs, pods = await asyncio.gather(
            api.list(GPU_NODE_STATUSES),
            api.list(LEASES, constants.LEASE_NAMESPACE, labelSelector=constants.GPU_LEASE_SELECTOR),
            api.list(PODS, None, fieldSelector=f"spec.schedulerName={ctx.scheduler_name}"),
        )
        claim_pods = sum(
            1
            for p in map(occupancy.read_pod, pods)
            if p is not None and p.hold is not None and p.hold.source == "claim"
        )
        return occupancy_checks(inventory_objs, lease_objs, pods), len(lease_objs), claim_pods

    found, count, claim_pods = await findings()
    deadline = time.monotonic() + settle
    while found and time.monotonic() < deadline:
        await asyncio.sleep(1)
        again, count, claim_pods = await findings()
        found = [f for f in again if f in found]  # only what is still there
    others = [c for c in found if c.name != name]  # about the inventories (the kubelet's assignment, unknown GPUs)
    leased = [c for c in found if c.name == name]
    if not leased:
        agree = f"{count} GPU Leases agree with the allocations of {claim_pods} bound claim pods"
        return [*others, Check(OK, name, agree)]
    shown = [*others, *leased[:MAX_FINDINGS]]
    if len(leased) > MAX_FINDINGS:
        shown.append(Check(FAIL, name, f"and {len(leased) - MAX_FINDINGS} more"))
    return shown


async def run(api: Api, ctx: Ctx) -> int:
    inventory_objs, nodes = await asyncio.gather(api.list(GPU_NODE_STATUSES), api.list(NODES))
    read = [i for i in map(occupancy.read_inventory, inventory_objs) if i is not None and i.foreign is None]
    probe_node = next((i.name for i in read), "probe-node")
    results = await asyncio.gather(
        _guard("scheduler-leader", lambda: leader(api, ctx)),
        _guard("webhook", lambda: webhook(api, ctx, probe_node)),
        _guard("chart-workloads", lambda: workloads(api)),
        _guard("gpu-leases", lambda: leases(api, ctx, ctx.args.settle)),
    )
    checks = [*results[0], *results[1], *inventories(inventory_objs, nodes), *results[2], *results[3]]
    failed = any(c.status == FAIL for c in checks)
    if ctx.output in ("json", "yaml"):
        doc = {
            "healthy": not failed,
            "checks": [{"status": c.status, "check": c.name, "detail": c.detail} for c in checks],
        }
        ctx.write(dump(doc, ctx.output))
    else:
        rows = [[ctx.paint(c.status, STATE_STYLES[c.status]), c.name, c.detail] for c in checks]
        ctx.lines(table(["STATUS", "CHECK", "DETAIL"], rows, headers_shown=False))
    return 1 if failed else 0
