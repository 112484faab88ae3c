"""NodeResourcesFit: the pod's requests (kube's formula, fit.pod_requests) fit in the node's allocatable minus what
its other pods request, and one more pod fits the node's `pods`. A resource the pod does not request is not
checked, as in kube-scheduler."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_scheduling.scheduler import fit, framework
from gpu_scheduling.scheduler.framework import PodRefusal, Reason, Snapshot


class NodeResourcesFit(framework.Plugin):
    name = "NodeResourcesFit"
    wakes_on = frozenset({framework.NODE, framework.POD_GONE})

    def pre_filter(self, pod: Mapping[str, Any], snap: Snapshot) -> Any:
        try:
            return fit.pod_requests(pod)
        except fit.FitError as exc:
            return PodRefusal(str(exc))

    def filter(self, state: Mapping[str, int], node: Mapping[str, Any], snap: Snapshot) -> Reason | None:
        usage = snap.usage
        name = node["metadata"]["name"]
        has = usage.capacity(node)
        if usage.pods(name) + 1 <= has.get(fit.PODS, 0) and all(
            asked <= has.get(r, 0) - usage.requested(name, r) for r, asked in state.items()
        ):
            return None
        return lambda: _shortages(state, node, usage)


def _shortages(requests: Mapping[str, int], node: Mapping[str, Any], usage: fit.NodeUsage) -> str:
    name = node["metadata"]["name"]
    has = usage.capacity(node)
    allowed = has.get(fit.PODS, 0)
    on_node = usage.pods(name)
    short = []
    if on_node + 1 > allowed:
        short.append(f"Too many pods (node {name} has {on_node} of {allowed})")
    for resource, asked in requests.items():
        capacity = has.get(resource, 0)
        used = usage.requested(name, resource)
        if asked > capacity - used:
            short.append(
                f"Insufficient {resource} (the pod requests {fit.show(resource, asked)}; node {name} has "
                f"{fit.show(resource, max(0, capacity - used))} of {fit.show(resource, capacity)} left)"
            )
    return ", ".join(sorted(short))
