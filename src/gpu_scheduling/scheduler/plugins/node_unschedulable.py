"""NodeUnschedulable: a cordoned node (spec.unschedulable) takes only the pods that tolerate the cordon's taint, as
DaemonSet pods do."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_scheduling.scheduler import framework
from gpu_scheduling.scheduler.framework import Reason, Snapshot
from gpu_scheduling.scheduler.plugins.taint_toleration import toleration_matches, tolerations

CORDON_TAINT: Mapping[str, str] = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
"""A pod that tolerates this taint may go to a cordoned node."""


class NodeUnschedulable(framework.Plugin):
    name = "NodeUnschedulable"
    wakes_on = frozenset({framework.NODE})

    def pre_filter(self, pod: Mapping[str, Any], snap: Snapshot) -> Any:
        try:
            listed = tolerations(pod)
        except ValueError:
            return framework.SKIP  # TaintToleration refuses the pod, naming the field
        return tolerates_cordon(listed)

    def filter(self, state: Any, node: Mapping[str, Any], snap: Snapshot) -> Reason | None:
        return refusal(node, tolerated=state)


def tolerates_cordon(tolerations: list[Mapping[str, Any]]) -> bool:
    return any(toleration_matches(t, CORDON_TAINT) for t in tolerations)


def refusal(node: Mapping[str, Any], tolerated: bool) -> Reason | None:
    if not (node.get("spec") or {}).get("unschedulable") or tolerated:
        return None
    name = node["metadata"]["name"]
    return lambda: f"node {name} is cordoned (spec.unschedulable=true)"
