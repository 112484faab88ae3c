"""The volume objects the volume plugins judge a pod's claims by, as the scheduler's informers keep them: its
PersistentVolumeClaims, the PersistentVolumes, the StorageClasses and the CSINodes (VolumeCache), and what the
volume rules read of them. Pure: plain dicts, no client (scheduler.volumebinder writes the bindings).

A claim is *bound* once the PersistentVolume controller has finished with it (`spec.volumeName` and the
`pv.kubernetes.io/bind-completed` annotation, kube's isPVCFullyBound). An unbound claim of a `WaitForFirstConsumer`
class waits for a scheduler: it is bound to an available static PersistentVolume that fits it and the node (the
smallest), or, with none, provisioned by its class's provisioner on the node (`volume.kubernetes.io/selected-node`),
if the class's `allowedTopologies` admit the node. Any other unbound claim waits for the PersistentVolume
controller (kube-scheduler: "pod has unbound immediate PersistentVolumeClaims").

Between a decision and the watch showing its write, a chosen PersistentVolume is *assumed* for its claim (`assume`),
so that two pods deciding at once never pick the same volume; `forget` undoes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_scheduling.scheduler import fit

SELECTED_NODE = "volume.kubernetes.io/selected-node"
"""The annotation a scheduler writes on a claim to have its class's provisioner make the volume on that node."""
BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
"""The annotation the PersistentVolume controller puts on a claim once it has bound it."""
NO_PROVISIONER = "kubernetes.io/no-provisioner"
"""The provisioner of a class whose volumes are all made by hand (local volumes)."""
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
ZONE_LABELS = (
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
)
"""The labels of a PersistentVolume that VolumeZone compares with its node's."""


def claim_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


PodClaim = fit.PodClaim
pod_claims = fit.pod_claims


def claim_keys(pod: Mapping[str, Any]) -> list[str] | None:
    """The keys ("<namespace>/<name>") of the pod's claims, in its order; None when its volumes cannot be read
    (VolumeBinding refuses such a pod, naming the field: the other volume rules then have nothing to judge)."""
    try:
        listed = pod_claims(pod)
    except fit.FitError:
        return None
    namespace = str(fit.obj(pod.get("metadata"), "metadata").get("namespace") or "")  # an object: pod_claims read it
    return [claim_key(namespace, c.name) for c in listed]


def is_bound(pvc: Mapping[str, Any]) -> bool:
    """The PersistentVolume controller has bound the claim to its volume."""
    return bool((pvc.get("spec") or {}).get("volumeName")) and BIND_COMPLETED in (
        (pvc.get("metadata") or {}).get("annotations") or {}
    )


def _storage(value: Any) -> int:
    try:
        return fit.amount(fit.MEMORY, value, "storage")
    except fit.FitError:
        return 0


def requested_storage(pvc: Mapping[str, Any]) -> int:
    return _storage((((pvc.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage", 0))


def _capacity(pv: Mapping[str, Any]) -> int:
    return _storage(((pv.get("spec") or {}).get("capacity") or {}).get("storage", 0))


def node_affinity_matches(pv: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """The volume's `spec.nodeAffinity.required` admits the node (no affinity admits every node): any term whose
    matchExpressions all hold on the node's labels."""
    required = (((pv.get("spec") or {}).get("nodeAffinity") or {}).get("required")) or None
    if not required:
        return True
    terms = required.get("nodeSelectorTerms") or []
    # kube's CheckNodeAffinity (component-helpers storage/volume) judges a Node made of the labels alone, and a
    # node with no name has no fields to match: a term's matchFields are not looked at (a term of matchFields only
    # admits every node); a term with neither still admits none.
    labels = node["metadata"].get("labels") or {}
    return any(
        isinstance(t, Mapping)
        and bool(t.get("matchExpressions") or t.get("matchFields"))
        and fit.expressions_match(t.get("matchExpressions") or [], labels)
        for t in terms
    )


def topology_allows(storage_class: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """The class's `allowedTopologies` admit the node (none admits every node): any term with matchLabelExpressions
    whose every key has one of its values on the node."""
    terms = storage_class.get("allowedTopologies") or []
    if not terms:
        return True
    labels = node["metadata"].get("labels") or {}
    return any(
        bool(t.get("matchLabelExpressions"))  # a term without expressions selects no node (kube)
        and all(labels.get(e.get("key")) in (e.get("values") or []) for e in t["matchLabelExpressions"])
        for t in terms
        if isinstance(t, Mapping)
    )


_GA_LABEL = {
    "failure-domain.beta.kubernetes.io/zone": "topology.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region": "topology.kubernetes.io/region",
}
"""The GA label a node may carry in place of a volume's beta label."""


def zone_conflict(pv: Mapping[str, Any], node: Mapping[str, Any]) -> str | None:
    """VolumeZone: the zone or region label of the volume that the node's does not match (a label value may list
    several zones, joined by "__"; one that lists an empty zone is ignored), or None. A node with no zone or region
    label at all (a single-zone cluster) matches any volume, and a volume's beta label is compared with the node's
    GA label where the node has no beta one (kube-scheduler's VolumeZone)."""
    pv_labels = (pv.get("metadata") or {}).get("labels") or {}
    node_labels = node["metadata"].get("labels") or {}
    if not any(key in node_labels for key in ZONE_LABELS):
        return None
    for key in ZONE_LABELS:
        if key not in pv_labels:
            continue
        zones = {zone.strip() for zone in str(pv_labels[key]).split("__")}
        if "" in zones:
            continue
        have = node_labels[key] if key in node_labels else node_labels.get(_GA_LABEL.get(key, key))
        if have not in zones:
            return f"{key}={pv_labels[key]}"
    return None


class VolumeCache:
    """The volume objects (each kept by an informer of the scheduler, or set by a test) and the assumed bindings."""

    def __init__(
        self,
        claims: Mapping[str, dict[str, Any]] | None = None,
        volumes: Mapping[str, dict[str, Any]] | None = None,
        classes: Mapping[str, dict[str, Any]] | None = None,
        csi_nodes: Mapping[str, dict[str, Any]] | None = None,
    ) -> None:
        self.claims: Mapping[str, dict[str, Any]] = claims if claims is not None else {}
        """"<namespace>/<name>" -> PersistentVolumeClaim."""
        self.volumes: Mapping[str, dict[str, Any]] = volumes if volumes is not None else {}
        """name -> PersistentVolume."""
        self.classes: Mapping[str, dict[str, Any]] = classes if classes is not None else {}
        """name -> StorageClass."""
        self.csi_nodes: Mapping[str, dict[str, Any]] = csi_nodes if csi_nodes is not None else {}
        """node name -> CSINode (the CSI drivers on the node, and how many volumes each may attach)."""
        self._assumed: dict[str, str] = {}  # PersistentVolume -> the claim key it is assumed for

    def claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.claims.get(claim_key(namespace, name))

    def volume(self, name: str) -> dict[str, Any] | None:
        return self.volumes.get(name)

    def storage_class(self, name: str) -> dict[str, Any] | None:
        return self.classes.get(name)

    def csi_node(self, name: str) -> dict[str, Any] | None:
        return self.csi_nodes.get(name)

    # ---- assumed bindings -------------------------------------------------------------------------------------
    def assume(self, pv: str, claim: str) -> None:
        """PersistentVolume `pv` is chosen for `claim` ("<namespace>/<name>"): no other claim may take it."""
        self._assumed[pv] = claim

    def forget(self, claim: str) -> None:
        """Whatever was assumed for `claim` is no longer chosen."""
        for pv in [pv for pv, c in self._assumed.items() if c == claim]:
            del self._assumed[pv]

    def volume_changed(self, pv: Mapping[str, Any]) -> None:
        """The watch shows the volume: once it names a claim, the API holds what was assumed."""
        name = (pv.get("metadata") or {}).get("name")
        if name in self._assumed and (pv.get("spec") or {}).get("claimRef"):
            del self._assumed[name]

    def assumed_for(self, pv: str) -> str | None:
        return self._assumed.get(pv)

    # ---- matching a claim to a static volume ------------------------------------------------------------------
    def matching_volume(
        self, pvc: Mapping[str, Any], node: Mapping[str, Any], exclude: frozenset[str] = frozenset()
    ) -> dict[str, Any] | None:
        """The available PersistentVolume the unbound claim `pvc` can be bound to on `node` (kube's
        FindMatchingVolume), among the volumes of the claim's class that are not `exclude` (chosen for the pod's
        other claims), not taken or assumed by another claim, not being deleted, and with room for its request, its
        volume mode and its volume attributes class: one already reserved for the claim (its claimRef names it) if
        its node affinity admits the node, and none if it does not (the PersistentVolume controller binds the two
        whatever is chosen here); else the smallest Available one with every access mode the claim asks, the labels
        of its selector, and a node affinity that admits the node. None when there is none."""
        meta = pvc.get("metadata") or {}
        spec = pvc.get("spec") or {}
        key = claim_key(str(meta.get("namespace")), str(meta.get("name")))
        wanted_class = spec.get("storageClassName") or ""
        modes = set(spec.get("accessModes") or [])
        mode = spec.get("volumeMode") or "Filesystem"
        attributes = spec.get("volumeAttributesClassName") or ""
        asked = requested_storage(pvc)
        selector = spec.get("selector") or {}
        best: dict[str, Any] | None = None
        for pv in self.volumes.values():
            pv_meta = pv.get("metadata") or {}
            pv_spec = pv.get("spec") or {}
            if (pv_spec.get("storageClassName") or "") != wanted_class or pv_meta.get("name") in exclude:
                continue
            ref = pv_spec.get("claimRef") or {}
            ours = bool(ref) and claim_key(str(ref.get("namespace")), str(ref.get("name"))) == key
            ours = ours and (not ref.get("uid") or ref.get("uid") == meta.get("uid"))
            assumed = self._assumed.get(str(pv_meta.get("name")))
            if (ref and not ours) or (assumed is not None and assumed != key):
                continue
            if (
                _capacity(pv) < asked
                or (pv_spec.get("volumeMode") or "Filesystem") != mode
                or (pv_spec.get("volumeAttributesClassName") or "") != attributes
                or pv_meta.get("deletionTimestamp")
            ):
                continue
            if ours:
                return pv if node_affinity_matches(pv, node) else None
            if (pv.get("status") or {}).get("phase") != "Available":
                continue
            if not modes <= set(pv_spec.get("accessModes") or []):
                continue
            labels = pv_meta.get("labels") or {}
            if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
                continue
            if not fit.expressions_match(selector.get("matchExpressions") or [], labels):
                continue
            if not node_affinity_matches(pv, node):
                continue
            if best is None or _capacity(pv) < _capacity(best):
                best = pv
        return best
