"""Translate GpuClaim, GpuNodeStatus and Lease objects (plain dicts) to and from the allocator's data. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpu_scheduling import constants
from gpu_scheduling.claims.allocator import Device, Holding, Node, Request

# Labels on every GPU lease, so the scheduler can watch them with one selector and read them without parsing names.
LEASE_LABEL = "gpu.scheduling/lease"
LEASE_NODE_LABEL = "gpu.scheduling/node"
LEASE_GPU_LABEL = "gpu.scheduling/gpu"
LEASE_EXCLUSIVITY_LABEL = "gpu.scheduling/exclusivity"
# Pod UIDs sharing a Shared GPU, comma-separated (holderIdentity holds one identity only).
LEASE_HOLDERS_ANNOTATION = "gpu.scheduling/holders"
# Label the scheduler puts on every pod it allocates GPUs to, so that it can watch them to release leases.
CLAIMED_POD_LABEL = "gpu.scheduling/claimed"


# Where the GPU leases live, and the selector of one node's leases.
LEASES_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{constants.LEASE_NAMESPACE}/leases"


def node_lease_selector(node: str) -> str:
    return f"{LEASE_LABEL}=gpu,{LEASE_NODE_LABEL}={node}"


def lease_name(node: str, gpu: int) -> str:
    return f"gpu-{node}-{gpu}"


def request_from_claim(claim: Mapping[str, Any]) -> Request:
    spec = claim.get("spec") or {}
    devices = spec.get("devices") or {}
    topology = spec.get("topology") or {}
    return Request(
        count=int(devices.get("count", 1)),
        policy=devices.get("policy", "contiguous"),
        prefer_ids=tuple(int(i) for i in devices.get("preferIds") or ()),
        exclusivity=devices.get("exclusivity", "Exclusive"),
        match_labels=dict((spec.get("selector") or {}).get("matchLabels") or {}),
        topology=topology.get("mode", "Ignore"),
        min_bandwidth_gbps=int(topology.get("minBandwidthGBps", 0)),
    )


def node_from_status(status_obj: Mapping[str, Any], labels: Mapping[str, str]) -> Node:
    status = status_obj.get("status") or {}
    devices = tuple(
        Device(int(d["id"]), d.get("island", "default"), int(d.get("bandwidthGBps", 0)),
               d.get("health", "Healthy") == "Healthy")
        for d in sorted(status.get("devices") or [], key=lambda d: d["id"])
    )
    name = (status_obj.get("spec") or {}).get("nodeName") or status_obj["metadata"]["name"]
    return Node(name, devices, dict(labels))


def lease_holders(lease: Mapping[str, Any]) -> list[str]:
    annotations = lease["metadata"].get("annotations") or {}
    if LEASE_HOLDERS_ANNOTATION in annotations:
        return [h for h in annotations[LEASE_HOLDERS_ANNOTATION].split(",") if h]
    holder = (lease.get("spec") or {}).get("holderIdentity")
    return [holder] if holder else []


def holdings_from_leases(leases: Iterable[Mapping[str, Any]], except_pod: str = "") -> list[Holding]:
    """What every GPU lease holds, leaving out the holdings of pod `except_pod` (it is being re-placed)."""
    out = []
    for lease in leases:
        labels = lease["metadata"].get("labels") or {}
        holders = [h for h in lease_holders(lease) if h != except_pod]
        if not holders or LEASE_NODE_LABEL not in labels:
            continue
        out.append(Holding(labels[LEASE_NODE_LABEL], (int(labels[LEASE_GPU_LABEL]),),
                           labels.get(LEASE_EXCLUSIVITY_LABEL, "Exclusive")))
    return out


def lease_body(node: str, gpu: int, pod_uid: str, exclusivity: str) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": lease_name(node, gpu),
            "namespace": constants.LEASE_NAMESPACE,
            "labels": {LEASE_LABEL: "gpu", LEASE_NODE_LABEL: node, LEASE_GPU_LABEL: str(gpu),
                       LEASE_EXCLUSIVITY_LABEL: exclusivity},
            "annotations": {LEASE_HOLDERS_ANNOTATION: pod_uid},
        },
        "spec": {"holderIdentity": pod_uid},
    }
