"""VolumeZone: the zone and region labels of the volumes of the pod's bound claims match the node's (a volume's
label may list several zones, joined by "__")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_scheduling.scheduler import fit, framework, volumes
from gpu_scheduling.scheduler.framework import Reason, Snapshot


class VolumeZone(framework.Plugin):
    name = "VolumeZone"
    wakes_on = frozenset({framework.PVC, framework.PV, framework.NODE})

    def pre_filter(self, pod: Mapping[str, Any], snap: Snapshot) -> Any:
        if snap.volumes is None:
            return framework.SKIP  # VolumeBinding refuses the pod
        try:
            listed = volumes.pod_claims(pod)
        except fit.FitError:
            return framework.SKIP  # VolumeBinding refuses the pod, naming the field
        namespace = str((pod.get("metadata") or {}).get("namespace") or "")
        zoned = []
        for claim in listed:
            pvc = snap.volumes.claim(namespace, claim.name)
            if pvc is None or not volumes.is_bound(pvc):
                continue
            pv = snap.volumes.volume(str(pvc["spec"]["volumeName"]))
            if pv is not None and any(
                k in ((pv.get("metadata") or {}).get("labels") or {}) for k in volumes.ZONE_LABELS
            ):
                zoned.append(pv)
        return tuple(zoned) or framework.SKIP

    def filter(self, state: tuple[dict[str, Any], ...], node: Mapping[str, Any], snap: Snapshot) -> Reason | None:
        for pv in state:
            conflict = volumes.zone_conflict(pv, node)
            if conflict is not None:
                name, pv_name = node["metadata"]["name"], pv["metadata"]["name"]
                return lambda: f"node {name} is not in the zone of persistentvolume {pv_name} ({conflict})"
        return None
