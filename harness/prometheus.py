"""A real Prometheus (hack/toolchain.py builds it from the Go module proxy) scraping the programs of a test run.

Its configuration is generated: one job per program with static targets on loopback, scraped every second, HTTPS
targets verified with the CA that issued their certificate (the webhook's, harness/pki.py). It keeps its TSDB in
a folder the caller owns and logs beside the other processes. The scenarios read it back over the HTTP API:
`query` (instant queries, /api/v1/query) and `targets` (/api/v1/targets).

    prom = Prometheus(workdir, [ScrapeTarget("gpu-scheduler", "127.0.0.1:8080")], log_dir=logs).start()
    prom.wait_scraped(["gpu-scheduler"], samples=3)
    prom.query('up{job="gpu-scheduler"}')   # [{"metric": {...}, "value": [1700000000.0, "1"]}]
    prom.stop()

The configuration is written as JSON, which is YAML too: no YAML library needed.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
import shutil
import subprocess
import time
from collections.abc import Sequence
from typing import Any

import httpx

from hack import toolchain
from harness.processes import Process, free_port

SCRAPE_INTERVAL = 1.0
"""Seconds between two scrapes of a target (and between rule evaluations): a rate() over a minute has its two
samples within a few seconds of a target's first scrape."""


class PrometheusError(RuntimeError):
    """A query or API call Prometheus refused or could not answer; the message names the query."""


@dataclasses.dataclass(frozen=True)
class ScrapeTarget:
    """One program's /metrics: `job` becomes the `job` label of its series, `address` is host:port. With
    `ca_file` the target is scraped over HTTPS and its certificate verified against that CA (its name must match
    the address: harness certificates carry 127.0.0.1 and localhost); `labels` are added to every series."""

    job: str
    address: str
    ca_file: pathlib.Path | None = None
    metrics_path: str = "/metrics"
    labels: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def scheme(self) -> str:
        return "https" if self.ca_file is not None else "http"

    def scrape_config(self, interval: float) -> dict[str, Any]:
        config: dict[str, Any] = {
            "job_name": self.job,
            "scrape_interval": f"{interval:g}s",
            "scrape_timeout": f"{interval:g}s",
            "metrics_path": self.metrics_path,
            "scheme": self.scheme,
            "static_configs": [{"targets": [self.address], "labels": dict(self.labels)}],
        }
        if self.ca_file is not None:
            config["tls_config"] = {"ca_file": str(self.ca_file)}
        return config


def binary() -> pathlib.Path:
    """The prometheus binary that hack/toolchain.py built; a clear error when it has not been built yet."""
    path = toolchain.bindir() / "prometheus"
    if not path.exists():
        raise RuntimeError(
            f"no prometheus binary at {path}: run `python3 hack/toolchain.py build prometheus` (`make scenarios` does)"
        )
    return path


def version() -> str:
    """What `prometheus --version` prints on its first line, e.g. `prometheus, version 3.16.0 (...)`."""
    out = subprocess.run([str(binary()), "--version"], capture_output=True, text=True, check=True)
    return (out.stdout or out.stderr).splitlines()[0]


def config(targets: Sequence[ScrapeTarget], interval: float = SCRAPE_INTERVAL) -> dict[str, Any]:
    """The prometheus.yml for `targets` (as a dict; written as JSON)."""
    jobs = [t.job for t in targets]
    duplicates = sorted({j for j in jobs if jobs.count(j) > 1})
    if duplicates:
        raise ValueError(f"job names must be unique: {', '.join(duplicates)}")
    return {
        "global": {
            "scrape_interval": f"{interval:g}s",
            "scrape_timeout": f"{interval:g}s",
            "evaluation_interval": f"{interval:g}s",
        },
        "scrape_configs": [t.scrape_config(interval) for t in targets],
    }


class Prometheus:
    """One Prometheus on a free loopback port, its TSDB and configuration under `workdir` (emptied at start), its
    log in `log_dir`/prometheus.log. `url` is its base URL once started."""

    def __init__(
        self,
        workdir: pathlib.Path,
        targets: Sequence[ScrapeTarget],
        *,
        log_dir: pathlib.Path,
        interval: float = SCRAPE_INTERVAL,
    ):
        self.dir = workdir
        self.scrape_targets = list(targets)
        self.interval = interval
        self.config_path = workdir / "prometheus.json"
        self.storage = workdir / "data"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = Process(
            "prometheus",
            [
                str(binary()),
                f"--config.file={self.config_path}",
                f"--storage.tsdb.path={self.storage}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            log_dir,
        )
        self._http = httpx.Client(base_url=self.url, timeout=10)

    # ---- lifecycle -------------------------------------------------------------------------------------------
    def start(self, timeout: float = 60) -> Prometheus:
        """Write the configuration, start Prometheus and wait until /-/ready answers 200 (its TSDB is open and
        the configuration loaded)."""
        shutil.rmtree(self.storage, ignore_errors=True)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(json.dumps(config(self.scrape_targets, self.interval), indent=2) + "\n")
        self.process.start()
        try:
            self.process.wait_http(f"{self.url}/-/ready", timeout=timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        self.process.stop(timeout=20)  # SIGTERM: Prometheus closes its TSDB
        self._http.close()

    def __enter__(self) -> Prometheus:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    # ---- the HTTP API ----------------------------------------------------------------------------------------
    def _api(self, path: str, what: str, **params: str) -> Any:
        """GET /api/v1/`path`; its `data`, or a PrometheusError naming `what` with Prometheus' own error."""
        if not self.process.running:
            raise PrometheusError(f"{what}: prometheus is not running:\n{self.process.tail()}")
        try:
            resp = self._http.get(f"/api/v1/{path}", params=params)
        except httpx.HTTPError as exc:
            raise PrometheusError(f"{what}: {type(exc).__name__}: {exc}") from exc
        try:
            body = resp.json()
        except ValueError:
            raise PrometheusError(f"{what}: HTTP {resp.status_code}, not JSON: {resp.text[:500]!r}") from None
        if body.get("status") != "success":
            raise PrometheusError(
                f"{what}: HTTP {resp.status_code} {body.get('errorType', '?')}: {body.get('error', body)}"
            )
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """Evaluate the PromQL `expr` at `at` (seconds since the epoch; default now): the vector's samples
        (`{"metric": {...}, "value": [t, "v"]}`), a matrix's series (`"values"`), or a scalar or string as
        one sample without labels. A bad expression or a failed evaluation raises PrometheusError naming it."""
        params = {"query": expr} | ({"time": f"{at:.3f}"} if at is not None else {})
        data = self._api("query", f"query {expr!r}", **params)
        if data["resultType"] in ("vector", "matrix"):
            return list(data["result"])
        return [{"metric": {}, "value": data["result"]}]

    def value(self, expr: str) -> float | None:
        """The value of a query with one result (a sample or a scalar), None with none; more is an error."""
        result = self.query(expr)
        if not result:
            return None
        if len(result) > 1:
            raise PrometheusError(f"query {expr!r}: {len(result)} results where one was expected: {result}")
        return float(result[0]["value"][1])

    def targets(self) -> list[dict[str, Any]]:
        """The active targets as /api/v1/targets reports them: `labels` (job, instance, ...), `health` ("up",
        "down", "unknown"), `lastError`, `lastScrape`, `scrapeUrl`."""
        return list(self._api("targets", "targets", state="active")["activeTargets"])

    # ---- waiting ---------------------------------------------------------------------------------------------
    def buildinfo(self) -> dict[str, str]:
        """/api/v1/status/buildinfo: `version` (e.g. 3.16.0), `revision`, `branch`, `goVersion`, ..."""
        return dict(self._api("status/buildinfo", "buildinfo"))

    # ---- waiting ---------------------------------------------------------------------------------------------
    def wait_scraped(
        self, jobs: Sequence[str], *, samples: int = 3, since: float | None = None, timeout: float = 60
    ) -> None:
        """Until every job in `jobs` has been scraped successfully at least `samples` times within the last
        minute, or since `since` (seconds since the epoch) when given: a rate() over a minute then has its two
        points, and with `since` those points are after what happened before it. On time-out the message has the
        counts and each target's health and last error."""
        deadline = time.monotonic() + timeout
        while True:
            window = f"{max(1, math.ceil(time.time() - since))}s" if since is not None else "1m"
            # `up` is 1 for a successful scrape and 0 for a failed one: its sum over the window counts successes.
            counts = {
                s["metric"].get("job", ""): float(s["value"][1])
                for s in self.query(f"sum by (job) (sum_over_time(up[{window}]))")
                if s["metric"].get("job") in jobs
            }
            if all(counts.get(job, 0) >= samples for job in jobs):
                return
            if time.monotonic() > deadline:
                health = {
                    t["labels"].get("job"): f"{t['health']} {t.get('lastError') or ''}".strip() for t in self.targets()
                }
                raise AssertionError(
                    f"timed out after {timeout:.0f}s waiting for {samples} successful scrapes of {list(jobs)} within "
                    f"{window}; successful scrapes: {counts}; targets: {health}"
                )
            time.sleep(self.interval / 2)
