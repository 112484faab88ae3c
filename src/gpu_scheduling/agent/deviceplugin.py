"""`gpu-device-plugin`: the kubelet device plugin of this node's GPUs (device plugin API v1beta1 over gRPC), so that
the kubelet gives each container exactly the GPUs gpu-scheduler chose, and counts them.

It serves the resource constants.GPU_RESOURCE on a unix socket in the kubelet's device plugin folder, registers
it with the kubelet, streams the node's GPUs (`--slots` devices each) with their health, and registers again
whenever the kubelet restarts (its socket is recreated, ours removed). Which pod a request is for is read from the
kubelet's PodResources API and this node's pods (a watch); the decision itself is the pure `devices` module.

Two inventories, chosen explicitly with `--source`:
- `simulated`: the node's declaration (annotation constants.SIMULATED_ANNOTATION, else `--simulated`); a container
  is given one read-only file per GPU (id, simulated UUID, node) and the variables of `devices.response`;
- `nvml`: the driver's GPUs through NVML; a container is given each GPU's /dev/nvidia<minor>, the control devices
  and NVIDIA_VISIBLE_DEVICES=<UUIDs> (which NVIDIA's container runtime reads), and the GPUs' CDI devices: the plugin
  keeps a CDI spec of the GPUs and the driver under --driver-root in --cdi-dir, so that a CDI-aware runtime
  (containerd 2) also gives the container the driver's programs and libraries (`gpu_scheduling.cdi`).

Touches only its own socket, the GPU files folder (simulated), its CDI spec (nvml) and the kubelet's two sockets;
reads pods and its Node.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import logging
import os
import pathlib
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any, TypeVar

import grpc
from aiohttp import web

from gpu_scheduling import cdi, constants, devices, gpumap, health, logs, runtime
from gpu_scheduling.agent import inventory, nvml
from gpu_scheduling.kube import config as kubeconfig
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.client import Client
from gpu_scheduling.kube.errors import ApiError
from gpu_scheduling.kube.informer import Informer, key_of
from gpu_scheduling.kubeletapi.deviceplugin import api_pb2 as dp
from gpu_scheduling.kubeletapi.podresources import api_pb2 as pr

log = logging.getLogger("gpu_scheduling.agent.deviceplugin")

_T = TypeVar("_T")

DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
KUBELET_SOCKET_NAME = "kubelet.sock"
API_VERSION = "v1beta1"
#: How long a request waits for the pod it is for to reach this plugin's watch (the kubelet may see it first).
MATCH_WAIT_S = 5.0
#: Seconds between two writes of the kubelet's view for the agent (--kubelet-view-file).
VIEW_PERIOD_S = 3.0


def _present(paths_: tuple[str, ...]) -> list[str]:
    return [d for d in paths_ if pathlib.Path(d).exists()]


def _inode(path: pathlib.Path) -> int | None:
    """The inode of `path`, None when it does not exist: a new kubelet socket (a restarted kubelet) has a new one."""
    try:
        return path.stat().st_ino
    except FileNotFoundError:
        return None


def _remove(path: pathlib.Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def _no_view(exc: grpc.aio.AioRpcError) -> str:
    """The answer when the kubelet's PodResources API does not answer: without it no pod can be told apart."""
    message = f"cannot read the kubelet's PodResources API to tell which pod is admitted: {exc.details()}"
    log.warning("%s", message)
    return message


def _write_atomically(path: str | pathlib.Path, text: str, mode: int) -> None:
    """Replace `path` with `text` in one rename, so a reader (the kubelet's mount, the agent) never sees half a file."""
    target = pathlib.Path(path)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(text)
    tmp.chmod(mode)
    tmp.replace(target)


def method_path(package: Any, service: str, method: str) -> str:
    """The gRPC path of a method, from the generated descriptors (the proto is the one source of its names)."""
    return f"/{package.DESCRIPTOR.services_by_name[service].full_name}/{method}"


def unary_handler(fn: Callable[..., Any], request: Any, response: Any) -> grpc.RpcMethodHandler[Any, Any]:
    """A unary method served by `fn`, its messages (de)serialized by the generated classes."""
    return grpc.unary_unary_rpc_method_handler(
        fn, request_deserializer=request.FromString, response_serializer=response.SerializeToString
    )


async def _unary(
    socket: str, package: Any, service: str, method: str, request: Any, response: type[_T], seconds: float
) -> _T:
    """One unary call of the kubelet's `service` on its unix `socket`, on a channel of its own."""
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        call = channel.unary_unary(
            method_path(package, service, method),
            request_serializer=type(request).SerializeToString,
            response_deserializer=response.FromString,  # type: ignore[attr-defined]  # every message class has it
        )
        answer: _T = await call(request, timeout=seconds)
        return answer


def view_document(view: Mapping[tuple[str, str], Mapping[str, list[str]]], resource: str) -> dict[str, Any]:
    """The kubelet's view as --show-kubelet prints it and --kubelet-view-file keeps it: pods by "<ns>/<name>"."""
    return {"resource": resource, "pods": {f"{ns}/{name}": dict(c) for (ns, name), c in sorted(view.items())}}


def allocatable_ids(response: pr.AllocatableResourcesResponse, resource: str) -> set[str]:
    """The device ids of `resource` the kubelet can allocate (every registered plugin's)."""
    return {i for d in response.devices if d.resource_name == resource for i in d.device_ids}


def kubelet_view(response: pr.ListPodResourcesResponse, resource: str) -> dict[tuple[str, str], dict[str, list[str]]]:
    """The PodResources list as `devices.KubeletView`: every pod and container, with its devices of `resource`."""
    view: dict[tuple[str, str], dict[str, list[str]]] = {}
    for pod in response.pod_resources:
        containers = view.setdefault((pod.namespace, pod.name), {})
        for container in pod.containers:
            ids = [i for d in container.devices if d.resource_name == resource for i in d.device_ids]
            containers[container.name] = ids
    return view


def container_response(answer: devices.ContainerResponse, cdi_devices: Iterable[str]) -> dp.ContainerAllocateResponse:
    """One container's Allocate answer. With CDI the device specs and variables stay: a runtime without CDI (or a
    kubelet that drops the field) still gives the device nodes, and containerd applies both, the CDI spec's device
    nodes replacing the same paths."""
    return dp.ContainerAllocateResponse(
        envs=answer.envs,
        mounts=[dp.Mount(container_path=c, host_path=h, read_only=r) for c, h, r in answer.mounts],
        devices=[dp.DeviceSpec(container_path=c, host_path=h, permissions=p) for c, h, p in answer.devices],
        cdi_devices=[dp.CDIDevice(name=n) for n in cdi_devices],
    )


class Kubelet:
    """The kubelet's two gRPC endpoints this plugin calls: Registration and PodResources."""

    def __init__(self, plugin_dir: str, pod_resources_socket: str):
        self.plugin_dir, self.pod_resources_socket = plugin_dir, pod_resources_socket

    async def register(self, endpoint: str, resource: str) -> None:
        options = dp.DevicePluginOptions(get_preferred_allocation_available=True)
        request = dp.RegisterRequest(version=API_VERSION, endpoint=endpoint, resource_name=resource, options=options)
        await _unary(f"{self.plugin_dir}/{KUBELET_SOCKET_NAME}", dp, "Registration", "Register", request, dp.Empty, 10)

    async def list(self) -> pr.ListPodResourcesResponse:
        request = pr.ListPodResourcesRequest()
        response = pr.ListPodResourcesResponse
        return await _unary(self.pod_resources_socket, pr, "PodResourcesLister", "List", request, response, 5)

    async def allocatable(self) -> pr.AllocatableResourcesResponse:
        request = pr.AllocatableResourcesRequest()
        response = pr.AllocatableResourcesResponse
        method = "GetAllocatableResources"
        return await _unary(self.pod_resources_socket, pr, "PodResourcesLister", method, request, response, 5)


def driver_listing(root: str, gpus: Iterable[devices.NodeGpu]) -> cdi.Driver:
    """What exists of the driver: the files under the driver root's folders that a container is given (symbolic
    links included, as the libraries' sonames are), and the device nodes of the control devices and of `gpus`."""
    files: set[str] = set()
    for folder in cdi.DRIVER_FOLDERS:
        top = pathlib.Path(root, folder)
        for current, _dirs, names in os.walk(top):
            rel = pathlib.Path(current).relative_to(root)
            files.update(str(rel / name) for name in names)
    wanted = [*devices.NVIDIA_CONTROL_DEVICES, *(f"/dev/nvidia{g.minor}" for g in gpus if g.minor is not None)]
    return cdi.Driver(root, frozenset(files), frozenset(_present(tuple(wanted))))


class Inventory:
    """This node's GPUs as the plugin gives them out: the devices (id, health) and each GPU's identity; with NVML
    and a `cdi_dir`, the CDI spec of the GPUs and of the driver under `driver_root`, kept up to date."""

    def __init__(
        self,
        source: str,
        node: str,
        default_simulated: str,
        files_dir: str | None,
        *,
        cdi_dir: str = "",
        driver_root: str = cdi.DEFAULT_DRIVER_ROOT,
        with_glibc: bool = False,
        cdi_kind: str = cdi.KIND,
    ):
        self.source, self.node, self.default_simulated, self.files_dir = source, node, default_simulated, files_dir
        self.gpus: list[dict[str, Any]] = []
        self.identity: dict[int, devices.NodeGpu] = {}
        self.control: list[str] = []
        #: Where the CDI spec is kept ("": no CDI, the simulated source's case); the driver it describes.
        self.cdi_dir = cdi_dir if source == "nvml" else ""
        self.driver_root, self.with_glibc = driver_root, with_glibc
        #: The kind whose devices Allocate names: this plugin's own spec, or another's (the GPU Operator's toolkit
        #: generates `nvidia.com/gpu`), which this plugin then does not write.
        self.cdi_kind = cdi_kind
        #: The spec's text as last written, so that it is written again only when it changes (or a write failed).
        self.cdi_text = ""

    def cdi_devices(self, gpus: Iterable[devices.NodeGpu]) -> list[str]:
        """The CDI names that Allocate answers for `gpus`; none without CDI."""
        return [cdi.qualified_name(cdi.device_name(g), self.cdi_kind) for g in gpus] if self.cdi_dir else []

    def write_cdi(self) -> None:
        """Keep the CDI spec of the GPUs read last, replaced in one rename (a runtime reading the folder never sees
        half a spec). A spec with no device is not valid CDI, so the file is removed then. Failures are logged, and
        the next read tries again: the GPUs are still served, and a container given one fails to start with the
        runtime's reason (an unresolvable CDI device) rather than without its driver."""
        if not self.cdi_dir or self.cdi_kind != cdi.KIND:
            return
        path = pathlib.Path(self.cdi_dir, cdi.SPEC_FILE)
        try:
            driver = driver_listing(self.driver_root, self.identity.values())
            document = cdi.spec(self.identity.values(), driver, with_glibc=self.with_glibc)
            text = json.dumps(document, indent=2, sort_keys=True) + "\n"
            if text == self.cdi_text and path.exists() == bool(document["devices"]):
                return
            if document["devices"]:
                path.parent.mkdir(parents=True, exist_ok=True)
                _write_atomically(path, text, 0o644)
            else:
                _remove(path)
        except OSError as exc:
            self.cdi_text = ""
            log.error("could not keep the CDI spec %s: %s", path, exc)
            return
        self.cdi_text = text
        log.info(
            "CDI spec %s: %d GPU(s), driver root %s (%d file(s))",
            path,
            len({d["containerEdits"]["deviceNodes"][0]["path"] for d in document["devices"]}),
            self.driver_root,
            len(driver.files),
        )

    async def read(self, client: Client | None) -> bool:
        """Read the GPUs again; True when what the kubelet is told changed. NVML errors are raised, never hidden.
        Without a client (a stand-in kubelet's check) a simulated node has the `--simulated` declaration."""
        if self.source == "nvml":
            gpus, ids = await asyncio.to_thread(nvml.with_identities)
            identity = {i: devices.NodeGpu(i, uuid, minor) for i, (uuid, minor) in ids.items()}
            self.control = _present(devices.NVIDIA_CONTROL_DEVICES)
        else:
            declared = self.default_simulated
            if client is not None:
                node = await client.get(paths.node(self.node))
                annotations = node["metadata"].get("annotations") or {}
                declared = annotations.get(constants.SIMULATED_ANNOTATION, self.default_simulated)
            gpus = inventory.parse_simulated(declared)
            identity = {g["id"]: devices.NodeGpu(g["id"], devices.simulated_uuid(self.node, g["id"])) for g in gpus}
        changed = [(g["id"], g["health"]) for g in gpus] != [(g["id"], g["health"]) for g in self.gpus] or (
            identity != self.identity
        )
        self.gpus, self.identity = gpus, identity
        if changed and self.files_dir is not None:
            self._write_files()
        await asyncio.to_thread(self.write_cdi)
        return changed

    def _write_files(self) -> None:
        """One file per GPU, replaced atomically: the kubelet mounts it into the containers given that GPU."""
        assert self.files_dir is not None
        folder = pathlib.Path(self.files_dir)
        folder.mkdir(parents=True, exist_ok=True)
        for gpu in self.identity.values():
            target = folder / f"gpu{gpu.id}"
            text = devices.device_file(self.node, gpu)
            if not (target.is_file() and target.read_text() == text):
                _write_atomically(target, text, 0o444)


class DevicePlugin:
    """The DevicePlugin service, its registration, and the watch of this node's pods.

    Without a client (the stand-in kubelet's checks, where no apiserver runs) nothing is watched: the caller fills
    `pods` with the pods of the node."""

    def __init__(
        self,
        client: Client | None,
        kubelet: Kubelet,
        inv: Inventory,
        *,
        resource: str,
        slots: int,
        socket_name: str,
        view_file: str = "",
    ):
        self.client, self.kubelet, self.inventory = client, kubelet, inv
        self.resource, self.slots, self.socket_name = resource, slots, socket_name
        #: Where the kubelet's view is kept for the agent ("": nowhere).
        self.view_file = view_file
        self.pods: dict[str, devices.Wanted] = {}
        self.maps = gpumap.ParseCache()  # the maps of this node's pods, each parsed once
        self.informer = (
            Informer(
                client,
                paths.ALL_PODS,
                self._on_pod,
                params={"fieldSelector": f"spec.nodeName={inv.node}"},
                name=f"pods on {inv.node}",
            )
            if client is not None
            else None
        )
        self._changed = asyncio.Condition()
        self._version = 0
        self._lock = asyncio.Lock()
        # The match GetPreferredAllocation found, for the Allocate of the same container that follows it: asking the
        # kubelet's PodResources again from inside Allocate can make it recount its devices while one is in flight.
        self._pending: tuple[devices.Match, float] | None = None
        self.registered_at = 0.0
        self.problem = ""

    # ---- the pods of this node ----------------------------------------------------------------------------------

    def _on_pod(self, kind: str, obj: dict[str, Any], _old: dict[str, Any] | None) -> None:
        key = key_of(obj)
        want = None if kind == "DELETED" else devices.wanted(obj, self.resource, self.maps)
        if want is None:
            self.pods.pop(key, None)
        else:
            self.pods[key] = want

    async def _fresh_pods(self) -> None:
        """Read this node's pods once from the API, for a request whose pod the watch has not delivered yet."""
        if self.client is None:
            return
        listed = await self.client.get(paths.ALL_PODS, fieldSelector=f"spec.nodeName={self.inventory.node}")
        for pod in listed.get("items") or []:
            want = devices.wanted(pod, self.resource, self.maps)
            if want is not None:
                self.pods[key_of(pod)] = want

    async def match(self, size: int) -> devices.Match:
        """The container the kubelet is allocating `size` devices for; devices.Refusal when it cannot be told."""
        deadline = time.monotonic() + MATCH_WAIT_S
        fresh = False
        while True:
            view = kubelet_view(await self.kubelet.list(), self.resource)
            try:
                return devices.admitting(list(self.pods.values()), view, size)
            except devices.Refusal as exc:
                if exc.final or time.monotonic() >= deadline:
                    raise
            if not fresh:
                with contextlib.suppress(ApiError, OSError):
                    await self._fresh_pods()
                fresh = True
            else:
                await asyncio.sleep(0.25)

    # ---- the DevicePlugin service -------------------------------------------------------------------------------

    async def get_options(self, _request: dp.Empty, _context: Any) -> dp.DevicePluginOptions:
        return dp.DevicePluginOptions(get_preferred_allocation_available=True)

    def _device_list(self) -> dp.ListAndWatchResponse:
        return dp.ListAndWatchResponse(
            devices=[dp.Device(ID=i, health=h) for i, h in devices.advertised(self.inventory.gpus, self.slots)]
        )

    async def list_and_watch(self, _request: dp.Empty, _context: Any) -> AsyncIterator[dp.ListAndWatchResponse]:
        seen = -1
        while True:
            async with self._changed:
                await self._changed.wait_for(functools.partial(self._moved_on, seen))
                seen = self._version
            yield self._device_list()

    def _moved_on(self, seen: int) -> bool:
        return self._version != seen

    async def preferred(
        self, request: dp.PreferredAllocationRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> dp.PreferredAllocationResponse:
        out = []
        async with self._lock:
            for creq in request.container_requests:
                try:
                    found = await self.match(creq.allocation_size)
                except devices.Refusal as exc:
                    log.warning("GetPreferredAllocation refused: %s", exc)
                    await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
                except grpc.aio.AioRpcError as exc:
                    await context.abort(grpc.StatusCode.UNAVAILABLE, _no_view(exc))
                self._pending = (found, time.monotonic())
                ids = devices.preferred(
                    found.pod.gpus, creq.available_deviceIDs, creq.must_include_deviceIDs, creq.allocation_size
                )
                log.info("pod %s container %s: preferring %s", found.pod.ref, found.container, ",".join(ids))
                out.append(dp.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return dp.PreferredAllocationResponse(container_responses=out)

    async def allocate(
        self, request: dp.AllocateRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> dp.AllocateResponse:
        started = time.monotonic()
        out = []
        async with self._lock:
            for creq in request.container_requests:
                ids = list(creq.devices_ids)
                pending, self._pending = self._pending, None
                try:
                    found = None
                    if pending is not None and started - pending[1] < 10 and pending[0].units == len(ids):
                        with contextlib.suppress(devices.Refusal):
                            devices.check(pending[0], ids)
                            found = pending[0]
                    if found is None:
                        found = await self.match(len(ids))
                    gpus = devices.check(found, ids)
                except devices.Refusal as exc:
                    log.warning("Allocate of %s refused: %s", ",".join(ids), exc)
                    await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
                except grpc.aio.AioRpcError as exc:
                    await context.abort(grpc.StatusCode.UNAVAILABLE, _no_view(exc))
                given = [self.inventory.identity[g] for g in gpus if g in self.inventory.identity]
                if len(given) != len(gpus):
                    await context.abort(
                        grpc.StatusCode.FAILED_PRECONDITION,
                        f"GPUs {','.join(map(str, gpus))} are not all in this node's inventory",
                    )
                answer = devices.response(
                    given, files_dir=self.inventory.files_dir, control_devices=self.inventory.control
                )
                out.append(container_response(answer, self.inventory.cdi_devices(given)))
                log.info(
                    "pod %s container %s given GPUs %s (%s) in %.1f ms",
                    found.pod.ref,
                    found.container,
                    ",".join(map(str, gpus)),
                    ",".join(ids),
                    (time.monotonic() - started) * 1000,
                )
        return dp.AllocateResponse(container_responses=out)

    async def pre_start(self, _request: dp.PreStartContainerRequest, _context: Any) -> dp.PreStartContainerResponse:
        return dp.PreStartContainerResponse()

    def handler(self) -> grpc.GenericRpcHandler:
        service = dp.DESCRIPTOR.services_by_name["DevicePlugin"].full_name
        return grpc.method_handlers_generic_handler(
            service,
            {
                "GetDevicePluginOptions": unary_handler(self.get_options, dp.Empty, dp.DevicePluginOptions),
                "ListAndWatch": grpc.unary_stream_rpc_method_handler(
                    self.list_and_watch,
                    request_deserializer=dp.Empty.FromString,
                    response_serializer=dp.ListAndWatchResponse.SerializeToString,
                ),
                "GetPreferredAllocation": unary_handler(
                    self.preferred, dp.PreferredAllocationRequest, dp.PreferredAllocationResponse
                ),
                "Allocate": unary_handler(self.allocate, dp.AllocateRequest, dp.AllocateResponse),
                "PreStartContainer": unary_handler(
                    self.pre_start, dp.PreStartContainerRequest, dp.PreStartContainerResponse
                ),
            },
        )

    async def devices_changed(self) -> None:
        async with self._changed:
            self._version += 1
            self._changed.notify_all()

    # ---- serving and registering ----------------------------------------------------------------------------------

    async def _serve(self) -> grpc.aio.Server:
        socket = pathlib.Path(self.kubelet.plugin_dir, self.socket_name)
        _remove(socket)
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((self.handler(),))
        server.add_insecure_port(f"unix://{socket}")
        await server.start()
        return server

    async def _conflict(self) -> str:
        """Why another plugin may be handing out this node's GPUs too: another plugin's devices under our resource in
        the kubelet's allocatable list, or NVIDIA's resource on this Node. "" when none is seen."""
        ours = {i for i, _ in devices.advertised(self.inventory.gpus, self.slots)}
        with contextlib.suppress(grpc.aio.AioRpcError):
            theirs = allocatable_ids(await self.kubelet.allocatable(), self.resource) - ours
            if theirs:
                return (
                    f"another device plugin registered {self.resource} on this node (the kubelet lists devices "
                    f"{', '.join(sorted(theirs)[:5])} that this plugin does not serve): two plugins of one resource "
                    "race for the kubelet; remove the other"
                )
        if self.client is None:
            return ""
        with contextlib.suppress(ApiError, OSError):
            node = await self.client.get(paths.node(self.inventory.node))
            capacity = (node.get("status") or {}).get("capacity") or {}
            if str(capacity.get(constants.NVIDIA_GPU_RESOURCE, "0")) not in ("0", ""):
                return (
                    f"this node also advertises {constants.NVIDIA_GPU_RESOURCE}: NVIDIA's device plugin runs here and "
                    "can hand out the same GPUs again; label the node "
                    f"{constants.NVIDIA_DEVICE_PLUGIN_LABEL}=false (the GPU Operator then keeps its plugin off it)"
                )
        return ""

    async def run(self, stop: asyncio.Event, interval: float) -> None:
        watcher = asyncio.create_task(self.informer.run()) if self.informer is not None else None
        server: grpc.aio.Server | None = None
        kubelet_socket = pathlib.Path(self.kubelet.plugin_dir, KUBELET_SOCKET_NAME)
        our_socket = pathlib.Path(self.kubelet.plugin_dir, self.socket_name)
        registered_inode = None
        next_read = next_view = 0.0
        lost_at: float | None = None
        try:
            while not stop.is_set():
                now = time.monotonic()
                if now >= next_read:
                    next_read = now + interval
                    try:
                        if await self.inventory.read(self.client):
                            await self.devices_changed()
                            log.info(
                                "serving %d GPU(s) as %d %s devices (%d unhealthy GPU(s))",
                                len(self.inventory.gpus),
                                len(self.inventory.gpus) * self.slots,
                                self.resource,
                                sum(1 for g in self.inventory.gpus if g["health"] != "Healthy"),
                            )
                        problem = await self._conflict() if registered_inode is not None else ""
                        if problem != self.problem:
                            (log.error if problem else log.info)(problem or "no other plugin serves this node's GPUs")
                        self.problem = problem
                    except (ApiError, OSError, inventory.InventoryError) as exc:
                        log.warning("could not read this node's GPUs: %s", exc)
                inode = _inode(kubelet_socket)
                if inode is not None and (inode != registered_inode or _inode(our_socket) is None):
                    if registered_inode is not None and lost_at is None:
                        lost_at = now
                    if server is not None:
                        await server.stop(grace=None)
                    server = await self._serve()
                    try:
                        await self.kubelet.register(self.socket_name, self.resource)
                    except grpc.aio.AioRpcError as exc:
                        log.warning("could not register with the kubelet: %s", exc.details())
                    else:
                        registered_inode = inode
                        self.registered_at = time.monotonic()
                        if lost_at is not None:
                            log.info(
                                "registered %s with the kubelet again (it restarted), %.1f s after this plugin noticed",
                                self.resource,
                                self.registered_at - lost_at,
                            )
                            lost_at = None
                        else:
                            log.info("registered %s with the kubelet (endpoint %s)", self.resource, self.socket_name)
                elif inode is None and registered_inode is not None and lost_at is None:
                    lost_at = now
                    log.info("the kubelet's socket is gone (kubelet restarting); waiting for it")
                if registered_inode is not None and now >= next_view:
                    next_view = now + VIEW_PERIOD_S
                    await self.write_view()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.5)
        finally:
            if watcher is not None:
                watcher.cancel()
            if server is not None:
                await server.stop(grace=1)
            _remove(our_socket)

    async def write_view(self) -> None:
        """Write the kubelet's view (the --show-kubelet document) to --kubelet-view-file, atomically, for the agent
        beside this plugin to publish in the node's GpuNodeStatus."""
        if not self.view_file:
            return
        try:
            view = kubelet_view(await self.kubelet.list(), self.resource)
        except grpc.aio.AioRpcError as exc:
            log.debug("no PodResources list: %s", exc.details())
            return
        document = view_document(view, self.resource)
        await asyncio.to_thread(_write_atomically, self.view_file, json.dumps(document, sort_keys=True), 0o644)

    def ready(self) -> bool:
        synced = self.informer is None or self.informer.synced.is_set()
        return bool(self.registered_at) and synced and not self.problem


async def run(args: argparse.Namespace, stop: asyncio.Event) -> None:
    files_dir = args.files_dir if args.source == "simulated" else None
    async with Client(kubeconfig.load(args.kubeconfig), user_agent="gpu-device-plugin") as client:
        plugin = DevicePlugin(
            client,
            Kubelet(args.plugin_dir, args.pod_resources_socket),
            Inventory(
                args.source,
                args.node_name,
                args.simulated,
                files_dir,
                cdi_dir=args.cdi_dir,
                driver_root=args.driver_root,
                with_glibc=args.cdi_glibc,
                cdi_kind=args.cdi_kind,
            ),
            resource=args.resource,
            slots=args.slots,
            socket_name=args.socket_name,
            view_file=args.kubelet_view_file,
        )
        runner = None
        if args.health_port:
            app = web.Application()
            health.add_probes(app, plugin.ready)
            runner = await health.serve(app, args.health_host, args.health_port)
        try:
            await plugin.run(stop, args.interval)
        finally:
            if runner is not None:
                await runner.cleanup()


async def show_kubelet(args: argparse.Namespace) -> None:
    """Print the kubelet's view (PodResources List, and what it can allocate) of the resource as JSON."""
    kubelet = Kubelet(args.plugin_dir, args.pod_resources_socket)
    document = view_document(kubelet_view(await kubelet.list(), args.resource), args.resource)
    document["allocatable"] = sorted(allocatable_ids(await kubelet.allocatable(), args.resource))
    print(json.dumps(document, indent=2))


def _cdi_kind(text: str) -> str:
    if not cdi.valid_kind(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a CDI kind (<vendor>/<class>)")
    return text


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="gpu-device-plugin", description=__doc__)
    p.add_argument("--kubeconfig")
    p.add_argument("--node-name", default=os.environ.get(constants.NODE_NAME_ENV), help="default: $NODE_NAME")
    p.add_argument(
        "--source",
        choices=["nvml", "simulated"],
        help="nvml: the driver's GPUs (an NVML failure is an error); simulated: the node's declared GPUs",
    )
    p.add_argument("--simulated", default=inventory.DEFAULT_SIMULATED, help="declaration without the node annotation")
    p.add_argument("--resource", default=constants.GPU_RESOURCE, help=f"default {constants.GPU_RESOURCE}")
    p.add_argument(
        "--slots",
        type=runtime.integer(1, 1024),
        default=constants.DEVICE_SLOTS_DEFAULT,
        help="devices per GPU (containers per GPU)",
    )
    p.add_argument("--plugin-dir", default=DEVICE_PLUGIN_DIR, help=f"the kubelet's plugin folder ({DEVICE_PLUGIN_DIR})")
    p.add_argument("--socket-name", default="gpu-scheduling.sock", help="this plugin's socket in --plugin-dir")
    p.add_argument("--pod-resources-socket", default=POD_RESOURCES_SOCKET)
    p.add_argument(
        "--files-dir",
        default="/var/lib/gpu-scheduling/devices",
        help="simulated: host folder of the GPUs' files (mounted at the same path in this container)",
    )
    p.add_argument(
        "--cdi-dir",
        default=cdi.DEFAULT_DIR,
        help=f"nvml: keep the GPUs' CDI spec ({cdi.SPEC_FILE}) here and answer CDI devices ('': no CDI)",
    )
    p.add_argument(
        "--driver-root",
        default=cdi.DEFAULT_DRIVER_ROOT,
        help="nvml: the host folder of the driver (bin, lib64, glibc) that the CDI spec gives containers",
    )
    p.add_argument(
        "--cdi-glibc",
        action="store_true",
        help="nvml: the CDI spec also mounts the driver's glibc loader at /lib64/ld-linux-x86-64.so.2, for images "
        "without glibc (every glibc program of the container then runs on the driver's glibc)",
    )
    p.add_argument(
        "--cdi-kind",
        type=_cdi_kind,
        default=cdi.KIND,
        help=f"nvml: the CDI kind whose devices (by GPU UUID) Allocate names; another than {cdi.KIND} (such as the GPU "
        "Operator's nvidia.com/gpu) is another's spec, and this plugin writes none",
    )
    p.add_argument(
        "--interval", type=runtime.seconds(0.1, 3600), default=5.0, help="seconds between reads of the GPUs' health"
    )
    p.add_argument(
        "--kubelet-view-file",
        default="",
        help="keep the kubelet's view (as --show-kubelet prints it) in this file, for gpu-inventory-agent",
    )
    p.add_argument("--health-port", type=runtime.optional_port, default=8081, help="/healthz and /readyz (0: none)")
    p.add_argument("--health-host", default="0.0.0.0")
    p.add_argument("--show-kubelet", action="store_true", help="print the kubelet's view of the resource and exit")
    logs.add_arguments(p)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logs.configure(args.log_level, args.log_format)
    if args.show_kubelet:
        asyncio.run(show_kubelet(args))
        return
    if args.source is None:
        raise SystemExit("gpu-device-plugin: --source nvml or --source simulated is required")
    if not args.node_name:
        raise SystemExit("gpu-device-plugin: --node-name or NODE_NAME is required")
    runtime.run("gpu-device-plugin", functools.partial(run, args))


if __name__ == "__main__":
    main()
