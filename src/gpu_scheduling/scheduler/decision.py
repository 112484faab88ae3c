"""Where a pod goes, or why it cannot go anywhere. Pure: works on plain pod and node dicts, no client.

The scheduler trusts the map (that is its contract) but never binds to a node a kubelet would refuse or that
the cluster operator has fenced off: unknown, NotReady, cordoned, or tainted NoSchedule/NoExecute without a
matching toleration.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from gpu_scheduling import constants, gpumap


@dataclasses.dataclass(frozen=True)
class Bind:
    node: str
    entry: gpumap.Entry


@dataclasses.dataclass(frozen=True)
class Unschedulable:
    """The pod stays Pending. `node` is the node it waits for (None when only a pod change can help)."""

    message: str
    node: str | None = None


Decision = Bind | Unschedulable


def is_schedulable_pod(pod: Mapping[str, Any], scheduler_name: str) -> bool:
    """Unbound, not terminating, not finished, and ours."""
    spec = pod.get("spec") or {}
    meta = pod.get("metadata") or {}
    phase = (pod.get("status") or {}).get("phase")
    return (
        spec.get("schedulerName") == scheduler_name
        and not spec.get("nodeName")
        and not meta.get("deletionTimestamp")
        and phase not in ("Succeeded", "Failed")
    )


def is_finished(pod: Mapping[str, Any]) -> bool:
    """Succeeded or Failed: the pod's containers will not run again, so it holds no GPU."""
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def toleration_matches(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Kubernetes' rule: effect empty or equal; key empty with Exists matches all; Equal compares values."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    operator = toleration.get("operator") or "Equal"
    key = toleration.get("key") or ""
    if not key:
        return operator == "Exists"
    if key != taint.get("key"):
        return False
    if operator == "Exists":
        return True
    return (toleration.get("value") or "") == (taint.get("value") or "")


def node_problem(node: Mapping[str, Any], tolerations: list[Mapping[str, Any]]) -> str | None:
    """Why a pod with `tolerations` cannot run on `node` now, or None when it can."""
    name = node["metadata"]["name"]
    conditions = {c.get("type"): c for c in (node.get("status") or {}).get("conditions") or []}
    ready = conditions.get("Ready")
    if ready is None or ready.get("status") != "True":
        why = f" ({ready.get('reason')})" if ready and ready.get("reason") else ""
        return f"node {name} is not Ready{why}"
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return f"node {name} is cordoned (spec.unschedulable=true)"
    for taint in spec.get("taints") or []:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(toleration_matches(t, taint) for t in tolerations):
            value = f"={taint['value']}" if taint.get("value") else ""
            return f"node {name} has taint {taint.get('key')}{value}:{taint.get('effect')} that the pod does not tolerate"
    return None


def is_claim_pod(pod: Mapping[str, Any]) -> bool:
    return constants.CLAIM_ANNOTATION in ((pod.get("metadata") or {}).get("annotations") or {})


def decide(pod: Mapping[str, Any], nodes: Mapping[str, Mapping[str, Any]]) -> Decision:
    """Decide for one schedulable map pod given the current nodes (name -> node). Claim pods go through
    scheduler.claims instead."""
    meta = pod.get("metadata") or {}
    try:
        entry = gpumap.entry_for_pod(meta)
    except gpumap.PodMapError as exc:
        return Unschedulable(str(exc))
    if entry is None:
        return Unschedulable(
            f"pod has no {constants.MAP_ANNOTATION} annotation; the gpu-scheduler places pods only by their map entry"
        )
    node = nodes.get(entry.node)
    if node is None:
        return Unschedulable(
            f"node {entry.node} from map entry {entry.index}={entry.node}:{entry.cuda_visible_devices} does not exist",
            node=entry.node,
        )
    problem = node_problem(node, (pod.get("spec") or {}).get("tolerations") or [])
    if problem:
        return Unschedulable(f"{problem} (map entry {entry.index})", node=entry.node)
    return Bind(entry.node, entry)
