"""plugins/node_volume_limits.py and volume_restrictions.py: kube-scheduler's NodeVolumeLimits (CSI) and
VolumeRestrictions (ReadWriteOncePod) on plain data, through the profile
(framework.prepare with plugins.PROFILE) as the scheduler runs it."""

from __future__ import annotations

from typing import Any

from gpu_scheduling.scheduler import fit, framework, plugins, volumes

DRIVER = "csi.example.com"


def bound_claim(name: str, pv: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "annotations": {volumes.BIND_COMPLETED: "yes"}},
        "spec": {"volumeName": pv, "storageClassName": "fast"},
    }


def csi_volume(name: str, driver: str = DRIVER) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"csi": {"driver": driver, "volumeHandle": name}}}


def node(name: str = "n1") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {}},
        "status": {"allocatable": {"pods": "110"}, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def pod(*claims: str, bound_to: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "c"}],
        "volumes": [{"name": c, "persistentVolumeClaim": {"claimName": c}} for c in claims],
    }
    if bound_to:
        spec["nodeName"] = bound_to
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": spec}


def cache(limit: int | None) -> volumes.VolumeCache:
    claims = {f"ns/c{i}": bound_claim(f"c{i}", f"pv{i}") for i in range(4)}
    claims["ns/waiting"] = {"metadata": {"name": "waiting", "namespace": "ns"}, "spec": {"storageClassName": "wffc"}}
    pvs = {f"pv{i}": csi_volume(f"pv{i}") for i in range(4)}
    pvs["pv3"] = csi_volume("pv3", "other.example.com")
    driver: dict[str, Any] = {"name": DRIVER}
    if limit is not None:
        driver["allocatable"] = {"count": limit}
    csi_nodes = {"n1": {"metadata": {"name": "n1"}, "spec": {"drivers": [driver]}}}
    classes = {
        "wffc": {"metadata": {"name": "wffc"}, "provisioner": DRIVER, "volumeBindingMode": "WaitForFirstConsumer"}
    }
    return volumes.VolumeCache(claims, pvs, classes, csi_nodes)


def usage_with(*pods: dict[str, Any]) -> fit.NodeUsage:
    usage = fit.NodeUsage()
    for i, p in enumerate(pods):
        usage.set(f"other-{i}", fit.footprint(p))
    return usage


def problem(p: dict[str, Any], usage: fit.NodeUsage, limit: int | None, n: dict[str, Any] | None = None) -> str | None:
    attempt = framework.prepare(p, framework.Snapshot(usage, cache(limit)), plugins.PROFILE)
    assert isinstance(attempt, framework.Cycle), attempt
    return attempt.problem(n or node())


def test_a_volume_beyond_the_drivers_count_is_refused():
    usage = usage_with(pod("c0", bound_to="n1"), pod("c1", bound_to="n1"))
    said = problem(pod("c2"), usage, limit=2)
    assert said is not None and "may attach 2 volumes of CSI driver csi.example.com; 2 are attached" in said, said
    assert problem(pod("c2"), usage, limit=3) is None


def test_a_volume_already_attached_counts_once():
    usage = usage_with(pod("c0", bound_to="n1"), pod("c1", bound_to="n1"))
    assert problem(pod("c0", "c1"), usage, limit=2) is None


def test_a_node_over_its_count_takes_a_pod_that_brings_no_new_volume():
    """Pods bound by nodeName (or a count lowered since) may use more than the count: kube judges a driver only where
    the pod brings a volume not attached yet (found by features/fit's differential)."""
    usage = usage_with(pod("c0", "c1", bound_to="n1"))
    assert problem(pod("c0"), usage, limit=1) is None
    said = problem(pod("c0", "c2"), usage, limit=1)
    assert said is not None and "2 are attached and the pod brings 1 more" in said, said


def test_two_volumes_of_one_handle_are_one_volume():
    """kube counts CSI volumes by driver and handle, not by PersistentVolume (found by features/fit's differential)."""
    usage = usage_with(pod("c0", bound_to="n1"))
    twin_cache = cache(1)
    twin_cache.volumes["pv1"]["spec"]["csi"]["volumeHandle"] = "pv0"
    attempt = framework.prepare(pod("c1"), framework.Snapshot(usage, twin_cache), plugins.PROFILE)
    assert isinstance(attempt, framework.Cycle) and attempt.problem(node()) is None
    assert problem(pod("c1"), usage, limit=1) is not None, "a handle of its own: a second volume"


def test_no_csinode_or_no_count_is_no_limit():
    usage = usage_with(pod("c0", bound_to="n1"), pod("c1", bound_to="n1"))
    assert problem(pod("c2"), usage, limit=None) is None
    assert problem(pod("c2"), usage, limit=2, n=node("n2")) is None


def test_another_drivers_volumes_are_not_counted():
    usage = usage_with(pod("c0", bound_to="n1"), pod("c3", bound_to="n1"))
    assert problem(pod("c1"), usage, limit=2) is None


def test_an_unbound_claim_counts_under_its_class_provisioner():
    usage = usage_with(pod("c0", bound_to="n1"))
    said = problem(pod("waiting"), usage, limit=1)
    assert said is not None and "brings 1 more" in said, said
    assert problem(pod("waiting"), usage, limit=2) is None


def test_the_plugin_skips_a_pod_without_claims():
    attempt = framework.prepare(pod(), framework.Snapshot(fit.NodeUsage(), cache(1)), plugins.PROFILE)
    assert isinstance(attempt, framework.Cycle) and not attempt.applies("NodeVolumeLimits")


# ---- VolumeRestrictions (plugins/volume_restrictions.py) --------------------------------------------------------
def rwop_cache() -> volumes.VolumeCache:
    claims = {
        "ns/solo": {
            "metadata": {"name": "solo", "namespace": "ns", "annotations": {volumes.BIND_COMPLETED: "yes"}},
            "spec": {"volumeName": "pv0", "accessModes": ["ReadWriteOncePod"]},
        },
        "ns/shared": {
            "metadata": {"name": "shared", "namespace": "ns", "annotations": {volumes.BIND_COMPLETED: "yes"}},
            "spec": {"volumeName": "pv1", "accessModes": ["ReadWriteOnce"]},
        },
    }
    return volumes.VolumeCache(claims, {"pv0": csi_volume("pv0"), "pv1": csi_volume("pv1")})


def refusal_of(p: dict[str, Any], usage: fit.NodeUsage) -> str | None:
    attempt = framework.prepare(p, framework.Snapshot(usage, rwop_cache()), plugins.PROFILE)
    return attempt.message if isinstance(attempt, framework.PodRefusal) else None


def test_a_read_write_once_pod_claim_in_use_elsewhere_refuses_the_pod():
    user = pod("solo", bound_to="n2")
    usage = usage_with(user)
    said = refusal_of(pod("solo"), usage)
    assert said is not None and 'persistentvolumeclaim "solo" is ReadWriteOncePod' in said, said
    usage.set("other-0", None)
    assert refusal_of(pod("solo"), usage) is None, "the user is gone: the claim is free"


def test_a_read_write_once_claim_may_be_shared_and_the_pod_does_not_block_itself():
    usage = usage_with(pod("shared", bound_to="n2"))
    assert refusal_of(pod("shared"), usage) is None
    me = pod("solo")
    usage.set("u", fit.footprint(me, "n1"))  # this pod's own earlier attempt, assumed
    assert refusal_of(me, usage) is None
