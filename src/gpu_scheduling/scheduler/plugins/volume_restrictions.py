"""VolumeRestrictions: a `ReadWriteOncePod` claim is used by one pod at a time, in the whole cluster. A pod whose
such claim another pod uses (bound, or assumed bound by this scheduler) waits until that pod is gone, with
kube-scheduler's reason. (kube's other restrictions concern in-tree volume kinds that are gone from current
Kubernetes.)"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_scheduling.scheduler import fit, framework, volumes
from gpu_scheduling.scheduler.framework import PodRefusal, Reason, Snapshot

READ_WRITE_ONCE_POD = "ReadWriteOncePod"


class VolumeRestrictions(framework.Plugin):
    name = "VolumeRestrictions"
    wakes_on = frozenset({framework.POD_GONE, framework.PVC})

    def pre_filter(self, pod: Mapping[str, Any], snap: Snapshot) -> Any:
        keys = volumes.claim_keys(pod)
        if snap.volumes is None or keys is None:
            return framework.SKIP  # VolumeBinding refuses the pod
        for key in keys:
            pvc = snap.volumes.claims.get(key)
            if pvc is None or READ_WRITE_ONCE_POD not in ((pvc.get("spec") or {}).get("accessModes") or []):
                continue
            if snap.usage.claim_users(key, besides=fit.obj(pod.get("metadata"), "metadata").get("uid")):
                name = key.partition("/")[2]
                return PodRefusal(
                    f'persistentvolumeclaim "{name}" is ReadWriteOncePod and another pod uses it (node has pod using '
                    "PersistentVolumeClaim with the same name and ReadWriteOncePod access mode)"
                )
        return framework.SKIP  # nothing to judge per node

    def filter(self, state: Any, node: Mapping[str, Any], snap: Snapshot) -> Reason | None:
        return None
