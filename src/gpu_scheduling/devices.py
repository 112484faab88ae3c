"""The node side in plain data: what gpu-device-plugin tells the kubelet, which pod a kubelet request is for, and
what a container is given. Pure: no I/O (the gRPC server, the sockets and the watches are `agent.deviceplugin`).

**Devices.** Each GPU of the node is advertised to the kubelet as `slots` devices `gpu<id>-<slot>` of the resource
constants.GPU_RESOURCE, all with the GPU's health. A container that the scheduler gave GPUs {3} is given one slot of
GPU 3; two pods sharing GPU 3 (the take-home's pods 3 and 4) each hold a slot of it.

**Which pod.** The device plugin API does not tell the plugin which pod the kubelet is admitting. The kubelet admits
one pod at a time, allocating its containers in order (init containers, then containers), and it lists a pod in its
PodResources API from the moment it starts admitting it, each container with the devices recorded for it so far
(a container's devices are recorded only once its `Allocate` returned). So the container being allocated is the
first listed container that asks for the resource and has none recorded yet, of the one listed pod that has such a
container. :func:`admitting` finds it from the kubelet's list and the pods of the node as the API has them; when no
pod or more than one pod fits, it refuses, and the kubelet fails that pod's admission with the reason rather than
give a container a device the scheduler did not choose.

**What the kubelet picks.** `GetPreferredAllocation` answers, for the pod found, one free slot of each of its GPUs
(:func:`preferred`), so the kubelet's own records (PodResources, its checkpoint) name the GPUs the container really
gets. `Allocate` checks the devices it is handed against the pod's GPUs again (:func:`check`) and refuses any other.
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpu_scheduling import constants, gpumap
from gpu_scheduling.claims import objects

_DEVICE_RE = re.compile(r"^gpu(0|[1-9][0-9]{0,3})-(0|[1-9][0-9]{0,3})$")

#: Kubelet's health strings (k8s.io/kubelet deviceplugin/v1beta1 constants).
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"

#: The namespace of the simulated GPUs' UUIDs (uuid5 of "<node>/<id>"), so a simulated GPU keeps its UUID.
_SIMULATED_UUID_NAMESPACE = uuid.UUID("6f7d3c1e-9b1a-5e53-8a5e-67707573696d")


class Refusal(Exception):
    """The kubelet's request cannot be answered with the scheduler's choice; the message says why (the kubelet shows
    it in the pod's admission failure). `final`: waiting cannot change the answer (a pod that was found but asks for
    what it was not given), unlike a pod that the plugin's watch may not have delivered yet."""

    def __init__(self, message: str, *, final: bool = True):
        super().__init__(message)
        self.final = final


def device_id(gpu: int, slot: int) -> str:
    return f"gpu{gpu}-{slot}"


def parse_device_id(text: str) -> tuple[int, int] | None:
    """(gpu, slot) of a device id this plugin advertises, or None for any other string."""
    m = _DEVICE_RE.match(text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def gpu_of(text: str) -> int | None:
    parsed = parse_device_id(text)
    return parsed[0] if parsed else None


def advertised(gpus: Iterable[Mapping[str, Any]], slots: int) -> list[tuple[str, str]]:
    """(device id, health) of every slot of every GPU of the inventory, in id order."""
    out: list[tuple[str, str]] = []
    for gpu in sorted(gpus, key=lambda g: int(g["id"])):
        health = HEALTHY if gpu.get("health") == "Healthy" else UNHEALTHY
        out.extend((device_id(int(gpu["id"]), slot), health) for slot in range(slots))
    return out


def simulated_uuid(node: str, gpu: int) -> str:
    return f"GPU-{uuid.uuid5(_SIMULATED_UUID_NAMESPACE, f'{node}/{gpu}')}"


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _quantity(value: Any) -> int | None:
    """A whole-number quantity of an extended resource ("2", 2), or None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 6:
        return int(value)
    return None


def requested(container: Mapping[str, Any], resource: str = constants.GPU_RESOURCE) -> int:
    """Units of `resource` a container asks for (its limit, which an extended resource's request must equal; else
    its request), 0 when none or unreadable."""
    res = _mapping(container.get("resources"))
    for field in ("limits", "requests"):
        amounts = _mapping(res.get(field))
        if resource in amounts:
            return _quantity(amounts[resource]) or 0
    return 0


def requests(pod: Mapping[str, Any], resource: str = constants.GPU_RESOURCE) -> list[tuple[Mapping[str, Any], int]]:
    """Every container of the pod that asks for `resource`, with its units, in the kubelet's order of allocation
    (init containers, then containers). Never raises: a field of the wrong shape counts as absent."""
    spec = _mapping(pod.get("spec"))
    found: list[tuple[Mapping[str, Any], int]] = []
    for kind in ("initContainers", "containers"):
        items = spec.get(kind)
        found.extend(
            (c, units)
            for c in (items if isinstance(items, list) else [])
            if isinstance(c, Mapping) and (units := requested(c, resource))
        )
    return found


@dataclasses.dataclass(frozen=True)
class Wanted:
    """A pod of this node that asks the kubelet for the resource, and the GPUs the scheduler gave it."""

    namespace: str
    name: str
    uid: str
    #: The node's GPU ids from its map entry or its allocation; () when the scheduler gave it none (yet).
    gpus: tuple[int, ...]
    #: (container name, units) of each container asking for the resource, in the kubelet's order of allocation.
    containers: tuple[tuple[str, int], ...]

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


def wanted(
    pod: Mapping[str, Any], resource: str = constants.GPU_RESOURCE, maps: gpumap.ParseCache | None = None
) -> Wanted | None:
    """What the pod asks the kubelet for, or None when no container of it asks for the resource (or it is not a
    pod object); its map parsed through `maps` when the caller keeps a cache. Never raises: a field of the wrong
    shape counts as absent."""
    meta, spec = _mapping(pod.get("metadata")), _mapping(pod.get("spec"))
    containers = [(c["name"], units) for c, units in requests(pod, resource) if isinstance(c.get("name"), str)]
    if not containers:
        return None
    try:
        hold = objects.hold_from_pod(pod, maps)
    except (KeyError, TypeError, AttributeError, ValueError):
        hold = None
    node = spec.get("nodeName")
    gpus = hold.gpu_ids if hold is not None and hold.node == node else ()
    return Wanted(
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
        str(meta.get("uid") or ""),
        gpus,
        tuple(containers),
    )


#: The kubelet's PodResources view of this node: (namespace, name) -> container name -> device ids of the resource.
KubeletView = Mapping[tuple[str, str], Mapping[str, Sequence[str]]]


@dataclasses.dataclass(frozen=True)
class Match:
    """The container the kubelet is allocating, and the GPUs it must get."""

    pod: Wanted
    container: str
    units: int


def admitting(pods: Iterable[Wanted], kubelet: KubeletView, size: int) -> Match:
    """The container the kubelet is asking `size` devices for: of the pods the kubelet lists, the first container
    (in allocation order) that asks for the resource and has no device recorded. Refusal when none or several pods
    fit, or when the one found was given no GPU, or other GPUs than it asks units for."""
    found: list[Match] = []
    for pod in pods:
        given = kubelet.get((pod.namespace, pod.name))
        if given is None:
            continue  # not (yet) being admitted by the kubelet
        for container, units in pod.containers:
            # The kubelet lists regular (and restartable init) containers only: an init container's devices are
            # reused by the containers after it, which are the ones to look at.
            if container in given and not given[container]:
                found.append(Match(pod, container, units))
                break
    fits = [m for m in found if m.units == size]
    if len(fits) == 1:
        match = fits[0]
        if not match.pod.gpus:
            raise Refusal(
                f"pod {match.pod.ref} asks for {constants.GPU_RESOURCE} but gpu-scheduler gave it no GPU on this node "
                f"(only pods placed by gpu-scheduler, through a {constants.MAP_ANNOTATION} entry or a GpuClaim, get "
                "these devices)"
            )
        if len(match.pod.gpus) != size:
            raise Refusal(
                f"pod {match.pod.ref} container {match.container} asks for {size} {constants.GPU_RESOURCE} but "
                f"gpu-scheduler gave the pod {len(match.pod.gpus)} GPU(s) "
                f"({','.join(map(str, match.pod.gpus))}): a container asks for exactly its pod's GPU count"
            )
        return match
    if not fits:
        listed = ", ".join(f"{m.pod.ref} container {m.container} ({m.units})" for m in found[:5]) or "none"
        raise Refusal(
            f"no pod being admitted on this node asks for {size} {constants.GPU_RESOURCE} (containers waiting for "
            f"devices: {listed})",
            final=False,
        )
    raise Refusal(
        f"{len(fits)} pods wait for {size} {constants.GPU_RESOURCE} at once ("
        + ", ".join(m.pod.ref for m in fits[:5])
        + "): cannot tell which one the kubelet is admitting"
    )


def preferred(gpus: Sequence[int], available: Iterable[str], must_include: Iterable[str], size: int) -> list[str]:
    """One available slot of each GPU in `gpus` (the lowest free slot, those the kubelet must include first), at
    most `size` ids. A GPU with no free slot is left out: the kubelet then fills in another device and `Allocate`
    refuses it with the reason."""
    free: dict[int, list[str]] = {}
    for device in available:
        gpu = gpu_of(device)
        if gpu is not None:
            free.setdefault(gpu, []).append(device)
    chosen: dict[int, str] = {}
    for device in must_include:
        gpu = gpu_of(device)
        if gpu is not None and gpu in gpus and gpu not in chosen:
            chosen[gpu] = device
    for gpu in gpus:
        if gpu not in chosen and free.get(gpu):
            chosen[gpu] = min(free[gpu], key=lambda d: (parse_device_id(d) or (0, 0))[1])
    return [chosen[g] for g in gpus if g in chosen][:size]


def check(match: Match, devices: Sequence[str]) -> tuple[int, ...]:
    """The GPUs of `devices` when they are one slot of each GPU the pod was given; Refusal otherwise."""
    gpus = [gpu_of(d) for d in devices]
    if None in gpus:
        raise Refusal(f"the kubelet asked for devices this plugin does not advertise: {', '.join(devices)}")
    given = sorted(g for g in gpus if g is not None)
    if given != sorted(match.pod.gpus):
        missing = sorted(set(match.pod.gpus) - set(given))
        raise Refusal(
            f"pod {match.pod.ref} container {match.container}: the kubelet picked {', '.join(devices)} (GPUs "
            f"{','.join(map(str, given))}) but gpu-scheduler gave it GPUs {','.join(map(str, match.pod.gpus))}"
            + (
                f"; GPU {','.join(map(str, missing))} has no free slot on this node (every slot is held by other "
                "containers)"
                if missing
                else ""
            )
        )
    return tuple(match.pod.gpus)


@dataclasses.dataclass(frozen=True)
class NodeGpu:
    """What a container is given for one GPU: its UUID and, on a node with a driver, its /dev/nvidia<minor>."""

    id: int
    uuid: str
    minor: int | None = None


#: The NVIDIA driver's control devices a container needs beside its GPUs' /dev/nvidia<minor> (those present).
NVIDIA_CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")


@dataclasses.dataclass(frozen=True)
class ContainerResponse:
    """One ContainerAllocateResponse as plain data."""

    envs: dict[str, str]
    #: (container path, host path, read only)
    mounts: tuple[tuple[str, str, bool], ...] = ()
    #: (container path, host path, permissions)
    devices: tuple[tuple[str, str, str], ...] = ()


def device_file(node: str, gpu: NodeGpu) -> str:
    """The text of a simulated GPU's file: what a container can read of the GPU it was given."""
    return f"id={gpu.id}\nuuid={gpu.uuid}\nnode={node}\n"


def response(
    gpus: Sequence[NodeGpu], *, files_dir: str | None, control_devices: Iterable[str] = ()
) -> ContainerResponse:
    """What a container given `gpus` gets. Simulated (`files_dir`, the host folder of the GPUs' files): one read-only
    file per GPU under constants.DEVICE_FILES_DIR. NVML (no files): each GPU's /dev/nvidia<minor> and the control
    devices. Both: the GPU ids and UUIDs in constants.DEVICE_GPUS_ENV and constants.NVIDIA_DEVICES_ENV."""
    envs = {
        constants.DEVICE_GPUS_ENV: ",".join(str(g.id) for g in gpus),
        constants.NVIDIA_DEVICES_ENV: ",".join(g.uuid for g in gpus),
    }
    if files_dir is not None:
        mounts = tuple(
            (f"{constants.DEVICE_FILES_DIR}/gpu{g.id}", f"{files_dir.rstrip('/')}/gpu{g.id}", True) for g in gpus
        )
        return ContainerResponse(envs, mounts=mounts)
    nodes = [(f"/dev/nvidia{g.minor}", f"/dev/nvidia{g.minor}", "rw") for g in gpus if g.minor is not None]
    nodes.extend((d, d, "rw") for d in control_devices)
    return ContainerResponse(envs, devices=tuple(nodes))


def kubelet_pods_by_gpu(pods: Mapping[str, Mapping[str, Sequence[str]]]) -> dict[int, list[str]]:
    """The kubelet's view turned around: GPU id -> the pods ("<namespace>/<name>") it gave a device of that GPU to,
    from its PodResources list as the plugin writes it (pod -> container -> device ids). Ids that are not this
    plugin's are left out."""
    out: dict[int, set[str]] = {}
    for pod, containers in pods.items():
        for ids in containers.values():
            for device in ids:
                gpu = gpu_of(device)
                if gpu is not None:
                    out.setdefault(gpu, set()).add(pod)
    return {gpu: sorted(names) for gpu, names in sorted(out.items())}


def kubelet_disagreements(kubelet_pods: Sequence[str], holders: Iterable[str]) -> list[str]:
    """The pods the kubelet gave a GPU's device to that gpu-scheduler did not give that GPU (its holders by the
    map, the claim's allocation or the Lease): the one computation of the kubelet cross-check, for the board and
    `kubectl gpu health`. A holder the kubelet gave nothing is not counted: a bound pod waits for its admission."""
    held = set(holders)
    return [pod for pod in kubelet_pods if pod not in held]


def count_mismatch(pod: Mapping[str, Any], count: int, resource: str = constants.GPU_RESOURCE) -> str | None:
    """Why a claim pod's request of `resource` does not fit its GpuClaim of `count` GPUs, or None when it fits: every
    container that asks for the resource asks for exactly `count` (a claim pod's request is written by its author,
    since the claim may not exist when the pod is created, and a pod's requests never change after)."""
    for c, units in requests(pod, resource):
        if units != count:
            return (
                f"container {str(c.get('name'))[:63]} asks for {units} {resource} but its GpuClaim gives {count} "
                f"GPU(s): a pod's requests are fixed at creation, so recreate it asking for {count} (or none)"
            )
    return None
