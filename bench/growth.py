"""How the cost grows with the cluster: W1, W2 and W3 at several sizes, from the results of separate benchmark runs
(one `python -m bench --nodes N --pods 5N` per size, possibly in different sessions; the full `make bench` is one of
them), in one table and one plot. Each row names the run (its folder and start time) that produced it; the runs'
other workloads (W4) are left out unless named.

    python -m bench.growth OUT_DIR... --docs docs/benchmarks-growth.md --plot docs/benchmarks/growth.png
"""

from __future__ import annotations

import argparse
import datetime
import json
import pathlib
import statistics
from collections import defaultdict
from typing import Any

from bench.report import COLOURS

COLUMNS = ("pods/s", "p99 ms", "scheduler CPU ms/pod", "scheduler RSS MiB", "apiserver CPU ms/pod")
"""Each a median over the repetitions; p99 is the pods' create→bound latency (W3: every member's)."""
DIGITS = {"p99 ms": 0}
WORKLOADS = ("w1", "w2", "w3")


def rows(result_files: list[pathlib.Path], workloads: tuple[str, ...] = WORKLOADS) -> list[dict[str, Any]]:
    """One row per (workload, contender, nodes) of the named workloads: the median over its repetitions."""
    grouped: dict[tuple[str, str, int], list[dict[str, Any]]] = defaultdict(list)
    source: dict[tuple[str, str, int], str] = {}
    for path in result_files:
        results = json.loads(path.read_text())
        for run in results["runs"]:
            if run["workload"] not in workloads:
                continue
            key = (run["workload"], run["contender"], int(run["nodes"]))
            grouped[key].append(run)
            started = datetime.datetime.fromtimestamp(results["started"], datetime.UTC)
            source[key] = f"`{path.parent.name}`, {started:%Y-%m-%d %H:%M} UTC"
    out = []
    for (wl, contender, nodes), runs in sorted(grouped.items()):
        pods = runs[0]["pods"]

        def median(values: list[float]) -> float:
            return statistics.median(values) if values else float("nan")

        out.append(
            {
                "workload": wl,
                "contender": contender,
                "nodes": nodes,
                "pods": pods,
                "pods/s": median([r["throughput"] for r in runs]),
                "p99 ms": median([r["latency_p99_ms"] for r in runs]),
                "scheduler CPU ms/pod": median([r["cpu_seconds"].get("scheduler", 0) * 1000 / pods for r in runs]),
                "scheduler RSS MiB": median([r["peak_rss_mib"].get("scheduler", 0) for r in runs]),
                "apiserver CPU ms/pod": median([r["cpu_seconds"]["kube-apiserver"] * 1000 / pods for r in runs]),
                "bound": min(r["bound"] for r in runs),
                "reps": len(runs),
                "run": source[(wl, contender, nodes)],
            }
        )
    return out


def table(found: list[dict[str, Any]]) -> str:
    lines = [
        "| workload | contender | nodes | pods (bound) | " + " | ".join(COLUMNS) + " | run |",
        "|---|---|---|---|" + "---|" * len(COLUMNS) + "---|",
    ]
    for r in found:
        cells = " | ".join(f"{r[c]:.{DIGITS.get(c, 1)}f}" for c in COLUMNS)
        lines.append(
            f"| {r['workload']} | {r['contender']} | {r['nodes']} | {r['pods']} ({r['bound']}) | {cells} | {r['run']} |"
        )
    return "\n".join(lines)


def plot(found: list[dict[str, Any]], path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = sorted({r["workload"] for r in found})
    sizes = sorted({r["nodes"] for r in found})
    fig, axes = plt.subplots(
        len(workloads), len(COLUMNS), figsize=(4 * len(COLUMNS), 3.5 * len(workloads)), squeeze=False
    )
    for row, wl in enumerate(workloads):
        for col, column in enumerate(COLUMNS):
            ax = axes[row][col]
            for contender in sorted({r["contender"] for r in found if r["workload"] == wl}):
                points = sorted(
                    (r["nodes"], r[column]) for r in found if r["workload"] == wl and r["contender"] == contender
                )
                xs, ys = [p[0] for p in points], [p[1] for p in points]
                ax.plot(xs, ys, marker="o", label=contender, color=COLOURS.get(contender))
            ax.set_xscale("log")
            ax.set_xticks(sizes, [str(n) for n in sizes])
            ax.minorticks_off()
            if column == "p99 ms":
                ax.set_yscale("log")
            ax.set_title(f"{wl.upper()}: {column}")
            ax.set_xlabel("nodes (W1, W2: 5 pods per node)")
            if col == 0:
                ax.legend(fontsize="small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.growth", description=__doc__)
    p.add_argument("outs", nargs="+", type=pathlib.Path, help="benchmark output folders (each has results.json)")
    p.add_argument("--docs", type=pathlib.Path, help="write the table here (markdown)")
    p.add_argument("--plot", type=pathlib.Path, help="write the plot here (PNG)")
    p.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated, of the runs' workloads")
    args = p.parse_args(argv)
    found = rows([out / "results.json" for out in args.outs], tuple(args.workloads.split(",")))
    text = table(found)
    print(text)
    if args.docs:
        args.docs.write_text(text + "\n")
    if args.plot:
        plot(found, args.plot)


if __name__ == "__main__":
    main()
