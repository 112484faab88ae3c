"""The board's benchmark (issue 14): gpu-board watching 1000 kwok nodes of 8 GPUs and 5000 GPU pods, read by a
real headless Chromium. Writes docs/board-benchmark.md (and docs/board-benchmark/: the raw results, a screenshot).

    python -m bench --board                   # the full run (not part of `make bench`; 4-9 min on 2 cores)
    python -m bench --board --smoke           # 20 nodes, 100 pods: every pod on the board and in the browser
    python -m bench --smoke                   # the scheduler's smoke, then this smoke pass

One fresh BenchPlane (bench/plane.py): kwok nodes in 10 zones (`topology.kubernetes.io/zone`, so the board groups
them), the simulated GpuNodeStatus of every node, the real gpu-scheduler with its webhook (as the scheduler's
benchmark starts it, bench/contenders.py) and the real `gpu-board` process over TLS (harness/board.py). The pods:
a fifth are map pods, made by StatefulSets (Parallel, 100 replicas) whose pod template carries a
`gpu-scheduling-map` (pod p of the map pods on node p mod N, GPU 0), the rest are claim pods of 1 GPU, each with
its GpuClaim (bench/workload.py), placed by the scheduler. What is measured, and how:

  (a) building the state: the board's objects are LISTed once from the apiserver and fed to a fresh
      `board.state.Board` in this process (as its informers would: ADDED events), then `document()` timed cold
      (every node part to build) and warm (nothing changed), and a one-node change (`take_changes`, `patch`,
      `document`): the median of several runs. The board process's own CPU seconds and peak RSS over the run
      (/proc, plane.ProcessStats), its /readyz and first /api/state on a cold start against the loaded cluster.
  (b) bind to browser: with Chromium open on the board, `samples` claim pods of 1 GPU created one at a time after
      the load. Bound = the apiserver's own time of the pods/binding request (its audit log, microseconds). Seen =
      the browser's clock (performance.timeOrigin + performance.now(), the same system clock) when a
      MutationObserver injected before the page's script first finds the pod's `[data-pod]` block. A harness-side
      SSE client records when the patch naming the pod arrived, which splits the delay into the board's part
      (watch, coalescing, patch) and the page's.
  (c) page render: Navigation Timing of the page with 1000 nodes, and the time until `#board[data-version]` first
      becomes non-zero (the first snapshot applied); each SSE handler of the page is wrapped to time how long it
      runs and how long until the next frame after it (one patch applied and painted).
  (d) sizes: the snapshot's bytes (/api/state, and the SSE snapshot), the patches' bytes.

Performance is measured here, never asserted: the smoke pass asserts only that every pod shows up in the board's
state and in the browser.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import os
import pathlib
import shutil
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from bench import checks, contenders, measure, report, workload
from bench.plane import BenchPlane, ProcessStats, build_loadgen, node_bodies
from gpu_scheduling import constants
from gpu_scheduling.kube import paths
from harness import inventory
from harness.controlplane import node_ready
from harness.wait import wait_for

ROOT = pathlib.Path(__file__).resolve().parents[1]
NAMESPACE = "board-bench"
SAMPLE_NAMESPACE = "board-sample"
ZONE_LABEL = constants.DEFAULT_TOPOLOGY_LABELS[0]
APP_LABEL = "board-bench"


@dataclasses.dataclass(frozen=True)
class Settings:
    nodes: int = 1000
    """kwok nodes, 8 GPUs each, spread over `zones` zones."""

    zones: int = 10
    pods: int = 5000
    """Pods of the load: `map_share` of them map pods (StatefulSets), the rest 1-GPU claim pods."""

    map_share: float = 0.2
    map_replicas: int = 100
    """Replicas of every map StatefulSet (the last one takes what is left)."""

    samples: int = 50
    """Claim pods created one at a time after the load, each timed from its bind to the browser."""

    state_runs: int = 5
    """Fresh in-process Boards built from the listed objects (figures: median, min, max)."""

    renders: int = 3
    """Navigations of the page with the whole board (figures: median, min, max)."""

    create_concurrency: int = 64
    timeout: float = 900
    """Seconds the load may take to be bound and shown by the board."""

    sample_timeout: float = 30
    """Seconds one sample pod may take from its create to its block in the browser."""

    smoke: bool = False
    out: pathlib.Path = ROOT / "build" / "bench-board"
    docs: pathlib.Path | None = ROOT / "docs" / "board-benchmark.md"


SMOKE: dict[str, Any] = {
    "nodes": 20,
    "zones": 2,
    "pods": 100,
    "map_replicas": 10,
    "samples": 3,
    "state_runs": 1,
    "renders": 1,
    "timeout": 180,
    "smoke": True,
    "out": ROOT / "build" / "bench-smoke" / "board",
    "docs": None,
}


# ---- the load, as plain objects ---------------------------------------------------------------------------------
def map_sets(count: int, replicas: int, nodes: int, scheduler: str, namespace: str) -> list[dict[str, Any]]:
    """StatefulSets of `count` map pods in all, `replicas` each (Parallel: kwok runs no pods, so none would ever
    be Ready for an ordered roll-out), pod p of them pinned by the map to node p mod `nodes`, one GPU."""
    out = []
    for g, group in enumerate(workload.w1_placements(count, nodes, replicas)):
        name = f"map-{g:03d}"
        pod = workload._pod(namespace, name, scheduler, 1)
        labels = {"app": APP_LABEL, "set": name}
        out.append(
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {
                    "replicas": len(group),
                    "podManagementPolicy": "Parallel",
                    "serviceName": name,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {
                            "labels": labels,
                            "annotations": {constants.MAP_ANNOTATION: workload.gpu_map(group)},
                        },
                        "spec": pod["spec"],
                    },
                },
            }
        )
    return out


def pod_keys_in_state(state: dict[str, Any]) -> set[str]:
    """Every holder pod ("ns/name") the board's snapshot shows on some GPU."""
    return {
        h["pod"]
        for node in (state.get("nodes") or {}).values()
        for gpu in node.get("gpus") or []
        for h in gpu.get("holders") or []
    }


def spread(values: list[float], digits: int = 1) -> dict[str, float] | None:
    """median/min/max of `values`, rounded (None when empty)."""
    if not values:
        return None
    med, lo, hi = measure.spread(values)
    return {"median": round(med, digits), "min": round(lo, digits), "max": round(hi, digits)}


def quantiles(values: list[float], digits: int = 1) -> dict[str, float] | None:
    if not values:
        return None
    return {
        "n": len(values),
        "p50": round(measure.percentile(values, 50), digits),
        "p90": round(measure.percentile(values, 90), digits),
        "max": round(max(values), digits),
    }


# ---- (a) the state, built in this process ----------------------------------------------------------------------
def list_board_objects(api: Any, scheduler: str) -> dict[str, list[dict[str, Any]]]:
    """What the board's informers list, by the board's resource names (one LIST each, as they do)."""
    leases = api.get(paths.leases(constants.LEASE_NAMESPACE), labelSelector=constants.GPU_LEASE_SELECTOR)
    return {
        "nodes": api.get(paths.NODES)["items"],
        "gpunodestatuses": api.get(paths.NODE_STATUSES)["items"],
        "leases": leases["items"],
        "gpuclaims": api.get(paths.ALL_GPU_CLAIMS)["items"],
        "pods": api.get(paths.ALL_PODS, fieldSelector=f"spec.schedulerName={scheduler}")["items"],
        "policies": api.get(paths.SCHEDULING_POLICIES, fieldSelector=f"metadata.name={constants.POLICY_NAME}")["items"],
    }


def _ms(fn: Callable[[], Any]) -> tuple[float, Any]:
    began = time.perf_counter()
    out = fn()
    return (time.perf_counter() - began) * 1000, out


def state_build(objects: dict[str, list[dict[str, Any]]], runs: int, scheduler: str) -> dict[str, Any]:
    """Feed the listed objects to `runs` fresh Boards and time each step (ms; median, min, max)."""
    from gpu_scheduling.board.state import Board

    steps: dict[str, list[float]] = {
        k: [] for k in ("apply_all", "document_cold", "take_changes", "dumps", "document_warm", "one_bind", "patch")
    }
    sizes: dict[str, int] = {}
    pod = next((p for p in objects["pods"] if p["spec"].get("nodeName")), None)
    for _ in range(runs):
        board = Board(scheduler_name=scheduler)

        def apply_all(board: Any = board) -> None:
            for resource, items in objects.items():
                for obj in items:
                    board.apply(resource, "ADDED", obj, None)

        steps["apply_all"].append(_ms(apply_all)[0])
        took, doc = _ms(board.document)  # cold: every node's part is built here
        steps["document_cold"].append(took)
        steps["take_changes"].append(_ms(board.take_changes)[0])
        took, text = _ms(lambda doc=doc: json.dumps(doc, separators=(",", ":")))
        steps["dumps"].append(took)
        sizes["snapshot_bytes"] = len(text.encode())
        steps["document_warm"].append(_ms(board.document)[0])
        if pod is not None:  # one bound pod goes and comes back: what one bind costs the board
            board.apply("pods", "DELETED", pod, pod)
            board.take_changes()

            def one_bind(board: Any = board) -> Any:
                board.apply("pods", "ADDED", pod, None)
                return board.take_changes()

            took, changes = _ms(one_bind)
            steps["one_bind"].append(took)
            took, patch = _ms(lambda board=board, changes=changes: board.patch(changes))
            steps["patch"].append(took)
            sizes["one_node_patch_bytes"] = len(json.dumps(patch, separators=(",", ":")).encode())
    return {
        "objects": {k: len(v) for k, v in objects.items()},
        "ms": {k: spread(v, 2) for k, v in steps.items()},
        **sizes,
        "summary": doc.get("summary"),
    }


def agent_statuses(listed: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """The GpuNodeStatus status every node's inventory agent would write once caught up (no agent runs on kwok
    nodes): the simulated devices with inUseBy from the node's GPU Leases and the map pods bound to it, by the
    agent's own function (agent.inventory.node_status)."""
    from gpu_scheduling.agent.inventory import DEFAULT_SIMULATED, node_status, parse_simulated
    from gpu_scheduling.claims import objects as claim_objects

    leases: dict[str, list[dict[str, Any]]] = {}
    for lease in listed["leases"]:
        record = claim_objects.lease_record(lease)
        if record is not None:
            leases.setdefault(record.node, []).append(lease)
    pods: dict[str, list[dict[str, Any]]] = {}
    for pod in listed["pods"]:
        if pod["spec"].get("nodeName"):
            pods.setdefault(pod["spec"]["nodeName"], []).append(pod)
    devices = parse_simulated(DEFAULT_SIMULATED)
    names = [n["metadata"]["name"] for n in listed["nodes"]]
    return {name: node_status(devices, leases.get(name, ()), pods.get(name, ())) for name in names}


# ---- the harness's own SSE client -------------------------------------------------------------------------------
class EventLog:
    """Reads the board's /api/events in a thread and keeps, per event, (arrival time, type, id, bytes); and for
    every pod key in `want`, when the first patch naming it arrived."""

    def __init__(self, board: Any):
        self.board = board
        self.events: list[tuple[float, str, str, int]] = []
        self.want: set[str] = set()
        self.first_seen: dict[str, float] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="board-sse", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> EventLog:
        self.thread.start()
        return self

    def _run(self) -> None:
        try:
            with self.board.client(timeout=None) as client, client.stream("GET", "/api/events") as resp:
                kind, ident, data = "message", "", []
                for line in resp.iter_lines():
                    if self.stopping.is_set():
                        return
                    if line.startswith("event:"):
                        kind = line[6:].strip()
                    elif line.startswith("id:"):
                        ident = line[3:].strip()
                    elif line.startswith("data:"):
                        data.append(line[5:].lstrip())
                    elif not line and data:
                        self._record(time.time(), kind, ident, "\n".join(data))
                        kind, ident, data = "message", "", []
        except BaseException as exc:  # noqa: BLE001 - kept and reported: the benchmark goes on without it
            if not self.stopping.is_set():
                self.error = exc

    def _record(self, when: float, kind: str, ident: str, data: str) -> None:
        with self.lock:
            self.events.append((when, kind, ident, len(data.encode())))
            for key in self.want:
                if key not in self.first_seen and f'"{key}"' in data:
                    self.first_seen[key] = when

    def watch(self, key: str) -> None:
        with self.lock:
            self.want.add(key)

    def sizes(self, kind: str) -> list[int]:
        with self.lock:
            return [n for _, k, _, n in self.events if k == kind]

    def stop(self) -> None:
        self.stopping.set()


# ---- the browser ------------------------------------------------------------------------------------------------
# Installed before the page's own script on every navigation (Chrome DevTools' addScriptToEvaluateOnNewDocument,
# which the page's Content-Security-Policy does not govern). It wraps the SSE listeners the page adds, to time each
# handler and the next frame after it, and watches the DOM for #board's data-version and for the one pod block the
# harness waits for (`window.__bench.want`).
PROBE = r"""
(() => {
  const b = window.__bench = {versions: [], events: [], seen: {}, want: null, last: null, frames: []};
  requestAnimationFrame(function tick() {
    b.frames.push(performance.now());
    if (b.frames.length < 3) requestAnimationFrame(tick);
  });
  const add = EventTarget.prototype.addEventListener;
  if (window.EventSource) {
    EventSource.prototype.addEventListener = function (type, fn, opts) {
      if (typeof fn !== "function") return add.call(this, type, fn, opts);
      const wrapped = function (e) {
        const t0 = performance.now();
        try { return fn.apply(this, arguments); } finally {
          const rec = {type, bytes: typeof e.data === "string" ? e.data.length : 0, at: t0,
                       handler: performance.now() - t0, frame: null};
          b.events.push(rec);
          requestAnimationFrame(() => setTimeout(() => { rec.frame = performance.now() - t0; }, 0));
        }
      };
      return add.call(this, type, wrapped, opts);
    };
  }
  const look = () => {
    const board = document.getElementById("board");
    const v = board ? board.getAttribute("data-version") : null;
    if (v !== b.last) { b.last = v; b.versions.push([Number(v), performance.now()]); }
    if (b.want && !(b.want in b.seen) &&
        document.querySelector('[data-pod="' + CSS.escape(b.want) + '"]')) {
      b.seen[b.want] = performance.timeOrigin + performance.now();
    }
  };
  new MutationObserver(look).observe(document, {subtree: true, childList: true, attributes: true,
                                               attributeFilter: ["data-version", "data-pod"]});
})();
"""


def _board_version(browser: Any) -> int:
    return int(browser.js("const b = document.getElementById('board'); return b ? Number(b.dataset.version || 0) : 0"))


def render_once(browser: Any, url: str, timeout: float) -> dict[str, Any]:
    """Navigate to the board and wait for its first snapshot applied; the page's own timings (ms since the
    navigation began)."""
    browser.driver.get(url)
    wait_for("the board's first snapshot in the browser", lambda: _board_version(browser) > 0, timeout=timeout)
    time.sleep(1)  # the frame after the snapshot, and a patch or two
    got = browser.js(
        """
        const nav = performance.getEntriesByType("navigation")[0].toJSON();
        const b = window.__bench;
        const first = b.versions.find(([v]) => v > 0);
        const snap = b.events.find((e) => e.type === "snapshot");
        return {nav, firstVersionMs: first ? first[1] : null, snapshot: snap || null, frames: b.frames,
                domElements: document.getElementsByTagName("*").length,
                podBlocks: document.querySelectorAll("[data-pod]").length,
                nodeColumns: document.querySelectorAll("[data-node]:not([data-gpu])").length,
                heapMiB: performance.memory ? performance.memory.usedJSHeapSize / 1048576 : null};
        """
    )
    nav = got["nav"]
    return {
        "response_end_ms": nav["responseEnd"],
        "dom_content_loaded_ms": nav["domContentLoadedEventEnd"],
        "load_ms": nav["loadEventEnd"],
        "page_bytes": nav.get("transferSize") or nav.get("encodedBodySize"),
        "first_snapshot_applied_ms": got["firstVersionMs"],
        "first_frames_ms": got["frames"],
        "snapshot_handler_ms": (got["snapshot"] or {}).get("handler"),
        "snapshot_frame_ms": (got["snapshot"] or {}).get("frame"),
        "snapshot_sse_chars": (got["snapshot"] or {}).get("bytes"),
        "dom_elements": got["domElements"],
        "pod_blocks": got["podBlocks"],
        "node_columns": got["nodeColumns"],
        "js_heap_mib": got["heapMiB"],
    }


def browser_pods(browser: Any) -> set[str]:
    return set(browser.js("return Array.from(document.querySelectorAll('[data-pod]'), (e) => e.dataset.pod)"))


def clock_offset_ms(browser: Any) -> float:
    """The browser's wall clock minus this process's (ms), from a round trip: small, but shown."""
    offsets = []
    for _ in range(5):
        before = time.time()
        there = browser.js("return performance.timeOrigin + performance.now()")
        after = time.time()
        offsets.append(there - (before + after) / 2 * 1000)
    return statistics.median(offsets)


# ---- the run ----------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _stage(name: str, timings: dict[str, float]) -> Iterator[None]:
    print(f"   {name} ...", flush=True)
    began = time.monotonic()
    yield
    timings[name] = round(time.monotonic() - began, 1)
    print(f"   {name}: {timings[name]:.1f}s", flush=True)


def add_nodes(plane: BenchPlane, settings: Settings, timeout: float = 600) -> None:
    """plane.add_nodes, in the board's `zones` zones."""
    plane.create(node_bodies(settings.nodes, settings.zones, ZONE_LABEL), "nodes", concurrency=32)
    wait_for(
        f"{settings.nodes} kwok nodes Ready and untainted",
        lambda: sum(map(node_ready, plane.api.get(paths.NODES)["items"])) == settings.nodes,
        timeout=timeout,
        interval=2,
    )


def board_process(cp: Any, name: str = constants.BOARD_NAME) -> Any:
    """harness/board.py's BoardProcess watching everything, creation off."""
    from harness.board import BoardProcess

    return BoardProcess(cp, name=name, namespaces=[SAMPLE_NAMESPACE], allow_create=False)


def agents_caught_up(board: Any, timeout: float) -> int:
    """Wait until the board flags nothing (every inUseBy in step); the flags left when `timeout` came first."""
    deadline = time.monotonic() + timeout
    with board.client(timeout=60) as client:
        while True:
            flags = int(client.get("/api/state").json()["summary"]["flags"])
            if flags == 0 or time.monotonic() > deadline:
                return flags
            time.sleep(1)


def wait_bound(plane: BenchPlane, tail: measure.AuditTail, count: int, timeout: float, contender: Any) -> None:
    deadline = time.monotonic() + timeout
    while tail.poll() < count:
        plane.cp.check_alive()
        exited = contender.exited()
        if exited:
            raise RuntimeError(exited)
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {tail.bound}/{count} pods bound after {timeout:.0f}s")
        time.sleep(0.5)


def run(settings: Settings, loadgen: pathlib.Path | None = None) -> dict[str, Any]:
    """The whole benchmark on one fresh plane; returns the results (and writes them, with the report)."""
    from harness.browser import Browser

    loadgen = loadgen or build_loadgen(ROOT / "build" / "bench-bin")
    workdir = settings.out / "run"
    shutil.rmtree(workdir, ignore_errors=True)
    plane = BenchPlane(workdir, loadgen)
    contender = contenders.GpuScheduler()
    scheduler = contender.scheduler_name
    map_count = int(settings.pods * settings.map_share)
    claim_count = settings.pods - map_count
    sets = map_sets(map_count, settings.map_replicas, settings.nodes, scheduler, NAMESPACE)
    claims, claim_pods = workload.claim_pods(workload.GPUCLAIM, scheduler, NAMESPACE, [1] * claim_count, "claim")
    expected = {f"{NAMESPACE}/{s['metadata']['name']}-{i}" for s in sets for i in range(s["spec"]["replicas"])}
    expected |= {f"{NAMESPACE}/{p['metadata']['name']}" for p in claim_pods}
    timings: dict[str, float] = {}
    results: dict[str, Any] = {
        "settings": {k: str(v) if isinstance(v, pathlib.Path) else v for k, v in dataclasses.asdict(settings).items()},
        "map_pods": map_count,
        "claim_pods": claim_count,
        "stages_seconds": timings,
    }
    print(
        f"== board: {settings.nodes} nodes x {workload.GPUS_PER_NODE} GPUs, {map_count} map pods in {len(sets)} "
        f"StatefulSets, {claim_count} claim pods",
        flush=True,
    )
    started = time.time()
    results["load_average_before"] = [round(x, 1) for x in os.getloadavg()]
    board: Any = None
    browser: Any = None
    events: EventLog | None = None
    try:
        plane.start()
        with _stage("nodes", timings):
            add_nodes(plane, settings)
        with _stage("scheduler", timings):
            contender.start(plane)
        with _stage("inventory", timings):
            plane.add_inventory(workload.GPUCLAIM, settings.nodes)
        plane.namespace(NAMESPACE)
        plane.namespace(SAMPLE_NAMESPACE)
        with _stage("board start (empty pods)", timings):
            board = board_process(plane.cp).start()
        board_stats = ProcessStats(board.proc.pid)
        cpu0 = board_stats.cpu_seconds()

        # ---- the load, with the board watching
        tail = measure.AuditTail(plane.cp.audit_log, NAMESPACE)
        load_began = time.time()
        with _stage("map pods bound", timings):
            for body in sets:
                plane.api.create(paths.statefulsets(NAMESPACE), body)
            wait_bound(plane, tail, map_count, settings.timeout, contender)
        with _stage("claim pods bound", timings):
            plane.create(claims, "claims")
            plane.create(claim_pods, "pods", concurrency=settings.create_concurrency)
            wait_bound(plane, tail, map_count + claim_count, settings.timeout, contender)
        last_bind = max(t.bound for t in tail.pods.values() if t.bound is not None)
        with board.client(timeout=60) as client, _stage("board shows every pod", timings):

            def caught_up() -> bool:
                return expected <= pod_keys_in_state(client.get("/api/state").json())

            wait_for("every pod of the load on the board", caught_up, timeout=settings.timeout, interval=1)
        caught = time.time()
        results["load"] = {
            "seconds_first_create_to_last_bind": round(last_bind - load_began, 1),
            "board_behind_last_bind_s": round(caught - last_bind, 2),
            "board_cpu_seconds": round(board_stats.cpu_seconds() - cpu0, 1),
        }
        with _stage("agents catch up (every GpuNodeStatus's inUseBy)", timings):
            cpu1 = board_stats.cpu_seconds()
            inventory.publish(plane.cp.kubeconfig, agent_statuses(list_board_objects(plane.api, scheduler)))
            results["agents"] = {"flags_left": agents_caught_up(board, settings.timeout)}
            results["agents"]["board_cpu_seconds"] = round(board_stats.cpu_seconds() - cpu1, 1)

        # ---- (a) the state: from the running process, then in-process
        with board.client(timeout=60) as client:
            state_ms, sizes = [], []
            for _ in range(max(3, settings.state_runs)):
                began = time.perf_counter()
                resp = client.get("/api/state")
                state_ms.append((time.perf_counter() - began) * 1000)
                sizes.append(len(resp.content))
            final = resp.json()
        results["api_state"] = {"ms": spread(state_ms), "bytes": sizes[-1], "summary": final.get("summary")}
        flags: dict[str, int] = {}
        for node in final["nodes"].values():
            for flag in node.get("flags") or []:
                flags[flag["kind"]] = flags.get(flag["kind"], 0) + 1
            for gpu in node.get("gpus") or []:
                for flag in gpu.get("flags") or []:
                    flags[flag["kind"]] = flags.get(flag["kind"], 0) + 1
        results["flags"] = flags
        with _stage("in-process state build", timings):
            objects = list_board_objects(plane.api, scheduler)
            results["state"] = state_build(objects, settings.state_runs, scheduler)
        with _stage("a second board, cold, on the loaded cluster", timings):
            cold_stats, began = None, time.monotonic()
            cold = board_process(plane.cp, "gpu-board-cold")
            try:
                cold.start(timeout=settings.timeout)
                ready = time.monotonic() - began
                cold_stats = ProcessStats(cold.proc.pid)
                with cold.client(timeout=60) as client:
                    first_ms, _ = _ms(lambda: client.get("/api/state"))
                results["cold_start"] = {
                    "readyz_s": round(ready, 2),
                    "first_state_ms": round(first_ms, 1),
                    "cpu_seconds": round(cold_stats.cpu_seconds(), 1),
                    "peak_rss_mib": round(cold_stats.peak_rss_mib(), 1),
                }
            finally:
                cold.stop()

        # ---- (c) the page, in Chromium
        browser = Browser([board.spki_pin], log_path=plane.cp.logs / "chromedriver.log")
        results["browser"] = {
            "chromium": browser.driver.capabilities.get("browserVersion"),
            "chromedriver": (browser.driver.capabilities.get("chrome") or {}).get("chromedriverVersion", "").split()[0],
        }
        browser.driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": PROBE})
        with _stage("page renders", timings):
            renders = [render_once(browser, board.url + "/", settings.timeout) for _ in range(settings.renders)]
        results["render"] = renders
        shown = browser_pods(browser)
        missing_in_browser = sorted(expected - shown)
        results["browser"]["pods_shown"] = len(shown & expected)
        results["browser"]["clock_offset_ms"] = round(clock_offset_ms(browser), 2)
        # what the collapsed groups' heat strips show (a check of the page at this size, kept in results.json)
        results["browser"]["strip_chips"] = browser.js(
            "const n = {}; for (const c of document.querySelectorAll('.chip'))"
            " n[c.className] = (n[c.className] || 0) + 1; return n;"
        )
        if settings.docs is not None or settings.smoke:
            browser.screenshot(settings.out / "board.png")
        if missing_in_browser:
            raise AssertionError(
                f"{len(missing_in_browser)} pods of the load are not in the browser, e.g. {missing_in_browser[:5]}"
            )

        # ---- (b) bind -> browser, one pod at a time
        events = EventLog(board).start()
        wait_for("the harness's SSE snapshot", lambda: events.sizes("snapshot"), timeout=60)
        sample_claims, sample_pods = workload.claim_pods(
            workload.GPUCLAIM, scheduler, SAMPLE_NAMESPACE, [1] * settings.samples, "sample"
        )
        sample_tail = measure.AuditTail(plane.cp.audit_log, SAMPLE_NAMESPACE)
        seen: dict[str, float] = {}
        cpu_before_samples = board_stats.cpu_seconds()
        page_events_before = browser.js("return window.__bench.events.length")
        with _stage("sample pods, one at a time", timings):
            for claim, pod in zip(sample_claims, sample_pods, strict=True):
                key = f"{SAMPLE_NAMESPACE}/{pod['metadata']['name']}"
                events.watch(key)
                browser.js("window.__bench.want = arguments[0]", key)
                plane.api.create(paths.gpu_claims(SAMPLE_NAMESPACE), claim)
                plane.api.create(paths.pods(SAMPLE_NAMESPACE), pod)
                seen[key] = wait_for(
                    f"{key} in the browser",
                    lambda key=key: browser.js("return window.__bench.seen[arguments[0]]", key),
                    timeout=settings.sample_timeout,
                    interval=0.05,
                )
                time.sleep(0.3)  # apart, so that every sample is a patch of its own
        wait_for(
            "every sample's bind in the audit log",
            lambda: sample_tail.poll() >= settings.samples,
            timeout=30,
            interval=0.5,
        )
        sample_cpu = board_stats.cpu_seconds() - cpu_before_samples
        offset = results["browser"]["clock_offset_ms"]
        total, server, page = [], [], []
        for key, seen_ms in seen.items():
            bound = sample_tail.pods[key.split("/", 1)[1]].bound
            assert bound is not None
            seen_s = (seen_ms - offset) / 1000
            total.append((seen_s - bound) * 1000)
            if key in events.first_seen:
                server.append((events.first_seen[key] - bound) * 1000)
                page.append((seen_s - events.first_seen[key]) * 1000)
        patches = browser.js(
            "return window.__bench.events.slice(arguments[0]).filter((e) => e.type === 'patch')", page_events_before
        )
        results["bind_to_browser"] = {
            "ms": quantiles(total),
            "bind_to_sse_patch_ms": quantiles(server),
            "sse_patch_to_dom_ms": quantiles(page),
            "board_cpu_seconds": round(sample_cpu, 2),
        }
        results["patch"] = {
            "handler_ms": quantiles([p["handler"] for p in patches], 2),
            "frame_ms": quantiles([p["frame"] for p in patches if p["frame"] is not None], 2),
            "sse_bytes": quantiles([float(n) for n in events.sizes("patch")], 0),
        }
        results["sse"] = {"snapshot_bytes": events.sizes("snapshot")[0], "patches": len(events.sizes("patch"))}
        results["board_process"] = {
            "cpu_seconds": round(board_stats.cpu_seconds(), 1),
            "peak_rss_mib": round(board_stats.peak_rss_mib(), 1),
        }
        results["browser"]["console_errors"] = browser.console_errors()
        if events.error is not None:
            results["sse"]["error"] = repr(events.error)
    finally:
        if events is not None:
            events.stop()
        if browser is not None:
            browser.close()
        if board is not None:
            board.stop()
        contender.stop()
        plane.stop()
    results["seconds"] = round(time.time() - started)
    results["load_average_after"] = [round(x, 1) for x in os.getloadavg()]
    results["started"] = started
    results["machine"] = report.machine()
    results["machine"]["selenium"] = _selenium_version()
    write(results, settings)
    problems = checks.board_flags(results["flags"], results["agents"]["flags_left"])
    if problems:
        raise SystemExit("the board is not in step with the cluster: " + "; ".join(problems))
    return results


def _selenium_version() -> str:
    import selenium

    return str(selenium.__version__)


# ---- the report -------------------------------------------------------------------------------------------------
def _q(q: dict[str, Any] | None, unit: str = "ms") -> str:
    if not q:
        return "n/a"
    return f"p50 {q['p50']:g} {unit}, p90 {q['p90']:g} {unit}, max {q['max']:g} {unit} (n = {q['n']})"


def _s(s: dict[str, Any] | None, unit: str = "ms") -> str:
    if not s:
        return "n/a"
    return f"{s['median']:g} {unit} ({s['min']:g}–{s['max']:g})"


def _loads(results: dict[str, Any], key: str) -> str:
    return " / ".join(f"{x:g}" for x in results.get(key) or []) or "n/a"


def _kib(n: float | None) -> str:
    return "n/a" if n is None else f"{n / 1024:,.1f} KiB"


def _figures(results: dict[str, Any]) -> str:
    """The report's table: (a) state, (b) bind to browser, (c) page, (d) sizes."""
    s, st, ms = results["settings"], results["state"], results["state"]["ms"]
    bb, cold, proc, patch = (
        results["bind_to_browser"],
        results["cold_start"],
        results["board_process"],
        results["patch"],
    )
    renders = results["render"]

    def nav(key: str) -> str:
        return _s(spread([x[key] for x in renders if x.get(key) is not None]))

    last = renders[-1]
    rows = [
        (
            "(a) objects listed (what the board's informers hold)",
            ", ".join(f"{k} {n}" for k, n in st["objects"].items()),
        ),
        ("(a) `Board.apply` of every listed object (fresh Board, in-process)", _s(ms["apply_all"])),
        ("(a) `document()` cold (fresh Board: every node's part built)", _s(ms["document_cold"])),
        ("(a) then `take_changes()` (the first version)", _s(ms["take_changes"])),
        ("(a) `json.dumps` of that snapshot", _s(ms["dumps"])),
        ("(a) `document()` warm (nothing changed)", _s(ms["document_warm"])),
        (
            "(a) one bind: `apply()` of the bound pod and `take_changes()` / then its `patch()`",
            f"{_s(ms['one_bind'])} / {_s(ms['patch'])}",
        ),
        ("(a) `GET /api/state` from the running board (harness on the same machine)", _s(results["api_state"]["ms"])),
        (
            "(a) a second board started cold on the loaded cluster: /readyz, then its first /api/state",
            (
                f"{cold['readyz_s']:g} s, {cold['first_state_ms']:g} ms (CPU {cold['cpu_seconds']:g} s, "
                f"peak RSS {cold['peak_rss_mib']:g} MiB)"
            ),
        ),
        (
            "(a) the board process over the whole run: CPU, peak RSS",
            f"{proc['cpu_seconds']:g} s, {proc['peak_rss_mib']:g} MiB",
        ),
        (f"(b) bind (apiserver audit) → pod block in Chromium's DOM, {s['samples']} pods one at a time", _q(bb["ms"])),
        ("(b) of which bind → the SSE patch naming it (harness client)", _q(bb["bind_to_sse_patch_ms"])),
        (
            "(b) of which SSE patch → DOM (the page's part and the browser's SSE delivery)",
            _q(bb["sse_patch_to_dom_ms"]),
        ),
        (
            "(c) navigation → response end / DOMContentLoaded / load",
            f"{nav('response_end_ms')} / {nav('dom_content_loaded_ms')} / {nav('load_ms')}",
        ),
        ("(c) navigation → first snapshot applied (`#board[data-version]` > 0)", nav("first_snapshot_applied_ms")),
        (
            "(c) the page's snapshot handler / until the next frame after it",
            f"{nav('snapshot_handler_ms')} / {nav('snapshot_frame_ms')}",
        ),
        (
            "(c) one patch applied: handler / until the next frame",
            f"{_q(patch['handler_ms'])} / {_q(patch['frame_ms'])}",
        ),
        (
            "(c) the page with the whole board: DOM elements, pod blocks, JS heap",
            f"{last['dom_elements']:,}, {last['pod_blocks']:,}, {last['js_heap_mib'] or 0:.0f} MiB",
        ),
        (
            "(d) snapshot: /api/state, SSE `snapshot` event, in-process compact JSON",
            (
                f"{_kib(results['api_state']['bytes'])}, {_kib(results['sse']['snapshot_bytes'])}, "
                f"{_kib(st.get('snapshot_bytes'))}"
            ),
        ),
        (
            "(d) patch: one bound pod (in-process), SSE `patch` events during the samples",
            f"{_kib(st.get('one_node_patch_bytes'))}, {_q(patch['sse_bytes'], 'B')}",
        ),
    ]
    return "\n".join(["| what | measured |", "|---|---|", *(f"| {what} | {value} |" for what, value in rows)])


def render(results: dict[str, Any], assets: str) -> str:
    s, m = results["settings"], results["machine"]
    v, b = m["versions"], results["browser"]
    when = datetime.datetime.fromtimestamp(results["started"], datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    summary = results["api_state"]["summary"] or {}
    flags = ", ".join(f"{k} {n}" for k, n in sorted(results["flags"].items())) or "none"
    stages = ", ".join(f"{k} {v:g} s" for k, v in results["stages_seconds"].items())
    command = "python -m bench --board" + (" --smoke" if s["smoke"] else "")
    took = f"{results['seconds'] // 60} min {results['seconds'] % 60} s"
    return f"""# Board benchmark

Generated by `{command}` ({when}, {took}); do not edit by hand, rerun it. Raw results:
[`results.json`]({assets}/results.json); what the browser showed: [`board.png`]({assets}/board.png). How each
figure is taken: the docstring of `bench/board.py`.

## Machine

{m["cpus"]} CPUs ({m["cpu_model"]}), {m["memory_gib"]} GiB memory, Linux {m["kernel"]}, Python {m["python"]}.
Kubernetes {v.get("kubernetes_version")}, etcd {v.get("etcd_version")}, kwok {v.get("kwok_version")}; Chromium
{b["chromium"]} (headless, Debian's), chromedriver {b["chromedriver"]}, Selenium {m["selenium"]}. Everything
(etcd, apiserver, controller manager, kwok, gpu-scheduler and its webhook, gpu-board, Chromium, the harness)
shares these {m["cpus"]} CPUs, and other work on the machine counts too: its load average (1, 5, 15 min) was
{_loads(results, "load_average_before")} when the run began and {_loads(results, "load_average_after")} when it
ended.

## Set-up

- {s["nodes"]} kwok nodes × 8 GPUs in {s["zones"]} zones (`{ZONE_LABEL}`), the simulated GpuNodeStatus of every
  node (nothing in use: no inventory agent runs on kwok nodes), gpu-scheduler with its webhook, gpu-board over
  TLS watching it all (as deployed: nodes, GpuNodeStatuses, the scheduler's pods, GpuClaims, GPU Leases, the
  policy).
- The load, with the board watching: {results["map_pods"]} map pods from StatefulSets of {s["map_replicas"]}
  (Parallel, a `{constants.MAP_ANNOTATION}` in the pod template, one GPU each), then {results["claim_pods"]} claim
  pods of 1 GPU, each with its GpuClaim, created with {s["create_concurrency"]} requests in flight. First create
  to last bind: {results["load"]["seconds_first_create_to_last_bind"]:g} s; the board's /api/state showed every
  pod {results["load"]["board_behind_last_bind_s"]:g} s after the last bind (polled every second). Board CPU
  during the load: {results["load"]["board_cpu_seconds"]:g} s.
- Then every node's GpuNodeStatus rewritten as its inventory agent would once caught up (`inUseBy` from the
  Leases and map pods, `agent.inventory.node_status`), {s["nodes"]} writes: the board flagged
  {results["agents"]["flags_left"]} GPUs once it had them (`in-use-by-out-of-step` before: every held GPU);
  board CPU for those updates: {results["agents"]["board_cpu_seconds"]:g} s.
- Final state: {summary.get("nodes")} nodes, {summary.get("gpus")} GPUs, {summary.get("allocated")} allocated,
  {summary.get("pending")} pending; flags: {flags}.
- Stages of the run: {stages}.

## Figures

{_figures(results)}

Timings in ms are median (min–max) over {s["state_runs"]} fresh Boards and {s["renders"]} navigations, or
quantiles over the samples. The browser's clock and the harness's differ by {b["clock_offset_ms"]:g} ms (a
round-trip estimate, subtracted). The bind → browser delay includes the board's coalescing window (patches at
most every 0.25 s by default) and, on this machine, whatever the other processes were doing.
Console errors in the page: {len(b["console_errors"])}.

## Reproduce

```
make bench-toolchain browser          # the control-plane binaries, Debian's chromium and chromedriver
.venv/bin/python -m bench --board     # this report: {s["nodes"]} nodes, {s["pods"]} pods, {s["samples"]} samples
.venv/bin/python -m bench --board --smoke   # 20 nodes, 100 pods: checks only that every pod is shown
.venv/bin/python -m bench --board --nodes 200 --pods 1000 --out /tmp/board --docs /tmp/board/report.md
```
"""


def write(results: dict[str, Any], settings: Settings) -> None:
    out = settings.out
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    docs = settings.docs
    assets = out if docs is None else docs.parent / docs.stem
    if docs is not None:
        assets.mkdir(parents=True, exist_ok=True)
        for name in ("results.json", "board.png"):
            if (out / name).exists():
                shutil.copyfile(out / name, assets / name)
    target = docs if docs is not None else out / "board-benchmark.md"
    target.write_text(render(results, os.path.relpath(assets, target.parent)))
    print(f"wrote {target}", flush=True)


def main(
    *,
    smoke: bool = False,
    nodes: int | None = None,
    pods: int | None = None,
    out: pathlib.Path | None = None,
    docs: pathlib.Path | None = None,
    loadgen: pathlib.Path | None = None,
) -> dict[str, Any]:
    overrides: dict[str, Any] = dict(SMOKE) if smoke else {}
    given = {"nodes": nodes, "pods": pods, "out": out, "docs": docs}
    overrides.update({key: value for key, value in given.items() if value is not None})
    settings = Settings(**overrides)
    if settings.pods + settings.samples > settings.nodes * workload.GPUS_PER_NODE:
        raise SystemExit(
            f"{settings.pods} pods and {settings.samples} samples of 1 GPU need more than "
            f"{settings.nodes} nodes x {workload.GPUS_PER_NODE} GPUs"
        )
    return run(settings, loadgen)
