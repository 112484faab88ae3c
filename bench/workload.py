"""The benchmark's workloads as plain objects, the same pods for every contender. Pure: no client, no I/O.

W1, the take-home at scale: groups of `group_size` pods that share one `gpu-scheduling-map` (as the replicas of
one StatefulSet do), each pod pinned by its map entry to one node and one GPU. Pod p of the run goes to node
p mod N, GPU p div N mod 8, so every node gets the same share. How a contender is told that placement differs:
  - gpu-scheduler and the ceiling binder read the map annotation;
  - kube-scheduler gets the native form, required node affinity on kubernetes.io/hostname plus a request of
    `nvidia.com/gpu: 1` (every W1 pod carries that request, so the pods differ only in how they are pinned).

W2, GpuClaims: claims of 1, 2, 4 and 8 GPUs, largest first, sized to fill `fill` of the cluster's GPUs. The
gpu-scheduler gets one GpuClaim per pod; kube-scheduler gets the same pods asking `nvidia.com/gpu: <n>`.
Largest-first powers of two always fit while capacity lasts (every node's free count stays a multiple of the
next size), so both contenders can place every pod.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gpu_scheduling import constants

GPUS_PER_NODE = 8
IMAGE = "registry.invalid/gpu-scheduler-check:bench"  # never pulled: kwok runs no containers
CEILING_SCHEDULER = "ceiling-binder"
KUBE_SCHEDULER = "default-scheduler"
W2_MIX = ((8, 0.10), (4, 0.15), (2, 0.25), (1, 0.50))
"""GPUs per claim and the share of GPUs (not of claims) each size takes in W2."""


def node_name(i: int) -> str:
    return f"node{i + 1}"


@dataclasses.dataclass(frozen=True)
class Placement:
    pod: str
    index: int
    node: str
    gpus: tuple[int, ...]


def w1_placements(pods: int, nodes: int, group_size: int) -> list[list[Placement]]:
    """Groups of placements; pod p of the run is `w1-g<group>-<index>` on node p mod N, GPU p div N mod 8."""
    groups: list[list[Placement]] = []
    for p in range(pods):
        group, index = divmod(p, group_size)
        if index == 0:
            groups.append([])
        groups[-1].append(Placement(f"w1-g{group:03d}-{index}", index, node_name(p % nodes),
                                    ((p // nodes) % GPUS_PER_NODE,)))
    return groups


def gpu_map(group: list[Placement]) -> str:
    return "\n".join(f"{pl.index}={pl.node}:{','.join(map(str, pl.gpus))}" for pl in group)


def _pod(namespace: str, name: str, scheduler: str, gpus: int, *, annotations: dict[str, str] | None = None,
         affinity_node: str | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "terminationGracePeriodSeconds": 0,
        "containers": [{
            "name": "main",
            "image": IMAGE,
            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
        }],
    }
    if affinity_node:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [affinity_node]}]},
        ]}}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "bench", **(labels or {})},
                     "annotations": annotations or {}},
        "spec": spec,
    }


def w1_pods(contender_scheduler: str, namespace: str, pods: int, nodes: int, group_size: int = 100,
            ) -> list[dict[str, Any]]:
    """The W1 pods for one contender: map-pinned for gpu-scheduler and the ceiling, affinity-pinned for
    kube-scheduler."""
    out = []
    for group in w1_placements(pods, nodes, group_size):
        text = gpu_map(group)
        for pl in group:
            if contender_scheduler == KUBE_SCHEDULER:
                out.append(_pod(namespace, pl.pod, KUBE_SCHEDULER, len(pl.gpus), affinity_node=pl.node))
            else:
                out.append(_pod(namespace, pl.pod, contender_scheduler, len(pl.gpus),
                                annotations={constants.MAP_ANNOTATION: text}))
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


def w2_objects(contender_scheduler: str, namespace: str, sizes: list[int]) -> tuple[list[dict[str, Any]],
                                                                                     list[dict[str, Any]]]:
    """(claims, pods) of W2 for one contender; kube-scheduler gets no claims, only `nvidia.com/gpu` requests."""
    claims: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    for i, gpus in enumerate(sizes):
        name = f"w2-{i:05d}-{gpus}gpu"
        if contender_scheduler == KUBE_SCHEDULER:
            pods.append(_pod(namespace, name, KUBE_SCHEDULER, gpus))
            continue
        claims.append({
            "apiVersion": f"{constants.CLAIM_GROUP}/{constants.CLAIM_VERSION}",
            "kind": "GpuClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"devices": {"count": gpus, "policy": "contiguous"}},
        })
        pods.append(_pod(namespace, name, contender_scheduler, gpus,
                         annotations={constants.CLAIM_ANNOTATION: name}))
    return claims, pods


def simulated_inventory() -> dict[str, Any]:
    """One node's GpuNodeStatus status: 8 healthy GPUs in two NVLink islands (as the claim scenarios use)."""
    devices = [{"id": i, "health": "Healthy", "island": f"nvlink-group-{i // 4}",
                "bandwidthGBps": 600 if i < 4 else 64, "inUseBy": []} for i in range(GPUS_PER_NODE)]
    return {"total": GPUS_PER_NODE, "free": GPUS_PER_NODE, "unhealthy": 0, "devices": devices}
