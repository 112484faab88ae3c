"""VolumeBinding: the pod's PersistentVolumeClaims can all be had on the node, as kube-scheduler's plugin of the
same name judges it (scheduler.volumes says when a claim is bound, and how an unbound one is matched or
provisioned).

PreFilter, for the whole pod: every claim exists (an ephemeral volume's was made for this pod) and is not being
deleted; a bound claim's volume exists; an unbound claim belongs to a `WaitForFirstConsumer` class (any other
waits for the PersistentVolume controller). Filter, per node: every bound claim's volume admits the node (its
node affinity); every unbound claim either is being provisioned on this very node (`selected-node`), or has an
available static volume there, or its class can provision there (a provisioner, and `allowedTopologies` that admit
the node). PreBind (scheduler.volumebinder) then writes what the Filter found: the volume's claimRef, or the
claim's selected-node.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from gpu_scheduling.scheduler import fit, framework, volumes
from gpu_scheduling.scheduler.framework import PodRefusal, Reason, Snapshot


@dataclasses.dataclass(frozen=True)
class Claims:
    """What the pod's claims are, read once per attempt."""

    bound: tuple[tuple[str, dict[str, Any]], ...]
    """(claim name, its PersistentVolume) of each bound claim."""
    unbound: tuple[tuple[dict[str, Any], dict[str, Any]], ...]
    """(claim, its StorageClass) of each unbound claim of a WaitForFirstConsumer class."""


class VolumeBinding(framework.Plugin):
    name = "VolumeBinding"
    wakes_on = frozenset({framework.PVC, framework.PV, framework.STORAGE_CLASS, framework.NODE})

    def pre_filter(self, pod: Mapping[str, Any], snap: Snapshot) -> Any:
        try:
            listed = volumes.pod_claims(pod)
        except fit.FitError as exc:
            return PodRefusal(str(exc))
        if not listed:
            return framework.SKIP
        if snap.volumes is None:
            return PodRefusal("the pod has PersistentVolumeClaims, and this scheduler watches no volumes")
        return read(pod, listed, snap.volumes)

    def filter(self, state: Claims, node: Mapping[str, Any], snap: Snapshot) -> Reason | None:
        assert snap.volumes is not None  # pre_filter refused the pod otherwise
        return refusal(state, node, snap.volumes)


def read(pod: Mapping[str, Any], listed: list[volumes.PodClaim], cache: volumes.VolumeCache) -> Claims | PodRefusal:
    meta = pod.get("metadata") or {}
    namespace = str(meta.get("namespace") or "")
    bound: list[tuple[str, dict[str, Any]]] = []
    unbound: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for claim in listed:
        pvc = cache.claim(namespace, claim.name)
        if pvc is None:
            if claim.ephemeral:
                return PodRefusal(
                    f'waiting for the ephemeral volume controller to create the persistentvolumeclaim "{claim.name}"'
                )
            return PodRefusal(f'persistentvolumeclaim "{claim.name}" not found')
        pvc_meta = pvc.get("metadata") or {}
        if claim.ephemeral and not any(
            ref.get("uid") == meta.get("uid") and ref.get("controller") for ref in pvc_meta.get("ownerReferences") or []
        ):
            return PodRefusal(f'persistentvolumeclaim "{claim.name}" was not created for the pod')
        if pvc_meta.get("deletionTimestamp"):
            return PodRefusal(f'persistentvolumeclaim "{claim.name}" is being deleted')
        spec = pvc.get("spec") or {}
        if volumes.is_bound(pvc):
            pv = cache.volume(str(spec["volumeName"]))
            if pv is None:
                return PodRefusal(
                    f'persistentvolumeclaim "{claim.name}" is bound to persistentvolume "{spec["volumeName"]}", '
                    "which does not exist"
                )
            bound.append((claim.name, pv))
            continue
        class_name = spec.get("storageClassName") or ""
        storage_class = cache.storage_class(class_name) if class_name else None
        if class_name and storage_class is None:
            return PodRefusal(
                f'storageclass.storage.k8s.io "{class_name}" not found (persistentvolumeclaim "{claim.name}")'
            )
        if (
            storage_class is None
            or storage_class.get("volumeBindingMode") != volumes.WAIT_FOR_FIRST_CONSUMER
            or spec.get("volumeName")
        ):
            return PodRefusal(
                f'pod has unbound immediate PersistentVolumeClaims (persistentvolumeclaim "{claim.name}" waits for '
                "the PersistentVolume controller)"
            )
        unbound.append((pvc, storage_class))
    return Claims(tuple(bound), tuple(unbound))


def refusal(state: Claims, node: Mapping[str, Any], cache: volumes.VolumeCache) -> Reason | None:
    name = node["metadata"]["name"]
    for claim, pv in state.bound:
        if not volumes.node_affinity_matches(pv, node):
            pv_name = pv["metadata"]["name"]
            return lambda: (
                f"node {name} does not match the node affinity of persistentvolume {pv_name} "
                f'(persistentvolumeclaim "{claim}"): volume node affinity conflict'
            )
    chosen: set[str] = set()
    # Smallest request first, as kube-scheduler matches them (volumebinder writes them in the same order).
    for pvc, storage_class in sorted(state.unbound, key=lambda claim: volumes.requested_storage(claim[0])):
        claim = pvc["metadata"]["name"]
        selected = ((pvc["metadata"].get("annotations")) or {}).get(volumes.SELECTED_NODE)
        if selected:
            if selected != name:
                return lambda: f'persistentvolumeclaim "{claim}" is being provisioned on node {selected}, not {name}'
            # Not yet fitting: kube's FindPodVolumes checks a claim being provisioned on this very node as one to
            # provision (checkVolumeProvisions): its class must still provision here.
        else:
            match = cache.matching_volume(pvc, node, frozenset(chosen))
            if match is not None:
                chosen.add(match["metadata"]["name"])
                continue
        provisioner = storage_class.get("provisioner") or ""
        class_name = storage_class["metadata"]["name"]
        why = f'persistentvolumeclaim "{claim}" is being provisioned on node {name}, but' if selected else ""
        if provisioner in ("", volumes.NO_PROVISIONER):
            return lambda: (
                f"{why} storageclass {class_name} provisions none"
                if why
                else f'node {name} has no available persistentvolume for persistentvolumeclaim "{claim}" '
                f"(storageclass {class_name} provisions none)"
            )
        if not volumes.topology_allows(storage_class, node):
            return lambda: (
                f"{why} the allowedTopologies of storageclass {class_name} exclude it"
                if why
                else f'node {name} has no available persistentvolume for persistentvolumeclaim "{claim}", and the '
                f"allowedTopologies of storageclass {class_name} exclude it"
            )
    return None
