"""`gpu-scheduler` entry point: flags and environment are read here and only here."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal

from aiohttp import web

from gpu_scheduling import constants, health
from gpu_scheduling.kube import config as kubeconfig
from gpu_scheduling.kube.client import Client
from gpu_scheduling.scheduler.controller import Scheduler, SchedulerConfig

log = logging.getLogger("gpu_scheduling.scheduler")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="gpu-scheduler",
        description="Bind pods of this scheduler to the node their index maps to in the gpu-scheduling-map annotation.",
    )
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)")
    p.add_argument("--scheduler-name", default=os.environ.get(constants.SCHEDULER_NAME_ENV,
                                                              constants.DEFAULT_SCHEDULER_NAME),
                   help="spec.schedulerName to serve (default: $SCHEDULER_NAME or gpu-scheduler)")
    p.add_argument("--health-port", type=int, default=8080, help="port of /healthz, /readyz, /metrics (default 8080)")
    p.add_argument("--health-host", default="0.0.0.0", help="address of the health server (default 0.0.0.0)")
    p.add_argument("--workers", type=int, default=SchedulerConfig.workers, help="concurrent bind workers")
    p.add_argument("--qps", type=float, default=0, help="client-side API rate limit, requests/s (0: none)")
    p.add_argument("--burst", type=int, default=100, help="client-side API burst (with --qps)")
    p.add_argument("--log-level", default=os.environ.get("LOG_LEVEL", "INFO"))
    return p.parse_args(argv)


async def run(args: argparse.Namespace) -> None:
    cfg = kubeconfig.load(args.kubeconfig)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with Client(cfg, qps=args.qps, burst=args.burst, connections=max(64, args.workers * 2),
                      user_agent=f"{args.scheduler_name}") as client:
        scheduler = Scheduler(client, SchedulerConfig(name=args.scheduler_name, workers=args.workers))
        app = web.Application()
        health.add_probes(app, scheduler.ready, scheduler.metrics.render)
        runner = await health.serve(app, args.health_host, args.health_port)
        log.info("gpu-scheduler %s serving health on %s:%d", args.scheduler_name, args.health_host, args.health_port)
        main = asyncio.create_task(scheduler.run())
        stopper = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait({main, stopper}, return_when=asyncio.FIRST_COMPLETED)
        main.cancel()
        stopper.cancel()
        if main in done and main.exception():
            raise main.exception()  # type: ignore[misc]
        await runner.cleanup()
        log.info("gpu-scheduler stopped")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(run(args))
    except kubeconfig.ConfigError as exc:
        raise SystemExit(f"gpu-scheduler: {exc}") from None


if __name__ == "__main__":
    main()
