"""NodeVolumeLimits: the node can attach every CSI volume the pod brings, as kube-scheduler's plugin of the same
name (its CSI limits) judges it. The node's CSINode says, per CSI driver, how many volumes it may attach
(`spec.drivers[].allocatable.count`; none: no limit). A volume counts once however many pods use it: the volumes
of the node's pods (their claims, fit.NodeUsage.claims) and those the pod adds must not exceed the count. Only a
driver the pod brings a volume of that is not attached yet is judged: a pod that adds nothing fits a node already
over its count, as kube's.

A claim's volume and driver: a bound claim's PersistentVolume (`spec.csi.driver`; the volume is its
`volumeHandle`, so two PersistentVolumes of one handle are one volume, as kube counts them); an unbound claim's
StorageClass provisioner (the claim itself stands for the volume to come). A volume of another kind is not
counted (kube's in-tree limits are gone with the in-tree drivers).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from gpu_scheduling.scheduler import framework, volumes
from gpu_scheduling.scheduler.framework import Reason, Snapshot


class NodeVolumeLimits(framework.Plugin):
    name = "NodeVolumeLimits"
    wakes_on = frozenset({framework.POD_GONE, framework.PVC, framework.PV, framework.CSI_NODE})

    def pre_filter(self, pod: Mapping[str, Any], snap: Snapshot) -> Any:
        keys = volumes.claim_keys(pod)
        if snap.volumes is None or keys is None:
            return framework.SKIP  # VolumeBinding refuses the pod
        return _by_driver(keys, snap.volumes) or framework.SKIP

    def filter(self, state: dict[str, set[str]], node: Mapping[str, Any], snap: Snapshot) -> Reason | None:
        assert snap.volumes is not None
        name = node["metadata"]["name"]
        csi_node = snap.volumes.csi_node(name)
        if csi_node is None:
            return None
        limits = {
            d.get("name"): (d.get("allocatable") or {}).get("count")
            for d in (csi_node.get("spec") or {}).get("drivers") or []
        }
        in_use = _by_driver(snap.usage.claims(name), snap.volumes)
        for driver, wanted in state.items():
            limit = limits.get(driver)
            if not isinstance(limit, int):
                continue
            attached = in_use.get(driver, set())
            new = len(wanted - attached)
            if new and len(attached) + new > limit:
                used = len(attached)
                return lambda: (
                    f"node {name} may attach {limit} volumes of CSI driver {driver}; {used} are attached and the pod "
                    f"brings {new} more (node(s) exceed max volume count)"
                )
        return None


def _by_driver(claims: Iterable[str], cache: volumes.VolumeCache) -> dict[str, set[str]]:
    """The CSI volumes of `claims` ("<namespace>/<name>"), per driver: driver -> volume ids (a bound volume's handle,
    an unbound claim's key)."""
    found: dict[str, set[str]] = defaultdict(set)
    for key in claims:
        pvc = cache.claims.get(key)
        if pvc is None:
            continue
        spec = pvc.get("spec") or {}
        if volumes.is_bound(pvc):
            pv = cache.volume(str(spec["volumeName"]))
            csi = ((pv or {}).get("spec") or {}).get("csi") or {}
            if csi.get("driver"):
                found[csi["driver"]].add(str(csi.get("volumeHandle") or spec["volumeName"]))
            continue
        storage_class = cache.storage_class(str(spec.get("storageClassName") or ""))
        provisioner = (storage_class or {}).get("provisioner")
        if provisioner and provisioner != volumes.NO_PROVISIONER:
            found[provisioner].add(key)
    return dict(found)
