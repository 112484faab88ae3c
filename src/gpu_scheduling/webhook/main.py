"""`gpu-webhook` entry point: flags are read here and only here; the app (:mod:`gpu_scheduling.webhook.app`) is
served over TLS by :mod:`gpu_scheduling.webhook.transport` until SIGTERM, then drained and closed."""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import ssl

from gpu_scheduling import constants, logs, runtime
from gpu_scheduling.webhook import transport
from gpu_scheduling.webhook.app import make_app
from gpu_scheduling.webhook.metrics import WebhookMetrics
from gpu_scheduling.webhook.transport import GRACEFUL_SECONDS, MAX_CONNECTIONS, SHUTDOWN_DRAIN_SECONDS, Limits

log = logging.getLogger("gpu_scheduling.webhook")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="gpu-webhook",
        description="Mutating admission webhook that sets CUDA_VISIBLE_DEVICES from the gpu-scheduling-map annotation.",
    )
    p.add_argument("--port", type=runtime.port, default=8443, help="HTTPS port (default 8443)")
    p.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    p.add_argument("--tls-cert-file", required=True, help="PEM serving certificate (chain)")
    p.add_argument("--tls-private-key-file", required=True, help="PEM private key")
    p.add_argument(
        "--max-connections",
        type=runtime.integer(1, 100_000),
        default=MAX_CONNECTIONS,
        help=f"open connections at most; at the cap the longest-idle one makes room (default {MAX_CONNECTIONS})",
    )
    p.add_argument(
        "--drain-seconds",
        type=runtime.seconds(0, 3600),
        default=SHUTDOWN_DRAIN_SECONDS,
        help="on SIGTERM, serve on this long while telling clients to go elsewhere (HTTP/2 GOAWAY, HTTP/1.1 "
        f"Connection: close) before closing; busy connections then get {GRACEFUL_SECONDS:g}s more "
        f"(default {SHUTDOWN_DRAIN_SECONDS:g})",
    )
    p.add_argument(
        "--gpu-resource",
        default="",
        help=f"make every container of a map pod ask for this extended resource, one unit per GPU of its entry "
        f"(where gpu-device-plugin serves it, e.g. {constants.GPU_RESOURCE}; default: none)",
    )
    p.add_argument(
        "--isolated-gpus",
        action="store_true",
        help="containers see only their own GPUs (gpu-device-plugin with NVML): CUDA_VISIBLE_DEVICES numbers them "
        "from 0 instead of naming the node's GPU ids",
    )
    logs.add_arguments(p)
    return p.parse_args(argv)


async def run(args: argparse.Namespace, stop: asyncio.Event) -> None:
    ctx = runtime.server_tls(args.tls_cert_file, args.tls_private_key_file, alpn=transport.ALPN)
    metrics = WebhookMetrics()
    started = asyncio.Event()
    task = asyncio.create_task(
        transport.serve(
            make_app(metrics, gpu_resource=args.gpu_resource or None, isolated=args.isolated_gpus),
            metrics,
            args.host,
            args.port,
            ctx,
            stop,
            Limits(max_connections=args.max_connections),
            started,
            drain_seconds=args.drain_seconds,
        )
    )
    await asyncio.wait({task, asyncio.create_task(started.wait())}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()  # raises the error that stopped it
    log.info("gpu-webhook serving HTTPS (h2, http/1.1) on %s:%d", args.host, args.port)
    await task


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logs.configure(args.log_level, args.log_format)
    # Hypercorn's per-connection chatter is debug-level detail for this program.
    logging.getLogger("hypercorn.error").setLevel(max(logging.getLogger().level, logging.WARNING))
    for name in ("hpack", "h2", "h11"):  # frame by frame at debug level: far too much even for debugging
        logging.getLogger(name).setLevel(max(logging.getLogger().level, logging.INFO))
    runtime.run("gpu-webhook", functools.partial(run, args), start_errors=(OSError, ssl.SSLError))


if __name__ == "__main__":
    main()
