#!/usr/bin/env python3
"""gpu-device-plugin on a machine without Kubernetes, against the stand-in kubelet (harness/kubelet_standin.py): what
it discovers, the health it reports, the devices and UUIDs it answers for chosen GPUs, and how long Allocate takes.

On a machine with NVIDIA GPUs (`--source nvml`) this checks the plugin's answer against nvidia-smi, not enforcement
(no kubelet or container runtime runs). With `--source simulated` it runs anywhere and times the same path.

Usage: PYTHONPATH=src:. python3 hack/device-check.py --source nvml [--admissions 400] [--out report.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))  # harness/, beside src/

from gpu_scheduling import constants, devices
from gpu_scheduling.agent.deviceplugin import DevicePlugin, Inventory, Kubelet
from harness.kubelet_standin import Rejected, StandinKubelet

NODE = "gpu-node"


def pod(name: str, gpus: list[int], containers: int = 1) -> dict[str, Any]:
    units = {"resources": {"limits": {constants.GPU_RESOURCE: str(len(gpus))}}}
    return {
        "metadata": {
            "namespace": "check",
            "name": name,
            "uid": f"uid-{name}",
            "labels": {constants.POD_INDEX_LABEL: "0"},
            "annotations": {constants.MAP_ANNOTATION: f"0={NODE}:{','.join(map(str, gpus))}"},
        },
        "spec": {"nodeName": NODE, "containers": [{"name": f"c{i}", **units} for i in range(containers)]},
    }


def nvidia_smi() -> dict[int, str]:
    """index -> UUID as nvidia-smi reports them (the driver's own tool, independent of the plugin's NVML calls)."""
    if shutil.which("nvidia-smi") is None:
        return {}
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"], capture_output=True, text=True, check=True
    ).stdout
    return {int(i): u.strip() for i, u in (line.split(",") for line in out.strip().splitlines())}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def check(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {"source": args.source, "checks": []}
    failures: list[str] = []

    def expect(ok: bool, what: str) -> None:
        report["checks"].append({"ok": ok, "what": what})
        if not ok:
            failures.append(what)

    folder = pathlib.Path(tempfile.mkdtemp(prefix="dp-"))
    kubelet = StandinKubelet(folder)
    await kubelet.start()
    files = str(folder / "files") if args.source == "simulated" else None
    inv = Inventory(args.source, NODE, "count=4", files)
    plugin = DevicePlugin(
        None,
        Kubelet(str(folder), str(kubelet.pod_resources_socket)),
        inv,
        resource=constants.GPU_RESOURCE,
        slots=args.slots,
        socket_name="gpu-scheduling.sock",
    )
    stop = asyncio.Event()
    started = time.perf_counter()
    task = asyncio.create_task(plugin.run(stop, 1.0))
    try:
        advertised = await kubelet.wait_devices(30)
        report["registered_and_listed_s"] = round(time.perf_counter() - started, 3)
        report["gpus"] = [
            {
                **{k: g[k] for k in ("id", "health", "island", "bandwidthGBps") if k in g},
                "uuid": inv.identity[g["id"]].uuid,
                "minor": inv.identity[g["id"]].minor,
            }
            for g in inv.gpus
        ]
        report["control_devices"] = inv.control
        report["advertised"] = len(advertised)
        expect(len(advertised) == len(inv.gpus) * args.slots, f"{len(inv.gpus)} GPUs x {args.slots} slots advertised")
        expect(bool(inv.gpus), "at least one GPU discovered")
        smi = nvidia_smi() if args.source == "nvml" else {}
        report["nvidia_smi"] = smi
        if args.source == "nvml":
            expect(
                smi == {i: g.uuid for i, g in inv.identity.items()},
                "the plugin's GPU UUIDs equal nvidia-smi's, index by index",
            )
        health = {g["id"]: g["health"] for g in inv.gpus}
        for gid, state in health.items():
            slots = {h for i, h in advertised.items() if devices.gpu_of(i) == gid}
            expect(slots == {state}, f"GPU {gid}: its slots are reported {state} as NVML reads it")
        # Each GPU alone, then every GPU in one pod of two containers.
        answers = []
        plans = [[g] for g in sorted(health)] + ([sorted(health)] if len(health) > 1 else [])
        for n, gpus in enumerate(plans):
            p = pod(f"chosen-{n}", gpus, containers=2 if len(gpus) > 1 else 1)
            want = devices.wanted(p)
            assert want is not None
            plugin.pods[f"check/{p['metadata']['name']}"] = want
            admitted = await kubelet.admit(p)
            for container, response in admitted.responses.items():
                uuids = response.envs.get(constants.NVIDIA_DEVICES_ENV, "")
                nodes = sorted(d.host_path for d in response.devices)
                answers.append(
                    {
                        "gpus": gpus,
                        "container": container,
                        "NVIDIA_VISIBLE_DEVICES": uuids,
                        constants.DEVICE_GPUS_ENV: response.envs.get(constants.DEVICE_GPUS_ENV),
                        "devices": nodes,
                        "mounts": sorted(m.host_path for m in response.mounts),
                    }
                )
                expect(
                    uuids == ",".join(inv.identity[g].uuid for g in gpus),
                    f"{gpus} {container}: UUIDs of exactly those GPUs",
                )
                if args.source == "nvml":
                    wanted_nodes = {f"/dev/nvidia{inv.identity[g].minor}" for g in gpus}
                    gpu_nodes = {d for d in nodes if d[len("/dev/nvidia") :].isdigit()}
                    expect(gpu_nodes == wanted_nodes, f"{gpus} {container}: device nodes {sorted(wanted_nodes)} only")
                    expect(set(inv.control) <= set(nodes), f"{gpus} {container}: the control devices")
            kubelet.forget("check", p["metadata"]["name"])
        report["answers"] = answers
        # A pod that was given no GPU is refused.
        stray = pod("stray", [0])
        del stray["metadata"]["annotations"][constants.MAP_ANNOTATION]
        plugin.pods["check/stray"] = devices.wanted(stray)  # type: ignore[assignment]
        try:
            await kubelet.admit(stray)
            expect(False, "a pod given no GPU is refused")
        except Rejected as exc:
            expect("gave it no GPU" in str(exc), "a pod given no GPU is refused")
        del plugin.pods["check/stray"]
        # Latency: many admissions, one at a time as the kubelet makes them, each pod ending after.
        kubelet.allocate_seconds.clear()
        gpu_ids = sorted(health)
        t0 = time.perf_counter()
        for n in range(args.admissions):
            p = pod(f"load-{n}", [gpu_ids[n % len(gpu_ids)]])
            plugin.pods[f"check/load-{n}"] = devices.wanted(p)  # type: ignore[assignment]
            await kubelet.admit(p)
            kubelet.forget("check", f"load-{n}")
            del plugin.pods[f"check/load-{n}"]
        elapsed = time.perf_counter() - t0
        ms = [s * 1000 for s in kubelet.allocate_seconds]
        report["allocate_ms"] = {
            "n": len(ms),
            "p50": round(statistics.median(ms), 2),
            "p99": round(percentile(ms, 0.99), 2),
            "max": round(max(ms), 2),
        }
        report["admissions_per_s"] = round(args.admissions / elapsed, 1)
    finally:
        stop.set()
        await task
        await kubelet.stop()
        shutil.rmtree(folder, ignore_errors=True)
    report["failures"] = failures
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", choices=["nvml", "simulated"], default="nvml")
    parser.add_argument("--slots", type=int, default=constants.DEVICE_SLOTS_DEFAULT)
    parser.add_argument("--admissions", type=int, default=400)
    parser.add_argument("--out", help="also write the report here")
    args = parser.parse_args()
    report = asyncio.run(check(args))
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        pathlib.Path(args.out).write_text(text + "\n")
    print(f"device-check: {len(report['failures'])} failure(s) on {os.uname().nodename}", file=sys.stderr)
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
