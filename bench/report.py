"""Write a benchmark's results: raw JSON and CSV, a plot of bound pods over time, and the markdown report.

Every figure in the report is computed here from the results of the run; nothing is typed in by hand. Two written
sections follow the run's own: `docs/benchmarks-growth.md` (the growth table, from runs of its own at several
sizes: bench.growth) and `docs/benchmarks-history.md` (profiles and before/after runs of past changes).

    python -m bench.report [RESULTS_JSON] [--docs DOCS]   # the report again from a run's results.json (e.g. once the
                                                         # growth section is written), without running anything
"""

from __future__ import annotations

import csv
import datetime
import json
import os
import pathlib
import platform
import shutil
import subprocess
import sys
from typing import Any

from bench import measure, plane, workload
from gpu_scheduling import constants
from hack import toolchain

ROOT = pathlib.Path(__file__).resolve().parents[1]
COLOURS = {
    "gpu-scheduler": "tab:green",
    "kube-scheduler": "tab:blue",
    "ceiling": "tab:gray",
    "ceiling-webhook": "tab:brown",
    "gpu-scheduler-no-webhook": "tab:olive",
    "gpu-scheduler-baseline": "tab:orange",
    "kube-scheduler-dra": "tab:purple",
}
STORM_TARGET = 0.05
"""CPU-seconds per second the apiserver and the scheduler may each spend on pods waiting for GPUs (issue 9)."""
PEERS = ("kube-scheduler-dra", "kube-scheduler")
"""What gpu-scheduler is compared with in W2, the native form of a claim first."""
GANG_PEER = "kube-scheduler (PodGroups)"
"""How the report names kube-scheduler in W3: the native gang peer, its gangs declared as PodGroups."""


WORKLOAD_PLOTS = ("w1", "w2", "w3", "w4")
"""The workloads with a plot of bound pods over time."""

TARGETS = """\
| target | measured | met |
|---|---|---|
"""


def machine() -> dict[str, Any]:
    cpu = "unknown"
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem_kib = next(
        int(line.split()[1])
        for line in pathlib.Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal:")
    )
    go = subprocess.run(["go", "version"], capture_output=True, text=True).stdout.strip()
    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu,
        "memory_gib": round(mem_kib / 2**20, 1),
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "go": go,
        "versions": toolchain.read_versions(),
    }


def source() -> dict[str, Any]:
    """The code a run measures: the commit checked out when it started, and whether the files the contenders and the
    benchmark run from (src, bench, harness) differed from it."""

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True).stdout.strip()

    return {
        "commit": git("rev-parse", "HEAD"),
        "changed": bool(git("status", "--porcelain", "--", "src", "bench", "harness")),
    }


def _source_words(results: dict[str, Any]) -> str:
    src = results.get("source")
    if not src:
        return ""
    return f" at commit `{src['commit'][:12]}`" + (" with uncommitted changes" if src["changed"] else "")


def _summary(runs: list[dict[str, Any]], wl: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(r["contender"] for r in runs if r["workload"] == wl):
        mine = [r for r in runs if r["workload"] == wl and r["contender"] == name]
        out[name] = {
            "runs": len(mine),
            "bound": f"{min(r['bound'] for r in mine)}/{mine[0]['pods']}",
            "throughput": measure.spread(r["throughput"] for r in mine),
            "p50": measure.spread(r["latency_p50_ms"] for r in mine),
            "p90": measure.spread(r["latency_p90_ms"] for r in mine),
            "p99": measure.spread(r["latency_p99_ms"] for r in mine),
            "cpu": measure.spread(_contender_cpu(r) for r in mine),
            "cpu_per_pod_ms": measure.spread(_contender_cpu(r) * 1000 / r["pods"] for r in mine),
            "scheduler_cpu_per_pod_ms": measure.spread(
                r["cpu_seconds"].get("scheduler", 0.0) * 1000 / r["pods"] for r in mine
            ),
            "writes_per_pod": measure.spread((r.get("writes_per_pod") or {}).get("total", 0.0) for r in mine),
            "rss": measure.spread(r["peak_rss_mib"].get("scheduler", 0.0) for r in mine),
            "apiserver_cpu": measure.spread(r["cpu_seconds"]["kube-apiserver"] for r in mine),
            "etcd_cpu": measure.spread(r["cpu_seconds"]["etcd"] for r in mine),
            "create_rate": measure.spread(r["pods"] / r["create_seconds"] for r in mine if r["create_seconds"] > 0),
        }
    return out


def _contender_cpu(run: dict[str, Any]) -> float:
    return sum(v for k, v in run["cpu_seconds"].items() if k not in ("kube-apiserver", "etcd"))


def _fmt(triple: tuple[float, float, float], digits: int = 0) -> str:
    med, lo, hi = triple
    if lo == hi:
        return f"{med:.{digits}f}"
    return f"{med:.{digits}f} ({lo:.{digits}f}–{hi:.{digits}f})"


def plot(runs: list[dict[str, Any]], wl: str, path: pathlib.Path) -> bool:
    mine = [r for r in runs if r["workload"] == wl]
    if not mine:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5), dpi=110)
    seen: set[str] = set()
    for r in mine:
        xs = [0.0] + [t for t, _ in r["curve"]]
        ys = [0] + [n for _, n in r["curve"]]
        name = GANG_PEER if wl == "w3" and r["contender"] == "kube-scheduler" else r["contender"]
        label = name if r["contender"] not in seen else None
        seen.add(r["contender"])
        ax.step(
            xs, ys, where="post", color=COLOURS.get(r["contender"], "black"), alpha=0.85, label=label, linewidth=1.4
        )
    ax.set_xlabel("seconds since the first pod create request")
    ax.set_ylabel("pods bound")
    ax.set_title(
        f"{wl.upper()}: pods bound over time, {mine[0]['pods']} pods on {mine[0]['nodes']} nodes (every repetition)"
    )
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def write_csv(runs: list[dict[str, Any]], path: pathlib.Path) -> None:
    fields = [
        "workload",
        "contender",
        "rep",
        "nodes",
        "pods",
        "bound",
        "seconds",
        "throughput",
        "create_seconds",
        "latency_p50_ms",
        "latency_p90_ms",
        "latency_p99_ms",
        "failed_binds",
        "scheduler_cpu_s",
        "webhook_cpu_s",
        "apiserver_cpu_s",
        "etcd_cpu_s",
        "scheduler_peak_rss_mib",
        "scheduler_writes_per_pod",
        "gangs_placed",
        "gangs_per_second",
        "gang_p50_ms",
        "gang_p99_ms",
    ]
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in runs:
            row = {k: r[k] for k in fields if k in r}
            row.update(
                scheduler_cpu_s=r["cpu_seconds"].get("scheduler"),
                webhook_cpu_s=r["cpu_seconds"].get("webhook"),
                apiserver_cpu_s=r["cpu_seconds"]["kube-apiserver"],
                etcd_cpu_s=r["cpu_seconds"]["etcd"],
                scheduler_peak_rss_mib=r["peak_rss_mib"].get("scheduler"),
                scheduler_writes_per_pod=(r.get("writes_per_pod") or {}).get("total"),
            )
            if r.get("gangs"):  # W3
                g = r["gangs"]
                row.update(
                    gangs_placed=g["placed"],
                    gangs_per_second=g["gangs_per_second"],
                    gang_p50_ms=g["gang_p50_ms"],
                    gang_p99_ms=g["gang_p99_ms"],
                )
            w.writerow({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()})


def _table(summary: dict[str, dict[str, Any]]) -> str:
    lines = [
        (
            "| contender | bound | pods/s | create→bound p50 ms | p90 ms | p99 ms | contender CPU s | "
            "peak RSS MiB | apiserver CPU s | etcd CPU s | create rate pods/s |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in summary.items():
        lines.append(
            f"| {name} | {s['bound']} | {_fmt(s['throughput'], 1)} | {_fmt(s['p50'])} | {_fmt(s['p90'])} | "
            f"{_fmt(s['p99'])} | {_fmt(s['cpu'], 1)} | {_fmt(s['rss'])} | {_fmt(s['apiserver_cpu'], 1)} | "
            f"{_fmt(s['etcd_cpu'], 1)} | {_fmt(s['create_rate'])} |"
        )
    return "\n".join(lines)


def _target_table(rows: list[tuple[str, str, bool]]) -> str:
    return TARGETS + "\n".join(f"| {t} | {m} | {'yes' if ok else '**no**'} |" for t, m, ok in rows)


def _targets(summary: dict[str, dict[str, Any]], hooks: dict[str, Any] | None) -> str:
    g, k, c, cw = (summary.get(n) for n in ("gpu-scheduler", "kube-scheduler", "ceiling", "ceiling-webhook"))
    rows = []
    if g and k:
        ratio = g["throughput"][0] / k["throughput"][0]
        rows.append(("throughput ≥ 1.0× kube-scheduler (aim 1.2×)", f"{ratio:.2f}×", ratio >= 1.0))
        rows.append(
            (
                "p99 latency ≤ kube-scheduler's",
                f"{g['p99'][0]:.0f} ms vs {k['p99'][0]:.0f} ms",
                g["p99"][0] <= k["p99"][0],
            )
        )
    if g and cw:
        ratio = g["throughput"][0] / cw["throughput"][0]
        rows.append(("throughput ≥ 0.95× the ceiling with the webhook", f"{ratio:.2f}×", ratio >= 0.95))
    if g and c:
        ratio = g["throughput"][0] / c["throughput"][0]
        rows.append(("throughput ≥ 0.8× the bare ceiling (its pods skip the webhook)", f"{ratio:.2f}×", ratio >= 0.8))
    if g:
        rows.append(("scheduler RSS ≤ 150 MiB", f"{g['rss'][0]:.0f} MiB", g["rss"][0] <= 150))
    if hooks and "200" in hooks["admission"]:
        p99 = hooks["admission"]["200"]["p99_ms"]
        rows.append(("webhook p99 ≤ 5 ms at 200 req/s", f"{p99:.1f} ms", p99 <= 5))
    return _target_table(rows)


def _w2_targets(summary: dict[str, dict[str, Any]]) -> str:
    """W2's throughput targets: gpu-scheduler's claims against kube-scheduler's extended resource and its DRA."""
    g = summary.get("gpu-scheduler")
    rows = []
    for peer, floor in (("kube-scheduler", 0.6), ("kube-scheduler-dra", 3.0)):
        p = summary.get(peer)
        if g and p and p["throughput"][0]:
            ratio = g["throughput"][0] / p["throughput"][0]
            rows.append((f"throughput ≥ {floor:g}× {peer}", f"{ratio:.2f}×", ratio >= floor))
    return _target_table(rows) if rows else ""


def _ratios(summary: dict[str, dict[str, Any]]) -> str:
    """gpu-scheduler against each native peer present: medians and their ratio."""
    g = summary.get("gpu-scheduler")
    peers = [p for p in PEERS if p in summary]
    if not g or not peers:
        return ""
    rows = [
        ("pods bound per second (higher is better)", "throughput", 1),
        ("create→bound p99 ms", "p99", 0),
        ("scheduler CPU ms per pod", "scheduler_cpu_per_pod_ms", 1),
        ("contender CPU ms per pod (gpu-scheduler: scheduler + webhook)", "cpu_per_pod_ms", 1),
        ("scheduler peak RSS MiB", "rss", 0),
        ("scheduler write requests per pod", "writes_per_pod", 2),
    ]
    head = "| median | gpu-scheduler | " + " | ".join(f"{p} | gpu-scheduler ÷ {p}" for p in peers) + " |"
    lines = [head, "|---|---|" + "---|---|" * len(peers)]
    for label, key, digits in rows:
        cells = [f"{g[key][0]:.{digits}f}"]
        for p in peers:
            peer = summary[p][key][0]
            cells += [f"{peer:.{digits}f}", f"{g[key][0] / peer:.2f}×" if peer else "–"]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _writes(runs: list[dict[str, Any]], wl: str) -> str:
    """Write requests the scheduler made per pod, by verb and resource: the median over the repetitions."""
    by: dict[str, list[dict[str, float]]] = {}
    for r in runs:
        if r["workload"] == wl and r.get("writes_per_pod") is not None:
            by.setdefault(r["contender"], []).append(r["writes_per_pod"])
    if not by:
        return ""
    keys = [*sorted({k for per in by.values() for w in per for k in w if k != "total"}), "total"]
    lines = ["| write request | " + " | ".join(by) + " |", "|---|" + "---|" * len(by)]
    for key in keys:
        cells = []
        for per in by.values():
            med = measure.spread(w.get(key, 0.0) for w in per)[0]
            cells.append(f"{med:.2f}" if med else "–")
        label = f"**{key}**" if key == "total" else f"`{key}`"
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _storm(storms: list[dict[str, Any]]) -> str:
    lines = [
        (
            "| contender | pods waiting | first pass s | apiserver CPU-s/s | scheduler CPU-s/s | contender CPU-s/s | "
            "etcd CPU-s/s | scheduler writes/min | all writes/min | scheduler peak RSS MiB |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in storms:
        if r["storm"] is None:
            reason = (r.get("failure") or "not measured").splitlines()[0]
            lines.append(f"| {r['contender']} | not measured: {reason} |" + " |" * 8)
            continue
        for label, w in (("before the storm", r["baseline"]), ("storm", r["storm"])):
            c = w["cpu_per_second"]
            contender = sum(v for k, v in c.items() if k not in ("kube-apiserver", "etcd"))
            first = f"{r['first_pass_seconds']:.0f}" if label == "storm" else "–"
            waiting = r["pods"] if label == "storm" else 0
            if label == "storm" and not r["first_pass_complete"]:
                first = f"**{r['untried_after_timeout']} never tried**"
            lines.append(
                f"| {r['contender']}, {label} ({w['seconds']:.0f} s) | {waiting} | {first} | "
                f"{c['kube-apiserver']:.3f} | {c.get('scheduler', 0):.3f} | {contender:.3f} | "
                f"{c['etcd']:.3f} | "
                f"{w['scheduler_writes_per_minute']:.0f} | {w['all_writes_per_minute']:.0f} | "
                f"{r['peak_rss_mib'].get('scheduler', 0):.0f} |"
            )
    return "\n".join(lines)


def _storm_targets(storms: list[dict[str, Any]]) -> str:
    rows = []
    for r in storms:
        if r["storm"] is None:
            continue
        c = r["storm"]["cpu_per_second"]
        for who, key in (("apiserver", "kube-apiserver"), ("scheduler", "scheduler")):
            value = c.get(key, 0.0)
            rows.append((f"{r['contender']}: {who} < {STORM_TARGET} CPU-s/s", f"{value:.3f}", value < STORM_TARGET))
    return _target_table(rows)


def _storm_writes(storms: list[dict[str, Any]]) -> str:
    measured = [r for r in storms if r["storm"] is not None]
    keys = sorted({k for r in measured for k in r["storm"]["scheduler_writes"]})
    if not keys:
        return "No contender's scheduler wrote anything during the storm window."
    lines = [
        "| scheduler write requests per minute | " + " | ".join(r["contender"] for r in measured) + " |",
        "|---|" + "---|" * len(measured),
    ]
    for key in keys:
        cells = [f"{r['storm']['scheduler_writes'].get(key, 0) * 60 / r['storm']['seconds']:.1f}" for r in measured]
        lines.append(f"| `{key}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _state(storms: list[dict[str, Any]]) -> str:
    """What gpu-scheduler keeps in memory per object (bench/state.py), from the first storm that measured it."""
    measured = [r for r in storms if r.get("state")]
    if not measured:
        return "Not measured."
    r = measured[0]
    lines = ["| part | objects | MiB | bytes per object |", "|---|---|---|---|"]
    for part, m in r["state"]["parts"].items():
        per = f"{m['bytes'] / m['objects']:.0f}" if m["objects"] else "–"
        lines.append(f"| {part} | {m['objects']} | {m['bytes'] / 2**20:.1f} | {per} |")
    total = r["state"]["total_bytes"]
    lines.append(f"| **total** | | **{total / 2**20:.1f}** | |")
    return "\n".join(lines)


def _webhook(hooks: dict[str, Any]) -> str:
    lines = ["| measurement | requests | p50 ms | p90 ms | p99 ms | max ms |", "|---|---|---|---|---|---|"]
    for rate, q in hooks["admission"].items():
        lines.append(
            f"| AdmissionReview straight to the webhook at {rate} req/s | {q['requests']} | {q['p50_ms']} | "
            f"{q['p90_ms']} | {q['p99_ms']} | {q['max_ms']} |"
        )
    for label, q in hooks["pod_create"].items():
        lines.append(
            f"| pod create through the apiserver at 50/s, {label} the webhook | {q['requests']} | "
            f"{q['p50_ms']} | {q['p90_ms']} | {q['p99_ms']} | {q['max_ms']} |"
        )
    return "\n".join(lines)


def _gang_label(name: str) -> str:
    return GANG_PEER if name == "kube-scheduler" else name


def _w3_runs(runs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """W3's runs by contender, in the order they ran."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        if r["workload"] == "w3":
            out.setdefault(r["contender"], []).append(r)
    return out


def _gang_table(runs: list[dict[str, Any]]) -> str:
    """W3, one row per contender: gangs placed per second, last member created -> gang bound, CPU, RSS and writes
    per member (median over the repetitions, with min–max)."""
    lines = [
        (
            "| contender | gangs placed | members bound | gangs/s | pods/s | last member created→gang bound p50 ms | "
            "p99 ms | max ms | scheduler CPU s | contender CPU s | scheduler CPU ms per member | "
            "scheduler peak RSS MiB | apiserver CPU s | scheduler writes per member |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, mine in _w3_runs(runs).items():
        g = [r["gangs"] for r in mine]
        lines.append(
            f"| {_gang_label(name)} | {min(x['placed'] for x in g)}/{g[0]['gangs']} | {min(r['bound'] for r in mine)}/"
            f"{mine[0]['pods']} | {_fmt(measure.spread(x['gangs_per_second'] for x in g), 2)} | "
            f"{_fmt(measure.spread(r['throughput'] for r in mine), 1)} | "
            f"{_fmt(measure.spread(x['gang_p50_ms'] for x in g))} | "
            f"{_fmt(measure.spread(x['gang_p99_ms'] for x in g))} | "
            f"{_fmt(measure.spread(x['gang_max_ms'] for x in g))} | "
            f"{_fmt(measure.spread(r['cpu_seconds'].get('scheduler', 0.0) for r in mine), 1)} | "
            f"{_fmt(measure.spread(_contender_cpu(r) for r in mine), 1)} | "
            f"{_fmt(measure.spread(r['cpu_seconds'].get('scheduler', 0.0) * 1000 / r['pods'] for r in mine), 1)} | "
            f"{_fmt(measure.spread(r['peak_rss_mib'].get('scheduler', 0.0) for r in mine))} | "
            f"{_fmt(measure.spread(r['cpu_seconds']['kube-apiserver'] for r in mine), 1)} | "
            f"{_fmt(measure.spread((r.get('writes_per_pod') or {}).get('total', 0.0) for r in mine), 2)} |"
        )
    return "\n".join(lines)


def _phase_table(runs: list[dict[str, Any]]) -> str:
    """W3, where a gang's wait went (measure.gang_phases), per contender: medians over the gangs, then over the
    repetitions."""
    lines = [
        "| contender | last member created→first commit write ms | first→last GPU Lease ms | →last binding ms |",
        "|---|---|---|---|",
    ]
    for name, mine in _w3_runs(runs).items():
        ph = [r["gang_phases"] for r in mine if r.get("gang_phases")]
        if not ph:
            continue
        lines.append(
            f"| {_gang_label(name)} | {_fmt(measure.spread(x['to_commit_p50_ms'] for x in ph))} | "
            f"{_fmt(measure.spread(x['locking_p50_ms'] for x in ph))} | "
            f"{_fmt(measure.spread(x['binding_p50_ms'] for x in ph))} |"
        )
    return "\n".join(lines) if len(lines) > 2 else ""


def proof_sentence(proof: dict[str, Any]) -> str:
    """What bench/gangproof.py saw, in one sentence."""
    n, hold = proof["min_count"], proof["hold_seconds"]
    if proof["alone_bound_ms"] is None:
        first = f"the pod of no gang was not bound, so the {n - 1} members of a gang of minimum {n} proved nothing"
    else:
        first = (
            f"{proof['short_bound']} of the {n - 1} members of a gang of minimum {n} bound {hold:g} s after a pod of "
            f"no gang created with them was bound ({proof['alone_bound_ms']:.0f} ms)"
        )
    if proof["completed_bound_ms"] is None:
        return f"{first}; once member {n} was created, not every member was bound"
    return f"{first}; once member {n} was created, all {n} bound in {proof['completed_bound_ms']:.0f} ms"


def _proofs(runs: list[dict[str, Any]]) -> str:
    """Each W3 run's gang proof, as a list."""
    return "\n".join(
        f"- {_gang_label(name)}, repetition {r['rep']}: {proof_sentence(r['gang_proof'])}."
        for name, mine in _w3_runs(runs).items()
        for r in mine
        if r.get("gang_proof")
    )


def gangs_section(runs: list[dict[str, Any]], assets: str, source: str = "") -> str:
    """The report's W3 section ("" without W3 runs); `source`, a paragraph saying which run the figures come from
    when it is not the report's own."""
    w3 = [r for r in runs if r["workload"] == "w3" and r.get("gangs")]
    if not w3:
        return ""
    r0 = w3[0]
    lead = f"{source}\n\n" if source else ""
    parts = [
        f"""## W3: gangs

{r0["gangs"]["gangs"]} gangs of 2, 4 and 8 members in turn, every member asking for a whole node (8 GPUs):
{r0["pods"]} pods on {r0["nodes"]} nodes (about 90 % of them), each gang in the scheduler's own gang API.
gpu-scheduler gets one GpuClaim of 8 GPUs per gang with `spec.gangRef`, each member naming it with
`gpu.scheduling/gang-min-members`. kube-scheduler, the native peer, gets one PodGroup per gang
(`scheduling.k8s.io/v1beta1`, `spec.schedulingPolicy.gang.minCount` = the gang's size; no topology constraint, as
W3 asks for no domain), each member asking `nvidia.com/gpu: 8` and joining it with
`spec.schedulingGroup.podGroupName`; its default profile with the feature gates the plane passes (GenericWorkload,
TopologyAwareWorkloadScheduling) holds a gang until minCount members exist (GangScheduling's PreEnqueue) and
decides it in one pod-group cycle. Both place a gang whole or not at all; gpu-scheduler also gives each member 8
GPU ids and locks them with one GPU Lease each before it binds. The claims, the PodGroups and the inventory exist
before the timed window. Gangs/s = gangs with every member bound / (the bind that completed the last gang − the
first create received); per gang, the wait is from its last member's create completed to its last member's bind
completed (the apiserver's audit log), what `gpu_scheduler_gang_scheduling_duration_seconds` measures from the
scheduler's side. Each run fails if a gang ends partly bound (gpu-scheduler's also if a member was bound before
every GPU Lease of its gang was created), a bound member lacks 8 distinct GPUs, or a GPU is held twice
(`bench/checks.py`).

{lead}{_gang_table(runs)}

![W3 bound pods over time]({assets}/w3-bound-over-time.png)
"""
    ]
    proofs = _proofs(runs)
    if proofs:
        p0 = next(r["gang_proof"] for r in w3 if r.get("gang_proof"))
        n = p0["min_count"]
        parts.append(f"""### Gang proof

After each run's timed window, on its plane and with the scheduler it measured (`bench/gangproof.py`): a gang of
minimum {n} in the scheduler's form, each member asking one GPU, is created with {n - 1} members beside one pod of no
gang asking the same; the run fails if a member is bound by {p0["hold_seconds"]:g} s after the lone pod is, or if the
gang is not bound once its member {n} comes. Times are the benchmark's client's, polling the pods every 0.1 s.

{proofs}
""")
    phases = _phase_table(runs)
    if phases:
        parts.append(f"""### Where a gang's wait goes

Per gang, from the audit log: from its last member's create to the first write of its commit (gpu-scheduler: the
gang's first GPU Lease create; kube-scheduler, which writes nothing before it binds: its first binding), the GPU
Lease creates (gpu-scheduler locks every member's GPUs before it binds any), then to its last binding. Medians over
the gangs (and over the repetitions, with min–max).

{phases}
""")
    writes = _writes(runs, "w3")
    if writes:
        parts.append(f"""### Writes per member

The scheduler's write requests per member, by verb and resource (as for W2; `update leases` is the leader's own
renewal).

{writes}
""")
    return "\n".join(parts)


def _against_w1(runs: list[dict[str, Any]]) -> str:
    """W4 against W1, per contender that ran both on the same pods and nodes: what judging the spread constraint
    adds (medians over the repetitions)."""
    w1, w4 = _summary(runs, "w1"), _summary(runs, "w4")
    shape = {(r["workload"], r["contender"]): (r["pods"], r["nodes"]) for r in runs}
    names = [n for n in w4 if n in w1 and shape[("w1", n)] == shape[("w4", n)]]
    if not names:
        return ""
    lines = [
        (
            "| contender | pods/s W1 → W4 | create→bound p99 ms W1 → W4 | scheduler CPU ms per pod W1 → W4 | "
            "contender CPU ms per pod W1 → W4 |"
        ),
        "|---|---|---|---|---|",
    ]
    for name in names:
        a, b = w1[name], w4[name]
        ratio = f" ({b['throughput'][0] / a['throughput'][0]:.2f}×)" if a["throughput"][0] else ""
        cpu, total = a["scheduler_cpu_per_pod_ms"][0], a["cpu_per_pod_ms"][0]
        lines.append(
            f"| {name} | {a['throughput'][0]:.1f} → {b['throughput'][0]:.1f}{ratio} | {a['p99'][0]:.0f} → "
            f"{b['p99'][0]:.0f} | {cpu:.2f} → {b['scheduler_cpu_per_pod_ms'][0]:.2f} "
            f"({b['scheduler_cpu_per_pod_ms'][0] - cpu:+.2f}) | {total:.2f} → {b['cpu_per_pod_ms'][0]:.2f} "
            f"({b['cpu_per_pod_ms'][0] - total:+.2f}) |"
        )
    return "\n".join(lines)


def _refusals(runs: list[dict[str, Any]]) -> str:
    """W4, per contender: the refusals it wrote (PodScheduled=False), each repetition's."""
    by: dict[str, list[int]] = {}
    for r in runs:
        if r["workload"] == "w4" and r.get("spread"):
            by.setdefault(r["contender"], []).append(r["spread"]["refusals_written"])
    return "; ".join(f"{name} {', '.join(map(str, n))}" for name, n in by.items())


def spread_section(runs: list[dict[str, Any]], settings: dict[str, Any], assets: str) -> str:
    """The report's W4 section ("" without W4 runs)."""
    w4 = _summary(runs, "w4")
    if not w4:
        return ""
    r0 = next(r for r in runs if r["workload"] == "w4")
    spread = r0.get("spread") or {}
    zones = spread.get("zones") or {}
    label = ", ".join(f"{k}: {v}" for k, v in workload.W4_LABEL.items())
    parts = [
        f"""## W4: {r0["pods"]} map-pinned pods with a zone spread constraint

W1's pods on W1's nodes, pinned the same way (the map for gpu-scheduler, required node affinity for kube-scheduler),
each also labelled `{label}` and carrying one topology spread constraint: `maxSkew: {spread.get("max_skew")}` over
`{workload.ZONE_LABEL}` (the {r0["nodes"]} nodes are in {len(zones)} zones, node i in zone i mod {len(zones)}),
`whenUnsatisfiable: DoNotSchedule`, that label as its selector, and `nodeAffinityPolicy: Ignore`, so that
kube-scheduler's node-affinity pin does not narrow the constraint to its node's zone: both schedulers count every
zone. Both judge it for every pod (the matching pods of every zone counted in PreFilter, the pod's zone compared in
Filter); the ceiling takes no part. maxSkew is the skew W1's own order reaches plus the pods of one zone among the
{settings.get("create_concurrency", 64)} creates in flight (`bench/workload.py`), so that pods arriving out of order are
not refused: the figures are the cost of judging the constraint, not of refusals and backoffs (time spent waiting,
not working). Refusals written (the scheduler's PodScheduled=False status writes, per repetition):
{_refusals(runs) or "none recorded"}. At the end the zones hold {", ".join(f"{z} {n}" for z, n in zones.items())}
pods; each run fails if a zone is more than maxSkew ahead of another or a pod is off its mapped node
(`bench/checks.py`).

{_table(w4)}

![W4 bound pods over time]({assets}/w4-bound-over-time.png)
"""
    ]
    ratios = _ratios(w4)
    if ratios:
        parts.append(f"""### gpu-scheduler against kube-scheduler

{ratios}
""")
    against = _against_w1(runs)
    if against:
        parts.append(f"""### What judging the constraint adds: W4 against W1

The same contender, the same pods and nodes, without and with the constraint (medians; in brackets, W4 ÷ W1 for the
throughput and the CPU W4 adds per pod).

{against}
""")
    return "\n".join(parts)


def render(results: dict[str, Any], assets: str) -> str:
    s, m, runs = results["settings"], results["machine"], results["runs"]
    when = datetime.datetime.fromtimestamp(results["started"], datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    v = m["versions"]
    parts = [
        f"""# Benchmarks

Generated by `make bench` ({when}, {results["seconds"] // 60} min {results["seconds"] % 60} s{_source_words(results)});
do not edit by hand, rerun it. Raw results: [`results.json`]({assets}/results.json), one row per run:
[`runs.csv`]({assets}/runs.csv).

## Machine

{m["cpus"]} CPUs ({m["cpu_model"]}), {m["memory_gib"]} GiB memory, Linux {m["kernel"]}, Python {m["python"]},
{m["go"]}. Kubernetes {v.get("kubernetes_version")} (kube-apiserver, kube-controller-manager, kube-scheduler),
etcd {v.get("etcd_version")}, kwok {v.get("kwok_version")}, all built from the Go module proxy by
`hack/toolchain.py`. Everything (etcd, apiserver, controller manager, kwok, the contender, the load generator)
shares these {m["cpus"]} CPUs, so every figure is a figure of the whole machine under load.

## Set-up

- {s["nodes"]} kwok nodes with 8 GPUs each (`nvidia.com/gpu` capacity; for the claim workloads also the
  inventory in the contender's form: the simulated GpuNodeStatus, or a DeviceClass and one ResourceSlice per
  node), in {workload.ZONES} zones (`{workload.ZONE_LABEL}`, node i in zone i mod {workload.ZONES}; only W4's pods
  ask anything of it), on a fresh etcd + kube-apiserver + kube-controller-manager + kwok for every run, so no run
  inherits another's objects. kwok renews node leases every {plane.NODE_LEASE_SECONDS // 4 // 60} min and runs no pods
  (see `bench/plane.py`).
- Contenders (`bench/contenders.py`), each in namespace `bench`, same apiserver build and flags:
  1. **gpu-scheduler** with the webhook in the admission path, {results["client"]["workers"]} bind workers;
  2. **kube-scheduler** {v.get("kubernetes_version")}, default profile, the same pods pinned natively
     (W1, W4: required node affinity on `kubernetes.io/hostname`; `nvidia.com/gpu` requests; W3: gangs as
     PodGroups, with the gang API's feature gates on);
  3. **kube-scheduler-dra**: the same kube-scheduler, the same claims as Dynamic Resource Allocation
     ResourceClaims (`resource.k8s.io/v1`, enabled by default in {v.get("kubernetes_version")}), which its
     DynamicResources plugin allocates and reserves before binding (W2 and the storm);
  4. **ceiling**: `loadgen bind` (Go, `bench/loadgen`), list+watch and POST the binding from
     {results["client"]["workers"]} goroutines to the node the pod names in one annotation (the node of its map
     entry, worked out by the benchmark), nothing else (W1).
  5. **ceiling-webhook**: the same binder, its pods admitted through gpu-webhook as gpu-scheduler's are (W1): the
     most this design (mutate every GPU pod, then bind it) allows on this machine.
- Client settings: every scheduler QPS {results["client"]["qps"]}, burst {results["client"]["burst"]} (none
  is held back by its own limiter); the ceiling has no limiter. Both schedulers run one replica with leader
  election on, as deployed (a Lease renewed every few seconds), and the timed window starts once it leads. The
  contender signs in as a user of its own, `bench-scheduler`, so the audit log (which records every write
  request, at Metadata level) tells its writes apart.
- Pods are created by `loadgen create` over HTTP/2 with {s["create_concurrency"]} requests in flight, as fast
  as the apiserver takes them. Times come from the apiserver's audit log: created = the create request
  completed, bound = the binding request completed with 201. Throughput = pods bound / (last bind − first
  create received). Contender CPU is the scheduler's (plus the webhook's, for gpu-scheduler) during that window;
  peak RSS is the scheduler process's high-water mark.
- {s["reps"]} repetitions of every contender, interleaved. Figures: median (min–max).
"""
    ]
    w1 = _summary(runs, "w1")
    if w1:
        r0 = next(r for r in runs if r["workload"] == "w1")
        parts.append(f"""## W1: {r0["pods"]} map-pinned pods

{r0["pods"]} pods in groups of {s["group_size"]} sharing one `{constants.MAP_ANNOTATION}` (the replicas of one
StatefulSet), pod p on node p mod {s["nodes"]}, one GPU each.

{_table(w1)}

![W1 bound pods over time]({assets}/w1-bound-over-time.png)

### Targets

{_targets(w1, results.get("webhook"))}
""")
    w2 = _summary(runs, "w2")
    if w2:
        r0 = next(r for r in runs if r["workload"] == "w2")
        ratios = _ratios(w2)
        parts.append(f"""## W2: {r0["pods"]} GPU claims

Claims of 8, 4, 2 and 1 GPUs (10 %, 15 %, 25 % and 50 % of the GPUs they ask for), largest first,
{r0["gpus_requested"]} GPUs of {s["nodes"] * 8}. The same request in each contender's form
(`bench/workload.py`): gpu-scheduler gets one GpuClaim per pod (contiguous policy, topology left to its default
`Ignore`; one Lease per GPU); kube-scheduler gets `nvidia.com/gpu` requests; kube-scheduler-dra gets one
ResourceClaim per pod asking `exactly` that many devices of DeviceClass `bench-gpu` (a CEL selector on the
driver `gpu.bench.example`), against one ResourceSlice per node with the same 8 devices (attributes: index,
NVLink island, bandwidth). A GpuClaim with topology `Required` would become a `matchAttribute` constraint on
the island; W2 asks none. The claims and the inventory are created before the timed window; the pods inside it.

{_table(w2)}

![W2 bound pods over time]({assets}/w2-bound-over-time.png)
""")
        if ratios:
            parts.append(f"""### gpu-scheduler against the native peers

{ratios}
""")
        w2_targets = _w2_targets(w2)
        if w2_targets:
            parts.append(f"""### Targets

{w2_targets}
""")
        writes = _writes(runs, "w2")
        if writes:
            parts.append(f"""### Writes per claim pod

Write requests (create, update, patch, delete) the scheduler made per pod, from the apiserver's audit log: every
request its user made from the first pod create until it had written nothing for {s["writes_settle_seconds"]:.0f} s
after the last bind, by verb and resource, median over the repetitions. Requests the apiserver refused count
too (they cost it as much). The pods' creates, the claims and the inventory are the benchmark's, not counted.
`update leases` is the leader renewing its Lease (every few seconds, whatever the load); kube-scheduler-dra's
`update resourceclaims` puts its finalizer on the claim and `update resourceclaims/status` writes the
allocation and the pod's reservation.

{writes}
""")
    gangs = gangs_section(runs, assets)
    if gangs:
        parts.append(gangs)
    spread = spread_section(runs, s, assets)
    if spread:
        parts.append(spread)
    storms = results.get("storm") or []
    if storms:
        st = storms[0]
        parts.append(f"""## Pending storm: {st["pods"]} claim pods waiting for GPUs

Every GPU of the {st["nodes"]} nodes is taken first (one 8-GPU claim pod per node, bound), then {st["pods"]} claim
pods of 1 GPU arrive that cannot be placed: what a cluster sees when its GPUs are exhausted. Once every waiting
pod has been tried (it carries `PodScheduled=False`; "first pass", polled every 2–5 s), CPU and writes are measured
over a fixed window of {s["storm_seconds"]:.0f} s; the same measure over {s["storm_baseline_seconds"]:.0f} s
before the waiting pods were created (GPUs taken, nothing waiting) is the plane's own cost. CPU-s/s = CPU
seconds used per second of the window. Writes per minute from the audit log: the scheduler's own, and everyone's
(kwok's node leases, the controller manager, the apiserver's own). One run per contender. kube-scheduler
parks a pod it could not place until an event could change that (for DRA: a ResourceSlice, DeviceClass or claim
change) or 5 minutes pass (`podMaxInUnschedulablePodsDuration`); nothing changes in the window.

{_storm(storms)}

### Targets

Shown, not asserted.

{_storm_targets(storms)}

### What the schedulers wrote during the storm window

{_storm_writes(storms)}

### What gpu-scheduler keeps in memory

After the window, a replica of gpu-scheduler's watch side (its informers with their transforms, its ledger; it
never leads) is synced in the benchmark's own process and each part measured in bytes, a string shared by two
objects counted once (bench/state.py): the state bytes per pod and per node. The peak RSS above is the whole
process (the interpreter with the scheduler's modules imported: 42 MiB on this machine; and the memory the allocator
keeps).

{_state(storms)}
""")
    hooks = results.get("webhook")
    if hooks:
        parts.append(f"""## Webhook

Straight at the webhook: `loadgen admit`, open loop, one AdmissionReview with a W1 pod and its
{s["group_size"]}-line map, {s["webhook_seconds"]:.0f} s per rate. Through the apiserver: {s["create_latency_pods"]}
pods created open-loop at 50/s in a namespace, first without the webhook registered, then with it.

{_webhook(hooks)}
""")
    for written in ("benchmarks-growth.md", "benchmarks-history.md"):
        path = ROOT / "docs" / written
        if path.exists():
            parts.append(path.read_text())
    parts.append(f"""## Reproduce

```
make bench      # {s["nodes"]} nodes, {s["pods"]} pods, {s["reps"]} repetitions,
                # a storm of {s["storm_pods"]} pods over {s["storm_seconds"]:.0f} s
.venv/bin/python -m bench --nodes 200 --pods 1000 --reps 1 --storm-pods 1000 --storm-seconds 60 \\
    --out /tmp/bench --docs /tmp/bench/benchmarks.md                  # a quicker look
```
""")
    return "\n".join(parts)


def write(results: dict[str, Any], out: pathlib.Path, docs: pathlib.Path | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    write_csv(results["runs"], out / "runs.csv")
    for wl in WORKLOAD_PLOTS:
        plot(results["runs"], wl, out / f"{wl}-bound-over-time.png")
    assets_dir = out if docs is None else docs.parent / docs.stem
    if docs is not None and assets_dir.resolve() != out.resolve():  # --docs X/run.md with --out X/run: in place
        assets_dir.mkdir(parents=True, exist_ok=True)
        for name in ("results.json", "runs.csv", *(f"{wl}-bound-over-time.png" for wl in WORKLOAD_PLOTS)):
            if (out / name).exists():
                shutil.copyfile(out / name, assets_dir / name)
    write_report(results, assets_dir, docs if docs is not None else out / "benchmarks.md")


def write_report(results: dict[str, Any], assets_dir: pathlib.Path, target: pathlib.Path) -> None:
    """The markdown report alone, its links to the run's files (results.json, runs.csv, plots) relative to it."""
    target.write_text(render(results, os.path.relpath(assets_dir, target.parent)))
    print(f"wrote {target}", flush=True)


def main(argv: list[str] | None = None) -> None:
    import argparse

    p = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__)
    p.add_argument("results", nargs="?", type=pathlib.Path, default=ROOT / "docs" / "benchmarks" / "results.json")
    p.add_argument("--docs", type=pathlib.Path, default=ROOT / "docs" / "benchmarks.md")
    args = p.parse_args(argv)
    write_report(json.loads(args.results.read_text()), args.results.parent, args.docs)


if __name__ == "__main__":
    main()
