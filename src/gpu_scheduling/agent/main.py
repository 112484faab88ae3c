"""`gpu-inventory-agent`: every few seconds, write this node's GpuNodeStatus from NVML (or the simulated
declaration), the node's GPU leases and the map pods bound to it. Touches only the GpuNodeStatus named after its
node. Serves /healthz, /readyz (ready once a sync has written the status) and /metrics (agent.metrics) on
--health-port."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import logging
import os
import pathlib
import time
from typing import Any

from aiohttp import web

from gpu_scheduling import constants, devices, health, logs, runtime
from gpu_scheduling.agent import inventory, nvml
from gpu_scheduling.agent.metrics import AgentMetrics
from gpu_scheduling.agent.publish import write_node_status
from gpu_scheduling.claims import objects
from gpu_scheduling.kube import config as kubeconfig
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.client import Client
from gpu_scheduling.kube.errors import ApiError, TransportError

log = logging.getLogger("gpu_scheduling.agent")


#: Present when NVIDIA's kernel driver is loaded: a node with it has real GPUs, which are never simulated.
DRIVER_VERSION_FILE = "/proc/driver/nvidia/version"


def read_inventory(source: str, node: dict[str, Any], default_simulated: str) -> tuple[dict[str, Any], str]:
    """This node's GpuNodeStatus status with no GPU in use yet, and where it came from ("nvml" or "simulated").

    `nvml` reads the driver's GPUs, and a failure is an InventoryError; `auto` does the same where NVIDIA's driver is
    loaded (a node with real GPUs is never published as simulated ones), and simulates only where it is not."""
    if source in ("auto", "nvml"):
        try:
            return inventory.node_status(nvml.from_nvml(), ()), "nvml"
        except Exception as exc:  # no library, no driver, no GPU
            if source == "nvml" or pathlib.Path(DRIVER_VERSION_FILE).exists():
                raise inventory.InventoryError(
                    f"NVML cannot read this node's GPUs ({type(exc).__name__}: {exc}); with --source {source} and "
                    "an NVIDIA driver here, the agent publishes no simulated inventory instead (give the pod the "
                    "driver: NVIDIA's RuntimeClass and NVIDIA_VISIBLE_DEVICES=all, as the chart's nvml source does)"
                ) from exc
            log.debug("NVML unavailable (%s); using the simulated inventory", exc)
    declared = (node["metadata"].get("annotations") or {}).get(constants.SIMULATED_ANNOTATION, default_simulated)
    return inventory.simulated_status(declared), "simulated"


#: A kubelet view older than this is not published (gpu-device-plugin rewrites it every few seconds).
KUBELET_VIEW_MAX_AGE_S = 60.0


def read_kubelet_view(path: str | None) -> dict[int, list[str]] | None:
    """GPU -> the pods the kubelet gave a device of it to, from the file gpu-device-plugin keeps (its PodResources
    list); None without a file, or when it is stale or unreadable (then no kubeletPods are published at all, rather
    than an empty list that would read as "the kubelet gave nothing")."""
    if not path:
        return None
    try:
        file = pathlib.Path(path)
        if time.time() - file.stat().st_mtime > KUBELET_VIEW_MAX_AGE_S:
            return None
        view = json.loads(file.read_text())
        return devices.kubelet_pods_by_gpu(view["pods"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        log.debug("no kubelet view from %s: %s", path, exc)
        return None


async def sync(
    client: Client, node_name: str, source: str, default_simulated: str, kubelet_view: str | None = None
) -> tuple[dict[str, Any], str]:
    """Write the node's GpuNodeStatus once: the status written, and where its inventory came from."""
    node = await client.get(paths.node(node_name))
    status, used = read_inventory(source, node, default_simulated)
    leases = (await client.get(paths.GPU_LEASES, labelSelector=objects.node_lease_selector(node_name)))["items"]
    # Map pods hold GPUs without a Lease: read them from the pods bound to this node.
    pods = (await client.get(paths.ALL_PODS, fieldSelector=f"spec.nodeName={node_name}"))["items"]
    written = inventory.node_status(status["devices"], leases, pods, read_kubelet_view(kubelet_view))
    await write_node_status(client, node_name, written)
    return written, used


async def run(args: argparse.Namespace, stop: asyncio.Event) -> None:
    async with Client(kubeconfig.load(args.kubeconfig), user_agent="gpu-inventory-agent") as client:
        if args.once:
            await sync(client, args.node_name, args.source, args.simulated)
            return
        metrics = AgentMetrics(args.node_name)
        ready = False
        runner = None
        if args.health_port:
            app = web.Application()
            # Ready once the status is written: until then the scheduler may know nothing of this node's GPUs.
            # A later failed sync leaves it ready (the written status stands; /metrics counts the errors).
            health.add_probes(app, lambda: ready, metrics.registry)
            runner = await health.serve(app, args.health_host, args.health_port)
            log.info("gpu-inventory-agent serving health and metrics on %s:%d", args.health_host, args.health_port)
        try:
            last = ""
            while not stop.is_set():
                started = time.monotonic()
                try:
                    written, used = await sync(
                        client, args.node_name, args.source, args.simulated, args.kubelet_view_file
                    )
                except (ApiError, TransportError, inventory.InventoryError, OSError) as exc:
                    metrics.failed(time.monotonic() - started)
                    log.warning("could not update GpuNodeStatus %s: %s", args.node_name, exc)
                else:
                    metrics.synced(written, used, time.monotonic() - started, time.time())
                    ready = True
                    if used != last:
                        log.info("GpuNodeStatus %s kept from %s inventory", args.node_name, used)
                        last = used
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), args.interval)
        finally:
            if runner is not None:
                await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="gpu-inventory-agent", description=__doc__)
    p.add_argument("--kubeconfig")
    p.add_argument("--node-name", default=os.environ.get(constants.NODE_NAME_ENV), help="default: $NODE_NAME")
    p.add_argument(
        "--source",
        choices=["auto", "nvml", "simulated"],
        default="auto",
        help="auto: NVML when a driver answers, else simulated (default)",
    )
    p.add_argument(
        "--simulated",
        default=inventory.DEFAULT_SIMULATED,
        help=f"simulated inventory when the node has no {constants.SIMULATED_ANNOTATION} annotation",
    )
    p.add_argument(
        "--interval", type=runtime.seconds(0.1, 3600), default=10.0, help="seconds between updates (default 10)"
    )
    p.add_argument(
        "--kubelet-view-file",
        help="the kubelet's device assignments as gpu-device-plugin writes them: published per GPU as kubeletPods",
    )
    p.add_argument("--once", action="store_true", help="write the GpuNodeStatus once and exit (serves nothing)")
    p.add_argument(
        "--health-port",
        type=runtime.optional_port,
        default=8080,
        help="port of /healthz, /readyz and /metrics (default 8080; 0: no health server)",
    )
    p.add_argument("--health-host", default="0.0.0.0", help="address of the health server (default 0.0.0.0)")
    p.add_argument("--print", action="store_true", help="print this machine's inventory as JSON and exit")
    logs.add_arguments(p)
    args = p.parse_args(argv)
    logs.configure(args.log_level, args.log_format)
    if args.print:
        try:
            status, used = read_inventory(args.source, {"metadata": {}}, args.simulated)
        except inventory.InventoryError as exc:
            raise SystemExit(f"gpu-inventory-agent: --simulated {exc}") from None
        print(json.dumps({"source": used, **status}, indent=2))
        return
    if not args.node_name:
        raise SystemExit("gpu-inventory-agent: --node-name or NODE_NAME is required")
    runtime.run("gpu-inventory-agent", functools.partial(run, args))


if __name__ == "__main__":
    main()
