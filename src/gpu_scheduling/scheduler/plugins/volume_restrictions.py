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
        if snap.volumes is None:
            return framework.SKIP  # VolumeBinding refuses the pod
        try:
            listed = volumes.pod_claims(pod)
        except fit.FitError:
            return framework.SKIP  # VolumeBinding refuses the pod, naming the field
        meta = pod.get("metadata") or {}
        namespace = str(meta.get("namespace") or "")
        for claim in listed:
            pvc = snap.volumes.claim(namespace, claim.name)
            if pvc is None or READ_WRITE_ONCE_POD not in ((pvc.get("spec") or {}).get("accessModes") or []):
                continue
            if snap.usage.claim_users(volumes.claim_key(namespace, claim.name), besides=meta.get("uid")):
                return PodRefusal(
                    f'persistentvolumeclaim "{claim.name}" is ReadWriteOncePod and another pod uses it (node has pod '
                    "using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode)"
                )
        return framework.SKIP  # nothing to judge per node

    def filter(self, state: Any, node: Mapping[str, Any], snap: Snapshot) -> Reason | None:
        return None
