"""The inventory agent: simulated declarations, NVLink islands, the status it writes and how it writes it."""

import asyncio

import pytest

from gpu_scheduling import constants
from gpu_scheduling.agent import inventory, main, publish
from gpu_scheduling.claims import objects
from gpu_scheduling.kube.errors import AlreadyExists, Forbidden

# The simulated node of the claim scenarios and the benchmark, written out: GPUs 0-3 in one NVLink island at
# 600 GB/s, 4-7 in another at 64 GB/s, all healthy and free.
EIGHT_GPUS_TWO_ISLANDS = {
    "total": 8,
    "free": 8,
    "unhealthy": 0,
    "devices": [
        {"id": 0, "health": "Healthy", "island": "nvlink-group-0", "bandwidthGBps": 600, "inUseBy": []},
        {"id": 1, "health": "Healthy", "island": "nvlink-group-0", "bandwidthGBps": 600, "inUseBy": []},
        {"id": 2, "health": "Healthy", "island": "nvlink-group-0", "bandwidthGBps": 600, "inUseBy": []},
        {"id": 3, "health": "Healthy", "island": "nvlink-group-0", "bandwidthGBps": 600, "inUseBy": []},
        {"id": 4, "health": "Healthy", "island": "nvlink-group-1", "bandwidthGBps": 64, "inUseBy": []},
        {"id": 5, "health": "Healthy", "island": "nvlink-group-1", "bandwidthGBps": 64, "inUseBy": []},
        {"id": 6, "health": "Healthy", "island": "nvlink-group-1", "bandwidthGBps": 64, "inUseBy": []},
        {"id": 7, "health": "Healthy", "island": "nvlink-group-1", "bandwidthGBps": 64, "inUseBy": []},
    ],
}


def test_the_default_simulated_node_is_eight_gpus_in_two_islands():
    assert inventory.simulated_status() == EIGHT_GPUS_TWO_ISLANDS
    assert inventory.simulated_status(inventory.DEFAULT_SIMULATED) == EIGHT_GPUS_TWO_ISLANDS


def test_a_simulated_status_counts_unhealthy_gpus():
    status = inventory.simulated_status("count=4,islands=2,bandwidth=600/64,unhealthy=3")
    assert (status["total"], status["free"], status["unhealthy"]) == (4, 3, 1)
    assert status["devices"][3] == {
        "id": 3,
        "health": "Unhealthy",
        "island": "nvlink-group-1",
        "bandwidthGBps": 0,
        "inUseBy": [],
    }


def test_the_reference_example_node():
    devices = inventory.parse_simulated("count=8,islands=2,bandwidth=600/64,unhealthy=7")
    assert [(d["id"], d["island"], d["bandwidthGBps"], d["health"]) for d in devices] == [
        (0, "nvlink-group-0", 600, "Healthy"),
        (1, "nvlink-group-0", 600, "Healthy"),
        (2, "nvlink-group-0", 600, "Healthy"),
        (3, "nvlink-group-0", 600, "Healthy"),
        (4, "nvlink-group-1", 64, "Healthy"),
        (5, "nvlink-group-1", 64, "Healthy"),
        (6, "nvlink-group-1", 64, "Healthy"),
        (7, "nvlink-group-1", 0, "Unhealthy"),
    ]


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("count=8,colour=red", "expected count=N"),
        ("count=eight", "expected integers"),
        ("count=2,bandwidth=", "at least one bandwidth"),
    ],
)
def test_bad_declarations_say_what_was_expected(text, fragment):
    with pytest.raises(inventory.InventoryError, match=fragment):
        inventory.parse_simulated(text)


def test_islands_are_connected_components():
    assert inventory.islands_from_links(6, [(0, 1), (1, 2), (4, 5)]) == {0: 0, 1: 0, 2: 0, 3: 1, 4: 2, 5: 2}
    assert inventory.islands_from_links(1, []) == {0: 0}


def test_status_counts_and_in_use_by_follow_leases_and_map_pods():
    devices = inventory.parse_simulated("count=4,islands=1,bandwidth=600,unhealthy=3")
    leases = [
        objects.lease_body("n1", 0, "Exclusive", {"u1": "ns/p1"}),
        objects.lease_body("n1", 1, "Shared", {"u2": "ns/p2", "u3": ""}),
    ]
    pods = [
        {
            "metadata": {
                "uid": "m",
                "namespace": "default",
                "name": "check-2",
                "annotations": {"gpu-scheduling-map": "2=n1:1,2"},
            },
            "spec": {"nodeName": "n1"},
            "status": {"phase": "Running"},
        },
        {
            "metadata": {
                "uid": "f",
                "namespace": "default",
                "name": "done-0",
                "annotations": {"gpu-scheduling-map": "0=n1:2"},
            },
            "spec": {"nodeName": "n1"},
            "status": {"phase": "Succeeded"},
        },
    ]
    status = inventory.node_status(devices, leases, pods)
    assert (status["total"], status["free"], status["unhealthy"]) == (4, 0, 1)
    assert [d["inUseBy"] for d in status["devices"]] == [
        ["ns/p1"],
        ["default/check-2", "ns/p2", "u3"],
        ["default/check-2"],
        [],
    ]


@pytest.mark.parametrize(
    "spec, node",
    [
        ({"nodeName": "node1"}, "node1"),
        ({}, "node1"),
        ({"nodeName": "node2"}, None),  # names another node: the scheduler ignores it
    ],
)
def test_an_inventory_describes_only_the_node_of_its_own_name(spec, node):
    status = {"metadata": {"name": "node1"}, "spec": spec, "status": {"devices": [{"id": 0}]}}
    assert objects.inventory_node(status) == node
    assert objects.node_from_status(status, {}).name == "node1"


def test_the_agent_simulates_with_the_one_simulator():
    node = {"metadata": {"annotations": {constants.SIMULATED_ANNOTATION: "count=2,islands=1,bandwidth=300"}}}
    assert main.read_inventory("simulated", node, inventory.DEFAULT_SIMULATED) == (
        inventory.simulated_status("count=2,islands=1,bandwidth=300"),
        "simulated",
    )
    assert main.read_inventory("simulated", {"metadata": {}}, inventory.DEFAULT_SIMULATED) == (
        EIGHT_GPUS_TWO_ISLANDS,
        "simulated",
    )


def test_a_gpu_node_status_object_names_its_node():
    assert objects.node_status_body("node1") == {
        "apiVersion": "gpu.scheduling/v1",
        "kind": "GpuNodeStatus",
        "metadata": {"name": "node1"},
        "spec": {"nodeName": "node1"},
    }
    assert objects.claim_body("train", {"devices": {"count": 2}}) == {
        "apiVersion": "gpu.scheduling/v1",
        "kind": "GpuClaim",
        "metadata": {"name": "train"},
        "spec": {"devices": {"count": 2}},
    }


class _Recorder:
    """Stands for the async client: records the calls, answers POST with `post_error` when given."""

    def __init__(self, post_error: Exception | None = None) -> None:
        self.calls: list[tuple[str, str, object]] = []
        self.post_error = post_error

    async def post(self, path: str, body: object) -> dict:
        self.calls.append(("POST", path, body))
        if self.post_error is not None:
            raise self.post_error
        return {}

    async def patch(self, path: str, body: object, kind: str = "merge") -> dict:
        self.calls.append(("PATCH", path, body))
        return {}


@pytest.mark.parametrize("post_error", [None, AlreadyExists(409, "AlreadyExists", "exists")])
def test_the_writer_creates_the_object_then_writes_its_status(post_error):
    client = _Recorder(post_error)
    status = inventory.simulated_status()
    asyncio.run(publish.write_node_status(client, "node1", status))  # type: ignore[arg-type]  # a stand-in client
    assert client.calls == [
        ("POST", "/apis/gpu.scheduling/v1/gpunodestatuses", objects.node_status_body("node1")),
        ("PATCH", "/apis/gpu.scheduling/v1/gpunodestatuses/node1/status", {"status": status}),
    ]


def test_the_writer_stops_at_any_other_error():
    client = _Recorder(Forbidden(403, "Forbidden", "no"))
    with pytest.raises(Forbidden):
        asyncio.run(publish.write_node_status(client, "node1", {}))  # type: ignore[arg-type]  # a stand-in client
    assert [c[0] for c in client.calls] == ["POST"]
