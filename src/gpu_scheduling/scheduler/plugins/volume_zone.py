"""VolumeZone: the zone and region labels of the volumes of the pod's bound claims match the node's (a volume's
label may list several zones, joined by "__")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_scheduling.scheduler import framework, volumes
from gpu_scheduling.scheduler.framework import Reason, Snapshot


class VolumeZone(framework.Plugin):
    name = "VolumeZone"
    wakes_on = frozenset({framework.PVC, framework.PV, framework.NODE})

    def pre_filter(self, pod: Mapping[str, Any], snap: Snapshot) -> Any:
        keys = volumes.claim_keys(pod)
        if snap.volumes is None or keys is None:
            return framework.SKIP  # VolumeBinding refuses the pod
        zoned = []
        for key in keys:
            pvc = snap.volumes.claims.get(key)
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
