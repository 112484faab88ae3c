"""VolumeBinding's PreBind: before a pod with unbound `WaitForFirstConsumer` claims is bound to its node, write what
the Filter found for each claim, as kube-scheduler's volume binder does, and let the PersistentVolume controller
(and the class's provisioner) do the rest:

- a claim matched to an available static PersistentVolume: the volume's `spec.claimRef` names the claim (the PV
  controller then binds the claim to it);
- a claim to provision: the claim's `volume.kubernetes.io/selected-node` annotation names the node (the provisioner
  makes the volume there, the PV controller binds it).

The pod is bound once every claim is bound (scheduler.volumes.is_bound). Until then `prebind` answers WAITING and
holds no worker: the pod keeps what its attempt assumed (its GPUs, its room), and a change of its claims (the
queue's `wait_for_claims`) or its backoff tries it again; each try checks and, where a write is still missing (a
failed call, a restart), writes it again. A pod whose claims are not bound within `timeout_seconds` of its first
wait fails the attempt (kube-scheduler's bind timeout), which releases what it assumed; its next attempt starts
over.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpu_scheduling import constants
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import ApiError, TransportError
from gpu_scheduling.scheduler import volumes

if TYPE_CHECKING:
    from gpu_scheduling.kube.client import Client

log = logging.getLogger(__name__)


class Outcome(enum.Enum):
    READY = "ready"
    """Every claim of the pod is bound, to a volume that admits the node: bind the pod."""
    WAITING = "waiting"
    """Written (or written before); the PersistentVolume controller or the provisioner has not finished."""
    FAILED = "failed"
    """The claims were not bound in time, or cannot be on this node any more: the attempt is over."""


class VolumeBinder:
    def __init__(self, client: Client, cache: volumes.VolumeCache, timeout_seconds: float = 600.0) -> None:
        self.client = client
        self.cache = cache
        self.timeout_seconds = timeout_seconds
        self._since: dict[str, float] = {}  # pod uid -> when it first waited for its claims
        self.message = ""
        """Why the last prebind did not answer READY."""

    def claims_of(self, pod: Mapping[str, Any]) -> list[str]:
        """The keys ("<namespace>/<name>") of the pod's claims (none when its volumes cannot be read)."""
        return volumes.claim_keys(pod) or []

    def forget(self, uid: str) -> None:
        self._since.pop(uid, None)

    async def prebind(self, pod: Mapping[str, Any], node: Mapping[str, Any]) -> Outcome:
        meta = pod["metadata"]
        uid = str(meta.get("uid"))
        keys = self.claims_of(pod)
        if not keys:
            return Outcome.READY
        chosen: set[str] = set()
        pending = []
        found = [(key, self.cache.claims.get(key)) for key in keys]
        # Smallest request first: the order plugins/volume_binding.py matched them in, so both pick the same volumes.
        found.sort(key=lambda kp: volumes.requested_storage(kp[1]) if kp[1] is not None else -1)
        for key, pvc in found:
            if pvc is None:
                return self._failed(uid, f"persistentvolumeclaim {key} is gone")
            if volumes.is_bound(pvc):
                pv = self.cache.volume(str(pvc["spec"]["volumeName"]))
                if pv is None or not volumes.node_affinity_matches(pv, node):
                    return self._failed(
                        uid, f"persistentvolumeclaim {key} is bound to a volume node {_name(node)} cannot use"
                    )
                continue
            pending.append(key)
            if await self._write(key, pvc, node, chosen) is False:
                return self._failed(uid, self.message)
        if not pending:
            self._since.pop(uid, None)
            return Outcome.READY
        since = self._since.setdefault(uid, time.monotonic())
        if time.monotonic() - since > self.timeout_seconds:
            return self._failed(
                uid,
                f"persistentvolumeclaims {', '.join(pending)} were not bound within {self.timeout_seconds:g} s of "
                f"choosing node {_name(node)}",
            )
        self.message = f"waiting for persistentvolumeclaims {', '.join(pending)} to be bound on node {_name(node)}"
        return Outcome.WAITING

    def _failed(self, uid: str, message: str) -> Outcome:
        self._since.pop(uid, None)
        self.message = message
        return Outcome.FAILED

    async def _write(self, key: str, pvc: Mapping[str, Any], node: Mapping[str, Any], chosen: set[str]) -> bool | None:
        """Write what binds the unbound claim `pvc` on `node`, unless it is written already. False: it cannot be
        had there any more (self.message says why); None: a call failed (tried again on the next try)."""
        annotations = (pvc["metadata"].get("annotations")) or {}
        selected = annotations.get(volumes.SELECTED_NODE)
        node_name = _name(node)
        if selected:
            if selected != node_name:
                self.message = f"persistentvolumeclaim {key} is being provisioned on node {selected}"
                return False
            return True
        if (pvc.get("spec") or {}).get("volumeName"):
            return True  # the PersistentVolume controller is binding it
        pv = self.cache.matching_volume(pvc, node, frozenset(chosen))
        try:
            if pv is not None:
                name = pv["metadata"]["name"]
                chosen.add(name)
                ref = (pv.get("spec") or {}).get("claimRef")
                if ref:
                    return True  # ours already (matching_volume returns another's never)
                self.cache.assume(name, key)
                await self.client.patch(
                    paths.PERSISTENT_VOLUME.item(name),
                    {
                        "metadata": {
                            "resourceVersion": pv["metadata"].get("resourceVersion"),
                            "annotations": {"pv.kubernetes.io/bound-by-controller": "yes"},
                        },
                        "spec": {
                            "claimRef": {
                                "apiVersion": constants.CORE_API_VERSION,
                                "kind": "PersistentVolumeClaim",
                                "namespace": pvc["metadata"]["namespace"],
                                "name": pvc["metadata"]["name"],
                                "uid": pvc["metadata"].get("uid"),
                                "resourceVersion": pvc["metadata"].get("resourceVersion"),
                            }
                        },
                    },
                )
                log.info("persistentvolume %s reserved for persistentvolumeclaim %s", name, key)
                return True
            class_name = (pvc.get("spec") or {}).get("storageClassName") or ""
            storage_class = self.cache.storage_class(class_name)
            provisioner = (storage_class or {}).get("provisioner") or ""
            if storage_class is None or provisioner in ("", volumes.NO_PROVISIONER):
                self.message = f"node {node_name} has no available persistentvolume for persistentvolumeclaim {key}"
                return False
            if not volumes.topology_allows(storage_class, node):
                self.message = f"storageclass {class_name} cannot provision on node {node_name}"
                return False
            await self.client.patch(
                paths.PERSISTENT_VOLUME_CLAIM.item(pvc["metadata"]["name"], pvc["metadata"]["namespace"]),
                {
                    "metadata": {
                        "resourceVersion": pvc["metadata"].get("resourceVersion"),
                        "annotations": {volumes.SELECTED_NODE: node_name},
                    }
                },
            )
            log.info("persistentvolumeclaim %s to be provisioned on node %s", key, node_name)
            return True
        except (ApiError, TransportError) as exc:
            if pv is not None:
                self.cache.forget(key)
            log.warning("could not bind persistentvolumeclaim %s on node %s: %s; will retry", key, node_name, exc)
            return None


def _name(node: Mapping[str, Any]) -> str:
    return str(node["metadata"]["name"])
