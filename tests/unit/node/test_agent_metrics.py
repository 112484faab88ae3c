"""The inventory agent's /metrics from plain data: what a registry renders after syncs that wrote a given status
(read back through prometheus_client's own parser), and that a GPU gone from the status is gone from /metrics."""

from __future__ import annotations

import prometheus_client
from prometheus_client.parser import text_string_to_metric_families

from gpu_scheduling.agent import inventory
from gpu_scheduling.agent.metrics import SYNC_BUCKETS, AgentMetrics, status_families
from gpu_scheduling.claims import objects

MIB = 1024 * 1024

Series = tuple[str, tuple[tuple[str, str], ...]]


def rendered(registry: prometheus_client.CollectorRegistry) -> dict[Series, float]:
    """Every series `generate_latest` renders, name and sorted labels -> value; without the `<name>_created`
    timestamps prometheus_client adds to counters and histograms (the time the test ran; /metrics leaves them
    out too)."""
    text = prometheus_client.generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if not s.name.endswith("_created")
    }


def per_gpu(series: dict[Series, float], name: str) -> dict[str, float]:
    """The series `name` by its gpu label."""
    return {dict(labels)["gpu"]: value for (n, labels), value in series.items() if n == name}


def histogram(observed: list[float]) -> dict[Series, float]:
    name = "gpu_inventory_agent_sync_duration_seconds"
    out: dict[Series, float] = {
        (f"{name}_bucket", (("le", str(b)),)): float(sum(1 for s in observed if s <= b)) for b in SYNC_BUCKETS
    }
    out[(f"{name}_bucket", (("le", "+Inf"),))] = float(len(observed))
    out[(f"{name}_count", ())] = float(len(observed))
    out[(f"{name}_sum", ())] = sum(observed)
    return out


def test_before_any_sync_only_the_sync_series_show_all_zero():
    assert rendered(AgentMetrics("node1").registry) == {
        ("gpu_inventory_agent_syncs_total", (("result", "ok"),)): 0.0,
        ("gpu_inventory_agent_syncs_total", (("result", "error"),)): 0.0,
        ("gpu_inventory_agent_last_sync_timestamp_seconds", ()): 0.0,
        **histogram([]),
    }


def test_a_written_status_renders_exactly_its_series():
    metrics = AgentMetrics("node1")
    # GPU 1 held by a pod, GPU 3 unhealthy; the declared memory, use and utilization per GPU.
    status = inventory.node_status(
        inventory.parse_simulated(
            "count=4,islands=2,bandwidth=600/64,unhealthy=3,memory=40960/81920,used=1024/2048/0,utilization=10/55/100"
        ),
        [objects.lease_body("node1", 1, "Exclusive", {"u1": "ns/p1"})],
    )
    metrics.failed(0.02)
    metrics.synced(status, "simulated", 0.3, 1700000000.5)
    node = ("node", "node1")
    gpu = lambda i: (("gpu", str(i)), node)  # noqa: E731
    assert rendered(metrics.registry) == {
        ("gpu_inventory_agent_syncs_total", (("result", "ok"),)): 1.0,
        ("gpu_inventory_agent_syncs_total", (("result", "error"),)): 1.0,
        ("gpu_inventory_agent_last_sync_timestamp_seconds", ()): 1700000000.5,
        **histogram([0.02, 0.3]),
        ("gpu_inventory_agent_info", (node, ("source", "simulated"))): 1.0,
        ("gpu_inventory_agent_gpus", (node, ("state", "healthy"))): 3.0,
        ("gpu_inventory_agent_gpus", (node, ("state", "unhealthy"))): 1.0,
        ("gpu_inventory_agent_gpus", (node, ("state", "in_use"))): 1.0,
        ("gpu_inventory_agent_gpu_memory_total_bytes", gpu(0)): 40960.0 * MIB,
        ("gpu_inventory_agent_gpu_memory_total_bytes", gpu(1)): 81920.0 * MIB,
        ("gpu_inventory_agent_gpu_memory_total_bytes", gpu(2)): 81920.0 * MIB,
        ("gpu_inventory_agent_gpu_memory_total_bytes", gpu(3)): 81920.0 * MIB,
        ("gpu_inventory_agent_gpu_memory_used_bytes", gpu(0)): 1024.0 * MIB,
        ("gpu_inventory_agent_gpu_memory_used_bytes", gpu(1)): 2048.0 * MIB,
        ("gpu_inventory_agent_gpu_memory_used_bytes", gpu(2)): 0.0,
        ("gpu_inventory_agent_gpu_memory_used_bytes", gpu(3)): 0.0,
        ("gpu_inventory_agent_gpu_utilization_ratio", gpu(0)): 0.1,
        ("gpu_inventory_agent_gpu_utilization_ratio", gpu(1)): 0.55,
        ("gpu_inventory_agent_gpu_utilization_ratio", gpu(2)): 1.0,
        ("gpu_inventory_agent_gpu_utilization_ratio", gpu(3)): 0.0,  # unhealthy: idle
    }


def test_a_gpu_gone_from_the_status_loses_its_series():
    metrics = AgentMetrics("node1")
    metrics.synced(inventory.simulated_status("count=4,utilization=20"), "simulated", 0.01, 1.0)
    assert set(per_gpu(rendered(metrics.registry), "gpu_inventory_agent_gpu_memory_total_bytes")) == {
        "0",
        "1",
        "2",
        "3",
    }
    metrics.synced(inventory.simulated_status("count=2,utilization=20"), "simulated", 0.01, 2.0)
    after = rendered(metrics.registry)
    for name in (
        "gpu_inventory_agent_gpu_memory_total_bytes",
        "gpu_inventory_agent_gpu_memory_used_bytes",
        "gpu_inventory_agent_gpu_utilization_ratio",
    ):
        assert set(per_gpu(after, name)) == {"0", "1"}, name
    assert after[("gpu_inventory_agent_gpus", (("node", "node1"), ("state", "healthy")))] == 2.0
    assert after[("gpu_inventory_agent_last_sync_timestamp_seconds", ())] == 2.0


def test_a_failed_sync_keeps_what_was_last_written():
    metrics = AgentMetrics("node1")
    metrics.synced(inventory.simulated_status("count=2,used=512"), "simulated", 0.01, 5.0)
    before = rendered(metrics.registry)
    metrics.failed(1.5)
    after = rendered(metrics.registry)
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    assert changed == {
        ("gpu_inventory_agent_syncs_total", (("result", "error"),)),
        ("gpu_inventory_agent_sync_duration_seconds_bucket", (("le", "2.5"),)),
        ("gpu_inventory_agent_sync_duration_seconds_bucket", (("le", "5.0"),)),
        ("gpu_inventory_agent_sync_duration_seconds_bucket", (("le", "10.0"),)),
        ("gpu_inventory_agent_sync_duration_seconds_bucket", (("le", "30.0"),)),
        ("gpu_inventory_agent_sync_duration_seconds_bucket", (("le", "+Inf"),)),
        ("gpu_inventory_agent_sync_duration_seconds_count", ()),
        ("gpu_inventory_agent_sync_duration_seconds_sum", ()),
    }


def test_only_the_gpus_that_report_them_have_memory_and_utilization_series():
    """An NVML GPU that supports neither query has a status device without the fields, and no such series."""
    status = inventory.node_status(
        [
            {"id": 0, "health": "Healthy", "memoryTotalMiB": 81559, "memoryUsedMiB": 0, "utilizationPercent": 0},
            {"id": 1, "health": "Unknown"},
            {"id": 2, "health": "Healthy", "memoryTotalMiB": 81559, "memoryUsedMiB": 3},
        ],
        (),
    )
    node = ("node", "gpu-7")
    assert {
        (f.name, tuple(sorted(s.labels.items()))): s.value
        for f in status_families("gpu-7", "nvml", status)
        for s in f.samples
    } == {
        ("gpu_inventory_agent_info", (node, ("source", "nvml"))): 1,
        ("gpu_inventory_agent_gpus", (node, ("state", "healthy"))): 2,
        ("gpu_inventory_agent_gpus", (node, ("state", "unhealthy"))): 1,  # Unknown is not Healthy, as in the status
        ("gpu_inventory_agent_gpus", (node, ("state", "in_use"))): 0,
        ("gpu_inventory_agent_gpu_memory_total_bytes", (("gpu", "0"), node)): 81559 * MIB,
        ("gpu_inventory_agent_gpu_memory_total_bytes", (("gpu", "2"), node)): 81559 * MIB,
        ("gpu_inventory_agent_gpu_memory_used_bytes", (("gpu", "0"), node)): 0,
        ("gpu_inventory_agent_gpu_memory_used_bytes", (("gpu", "2"), node)): 3 * MIB,
        ("gpu_inventory_agent_gpu_utilization_ratio", (("gpu", "0"), node)): 0.0,
    }


def test_each_agent_has_a_registry_of_its_own():
    first, second = AgentMetrics("node1"), AgentMetrics("node2")
    first.synced(inventory.simulated_status("count=1"), "simulated", 0.01, 1.0)
    assert ("gpu_inventory_agent_syncs_total", (("result", "ok"),)) in rendered(first.registry)
    assert rendered(second.registry)[("gpu_inventory_agent_syncs_total", (("result", "ok"),))] == 0.0
    assert not [
        s for f in prometheus_client.REGISTRY.collect() for s in f.samples if s.name.startswith("gpu_inventory_agent")
    ]
