"""A pod's PersistentVolumeClaims, judged and bound as kube-scheduler's VolumeBinding and VolumeZone do
(volumes.feature, control-plane tier): gpu-scheduler's filters (scheduler/plugins/volume_binding.py) and its PreBind
(scheduler/volumebinder.py) against the real PersistentVolume controller of kube-controller-manager
(`persistentvolume-binder`, harness/controlplane.py).

There is no provisioner in this tier: a step plays one, making the volume (its claimRef naming the claim, the
class, the size, a node affinity to the node) once it sees the claim's `volume.kubernetes.io/selected-node`. What
gpu-scheduler wrote is told from what the test wrote by the objects' managedFields: the apiserver names the manager
of each field after the client's user agent, `gpu-scheduler/<identity>` for the scheduler (scheduler/main.py) and
Python's urllib for these steps.

StorageClasses and PersistentVolumes are cluster-scoped, so the `volume_objects` fixture deletes the ones a scenario
made when it ends: its pods first, then its claims (the real pvc-protection and pv-protection controllers run in
this tier and keep a claim while a pod uses it, and a volume while a claim is bound to it), then the volumes and
classes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from pytest_bdd import given, scenarios, then, when

from features.support import (
    HOSTNAME_LABEL,
    World,
    gang_member_body,
    get_pod,
    leases_of,
    pod_body,
    running_on,
    step,
)
from gpu_scheduling import constants
from gpu_scheduling.claims import objects
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import ApiError, NotFound
from harness.wait import wait_for

scenarios("volumes.feature")

#: What a scheduler writes on a claim for the provisioner, and what the PersistentVolume controller writes on a
#: claim it has bound (scheduler/volumes.py holds the same names).
_SELECTED_NODE = "volume.kubernetes.io/selected-node"
_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
#: The apiserver names a field's manager after the part of the client's user agent before its first "/".
_SCHEDULER_MANAGER = constants.DEFAULT_SCHEDULER_NAME
#: How long the scheduler, the PersistentVolume controller and kwok may take, each, on a loaded 2-core machine.
_TIMEOUT = 90
_STORAGE_API = "storage.k8s.io/v1"


@dataclasses.dataclass
class VolumeObjects:
    """The cluster-scoped objects a scenario made, deleted when it ends."""

    storage_classes: list[str] = dataclasses.field(default_factory=list)
    volumes: list[str] = dataclasses.field(default_factory=list)


@pytest.fixture
def volume_objects(world: World) -> Iterator[VolumeObjects]:
    made = VolumeObjects()
    yield made
    # Before the `world` fixture's teardown (this fixture depends on it): the pods, which keep their claims, then the
    # claims, so that the PersistentVolume controller does not bind one again to a volume about to go.
    errors: list[str] = []
    pods = [p["metadata"]["name"] for p in world.api.pods(world.namespace)]
    for pod in pods:
        world.api.delete(paths.pod(world.namespace, pod), gracePeriodSeconds="0")
    wait_for(
        "the scenario's pods deleted",
        lambda: not any(_exists(world, paths.pod(world.namespace, p)) for p in pods),
        timeout=_TIMEOUT,
    )
    claims = [c["metadata"]["name"] for c in world.api.get(paths.persistent_volume_claims(world.namespace))["items"]]
    for claim in claims:
        path = paths.persistent_volume_claim(world.namespace, claim)
        try:
            world.api.delete(path)
        except ApiError as exc:
            errors.append(f"{path}: {exc}")
    for name in made.volumes:
        try:
            world.api.delete(paths.persistent_volume(name))
        except ApiError as exc:
            errors.append(f"persistentvolume {name}: {exc}")
    for name in made.storage_classes:
        try:
            world.api.delete(paths.STORAGE_CLASS.item(name))
        except ApiError as exc:
            errors.append(f"storageclass {name}: {exc}")
    assert not errors, f"could not clean up: {errors}"

    def gone() -> bool:
        left = [n for n in claims if _exists(world, paths.persistent_volume_claim(world.namespace, n))]
        left += [n for n in made.volumes if _exists(world, paths.persistent_volume(n))]
        left += [n for n in made.storage_classes if _exists(world, paths.STORAGE_CLASS.item(n))]
        return not left

    wait_for("the scenario's claims, PersistentVolumes and StorageClasses deleted", gone, timeout=_TIMEOUT)


def _exists(world: World, path: str) -> bool:
    try:
        world.api.get(path)
    except NotFound:
        return False
    return True


# ---- objects ---------------------------------------------------------------------------------------------------


def _on_node(node: str) -> dict[str, Any]:
    """A volume's required node affinity to the one node `node`."""
    term = {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": [node]}]}
    return {"required": {"nodeSelectorTerms": [term]}}


def _volume_body(
    name: str, size: str, storage_class: str, node: str, claim: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A local volume of `size` on `node`, of `storage_class`, kept when its claim goes (Retain: no controller of
    this tier would delete it); with `claim`, made for that claim (its claimRef names it, as a provisioner does)."""
    spec: dict[str, Any] = {
        "capacity": {"storage": size},
        "accessModes": ["ReadWriteOnce"],
        "persistentVolumeReclaimPolicy": "Retain",
        "storageClassName": storage_class,
        "volumeMode": "Filesystem",
        "local": {"path": f"/mnt/disks/{name}"},
        "nodeAffinity": _on_node(node),
    }
    if claim is not None:
        meta = claim["metadata"]
        spec["claimRef"] = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta["uid"],
        }
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name}, "spec": spec}


def _create_volume(world: World, made: VolumeObjects, body: dict[str, Any]) -> None:
    made.volumes.append(body["metadata"]["name"])
    world.api.create(paths.PERSISTENT_VOLUMES, body)


def _claim(world: World, name: str) -> dict[str, Any]:
    pvc: dict[str, Any] = world.api.get(paths.persistent_volume_claim(world.namespace, name))
    return pvc


def _volume(world: World, name: str) -> dict[str, Any]:
    pv: dict[str, Any] = world.api.get(paths.persistent_volume(name))
    return pv


def _mounting(body: dict[str, Any], claim: str) -> dict[str, Any]:
    """`body` (a pod) with the claim `claim` as a volume mounted by its first container."""
    body["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
    body["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    return body


def _owners(obj: dict[str, Any], *path: str) -> set[str]:
    """The managers (managedFields) that own the field at `path` ("f:spec", "f:claimRef") of `obj`."""
    owners = set()
    for entry in obj["metadata"].get("managedFields") or []:
        fields = entry.get("fieldsV1") or {}
        for key in path:
            fields = fields.get(key) if isinstance(fields, dict) else None
        if fields is not None:
            owners.add(entry.get("manager", ""))
    return owners


# ---- StorageClasses, volumes and claims ------------------------------------------------------------------------


@given(
    step('the StorageClass "{name:q}" of the provisioner "{provisioner:q}" binding {mode}'),
)
def storage_class(world: World, volume_objects: VolumeObjects, name: str, provisioner: str, mode: str) -> None:
    topology = None
    if ", its allowedTopologies admitting only " in mode:
        mode, node = mode.split(", its allowedTopologies admitting only ")
        topology = [{"matchLabelExpressions": [{"key": HOSTNAME_LABEL, "values": [node]}]}]
    assert mode in ("WaitForFirstConsumer", "Immediate"), mode
    body: dict[str, Any] = {
        "apiVersion": _STORAGE_API,
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": mode,
        "reclaimPolicy": "Retain",
    }
    if topology is not None:
        body["allowedTopologies"] = topology
    volume_objects.storage_classes.append(name)
    world.api.create(paths.STORAGE_CLASSES, body)


@given(step('the PersistentVolumeClaim "{name:q}" of {size} of the StorageClass "{storage_class:q}" is created'))
@when(step('the PersistentVolumeClaim "{name:q}" of {size} of the StorageClass "{storage_class:q}" is created'))
def create_claim(world: World, volume_objects: VolumeObjects, name: str, size: str, storage_class: str) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": storage_class,
            "volumeMode": "Filesystem",
            "resources": {"requests": {"storage": size}},
        },
    }
    world.api.create(paths.persistent_volume_claims(world.namespace), body)


@given(step('the Available PersistentVolume "{name:q}" of {size} of the StorageClass "{storage_class:q}" on {node}'))
def available_volume(
    world: World, volume_objects: VolumeObjects, name: str, size: str, storage_class: str, node: str
) -> None:
    # The PersistentVolume controller marks a new volume Available; only then may a scheduler reserve it.
    _create_volume(world, volume_objects, _volume_body(name, size, storage_class, node))
    wait_for(
        f"PersistentVolume {name} Available",
        lambda: (_volume(world, name).get("status") or {}).get("phase") == "Available",
        timeout=_TIMEOUT,
    )


@given(
    step(
        'the PersistentVolume "{name:q}" of {size} of the StorageClass "{storage_class:q}" on {node} is made for the '
        'claim "{claim:q}"'
    )
)
@when(
    step(
        'the PersistentVolume "{name:q}" of {size} of the StorageClass "{storage_class:q}" on {node} is made for the '
        'claim "{claim:q}"'
    )
)
def volume_for_claim(
    world: World, volume_objects: VolumeObjects, name: str, size: str, storage_class: str, node: str, claim: str
) -> None:
    _create_volume(world, volume_objects, _volume_body(name, size, storage_class, node, _claim(world, claim)))


@when(
    step(
        'the provisioner makes the PersistentVolume "{name:q}" of {size} for the claim "{claim:q}" on the node '
        "selected for it"
    )
)
def provision(world: World, volume_objects: VolumeObjects, name: str, size: str, claim: str) -> None:
    """What an external provisioner does for a claim a scheduler selected a node for: a volume of the claim's class
    on that node, its claimRef naming the claim (the PersistentVolume controller then binds the two)."""
    pvc = _claim(world, claim)
    node = (pvc["metadata"].get("annotations") or {}).get(_SELECTED_NODE)
    assert node, f"PersistentVolumeClaim {claim} has no node selected: {pvc['metadata'].get('annotations')}"
    body = _volume_body(name, size, pvc["spec"]["storageClassName"], node, pvc)
    storage_class = world.api.get(paths.STORAGE_CLASS.item(pvc["spec"]["storageClassName"]))
    body["metadata"]["annotations"] = {"pv.kubernetes.io/provisioned-by": storage_class["provisioner"]}
    _create_volume(world, volume_objects, body)


# ---- pods ------------------------------------------------------------------------------------------------------


@when(step('the pod "{name:q}" naming the GpuClaim "{gpu_claim:q}" and mounting the claim "{claim:q}" is created'))
def create_claim_pod_with_volume(world: World, name: str, gpu_claim: str, claim: str) -> None:
    body = _mounting(pod_body(name, gpu_map=None, claim=gpu_claim), claim)
    world.api.create(paths.pods(world.namespace), body)


@when(
    step(
        'the member "{name:q}" of a gang of {size:d} naming the GpuClaim "{gpu_claim:q}" and mounting the claim '
        '"{claim:q}" is created'
    )
)
def create_gang_member_with_volume(world: World, name: str, size: int, gpu_claim: str, claim: str) -> None:
    world.api.create(paths.pods(world.namespace), _mounting(gang_member_body(name, gpu_claim, size), claim))


@then(step('the pods "{first:q}" and "{second:q}" run on {node}, each holding the Leases of the GPUs it was allocated'))
def members_run(world: World, first: str, second: str, node: str) -> None:
    for name in (first, second):
        pod = wait_for(f"pod {name} Running on {node}", lambda n=name: running_on(world, n, node), timeout=_TIMEOUT)
        gpus = (pod["metadata"].get("annotations") or {}).get(constants.GPU_IDS_ANNOTATION, "")
        expected = sorted(objects.lease_name(node, int(gpu)) for gpu in gpus.split(",") if gpu)
        assert expected, f"{name} was bound without an allocation: {pod['metadata'].get('annotations')}"
        held = leases_of(world.api, pod["metadata"]["uid"])
        assert held == expected, f"{name} holds the Leases {held}, it was allocated {expected}"


@when(step('the pod "{name:q}" mounting the claim "{claim:q}" is created with the map "{gpu_map:q}"'))
def create_map_pod_with_volume(world: World, name: str, claim: str, gpu_map: str) -> None:
    world.api.create(paths.pods(world.namespace), _mounting(pod_body(name, gpu_map=gpu_map), claim))


# ---- what gpu-scheduler wrote, and what the PersistentVolume controller did -----------------------------------


@then(step('gpu-scheduler selects {node} for the PersistentVolumeClaim "{claim:q}"'))
def selected(world: World, node: str, claim: str) -> None:
    pvc = wait_for(
        f"{_SELECTED_NODE} on PersistentVolumeClaim {claim}",
        lambda: (c := _claim(world, claim))["metadata"].get("annotations", {}).get(_SELECTED_NODE) and c,
        timeout=_TIMEOUT,
    )
    assert pvc["metadata"]["annotations"][_SELECTED_NODE] == node, pvc["metadata"]["annotations"]
    owners = _owners(pvc, "f:metadata", "f:annotations", f"f:{_SELECTED_NODE}")
    assert owners == {_SCHEDULER_MANAGER}, f"{_SELECTED_NODE} of {claim} was written by {owners}"


@then(step('the PersistentVolumeClaim "{claim:q}" has no node selected for it'))
def none_selected(world: World, claim: str) -> None:
    annotations = _claim(world, claim)["metadata"].get("annotations") or {}
    assert _SELECTED_NODE not in annotations, annotations


@then(step('gpu-scheduler reserves the PersistentVolume "{name:q}" for the PersistentVolumeClaim "{claim:q}"'))
def reserved(world: World, name: str, claim: str) -> None:
    pv = wait_for(
        f"a claimRef on PersistentVolume {name}",
        lambda: (v := _volume(world, name))["spec"].get("claimRef") and v,
        timeout=_TIMEOUT,
    )
    pvc = _claim(world, claim)
    ref = pv["spec"]["claimRef"]
    expected = (world.namespace, claim, pvc["metadata"]["uid"])
    assert (ref.get("namespace"), ref.get("name"), ref.get("uid")) == expected, ref
    owners = _owners(pv, "f:spec", "f:claimRef")
    assert owners == {_SCHEDULER_MANAGER}, f"the claimRef of {name} was written by {owners}"


@then(step('the PersistentVolume "{name:q}" is still Available and reserved for no claim'))
def still_available(world: World, name: str) -> None:
    pv = _volume(world, name)
    assert not pv["spec"].get("claimRef"), pv["spec"]["claimRef"]
    assert (pv.get("status") or {}).get("phase") == "Available", pv.get("status")


@given(step('the PersistentVolumeClaim "{claim:q}" is bound to the PersistentVolume "{name:q}"'))
@then(step('the PersistentVolumeClaim "{claim:q}" is bound to the PersistentVolume "{name:q}"'))
def claim_bound(world: World, claim: str, name: str) -> None:
    def bound() -> dict[str, Any] | None:
        pvc = _claim(world, claim)
        done = _BIND_COMPLETED in (pvc["metadata"].get("annotations") or {})
        return pvc if done and (pvc.get("status") or {}).get("phase") == "Bound" else None

    pvc = wait_for(f"PersistentVolumeClaim {claim} Bound", bound, timeout=_TIMEOUT)
    assert pvc["spec"].get("volumeName") == name, f"{claim} is bound to {pvc['spec'].get('volumeName')}, not {name}"
    pv = wait_for(
        f"PersistentVolume {name} Bound",
        lambda: (v := _volume(world, name)).get("status", {}).get("phase") == "Bound" and v,
        timeout=_TIMEOUT,
    )
    ref = pv["spec"]["claimRef"]
    assert (ref["namespace"], ref["name"], ref["uid"]) == (world.namespace, claim, pvc["metadata"]["uid"]), ref


@then(step('the PersistentVolumeClaim "{claim:q}" is still unbound'))
def still_unbound(world: World, claim: str) -> None:
    pvc = _claim(world, claim)
    assert not pvc["spec"].get("volumeName"), pvc["spec"]
    assert (pvc.get("status") or {}).get("phase") == "Pending", pvc.get("status")


@then(step('the pod "{name:q}" waits, Unschedulable, because the PersistentVolumeClaim "{claim:q}" is not found'))
def waits_for_missing_claim(world: World, name: str, claim: str) -> None:
    # The message quotes the claim as kube-scheduler does, which a quoted step argument cannot hold.
    fragment = f'persistentvolumeclaim "{claim}" not found'

    def condition() -> dict[str, Any] | None:
        for c in get_pod(world, name)["status"].get("conditions") or []:
            if c["type"] == "PodScheduled" and c["status"] == "False" and fragment in (c.get("message") or ""):
                return dict(c)
        return None

    cond = wait_for(f"PodScheduled=False on {name} mentioning {fragment!r}", condition, timeout=_TIMEOUT)
    assert cond["reason"] == constants.REASON_UNSCHEDULABLE, cond
    assert not get_pod(world, name)["spec"].get("nodeName")


@then(step('the pod "{name:q}" runs on {node} holding the Leases of the GPUs of its GpuClaim "{gpu_claim:q}"'))
def runs_with_leases(world: World, name: str, node: str, gpu_claim: str) -> None:
    pod = wait_for(f"pod {name} Running on {node}", lambda: running_on(world, name, node), timeout=_TIMEOUT)
    status = wait_for(
        f"GpuClaim {gpu_claim} Bound",
        lambda: (
            (s := world.api.get(paths.gpu_claim(world.namespace, gpu_claim)).get("status") or {}).get("phase")
            == "Bound"
            and s
        ),
        timeout=_TIMEOUT,
    )
    assert status.get("nodeName") == node and status.get("gpuIds"), status
    expected = sorted(objects.lease_name(node, gpu) for gpu in status["gpuIds"])
    held = leases_of(world.api, pod["metadata"]["uid"])
    assert held == expected, f"{name} holds the Leases {held}, its GpuClaim was allocated {expected}"
