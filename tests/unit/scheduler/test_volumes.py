"""kube-scheduler v1.34's VolumeBinding and VolumeZone (scheduler.plugins.volume_binding, .volume_zone), judged
through scheduler.framework with plugins.PROFILE on plain dicts, what they read (scheduler.volumes), and the
scheduling queue's claim waits.

Expected values are derived from the Go source of the real thing (k8s.io/kubernetes v1.34
pkg/scheduler/framework/plugins/volumebinding/{volume_binding,binder}.go, .../volumezone/volume_zone.go and
pkg/controller/volume/persistentvolume/util FindMatchingVolume, CheckAccessModes, CheckVolumeModeMismatches):

- PreFilter: a claim that does not exist, an ephemeral one not created yet or not controlled by the pod, one being
  deleted, a bound one whose volume is gone, one of a class that does not exist, and an unbound one whose class is
  not WaitForFirstConsumer ("pod has unbound immediate PersistentVolumeClaims") refuse the pod on every node.
- Filter: a bound claim's volume must admit the node (its node affinity); an unbound claim annotated with
  selected-node fits that node only; else a static volume is matched (FindMatchingVolume: a volume prebound to
  the claim, unless its node affinity refuses the node; else the smallest Available volume of the claim's class,
  free, not being deleted, big enough, with the claim's volume mode, volume attributes class and access modes, the
  labels of its selector and a node affinity that admits the node, never one another claim of the pod took); else
  the class must provision (a provisioner, allowedTopologies admitting the node).
- VolumeZone: a bound volume's zone and region labels (several zones joined by "__") must hold the node's; a node
  with no zone or region label at all is admitted (single-zone clusters), and a volume's beta label is compared
  with the node's GA label when the node lacks the beta one.

Where scheduler.volumes and kube disagreed (a node without zone labels, the beta-to-GA zone label fallback, a zone
value listing an empty zone, volumeAttributesClassName, a prebound volume of another class, too small, of another
volume mode, being deleted or refusing the node, an allowedTopologies term without expressions), the test states
kube's behaviour; those were shown failing before volumes.py was fixed.

A hypothesis property checks matching_volume against an oracle written here from those rules, on volumes that
each miss up to two criteria (so that every criterion is met and missed in many examples).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_scheduling.scheduler import fit, framework, plugins, volumes
from gpu_scheduling.scheduler.framework import ClusterEvent
from gpu_scheduling.scheduler.queue import SchedulingQueue
from tests.unit.scheduler import drain, run_async

NS = "team"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION = "failure-domain.beta.kubernetes.io/region"
HOSTNAME = "kubernetes.io/hostname"
RWO, ROX, RWX = "ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany"
POD_UID = "pod-uid"


# ---- builders ---------------------------------------------------------------------------------------------------
def node(name: str = "n1", labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A Ready node with room for any pod, with these labels (and its hostname label)."""
    return {
        "metadata": {"name": name, "labels": {HOSTNAME: name, **(labels or {})}},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
        },
    }


def pvc_volume(claim_name: str, name: str = "data") -> dict[str, Any]:
    return {"name": name, "persistentVolumeClaim": {"claimName": claim_name}}


def ephemeral_volume(name: str = "scratch") -> dict[str, Any]:
    template = {"spec": {"accessModes": [RWO], "resources": {"requests": {"storage": "1Gi"}}}}
    return {"name": name, "ephemeral": {"volumeClaimTemplate": template}}


def pod(*pod_volumes: dict[str, Any], name: str = "p", uid: str = POD_UID) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}
    if pod_volumes:
        spec["volumes"] = list(pod_volumes)
    return {"metadata": {"name": name, "namespace": NS, "uid": uid}, "spec": spec}


def claim(
    name: str = "data",
    *,
    cls: str | None = "local",
    size: str | None = "1Gi",
    modes: tuple[str, ...] = (RWO,),
    volume_mode: str | None = None,
    selector: dict[str, Any] | None = None,
    vac: str | None = None,
    bound_to: str | None = None,
    volume_name: str | None = None,
    selected_node: str | None = None,
    uid: str | None = None,
    owner: dict[str, Any] | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    """A PersistentVolumeClaim in NS. `bound_to`: bound (volumeName and bind-completed) to that volume;
    `volume_name`: spec.volumeName alone (prebound by its author, not bound yet)."""
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": uid or f"uid-{name}", "annotations": {}}
    spec: dict[str, Any] = {"accessModes": list(modes)}
    if cls is not None:
        spec["storageClassName"] = cls
    if size is not None:
        spec["resources"] = {"requests": {"storage": size}}
    if volume_mode is not None:
        spec["volumeMode"] = volume_mode
    if selector is not None:
        spec["selector"] = selector
    if vac is not None:
        spec["volumeAttributesClassName"] = vac
    if bound_to is not None:
        spec["volumeName"] = bound_to
        meta["annotations"][volumes.BIND_COMPLETED] = "yes"
    if volume_name is not None:
        spec["volumeName"] = volume_name
    if selected_node is not None:
        meta["annotations"][volumes.SELECTED_NODE] = selected_node
    if owner is not None:
        meta["ownerReferences"] = [owner]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": spec}


def owned_by(uid: str = POD_UID, controller: bool = True) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": uid, "controller": controller}


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    """A node selector (or label selector) expression."""
    expression: dict[str, Any] = {"key": key, "operator": op}
    if values:
        expression["values"] = list(values)
    return expression


def term(key: str, op: str, *values: str) -> dict[str, Any]:
    """A node selector term of one expression."""
    return {"matchExpressions": [expr(key, op, *values)]}


def volume(
    name: str,
    *,
    cls: str | None = "local",
    size: str = "1Gi",
    modes: tuple[str, ...] = (RWO,),
    volume_mode: str | None = None,
    vac: str | None = None,
    labels: dict[str, str] | None = None,
    terms: list[dict[str, Any]] | None = None,
    phase: str | None = "Available",
    claim_ref: tuple[str, str | None] | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    """A PersistentVolume. `terms`: its required node affinity; `claim_ref`: (claim name in NS, uid or None)."""
    meta: dict[str, Any] = {"name": name, "labels": dict(labels or {})}
    spec: dict[str, Any] = {"capacity": {"storage": size}, "accessModes": list(modes)}
    if cls is not None:
        spec["storageClassName"] = cls
    if volume_mode is not None:
        spec["volumeMode"] = volume_mode
    if vac is not None:
        spec["volumeAttributesClassName"] = vac
    if terms is not None:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": terms}}
    if claim_ref is not None:
        ref: dict[str, Any] = {"kind": "PersistentVolumeClaim", "namespace": NS, "name": claim_ref[0]}
        if claim_ref[1] is not None:
            ref["uid"] = claim_ref[1]
        spec["claimRef"] = ref
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    pv: dict[str, Any] = {"metadata": meta, "spec": spec}
    if phase is not None:
        pv["status"] = {"phase": phase}
    return pv


def storage_class(
    name: str = "local",
    *,
    wffc: bool = True,
    provisioner: str = volumes.NO_PROVISIONER,
    topologies: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    sc: dict[str, Any] = {
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": volumes.WAIT_FOR_FIRST_CONSUMER if wffc else "Immediate",
    }
    if topologies is not None:
        sc["allowedTopologies"] = topologies
    return sc


def topology(*expressions: tuple[str, list[str]]) -> dict[str, Any]:
    """An allowedTopologies term: every (key, values) must hold."""
    return {"matchLabelExpressions": [{"key": k, "values": v} for k, v in expressions]}


DEFAULT_CLASSES = (storage_class("local"), storage_class("csi", provisioner="csi.example.com"))


def cache(
    claims: Sequence[dict[str, Any]] = (),
    pvs: Sequence[dict[str, Any]] = (),
    classes: tuple[dict[str, Any], ...] = DEFAULT_CLASSES,
) -> volumes.VolumeCache:
    return volumes.VolumeCache(
        claims={volumes.claim_key(NS, c["metadata"]["name"]): c for c in claims},
        volumes={v["metadata"]["name"]: v for v in pvs},
        classes={c["metadata"]["name"]: c for c in classes},
    )


def attempt(p: dict[str, Any], vc: volumes.VolumeCache | None) -> framework.Cycle | framework.PodRefusal:
    """The pod's attempt through every PreFilter of the profile."""
    return framework.prepare(p, framework.Snapshot(fit.NodeUsage(), vc), plugins.PROFILE)


def cycle(p: dict[str, Any], vc: volumes.VolumeCache | None) -> framework.Cycle:
    prepared = attempt(p, vc)
    assert isinstance(prepared, framework.Cycle), prepared
    return prepared


def verdict(c: framework.Cycle, n: dict[str, Any]) -> tuple[str, str] | None:
    """(the plugin that refuses the node, its words), or None when the pod fits."""
    refused = c.refusal(n)
    return None if refused is None else (refused[0].name, refused[1]())


def refusal(p: dict[str, Any], vc: volumes.VolumeCache | None) -> str:
    prepared = attempt(p, vc)
    assert isinstance(prepared, framework.PodRefusal), prepared
    return prepared.message


# ---- pod_claims -------------------------------------------------------------------------------------------------
def test_pod_claims_are_the_claim_and_ephemeral_volumes_in_the_pods_order():
    p = pod(
        {"name": "config", "configMap": {"name": "settings"}},
        pvc_volume("data"),
        {"name": "tmp", "emptyDir": {}},
        ephemeral_volume("scratch"),
        pvc_volume("logs", name="logs"),
        name="trainer",
    )
    assert volumes.pod_claims(p) == [
        volumes.PodClaim("data", ephemeral=False),
        volumes.PodClaim("trainer-scratch", ephemeral=True),
        volumes.PodClaim("logs", ephemeral=False),
    ]


@pytest.mark.parametrize("spec_volumes", [None, []])
def test_a_pod_without_volumes_has_no_claims(spec_volumes):
    p = pod()
    if spec_volumes is not None:
        p["spec"]["volumes"] = spec_volumes
    assert volumes.pod_claims(p) == []


@pytest.mark.parametrize(
    ("spec_volumes", "field"),
    [
        ({"name": "data"}, "spec.volumes is not an array"),
        ("data", "spec.volumes is not an array"),
        ([pvc_volume("ok"), "data"], "spec.volumes[1] is not an object"),
        ([{"name": "d", "persistentVolumeClaim": "data"}], "spec.volumes[0].persistentVolumeClaim.claimName"),
        ([{"name": "d", "persistentVolumeClaim": {}}], "spec.volumes[0].persistentVolumeClaim.claimName"),
        ([{"name": "d", "persistentVolumeClaim": {"claimName": ""}}], "spec.volumes[0].persistentVolumeClaim"),
        ([pvc_volume("a"), {"name": "d", "persistentVolumeClaim": {"claimName": 7}}], "spec.volumes[1].persistent"),
    ],
)
def test_a_volume_of_the_wrong_shape_raises_fit_error_naming_the_field(spec_volumes, field):
    p = pod()
    p["spec"]["volumes"] = spec_volumes
    with pytest.raises(fit.FitError) as raised:
        volumes.pod_claims(p)
    assert field in str(raised.value)
    # The PreFilter refuses the pod with the same words, on every node.
    assert field in refusal(p, cache())


def test_a_spec_of_the_wrong_shape_raises_fit_error():
    with pytest.raises(fit.FitError, match="spec"):
        volumes.pod_claims({"metadata": {"name": "p"}, "spec": "nope"})


# ---- VolumeBinding PreFilter ------------------------------------------------------------------------------------
def test_a_pod_without_claims_is_not_judged_by_the_volume_plugins():
    for vc in (cache(), None):
        c = cycle(pod({"name": "tmp", "emptyDir": {}}), vc)
        assert not c.applies("VolumeBinding") and not c.applies("VolumeZone")
        assert verdict(c, node()) is None


def test_a_pod_with_claims_is_refused_where_no_volumes_are_watched():
    assert "watches no volumes" in refusal(pod(pvc_volume("data")), None)


@pytest.mark.parametrize(
    ("pod_volumes", "claims", "pvs", "words"),
    [
        pytest.param([pvc_volume("data")], [], [], 'persistentvolumeclaim "data" not found', id="claim-not-found"),
        pytest.param(
            [pvc_volume("data"), pvc_volume("logs", name="logs")],
            [claim("data")],
            [],
            'persistentvolumeclaim "logs" not found',
            id="second-claim-not-found",
        ),
        pytest.param(
            [ephemeral_volume("scratch")],
            [],
            [],
            'waiting for the ephemeral volume controller to create the persistentvolumeclaim "p-scratch"',
            id="ephemeral-not-created",
        ),
        pytest.param(
            [ephemeral_volume("scratch")],
            [claim("p-scratch")],
            [],
            'persistentvolumeclaim "p-scratch" was not created for the pod',
            id="ephemeral-without-owner",
        ),
        pytest.param(
            [ephemeral_volume("scratch")],
            [claim("p-scratch", owner=owned_by("an-earlier-pod-of-that-name"))],
            [],
            'persistentvolumeclaim "p-scratch" was not created for the pod',
            id="ephemeral-owned-by-another-pod",
        ),
        pytest.param(
            [ephemeral_volume("scratch")],
            [claim("p-scratch", owner=owned_by(controller=False))],
            [],
            'persistentvolumeclaim "p-scratch" was not created for the pod',
            id="ephemeral-owner-not-controller",
        ),
        pytest.param(
            [pvc_volume("data")],
            [claim("data", deleting=True)],
            [],
            'persistentvolumeclaim "data" is being deleted',
            id="claim-deleting",
        ),
        pytest.param(
            [pvc_volume("data")],
            [claim("data", bound_to="pv-1", deleting=True)],
            [volume("pv-1", claim_ref=("data", None), phase="Bound")],
            'persistentvolumeclaim "data" is being deleted',
            id="bound-claim-deleting",
        ),
        pytest.param(
            [pvc_volume("data")],
            [claim("data", bound_to="pv-gone")],
            [],
            'bound to persistentvolume "pv-gone", which does not exist',
            id="bound-pv-missing",
        ),
        pytest.param(
            [pvc_volume("data")],
            [claim("data", cls="gone")],
            [],
            'storageclass.storage.k8s.io "gone" not found',
            id="class-missing",
        ),
        pytest.param(
            [pvc_volume("data")],
            [claim("data", cls="fast")],
            [],
            "pod has unbound immediate PersistentVolumeClaims",
            id="immediate-class-unbound",
        ),
        pytest.param(
            [pvc_volume("data")],
            [claim("data", cls="")],
            [],
            "pod has unbound immediate PersistentVolumeClaims",
            id="no-class-unbound",
        ),
        pytest.param(
            [pvc_volume("data")],
            [claim("data", cls=None)],
            [],
            "pod has unbound immediate PersistentVolumeClaims",
            id="class-unset-unbound",
        ),
        pytest.param(
            [pvc_volume("data")],
            [claim("data", volume_name="pv-1")],
            [volume("pv-1")],
            "pod has unbound immediate PersistentVolumeClaims",
            id="prebound-claim-is-immediate",
        ),
    ],
)
def test_the_prefilter_refuses_the_pod_on_every_node(pod_volumes, claims, pvs, words):
    classes = (*DEFAULT_CLASSES, storage_class("fast", wffc=False, provisioner="csi.example.com"))
    said = refusal(pod(*pod_volumes), cache(claims, pvs, classes))
    assert words in said


def test_an_ephemeral_claim_controlled_by_the_pod_is_judged():
    p = pod(ephemeral_volume("scratch"))
    c = cycle(p, cache([claim("p-scratch", cls="csi", owner=owned_by())]))
    assert c.applies("VolumeBinding")
    assert verdict(c, node()) is None


def test_a_bound_claim_needs_no_class_and_is_bound_whatever_its_binding_mode():
    # A bound claim is judged by its volume alone: its class (here gone, or Immediate) is never read.
    for cls in ("gone", "fast", ""):
        vc = cache([claim("data", cls=cls, bound_to="pv-1")], [volume("pv-1", cls=cls, phase="Bound")])
        assert verdict(cycle(pod(pvc_volume("data")), vc), node()) is None


def test_a_claim_is_bound_only_once_the_controller_has_completed_it():
    bound = claim("data", bound_to="pv-1")
    assert volumes.is_bound(bound)
    assert not volumes.is_bound(claim("data", volume_name="pv-1"))
    assert not volumes.is_bound(claim("data"))
    no_name = claim("data")
    no_name["metadata"]["annotations"][volumes.BIND_COMPLETED] = "yes"
    assert not volumes.is_bound(no_name)


# ---- VolumeBinding Filter: bound claims -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("terms", "admitted"),
    [
        ([term(ZONE, "In", "a")], {"na"}),
        ([term(ZONE, "In", "a", "b")], {"na", "nb"}),
        ([term(ZONE, "NotIn", "a")], {"nb", "nbare"}),
        ([term(ZONE, "In", "a"), term(ZONE, "In", "b")], {"na", "nb"}),  # terms are ORed
        ([{"matchExpressions": [expr(ZONE, "In", "a", "b"), expr(HOSTNAME, "In", "nb")]}], {"nb"}),  # ANDed
        ([term(ZONE, "Exists")], {"na", "nb"}),
        ([term(ZONE, "DoesNotExist")], {"nbare"}),
        ([term(HOSTNAME, "In", "na")], {"na"}),
        (None, {"na", "nb", "nbare"}),
    ],
)
def test_a_bound_claims_volume_node_affinity_admits_or_refuses_the_node(terms, admitted):
    vc = cache([claim("data", bound_to="pv-1")], [volume("pv-1", terms=terms, phase="Bound", claim_ref=("data", None))])
    c = cycle(pod(pvc_volume("data")), vc)
    nodes = {"na": node("na", {ZONE: "a"}), "nb": node("nb", {ZONE: "b"}), "nbare": node("nbare")}
    for name, n in nodes.items():
        said = verdict(c, n)
        if name in admitted:
            assert said is None, (name, said)
        else:
            assert said is not None and said[0] == "VolumeBinding", (name, said)
            assert "volume node affinity conflict" in said[1] and "pv-1" in said[1] and name in said[1]


def test_node_affinity_matches_reads_the_volumes_required_terms():
    n = node("n1", {ZONE: "a"})
    assert volumes.node_affinity_matches(volume("v"), n)
    assert volumes.node_affinity_matches(volume("v", terms=[term(ZONE, "In", "a")]), n)
    assert not volumes.node_affinity_matches(volume("v", terms=[term(ZONE, "In", "b")]), n)
    assert not volumes.node_affinity_matches(volume("v", terms=[]), n)  # no term: no node


def test_a_volumes_node_affinity_is_judged_on_the_nodes_labels_alone():
    # kube's CheckNodeAffinity matches the terms to a Node made of the labels only: with no name there are no
    # fields, so matchFields are not looked at (a term of matchFields only admits every node).
    n = node("n1", {ZONE: "a"})
    name_is = {"key": "metadata.name", "operator": "In", "values": ["n2"]}
    assert volumes.node_affinity_matches(volume("v", terms=[{"matchFields": [name_is]}]), n)
    with_zone = {"matchExpressions": [expr(ZONE, "In", "a")], "matchFields": [name_is]}
    assert volumes.node_affinity_matches(volume("v", terms=[with_zone]), n)
    other_zone = {"matchExpressions": [expr(ZONE, "In", "b")], "matchFields": [name_is]}
    assert not volumes.node_affinity_matches(volume("v", terms=[other_zone]), n)
    assert not volumes.node_affinity_matches(volume("v", terms=[{"matchExpressions": [], "matchFields": []}]), n)


# ---- VolumeBinding Filter: unbound claims, selected-node --------------------------------------------------------
def test_an_unbound_claim_being_provisioned_fits_only_its_selected_node():
    vc = cache([claim("data", cls="csi", selected_node="n1")])
    c = cycle(pod(pvc_volume("data")), vc)
    assert verdict(c, node("n1")) is None
    said = verdict(c, node("n2"))
    assert said is not None and said[0] == "VolumeBinding"
    assert "being provisioned on node n1" in said[1] and "n2" in said[1]


def test_a_selected_node_wins_over_a_static_volume_elsewhere():
    # A volume that fits n2 does not make n2 fit: the claim is being provisioned on n1.
    pvs = [volume("pv-2", cls="csi", terms=[term(HOSTNAME, "In", "n2")])]
    vc = cache([claim("data", cls="csi", selected_node="n1")], pvs)
    c = cycle(pod(pvc_volume("data")), vc)
    assert verdict(c, node("n2")) is not None
    assert verdict(c, node("n1")) is None


def test_a_claim_being_provisioned_on_the_node_still_needs_its_class_to_provision_there():
    # kube's FindPodVolumes puts a claim whose selected-node is this node among the claims to provision
    # (checkVolumeProvisions): a class with no provisioner, or allowedTopologies that exclude the node, refuse it;
    # no static volume is looked for.
    classes = (
        *DEFAULT_CLASSES,
        storage_class("zoned", provisioner="csi.example.com", topologies=[topology((ZONE, ["a"]))]),
    )
    pvs = [volume("local-n1", terms=[term(HOSTNAME, "In", "n1")])]
    for cls, n in (("local", node("n1")), ("zoned", node("n1", {ZONE: "b"}))):
        c = cycle(pod(pvc_volume("data")), cache([claim("data", cls=cls, selected_node="n1")], pvs, classes))
        said = verdict(c, n)
        assert said is not None and said[0] == "VolumeBinding", cls
        assert 'persistentvolumeclaim "data" is being provisioned on node n1, but' in said[1], said
    c = cycle(pod(pvc_volume("data")), cache([claim("data", cls="zoned", selected_node="n1")], pvs, classes))
    assert verdict(c, node("n1", {ZONE: "a"})) is None


# ---- VolumeBinding Filter: static volumes -----------------------------------------------------------------------
def test_a_local_volume_fits_only_the_node_it_is_on():
    vc = cache([claim("data")], [volume("local-n1", terms=[term(HOSTNAME, "In", "n1")])])
    c = cycle(pod(pvc_volume("data")), vc)
    assert verdict(c, node("n1")) is None
    said = verdict(c, node("n2"))
    assert said is not None and said[0] == "VolumeBinding"
    assert 'no available persistentvolume for persistentvolumeclaim "data"' in said[1]
    assert "provisions none" in said[1]


# (what the claim asks, what the volume is, whether the volume is matched): each criterion both ways.
CRITERIA = [
    pytest.param({}, {}, True, id="plain"),
    pytest.param({}, {"cls": "other"}, False, id="class-differs"),
    pytest.param({}, {"cls": None}, False, id="volume-without-class"),
    pytest.param({"cls": ""}, {"cls": None}, True, id="both-without-class"),
    pytest.param({"size": "2Gi"}, {"size": "1Gi"}, False, id="too-small"),
    pytest.param({"size": "1Gi"}, {"size": "1G"}, False, id="1G-is-less-than-1Gi"),
    pytest.param({"size": "1Gi"}, {"size": "1073741824"}, True, id="exactly-the-request"),
    pytest.param({"size": "1G"}, {"size": "1Gi"}, True, id="larger"),
    pytest.param({"size": None}, {"size": "1Mi"}, True, id="no-request"),
    pytest.param({"modes": (RWO, ROX)}, {"modes": (RWO,)}, False, id="mode-missing"),
    pytest.param({"modes": (RWO, ROX)}, {"modes": (RWX, ROX, RWO)}, True, id="modes-superset"),
    pytest.param({"modes": (RWX,)}, {"modes": (RWO,)}, False, id="rwx-on-rwo"),
    pytest.param({"modes": ()}, {"modes": (ROX,)}, True, id="no-mode-asked"),
    pytest.param({"volume_mode": "Block"}, {}, False, id="block-on-filesystem-default"),
    pytest.param({"volume_mode": "Block"}, {"volume_mode": "Filesystem"}, False, id="block-on-filesystem"),
    pytest.param({"volume_mode": "Block"}, {"volume_mode": "Block"}, True, id="block-on-block"),
    pytest.param({}, {"volume_mode": "Block"}, False, id="filesystem-default-on-block"),
    pytest.param({"volume_mode": "Filesystem"}, {}, True, id="filesystem-on-default"),
    pytest.param({"vac": "gold"}, {}, False, id="attributes-class-missing"),
    pytest.param({}, {"vac": "gold"}, False, id="attributes-class-unasked"),
    pytest.param({"vac": "gold"}, {"vac": "silver"}, False, id="attributes-class-differs"),
    pytest.param({"vac": "gold"}, {"vac": "gold"}, True, id="attributes-class-same"),
    pytest.param({"selector": {"matchLabels": {"tier": "fast"}}}, {"labels": {"tier": "fast"}}, True, id="labels"),
    pytest.param({"selector": {"matchLabels": {"tier": "fast"}}}, {"labels": {"tier": "slow"}}, False, id="label-no"),
    pytest.param({"selector": {"matchLabels": {"tier": "fast"}}}, {}, False, id="label-absent"),
    pytest.param(
        {"selector": {"matchLabels": {"tier": "fast", "disk": "ssd"}}},
        {"labels": {"tier": "fast"}},
        False,
        id="labels-all-needed",
    ),
    pytest.param(
        {"selector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["fast", "gold"]}]}},
        {"labels": {"tier": "gold"}},
        True,
        id="expr-in",
    ),
    pytest.param(
        {"selector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["fast"]}]}},
        {"labels": {"tier": "slow"}},
        False,
        id="expr-in-no",
    ),
    pytest.param(
        {"selector": {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["slow"]}]}},
        {},
        True,
        id="expr-notin-absent",
    ),
    pytest.param(
        {"selector": {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["slow"]}]}},
        {"labels": {"tier": "slow"}},
        False,
        id="expr-notin-no",
    ),
    pytest.param(
        {"selector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]}},
        {"labels": {"tier": "x"}},
        True,
        id="expr-exists",
    ),
    pytest.param(
        {"selector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]}}, {}, False, id="expr-exists-no"
    ),
    pytest.param(
        {"selector": {"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}},
        {},
        True,
        id="expr-doesnotexist",
    ),
    pytest.param(
        {"selector": {"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}},
        {"labels": {"tier": "x"}},
        False,
        id="expr-doesnotexist-no",
    ),
    pytest.param(
        {
            "selector": {
                "matchLabels": {"disk": "ssd"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["fast"]}],
            }
        },
        {"labels": {"tier": "fast"}},
        False,
        id="labels-and-expressions-both-needed",
    ),
    pytest.param({}, {"terms": [term(ZONE, "In", "a")]}, True, id="affinity-admits"),
    pytest.param({}, {"terms": [term(ZONE, "In", "b")]}, False, id="affinity-refuses"),
    pytest.param({}, {"terms": [term(ZONE, "NotIn", "a")]}, False, id="affinity-notin-refuses"),
    pytest.param({}, {"phase": "Bound"}, False, id="phase-bound"),
    pytest.param({}, {"phase": "Released"}, False, id="phase-released"),
    pytest.param({}, {"phase": "Pending"}, False, id="phase-pending"),
    pytest.param({}, {"phase": None}, False, id="phase-unset"),
    pytest.param({}, {"deleting": True}, False, id="volume-deleting"),
    pytest.param({}, {"claim_ref": ("other", None)}, False, id="claimed-by-another"),
    pytest.param({}, {"claim_ref": ("other", "uid-data")}, False, id="claimed-by-another-name"),
    pytest.param({}, {"claim_ref": ("data", "uid-of-an-earlier-data")}, False, id="claimed-by-earlier-namesake"),
    pytest.param({}, {"claim_ref": ("data", "uid-data")}, True, id="prebound"),
    pytest.param({}, {"claim_ref": ("data", None)}, True, id="prebound-without-uid"),
    pytest.param({}, {"claim_ref": ("data", None), "phase": "Bound"}, True, id="prebound-any-phase"),
    pytest.param(
        {"selector": {"matchLabels": {"tier": "fast"}}}, {"claim_ref": ("data", None)}, True, id="prebound-no-selector"
    ),
    pytest.param({"modes": (RWX,)}, {"claim_ref": ("data", None)}, True, id="prebound-no-access-modes"),
    pytest.param({}, {"claim_ref": ("data", None), "terms": [term(ZONE, "In", "b")]}, False, id="prebound-elsewhere"),
    pytest.param({}, {"claim_ref": ("data", None), "cls": "other"}, False, id="prebound-other-class"),
    pytest.param({"size": "2Gi"}, {"claim_ref": ("data", None)}, False, id="prebound-too-small"),
    pytest.param({}, {"claim_ref": ("data", None), "volume_mode": "Block"}, False, id="prebound-other-volume-mode"),
    pytest.param({}, {"claim_ref": ("data", None), "deleting": True}, False, id="prebound-deleting"),
]


@pytest.mark.parametrize(("asks", "is_", "matched"), CRITERIA)
def test_matching_volume_applies_each_criterion(asks, is_, matched):
    pvc = claim("data", **asks)
    pv = volume("pv-1", **is_)
    n = node("n1", {ZONE: "a"})
    found = cache([pvc], [pv]).matching_volume(pvc, n)
    assert found is (pv if matched else None)
    if pvc["spec"].get("storageClassName") != "local":
        return  # not a WaitForFirstConsumer claim: the PreFilter refuses it before any Filter
    # Through the Filter: with no provisioner, the node fits exactly when the volume is matched.
    said = verdict(cycle(pod(pvc_volume("data")), cache([pvc], [pv])), n)
    assert (said is None) is matched, said


def test_a_prebound_volume_wins_over_a_smaller_free_one():
    pvc = claim("data")
    pvs = [
        volume("free-1g"),
        volume("ours-10g", size="10Gi", claim_ref=("data", "uid-data")),
        volume("free-2g", size="2Gi"),
    ]
    assert cache([pvc], pvs).matching_volume(pvc, node())["metadata"]["name"] == "ours-10g"


def test_a_prebound_volume_the_node_cannot_use_leaves_no_static_volume_on_that_node():
    # kube: "the prebound PV (and therefore PVC) is not suitable for this node" - no other volume is chosen for the
    # claim, since the PersistentVolume controller binds it to its prebound volume anyway.
    pvc = claim("data")
    ours = volume("ours", claim_ref=("data", None), terms=[term(HOSTNAME, "In", "n1")])
    vc = cache([pvc], [volume("free"), ours])
    assert vc.matching_volume(pvc, node("n1")) is ours
    assert vc.matching_volume(pvc, node("n2")) is None
    c = cycle(pod(pvc_volume("data")), vc)
    assert verdict(c, node("n1")) is None
    assert verdict(c, node("n2")) is not None


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 1, 0), (1, 2, 0)])
def test_the_smallest_matching_volume_is_chosen_whatever_the_order(order):
    pvc = claim("data", size="2Gi")
    sizes = ["5Gi", "2Gi", "3Gi"]
    pvs = [volume(f"pv-{sizes[i]}", size=sizes[i]) for i in order] + [volume("pv-1Gi", size="1Gi")]
    pvs.append(volume("pv-2Gi-elsewhere", size="2Gi", terms=[term(HOSTNAME, "In", "n9")]))
    assert cache([pvc], pvs).matching_volume(pvc, node())["metadata"]["name"] == "pv-2Gi"


def test_an_assumed_volume_is_skipped_for_other_claims_until_forgotten():
    pvc = claim("data")
    pvs = [volume("small"), volume("big", size="5Gi")]
    vc = cache([pvc], pvs)
    n = node()
    vc.assume("small", volumes.claim_key(NS, "other"))
    assert vc.assumed_for("small") == f"{NS}/other"
    assert vc.matching_volume(pvc, n)["metadata"]["name"] == "big"
    vc.assume("big", volumes.claim_key(NS, "third"))
    assert vc.matching_volume(pvc, n) is None
    vc.forget(volumes.claim_key(NS, "other"))
    assert vc.assumed_for("small") is None and vc.assumed_for("big") == f"{NS}/third"
    assert vc.matching_volume(pvc, n)["metadata"]["name"] == "small"


def test_a_volume_assumed_for_the_claim_itself_is_still_its_match():
    pvc = claim("data")
    vc = cache([pvc], [volume("small")])
    vc.assume("small", volumes.claim_key(NS, "data"))
    assert vc.matching_volume(pvc, node())["metadata"]["name"] == "small"


def test_the_watch_showing_the_claim_ref_ends_the_assumption():
    vc = cache([claim("data")], [volume("small")])
    key = volumes.claim_key(NS, "other")
    vc.assume("small", key)
    vc.volume_changed(volume("small"))  # a change that does not show the claimRef yet
    assert vc.assumed_for("small") == key
    vc.volume_changed(volume("small", claim_ref=("other", "uid-other")))
    assert vc.assumed_for("small") is None


def test_excluded_volumes_are_never_matched():
    pvc = claim("data")
    vc = cache([pvc], [volume("a"), volume("b", size="2Gi")])
    assert vc.matching_volume(pvc, node(), frozenset({"a"}))["metadata"]["name"] == "b"
    assert vc.matching_volume(pvc, node(), frozenset({"a", "b"})) is None


@pytest.mark.parametrize(("count", "fits"), [(1, False), (2, True)])
def test_two_claims_of_one_pod_never_get_the_same_volume(count, fits):
    claims = [claim("a"), claim("b")]
    pvs = [volume(f"pv-{i}") for i in range(count)]
    c = cycle(pod(pvc_volume("a", name="a"), pvc_volume("b", name="b")), cache(claims, pvs))
    said = verdict(c, node())
    if fits:
        assert said is None
    else:
        assert said is not None and said[0] == "VolumeBinding" and 'persistentvolumeclaim "b"' in said[1]


def test_bound_and_unbound_claims_of_one_pod_are_judged_together():
    claims = [claim("bound", bound_to="pv-b"), claim("fresh", cls="csi")]
    pvs = [volume("pv-b", terms=[term(ZONE, "In", "a")], phase="Bound", claim_ref=("bound", None))]
    c = cycle(pod(pvc_volume("bound", name="b"), pvc_volume("fresh", name="f")), cache(claims, pvs))
    assert verdict(c, node("na", {ZONE: "a"})) is None
    assert verdict(c, node("nb", {ZONE: "b"})) is not None


# ---- VolumeBinding Filter: provisioning -------------------------------------------------------------------------
@pytest.mark.parametrize("provisioner", [volumes.NO_PROVISIONER, ""])
def test_a_class_that_provisions_nothing_refuses_a_node_without_a_volume(provisioner):
    classes = (storage_class("manual", provisioner=provisioner),)
    c = cycle(pod(pvc_volume("data")), cache([claim("data", cls="manual")], [], classes))
    said = verdict(c, node())
    assert said is not None and said[0] == "VolumeBinding"
    assert "storageclass manual provisions none" in said[1]


@pytest.mark.parametrize(
    ("topologies", "admitted"),
    [
        (None, {"na", "nb", "nc", "nbare"}),
        ([], {"na", "nb", "nc", "nbare"}),
        ([topology((ZONE, ["a", "b"]))], {"na", "nb"}),
        ([topology((ZONE, ["a"])), topology((ZONE, ["c"]))], {"na", "nc"}),  # terms are ORed
        ([topology((ZONE, ["a", "b"]), (HOSTNAME, ["nb"]))], {"nb"}),  # expressions are ANDed
        ([topology((ZONE, []))], set()),  # no value: the term selects nothing
        ([{}], set()),  # a term without expressions selects nothing (kube's MatchTopologySelectorTerms)
        ([{}, topology((ZONE, ["c"]))], {"nc"}),
    ],
)
def test_allowed_topologies_admit_or_refuse_provisioning_on_a_node(topologies, admitted):
    classes = (storage_class("csi", provisioner="csi.example.com", topologies=topologies),)
    c = cycle(pod(pvc_volume("data")), cache([claim("data", cls="csi")], [], classes))
    nodes = {
        "na": node("na", {ZONE: "a"}),
        "nb": node("nb", {ZONE: "b"}),
        "nc": node("nc", {ZONE: "c"}),
        "nbare": node("nbare"),
    }
    for name, n in nodes.items():
        said = verdict(c, n)
        assert volumes.topology_allows(classes[0], n) is (name in admitted)
        if name in admitted:
            assert said is None, (name, said)
        else:
            assert said is not None and said[0] == "VolumeBinding", (name, said)
            assert "allowedTopologies of storageclass csi exclude it" in said[1]


def test_a_static_volume_is_preferred_to_provisioning_but_provisioning_covers_other_nodes():
    classes = (storage_class("csi", provisioner="csi.example.com", topologies=[topology((ZONE, ["a"]))]),)
    pvs = [volume("local-nb", cls="csi", terms=[term(HOSTNAME, "In", "nb")])]
    c = cycle(pod(pvc_volume("data")), cache([claim("data", cls="csi")], pvs, classes))
    assert verdict(c, node("na", {ZONE: "a"})) is None  # provisioned
    assert verdict(c, node("nb", {ZONE: "b"})) is None  # the static volume, though the class cannot provision there
    assert verdict(c, node("nc", {ZONE: "c"})) is not None


# ---- VolumeZone -------------------------------------------------------------------------------------------------
def zoned(labels: dict[str, str]) -> framework.Cycle:
    vc = cache(
        [claim("data", bound_to="pv-1")], [volume("pv-1", labels=labels, phase="Bound", claim_ref=("data", None))]
    )
    return cycle(pod(pvc_volume("data")), vc)


@pytest.mark.parametrize(
    ("pv_labels", "node_labels", "fits"),
    [
        ({ZONE: "a"}, {ZONE: "a"}, True),
        ({ZONE: "a"}, {ZONE: "b"}, False),
        ({ZONE: "a__b"}, {ZONE: "b"}, True),
        ({ZONE: "a__b__c"}, {ZONE: "c"}, True),
        ({ZONE: "a__b"}, {ZONE: "c"}, False),
        ({ZONE: "a__b"}, {ZONE: "a__b"}, False),  # the node's value is one zone
        ({REGION: "r1"}, {REGION: "r1", ZONE: "x"}, True),
        ({REGION: "r1"}, {REGION: "r2"}, False),
        ({ZONE: "a", REGION: "r1"}, {ZONE: "a", REGION: "r2"}, False),  # every label must hold
        ({ZONE: "a", REGION: "r1"}, {ZONE: "a", REGION: "r1"}, True),
        ({ZONE: "a"}, {REGION: "r1"}, False),  # the node has a zone constraint, not this label
        ({BETA_ZONE: "a"}, {BETA_ZONE: "a"}, True),
        ({BETA_ZONE: "a"}, {BETA_ZONE: "b", ZONE: "a"}, False),  # the beta label is the node's, and differs
        ({BETA_ZONE: "a"}, {ZONE: "a"}, True),  # the volume's beta label against the node's GA label
        ({BETA_ZONE: "a__b"}, {ZONE: "b"}, True),
        ({BETA_ZONE: "a"}, {ZONE: "b"}, False),
        ({BETA_REGION: "r1"}, {REGION: "r1"}, True),
        ({BETA_REGION: "r1"}, {REGION: "r2"}, False),
        ({ZONE: "a"}, {BETA_ZONE: "a"}, False),  # no fallback the other way
        ({ZONE: "a"}, {}, True),  # a node with no zone or region label: a single-zone cluster
        ({ZONE: "a", REGION: "r1"}, {"other": "x"}, True),
        ({ZONE: "a__"}, {ZONE: "b"}, True),  # a value that lists an empty zone is ignored (kube's LabelZonesToSet)
    ],
)
def test_volume_zone_compares_the_bound_volumes_zone_labels_with_the_nodes(pv_labels, node_labels, fits):
    c = zoned(pv_labels)
    n = node("n1", node_labels)
    said = verdict(c, n)
    assert (volumes.zone_conflict(volume("pv-1", labels=pv_labels), n) is None) is fits
    if fits:
        assert said is None, said
    else:
        assert said is not None and said[0] == "VolumeZone", said
        assert "node n1 is not in the zone of persistentvolume pv-1" in said[1]


def test_volume_zone_names_the_conflicting_label():
    said = verdict(zoned({ZONE: "a__b", REGION: "r1"}), node("n1", {ZONE: "c", REGION: "r1"}))
    assert said is not None and f"{ZONE}=a__b" in said[1]


def test_volume_zone_judges_every_bound_volume_of_the_pod():
    claims = [claim("a", bound_to="pv-a"), claim("b", bound_to="pv-b")]
    pvs = [
        volume("pv-a", labels={ZONE: "a__b"}, phase="Bound", claim_ref=("a", None)),
        volume("pv-b", labels={ZONE: "b"}, phase="Bound", claim_ref=("b", None)),
    ]
    c = cycle(pod(pvc_volume("a", name="a"), pvc_volume("b", name="b")), cache(claims, pvs))
    assert verdict(c, node("nb", {ZONE: "b"})) is None
    said = verdict(c, node("na", {ZONE: "a"}))
    assert said is not None and said[0] == "VolumeZone" and "persistentvolume pv-b" in said[1]


@pytest.mark.parametrize(
    ("claims", "pvs"),
    [
        ([claim("data", bound_to="pv-1")], [volume("pv-1", labels={"team": "x"}, phase="Bound")]),  # not zoned
        ([claim("data", cls="csi")], [volume("pv-1", cls="csi", labels={ZONE: "b"})]),  # unbound: VolumeBinding's
    ],
)
def test_volume_zone_skips_a_pod_without_a_zoned_bound_volume(claims, pvs):
    c = cycle(pod(pvc_volume("data")), cache(claims, pvs))
    assert not c.applies("VolumeZone")
    assert verdict(c, node("n1", {ZONE: "a"})) is None


# ---- the scheduling queue's claim waits -------------------------------------------------------------------------
def test_a_pod_waiting_on_claims_is_retried_when_one_of_its_claims_changes_and_not_another():
    async def scenario() -> None:
        q = SchedulingQueue({}, 1.0, 10.0)
        q.wait_for_claims("team/p", ["team/data", "team/logs"])
        q.wait_for_claims("team/q", ["team/other"])
        q.changed(ClusterEvent(framework.PVC, name="team/unrelated"))
        q.changed(ClusterEvent(framework.PVC, name="other/data"))  # another namespace's claim of that name
        assert await drain(q) == []
        q.changed(ClusterEvent(framework.PVC, name="team/logs"))
        assert await drain(q) == ["team/p"]
        q.changed(ClusterEvent(framework.PVC, name="team/other"))
        assert await drain(q) == ["team/q"]

    run_async(scenario)


def test_pods_sharing_a_claim_are_all_retried_on_its_change():
    async def scenario() -> None:
        q = SchedulingQueue({}, 1.0, 10.0)
        q.wait_for_claims("team/p", ["team/shared"])
        q.wait_for_claims("team/q", ["team/shared", "team/own"])
        q.changed(ClusterEvent(framework.PVC, name="team/shared"))
        assert sorted(await drain(q)) == ["team/p", "team/q"]

    run_async(scenario)


def test_a_volume_change_retries_every_claim_waiter_and_no_other_pod():
    async def scenario() -> None:
        q = SchedulingQueue({}, 1.0, 10.0)
        q.wait_for_claims("team/p", ["team/data"])
        q.wait_for_claims("team/q", ["team/logs"])
        q.wait_on_node("team/r", "n1", frozenset({framework.NODE, framework.POD_GONE}))
        q.wait_for_claims("team/none", [])  # waits on nothing: never woken by a volume
        for kind in (framework.PV, framework.STORAGE_CLASS, framework.CSI_NODE):
            q.changed(ClusterEvent(kind))
            assert sorted(await drain(q)) == ["team/p", "team/q"], f"a {kind} may give any claim a volume"

    run_async(scenario)


def test_unwait_and_forget_drop_the_claim_waits():
    async def scenario() -> None:
        q = SchedulingQueue({}, 1.0, 10.0)
        q.wait_for_claims("team/p", ["team/data", "team/shared"])
        q.wait_for_claims("team/q", ["team/shared"])
        q.wait_for_claims("team/r", ["team/data"])
        q.unwait("team/p")
        q.forget("team/r")
        assert q._claims_of == {"team/q": ("team/shared",)}
        assert dict(q._for_claims) == {"team/shared": {"team/q"}}
        q.changed(ClusterEvent(framework.PVC, name="team/data"))
        assert await drain(q) == []
        q.changed(ClusterEvent(framework.PVC, name="team/shared"))
        assert await drain(q) == ["team/q"]
        q.unwait("team/q")
        assert q._claims_of == {} and dict(q._for_claims) == {}
        q.changed(ClusterEvent(framework.PV))
        assert await drain(q) == []

    run_async(scenario)


def test_an_attempt_ends_the_claim_wait_until_it_says_so_again():
    async def scenario() -> None:
        q = SchedulingQueue({}, 0.0, 0.0)
        q.wait_for_claims("team/p", ["team/data"])
        q.attempted("team/p")
        q.changed(ClusterEvent(framework.PVC, name="team/data"))
        assert await drain(q) == []
        q.wait_for_claims("team/p", ["team/data"])
        q.changed(ClusterEvent(framework.PVC, name="team/data"))
        assert await drain(q) == ["team/p"]

    run_async(scenario)


def test_a_claim_change_moves_the_generation_so_a_refused_gang_looks_again():
    q = SchedulingQueue({}, 1.0, 10.0)
    before = q.generation
    q.changed(ClusterEvent(framework.PVC, name="team/data"))
    q.changed(ClusterEvent(framework.PV))
    assert q.generation == before + 2


# ---- matching_volume against an oracle --------------------------------------------------------------------------
GI = 2**30
CLASSES = ("local", "other")
SELECTORS: dict[str, dict[str, Any] | None] = {
    "none": None,
    "fast": {"matchLabels": {"tier": "fast"}},
    "in": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["fast", "slow"]}]},
    "notin": {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["slow"]}]},
    "exists": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]},
    "absent": {"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]},
}
AFFINITIES: dict[str, list[dict[str, Any]] | None] = {
    "none": None,
    "in-a": [term(ZONE, "In", "a")],
    "in-b": [term(ZONE, "In", "b")],
    "notin-a": [term(ZONE, "NotIn", "a")],
    "a-or-b": [term(ZONE, "In", "a"), term(ZONE, "In", "b")],
}
REFS: dict[str, tuple[str, str | None] | None] = {
    "free": None,
    "other": ("other", "uid-other"),
    "ours": ("data", "uid-data"),
    "ours-no-uid": ("data", None),
    "namesake": ("data", "uid-old"),
}
ASSUMED = {"no": None, "other": f"{NS}/other", "ours": f"{NS}/data"}


def selector_admits(name: str, labels: dict[str, str]) -> bool:
    tier = labels.get("tier")
    return {
        "none": True,
        "fast": tier == "fast",
        "in": tier in ("fast", "slow"),
        "notin": tier != "slow",
        "exists": tier is not None,
        "absent": tier is None,
    }[name]


def affinity_admits(name: str, zone: str) -> bool:
    return {"none": True, "in-a": zone == "a", "in-b": zone == "b", "notin-a": zone != "a", "a-or-b": True}[name]


CLAIM_SPECS = st.fixed_dictionaries(
    {
        "gi": st.integers(1, 4),
        "modes": st.sampled_from((frozenset({RWO}), frozenset({ROX}), frozenset({RWO, ROX}), frozenset())),
        "volume_mode": st.sampled_from((None, "Filesystem", "Block")),
        "vac": st.sampled_from((None, "gold")),
        "selector": st.sampled_from(("fast", "fast", *sorted(SELECTORS))),
    }
)
PV_FIELDS = {
    "cls": st.sampled_from(CLASSES),
    "modes": st.sampled_from(
        (frozenset(), frozenset({RWO}), frozenset({ROX}), frozenset({RWO, ROX}), frozenset({RWO, ROX, RWX}))
    ),
    "volume_mode": st.sampled_from((None, "Filesystem", "Block")),
    "vac": st.sampled_from((None, "gold")),
    "tier": st.sampled_from((None, "fast", "slow")),
    "affinity": st.sampled_from(sorted(AFFINITIES)),
    "phase": st.sampled_from(("Available", "Bound", "Released")),
    "ref": st.sampled_from(("free", "other", "namesake")),
    "assumed": st.sampled_from(sorted(ASSUMED)),
    "deleting": st.booleans(),
    "excluded": st.booleans(),
}
"""Each field of a volume's description, over its whole domain."""


@st.composite
def near_miss(draw: st.DrawFn, claim_spec: dict[str, Any]) -> dict[str, Any]:
    """A volume of any size that meets every other criterion of the claim but for up to two fields, drawn over
    their whole domain: each criterion is met and missed, one or two at a time, in many examples."""
    spec: dict[str, Any] = {
        "cls": "local",
        "gi": draw(st.integers(1, 5)),
        "modes": claim_spec["modes"],
        "volume_mode": claim_spec["volume_mode"],
        "vac": claim_spec["vac"],
        "tier": None if claim_spec["selector"] == "absent" else "fast",
        "affinity": "none",
        "phase": "Available",
        "ref": "free",
        "assumed": "no",
        "deleting": False,
        "excluded": False,
    }
    for field in draw(st.permutations(sorted(PV_FIELDS)))[: draw(st.sampled_from((0, 1, 1, 2)))]:
        spec[field] = draw(PV_FIELDS[field])
    return spec


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    """A claim, the volumes (at most one of them prebound to the claim), and the node's zone."""
    claim_spec = draw(CLAIM_SPECS)
    pv_specs = draw(st.lists(near_miss(claim_spec), max_size=6))
    if pv_specs and draw(st.booleans()):
        i = draw(st.integers(0, len(pv_specs) - 1))
        pv_specs[i] = {**pv_specs[i], "ref": draw(st.sampled_from(("ours", "ours-no-uid"))), "assumed": "no"}
        if draw(st.booleans()):  # a node it may not be usable on
            pv_specs[i]["affinity"] = draw(PV_FIELDS["affinity"])
    return claim_spec, pv_specs, draw(st.sampled_from(("a", "b")))


def oracle(claim_spec: dict[str, Any], pv_specs: list[dict[str, Any]], zone: str) -> tuple[str | None, set[str]]:
    """kube's FindMatchingVolume over these volumes, written from its rules: (the prebound volume's name, or None
    with the names of every free volume the claim may take), or (None, set()) when a prebound volume refuses the
    node."""
    wanted_mode = claim_spec["volume_mode"] or "Filesystem"
    fitting: set[str] = set()
    for i, s in enumerate(pv_specs):
        name = f"pv-{i}"
        ref = REFS[s["ref"]]
        assumed = ASSUMED[s["assumed"]]
        ours = ref is not None and ref[0] == "data" and ref[1] in (None, "uid-data")
        if s["cls"] != "local" or s["excluded"]:
            continue
        if ref is not None and not ours:
            continue
        if ref is None and assumed == f"{NS}/other":
            continue
        if s["gi"] < claim_spec["gi"] or (s["volume_mode"] or "Filesystem") != wanted_mode:
            continue
        if s["vac"] != claim_spec["vac"] or s["deleting"]:
            continue
        admits = affinity_admits(s["affinity"], zone)
        if ours:
            return (name if admits else None), set()
        if s["phase"] != "Available" or not selector_admits(
            claim_spec["selector"], {"tier": s["tier"]} if s["tier"] else {}
        ):
            continue
        if admits and claim_spec["modes"] <= s["modes"]:
            fitting.add(name)
    return None, fitting


@settings(max_examples=250)
@given(scenarios())
def test_matching_volume_is_a_smallest_volume_that_meets_every_criterion(scenario):
    claim_spec, pv_specs, zone = scenario
    pvc = claim(
        "data",
        size=f"{claim_spec['gi']}Gi",
        modes=tuple(sorted(claim_spec["modes"])),
        volume_mode=claim_spec["volume_mode"],
        vac=claim_spec["vac"],
        selector=SELECTORS[claim_spec["selector"]],
    )
    pvs = [
        volume(
            f"pv-{i}",
            cls=s["cls"],
            size=f"{s['gi']}Gi",
            modes=tuple(sorted(s["modes"])),
            volume_mode=s["volume_mode"],
            vac=s["vac"],
            labels={"tier": s["tier"]} if s["tier"] else {},
            terms=AFFINITIES[s["affinity"]],
            phase=s["phase"],
            claim_ref=REFS[s["ref"]],
            deleting=s["deleting"],
        )
        for i, s in enumerate(pv_specs)
    ]
    vc = cache([pvc], pvs)
    for i, s in enumerate(pv_specs):
        if ASSUMED[s["assumed"]] is not None:
            vc.assume(f"pv-{i}", ASSUMED[s["assumed"]])
    excluded = frozenset(f"pv-{i}" for i, s in enumerate(pv_specs) if s["excluded"])
    found = vc.matching_volume(pvc, node("n", {ZONE: zone}), excluded)
    prebound, fitting = oracle(claim_spec, pv_specs, zone)
    if prebound is not None:
        assert found is not None and found["metadata"]["name"] == prebound
    elif not fitting:
        assert found is None
    else:
        assert found is not None and found["metadata"]["name"] in fitting
        smallest = min(pv_specs[int(name[3:])]["gi"] for name in fitting)
        assert fit.amount(fit.MEMORY, found["spec"]["capacity"]["storage"], "x") == smallest * GI
