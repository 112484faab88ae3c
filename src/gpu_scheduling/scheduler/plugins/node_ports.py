"""NodePorts: no host port the pod asks for (protocol, port; IP 0.0.0.0 conflicts with every IP) is taken on the
node by another pod."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_scheduling.scheduler import fit, framework
from gpu_scheduling.scheduler.framework import PodRefusal, Reason, Snapshot


class NodePorts(framework.Plugin):
    name = "NodePorts"
    wakes_on = frozenset({framework.POD_GONE})

    def pre_filter(self, pod: Mapping[str, Any], snap: Snapshot) -> Any:
        try:
            ports = fit.host_ports(pod)
        except fit.FitError as exc:
            return PodRefusal(str(exc))
        return ports or framework.SKIP

    def filter(self, state: tuple[fit.Port, ...], node: Mapping[str, Any], snap: Snapshot) -> Reason | None:
        name = node["metadata"]["name"]
        clash = fit.ports_conflict(state, snap.usage.ports(name))
        if clash is None:
            return None
        ip, protocol, port = clash
        return lambda: f"host port {ip}:{port}/{protocol} is taken on node {name}"
