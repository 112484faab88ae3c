"""The benchmark's workloads as plain objects, the same pods for every contender. Pure: no client, no I/O.

W1, the take-home at scale: groups of `group_size` pods that share one `gpu-scheduling-map` (as the replicas of
one StatefulSet do), each pod pinned by its map entry to one node and one GPU. Pod p of the run goes to node
p mod N, GPU p div N mod 8, so every node gets the same share. How a contender is told that placement differs:
  - gpu-scheduler reads the map annotation;
  - the ceiling binder's pods carry the map too, and the node of their entry, worked out here, as a plain
    annotation (CEILING_NODE_ANNOTATION): the binder reads one value and parses nothing;
  - kube-scheduler gets the native form, required node affinity on kubernetes.io/hostname plus a request of
    `nvidia.com/gpu: 1` (every W1 pod carries that request, so the pods differ only in how they are pinned).

W2, GPU claims: claims of 1, 2, 4 and 8 GPUs, largest first, sized to fill `fill` of the cluster's GPUs.
Largest-first powers of two always fit while capacity lasts (every node's free count stays a multiple of the
next size), so every contender can place every pod. The same request reaches each contender in its own API
(`ClaimApi`):
  - `gpuclaim`: one GpuClaim per pod, named by the pod's claim annotation (gpu-scheduler);
  - `extended`: the pod asks `nvidia.com/gpu: <n>` (kube-scheduler, extended resources);
  - `dra`: one ResourceClaim per pod asking `exactly` n devices of the bench's DeviceClass, referenced from the
    pod's `spec.resourceClaims` and its container's `resources.claims` (kube-scheduler, Dynamic Resource
    Allocation, `resource.k8s.io/v1`).
What the scheduler needs to know of the GPUs comes in the same three forms, all made from the one simulated
inventory (`gpu_scheduling.agent.inventory.simulated_status`): the GpuNodeStatus of every node
(`gpuclaim_inventory`), the nodes' `nvidia.com/gpu` capacity (GPUS_PER_NODE), one ResourceSlice per node
(`dra_inventory`).

W3, gangs: groups of pods placed whole or not at all, each member asking for a whole node (8 GPUs), gangs of 2, 4
and 8 members in turn until `fill` of the nodes is asked for (`w3_sizes`). Each contender gets the gang in its own
API (`gang_pods`):
  - `gpuclaim`: one GpuClaim of 8 GPUs per gang with `spec.gangRef` naming the gang, and each member's pod names
    that claim and states the gang's size (`gpu.scheduling/gang-min-members`) (gpu-scheduler);
  - `extended`: Kubernetes' own gang API (`scheduling.k8s.io/v1beta1`, 1.37 on): one PodGroup per gang with
    `spec.schedulingPolicy.gang.minCount` the gang's size, and each member's pod asks `nvidia.com/gpu: 8` and joins
    it with `spec.schedulingGroup.podGroupName` (kube-scheduler, whose GangScheduling plugin holds a gang until
    minCount members exist and decides them in one pod-group cycle). W3 asks for no topology domain, so the
    PodGroups carry no topology constraint (`spec.schedulingConstraints`), as gpu-scheduler's gangs carry no
    `gpu.scheduling/gang-topology`.
Member m of gang g is `w3-g<g>-<size>x-<m>`: `gang_of` reads the gang back from the name, whatever the contender.

W4, W1 with a zone spread constraint: W1's pods, pinned the same way for each contender (the map for gpu-scheduler,
required node affinity for kube-scheduler, `nvidia.com/gpu: 1` for both), each also carrying the label W4_LABEL,
shared by the whole run, and one `topologySpreadConstraints` entry (`spread_constraint`): `maxSkew` M over
ZONE_LABEL, `whenUnsatisfiable: DoNotSchedule`, that label as its selector, `nodeAffinityPolicy: Ignore`. Ignore,
because kube-scheduler's pin is required node affinity, and the default policy (Honor) would count only the nodes
that affinity admits: its one node, so one domain, and the constraint would never compare zones; with Ignore both
schedulers count every zone. The nodes are in ZONES zones, node i in zone i mod ZONES (`zone`: the one assignment
the plane's nodes, the checks and the board's benchmark use); W1's placement is even over them. The ceiling takes
no part (it judges nothing). What W4 measures is the cost of judging the constraint for every pod (both schedulers
count the matching pods of every zone in PreFilter, then compare on the pod's node in Filter), side by side and
against the same contender's W1, not what refusing pods costs. So M is chosen to refuse none in steady state
(`w4_max_skew`), the sum of:
  - `w1_order_skew`: the largest zone skew of any prefix of W1's order, what the pods reach if they are placed one
    by one in the order they are created: 1 when the nodes are a multiple of ZONES (pod p's zone is then p mod
    ZONES), more otherwise (the smoke's 10 nodes: zones of 3, 3, 2 and 2 nodes, 4 at the end of its 40 pods);
  - the pods of one zone among the creates kept in flight, in_flight / ZONES (16 at the benchmark's 64): the pods
    arrive concurrently, so a scheduler sees them in the order their creates complete, not in W1's, and a zone
    whose creates are still in flight lags the others by about that many at most (simulated: each create
    completing up to 64 pods late, in any order, the skew of 5000 pods placed in that order stayed within 12).
So M is 17 at the benchmark's sizes (200 or 1000 nodes) and 20 in the smoke. A tight skew (1 or 2) would have both
schedulers refuse pods that are merely early, write why, and retry them after a backoff: the run would measure
refusals and retries, not the constraint, and the cost of judging it does not depend on M. The run's checks hold
every zone's count within M at the end, and the report shows the refusals written (PodScheduled=False).

Storm, GPUs exhausted: one 8-GPU claim pod per node takes every GPU first (the fill), then `pods` 1-GPU claim
pods arrive that cannot be placed and wait; what the waiting costs is the measure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from gpu_scheduling import constants
from gpu_scheduling.agent.inventory import simulated_status
from gpu_scheduling.claims import objects
from gpu_scheduling.kube import paths

GPUS_PER_NODE: int = simulated_status()["total"]
"""GPUs of every node: those of the simulated inventory."""
IMAGE = "registry.invalid/gpu-scheduler-check:bench"  # never pulled: kwok runs no containers
CEILING_SCHEDULER = "ceiling-binder"
CEILING_NODE_ANNOTATION = "gpu-bench/node"
"""The node a ceiling pod is bound to, as a plain node name (the node of its map entry): `loadgen bind
-node-annotation` reads it."""
KUBE_SCHEDULER = "default-scheduler"
W2_MIX = ((8, 0.10), (4, 0.15), (2, 0.25), (1, 0.50))
"""GPUs per claim and the share of GPUs (not of claims) each size takes in W2."""

ClaimApi = Literal["gpuclaim", "extended", "dra"]
GPUCLAIM: ClaimApi = "gpuclaim"
EXTENDED: ClaimApi = "extended"
DRA: ClaimApi = "dra"

DRA_DRIVER = "gpu.bench.example"
"""The fictitious DRA driver whose ResourceSlices the benchmark publishes (no kubelet plugin: kwok runs no pods)."""
DRA_DEVICE_CLASS = "bench-gpu"
DRA_API = "resource.k8s.io/v1"
DRA_REQUEST = "gpus"
"""The name of the one request in every ResourceClaim, and of the pod's claim entry."""
DRA_ISLAND = f"{DRA_DRIVER}/island"
"""The fully qualified attribute a `matchAttribute` constraint keeps equal: the NVLink island."""
DRA_KINDS = {"DeviceClass": "deviceclasses", "ResourceSlice": "resourceslices", "ResourceClaim": "resourceclaims"}
"""The DRA kinds the benchmark creates and their resources."""


def dra_path(resource: str = "", namespace: str | None = None) -> str:
    """The API path of a DRA resource (in `namespace`), or of the DRA API itself."""
    return f"/apis/{DRA_API}" + (f"/namespaces/{namespace}" if namespace else "") + (f"/{resource}" if resource else "")


def collection_path(obj: dict[str, Any]) -> str:
    """Where the benchmark creates `obj`: the API path of its kind's collection, in its namespace."""
    kind, namespace = obj["kind"], obj["metadata"].get("namespace")
    if kind == "Pod":
        return paths.pods(namespace)
    if kind == constants.GPU_CLAIM_KIND:
        return paths.gpu_claims(namespace)
    if kind == "Node":
        return paths.NODES
    if kind in DRA_KINDS:
        return dra_path(DRA_KINDS[kind], namespace)
    if kind == constants.POD_GROUP_KIND:
        return paths.pod_groups(namespace)
    raise ValueError(f"the benchmark creates no {kind}")


def node_name(i: int) -> str:
    return f"node{i + 1}"


ZONE_LABEL = "topology.kubernetes.io/zone"
ZONES = 4
"""Zones of the scheduler benchmark's nodes (W4 spreads over them; W1-W3 read no zone)."""


def zone(i: int, zones: int = ZONES) -> str:
    """The zone of node i (`node_name(i)`): i mod `zones`."""
    return f"zone-{i % zones:02d}"


def node_zones(nodes: int, zones: int = ZONES) -> dict[str, str]:
    """Node name -> its zone, for nodes 0..nodes-1."""
    return {node_name(i): zone(i, zones) for i in range(nodes)}


@dataclasses.dataclass(frozen=True)
class Placement:
    pod: str
    index: int
    node: str
    gpus: tuple[int, ...]


def w1_placements(pods: int, nodes: int, group_size: int, prefix: str = "w1") -> list[list[Placement]]:
    """Groups of placements; pod p of the run is `<prefix>-g<group>-<index>` on node p mod N, GPU p div N mod 8."""
    groups: list[list[Placement]] = []
    for p in range(pods):
        group, index = divmod(p, group_size)
        if index == 0:
            groups.append([])
        groups[-1].append(
            Placement(f"{prefix}-g{group:03d}-{index}", index, node_name(p % nodes), ((p // nodes) % GPUS_PER_NODE,))
        )
    return groups


def gpu_map(group: list[Placement]) -> str:
    return "\n".join(f"{pl.index}={pl.node}:{','.join(map(str, pl.gpus))}" for pl in group)


def _pod(
    namespace: str,
    name: str,
    scheduler: str,
    gpus: int | None,
    *,
    annotations: dict[str, str] | None = None,
    affinity_node: str | None = None,
    labels: dict[str, str] | None = None,
    resource_claim: str | None = None,
    env: dict[str, str] | None = None,
    pod_group: str | None = None,
) -> dict[str, Any]:
    """A pod asking `gpus` nvidia.com/gpu (None: no extended resource), or the ResourceClaim `resource_claim`; a
    member of the PodGroup `pod_group` when given."""
    container: dict[str, Any] = {"name": "main", "image": IMAGE, "resources": {}}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    if gpus is not None:
        container["resources"]["limits"] = {"nvidia.com/gpu": str(gpus)}
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "terminationGracePeriodSeconds": 0,
        "containers": [container],
    }
    if pod_group:
        spec["schedulingGroup"] = {"podGroupName": pod_group}
    if resource_claim:
        spec["resourceClaims"] = [{"name": DRA_REQUEST, "resourceClaimName": resource_claim}]
        container["resources"]["claims"] = [{"name": DRA_REQUEST}]
    if affinity_node:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "kubernetes.io/hostname", "operator": "In", "values": [affinity_node]}
                            ]
                        },
                    ]
                }
            }
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app": "bench", **(labels or {})},
            "annotations": annotations or {},
        },
        "spec": spec,
    }


def w1_pods(
    contender_scheduler: str,
    namespace: str,
    pods: int,
    nodes: int,
    group_size: int = 100,
    cuda_env: bool = False,
    prefix: str = "w1",
) -> list[dict[str, Any]]:
    """The W1 pods for one contender: map-pinned for gpu-scheduler and the ceiling (whose pods also name their
    node in CEILING_NODE_ANNOTATION), affinity-pinned for kube-scheduler. `cuda_env`: the map pods carry the
    CUDA_VISIBLE_DEVICES the webhook would have set (for a contender without the webhook: gpu-scheduler binds no
    map pod that lacks it). `prefix`: the pods' names (`w1_placements`)."""
    out = []
    for group in w1_placements(pods, nodes, group_size, prefix):
        text = gpu_map(group)
        for pl in group:
            if contender_scheduler == KUBE_SCHEDULER:
                out.append(_pod(namespace, pl.pod, KUBE_SCHEDULER, len(pl.gpus), affinity_node=pl.node))
                continue
            annotations = {constants.MAP_ANNOTATION: text}
            if contender_scheduler == CEILING_SCHEDULER:
                annotations[CEILING_NODE_ANNOTATION] = pl.node
            env = {constants.CUDA_ENV: ",".join(map(str, pl.gpus))} if cuda_env else None
            out.append(_pod(namespace, pl.pod, contender_scheduler, len(pl.gpus), annotations=annotations, env=env))
    return out


W4_PREFIX = "w4"
W4_LABEL = {"gpu-bench/spread": "w4"}
"""The label every W4 pod carries and its spread constraint selects: the whole run's pods are one group."""


def zone_skew(counts: Mapping[str, int], zones: Iterable[str]) -> int:
    """The most pods in any of `zones` minus the fewest (a zone absent from `counts` has none)."""
    n = [counts.get(z, 0) for z in zones]
    return max(n) - min(n) if n else 0


def w1_order_skew(pods: int, nodes: int, zones: int = ZONES) -> int:
    """The largest zone skew of any prefix of W1's order (pod p on node p mod `nodes`): what its pods reach when they
    are placed one by one in the order they are created."""
    counts = dict.fromkeys({zone(i, zones) for i in range(nodes)}, 0)
    worst = 0
    for p in range(pods):
        counts[zone(p % nodes, zones)] += 1
        worst = max(worst, max(counts.values()) - min(counts.values()))
    return worst


def w4_max_skew(pods: int, nodes: int, in_flight: int, zones: int = ZONES) -> int:
    """W4's maxSkew: the skew W1's own order reaches, plus the pods of one zone among `in_flight` concurrent creates
    (see the module's docstring)."""
    return w1_order_skew(pods, nodes, zones) + -(-in_flight // zones)


def spread_constraint(max_skew: int) -> dict[str, Any]:
    """W4's topology spread constraint: at most `max_skew` more W4 pods in one zone than in the emptiest, counted over
    every zone whatever the pod's node affinity (`nodeAffinityPolicy: Ignore`)."""
    return {
        "maxSkew": max_skew,
        "topologyKey": ZONE_LABEL,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": dict(W4_LABEL)},
        "nodeAffinityPolicy": "Ignore",
    }


def w4_pods(
    contender_scheduler: str,
    namespace: str,
    pods: int,
    nodes: int,
    group_size: int,
    max_skew: int,
    cuda_env: bool = False,
) -> list[dict[str, Any]]:
    """The W4 pods for one contender: its W1 pods (named `w4-...`), each with W4_LABEL and the spread constraint."""
    out = w1_pods(contender_scheduler, namespace, pods, nodes, group_size, cuda_env, prefix=W4_PREFIX)
    for pod in out:
        pod["metadata"]["labels"].update(W4_LABEL)
        pod["spec"]["topologySpreadConstraints"] = [spread_constraint(max_skew)]
    return out


def w2_sizes(claims: int, nodes: int, fill: float = 0.9) -> list[int]:
    """GPU counts of the W2 claims, largest first: each size takes its W2_MIX share of `fill` of all GPUs, and
    the 1-GPU claims make up the rest of `claims` as far as capacity allows."""
    budget = int(nodes * GPUS_PER_NODE * fill)
    sizes: list[int] = []
    for size, share in W2_MIX[:-1]:
        sizes += [size] * int(budget * share / size)
    ones = min(claims - len(sizes), budget - sum(sizes))
    sizes += [1] * max(0, ones)
    return sizes[:claims]


def gpuclaim_spec(gpus: int) -> dict[str, Any]:
    """What every benchmark claim asks, in GpuClaim form: `gpus` GPUs, contiguous policy, topology left to its
    default (Ignore)."""
    return {"devices": {"count": gpus, "policy": "contiguous"}}


def gpuclaim(name: str, namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    body = objects.claim_body(name, spec)
    body["metadata"]["namespace"] = namespace
    return body


def resource_claim(name: str, namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    """The DRA form of the GpuClaim `spec`: exactly `devices.count` devices of the bench's DeviceClass; topology
    `Required` becomes a `matchAttribute` constraint on the island (and `minBandwidthGBps` a CEL selector on the
    bandwidth attribute). What DRA has no words for is left out and costs neither contender anything in the
    benchmark: the allocation policy (contiguous/spread ids), `Preferred` topology (DRA has no preferences)."""
    exactly: dict[str, Any] = {
        "deviceClassName": DRA_DEVICE_CLASS,
        "allocationMode": "ExactCount",
        "count": spec["devices"]["count"],
    }
    devices: dict[str, Any] = {"requests": [{"name": DRA_REQUEST, "exactly": exactly}]}
    topology = spec.get("topology") or {}
    if topology.get("mode") == "Required":
        devices["constraints"] = [{"requests": [DRA_REQUEST], "matchAttribute": DRA_ISLAND}]
        if topology.get("minBandwidthGBps"):
            exactly["selectors"] = [
                {
                    "cel": {
                        "expression": f'device.attributes["{DRA_DRIVER}"].bandwidthGBps >= '
                        f"{int(topology['minBandwidthGBps'])}"
                    }
                }
            ]
    return {
        "apiVersion": DRA_API,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": devices},
    }


def claim_pods(
    api: ClaimApi, scheduler: str, namespace: str, sizes: list[int], prefix: str = "w2", spec: Any = gpuclaim_spec
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(claims, pods): one pod per size, named `<prefix>-<i>-<n>gpu`, asking its GPUs in `api`, and the claims
    to create before the pods (none for `extended`). `spec(n)` is the GpuClaim spec every form is made from."""
    claims: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    for i, gpus in enumerate(sizes):
        name = f"{prefix}-{i:05d}-{gpus}gpu"
        if api == EXTENDED:
            pods.append(_pod(namespace, name, scheduler, gpus))
        elif api == GPUCLAIM:
            claims.append(gpuclaim(name, namespace, spec(gpus)))
            pods.append(_pod(namespace, name, scheduler, gpus, annotations={constants.CLAIM_ANNOTATION: name}))
        elif api == DRA:
            claims.append(resource_claim(name, namespace, spec(gpus)))
            pods.append(_pod(namespace, name, scheduler, None, resource_claim=name))
        else:
            raise ValueError(f"unknown claim API {api!r}")
    return claims, pods


W3_SIZES = (2, 4, 8)
"""Members per W3 gang, in turn."""
W3_PREFIX = "w3"


def w3_sizes(nodes: int, fill: float = 0.9) -> list[int]:
    """Members of each W3 gang: 2, 4, 8, 2, 4, 8, ... while their members (one node each) stay within `fill` of
    the nodes; the first size that does not fit ends the list."""
    budget = int(nodes * fill)
    sizes: list[int] = []
    while True:
        size = W3_SIZES[len(sizes) % len(W3_SIZES)]
        if sum(sizes) + size > budget:
            return sizes
        sizes.append(size)


def gang_name(index: int, size: int) -> str:
    return f"{W3_PREFIX}-g{index:04d}-{size}x"


def gang_of(pod_name: str) -> str | None:
    """The W3 gang a pod named by `gang_pods` belongs to (None: not a W3 member)."""
    gang, sep, member = pod_name.rpartition("-")
    return gang if sep and gang.startswith(f"{W3_PREFIX}-g") and member.isdigit() else None


POD_GROUP_SCHEDULED = "PodGroupInitiallyScheduled"
"""The condition kube-scheduler sets True on a PodGroup once it has placed the gang."""


def pod_group(name: str, namespace: str, min_count: int) -> dict[str, Any]:
    """A PodGroup placed whole or not at all once `min_count` of its pods exist: a gang. No topology constraint
    (`spec.schedulingConstraints`): no W3 gang asks for a domain."""
    return {
        "apiVersion": constants.POD_GROUP_API_VERSION,
        "kind": constants.POD_GROUP_KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }


def gang_pods(
    api: ClaimApi, scheduler: str, namespace: str, sizes: list[int], gpus: int = GPUS_PER_NODE
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(gang objects, pods) of the W3 gangs of `sizes` members, each member asking for `gpus` GPUs (a whole node).
    `gpuclaim`: one GpuClaim per gang with `spec.gangRef`, every member naming it with the gang's size;
    `extended`: one PodGroup per gang (minCount: its size), every member asking `nvidia.com/gpu` and joining it.
    The gang objects are created before the pods. Members of a gang are consecutive."""
    objs: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    for g, size in enumerate(sizes):
        gang = gang_name(g, size)
        annotations: dict[str, str] = {}
        group = None
        if api == GPUCLAIM:
            objs.append(gpuclaim(gang, namespace, {**gpuclaim_spec(gpus), "gangRef": gang}))
            annotations = {constants.CLAIM_ANNOTATION: gang, constants.GANG_MIN_MEMBERS_ANNOTATION: str(size)}
        elif api == EXTENDED:
            objs.append(pod_group(gang, namespace, size))
            group = gang
        else:
            raise ValueError(f"W3 has no {api!r} form")
        pods.extend(
            _pod(namespace, f"{gang}-{m}", scheduler, gpus, annotations=dict(annotations), pod_group=group)
            for m in range(size)
        )
    return objs, pods


def member_leases(pod: Mapping[str, Any]) -> list[str]:
    """The GPU Leases a bound gpu-scheduler pod holds: one per GPU id it carries, on its node."""
    ids = (pod["metadata"].get("annotations") or {}).get(constants.GPU_IDS_ANNOTATION, "")
    return [objects.lease_name(pod["spec"]["nodeName"], int(g)) for g in ids.split(",") if g.strip().isdigit()]


def pod_gpus(pod: dict[str, Any], claims: dict[str, dict[str, Any]] | None = None) -> int:
    """GPUs a benchmark pod asks: its nvidia.com/gpu limit, or the count of its ResourceClaim in `claims`."""
    limit = (pod["spec"]["containers"][0]["resources"].get("limits") or {}).get("nvidia.com/gpu")
    if limit is not None:
        return int(limit)
    total = 0
    for ref in pod["spec"].get("resourceClaims") or []:
        claim = (claims or {})[ref["resourceClaimName"]]
        total += sum(r["exactly"]["count"] for r in claim["spec"]["devices"]["requests"])
    return total


def storm_sizes(nodes: int, pods: int) -> tuple[list[int], list[int]]:
    """(fill, storm): one 8-GPU claim per node, which takes every GPU, then `pods` 1-GPU claims that must wait."""
    return [GPUS_PER_NODE] * nodes, [1] * pods


# ---- what the scheduler knows of the GPUs ---------------------------------------------------------------------
def gpuclaim_inventory(nodes: int) -> dict[str, dict[str, Any]]:
    """The GpuNodeStatus status of nodes 0..nodes-1, by node: the simulated inventory (what the inventory agent
    writes on real nodes), for `harness.inventory.publish`."""
    return {node_name(i): simulated_status() for i in range(nodes)}


def device_class() -> dict[str, Any]:
    """Every device of the bench's driver."""
    return {
        "apiVersion": DRA_API,
        "kind": "DeviceClass",
        "metadata": {"name": DRA_DEVICE_CLASS},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRA_DRIVER}"'}}]},
    }


def resource_slice(node: str) -> dict[str, Any]:
    """The node's GPUs as its DRA driver would publish them: one pool named after the node, in one slice, the
    devices of the simulated inventory, each with its index, NVLink island and bandwidth."""
    devices = [
        {
            "name": f"gpu-{d['id']}",
            "attributes": {
                "index": {"int": d["id"]},
                "island": {"string": d["island"]},
                "bandwidthGBps": {"int": d["bandwidthGBps"]},
            },
        }
        for d in simulated_status()["devices"]
    ]
    return {
        "apiVersion": DRA_API,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRA_DRIVER}"},
        "spec": {
            "driver": DRA_DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def dra_inventory(nodes: int) -> list[dict[str, Any]]:
    """The DeviceClass, then one ResourceSlice per node."""
    return [device_class(), *(resource_slice(node_name(i)) for i in range(nodes))]
