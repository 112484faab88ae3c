"""A stand-in for the kubelet's side of the device plugin protocol, for the two checks where no kubelet can run: the
device plugin's requests timed on this machine (tests/integration/test_deviceplugin.py) and the plugin on a real
GPU through NVML on a machine without Kubernetes (hack/device-check.py). Every other test of the node side goes
through the real kubelet of the KinD test-bed (features/deviceplugin).

It plays what kubelet v1.34's device manager does, as read from its source (pkg/kubelet/cm/devicemanager):
- Registration on `<dir>/kubelet.sock`, then the plugin's ListAndWatch stream, keeping the devices and their health;
- one pod admitted at a time, its containers in order (init containers, then containers): a container's devices are
  those its init containers left for reuse, else GetPreferredAllocation over the healthy devices no container holds
  (the ids it answers that are available, the rest filled in), then Allocate; the devices are recorded for the
  container only once Allocate returned, and a failed Allocate rejects the pod and frees what it held;
- PodResources (`List`, `GetAllocatableResources`) on its own socket: the admitted pods and the one being admitted,
  each container with the devices recorded for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import pathlib
import time
from typing import Any

import grpc

from gpu_scheduling import constants, devices
from gpu_scheduling.agent.deviceplugin import method_path, unary_handler
from gpu_scheduling.kubeletapi.deviceplugin import api_pb2 as dp
from gpu_scheduling.kubeletapi.podresources import api_pb2 as pr


class Rejected(Exception):
    """The stand-in kubelet rejected a pod's admission (the plugin refused); the message is the plugin's."""


@dataclasses.dataclass
class Admitted:
    namespace: str
    name: str
    #: container name -> device ids, in the order recorded
    devices: dict[str, list[str]]
    responses: dict[str, dp.ContainerAllocateResponse]


class StandinKubelet:
    def __init__(self, plugin_dir: pathlib.Path, resource: str = constants.GPU_RESOURCE):
        self.plugin_dir = plugin_dir
        self.pod_resources_socket = plugin_dir / "pod-resources.sock"
        self.resource = resource
        self.registrations: list[dp.RegisterRequest] = []
        self.devices: dict[str, str] = {}  # id -> health, from ListAndWatch
        self.updates = 0
        self.pods: list[Admitted] = []
        #: seconds each Allocate call took, as the kubelet waits for it
        self.allocate_seconds: list[float] = []
        self.admitting: Admitted | None = None
        self._server: grpc.aio.Server | None = None
        self._channel: grpc.aio.Channel | None = None
        self._watch: asyncio.Task[None] | None = None
        self._options = dp.DevicePluginOptions()
        self.changed = asyncio.Event()
        #: Devices of the resource that another plugin registered (the kubelet lists them as allocatable too).
        self.foreign: list[str] = []

    # ---- the kubelet's servers ------------------------------------------------------------------------------------

    async def start(self) -> None:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    dp.DESCRIPTOR.services_by_name["Registration"].full_name,
                    {"Register": unary_handler(self._register, dp.RegisterRequest, dp.Empty)},
                ),
                grpc.method_handlers_generic_handler(
                    pr.DESCRIPTOR.services_by_name["PodResourcesLister"].full_name,
                    {
                        "List": unary_handler(self._list, pr.ListPodResourcesRequest, pr.ListPodResourcesResponse),
                        "GetAllocatableResources": unary_handler(
                            self._allocatable, pr.AllocatableResourcesRequest, pr.AllocatableResourcesResponse
                        ),
                    },
                ),
            )
        )
        server.add_insecure_port(f"unix://{self.plugin_dir}/kubelet.sock")
        server.add_insecure_port(f"unix://{self.pod_resources_socket}")
        await server.start()
        self._server = server

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        if self._channel is not None:
            await self._channel.close()
        if self._server is not None:
            await self._server.stop(grace=None)

    async def _register(self, request: dp.RegisterRequest, _context: Any) -> dp.Empty:
        self.registrations.append(request)
        self._options = request.options
        if self._watch is not None:
            self._watch.cancel()
        if self._channel is not None:
            await self._channel.close()
        self._channel = grpc.aio.insecure_channel(f"unix://{self.plugin_dir}/{request.endpoint}")
        self._watch = asyncio.create_task(self._list_and_watch(self._channel))
        return dp.Empty()

    async def _list_and_watch(self, channel: grpc.aio.Channel) -> None:
        stream = channel.unary_stream(
            method_path(dp, "DevicePlugin", "ListAndWatch"),
            request_serializer=dp.Empty.SerializeToString,
            response_deserializer=dp.ListAndWatchResponse.FromString,
        )
        try:
            async for update in stream(dp.Empty()):
                self.devices = {d.ID: d.health for d in update.devices}
                self.updates += 1
                self.changed.set()
        except grpc.aio.AioRpcError:  # the plugin went away: as the kubelet, count none of its devices healthy
            self.devices = dict.fromkeys(self.devices, devices.UNHEALTHY)

    def _listed(self) -> list[Admitted]:
        return self.pods + ([self.admitting] if self.admitting is not None else [])

    async def _list(self, _request: pr.ListPodResourcesRequest, _context: Any) -> pr.ListPodResourcesResponse:
        out = []
        for pod in self._listed():
            containers = [
                pr.ContainerResources(
                    name=name,
                    devices=[pr.ContainerDevices(resource_name=self.resource, device_ids=ids)] if ids else [],
                )
                for name, ids in pod.devices.items()
            ]
            out.append(pr.PodResources(name=pod.name, namespace=pod.namespace, containers=containers))
        return pr.ListPodResourcesResponse(pod_resources=out)

    async def _allocatable(
        self, _request: pr.AllocatableResourcesRequest, _context: Any
    ) -> pr.AllocatableResourcesResponse:
        healthy = sorted(i for i, h in self.devices.items() if h == devices.HEALTHY) + self.foreign
        return pr.AllocatableResourcesResponse(
            devices=[pr.ContainerDevices(resource_name=self.resource, device_ids=healthy)]
        )

    # ---- what the kubelet calls ------------------------------------------------------------------------------------

    async def wait_devices(self, seconds: float = 10) -> dict[str, str]:
        async with asyncio.timeout(seconds):
            while not self.devices:
                self.changed.clear()
                await self.changed.wait()
        return self.devices

    def held(self) -> set[str]:
        return {i for pod in self._listed() for ids in pod.devices.values() for i in ids}

    async def _call(self, method: str, request: Any, response: Any) -> Any:
        assert self._channel is not None, "no plugin registered"
        call = self._channel.unary_unary(
            method_path(dp, "DevicePlugin", method),
            request_serializer=type(request).SerializeToString,
            response_deserializer=response.FromString,
        )
        return await call(request, timeout=30)

    def forget(self, namespace: str, name: str) -> None:
        """The pod ended: its containers' devices are free again."""
        self.pods = [p for p in self.pods if (p.namespace, p.name) != (namespace, name)]

    async def admit(self, pod: dict[str, Any]) -> Admitted:
        """Admit one pod as the kubelet does (see the module's docstring); Rejected when the plugin refuses."""
        meta, spec = pod["metadata"], pod["spec"]
        admitted = Admitted(meta["namespace"], meta["name"], {}, {})
        for c in spec.get("containers", []):  # PodResources lists regular containers whether or not they ask
            admitted.devices[c["name"]] = []
        self.admitting = admitted
        reusable: list[str] = []
        try:
            for kind in ("initContainers", "containers"):
                for c in spec.get(kind) or []:
                    needed = devices.requested(c, self.resource)
                    if not needed:
                        continue
                    chosen = reusable[:needed]
                    if len(chosen) < needed:
                        available = sorted(
                            i for i, h in self.devices.items() if h == devices.HEALTHY and i not in self.held()
                        )
                        if len(available) < needed - len(chosen):
                            raise Rejected(f"requested number of devices unavailable for {self.resource}")
                        if self._options.get_preferred_allocation_available:
                            answer = await self._call(
                                "GetPreferredAllocation",
                                dp.PreferredAllocationRequest(
                                    container_requests=[
                                        dp.ContainerPreferredAllocationRequest(
                                            available_deviceIDs=available + chosen,
                                            must_include_deviceIDs=chosen,
                                            allocation_size=needed,
                                        )
                                    ]
                                ),
                                dp.PreferredAllocationResponse,
                            )
                            for i in answer.container_responses[0].deviceIDs:
                                if i in available and i not in chosen and len(chosen) < needed:
                                    chosen.append(i)
                        chosen.extend([i for i in available if i not in chosen][: needed - len(chosen)])
                    started = time.perf_counter()
                    response = await self._call(
                        "Allocate",
                        dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=chosen)]),
                        dp.AllocateResponse,
                    )
                    self.allocate_seconds.append(time.perf_counter() - started)
                    admitted.responses[c["name"]] = response.container_responses[0]
                    if kind == "initContainers":  # not listed by PodResources; its devices are held for reuse
                        reusable = chosen
                    else:
                        admitted.devices[c["name"]] = chosen
                        reusable = [i for i in reusable if i not in chosen]
        except grpc.aio.AioRpcError as exc:
            raise Rejected(exc.details() or str(exc.code())) from None
        finally:
            self.admitting = None
        self.pods.append(admitted)
        return admitted
