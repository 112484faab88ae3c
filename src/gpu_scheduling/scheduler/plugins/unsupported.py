"""The required rules a pod can ask for that gpu-scheduler does not judge yet: Dynamic Resource Allocation
claims. Such a pod waits with that reason instead of being placed against its wishes (binding it could
break the rule). Each becomes a plugin of its own when it is judged."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from gpu_scheduling.scheduler import fit, framework
from gpu_scheduling.scheduler.framework import PodRefusal, Reason, Snapshot


class Unsupported(framework.Plugin):
    name = "Unsupported"
    wakes_on: ClassVar[frozenset[str]] = frozenset()  # only a change of the pod itself helps

    def pre_filter(self, pod: Mapping[str, Any], snap: Snapshot) -> Any:
        try:
            why = unsupported(pod)
        except fit.FitError as exc:
            return PodRefusal(str(exc))
        return framework.SKIP if why is None else PodRefusal(why)

    def filter(self, state: Any, node: Mapping[str, Any], snap: Snapshot) -> Reason | None:
        return None


def unsupported(pod: Mapping[str, Any]) -> str | None:
    """A required rule of the pod that gpu-scheduler does not judge, named with its field; None when it asks for
    none."""
    spec = fit.spec_of(pod)
    if spec.get("resourceClaims"):
        return "spec.resourceClaims is set: gpu-scheduler does not allocate Dynamic Resource Allocation claims"
    return None
