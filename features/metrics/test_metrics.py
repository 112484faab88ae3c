"""Metrics as a real Prometheus sees them (metrics.feature, @metrics: control-plane tier only): one Prometheus for
the feature, built by hack/toolchain.py, scraping the session's gpu-scheduler and gpu-webhook and one
gpu-inventory-agent started here for node4; then every query of the Grafana dashboard the chart ships."""

from __future__ import annotations

import json
import pathlib
import re
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
from pytest_bdd import given, scenarios, then, when

from features.support import Cluster, World, claim_status, step
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import NotFound
from hack import toolchain
from harness.inventory import publish
from harness.prometheus import Prometheus, ScrapeTarget
from harness.wait import wait_for

scenarios("metrics.feature")

AGENT_NODE = "node4"
JOBS = ("gpu-scheduler", "gpu-webhook", "gpu-inventory-agent")
DASHBOARD = pathlib.Path(__file__).parents[2] / "charts/gpu-scheduler/dashboards/gpu-scheduling.json"
#: Grafana's interval variables, which a panel's query may use: each becomes a window that holds several
#: scrapes (one a second) once `Prometheus has scraped every target N more times`.
INTERVAL_VARIABLES = ("__rate_interval", "__interval", "__range")
INTERVAL = "1m"
#: Grafana's rule for a dashboard uid: at most 40 letters, digits, '-' and '_'.
UID = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")


@pytest.fixture(scope="module")
def prometheus(cluster: Cluster) -> Iterator[Prometheus]:
    """The feature's Prometheus and the inventory agent it scrapes; both stopped after the feature's last
    scenario (the agent rewrites node4's GpuNodeStatus while it runs, which no other feature expects)."""
    comps, cp = cluster.components, cluster.cp
    assert comps is not None and cp is not None, "the metrics scenarios run on the control-plane tier"
    before = node_status(cluster, AGENT_NODE)
    agent = comps.inventory_agent(AGENT_NODE, interval=1)
    agent.start()
    prom = None
    try:
        agent.wait_ready()
        targets = [
            ScrapeTarget("gpu-scheduler", f"127.0.0.1:{comps.health_port}"),
            ScrapeTarget(
                "gpu-webhook", urllib.parse.urlsplit(comps.webhook_url).netloc, ca_file=comps.webhook_ca.cert_path
            ),
            ScrapeTarget("gpu-inventory-agent", f"127.0.0.1:{agent.health_port}"),
        ]
        prom = Prometheus(cp.dir / "prometheus", targets, log_dir=cp.logs).start()
        yield prom
    finally:
        if prom is not None:
            prom.stop()
        agent.stop()
        # Leave the node's GpuNodeStatus as the feature found it: later features write their own inventories.
        if before is None:
            cluster.api.delete(paths.gpu_node_status(AGENT_NODE))
        else:
            publish(cluster.kubeconfig, {AGENT_NODE: before})


def node_status(cluster: Cluster, node: str) -> dict[str, Any] | None:
    """The status of `node`'s GpuNodeStatus, None when it has none."""
    try:
        return cluster.api.get(paths.gpu_node_status(node)).get("status") or {}
    except NotFound:
        return None


@given(step("Prometheus scrapes the scheduler, the webhook and the inventory agent of {node}"))
def scraping(prometheus: Prometheus, node: str) -> Prometheus:
    assert node == AGENT_NODE, f"the feature's inventory agent runs for {AGENT_NODE}"
    return prometheus


@when(step("Prometheus has scraped every target {count:d} times"))
def scraped(prometheus: Prometheus, count: int) -> None:
    prometheus.wait_scraped(JOBS, samples=count)


@when(step("Prometheus has scraped every target {count:d} more times"))
def scraped_more(prometheus: Prometheus, count: int) -> None:
    prometheus.wait_scraped(JOBS, samples=count, since=time.time())


@then("every target of Prometheus is healthy")
def targets_healthy(prometheus: Prometheus) -> None:
    targets = {t["labels"]["job"]: t for t in prometheus.targets()}
    assert sorted(targets) == sorted(JOBS), targets
    unhealthy = {job: (t["health"], t.get("lastError")) for job, t in targets.items() if t["health"] != "up"}
    assert not unhealthy, unhealthy
    assert targets["gpu-webhook"]["scrapeUrl"].startswith("https://"), targets["gpu-webhook"]["scrapeUrl"]


@then(step('"up" is 1 for the job "{job:q}" with series named "{names:q}"'))
def job_up_with_families(prometheus: Prometheus, job: str, names: str) -> None:
    assert prometheus.value(f'up{{job="{job}"}}') == 1.0, prometheus.query(f'up{{job="{job}"}}')
    families = {s["metric"]["__name__"] for s in prometheus.query(f'count by (__name__) ({{job="{job}"}})')}
    missing = [name for name in names.split(",") if name not in families]
    own = sorted(f for f in families if f.startswith("gpu_"))
    assert not missing, f"job {job}: no series named {missing}; its own families: {own}"


@then("Prometheus reports its version as the pinned one")
def pinned_version(prometheus: Prometheus) -> None:
    pinned = toolchain.prometheus_release(toolchain.read_versions()["prometheus_version"])
    assert prometheus.buildinfo()["version"] == pinned


@then(step('the GpuClaim "{name:q}" is Bound on {node}'))
def claim_bound_on(world: World, name: str, node: str) -> None:
    status = wait_for(
        f"GpuClaim {name} Bound", lambda: (s := claim_status(world, name)).get("phase") == "Bound" and s, timeout=60
    )
    assert status["nodeName"] == node, status


# ---- the dashboard ---------------------------------------------------------------------------------------------


def load_dashboard() -> dict[str, Any]:
    assert DASHBOARD.exists(), f"no dashboard at {DASHBOARD}"
    return json.loads(DASHBOARD.read_text())  # type: ignore[no-any-return]


def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside rows (a collapsed row keeps its panels in its own `panels`) included."""
    for panel in items:
        yield panel
        yield from panels(panel.get("panels") or [])


def datasource_variables(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        v
        for v in (dashboard.get("templating") or {}).get("list") or []
        if v.get("type") == "datasource" and v.get("query") == "prometheus"
    ]


def expand(expr: str, variables: dict[str, str]) -> str:
    """The query Grafana would send: every `$name`, `${name}`, `${name:format}` and `[[name]]` replaced by its
    value; an unknown variable fails naming it. `$1`, `$2`... are PromQL's own (label_replace's replacement), kept."""

    def value(m: re.Match[str]) -> str:
        name = next(g for g in m.groups() if g)
        if name.isdigit():
            return m.group(0)
        if name not in variables:
            raise AssertionError(f"unknown dashboard variable ${name} in {expr!r}; known: {sorted(variables)}")
        return variables[name]

    return VARIABLE.sub(value, expr)


def variable_values(dashboard: dict[str, Any]) -> dict[str, str]:
    """Grafana's interval variables as INTERVAL, and each template variable as its current value (`All` and
    multi-values as a regular expression matching them; a variable without a current value as `.*`)."""
    values = dict.fromkeys(INTERVAL_VARIABLES, INTERVAL)
    for var in (dashboard.get("templating") or {}).get("list") or []:
        current = (var.get("current") or {}).get("value")
        if isinstance(current, list):
            current = "|".join(current)
        if current in (None, "", "$__all") or var.get("type") == "datasource":
            current = ".*" if var.get("type") != "datasource" else str(current or "")
        values[var["name"]] = str(current)
    return values


@then("the dashboard has a stable uid and a Prometheus datasource variable")
def dashboard_identity() -> None:
    dashboard = load_dashboard()
    uid = dashboard.get("uid")
    assert isinstance(uid, str) and UID.match(uid), f"the dashboard's uid must be fixed (Grafana's rule): {uid!r}"
    assert datasource_variables(dashboard), "no templating variable of type datasource for prometheus"


@then("every query of every panel of the dashboard returns data")
def every_panel_has_data(prometheus: Prometheus) -> None:
    dashboard = load_dashboard()
    values = variable_values(dashboard)
    failures, ran = [], 0
    for panel in panels(dashboard.get("panels") or []):
        for target in panel.get("targets") or []:
            if not target.get("expr") or target.get("hide"):
                continue
            expr = expand(target["expr"], values)
            ran += 1
            where = f"panel {panel.get('title')!r} (id {panel.get('id')}), target {target.get('refId', '?')}: {expr}"
            try:
                if not prometheus.query(expr):
                    failures.append(f"{where}: no data")
            except Exception as exc:  # noqa: BLE001  # every failing query is listed, not only the first
                failures.append(f"{where}: {exc}")
    assert ran, f"no panel of {DASHBOARD.name} has a query"
    assert not failures, f"{len(failures)} of {ran} dashboard queries failed:\n" + "\n".join(failures)
