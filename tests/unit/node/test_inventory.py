"""The inventory agent: simulated declarations, NVLink islands, NVML's memory and utilization, the status it
writes and how it writes it, its flags."""

import asyncio
import json
import sys
import types

import pytest

from gpu_scheduling import constants
from gpu_scheduling.agent import inventory, main, nvml, publish
from gpu_scheduling.claims import objects
from gpu_scheduling.kube.errors import AlreadyExists, Forbidden

# The simulated node of the claim scenarios and the benchmark, written out: GPUs 0-3 in one NVLink island at
# 600 GB/s, 4-7 in another at 64 GB/s, all healthy and free, each an idle 80 GB GPU with no memory in use.
_IDLE_80GB = {"memoryTotalMiB": 81920, "memoryUsedMiB": 0, "utilizationPercent": 0}
EIGHT_GPUS_TWO_ISLANDS = {
    "total": 8,
    "free": 8,
    "unhealthy": 0,
    "devices": [
        {"id": 0, "health": "Healthy", "island": "nvlink-group-0", "bandwidthGBps": 600, **_IDLE_80GB, "inUseBy": []},
        {"id": 1, "health": "Healthy", "island": "nvlink-group-0", "bandwidthGBps": 600, **_IDLE_80GB, "inUseBy": []},
        {"id": 2, "health": "Healthy", "island": "nvlink-group-0", "bandwidthGBps": 600, **_IDLE_80GB, "inUseBy": []},
        {"id": 3, "health": "Healthy", "island": "nvlink-group-0", "bandwidthGBps": 600, **_IDLE_80GB, "inUseBy": []},
        {"id": 4, "health": "Healthy", "island": "nvlink-group-1", "bandwidthGBps": 64, **_IDLE_80GB, "inUseBy": []},
        {"id": 5, "health": "Healthy", "island": "nvlink-group-1", "bandwidthGBps": 64, **_IDLE_80GB, "inUseBy": []},
        {"id": 6, "health": "Healthy", "island": "nvlink-group-1", "bandwidthGBps": 64, **_IDLE_80GB, "inUseBy": []},
        {"id": 7, "health": "Healthy", "island": "nvlink-group-1", "bandwidthGBps": 64, **_IDLE_80GB, "inUseBy": []},
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
        "memoryTotalMiB": 81920,
        "memoryUsedMiB": 0,
        "utilizationPercent": 0,
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


_EXPECTED_KEYS = (
    "expected count=N, islands=N, bandwidth=A/B, unhealthy=I/J, memory=MiB/MiB, used=MiB/MiB or utilization=P/P"
)


def _per_gpu(part: str, key: str, what: str, low: int, high: int) -> str:
    return (
        f"{part!r}: expected {key}=<{what}> per GPU id in order, integers {low}..{high} separated by / "
        "(the last one repeats)"
    )


_LONG = "count=1," + "x" * 4096


@pytest.mark.parametrize(
    "text, message",
    [
        ("count=8,colour=red", f"'colour=red': {_EXPECTED_KEYS}"),
        ("count=8,memory", f"'memory': {_EXPECTED_KEYS}"),
        ("count=8, Memory=1", f"'Memory=1': {_EXPECTED_KEYS}"),
        (
            "count=eight",
            (
                "'count=eight': invalid literal for int() with base 10: 'eight'; expected integers as in "
                "'count=8,islands=2,bandwidth=600/64,unhealthy='"
            ),
        ),
        ("count=2,bandwidth=", "'count=2,bandwidth=': count must be >= 0 and at least one bandwidth given"),
        ("count=-1", "'count=-1': count must be >= 0 and at least one bandwidth given"),
        ("count=1025", "'count=1025': expected at most 1024 GPUs"),
        ("count= 99999999999999999999", "'count= 99999999999999999999': expected at most 1024 GPUs"),
        ("count=2,bandwidth=600/-1", "'bandwidth=600/-1': expected bandwidths in GB/s, integers >= 0"),
        ("count=2,memory=80GB", _per_gpu("memory=80GB", "memory", "MiB", 1, 16777216)),
        ("count=2,memory=", _per_gpu("memory=", "memory", "MiB", 1, 16777216)),
        ("count=2,memory=0", _per_gpu("memory=0", "memory", "MiB", 1, 16777216)),
        ("count=2,memory=16777217", _per_gpu("memory=16777217", "memory", "MiB", 1, 16777216)),
        ("count=2,memory=000000001", _per_gpu("memory=000000001", "memory", "MiB", 1, 16777216)),  # nine digits
        ("count=2,memory=1//2", _per_gpu("memory=1//2", "memory", "MiB", 1, 16777216)),
        ("count=2,memory=+5", _per_gpu("memory=+5", "memory", "MiB", 1, 16777216)),
        ("count=2,memory=-5", _per_gpu("memory=-5", "memory", "MiB", 1, 16777216)),
        ("count=2,memory=8_192", _per_gpu("memory=8_192", "memory", "MiB", 1, 16777216)),
        ("count=2,memory=\u0665", _per_gpu("memory=\u0665", "memory", "MiB", 1, 16777216)),  # ARABIC-INDIC FIVE
        ("count=2,used=x", _per_gpu("used=x", "used", "MiB", 0, 16777216)),
        ("count=2,used=0/-1", _per_gpu("used=0/-1", "used", "MiB", 0, 16777216)),
        ("count=2,utilization=101", _per_gpu("utilization=101", "utilization", "percent", 0, 100)),
        ("count=2,utilization=50/0.5", _per_gpu("utilization=50/0.5", "utilization", "percent", 0, 100)),
        ("count=2,utilization=", _per_gpu("utilization=", "utilization", "percent", 0, 100)),
        (
            "count=3,memory=81920/40960,used=0/40961",
            "'used=0/40961': GPU 1 would use 40961 MiB of its 40960 MiB; expected at most its memory",
        ),
        ("count=1,used=81921", "'used=81921': GPU 0 would use 81921 MiB of its 81920 MiB; expected at most its memory"),
        (_LONG, f"a declaration of 4104 characters ({_LONG[:40]!r}...): expected at most 4096"),
    ],
)
def test_bad_declarations_say_which_part_and_what_was_expected(text, message):
    with pytest.raises(inventory.InventoryError) as raised:
        inventory.parse_simulated(text)
    assert str(raised.value) == message


def test_memory_and_utilization_default_to_an_idle_80gb_gpu():
    (device,) = inventory.parse_simulated("count=1")
    assert device == {
        "id": 0,
        "health": "Healthy",
        "island": "nvlink-group-0",
        "bandwidthGBps": 0,
        "memoryTotalMiB": 81920,
        "memoryUsedMiB": 0,
        "utilizationPercent": 0,
    }


def test_per_gpu_values_go_by_id_and_the_last_one_repeats():
    devices = inventory.parse_simulated(
        "count=5,islands=1,bandwidth=600,memory=40960/81920,used=1024/2048/0,utilization=10/50/90"
    )
    assert [(d["memoryTotalMiB"], d["memoryUsedMiB"], d["utilizationPercent"]) for d in devices] == [
        (40960, 1024, 10),
        (81920, 2048, 50),
        (81920, 0, 90),
        (81920, 0, 90),
        (81920, 0, 90),
    ]
    # Values past the last GPU are not used, as bandwidths past the last island; spaces around them are fine.
    assert [d["utilizationPercent"] for d in inventory.parse_simulated("count=2, utilization = 7 / 8 / 9 ")] == [7, 8]
    assert inventory.parse_simulated("count=0,memory=1/2/3") == []
    # The module's own example: four 40 GB GPUs, the first idle, the others half full and busy.
    assert [
        (d["memoryTotalMiB"], d["memoryUsedMiB"], d["utilizationPercent"])
        for d in inventory.parse_simulated("count=4,memory=40960,used=0/20480,utilization=0/75")
    ] == [(40960, 0, 0)] + [(40960, 20480, 75)] * 3


def test_an_unhealthy_gpu_keeps_its_memory_but_is_idle():
    devices = inventory.parse_simulated("count=2,bandwidth=600,unhealthy=1,memory=1024,used=512,utilization=60")
    assert [
        (d["health"], d["bandwidthGBps"], d["memoryTotalMiB"], d["memoryUsedMiB"], d["utilizationPercent"])
        for d in devices
    ] == [("Healthy", 600, 1024, 512, 60), ("Unhealthy", 0, 1024, 512, 0)]


def test_the_bounds_themselves_are_accepted():
    assert len(inventory.parse_simulated("count=1024")) == 1024
    edge = "count=2,memory=16777216,used=16777216/0,utilization=100/0"
    assert [
        (d["memoryTotalMiB"], d["memoryUsedMiB"], d["utilizationPercent"]) for d in inventory.parse_simulated(edge)
    ] == [(16777216, 16777216, 100), (16777216, 0, 0)]
    # The longest declaration read: 4096 characters, most of them per-GPU values, each read once.
    values = "/".join(["100"] * 1000)
    head = "count=1024,utilization="
    text = head + values + "," * (inventory.MAX_DECLARATION - len(head) - len(values))
    assert len(text) == inventory.MAX_DECLARATION
    assert {d["utilizationPercent"] for d in inventory.parse_simulated(text)} == {100}


def test_a_status_carries_memory_and_utilization_through():
    status = inventory.node_status(
        inventory.parse_simulated("count=2,memory=1024,used=512/0,utilization=30/0"),
        [objects.lease_body("n1", 1, "Exclusive", {"u1": "ns/p1"})],
    )
    assert [
        (d["memoryTotalMiB"], d["memoryUsedMiB"], d["utilizationPercent"], d["inUseBy"]) for d in status["devices"]
    ] == [(1024, 512, 30, []), (1024, 0, 0, ["ns/p1"])]
    # A device without them (a GPU whose NVML answers neither) stays without them.
    assert inventory.node_status([{"id": 0, "health": "Healthy"}], ())["devices"] == [
        {"id": 0, "health": "Healthy", "inUseBy": []}
    ]


class _NVMLError(Exception):
    pass


class _NotSupported(_NVMLError):
    pass


def _fake_pynvml(memory: list[object], utilization: list[object]) -> types.SimpleNamespace:
    """A stand-in for nvidia-ml-py with one GPU per entry, no NVLink, every health query answered: `memory` holds
    (total, used) bytes or the exception the query raises, `utilization` the percent or the exception."""

    def memory_info(h: int) -> types.SimpleNamespace:
        if isinstance(memory[h], Exception):
            raise memory[h]
        total, used = memory[h]
        return types.SimpleNamespace(total=total, used=used, free=total - used)

    def utilization_rates(h: int) -> types.SimpleNamespace:
        if isinstance(utilization[h], Exception):
            raise utilization[h]
        return types.SimpleNamespace(gpu=utilization[h], memory=0)

    fake = types.SimpleNamespace(
        NVMLError=_NVMLError,
        NVMLError_NotSupported=_NotSupported,
        NVML_TEMPERATURE_GPU=0,
        NVML_NVLINK_MAX_LINKS=0,
        NVML_FEATURE_ENABLED=1,
        shutdown=False,
        nvmlInit=lambda: None,
        nvmlDeviceGetCount=lambda: len(memory),
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetPciInfo=lambda h: types.SimpleNamespace(busId=f"00000000:{h:02x}:00.0"),
        nvmlDeviceGetTemperature=lambda h, sensor: 40,
        nvmlDeviceGetRetiredPagesPendingStatus=lambda h: 0,
        nvmlDeviceGetMemoryInfo=memory_info,
        nvmlDeviceGetUtilizationRates=utilization_rates,
    )
    fake.nvmlShutdown = lambda: setattr(fake, "shutdown", True)
    return fake


def test_nvml_reports_memory_in_mib_and_utilization_where_the_gpu_answers(monkeypatch):
    gib = 1024**3
    fake = _fake_pynvml(
        memory=[(80 * gib, 1024**2 * 3 // 2), _NotSupported(), _NVMLError("GPU is lost")],
        utilization=[37, _NotSupported(), _NVMLError("GPU is lost")],
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert nvml.from_nvml() == [
        {
            "id": 0,
            "health": "Healthy",
            "island": "nvlink-group-0",
            "bandwidthGBps": 0,
            "memoryTotalMiB": 81920,
            "memoryUsedMiB": 1,  # 1.5 MiB, rounded down
            "utilizationPercent": 37,
        },
        # Not supported: the fields are left out, the GPU stays healthy.
        {"id": 1, "health": "Healthy", "island": "nvlink-group-1", "bandwidthGBps": 0},
        # Any other NVML error: left out as well; health is decided by the health queries alone.
        {"id": 2, "health": "Healthy", "island": "nvlink-group-2", "bandwidthGBps": 0},
    ]
    assert fake.shutdown


def test_print_shows_memory_and_utilization(capsys):
    main.main(["--source=simulated", "--print", "--simulated=count=1,memory=1024,used=512,utilization=40"])
    printed = json.loads(capsys.readouterr().out)
    assert printed["source"] == "simulated"
    assert printed["devices"] == [
        {
            "id": 0,
            "health": "Healthy",
            "island": "nvlink-group-0",
            "bandwidthGBps": 0,
            "memoryTotalMiB": 1024,
            "memoryUsedMiB": 512,
            "utilizationPercent": 40,
            "inUseBy": [],
        }
    ]


def test_print_refuses_a_bad_declaration_with_its_message():
    with pytest.raises(SystemExit) as exited:
        main.main(["--source=simulated", "--print", "--simulated=count=2,utilization=200"])
    assert str(exited.value) == "gpu-inventory-agent: --simulated " + _per_gpu(
        "utilization=200", "utilization", "percent", 0, 100
    )


@pytest.mark.parametrize("port", ["-1", "65536", "http", "8080 ", "99999999999999999999999"])
def test_the_health_port_is_a_port_or_zero(port, capsys):
    with pytest.raises(SystemExit):
        main.main([f"--health-port={port}", "--print"])
    assert f"argument --health-port: {port!r}: expected a port 1..65535, or 0 for none" in capsys.readouterr().err


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


def test_nvml_that_fails_is_an_error_never_a_simulation(tmp_path, monkeypatch):
    """This machine has no NVIDIA driver: --source nvml is an InventoryError naming NVML, and auto simulates only
    while no driver is loaded (with /proc/driver/nvidia/version present it fails the same way)."""
    with pytest.raises(inventory.InventoryError, match="NVML cannot read this node's GPUs"):
        main.read_inventory("nvml", {"metadata": {}}, inventory.DEFAULT_SIMULATED)
    assert main.read_inventory("auto", {"metadata": {}}, inventory.DEFAULT_SIMULATED)[1] == "simulated"
    driver = tmp_path / "version"
    driver.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module\n")
    monkeypatch.setattr(main, "DRIVER_VERSION_FILE", str(driver))
    with pytest.raises(inventory.InventoryError, match="with --source auto and an NVIDIA driver here"):
        main.read_inventory("auto", {"metadata": {}}, inventory.DEFAULT_SIMULATED)


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
