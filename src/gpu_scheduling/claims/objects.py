"""Translate GpuClaim, GpuNodeStatus and Lease objects (plain dicts) to and from the allocator's data, and build
them. Pure."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from gpu_scheduling import constants, gpumap, names
from gpu_scheduling.claims.allocator import Device, Node, Request, Strategy
from gpu_scheduling.claims.ledger import Hold, LeaseRecord

_NAME_MAX = names.MAX_SUBDOMAIN  # a Lease name is a DNS subdomain
_LABEL_MAX = names.MAX_LABEL


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def node_label_value(node: str) -> str:
    """A valid label value naming `node` (node names are DNS subdomains of up to 253 characters)."""
    if len(node) <= _LABEL_MAX:
        return node
    return f"{node[: _LABEL_MAX - 11].rstrip('.-')}-{_digest(node)}"


def node_lease_selector(node: str) -> str:
    """The label selector of the GPU Leases of `node`."""
    return f"{constants.GPU_LEASE_SELECTOR},{constants.LEASE_NODE_LABEL}={node_label_value(node)}"


def lease_name(node: str, gpu: int) -> str:
    """`gpu-<node>-<id>` (the reference's contract); a node name too long for that is shortened with a hash."""
    name = f"gpu-{node}-{gpu}"
    if len(name) <= _NAME_MAX:
        return name
    keep = _NAME_MAX - len(f"gpu--{_digest(node)}-{gpu}")
    return f"gpu-{node[:keep].rstrip('.-')}-{_digest(node)}-{gpu}"


def request_from_claim(claim: Mapping[str, Any], default_strategy: Strategy = "BestFit") -> Request:
    """The allocator's request for `claim`; its strategy is the claim's `spec.strategy`, else `default_strategy`
    (the policy's, else the scheduler's flag)."""
    spec = claim.get("spec") or {}
    strategy = spec.get("strategy") or default_strategy
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
        strategy=strategy,
        min_memory_mib=int(devices.get("minMemoryMiB", 0)),
    )


def claim_body(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A GpuClaim named `name` asking for `spec` (devices, topology, selector; see docs/claims.md)."""
    return {
        "apiVersion": constants.API_VERSION,
        "kind": constants.GPU_CLAIM_KIND,
        "metadata": {"name": name},
        "spec": spec,
    }


def node_status_body(node: str) -> dict[str, Any]:
    """The GpuNodeStatus of `node`, without its status (written through the status subresource)."""
    return {
        "apiVersion": constants.API_VERSION,
        "kind": constants.GPU_NODE_STATUS_KIND,
        "metadata": {"name": node},
        "spec": {"nodeName": node},
    }


def inventory_node(status_obj: Mapping[str, Any]) -> str | None:
    """The node a GpuNodeStatus describes: its own name. None when its `spec.nodeName` names another node: such an
    inventory is ignored, never trusted, since whoever may write one node's inventory must not be able to offer GPUs
    on another (the agent's admission policy ties the name to its own node; this is the scheduler's half)."""
    name = status_obj["metadata"]["name"]
    spec_node = (status_obj.get("spec") or {}).get("nodeName")
    return name if spec_node in (None, name) else None


def node_from_status(status_obj: Mapping[str, Any], labels: Mapping[str, str]) -> Node:
    status = status_obj.get("status") or {}
    devices = tuple(
        Device(
            int(d["id"]),
            d.get("island", "default"),
            int(d.get("bandwidthGBps", 0)),
            d.get("health", "Healthy") == "Healthy",
            int(d.get("memoryTotalMiB", 0)),
            int(d.get("memoryUsedMiB", 0)),
            int(d["utilizationPercent"]) if d.get("utilizationPercent") is not None else None,
        )
        for d in sorted(status.get("devices") or [], key=lambda d: d["id"])
    )
    return Node(status_obj["metadata"]["name"], devices, dict(labels))


def lease_holders(lease: Mapping[str, Any]) -> list[str]:
    annotations = lease["metadata"].get("annotations") or {}
    if constants.LEASE_HOLDERS_ANNOTATION in annotations:
        return [h for h in annotations[constants.LEASE_HOLDERS_ANNOTATION].split(",") if h]
    holder = (lease.get("spec") or {}).get("holderIdentity")
    return [holder] if holder else []


def lease_record(lease: Mapping[str, Any]) -> LeaseRecord | None:
    """The ledger's view of a GPU Lease, or None when it is not one (labels missing or malformed)."""
    meta = lease["metadata"]
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    node = annotations.get(constants.LEASE_NODE_ANNOTATION) or labels.get(constants.LEASE_NODE_LABEL)
    gpu = labels.get(constants.LEASE_GPU_LABEL, "")
    if not node or not (gpu.isascii() and gpu.isdigit()) or len(gpu) > 6:
        return None
    holders = lease_holders(lease)
    pods = annotations.get(constants.LEASE_HOLDER_PODS_ANNOTATION, "").split(",")
    refs = {uid: pods[i] for i, uid in enumerate(holders) if i < len(pods) and pods[i]}
    return LeaseRecord(
        meta["name"],
        node,
        int(gpu),
        labels.get(constants.LEASE_EXCLUSIVITY_LABEL, "Exclusive"),
        tuple(holders),
        refs,
        meta.get("resourceVersion", ""),
    )


def lease_body(node: str, gpu: int, exclusivity: str, holders: Mapping[str, str]) -> dict[str, Any]:
    """A GPU Lease held by `holders` (pod uid -> "<namespace>/<name>")."""
    return {
        "apiVersion": constants.LEASE_API_VERSION,
        "kind": "Lease",
        "metadata": {
            "name": lease_name(node, gpu),
            "namespace": constants.LEASE_NAMESPACE,
            "labels": {
                constants.LEASE_LABEL: constants.LEASE_LABEL_VALUE,
                constants.LEASE_NODE_LABEL: node_label_value(node),
                constants.LEASE_GPU_LABEL: str(gpu),
                constants.LEASE_EXCLUSIVITY_LABEL: exclusivity,
            },
            "annotations": lease_holder_annotations(holders) | {constants.LEASE_NODE_ANNOTATION: node},
        },
        "spec": {"holderIdentity": next(iter(holders), "")},
    }


def lease_holder_annotations(holders: Mapping[str, str]) -> dict[str, str]:
    return {
        constants.LEASE_HOLDERS_ANNOTATION: ",".join(holders),
        constants.LEASE_HOLDER_PODS_ANNOTATION: ",".join(holders.values()),
    }


def allocation_annotations(hold: Hold) -> dict[str, str]:
    """The annotations the Binding of a claim pod carries onto it: what `hold_from_pod` reads back as `hold`
    (with the pod's own claim annotation and node)."""
    ids = ",".join(map(str, hold.gpu_ids))
    return {
        constants.ALLOCATED_ANNOTATION: f"{hold.node}:{ids}",
        constants.GPU_IDS_ANNOTATION: ids,
        constants.EXCLUSIVITY_ANNOTATION: hold.exclusivity,
    }


def hold_from_pod(pod: Mapping[str, Any], maps: gpumap.ParseCache | None = None) -> Hold | None:
    """What a bound pod holds, read from the pod alone: its allocation annotations (claim pods) or its map entry
    (map pods, their map parsed through `maps` when the caller keeps a cache). None when it holds no GPU (or its
    annotations cannot be read: nothing to hold then)."""
    meta = pod.get("metadata") or {}
    node = (pod.get("spec") or {}).get("nodeName")
    if not node:
        return None
    annotations = meta.get("annotations") or {}
    ref = f"{meta.get('namespace')}/{meta.get('name')}"
    allocated = annotations.get(constants.ALLOCATED_ANNOTATION)
    if allocated is not None:
        where, _, ids = allocated.rpartition(":")
        try:
            gpu_ids = tuple(int(i) for i in ids.split(",") if i) if len(ids) < 4096 else ()
        except ValueError:
            return None
        if not gpu_ids:
            return None
        return Hold(
            meta["uid"],
            ref,
            where or node,
            gpu_ids,
            annotations.get(constants.EXCLUSIVITY_ANNOTATION, "Exclusive"),
            "claim",
            (annotations.get(constants.CLAIM_ANNOTATION) or "").strip(),
            bound=True,
        )
    if constants.MAP_ANNOTATION in annotations:
        try:
            entry = gpumap.entry_for_pod(meta, maps)
        except gpumap.PodMapError:
            return None
        if entry is None or not entry.gpu_ids:
            return None
        return Hold(meta["uid"], ref, node, entry.gpu_ids, "Shared", "map", bound=True)
    return None
