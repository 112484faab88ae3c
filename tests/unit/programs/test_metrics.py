"""The programs' /metrics: what the scheduler exposes, exactly, and the naming conventions of every registry."""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import re

import prometheus_client
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from gpu_scheduling import constants, health
from gpu_scheduling.board.server import BoardMetrics
from gpu_scheduling.scheduler.metrics import ATTEMPT_BUCKETS, BUCKETS, E2E_BUCKETS, Metrics, SchedulerState
from gpu_scheduling.webhook.metrics import WebhookMetrics
from tests import ROOT

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def text(registry: prometheus_client.CollectorRegistry) -> str:
    return health.render_metrics(registry, None)[0].decode()


def samples(registry: prometheus_client.CollectorRegistry, prefix: str = "") -> Samples:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text(registry))
        for s in family.samples
        if s.name.startswith(prefix)
    }


def types(registry: prometheus_client.CollectorRegistry) -> dict[str, str]:
    """`# TYPE` lines of the text exposition: family name (as Prometheus sees it) -> type."""
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text(registry), re.MULTILINE))


def labelnames(registry: prometheus_client.CollectorRegistry) -> dict[str, set[str]]:
    """Family name -> the label names of its samples (`le` of histogram buckets left out)."""
    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text(registry)):
        name = family.name + "_total" if family.type == "counter" else family.name
        out[name] = {label for s in family.samples for label in s.labels if label != "le"}
    return out


STATE = SchedulerState(
    pending={"map": 2, "claim": 5},
    node_gpus={
        "node-b": {"free": 1, "allocated": 6, "unhealthy": 1},
        "node-a": {"free": 8},
    },
    island_allocations={("node-b", "0"): 4, ("node-b", "1"): 2},
)


# --- the scheduler's exposition, exactly ---


def test_scheduler_families_types_and_labels_are_exactly_these():
    m = Metrics()
    m.state_source = lambda: STATE
    assert types(m.registry) == {
        "gpu_scheduler_leader": "gauge",
        "gpu_scheduler_pods_seen_total": "counter",
        "gpu_scheduler_bind_errors_total": "counter",
        "gpu_scheduler_bind_conflicts_total": "counter",
        "gpu_scheduler_unschedulable_total": "counter",
        "gpu_scheduler_bind_duration_seconds": "histogram",
        "gpu_scheduler_scheduling_attempts_total": "counter",
        "gpu_scheduler_scheduling_attempt_duration_seconds": "histogram",
        "gpu_scheduler_e2e_scheduling_duration_seconds": "histogram",
        "gpu_scheduler_lease_reconciles_total": "counter",
        "gpu_scheduler_strategy_info": "gauge",
        "gpu_scheduler_gang_attempts_total": "counter",
        "gpu_scheduler_gang_scheduling_duration_seconds": "histogram",
        "gpu_scheduler_gangs_below_minimum_total": "counter",
        "gpu_scheduler_preemption_attempts_total": "counter",
        "gpu_scheduler_preemption_victims_total": "counter",
        "gpu_scheduler_pending_pods": "gauge",
        "gpu_scheduler_node_gpus": "gauge",
        "gpu_scheduler_island_allocated_gpus": "gauge",
    }
    assert labelnames(m.registry) == {
        "gpu_scheduler_leader": set(),
        "gpu_scheduler_pods_seen_total": set(),
        "gpu_scheduler_bind_errors_total": set(),
        "gpu_scheduler_bind_conflicts_total": set(),
        "gpu_scheduler_unschedulable_total": set(),
        "gpu_scheduler_bind_duration_seconds": set(),
        "gpu_scheduler_scheduling_attempts_total": {"kind", "result", "strategy"},
        "gpu_scheduler_scheduling_attempt_duration_seconds": {"kind", "result"},
        "gpu_scheduler_e2e_scheduling_duration_seconds": {"kind"},
        "gpu_scheduler_lease_reconciles_total": {"outcome"},
        "gpu_scheduler_strategy_info": {"strategy", "queue_order"},
        "gpu_scheduler_gang_attempts_total": {"result"},
        "gpu_scheduler_gang_scheduling_duration_seconds": set(),
        "gpu_scheduler_gangs_below_minimum_total": set(),
        "gpu_scheduler_preemption_attempts_total": set(),
        "gpu_scheduler_preemption_victims_total": set(),
        "gpu_scheduler_pending_pods": {"kind"},
        "gpu_scheduler_node_gpus": {"node", "state"},
        "gpu_scheduler_island_allocated_gpus": {"node", "island"},
    }
    exposition = text(m.registry)
    assert "_created" not in exposition  # left out by health.render_metrics
    assert not [n for n, t in types(m.registry).items() if t == "gauge" and n.endswith("_total")]


def test_every_known_label_combination_is_there_at_zero_from_the_start():
    m = Metrics()
    got = samples(m.registry)
    attempts = {k: v for k, v in got.items() if k[0] == "gpu_scheduler_scheduling_attempts_total"}
    expected = {("map", r, "none") for r in ("scheduled", "unschedulable", "error")} | {
        ("claim", r, s) for r in ("scheduled", "unschedulable", "error") for s in constants.STRATEGIES
    }
    assert {(dict(k[1])["kind"], dict(k[1])["result"], dict(k[1])["strategy"]) for k in attempts} == expected
    assert set(attempts.values()) == {0}
    durations = {k for k in got if k[0] == "gpu_scheduler_scheduling_attempt_duration_seconds_count"}
    assert durations == {
        ("gpu_scheduler_scheduling_attempt_duration_seconds_count", (("kind", k), ("result", r)))
        for k in ("map", "claim")
        for r in ("scheduled", "unschedulable", "error")
    }
    assert {k for k in got if k[0] == "gpu_scheduler_e2e_scheduling_duration_seconds_count"} == {
        ("gpu_scheduler_e2e_scheduling_duration_seconds_count", (("kind", "map"),)),
        ("gpu_scheduler_e2e_scheduling_duration_seconds_count", (("kind", "claim"),)),
    }
    assert {k: v for k, v in got.items() if k[0] == "gpu_scheduler_lease_reconciles_total"} == {
        ("gpu_scheduler_lease_reconciles_total", (("outcome", o),)): 0
        for o in ("released", "updated", "recreated", "retried")
    }
    for name in (
        "gpu_scheduler_leader",
        "gpu_scheduler_pods_seen_total",
        "gpu_scheduler_bind_errors_total",
        "gpu_scheduler_bind_conflicts_total",
        "gpu_scheduler_unschedulable_total",
        "gpu_scheduler_bind_duration_seconds_count",
    ):
        assert got[(name, ())] == 0
    # The built-in default policy until the scheduler says otherwise.
    assert {k: v for k, v in got.items() if k[0] == "gpu_scheduler_strategy_info"} == {
        (
            "gpu_scheduler_strategy_info",
            (("queue_order", constants.DEFAULT_QUEUE_ORDER), ("strategy", constants.DEFAULT_STRATEGY)),
        ): 1
    }


def test_counters_and_leader_move():
    m = Metrics()
    m.pod_seen()
    m.pod_seen()
    m.bind_error()
    m.bind_conflict()
    m.unschedulable_reported()
    m.set_leader(True)
    got = samples(m.registry)
    assert got[("gpu_scheduler_pods_seen_total", ())] == 2
    assert got[("gpu_scheduler_bind_errors_total", ())] == 1
    assert got[("gpu_scheduler_bind_conflicts_total", ())] == 1
    assert got[("gpu_scheduler_unschedulable_total", ())] == 1
    assert got[("gpu_scheduler_leader", ())] == 1
    m.set_leader(False)
    assert samples(m.registry)[("gpu_scheduler_leader", ())] == 0


def test_bind_histogram_is_cumulative_with_the_same_buckets():
    m = Metrics()
    for s in (0.001, 0.02, 3.0, 10.0):
        m.observe_bind(s)
    got = samples(m.registry, "gpu_scheduler_bind_duration_seconds")
    buckets = {dict(k[1])["le"]: v for k, v in got.items() if k[0].endswith("_bucket")}
    assert list(buckets) == [*(str(b) for b in BUCKETS), "+Inf"]
    assert buckets["0.005"] == 1 and buckets["0.025"] == 2 and buckets["5.0"] == 3 and buckets["+Inf"] == 4
    assert got[("gpu_scheduler_bind_duration_seconds_count", ())] == 4
    assert got[("gpu_scheduler_bind_duration_seconds_sum", ())] == pytest.approx(13.021)


def test_attempts_count_by_kind_result_strategy_and_time_by_kind_result():
    m = Metrics()
    m.attempt("map", "scheduled", "", 0.002)
    m.attempt("claim", "unschedulable", "LeastUtilized", 0.2)
    m.attempt("claim", "unschedulable", "LeastUtilized", 20.0)
    got = samples(m.registry)
    attempts = "gpu_scheduler_scheduling_attempts_total"
    assert got[(attempts, (("kind", "map"), ("result", "scheduled"), ("strategy", "none")))] == 1
    assert got[(attempts, (("kind", "claim"), ("result", "unschedulable"), ("strategy", "LeastUtilized")))] == 2
    assert sum(v for k, v in got.items() if k[0] == attempts) == 3
    duration = "gpu_scheduler_scheduling_attempt_duration_seconds"
    unsched = (("kind", "claim"), ("result", "unschedulable"))
    assert got[(f"{duration}_count", unsched)] == 2
    assert got[(f"{duration}_sum", unsched)] == pytest.approx(20.2)
    assert got[(f"{duration}_bucket", (*unsched[:1], ("le", "0.25"), *unsched[1:]))] == 1
    assert got[(f"{duration}_bucket", (*unsched[:1], ("le", str(ATTEMPT_BUCKETS[-1])), *unsched[1:]))] == 1
    assert got[(f"{duration}_bucket", (*unsched[:1], ("le", "+Inf"), *unsched[1:]))] == 2
    assert got[(f"{duration}_count", (("kind", "map"), ("result", "scheduled")))] == 1


def test_e2e_histogram_reaches_a_minute():
    m = Metrics()
    m.scheduled("claim", 45.0)
    got = samples(m.registry, "gpu_scheduler_e2e_scheduling_duration_seconds")
    assert E2E_BUCKETS[-1] == 60.0
    le = [dict(k[1])["le"] for k in got if k[0].endswith("_bucket") and dict(k[1])["kind"] == "claim"]
    assert le == [*(str(b) for b in E2E_BUCKETS), "+Inf"]
    claim = ("kind", "claim")
    assert got[("gpu_scheduler_e2e_scheduling_duration_seconds_bucket", (claim, ("le", "30.0")))] == 0
    assert got[("gpu_scheduler_e2e_scheduling_duration_seconds_bucket", (claim, ("le", "60.0")))] == 1
    assert got[("gpu_scheduler_e2e_scheduling_duration_seconds_count", (("kind", "map"),))] == 0


def test_lease_reconciles_by_outcome():
    m = Metrics()
    m.lease_reconciled("released")
    m.lease_reconciled("retried")
    m.lease_reconciled("retried")
    got = samples(m.registry, "gpu_scheduler_lease_reconciles_total")
    assert {dict(k[1])["outcome"]: v for k, v in got.items()} == {
        "released": 1,
        "updated": 0,
        "recreated": 0,
        "retried": 2,
    }


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.attempt("pod", "scheduled", "", 0.1),
        lambda m: m.attempt("claim", "bound", "BestFit", 0.1),
        lambda m: m.scheduled("Claim", 1.0),
        lambda m: m.lease_reconciled("deleted"),
    ],
)
def test_an_unknown_kind_result_or_outcome_is_a_bug(call):
    with pytest.raises(ValueError, match="is not one of"):
        call(Metrics())


def test_set_policy_keeps_one_series_the_active_pair():
    m = Metrics()
    m.set_policy("RoundRobin", "FIFO")
    m.set_policy("RoundRobin", "FIFO")
    assert samples(m.registry, "gpu_scheduler_strategy_info") == {
        ("gpu_scheduler_strategy_info", (("queue_order", "FIFO"), ("strategy", "RoundRobin"))): 1
    }
    m.set_policy("LeastUtilized", "FIFO")
    assert samples(m.registry, "gpu_scheduler_strategy_info") == {
        ("gpu_scheduler_strategy_info", (("queue_order", "FIFO"), ("strategy", "LeastUtilized"))): 1
    }


def test_state_collector_reports_the_state_exactly():
    m = Metrics()
    calls = []

    def source() -> SchedulerState:
        calls.append(1)
        return STATE

    m.state_source = source
    assert calls == []  # nothing until a scrape
    got = samples(m.registry)
    assert len(calls) == 1
    state = {
        k: v
        for k, v in got.items()
        if k[0]
        in {
            "gpu_scheduler_pending_pods",
            "gpu_scheduler_node_gpus",
            "gpu_scheduler_island_allocated_gpus",
        }
    }
    assert state == {
        ("gpu_scheduler_pending_pods", (("kind", "map"),)): 2,
        ("gpu_scheduler_pending_pods", (("kind", "claim"),)): 5,
        ("gpu_scheduler_node_gpus", (("node", "node-a"), ("state", "free"))): 8,
        ("gpu_scheduler_node_gpus", (("node", "node-a"), ("state", "allocated"))): 0,
        ("gpu_scheduler_node_gpus", (("node", "node-a"), ("state", "unhealthy"))): 0,
        ("gpu_scheduler_node_gpus", (("node", "node-b"), ("state", "free"))): 1,
        ("gpu_scheduler_node_gpus", (("node", "node-b"), ("state", "allocated"))): 6,
        ("gpu_scheduler_node_gpus", (("node", "node-b"), ("state", "unhealthy"))): 1,
        ("gpu_scheduler_island_allocated_gpus", (("island", "0"), ("node", "node-b"))): 4,
        ("gpu_scheduler_island_allocated_gpus", (("island", "1"), ("node", "node-b"))): 2,
    }


def test_state_with_nothing_pending_still_has_both_kinds_at_zero():
    m = Metrics()
    m.state_source = lambda: SchedulerState(pending={}, node_gpus={}, island_allocations={})
    got = samples(m.registry)
    assert {k: v for k, v in got.items() if k[0] == "gpu_scheduler_pending_pods"} == {
        ("gpu_scheduler_pending_pods", (("kind", "map"),)): 0,
        ("gpu_scheduler_pending_pods", (("kind", "claim"),)): 0,
    }
    assert not [k for k in got if k[0] in {"gpu_scheduler_node_gpus", "gpu_scheduler_island_allocated_gpus"}]


def test_without_a_state_source_or_when_it_fails_the_state_families_are_absent(caplog):
    state_families = {"gpu_scheduler_pending_pods", "gpu_scheduler_node_gpus", "gpu_scheduler_island_allocated_gpus"}
    m = Metrics()
    assert not state_families & set(types(m.registry))

    def broken() -> SchedulerState:
        raise RuntimeError("informer gone")

    m.state_source = broken
    got = types(m.registry)  # the scrape itself still succeeds
    assert "gpu_scheduler_leader" in got and not state_families & set(got)
    assert "reading the scheduler state for /metrics failed" in caplog.text


def test_registries_are_per_instance():
    a, b = Metrics(), Metrics()
    a.pod_seen()
    assert samples(b.registry)[("gpu_scheduler_pods_seen_total", ())] == 0
    assert "gpu_scheduler_leader" not in text(prometheus_client.REGISTRY)


# --- health.add_probes serves a registry, honouring Accept ---


def test_add_probes_serves_the_registry_in_the_format_asked_for():
    asyncio.run(_serves_the_registry_in_the_format_asked_for())


async def _serves_the_registry_in_the_format_asked_for() -> None:
    m = Metrics()
    m.pod_seen()
    app = web.Application()
    health.add_probes(app, lambda: True, m.registry)
    async with TestClient(TestServer(app)) as client:
        plain = await client.get("/metrics")
        assert plain.status == 200
        assert plain.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        body = await plain.text()
        assert "gpu_scheduler_pods_seen_total 1.0" in body
        om = await client.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
        assert om.headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
        om_body = await om.text()
        assert om_body.endswith("# EOF\n") and "_created" not in om_body
        families = {f.name: f for f in openmetrics_families(om_body)}
        assert families["gpu_scheduler_pods_seen"].type == "counter"
        assert (await client.get("/healthz")).status == 200
        assert (await client.get("/readyz")).status == 200


def test_add_probes_without_a_registry_has_no_metrics_route():
    asyncio.run(_without_a_registry_has_no_metrics_route())


async def _without_a_registry_has_no_metrics_route() -> None:
    app = web.Application()
    health.add_probes(app, lambda: False)
    async with TestClient(TestServer(app)) as client:
        assert (await client.get("/metrics")).status == 404
        assert (await client.get("/readyz")).status == 503


# --- the webhook's exposition ---


def test_webhook_families_types_and_labels():
    m = WebhookMetrics()
    assert types(m.registry) == {
        "gpu_webhook_requests_total": "counter",
        "gpu_webhook_patched_total": "counter",
        "gpu_webhook_denied_total": "counter",
        "gpu_webhook_bad_requests_total": "counter",
        "gpu_webhook_errors_total": "counter",
        "gpu_webhook_too_large_total": "counter",
        "gpu_webhook_timeouts_total": "counter",
        "gpu_webhook_client_disconnects_total": "counter",
        "gpu_webhook_connections_refused_total": "counter",
        "gpu_webhook_connections_evicted_total": "counter",
        "gpu_webhook_open_connections": "gauge",
        "gpu_webhook_largest_response_bytes": "gauge",
        "gpu_webhook_connections_total": "counter",
        "gpu_webhook_request_duration_seconds": "histogram",
    }
    names = labelnames(m.registry)
    assert names["gpu_webhook_connections_total"] == {"protocol"}
    assert all(not labels for name, labels in names.items() if name != "gpu_webhook_connections_total")


def test_webhook_attributes_are_what_the_registry_shows():
    m = WebhookMetrics()
    m.requests.inc(5)
    m.patched.inc(3)
    m.denied.inc(1)
    m.errors.inc(2)
    m.open_connections.set(4)
    m.connections.labels("h2").inc(7)
    m.connections.labels("http/1.1").inc(1)
    m.response_size(1234)
    m.response_size(1000)  # the largest so far stays
    for s in (0.0004, 0.003, 0.003, 9.0):
        m.duration.observe(s)
    got = samples(m.registry)
    assert got[("gpu_webhook_requests_total", ())] == 5
    assert got[("gpu_webhook_patched_total", ())] == 3
    assert got[("gpu_webhook_denied_total", ())] == 1
    assert got[("gpu_webhook_errors_total", ())] == 2
    assert got[("gpu_webhook_open_connections", ())] == 4
    assert got[("gpu_webhook_connections_total", (("protocol", "h2"),))] == 7
    assert got[("gpu_webhook_connections_total", (("protocol", "http/1.1"),))] == 1
    assert got[("gpu_webhook_largest_response_bytes", ())] == 1234
    hist = "gpu_webhook_request_duration_seconds"
    assert got[(f"{hist}_bucket", (("le", "0.0005"),))] == 1
    assert got[(f"{hist}_bucket", (("le", "0.005"),))] == 3
    assert got[(f"{hist}_bucket", (("le", "2.5"),))] == 3
    assert got[(f"{hist}_bucket", (("le", "+Inf"),))] == 4
    assert got[(f"{hist}_count", ())] == 4
    assert got[(f"{hist}_sum", ())] == pytest.approx(9.0064)
    # The old `gpu_webhook_request_seconds_sum` counter is gone: the histogram's _sum is that.
    assert not [k for k in got if k[0] == "gpu_webhook_request_seconds_sum"]


# --- conventions, for every family of every program ---


def _agent_registry() -> prometheus_client.CollectorRegistry | None:
    """The inventory agent's registry, with a written status so that its per-GPU families show, if the agent has
    metrics in this tree."""
    if importlib.util.find_spec("gpu_scheduling.agent.metrics") is None:
        return None
    module = importlib.import_module("gpu_scheduling.agent.metrics")
    metrics = module.AgentMetrics("node-a")
    device = {
        "id": 0,
        "health": "Healthy",
        "memoryTotalMiB": 81920,
        "memoryUsedMiB": 1024,
        "utilizationPercent": 40,
        "inUseBy": ["default/p"],
    }
    metrics.synced({"devices": [device]}, "simulated", 0.02, 1_700_000_000.0)
    metrics.failed(0.5)
    registry: prometheus_client.CollectorRegistry = metrics.registry
    return registry


def _registries() -> list[tuple[str, prometheus_client.CollectorRegistry]]:
    scheduler = Metrics()
    scheduler.state_source = lambda: STATE
    out = [("gpu_scheduler_", scheduler.registry), ("gpu_webhook_", WebhookMetrics().registry)]
    agent = _agent_registry()
    if agent is not None:
        out.append(("gpu_inventory_agent_", agent))
    out.append(("gpu_board_", BoardMetrics().registry))
    return out


SNAKE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")


@pytest.mark.parametrize(("prefix", "registry"), _registries(), ids=lambda v: v if isinstance(v, str) else "")
def test_metric_conventions(prefix, registry):
    exposition = text(registry)
    typed = dict(re.findall(r"^# TYPE (\S+) (\S+)$", exposition, re.MULTILINE))
    helps = dict(re.findall(r"^# HELP (\S+) (.*)$", exposition, re.MULTILINE))
    assert typed, "no families"
    problems = []
    for name, kind in typed.items():
        if not name.startswith(prefix):
            problems.append(f"{name}: not prefixed {prefix}")
        if not SNAKE.match(name):
            problems.append(f"{name}: not snake_case")
        if not helps.get(name, "").strip():
            problems.append(f"{name}: no HELP text")
        if kind == "counter" and not name.endswith("_total"):
            problems.append(f"{name}: a counter not ending _total")
        if kind != "counter" and name.endswith("_total"):
            problems.append(f"{name}: a {kind} ending _total")
        if kind == "histogram" and not name.endswith(("_seconds", "_bytes")):
            problems.append(f"{name}: a histogram without a unit suffix (_seconds, _bytes)")
        if kind in {"gauge", "counter"} and re.search(r"_(sum|count|bucket|created)(_total)?$", name):
            problems.append(f"{name}: a {kind} named like a histogram/summary sample")
        if kind not in {"counter", "gauge", "histogram"}:
            problems.append(f"{name}: type {kind}")
    for family in text_string_to_metric_families(exposition):
        for s in family.samples:
            for label in s.labels:
                if not SNAKE.match(label) or label.startswith("__"):
                    problems.append(f"{s.name}: label {label!r}")
                if label == "le" and not s.name.endswith("_bucket"):
                    problems.append(f"{s.name}: label le outside a histogram bucket")
    # OpenMetrics names a counter family without _total: no two families may then share a name.
    om = health.render_metrics(registry, "application/openmetrics-text; version=1.0.0")[0].decode()
    om_names = re.findall(r"^# TYPE (\S+) ", om, re.MULTILINE)
    problems += [
        f"{n}: two OpenMetrics families of this name" for n in sorted({n for n in om_names if om_names.count(n) > 1})
    ]
    assert {f.name for f in openmetrics_families(om)}  # parses
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("prefix", "registry"), _registries(), ids=lambda v: v if isinstance(v, str) else "")
def test_the_readme_lists_every_family(prefix, registry):
    """docs/metrics.md ("Metrics and the dashboard") names each family in full, or as `_rest` after its program's
    first family in the same table row: a family added without a word there fails here."""
    page = (ROOT / "docs" / "metrics.md").read_text()
    section = page[page.index("# Metrics and the dashboard") :]
    section = section[: section.index("\n## ", 1)]
    names = re.findall(r"^# TYPE (\S+) ", text(registry), re.MULTILINE)
    assert names
    missing = [
        n for n in names if f"`{n}" not in section and f"`_{n.removeprefix(prefix)}" not in section.split(prefix, 1)[-1]
    ]
    assert not missing, f"docs/metrics.md does not list {missing}"
