"""Run the benchmark: every (workload, contender, repetition) on its own fresh control plane, then the webhook
measurements, then the report.

    python -m bench                      # the full run `make bench` does (writes docs/benchmarks.md)
    python -m bench --smoke              # a few nodes and pods, one repetition, into build/bench-smoke; then the
                                         # board's smoke pass (bench/board.py)
    python -m bench --board              # only the board's benchmark (writes docs/board-benchmark.md)

Workloads: w1 (map-pinned pods), w2 (GPU claims), w3 (gangs of 2, 4 and 8 members of a whole node each), w4 (w1's
pods with a zone topology spread constraint: what judging it costs), storm (claim pods waiting for GPUs that are all
taken: what the waiting costs the apiserver and the scheduler once every pod has been tried).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench import board, checks, contenders, gangproof, measure, report, state, workload
from bench.plane import SCHEDULER_USER, BenchPlane, build_loadgen
from gpu_scheduling import constants
from gpu_scheduling.kube import paths

ROOT = pathlib.Path(__file__).resolve().parents[1]
NAMESPACE = "bench"
FILL_NAMESPACE = "bench-fill"
WORKLOADS = ("w1", "w2", "w3", "w4", "storm")


@dataclasses.dataclass(frozen=True)
class Settings:
    nodes: int = 1000
    """Fake kwok nodes, 8 GPUs each."""

    pods: int = 5000
    """W1 and W4 pods (and W2 claims) per run."""

    group_size: int = 100
    """W1 (and W4) pods sharing one map, like the replicas of one StatefulSet."""

    w2_fill: float = 0.9
    """The share of all GPUs that the W2 claims ask for (workload.w2_sizes)."""

    w3_fill: float = 0.9
    """The share of the nodes that the W3 gangs' members ask for, one whole node each (workload.w3_sizes)."""

    reps: int = 3
    """Repetitions of every (workload, contender)."""

    workloads: tuple[str, ...] = WORKLOADS
    contenders: tuple[str, ...] = contenders.DEFAULT

    create_concurrency: int = 64
    """Create requests the load generator keeps in flight ("as fast as possible"); W4's maxSkew leaves room for the
    pods of one zone among them (workload.w4_max_skew)."""

    timeout: float = 900
    """Seconds a run may take to bind every pod before it is recorded as incomplete."""

    webhook_seconds: float = 20
    """Duration of each fixed-rate webhook measurement."""

    webhook_rates: tuple[int, ...] = (50, 200)
    create_latency_pods: int = 1000
    """Pods created at 50/s with and without the webhook, for the pod-create latency."""

    storm_pods: int = 5000
    """Claim pods of 1 GPU that wait in the storm, after one 8-GPU pod per node has taken every GPU."""

    storm_seconds: float = 180
    """The storm's measuring window, once every waiting pod has been tried."""

    storm_baseline_seconds: float = 60
    """A window before the waiting pods arrive (every GPU taken, nothing waiting): the plane's own cost."""

    writes_settle_seconds: float = 3
    """After the last bind, a run's write count is read once the scheduler has written nothing for this long
    (its claim status and event writes follow the binding)."""

    profile: bool = False
    """Record py-spy flame graphs of the contender's Python processes during the timed window."""

    out: pathlib.Path = ROOT / "build" / "bench"
    docs: pathlib.Path | None = ROOT / "docs" / "benchmarks.md"


SMOKE: dict[str, Any] = {
    # At most half of the GPUs asked for, so that every W2 pod fits whatever order a contender places them in:
    # while a pod of g <= 4 GPUs waits, the others hold at most 40 - g of the 80 GPUs, so some node has at least 5
    # free. At 90 % kube-scheduler (which spreads, LeastAllocated) could fragment the nodes and leave a 4-GPU pod
    # unschedulable, a finding of the full benchmark but a false failure of a run that checks every pod is bound.
    "nodes": 10,
    "w2_fill": 0.5,
    "pods": 40,
    "group_size": 10,
    "reps": 1,
    "webhook_seconds": 2,
    "create_latency_pods": 20,
    "timeout": 120,
    "storm_pods": 40,
    "storm_seconds": 5,
    "storm_baseline_seconds": 3,
    "writes_settle_seconds": 1,
    "out": ROOT / "build" / "bench-smoke",
    "docs": None,
}


def _snapshot(stats: dict[str, Any]) -> dict[str, float]:
    return {name: s.cpu_seconds() for name, s in stats.items()}


def run_one(settings: Settings, loadgen: pathlib.Path, wl: str, name: str, rep: int) -> dict[str, Any]:
    workdir = settings.out / "runs" / f"{wl}-{name}-{rep}"
    shutil.rmtree(workdir, ignore_errors=True)
    plane = BenchPlane(workdir, loadgen, profiling=settings.profile)
    contender = contenders.BY_NAME[name]()
    size = (
        f"{len(workload.w3_sizes(settings.nodes, settings.w3_fill))} gangs" if wl == "w3" else f"{settings.pods} pods"
    )
    print(f"== {wl} {name} repetition {rep}: {settings.nodes} nodes, {size}", flush=True)
    began = time.monotonic()
    try:
        plane.start()
        node_seconds = plane.add_nodes(settings.nodes)
        contender.start(plane)
        plane.namespace(NAMESPACE)
        if wl == "w1":
            claims: list[dict[str, Any]] = []
            pods = workload.w1_pods(
                contender.scheduler_name,
                NAMESPACE,
                settings.pods,
                settings.nodes,
                settings.group_size,
                cuda_env=contender.cuda_env_in_pods,
            )
            gpus = len(pods)
        elif wl == "w4":
            claims = []
            pods = workload.w4_pods(
                contender.scheduler_name,
                NAMESPACE,
                settings.pods,
                settings.nodes,
                settings.group_size,
                _max_skew(settings),
                cuda_env=contender.cuda_env_in_pods,
            )
            gpus = len(pods)
        elif wl == "w3":
            gang_sizes = workload.w3_sizes(settings.nodes, settings.w3_fill)
            plane.add_inventory(contender.claim_api, settings.nodes)
            if contender.claim_api == workload.EXTENDED:
                plane.check_gang_api()
            # The gangs' GpuClaims or PodGroups, created before the timed window like W2's claims.
            claims, pods = workload.gang_pods(contender.claim_api, contender.scheduler_name, NAMESPACE, gang_sizes)
            gpus = len(pods) * workload.GPUS_PER_NODE
        else:
            sizes = workload.w2_sizes(settings.pods, settings.nodes, settings.w2_fill)
            plane.add_inventory(contender.claim_api, settings.nodes)
            claims, pods = workload.claim_pods(contender.claim_api, contender.scheduler_name, NAMESPACE, sizes)
            gpus = sum(sizes)
        if claims:  # before the timed window, like the inventory: every contender is timed on its pods alone
            plane.create(claims, "claims")
        tail = measure.AuditTail(plane.cp.audit_log, NAMESPACE)
        tail.poll()
        watched = {
            "kube-apiserver": plane.stats("kube-apiserver"),
            "etcd": plane.stats("etcd"),
            **contender.processes(),
        }
        cpu_before = _snapshot(watched)
        profilers = _start_profilers(contender, workdir) if settings.profile else []
        apiserver = ApiserverAccount(plane, workdir) if settings.profile else None
        with ThreadPoolExecutor(1) as pool:
            creating = pool.submit(plane.create, pods, "pods", concurrency=settings.create_concurrency)
            deadline = time.monotonic() + settings.timeout
            exited = None
            while tail.poll() < len(pods) and time.monotonic() < deadline:
                plane.cp.check_alive()
                exited = contender.exited()
                if exited or (creating.done() and creating.exception() is not None):
                    break
                time.sleep(0.2)
            creating.result()  # a failed create fails the run
        if exited:
            print(f"   {exited}", flush=True)
        cpu = {k: v - cpu_before[k] for k, v in _snapshot(watched).items()}
        _stop_profilers(profilers)
        if apiserver is not None:
            apiserver.finish()
        rss = {k: s.peak_rss_mib() for k, s in watched.items()}
        tail.poll()
        figs = measure.figures(tail.pods, tail.failed_binds)
        gang_figs = measure.gang_figures(tail.pods, _gangs(pods)) if wl == "w3" else None
        writes = _settled_writes(plane, settings.writes_settle_seconds)
        phases = _gang_phases(plane, tail, writes, _gangs(pods)) if wl == "w3" else None
        first_create = min(t.received for t in tail.pods.values())
        scheduler_writes = writes.counts(SCHEDULER_USER, since=first_create)
        claims_done = _claims_done(plane, contender.claim_api) if claims else None
        problems = _problems(plane, settings, wl, contender.claim_api, writes)
        spread = _spread(plane, settings) if wl == "w4" else None
        # After the window (its writes are counted already), on the same plane: does this scheduler gang at all?
        proof = gangproof.prove(plane.api, contender.claim_api, contender.scheduler_name) if wl == "w3" else None
        if proof is not None:
            problems += proof.problems
    finally:
        contender.stop()
        plane.stop()
    result = {
        "workload": wl,
        "contender": name,
        "rep": rep,
        "nodes": settings.nodes,
        "wall_seconds": round(time.monotonic() - began),
        "node_setup_seconds": round(node_seconds, 1),
        "cpu_seconds": cpu,
        "peak_rss_mib": rss,
        "contender_exited": exited,
        "gpus_requested": gpus,
        "claims_done": claims_done,
        "scheduler_writes": scheduler_writes,
        "writes_per_pod": measure.per_pod(scheduler_writes, len(pods)),
        "problems": problems,
        **dataclasses.asdict(figs),
    }
    if gang_figs is not None:
        result["gangs"] = dataclasses.asdict(gang_figs)
    if phases is not None:
        result["gang_phases"] = dataclasses.asdict(phases)
    if proof is not None:
        result["gang_proof"] = dataclasses.asdict(proof)
    if spread is not None:
        result["spread"] = {**spread, "refusals_written": scheduler_writes.get("patch pods/status", 0)}
    result["curve"] = _thin(result["curve"], 600)
    if spread is not None:
        print(
            f"   maxSkew {spread['max_skew']}: pods per zone {spread['zones']}; "
            f"{result['spread']['refusals_written']} refusals written (PodScheduled=False)",
            flush=True,
        )
    if gang_figs is not None:
        print(
            f"   {gang_figs.placed}/{gang_figs.gangs} gangs placed in {gang_figs.seconds:.1f}s: "
            f"{gang_figs.gangs_per_second:.2f} gangs/s, last member created -> gang bound p50 "
            f"{gang_figs.gang_p50_ms:.0f} ms, p99 {gang_figs.gang_p99_ms:.0f} ms",
            flush=True,
        )
    if phases is not None:
        print(
            f"   per gang (p50): last member created -> commit {phases.to_commit_p50_ms:.0f} ms, locking "
            f"{phases.locking_p50_ms:.0f} ms, binding {phases.binding_p50_ms:.0f} ms",
            flush=True,
        )
    if proof is not None:
        print(f"   gang proof: {report.proof_sentence(result['gang_proof'])}", flush=True)
    print(
        f"   {figs.bound}/{figs.pods} bound in {figs.seconds:.1f}s: {figs.throughput:.1f} pods/s, "
        f"p50 {figs.latency_p50_ms:.0f} ms, p99 {figs.latency_p99_ms:.0f} ms; scheduler CPU "
        f"{cpu.get('scheduler', 0):.1f}s, RSS {rss.get('scheduler', 0):.0f} MiB; apiserver CPU "
        f"{cpu['kube-apiserver']:.1f}s; scheduler writes per pod {result['writes_per_pod']['total']:.2f}"
        + ("" if claims_done is None else f"; {claims_done}/{len(claims)} {_done_what(claims)}"),
        flush=True,
    )
    return result


def _max_skew(settings: Settings) -> int:
    """W4's maxSkew at these settings (workload.w4_max_skew)."""
    return workload.w4_max_skew(settings.pods, settings.nodes, settings.create_concurrency)


def _spread(plane: BenchPlane, settings: Settings) -> dict[str, Any]:
    """W4: its maxSkew and the bound pods per zone at the end (every zone, the empty ones too)."""
    zone_of = workload.node_zones(settings.nodes)
    counts = dict.fromkeys(sorted(set(zone_of.values())), 0)
    for pod in plane.api.get(paths.pods(NAMESPACE))["items"]:
        if node := pod["spec"].get("nodeName"):
            counts[zone_of[node]] += 1
    return {"max_skew": _max_skew(settings), "zones": counts}


def _gangs(pods: list[dict[str, Any]]) -> dict[str, list[str]]:
    """The W3 gangs' members by gang, from the pods' names (workload.gang_of)."""
    out: dict[str, list[str]] = {}
    for pod in pods:
        name = pod["metadata"]["name"]
        gang = workload.gang_of(name)
        if gang is not None:
            out.setdefault(gang, []).append(name)
    return out


def _problems(
    plane: BenchPlane, settings: Settings, wl: str, api: workload.ClaimApi, writes: measure.WriteTail
) -> list[str]:
    """What the run got wrong (bench/checks.py): W1 and W4 pods off their mapped node, W4's zones skewed beyond its
    maxSkew, W2 GPUs held twice, W3 gangs partly bound at the end (either scheduler) or on the way (gpu-scheduler's,
    from the audit log `writes` read after every bind: the apiserver writes that log one event at a time in the
    order requests complete, so it holds every Lease create answered before a bind was sent) or members without a
    whole node's GPUs. (W3's proof that the scheduler gangs at all comes after: gangproof.)"""
    listed = plane.api.get(paths.pods(NAMESPACE))["items"]
    if wl == "w1":
        return checks.misplaced(listed, checks.w1_mapped(settings.pods, settings.nodes, settings.group_size))
    if wl == "w4":
        mapped = checks.w1_mapped(settings.pods, settings.nodes, settings.group_size, workload.W4_PREFIX)
        return checks.misplaced(listed, mapped, "W4") + checks.spread(
            listed, workload.node_zones(settings.nodes), _max_skew(settings)
        )
    if wl == "w3":
        whole = (
            checks.gangs_whole(
                listed,
                writes.created("create leases", constants.LEASE_NAMESPACE),
                writes.created("create pods/binding", NAMESPACE),
            )
            if api == workload.GPUCLAIM
            else checks.partly_bound(listed)  # kube-scheduler writes nothing before it binds (checks.gangs_whole)
        )
        return whole + checks.member_gpus(listed, api)
    resource_claims = (
        plane.api.get(workload.dra_path("resourceclaims", NAMESPACE))["items"] if api == workload.DRA else []
    )
    return checks.held_twice(listed, api, resource_claims)


def _gang_phases(
    plane: BenchPlane, tail: measure.AuditTail, writes: measure.WriteTail, gangs: dict[str, list[str]]
) -> measure.GangPhases:
    """W3: where each gang's wait went (measure.gang_phases), from the audit log read after every bind: the bound
    members' GPU Leases (named by their node and GPU ids: none for kube-scheduler's pods) and bindings."""
    created = writes.created("create leases", constants.LEASE_NAMESPACE)
    leases = {
        p["metadata"]["name"]: [created[lease] for lease in workload.member_leases(p) if lease in created]
        for p in plane.api.get(paths.pods(NAMESPACE))["items"]
        if p["spec"].get("nodeName")
    }
    return measure.gang_phases(tail.pods, gangs, leases, writes.created("create pods/binding", NAMESPACE))


def _done_what(objs: list[dict[str, Any]]) -> str:
    """What `_claims_done` counted, in words."""
    return "PodGroups scheduled" if objs[0]["kind"] == constants.POD_GROUP_KIND else "claims allocated to their pod"


def _claims_done(plane: BenchPlane, api: workload.ClaimApi) -> int:
    """Claims the scheduler finished with: a GpuClaim in phase Bound, a ResourceClaim allocated and reserved for
    its pod (what kube-scheduler writes before it binds); for W3's PodGroups (`extended`), those kube-scheduler
    marked scheduled (workload.POD_GROUP_SCHEDULED True)."""
    if api == workload.GPUCLAIM:
        items = plane.api.get(paths.gpu_claims(NAMESPACE))["items"]
        return sum((c.get("status") or {}).get("phase") == "Bound" for c in items)
    if api == workload.EXTENDED:
        items = plane.api.get(paths.pod_groups(NAMESPACE))["items"]
        return sum(
            any(
                c.get("type") == workload.POD_GROUP_SCHEDULED and c.get("status") == "True"
                for c in (g.get("status") or {}).get("conditions") or []
            )
            for g in items
        )
    items = plane.api.get(workload.dra_path("resourceclaims", NAMESPACE))["items"]
    return sum(
        bool((c.get("status") or {}).get("allocation"))
        and [r.get("name") for r in c["status"].get("reservedFor") or []] == [c["metadata"]["name"]]
        for c in items
    )


def _settled_writes(plane: BenchPlane, quiet: float, timeout: float = 60) -> measure.WriteTail:
    """Every write in the audit log so far, read once SCHEDULER_USER has written nothing for `quiet` seconds
    (but for Lease updates: a leader renews its Lease every few seconds for as long as it runs)."""
    writes = measure.WriteTail(plane.cp.audit_log)
    last, still_since, deadline = -1, time.monotonic(), time.monotonic() + timeout
    while time.monotonic() < deadline:
        writes.poll()
        mine = sum(n for k, n in writes.counts(SCHEDULER_USER).items() if k != "update leases")
        if mine != last:
            last, still_since = mine, time.monotonic()
        elif time.monotonic() - still_since >= quiet:
            break
        time.sleep(0.25)
    return writes


class RunAborted(RuntimeError):
    """A storm cannot go on: the contender's scheduler (or webhook) exited, or the fill was never bound."""


def _check(plane: BenchPlane, contender: contenders.Contender) -> None:
    plane.cp.check_alive()
    exited = contender.exited()
    if exited:
        raise RunAborted(exited)


def _wait_bound(
    plane: BenchPlane, contender: contenders.Contender, tail: measure.AuditTail, pods: int, timeout: float
) -> bool:
    """Wait until `pods` pods of the tail's namespace are bound; False when `timeout` came first."""
    deadline = time.monotonic() + timeout
    while tail.poll() < pods:
        _check(plane, contender)
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def _window(
    plane: BenchPlane,
    contender: contenders.Contender,
    watched: dict[str, Any],
    writes: measure.WriteTail,
    seconds: float,
) -> dict[str, Any]:
    """CPU-seconds per second of every watched process and write requests per minute (the scheduler's, and
    everyone's) over `seconds` from now."""
    cpu_before, started = _snapshot(watched), time.time()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        _check(plane, contender)
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
    ended = time.time()
    cpu = {k: v - cpu_before[k] for k, v in _snapshot(watched).items()}
    time.sleep(1)  # the audit log is written in batches, off the request path
    writes.poll()
    elapsed = ended - started
    mine = writes.counts(SCHEDULER_USER, since=started, until=ended)
    everyone = writes.counts(None, since=started, until=ended)
    return {
        "seconds": round(elapsed, 1),
        "cpu_per_second": {k: round(v / elapsed, 4) for k, v in cpu.items()},
        "scheduler_writes_per_minute": round(sum(mine.values()) * 60 / elapsed, 1),
        "all_writes_per_minute": round(sum(everyone.values()) * 60 / elapsed, 1),
        "scheduler_writes": mine,
        "all_writes": everyone,
    }


def run_storm(settings: Settings, loadgen: pathlib.Path, name: str, rep: int) -> dict[str, Any]:
    """Every GPU taken by one 8-GPU claim pod per node, then `storm_pods` 1-GPU claim pods that must wait. Once
    every waiting pod has been tried (PodScheduled=False), what the waiting costs over `storm_seconds`."""
    workdir = settings.out / "runs" / f"storm-{name}-{rep}"
    shutil.rmtree(workdir, ignore_errors=True)
    plane = BenchPlane(workdir, loadgen, profiling=settings.profile)
    contender = contenders.BY_NAME[name]()
    print(
        f"== storm {name} repetition {rep}: {settings.nodes} nodes full, {settings.storm_pods} pods waiting", flush=True
    )
    fill_sizes, storm_sizes = workload.storm_sizes(settings.nodes, settings.storm_pods)
    api, scheduler = contender.claim_api, contender.scheduler_name
    fill_claims, fill_pods = workload.claim_pods(api, scheduler, FILL_NAMESPACE, fill_sizes, prefix="fill")
    claims, pods = workload.claim_pods(api, scheduler, NAMESPACE, storm_sizes, prefix="storm")
    result: dict[str, Any] = {
        "workload": "storm",
        "contender": name,
        "rep": rep,
        "nodes": settings.nodes,
        "pods": len(pods),
        "fill_pods": len(fill_pods),
        "fill_bound": 0,
        "first_pass_complete": False,
        "untried_after_timeout": len(pods),
        "first_pass_seconds": None,
        "bound": 0,
        "peak_rss_mib": {},
        "baseline": None,
        "storm": None,
        "failure": None,
    }
    began = time.monotonic()
    try:
        plane.start()
        plane.add_nodes(settings.nodes)
        contender.start(plane)
        plane.add_inventory(api, settings.nodes)
        plane.namespace(FILL_NAMESPACE)
        plane.namespace(NAMESPACE)
        plane.create(fill_claims, "fill-claims")
        fill = measure.AuditTail(plane.cp.audit_log, FILL_NAMESPACE)
        plane.create(fill_pods, "fill-pods", concurrency=settings.create_concurrency)
        filled = _wait_bound(plane, contender, fill, len(fill_pods), settings.timeout)
        result["fill_bound"] = fill.bound
        if not filled:
            raise RunAborted(f"the fill bound only {fill.bound}/{len(fill_pods)} pods in {settings.timeout:.0f}s")
        _settled_writes(plane, settings.writes_settle_seconds)
        watched = {
            "kube-apiserver": plane.stats("kube-apiserver"),
            "etcd": plane.stats("etcd"),
            **contender.processes(),
        }
        writes = measure.WriteTail(plane.cp.audit_log)
        result["baseline"] = _window(plane, contender, watched, writes, settings.storm_baseline_seconds)
        plane.create(claims, "claims")
        started = time.monotonic()
        plane.create(pods, "pods", concurrency=settings.create_concurrency)
        deadline, waiting = started + settings.timeout, len(pods)
        while waiting and time.monotonic() < deadline:
            _check(plane, contender)
            time.sleep(2 if len(pods) < 1000 else 5)  # listing thousands of pods costs the apiserver too
            listed = plane.api.get(paths.pods(NAMESPACE))["items"]
            if bound := checks.storm_bound(listed):  # it would never be tried: its GPU is someone else's
                raise RunAborted("; ".join(bound))
            waiting = len(pods) - sum(measure.tried(p) for p in listed)
        result.update(
            first_pass_complete=waiting == 0,
            untried_after_timeout=waiting,
            first_pass_seconds=round(time.monotonic() - started, 1),
        )
        profilers = _start_profilers(contender, workdir) if settings.profile else []
        apiserver = ApiserverAccount(plane, workdir) if settings.profile else None
        try:
            result["storm"] = _window(plane, contender, watched, writes, settings.storm_seconds)
        finally:
            _stop_profilers(profilers)
            if apiserver is not None:
                apiserver.finish()
        listed = plane.api.get(paths.pods(NAMESPACE))["items"]
        result["bound"] = sum(bool(p["spec"].get("nodeName")) for p in listed)
        if bound := checks.storm_bound(listed):
            raise RunAborted("; ".join(bound))
        result["peak_rss_mib"] = {k: s.peak_rss_mib() for k, s in watched.items()}
        if name.startswith("gpu-scheduler"):
            result["state"] = state.measure(plane.cp.kubeconfig)
            for part, m in result["state"]["parts"].items():
                print(f"   state {part}: {m['objects']} objects, {m['bytes'] / 2**20:.1f} MiB", flush=True)
    except RunAborted as exc:
        result["failure"] = str(exc)
        print(f"   not measured: {exc}", flush=True)
    finally:
        contender.stop()
        plane.stop()
    result["wall_seconds"] = round(time.monotonic() - began)
    storm, baseline = result["storm"], result["baseline"]
    if storm is not None:
        cps = storm["cpu_per_second"]
        print(
            f"   first pass over {len(pods)} pods in {result['first_pass_seconds']:.0f}s "
            f"({result['untried_after_timeout']} untried); then over {storm['seconds']:.0f}s: apiserver "
            f"{cps['kube-apiserver']:.3f} CPU-s/s, scheduler {cps.get('scheduler', 0):.3f} CPU-s/s, scheduler "
            f"writes {storm['scheduler_writes_per_minute']:.0f}/min, all writes "
            f"{storm['all_writes_per_minute']:.0f}/min (baseline apiserver "
            f"{baseline['cpu_per_second']['kube-apiserver']:.3f} CPU-s/s)",
            flush=True,
        )
    return result


def _start_profilers(contender: contenders.Contender, workdir: pathlib.Path) -> list[subprocess.Popen[bytes]]:
    """py-spy on every Python process of the contender (sampling, so the run is slowed only a little): a flame
    graph (`.svg`) and the same samples as collapsed stacks (`.txt`, one line per stack and its count, to grep)."""
    py_spy = pathlib.Path(sys.executable).parent / "py-spy"
    out = []
    for name, stats in contender.processes().items():
        if name not in contender.python_processes:
            continue
        for fmt, suffix in (("flamegraph", "svg"), ("raw", "txt")):
            target = workdir / f"profile-{contender.name}-{name}.{suffix}"
            argv = [str(py_spy), "record", "--nonblocking", "--rate", "100", "--format", fmt]
            out.append(
                subprocess.Popen(
                    [*argv, "-p", str(stats.pid), "-o", str(target)],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
    return out


class ApiserverAccount:
    """What the apiserver did during a run, from its own side: a Go CPU profile of the first `PROFILE_SECONDS` of
    the window (`apiserver.pprof`; read it with `go tool pprof -top`) and the growth of its request and watch-event
    counters by verb and resource (`apiserver-requests.txt`), so contenders can be compared by what they cost it."""

    PROFILE_SECONDS = 60

    def __init__(self, plane: BenchPlane, workdir: pathlib.Path):
        self.plane = plane
        self.workdir = workdir
        self.before = self._counters()
        self.pool = ThreadPoolExecutor(1)
        self.profile = self.pool.submit(
            self._fetch, f"/debug/pprof/profile?seconds={self.PROFILE_SECONDS}", self.PROFILE_SECONDS + 60
        )

    def _fetch(self, path: str, timeout: float = 30) -> bytes:
        cfg = self.plane.api.cfg
        opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=cfg.ssl_context))
        with opener.open(cfg.server + path, timeout=timeout) as resp:
            return resp.read()

    def _counters(self) -> dict[str, float]:
        """Counter samples of interest, keyed by their metric line's name and labels."""
        wanted = ("apiserver_request_total{", "apiserver_watch_events_total{", "apiserver_watch_events_sizes_sum{")
        out: dict[str, float] = {}
        for line in self._fetch("/metrics").decode().splitlines():
            if line.startswith(wanted):
                key, _, value = line.rpartition(" ")
                out[key] = float(value)
        return out

    def finish(self) -> None:
        after = self._counters()
        rows = sorted(((after[k] - self.before.get(k, 0.0), k) for k in after), reverse=True)
        (self.workdir / "apiserver-requests.txt").write_text(
            "".join(f"{delta:14.0f} {key}\n" for delta, key in rows if delta > 0)
        )
        try:
            (self.workdir / "apiserver.pprof").write_bytes(self.profile.result())
        except OSError as exc:
            print(f"   apiserver profile failed: {exc}", flush=True)
        self.pool.shutdown()


def _stop_profilers(profilers: list[subprocess.Popen[bytes]]) -> None:
    for proc in profilers:
        proc.send_signal(signal.SIGINT)  # py-spy writes its flame graph on SIGINT
    for proc in profilers:
        proc.wait(60)


def _thin(curve: list[tuple[float, int]], points: int) -> list[tuple[float, int]]:
    """At most about `points` points of a bound-over-time curve, always keeping the last (enough for a plot)."""
    step = max(1, len(curve) // points)
    kept = curve[::step]
    return kept + curve[-1:] if curve and kept[-1] != curve[-1] else kept


def admission_review(settings: Settings) -> dict[str, Any]:
    """A realistic review: one W1 pod with its group's whole map (group_size lines)."""
    pod = workload.w1_pods(
        constants.DEFAULT_SCHEDULER_NAME, NAMESPACE, settings.group_size, settings.nodes, settings.group_size
    )[settings.group_size // 2]
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0b5e4d9e-bench-0000-0000-000000000000",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": NAMESPACE,
            "operation": "CREATE",
            "userInfo": {"username": "bench"},
            "object": pod,
            "dryRun": False,
        },
    }


def run_webhook(settings: Settings, loadgen: pathlib.Path) -> dict[str, Any]:
    """Admission latency at fixed rates straight at the webhook, then pod-create latency through the apiserver
    without and with the webhook registered."""
    from harness.components import Components

    workdir = settings.out / "runs" / "webhook"
    shutil.rmtree(workdir, ignore_errors=True)
    plane = BenchPlane(workdir, loadgen)
    print("== webhook", flush=True)
    out: dict[str, Any] = {"admission": {}, "pod_create": {}}
    components: Components | None = None
    try:
        plane.start()
        components = Components(plane.cp)
        components.start_webhook()
        body = workdir / "review.json"
        body.write_text(json.dumps(admission_review(settings)))
        for rate in settings.webhook_rates:
            csv = workdir / f"admit-{rate}.csv"
            subprocess.run(
                [
                    str(loadgen),
                    "admit",
                    f"-url={components.webhook_url}",
                    f"-ca={components.webhook_ca.cert_path}",
                    f"-body={body}",
                    f"-rate={rate}",
                    f"-duration={settings.webhook_seconds}s",
                    f"-out={csv}",
                ],
                check=True,
            )
            lat = measure.request_latencies_ms(csv)
            out["admission"][str(rate)] = {"requests": len(lat), **_quantiles(lat)}
        for label in ("without", "with"):
            if label == "with":
                components.register_webhook()
                time.sleep(3)  # the apiserver picks up webhook configurations through an informer
            ns = f"create-{label}"
            plane.namespace(ns)
            pods = workload.w1_pods(
                constants.DEFAULT_SCHEDULER_NAME, ns, settings.create_latency_pods, settings.nodes, settings.group_size
            )
            csv = plane.create(pods, f"create-{label}", rate=50)
            lat = measure.request_latencies_ms(csv)
            out["pod_create"][label] = {"requests": len(lat), **_quantiles(lat)}
            sample = plane.api.get(paths.pod(ns, pods[0]["metadata"]["name"]))
            env = {e["name"]: e.get("value") for e in sample["spec"]["containers"][0].get("env") or []}
            mutated = constants.CUDA_ENV in env
            if mutated != (label == "with"):
                raise RuntimeError(f"pods created {label} the webhook: CUDA_VISIBLE_DEVICES set = {mutated}")
            out["pod_create"][label]["mutated"] = mutated
    finally:
        if components is not None:
            components.stop()
        plane.stop()
    print(f"   {json.dumps(out)}", flush=True)
    return out


def _quantiles(lat: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(measure.percentile(lat, 50), 2),
        "p90_ms": round(measure.percentile(lat, 90), 2),
        "p99_ms": round(measure.percentile(lat, 99), 2),
        "max_ms": round(max(lat), 2),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--smoke", action="store_true", help="a tiny run that only proves the benchmark works")
    p.add_argument("--nodes", type=int)
    p.add_argument("--pods", type=int)
    p.add_argument("--reps", type=int)
    p.add_argument("--workloads", help=f"comma-separated: {','.join(WORKLOADS)}")
    p.add_argument("--storm-pods", type=int, help="claim pods waiting in the storm")
    p.add_argument("--storm-seconds", type=float, help="the storm's measuring window")
    p.add_argument("--storm-baseline-seconds", type=float, help="the window before the storm pods arrive")
    p.add_argument("--contenders", help=f"comma-separated: {','.join(contenders.BY_NAME)}")
    p.add_argument(
        "--baseline",
        metavar="REF",
        help="also run gpu-scheduler as it was at git revision REF (contender gpu-scheduler-baseline): a change's "
        "cost, before and after, in one run",
    )
    p.add_argument("--skip-webhook", action="store_true")
    p.add_argument(
        "--profile",
        action="store_true",
        help="py-spy flame graphs of the contenders, the apiserver's CPU profile and request counts, "
        "in the run folders",
    )
    p.add_argument(
        "--board",
        action="store_true",
        help="only the board's benchmark (bench/board.py; --smoke, --nodes, --pods, --out, --docs apply)",
    )
    p.add_argument("--out", type=pathlib.Path, help="working and results folder")
    p.add_argument("--docs", type=pathlib.Path, help="the markdown report to write (default docs/benchmarks.md)")
    args = p.parse_args(argv)
    if args.board:
        board.main(smoke=args.smoke, nodes=args.nodes, pods=args.pods, out=args.out, docs=args.docs)
        return
    overrides: dict[str, Any] = dict(SMOKE) if args.smoke else {}
    for key in ("nodes", "pods", "reps", "out", "docs", "storm_pods", "storm_seconds", "storm_baseline_seconds"):
        if getattr(args, key) is not None:
            overrides[key] = getattr(args, key)
    if args.profile:
        overrides["profile"] = True
    if args.workloads:
        overrides["workloads"] = tuple(args.workloads.split(","))
    if args.contenders:
        overrides["contenders"] = tuple(args.contenders.split(","))
    if args.baseline:
        contenders.GpuSchedulerBaseline.at(args.baseline)
        named = overrides.get("contenders", Settings().contenders)
        if contenders.GpuSchedulerBaseline.name not in named:
            overrides["contenders"] = (*named, contenders.GpuSchedulerBaseline.name)
    settings = Settings(**overrides)
    unknown = [w for w in settings.workloads if w not in WORKLOADS] + [
        c for c in settings.contenders if c not in contenders.BY_NAME
    ]
    if unknown:
        p.error(f"unknown workloads or contenders: {', '.join(unknown)}")
    if {"w1", "w4"} & set(settings.workloads) and settings.pods > settings.nodes * workload.GPUS_PER_NODE:
        p.error(
            f"W1 and W4 give every pod its own GPU: {settings.pods} pods need at least "
            f"{-(-settings.pods // workload.GPUS_PER_NODE)} nodes"
        )
    settings.out.mkdir(parents=True, exist_ok=True)
    loadgen = build_loadgen(ROOT / "build" / "bench-bin")

    started, source = time.time(), report.source()
    # Each contender runs the workloads it takes part in (the ceiling knows only maps and judges nothing: W1;
    # kube-scheduler-dra's W1 and W4 would be kube-scheduler's). The storm runs once per contender: its figures
    # are rates over minutes.
    takes = {name: contenders.BY_NAME[name].workloads for name in settings.contenders}
    runs = [
        run_one(settings, loadgen, wl, name, rep)
        for wl in settings.workloads
        if wl != "storm"
        for rep in range(1, settings.reps + 1)
        for name in settings.contenders
        if wl in takes[name]
    ]
    storms = [
        run_storm(settings, loadgen, name, 1)
        for name in settings.contenders
        if "storm" in settings.workloads and "storm" in takes[name]
    ]
    hooks = None if args.skip_webhook else run_webhook(settings, loadgen)
    results = {
        "settings": {
            k: (str(v) if isinstance(v, pathlib.Path) else v) for k, v in dataclasses.asdict(settings).items()
        },
        "client": {
            "qps": contenders.CLIENT_QPS,
            "burst": contenders.CLIENT_BURST,
            "workers": contenders.SCHEDULER_WORKERS,
        },
        "started": started,
        "source": source,
        "seconds": round(time.time() - started),
        "machine": report.machine(),
        "runs": runs,
        "storm": storms,
        "webhook": hooks,
    }
    report.write(results, settings.out, settings.docs)
    incomplete = [
        f"{r['workload']} {r['contender']} #{r['rep']}: {r['bound']}/{r['pods']} bound"
        for r in runs
        if r["bound"] < r["pods"]
    ]
    incomplete += [
        f"{r['workload']} {r['contender']} #{r['rep']}: {problem}" for r in runs for problem in r["problems"]
    ]
    incomplete += [
        f"storm {r['contender']}: {r['failure'] or str(r['untried_after_timeout']) + ' pods never tried'}"
        for r in storms
        if r["failure"] or not r["first_pass_complete"]
    ]
    if incomplete:
        raise SystemExit("runs that did not complete or got something wrong: " + "; ".join(incomplete))
    if args.smoke:
        board.main(smoke=True, loadgen=loadgen)
