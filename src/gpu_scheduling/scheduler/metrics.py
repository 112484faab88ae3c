"""What the scheduler exposes on /metrics, through prometheus_client in a registry of its own.

Counters and histograms move as the scheduler works (the methods of :class:`Metrics`); the state of the cluster as
the scheduler sees it (pending pods, GPUs per node, allocations per NVLink island) is read from
:attr:`Metrics.state_source` when Prometheus scrapes, so that keeping it costs nothing per event.

Every label combination known up front (each kind x result x strategy, each lease outcome) is there from the first
scrape, at 0, so that `rate()` has a series to work on before the first event.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping

import prometheus_client
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpu_scheduling import constants

log = logging.getLogger(__name__)

# Upper bounds (seconds) of the bind latency histogram buckets.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
# One scheduling attempt: from taking a pod off the queue to its outcome (bound, reported unschedulable, or failed).
ATTEMPT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# End to end: from the pod's creation to its binding, queueing and retries included.
E2E_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0, 60.0)

#: Pod kinds: a pod carrying the GPU map annotation, or one naming a GpuClaim.
KINDS = ("map", "claim")
#: Outcomes of a scheduling attempt.
RESULTS = ("scheduled", "unschedulable", "error")
#: What reconciling a GPU lease came to.
LEASE_OUTCOMES = ("released", "updated", "recreated", "retried")
#: What a decision for a whole gang came to.
GANG_RESULTS = ("scheduled", "unschedulable", "incomplete", "error")
#: States of a GPU in `gpu_scheduler_node_gpus`.
GPU_STATES = ("free", "allocated", "unhealthy")
#: The `strategy` label of an attempt that applies none (a map pod names its GPUs itself).
NO_STRATEGY = "none"


@dataclasses.dataclass(frozen=True)
class SchedulerState:
    """The cluster as the scheduler sees it at one moment, read when Prometheus scrapes."""

    pending: Mapping[str, int]
    """Pods waiting to be scheduled, by kind ("map", "claim"); a kind left out counts 0."""
    node_gpus: Mapping[str, Mapping[str, int]]
    """Node -> {"free", "allocated", "unhealthy"} -> GPUs, for every node with GPUs the scheduler knows; a state left
    out counts 0."""
    island_allocations: Mapping[tuple[str, str], int]
    """(node, NVLink island) -> GPUs allocated in it, for every island the scheduler knows (0 where none is), so
    that the series are there before the first allocation."""


class Metrics:
    """The scheduler's metrics; :attr:`registry` is what /metrics renders."""

    def __init__(self) -> None:
        self.registry = prometheus_client.CollectorRegistry()
        self.state_source: Callable[[], SchedulerState] | None = None
        """Called at each scrape for the pending/GPU/island gauges; None (the default): those families are absent."""
        r = self.registry
        self._leader = prometheus_client.Gauge(
            "gpu_scheduler_leader",
            "1 while this replica is the leader and schedules, 0 while it follows.",
            registry=r,
        )
        self._pods_seen = prometheus_client.Counter(
            "gpu_scheduler_pods_seen_total", "Unbound pods of this scheduler observed.", registry=r
        )
        self._bind_errors = prometheus_client.Counter(
            "gpu_scheduler_bind_errors_total", "Binds that failed and were retried.", registry=r
        )
        self._bind_conflicts = prometheus_client.Counter(
            "gpu_scheduler_bind_conflicts_total",
            "Binds skipped because the pod was already bound or gone.",
            registry=r,
        )
        self._unschedulable = prometheus_client.Counter(
            "gpu_scheduler_unschedulable_total",
            "Times a pod was reported Unschedulable with a new reason.",
            registry=r,
        )
        self._bind_duration = prometheus_client.Histogram(
            "gpu_scheduler_bind_duration_seconds", "Latency of the binding API call.", buckets=BUCKETS, registry=r
        )
        self._attempts = prometheus_client.Counter(
            "gpu_scheduler_scheduling_attempts_total",
            "Scheduling attempts, by pod kind, result and node strategy (none for map pods).",
            ["kind", "result", "strategy"],
            registry=r,
        )
        self._attempt_duration = prometheus_client.Histogram(
            "gpu_scheduler_scheduling_attempt_duration_seconds",
            "Time one scheduling attempt took, from taking the pod off the queue to its result.",
            ["kind", "result"],
            buckets=ATTEMPT_BUCKETS,
            registry=r,
        )
        self._e2e = prometheus_client.Histogram(
            "gpu_scheduler_e2e_scheduling_duration_seconds",
            "Time from a pod's creation to its binding, queueing and retries included.",
            ["kind"],
            buckets=E2E_BUCKETS,
            registry=r,
        )
        self._lease_reconciles = prometheus_client.Counter(
            "gpu_scheduler_lease_reconciles_total",
            "GPU lease reconciliations, by what they came to.",
            ["outcome"],
            registry=r,
        )
        self._strategy_info = prometheus_client.Gauge(
            "gpu_scheduler_strategy_info",
            "1 for the node strategy and queue order this scheduler applies by default.",
            ["strategy", "queue_order"],
            registry=r,
        )
        self._gang_attempts = prometheus_client.Counter(
            "gpu_scheduler_gang_attempts_total",
            "Decisions for a whole gang, by result: scheduled (every member bound), unschedulable (no domain takes"
            " it whole), incomplete (fewer members than its minimum), error (an API call failed; retried).",
            ["result"],
            registry=r,
        )
        self._gang_wait = prometheus_client.Histogram(
            "gpu_scheduler_gang_scheduling_duration_seconds",
            "Time from the creation of a gang's last member to every member bound.",
            buckets=E2E_BUCKETS,
            registry=r,
        )
        self._gangs_broken = prometheus_client.Counter(
            "gpu_scheduler_gangs_below_minimum_total",
            "Times a gang that had its minimum bound dropped below it (a member deleted or failed; one that succeeded"
            " does not count).",
            registry=r,
        )
        self._preemptions = prometheus_client.Counter(
            "gpu_scheduler_preemption_attempts_total",
            "Times a pod that fit nowhere preempted pods of lower priority (scheduler/preemption.py).",
            registry=r,
        )
        self._preemption_victims = prometheus_client.Counter(
            "gpu_scheduler_preemption_victims_total",
            "Pods deleted to make room for pods of higher priority.",
            registry=r,
        )
        self._policy: tuple[str, str] | None = None
        r.register(_StateCollector(self))
        for result in GANG_RESULTS:
            self._gang_attempts.labels(result)

        for kind in KINDS:
            strategies = (NO_STRATEGY,) if kind == "map" else constants.STRATEGIES
            for result in RESULTS:
                self._attempt_duration.labels(kind, result)
                for strategy in strategies:
                    self._attempts.labels(kind, result, strategy)
            self._e2e.labels(kind)
        for outcome in LEASE_OUTCOMES:
            self._lease_reconciles.labels(outcome)
        self.set_policy(constants.DEFAULT_STRATEGY, constants.DEFAULT_QUEUE_ORDER)

    def pod_seen(self) -> None:
        self._pods_seen.inc()

    def bind_conflict(self) -> None:
        self._bind_conflicts.inc()

    def bind_error(self) -> None:
        self._bind_errors.inc()

    def unschedulable_reported(self) -> None:
        self._unschedulable.inc()

    def set_leader(self, leading: bool) -> None:
        self._leader.set(int(leading))

    def observe_bind(self, seconds: float) -> None:
        self._bind_duration.observe(seconds)

    def attempt(self, kind: str, result: str, strategy: str, seconds: float) -> None:
        """One scheduling attempt of a pod of `kind` ("map", "claim") came to `result` ("scheduled",
        "unschedulable", "error") in `seconds`, placing by `strategy` (one of constants.STRATEGIES; "" for a map
        pod, exposed as "none")."""
        _check("kind", kind, KINDS)
        _check("result", result, RESULTS)
        self._attempts.labels(kind, result, strategy or NO_STRATEGY).inc()
        self._attempt_duration.labels(kind, result).observe(seconds)

    def scheduled(self, kind: str, seconds: float) -> None:
        """A pod of `kind` was bound `seconds` after its creation."""
        _check("kind", kind, KINDS)
        self._e2e.labels(kind).observe(seconds)

    def gang_attempt(self, result: str) -> None:
        _check("result", result, GANG_RESULTS)
        self._gang_attempts.labels(result).inc()

    def gang_scheduled(self, seconds: float) -> None:
        """Every member of a gang is bound, `seconds` after its last member was created."""
        self._gang_wait.observe(seconds)

    def gang_broken(self) -> None:
        self._gangs_broken.inc()

    def preempted(self, victims: int) -> None:
        """A pod preempted `victims` pods."""
        self._preemptions.inc()
        self._preemption_victims.inc(victims)

    def lease_reconciled(self, outcome: str) -> None:
        """A GPU lease was reconciled: "released", "updated", "recreated" or "retried"."""
        _check("outcome", outcome, LEASE_OUTCOMES)
        self._lease_reconciles.labels(outcome).inc()

    def set_policy(self, strategy: str, queue_order: str) -> None:
        """The default node strategy and queue order now applied (until then: the built-in defaults)."""
        policy = (strategy, queue_order)
        if policy == self._policy:
            return
        if self._policy is not None:
            self._strategy_info.remove(*self._policy)
        self._strategy_info.labels(*policy).set(1)
        self._policy = policy


def _check(label: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{label} {value!r} is not one of {', '.join(allowed)}")


class _StateCollector(Collector):
    """The gauges read from `Metrics.state_source` at scrape time."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def describe(self) -> Iterable[Metric]:
        return ()  # families that come and go with state_source: nothing to check for clashes up front

    def collect(self) -> Iterable[Metric]:
        source = self._metrics.state_source
        if source is None:
            return []
        try:
            state = source()
        except Exception:  # a scrape must not fail because of the state: leave these families out this time
            log.exception("reading the scheduler state for /metrics failed")
            return []
        pending = GaugeMetricFamily(
            "gpu_scheduler_pending_pods", "Pods waiting to be scheduled, by kind.", labels=["kind"]
        )
        for kind in (*KINDS, *sorted(set(state.pending) - set(KINDS))):
            pending.add_metric([kind], state.pending.get(kind, 0))
        gpus = GaugeMetricFamily(
            "gpu_scheduler_node_gpus",
            "GPUs per node as the scheduler sees them: free, allocated or unhealthy.",
            labels=["node", "state"],
        )
        for node in sorted(state.node_gpus):
            counts = state.node_gpus[node]
            for gpu_state in (*GPU_STATES, *sorted(set(counts) - set(GPU_STATES))):
                gpus.add_metric([node, gpu_state], counts.get(gpu_state, 0))
        islands = GaugeMetricFamily(
            "gpu_scheduler_island_allocated_gpus",
            "GPUs allocated per node and NVLink island.",
            labels=["node", "island"],
        )
        for (node, island), allocated in sorted(state.island_allocations.items()):
            islands.add_metric([node, island], allocated)
        return [pending, gpus, islands]
