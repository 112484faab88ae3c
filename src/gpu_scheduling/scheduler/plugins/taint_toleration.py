"""TaintToleration: a node's NoSchedule and NoExecute taints keep off every pod that does not tolerate them.

Score (kube-scheduler's TaintToleration score): a node's PreferNoSchedule taints that the pod's tolerations (those of
effect PreferNoSchedule or none) do not tolerate count against it: the node with the most scores 0, one with none
100 (DefaultNormalizeScore, reversed). The pod asks nothing of it, the nodes do: its PreScore skips only a pod whose
tolerations cannot be read (refused by its PreFilter anyway); a caller that knows no node has a PreferNoSchedule taint
leaves it out (the claim path works that out once per change of the nodes: `prefers_no_schedule`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpu_scheduling.scheduler import framework
from gpu_scheduling.scheduler.framework import PodRefusal, Reason, Snapshot
from gpu_scheduling.text import json_type


class TaintToleration(framework.Plugin):
    name = "TaintToleration"
    wakes_on = frozenset({framework.NODE})

    def pre_filter(self, pod: Mapping[str, Any], snap: Snapshot) -> Any:
        try:
            return tolerations(pod)
        except ValueError as exc:
            return PodRefusal(str(exc))

    def filter(self, state: Any, node: Mapping[str, Any], snap: Snapshot) -> Reason | None:
        return refusal(node, state)

    def pre_score(self, pod: Mapping[str, Any], snap: Snapshot) -> Any:
        try:
            listed = tolerations(pod)
        except ValueError:
            return framework.SKIP
        return [t for t in listed if t.get("effect") in (None, "", PREFER_NO_SCHEDULE)]

    def score(
        self, state: list[Mapping[str, Any]], nodes: Sequence[Mapping[str, Any]], snap: Snapshot
    ) -> dict[str, int]:
        return {node["metadata"]["name"]: intolerable_preferences(node, state) for node in nodes}

    def normalize(self, state: Any, scores: Mapping[str, int]) -> dict[str, int]:
        return framework.default_normalize(scores, reverse=True)


def tolerations(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The pod's tolerations; ValueError naming the field that is not of the API's shape."""
    spec = pod.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    listed = spec.get("tolerations") or []
    if not isinstance(listed, list):
        raise ValueError(f"spec.tolerations is {json_type(listed)}; expected an array")
    for i, t in enumerate(listed):
        if not isinstance(t, Mapping):
            raise ValueError(f"spec.tolerations[{i}] is {json_type(t)}; expected an object")
        for field in ("key", "operator", "value", "effect"):
            if t.get(field) is not None and not isinstance(t[field], str):
                raise ValueError(f"spec.tolerations[{i}].{field} is {json_type(t[field])}; expected a string")
    return listed


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


PREFER_NO_SCHEDULE = "PreferNoSchedule"


def prefers_no_schedule(node: Mapping[str, Any]) -> bool:
    """Whether the node has a PreferNoSchedule taint (while none has, this rule ranks every node alike)."""
    taints = (node.get("spec") or {}).get("taints")
    if not taints:
        return False
    return any(taint.get("effect") == PREFER_NO_SCHEDULE for taint in taints)


def intolerable_preferences(node: Mapping[str, Any], tolerations: list[Mapping[str, Any]]) -> int:
    """How many of the node's PreferNoSchedule taints none of `tolerations` tolerates."""
    taints = (node.get("spec") or {}).get("taints")
    if not taints:
        return 0
    return sum(
        1
        for taint in taints
        if taint.get("effect") == PREFER_NO_SCHEDULE and not any(toleration_matches(t, taint) for t in tolerations)
    )


def refusal(node: Mapping[str, Any], tolerations: list[Mapping[str, Any]]) -> Reason | None:
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(toleration_matches(t, taint) for t in tolerations):
            name = node["metadata"]["name"]
            value = f"={taint['value']}" if taint.get("value") else ""
            return lambda: (
                f"node {name} has taint {taint.get('key')}{value}:{taint.get('effect')} that the pod does not tolerate"
            )
    return None
