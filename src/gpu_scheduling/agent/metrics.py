"""The inventory agent's `/metrics`: how its syncs go, and the GPUs of the GpuNodeStatus it last wrote.

Everything lives in a registry of the agent's own (`AgentMetrics.registry`), not prometheus_client's global one, so
that a test (or a second agent in one process) starts from nothing and the scrape shows the agent's series only.
The per-GPU series are not kept in labelled gauges that would have to be updated and pruned: they are derived at
scrape time from the last written status by `status_families`, a pure function of plain data, so a GPU that leaves
the status leaves `/metrics` with it, and what `/metrics` says is always what the GpuNodeStatus says.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

#: Upper bounds (seconds) of the sync duration histogram: a sync is three API reads and two writes, tens of
#: milliseconds on a healthy apiserver; the upper buckets catch client retries and timeouts.
SYNC_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

MIB = 1024 * 1024


def status_families(node: str, source: str, status: Mapping[str, Any]) -> list[Metric]:
    """The gauges of one written GpuNodeStatus status of `node`, read from `source` ("nvml" or "simulated"): the
    agent's info, the GPUs by state, and each GPU's memory (bytes) and utilization (0..1) where it reports them.
    A GPU counts as unhealthy unless its health is Healthy (as the status's own `unhealthy` count), and as in use
    while any pod holds it."""
    info = GaugeMetricFamily(
        "gpu_inventory_agent_info",
        "1, labelled with the node this agent writes the GpuNodeStatus of and where its inventory comes from.",
        labels=["node", "source"],
    )
    info.add_metric([node, source], 1)
    gpus = GaugeMetricFamily(
        "gpu_inventory_agent_gpus",
        "GPUs of the last written GpuNodeStatus by state (in_use: held by a pod, healthy or not).",
        labels=["node", "state"],
    )
    total = GaugeMetricFamily(
        "gpu_inventory_agent_gpu_memory_total_bytes",
        "Memory of each GPU that reports it, as last written.",
        labels=["node", "gpu"],
    )
    used = GaugeMetricFamily(
        "gpu_inventory_agent_gpu_memory_used_bytes",
        "Memory in use on each GPU that reports it, as last written.",
        labels=["node", "gpu"],
    )
    utilization = GaugeMetricFamily(
        "gpu_inventory_agent_gpu_utilization_ratio",
        "Share (0..1) of the last sample period each GPU that reports it was busy, as last written.",
        labels=["node", "gpu"],
    )
    devices = status.get("devices") or []
    healthy = sum(1 for d in devices if d.get("health") == "Healthy")
    gpus.add_metric([node, "healthy"], healthy)
    gpus.add_metric([node, "unhealthy"], len(devices) - healthy)
    gpus.add_metric([node, "in_use"], sum(1 for d in devices if d.get("inUseBy")))
    for d in devices:
        gpu = str(d["id"])
        if d.get("memoryTotalMiB") is not None:
            total.add_metric([node, gpu], int(d["memoryTotalMiB"]) * MIB)
        if d.get("memoryUsedMiB") is not None:
            used.add_metric([node, gpu], int(d["memoryUsedMiB"]) * MIB)
        if d.get("utilizationPercent") is not None:
            utilization.add_metric([node, gpu], int(d["utilizationPercent"]) / 100)
    return [info, gpus, total, used, utilization]


class _WrittenStatus:
    """A collector of the last written status's gauges (`status_families`); none before the first write."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.written: tuple[str, Mapping[str, Any]] | None = None

    def describe(self) -> Iterable[Metric]:
        # The names, so that the registry refuses another collector of the same series.
        return status_families(self.node, "", {})

    def collect(self) -> Iterable[Metric]:
        if self.written is None:
            return []
        source, status = self.written
        return status_families(self.node, source, status)


class AgentMetrics:
    """The agent's metrics for `node`: call `synced` after each sync that wrote the status and `failed` after one
    that did not; scrape `registry`."""

    def __init__(self, node: str) -> None:
        self.registry = CollectorRegistry()
        self._syncs = Counter(
            "gpu_inventory_agent_syncs",
            "Syncs of the node's GpuNodeStatus by result (ok: written; error: an API or inventory error, retried at "
            "the next interval).",
            ["result"],
            registry=self.registry,
        )
        for result in ("ok", "error"):
            self._syncs.labels(result)  # both series from the start, so rate() sees the first error
        self._last_sync = Gauge(
            "gpu_inventory_agent_last_sync_timestamp_seconds",
            "Time (seconds since the epoch) of the last successful write of the node's GpuNodeStatus; 0: none yet.",
            registry=self.registry,
        )
        self._duration = Histogram(
            "gpu_inventory_agent_sync_duration_seconds",
            "Duration of each sync (read the inventory, the node's Leases and pods; write the status), ok or not.",
            buckets=SYNC_BUCKETS,
            registry=self.registry,
        )
        self._written = _WrittenStatus(node)
        self.registry.register(self._written)

    def synced(self, status: Mapping[str, Any], source: str, seconds: float, now: float) -> None:
        """A sync that wrote `status` (read from `source`) in `seconds`, finished at `now` (epoch seconds)."""
        self._syncs.labels("ok").inc()
        self._duration.observe(seconds)
        self._last_sync.set(now)
        self._written.written = (source, status)

    def failed(self, seconds: float) -> None:
        """A sync that wrote nothing. The per-GPU gauges keep the last written status: that is what the
        GpuNodeStatus still says."""
        self._syncs.labels("error").inc()
        self._duration.observe(seconds)
