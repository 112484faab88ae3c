"""NodeReady: a node whose Ready condition is not True takes no pod (kube-scheduler leaves this to the
not-ready taint that the node lifecycle controller puts on; gpu-scheduler refuses the node itself, so that a pod
is never bound in the moments before the taint lands)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_scheduling.scheduler import framework
from gpu_scheduling.scheduler.framework import Reason, Snapshot


class NodeReady(framework.Plugin):
    name = "NodeReady"
    wakes_on = frozenset({framework.NODE})

    def pre_filter(self, pod: Mapping[str, Any], snap: Snapshot) -> Any:
        return None  # every pod needs a Ready node

    def filter(self, state: Any, node: Mapping[str, Any], snap: Snapshot) -> Reason | None:
        return refusal(node)


def refusal(node: Mapping[str, Any]) -> Reason | None:
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    if ready is not None and ready.get("status") == "True":
        return None
    name = node["metadata"]["name"]
    why = f" ({ready.get('reason')})" if ready and ready.get("reason") else ""
    return lambda: f"node {name} is not Ready{why}"
