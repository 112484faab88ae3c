"""gpu-device-plugin's gRPC service against the stand-in kubelet (harness/kubelet_standin.py): registration, the
device list and its health, which pod a request is for when many are bound at once, shared GPUs, several
containers, refusals, and registering again after the kubelet restarts. The same behaviours are checked through the
real kubelet on the KinD test-bed (features/deviceplugin); here they run in a second, with no cluster."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import pathlib
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from gpu_scheduling import constants, devices
from gpu_scheduling.agent.deviceplugin import DevicePlugin, Inventory, Kubelet
from harness.kubelet_standin import Rejected, StandinKubelet

NODE = "node4"


def map_pod(
    name: str, index: int, gpu_map: str, containers: int = 1, init: bool = False, units: int = 1
) -> dict[str, Any]:
    limits = {"resources": {"limits": {constants.GPU_RESOURCE: str(units)}}}
    spec: dict[str, Any] = {
        "nodeName": NODE,
        "containers": [{"name": f"c{i}", **limits} for i in range(containers)],
    }
    if init:
        spec["initContainers"] = [{"name": "setup", **limits}]
    return {
        "metadata": {
            "namespace": "default",
            "name": name,
            "uid": f"uid-{name}",
            "labels": {constants.POD_INDEX_LABEL: str(index)},
            "annotations": {constants.MAP_ANNOTATION: gpu_map},
        },
        "spec": spec,
    }


class Node:
    def __init__(self, kubelet: StandinKubelet, plugin: DevicePlugin, stop: asyncio.Event, task: asyncio.Task[None]):
        self.kubelet, self.plugin, self.stop, self.task = kubelet, plugin, stop, task

    def bind(self, *pods: dict[str, Any]) -> None:
        for pod in pods:
            want = devices.wanted(pod)
            assert want is not None
            self.plugin.pods[f"{want.namespace}/{want.name}"] = want


@contextlib.asynccontextmanager
async def started(tmp_path: pathlib.Path) -> AsyncIterator[Node]:
    kubelet = StandinKubelet(tmp_path)
    await kubelet.start()
    plugin = DevicePlugin(
        None,
        Kubelet(str(tmp_path), str(kubelet.pod_resources_socket)),
        Inventory("simulated", NODE, "count=8,islands=2,bandwidth=600/64", str(tmp_path / "files")),
        resource=constants.GPU_RESOURCE,
        slots=4,
        socket_name="gpu-scheduling.sock",
    )
    stop = asyncio.Event()
    task = asyncio.create_task(plugin.run(stop, 0.2))
    await kubelet.wait_devices()
    running = Node(kubelet, plugin, stop, task)
    try:
        yield running
    finally:
        stop.set()
        await task
        await running.kubelet.stop()


def on_node(body: Callable[..., Awaitable[None]]) -> Callable[[pathlib.Path], None]:
    """A test body run on a node of its own (the stand-in kubelet and a started plugin), in one event loop."""

    def test(tmp_path: pathlib.Path) -> None:
        async def go() -> None:
            async with started(tmp_path) as node:
                await body(node, tmp_path) if "tmp_path" in inspect.signature(body).parameters else await body(node)

        asyncio.run(go())

    test.__name__, test.__doc__ = body.__name__, body.__doc__
    return test


def given(admitted: Any, container: str) -> tuple[str, list[str]]:
    response = admitted.responses[container]
    return response.envs[constants.DEVICE_GPUS_ENV], sorted(m.host_path.rsplit("/", 1)[1] for m in response.mounts)


@on_node
async def test_registers_and_lists_every_slot(node: Node) -> None:
    (reg,) = node.kubelet.registrations
    assert (reg.version, reg.resource_name, reg.endpoint) == ("v1beta1", constants.GPU_RESOURCE, "gpu-scheduling.sock")
    assert reg.options.get_preferred_allocation_available
    assert sorted(node.kubelet.devices) == sorted(f"gpu{g}-{s}" for g in range(8) for s in range(4))
    assert set(node.kubelet.devices.values()) == {"Healthy"}


@on_node
async def test_eight_pods_bound_at_once_each_get_their_own(node: Node) -> None:
    gpu_map = "\n".join(f"{i}=node4:{7 - i}" for i in range(8))
    pods = [map_pod(f"p-{i}", i, gpu_map) for i in range(8)]
    node.bind(*pods)  # all bound before the kubelet admits any
    random.Random(4).shuffle(pods)
    for pod in pods:
        admitted = await node.kubelet.admit(pod)
        index = int(pod["metadata"]["labels"][constants.POD_INDEX_LABEL])
        assert given(admitted, "c0") == (str(7 - index), [f"gpu{7 - index}"]), pod["metadata"]["name"]
        assert [devices.gpu_of(i) for i in admitted.devices["c0"]] == [7 - index]
        file = node.plugin.inventory.files_dir + f"/gpu{7 - index}"
        text = await asyncio.to_thread(pathlib.Path(file).read_text)
        assert text == f"id={7 - index}\nuuid={devices.simulated_uuid(NODE, 7 - index)}\nnode=node4\n"


@on_node
async def test_take_home_pods_3_and_4_share_gpu_3(node: Node) -> None:
    gpu_map = "3=node4:3\n4=node4:3"
    pods = [map_pod("check-3", 3, gpu_map), map_pod("check-4", 4, gpu_map)]
    node.bind(*pods)
    first, second = [await node.kubelet.admit(p) for p in pods]
    assert given(first, "c0") == given(second, "c0") == ("3", ["gpu3"])
    assert first.devices["c0"] != second.devices["c0"]  # two slots of one GPU


@on_node
async def test_every_container_and_init_container_gets_the_pods_gpus(node: Node) -> None:
    pod = map_pod("multi", 0, "0=node4:1,2", containers=3, init=True, units=2)
    node.bind(pod)
    admitted = await node.kubelet.admit(pod)
    for container in ("setup", "c0", "c1", "c2"):
        assert given(admitted, container) == ("1,2", ["gpu1", "gpu2"]), container
    assert {devices.gpu_of(i) for c in ("c0", "c1", "c2") for i in admitted.devices[c]} == {1, 2}


@on_node
async def test_pod_without_gpus_from_the_scheduler_is_refused(node: Node) -> None:
    pod = map_pod("stray", 0, "0=node4:1")
    del pod["metadata"]["annotations"][constants.MAP_ANNOTATION]
    node.bind(pod)
    with pytest.raises(Rejected, match="gave it no GPU on this node"):
        await node.kubelet.admit(pod)


@on_node
async def test_a_count_that_differs_from_the_pods_gpus_is_refused(node: Node) -> None:
    pod = map_pod("greedy", 0, "0=node4:1", units=2)
    node.bind(pod)
    with pytest.raises(Rejected, match="asks for exactly its pod's GPU count"):
        await node.kubelet.admit(pod)


@on_node
async def test_a_gpu_with_no_free_slot_is_refused_never_swapped(node: Node) -> None:
    gpu_map = "\n".join(f"{i}=node4:5" for i in range(5))
    pods = [map_pod(f"s-{i}", i, gpu_map) for i in range(5)]
    node.bind(*pods)
    for pod in pods[:4]:
        assert given(await node.kubelet.admit(pod), "c0")[0] == "5"
    with pytest.raises(Rejected, match="GPU 5 has no free slot"):
        await node.kubelet.admit(pods[4])


@on_node
async def test_unhealthy_gpu_is_reported_to_the_kubelet(node: Node) -> None:
    node.plugin.inventory.default_simulated = "count=8,islands=2,bandwidth=600/64,unhealthy=6"
    async with asyncio.timeout(10):
        while node.kubelet.devices.get("gpu6-0") != "Unhealthy":
            node.kubelet.changed.clear()
            await node.kubelet.changed.wait()
    assert {i for i, h in node.kubelet.devices.items() if h == "Unhealthy"} == {f"gpu6-{s}" for s in range(4)}


@on_node
async def test_registers_again_after_the_kubelet_restarts(node: Node, tmp_path: pathlib.Path) -> None:
    pod = map_pod("before", 0, "0=node4:2")
    node.bind(pod)
    await node.kubelet.admit(pod)
    await node.kubelet.stop()
    # The kubelet removes every socket of the folder when it starts.
    await asyncio.to_thread(lambda: [sock.unlink() for sock in tmp_path.glob("*.sock")])
    restarted = StandinKubelet(tmp_path)
    restarted.pods = node.kubelet.pods  # its checkpoint
    await restarted.start()
    node.kubelet = restarted
    await restarted.wait_devices()
    assert len(restarted.registrations) == 1
    after = map_pod("after", 1, "1=node4:3")
    node.bind(after)
    assert given(await restarted.admit(after), "c0") == ("3", ["gpu3"])


async def until(what: str, condition: Callable[[], bool], seconds: float = 10) -> None:
    """Poll `condition` (the plugin's state, which signals nothing) every 50 ms until it holds."""
    for _ in range(int(seconds / 0.05)):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"not {what} after {seconds}s")


@on_node
async def test_another_plugin_of_the_resource_is_reported_and_the_plugin_is_not_ready(node: Node) -> None:
    await until("ready", node.plugin.ready)
    node.kubelet.foreign = ["nvidia0", "nvidia1"]  # what a second plugin of gpu.scheduling/gpu would list
    await until("unready", lambda: not node.plugin.ready())
    assert "another device plugin registered gpu.scheduling/gpu on this node" in node.plugin.problem
    assert "nvidia0" in node.plugin.problem
    node.kubelet.foreign = []
    await until("ready again", node.plugin.ready)
