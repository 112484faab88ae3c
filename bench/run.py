"""Run the benchmark: every (workload, contender, repetition) on its own fresh control plane, then the webhook
measurements, then the report.

    python -m bench                      # the full run `make bench` does (writes docs/benchmarks.md)
    python -m bench --smoke              # a few nodes and pods, one repetition, into build/bench-smoke
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
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gpu_scheduling import constants

from bench import contenders, measure, report, workload
from bench.plane import BenchPlane, build_loadgen

ROOT = pathlib.Path(__file__).resolve().parents[1]
NAMESPACE = "bench"


@dataclasses.dataclass(frozen=True)
class Settings:
    nodes: int = 1000
    """Fake kwok nodes, 8 GPUs each."""

    pods: int = 5000
    """W1 pods (and W2 claims) per run."""

    group_size: int = 100
    """W1 pods sharing one map, like the replicas of one StatefulSet."""

    reps: int = 3
    """Repetitions of every (workload, contender)."""

    workloads: tuple[str, ...] = ("w1", "w2")
    contenders: tuple[str, ...] = contenders.THE_THREE

    create_concurrency: int = 64
    """Create requests the load generator keeps in flight ("as fast as possible")."""

    timeout: float = 900
    """Seconds a run may take to bind every pod before it is recorded as incomplete."""

    webhook_seconds: float = 20
    """Duration of each fixed-rate webhook measurement."""

    webhook_rates: tuple[int, ...] = (50, 200)
    create_latency_pods: int = 1000
    """Pods created at 50/s with and without the webhook, for the pod-create latency."""

    profile: bool = False
    """Record py-spy flame graphs of the contender's Python processes during the timed window."""

    out: pathlib.Path = ROOT / "build" / "bench"
    docs: pathlib.Path | None = ROOT / "docs" / "benchmarks.md"


SMOKE = dict(nodes=5, pods=40, group_size=10, reps=1, webhook_seconds=2, create_latency_pods=20, timeout=120,
             out=ROOT / "build" / "bench-smoke", docs=None)


def _snapshot(stats: dict[str, Any]) -> dict[str, float]:
    return {name: s.cpu_seconds() for name, s in stats.items()}


def run_one(settings: Settings, loadgen: pathlib.Path, wl: str, name: str, rep: int) -> dict[str, Any]:
    workdir = settings.out / "runs" / f"{wl}-{name}-{rep}"
    shutil.rmtree(workdir, ignore_errors=True)
    plane = BenchPlane(workdir, loadgen)
    contender = contenders.BY_NAME[name]()
    print(f"== {wl} {name} repetition {rep}: {settings.nodes} nodes, {settings.pods} pods", flush=True)
    try:
        plane.start()
        node_seconds = plane.add_nodes(settings.nodes)
        contender.start(plane)
        plane.namespace(NAMESPACE)
        if wl == "w1":
            claims: list[dict[str, Any]] = []
            pods = workload.w1_pods(contender.scheduler_name, NAMESPACE, settings.pods, settings.nodes,
                                    settings.group_size)
        else:
            if name == contenders.GpuScheduler.name:
                plane.add_inventory(settings.nodes)
            claims, pods = workload.w2_objects(contender.scheduler_name, NAMESPACE,
                                               workload.w2_sizes(settings.pods, settings.nodes))
        if claims:
            plane.create(claims, "claims")
        tail = measure.AuditTail(plane.cp.audit_log, NAMESPACE)
        tail.poll()
        watched = {"kube-apiserver": plane.stats("kube-apiserver"), "etcd": plane.stats("etcd"),
                   **contender.processes()}
        cpu_before = _snapshot(watched)
        profilers = _start_profilers(contender, workdir) if settings.profile else []
        with ThreadPoolExecutor(1) as pool:
            creating = pool.submit(plane.create, pods, "pods", concurrency=settings.create_concurrency)
            deadline = time.monotonic() + settings.timeout
            while tail.poll() < len(pods) and time.monotonic() < deadline:
                plane.cp.check_alive()
                if creating.done() and creating.exception() is not None:
                    break
                time.sleep(0.2)
            creating.result()  # a failed create fails the run
        cpu = {k: v - cpu_before[k] for k, v in _snapshot(watched).items()}
        _stop_profilers(profilers)
        rss = {k: s.peak_rss_mib() for k, s in watched.items()}
        tail.poll()
        figs = measure.figures(tail.pods, tail.failed_binds)
    finally:
        contender.stop()
        plane.stop()
    result = {"workload": wl, "contender": name, "rep": rep, "nodes": settings.nodes,
              "node_setup_seconds": round(node_seconds, 1), "cpu_seconds": cpu, "peak_rss_mib": rss,
              "gpus_requested": sum(int(p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
                                    for p in pods),
              **dataclasses.asdict(figs)}
    result["curve"] = _thin(result["curve"], 600)
    print(f"   {figs.bound}/{figs.pods} bound in {figs.seconds:.1f}s: {figs.throughput:.1f} pods/s, "
          f"p50 {figs.latency_p50_ms:.0f} ms, p99 {figs.latency_p99_ms:.0f} ms; scheduler CPU "
          f"{cpu.get('scheduler', 0):.1f}s, RSS {rss.get('scheduler', 0):.0f} MiB; apiserver CPU "
          f"{cpu['kube-apiserver']:.1f}s", flush=True)
    return result


def _start_profilers(contender: contenders.Contender, workdir: pathlib.Path) -> list[subprocess.Popen[bytes]]:
    """py-spy on every Python process of the contender (sampling, so the run is slowed only a little)."""
    py_spy = pathlib.Path(sys.executable).parent / "py-spy"
    out = []
    for name, stats in contender.processes().items():
        if name in contender.python_processes:
            svg = workdir / f"profile-{contender.name}-{name}.svg"
            out.append(subprocess.Popen([str(py_spy), "record", "--nonblocking", "--rate", "100", "-p",
                                         str(stats.pid), "-o", str(svg)], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL))
    return out


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
    pod = workload.w1_pods(constants.DEFAULT_SCHEDULER_NAME, NAMESPACE, settings.group_size, settings.nodes,
                           settings.group_size)[settings.group_size // 2]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "0b5e4d9e-bench-0000-0000-000000000000", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": NAMESPACE,
        "operation": "CREATE", "userInfo": {"username": "bench"}, "object": pod, "dryRun": False}}


def run_webhook(settings: Settings, loadgen: pathlib.Path) -> dict[str, Any]:
    """Admission latency at fixed rates straight at the webhook, then pod-create latency through the apiserver
    without and with the webhook registered."""
    from tests.harness.components import Components

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
            subprocess.run([str(loadgen), "admit", f"-url={components.webhook_url}",
                            f"-ca={components.webhook_ca.cert_path}", f"-body={body}", f"-rate={rate}",
                            f"-duration={settings.webhook_seconds}s", f"-out={csv}"], check=True)
            lat = measure.request_latencies_ms(csv)
            out["admission"][str(rate)] = {"requests": len(lat), **_quantiles(lat)}
        for label in ("without", "with"):
            if label == "with":
                components.register_webhook()
                time.sleep(3)  # the apiserver picks up webhook configurations through an informer
            ns = f"create-{label}"
            plane.namespace(ns)
            pods = workload.w1_pods(constants.DEFAULT_SCHEDULER_NAME, ns, settings.create_latency_pods,
                                    settings.nodes, settings.group_size)
            csv = plane.create(pods, f"create-{label}", rate=50)
            lat = measure.request_latencies_ms(csv)
            out["pod_create"][label] = {"requests": len(lat), **_quantiles(lat)}
            sample = plane.api.get(f"/api/v1/namespaces/{ns}/pods/{pods[0]['metadata']['name']}")
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
    return {"p50_ms": round(measure.percentile(lat, 50), 2), "p90_ms": round(measure.percentile(lat, 90), 2),
            "p99_ms": round(measure.percentile(lat, 99), 2), "max_ms": round(max(lat), 2)}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="a tiny run that only proves the benchmark works")
    p.add_argument("--nodes", type=int)
    p.add_argument("--pods", type=int)
    p.add_argument("--reps", type=int)
    p.add_argument("--workloads", help="comma-separated: w1,w2")
    p.add_argument("--contenders", help=f"comma-separated: {','.join(contenders.BY_NAME)}")
    p.add_argument("--skip-webhook", action="store_true")
    p.add_argument("--profile", action="store_true", help="py-spy flame graphs of the contenders, in the run folders")
    p.add_argument("--out", type=pathlib.Path, help="working and results folder")
    p.add_argument("--docs", type=pathlib.Path, help="the markdown report to write (default docs/benchmarks.md)")
    args = p.parse_args(argv)
    overrides: dict[str, Any] = dict(SMOKE) if args.smoke else {}
    for key in ("nodes", "pods", "reps", "out", "docs"):
        if getattr(args, key) is not None:
            overrides[key] = getattr(args, key)
    if args.profile:
        overrides["profile"] = True
    if args.workloads:
        overrides["workloads"] = tuple(args.workloads.split(","))
    if args.contenders:
        overrides["contenders"] = tuple(args.contenders.split(","))
    settings = Settings(**overrides)
    if "w1" in settings.workloads and settings.pods > settings.nodes * workload.GPUS_PER_NODE:
        p.error(f"W1 gives every pod its own GPU: {settings.pods} pods need at least "
                f"{-(-settings.pods // workload.GPUS_PER_NODE)} nodes")
    settings.out.mkdir(parents=True, exist_ok=True)
    loadgen = build_loadgen(ROOT / "build" / "bench-bin")

    started = time.time()
    # The ceiling only knows how to follow a map, so it has no W2 (GpuClaim) run.
    runs = [run_one(settings, loadgen, wl, name, rep)
            for wl in settings.workloads for rep in range(1, settings.reps + 1) for name in settings.contenders
            if not (wl == "w2" and name == contenders.Ceiling.name)]
    hooks = None if args.skip_webhook else run_webhook(settings, loadgen)
    results = {"settings": {k: (str(v) if isinstance(v, pathlib.Path) else v)
                            for k, v in dataclasses.asdict(settings).items()},
               "client": {"qps": contenders.CLIENT_QPS, "burst": contenders.CLIENT_BURST,
                          "workers": contenders.SCHEDULER_WORKERS},
               "started": started, "seconds": round(time.time() - started), "machine": report.machine(),
               "runs": runs, "webhook": hooks}
    report.write(results, settings.out, settings.docs)
    incomplete = [f"{r['workload']} {r['contender']} #{r['rep']}: {r['bound']}/{r['pods']}" for r in runs
                  if r["bound"] < r["pods"]]
    if incomplete:
        raise SystemExit("runs that did not bind every pod: " + "; ".join(incomplete))
