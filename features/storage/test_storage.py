"""Storage on the KinD test-bed (storage.feature, KinD tier only): kind installs rancher's local-path-provisioner
as the default StorageClass `standard` (offline, from the node image's /kind/manifests/default-storage.yaml,
images/kind-node/default-storage.yaml; online, from kindest/node's own). A claim that names no class gets a
host-path volume on the node of its first pod; what one pod writes there a second pod reads back, and deleting the
claim has the provisioner's helper pod remove the directory before the volume goes.

The pods run the check image with a shell command instead of its program. Under the default kube-scheduler, a
claim of a WaitForFirstConsumer class is provisioned on the node that kube-scheduler's volume binding picks; under
gpu-scheduler, on the node gpu-scheduler picks (its VolumeBinding writes the claim's selected-node, the real
provisioner makes the volume there, and the pod is bound once the claim is). The scenario's namespace takes
whatever a failed step left (pods, the claim, hence its volume) with it.
"""

from __future__ import annotations

from typing import Any

import pytest
from pytest_bdd import given, scenarios, then, when

from features.support import (
    CHECK_IMAGE,
    HOSTNAME_LABEL,
    World,
    containers,
    get_pod,
    pod_body,
    running_on,
    statefulset_body,
    step,
)
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import NotFound
from harness.wait import wait_for

scenarios("storage.feature")

#: The annotation that makes a StorageClass the default one (the DefaultStorageClass admission plugin reads it).
_DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
#: The annotation the external-provisioner library puts on every volume it provisioned, naming the provisioner.
_PROVISIONED_BY_ANNOTATION = "pv.kubernetes.io/provisioned-by"
#: kind's default storage runs in this namespace, its provisioner's pods labelled app=local-path-provisioner.
_PROVISIONER_NAMESPACE = "local-path-storage"
_PROVISIONER_SELECTOR = "app=local-path-provisioner"
#: Where the pods mount the claim.
_MOUNT = "/data"
#: The kube-scheduler of the cluster, which binds a WaitForFirstConsumer claim when it places the pod.
_KUBE_SCHEDULER = "default-scheduler"
# A pod on a claim starts once the provisioner's helper pod has made its directory: seconds, more on a busy node.
_POD_TIMEOUT = 120
# The volume goes once the helper pod of the teardown has run, which the external provisioner retries on failure.
_DELETE_TIMEOUT = 120


@pytest.fixture
def volumes() -> dict[str, str]:
    """The volume each claim was bound to, for the steps after the claim is gone: claim -> PersistentVolume."""
    return {}


def _volume_pod(name: str, claim: str, script: str) -> dict[str, Any]:
    """A pod that runs `script` once with the claim mounted at _MOUNT and $POD_UID set; the check image's
    container settings (non-root, read-only root filesystem, no capabilities), so only the volume is writable."""
    check = containers(CHECK_IMAGE)["containers"][0]
    container = {
        **check,
        "name": name,
        "command": ["sh", "-c", script],
        "env": [{"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}],
        "volumeMounts": [{"name": "data", "mountPath": _MOUNT}],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": _KUBE_SCHEDULER,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [container],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
        },
    }


def _run_to_completion(world: World, body: dict[str, Any]) -> dict[str, Any]:
    """Create the pod and wait until it has Succeeded; a Failed pod fails the step with its log."""
    name = body["metadata"]["name"]
    world.api.create(paths.pods(world.namespace), body)

    def done() -> dict[str, Any] | None:
        pod = get_pod(world, name)
        phase = pod["status"].get("phase")
        if phase == "Failed":
            log = world.api.text(paths.pod_log(world.namespace, name), container=name)
            raise AssertionError(f"pod {name} failed: {pod['status']}\nlog: {log}")
        return pod if phase == "Succeeded" else None

    return wait_for(f"pod {name} Succeeded", done, timeout=_POD_TIMEOUT, interval=0.5)


# ---- the default StorageClass and the claim ---------------------------------------------------------------------


@given(step('the default StorageClass is "{name:q}" of the provisioner "{provisioner:q}"'))
def default_storage_class(world: World, name: str, provisioner: str) -> None:
    classes = world.api.get(paths.STORAGE_CLASSES)["items"]
    defaults = [c for c in classes if (c["metadata"].get("annotations") or {}).get(_DEFAULT_CLASS_ANNOTATION) == "true"]
    assert [c["metadata"]["name"] for c in defaults] == [name], (
        f"default StorageClasses: {[c['metadata']['name'] for c in defaults]}, expected only {name}"
    )
    assert defaults[0]["provisioner"] == provisioner, defaults[0]
    # The provisioner that serves it is up (kind applies its manifest before the cluster is Ready, not after it
    # runs).
    wait_for(
        f"a running {provisioner} provisioner in {_PROVISIONER_NAMESPACE}",
        lambda: _provisioner_pods(world),
        timeout=_POD_TIMEOUT,
    )


def _provisioner_pods(world: World) -> list[dict[str, Any]]:
    pods = world.api.pods(_PROVISIONER_NAMESPACE, labelSelector=_PROVISIONER_SELECTOR)
    return [p for p in pods if p["status"].get("phase") == "Running"]


@given(step('the PersistentVolumeClaim "{name:q}" of {size} that names no StorageClass is created'))
def create_claim(world: World, name: str, size: str) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}},
    }
    world.api.create(paths.persistent_volume_claims(world.namespace), body)


# ---- the pods on it ----------------------------------------------------------------------------------------------


@when(step('the pod "{name:q}" writes its uid to "{file:q}" on the claim "{claim:q}"'))
def writer_pod(world: World, name: str, file: str, claim: str) -> None:
    _run_to_completion(world, _volume_pod(name, claim, f'printf %s "$POD_UID" > {_MOUNT}/{file}'))


@when(step('the pod "{name:q}" prints "{file:q}" from the claim "{claim:q}"'))
def reader_pod(world: World, name: str, file: str, claim: str) -> None:
    _run_to_completion(world, _volume_pod(name, claim, f"cat {_MOUNT}/{file}"))


@then(
    step(
        'the PersistentVolumeClaim "{name:q}" is Bound to a volume of "{storage_class:q}" under "{directory:q}" '
        'on the node of "{pod:q}"'
    )
)
def claim_bound(world: World, volumes: dict[str, str], name: str, storage_class: str, directory: str, pod: str) -> None:
    claim = world.api.get(paths.persistent_volume_claim(world.namespace, name))
    assert claim["status"].get("phase") == "Bound", claim["status"]
    # The DefaultStorageClass admission plugin filled in the class the claim left out.
    assert claim["spec"].get("storageClassName") == storage_class, claim["spec"]
    volume = world.api.get(paths.persistent_volume(claim["spec"]["volumeName"]))
    volumes[name] = volume["metadata"]["name"]
    spec = volume["spec"]
    assert spec["storageClassName"] == storage_class, spec
    assert spec["claimRef"]["namespace"] == world.namespace and spec["claimRef"]["name"] == name, spec["claimRef"]
    path = (spec.get("hostPath") or spec.get("local") or {}).get("path", "")
    assert path.startswith(f"{directory.rstrip('/')}/"), f"volume path {path!r} is not under {directory}"
    # A local volume is pinned to the node its directory is on: the one kube-scheduler picked for the first pod.
    node = world.api.get(paths.node(get_pod(world, pod)["spec"]["nodeName"]))
    pinned = {"key": HOSTNAME_LABEL, "operator": "In", "values": [node["metadata"]["labels"][HOSTNAME_LABEL]]}
    terms = spec["nodeAffinity"]["required"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [pinned]}], terms


@then(step('the pod "{reader:q}" printed the uid of the pod "{writer:q}", on the same node'))
def read_back(world: World, reader: str, writer: str) -> None:
    written, read = get_pod(world, writer), get_pod(world, reader)
    assert read["spec"]["nodeName"] == written["spec"]["nodeName"], (read["spec"], written["spec"])
    log = world.api.text(paths.pod_log(world.namespace, reader), container=reader)
    assert log == written["metadata"]["uid"], (
        f"{reader} printed {log!r}, {writer}'s uid is {written['metadata']['uid']}"
    )


# ---- deleting the claim --------------------------------------------------------------------------------------


@when(step('the pods "{first:q}" and "{second:q}" and the PersistentVolumeClaim "{claim:q}" are deleted'))
def delete_claim(world: World, first: str, second: str, claim: str) -> None:
    for pod in (first, second):
        world.api.delete(paths.pod(world.namespace, pod), gracePeriodSeconds="0")
    # The claim goes once no pod uses it any more (its kubernetes.io/pvc-protection finalizer).
    world.api.delete(paths.persistent_volume_claim(world.namespace, claim), missing_ok=False)


@then(step('the volume of "{claim:q}" is deleted after the provisioner removed it from its node'))
def volume_deleted(world: World, volumes: dict[str, str], claim: str) -> None:
    volume = volumes[claim]

    def gone() -> bool | None:
        try:
            world.api.get(paths.persistent_volume(volume))
        except NotFound:
            return True
        return None

    wait_for(f"PersistentVolume {volume} deleted", gone, timeout=_DELETE_TIMEOUT, interval=0.5)
    # The provisioner deletes the volume only after its teardown helper pod removed the directory on the node
    # (reclaimPolicy Delete), and says so in its log.
    logs = [
        world.api.text(paths.pod_log(_PROVISIONER_NAMESPACE, p["metadata"]["name"])) for p in _provisioner_pods(world)
    ]
    assert any(f"Volume {volume} has been deleted" in log for log in logs), (
        f"no provisioner log says {volume} has been deleted"
    )


# ---- under gpu-scheduler -------------------------------------------------------------------------------------------


def _writes_uid(spec: dict[str, Any], claim_volume: str, file: str) -> None:
    """Make the pod spec's first container write its uid to `file` on the volume `claim_volume`, then stay."""
    container = spec["containers"][0]
    container["command"] = ["sh", "-c", f'printf %s "$POD_UID" > {_MOUNT}/{file} && exec sleep 3600']
    container.pop("args", None)
    container["env"] = [
        *container.get("env", []),
        {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
    ]
    container["volumeMounts"] = [{"name": claim_volume, "mountPath": _MOUNT}]


@when(
    step(
        'the gpu-scheduler StatefulSet "{name:q}" mapped "{gpu_map:q}" with a volume "{volume:q}" of {size}, its pod '
        'writing its uid to "{file:q}", is created'
    )
)
def volume_statefulset(world: World, name: str, gpu_map: str, volume: str, size: str, file: str) -> None:
    body = statefulset_body(name, 1, gpu_map)
    _writes_uid(body["spec"]["template"]["spec"], volume, file)
    body["spec"]["volumeClaimTemplates"] = [
        {
            "metadata": {"name": volume},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}},
        }
    ]
    world.api.create(paths.statefulsets(world.namespace), body)


def _bound_pinned(world: World, claim: str, storage_class: str, node: str) -> None:
    """The claim is Bound to a volume of `storage_class` pinned to `node`, the node gpu-scheduler chose for it."""
    pvc = world.api.get(paths.persistent_volume_claim(world.namespace, claim))
    assert pvc["status"].get("phase") == "Bound", pvc["status"]
    assert (pvc["metadata"].get("annotations") or {}).get("volume.kubernetes.io/selected-node") == node, pvc["metadata"]
    volume = world.api.get(paths.persistent_volume(pvc["spec"]["volumeName"]))
    assert volume["spec"]["storageClassName"] == storage_class, volume["spec"]
    # local-path pins the volume by the node's hostname label, as the first scenario reads it.
    hostname = world.api.get(paths.node(node))["metadata"]["labels"][HOSTNAME_LABEL]
    terms = volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": [hostname]}]}], terms


@then(
    step(
        'the pod "{pod:q}" runs on {node} with its claim "{claim:q}" Bound to a volume of "{storage_class:q}" '
        "pinned to {pinned}"
    )
)
def runs_with_volume(world: World, pod: str, node: str, claim: str, storage_class: str, pinned: str) -> None:
    wait_for(f"{pod} running on {node}", lambda: running_on(world, pod, node), timeout=_POD_TIMEOUT, interval=0.5)
    _bound_pinned(world, claim, storage_class, pinned)


@pytest.fixture
def first_run() -> dict[str, dict[str, Any]]:
    """Each recreated pod as it was on its first run: name -> pod."""
    return {}


def _claim_pod(name: str, claim: str, pvc: str, file: str) -> dict[str, Any]:
    body = pod_body(name, gpu_map=None, claim=claim)
    _writes_uid(body["spec"], "data", file)
    body["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": pvc}}]
    return body


@when(
    step(
        'the pod "{name:q}" naming the GpuClaim "{claim:q}" with the claim "{pvc:q}" writing its uid to "{file:q}" '
        "is created"
    )
)
def claim_pod_with_volume(
    world: World, bodies: dict[str, dict[str, Any]], name: str, claim: str, pvc: str, file: str
) -> None:
    bodies[name] = _claim_pod(name, claim, pvc, file)
    world.api.create(paths.pods(world.namespace), bodies[name])


@pytest.fixture
def bodies() -> dict[str, dict[str, Any]]:
    """The bodies the scenario created its pods from: name -> pod body."""
    return {}


def _running(world: World, name: str) -> dict[str, Any] | None:
    pod = get_pod(world, name)
    return pod if pod["spec"].get("nodeName") and pod["status"].get("phase") == "Running" else None


@then(
    step('the pod "{name:q}" runs with its claim "{pvc:q}" Bound to a volume of "{storage_class:q}" pinned to its node')
)
def claim_pod_runs(world: World, first_run: dict[str, dict[str, Any]], name: str, pvc: str, storage_class: str) -> None:
    pod = wait_for(f"{name} running", lambda: _running(world, name), timeout=_POD_TIMEOUT, interval=0.5)
    first_run[name] = pod
    _bound_pinned(world, pvc, storage_class, pod["spec"]["nodeName"])


@when(step('the pod "{name:q}" is deleted and created again'))
def recreate(world: World, bodies: dict[str, dict[str, Any]], name: str) -> None:
    world.api.delete(paths.pod(world.namespace, name), gracePeriodSeconds="0")

    def gone() -> bool | None:
        try:
            get_pod(world, name)
        except NotFound:
            return True
        return None

    wait_for(f"{name} deleted", gone, timeout=_DELETE_TIMEOUT, interval=0.5)
    world.api.create(paths.pods(world.namespace), bodies[name])


@then(step('the pod "{name:q}" runs again on the node of its first run'))
def runs_again(world: World, first_run: dict[str, dict[str, Any]], name: str) -> None:
    node = first_run[name]["spec"]["nodeName"]
    pod = wait_for(
        f"{name} running on {node}", lambda: running_on(world, name, node), timeout=_POD_TIMEOUT, interval=0.5
    )
    assert pod["metadata"]["uid"] != first_run[name]["metadata"]["uid"], "the pod was not created again"


@then(step('the pod "{reader:q}" printed the uid of the pod "{writer:q}" of its first run'))
def read_back_first(world: World, first_run: dict[str, dict[str, Any]], reader: str, writer: str) -> None:
    read = get_pod(world, reader)
    assert read["spec"]["nodeName"] == first_run[writer]["spec"]["nodeName"], read["spec"]
    log = world.api.text(paths.pod_log(world.namespace, reader), container=reader)
    # The recreated pod wrote its own uid over the first one's: either is the claim's, both were on its node.
    assert log in (first_run[writer]["metadata"]["uid"], get_pod(world, writer)["metadata"]["uid"]), log
