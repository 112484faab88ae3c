"""Counters the scheduler exposes on /metrics in the Prometheus text format. No client library needed."""

from __future__ import annotations

import dataclasses

# Upper bounds (seconds) of the bind latency histogram buckets.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


@dataclasses.dataclass
class Metrics:
    pods_seen: int = 0
    binds: int = 0
    bind_errors: int = 0
    bind_conflicts: int = 0
    unschedulable: int = 0
    bind_seconds_sum: float = 0.0
    bind_buckets: list[int] = dataclasses.field(default_factory=lambda: [0] * len(BUCKETS))
    leader: int = 0
    """1 while this replica holds the leader lease and schedules (or runs without leader election), else 0."""

    def pod_seen(self) -> None:
        self.pods_seen += 1

    def bind_conflict(self) -> None:
        self.bind_conflicts += 1

    def bind_error(self) -> None:
        self.bind_errors += 1

    def unschedulable_reported(self) -> None:
        self.unschedulable += 1

    def set_leader(self, leading: bool) -> None:
        self.leader = int(leading)

    def observe_bind(self, seconds: float) -> None:
        self.binds += 1
        self.bind_seconds_sum += seconds
        for i, bound in enumerate(BUCKETS):
            if seconds <= bound:
                self.bind_buckets[i] += 1

    def render(self) -> str:
        lines = [
            "# HELP gpu_scheduler_leader 1 while this replica is the leader and schedules, 0 while it follows.",
            "# TYPE gpu_scheduler_leader gauge",
            f"gpu_scheduler_leader {self.leader}",
            "# HELP gpu_scheduler_pods_seen_total Unbound pods of this scheduler observed.",
            "# TYPE gpu_scheduler_pods_seen_total counter",
            f"gpu_scheduler_pods_seen_total {self.pods_seen}",
            "# HELP gpu_scheduler_bind_errors_total Binds that failed and were retried.",
            "# TYPE gpu_scheduler_bind_errors_total counter",
            f"gpu_scheduler_bind_errors_total {self.bind_errors}",
            "# HELP gpu_scheduler_bind_conflicts_total Binds skipped because the pod was already bound or gone.",
            "# TYPE gpu_scheduler_bind_conflicts_total counter",
            f"gpu_scheduler_bind_conflicts_total {self.bind_conflicts}",
            "# HELP gpu_scheduler_unschedulable_total Times a pod was reported Unschedulable with a new reason.",
            "# TYPE gpu_scheduler_unschedulable_total counter",
            f"gpu_scheduler_unschedulable_total {self.unschedulable}",
            "# HELP gpu_scheduler_bind_duration_seconds Latency of the binding API call.",
            "# TYPE gpu_scheduler_bind_duration_seconds histogram",
        ]
        lines += [
            f'gpu_scheduler_bind_duration_seconds_bucket{{le="{b}"}} {n}'
            for b, n in zip(BUCKETS, self.bind_buckets, strict=False)
        ]
        lines += [
            f'gpu_scheduler_bind_duration_seconds_bucket{{le="+Inf"}} {self.binds}',
            f"gpu_scheduler_bind_duration_seconds_sum {self.bind_seconds_sum:.6f}",
            f"gpu_scheduler_bind_duration_seconds_count {self.binds}",
        ]
        return "\n".join(lines) + "\n"
