"""A tiny HTTP server for liveness/readiness probes and Prometheus metrics, shared by the long-running programs."""

from __future__ import annotations

import ssl
from collections.abc import Callable

from aiohttp import web


def add_probes(app: web.Application, ready: Callable[[], bool], metrics: Callable[[], str] | None = None) -> None:
    """`/healthz` answers while the event loop runs; `/readyz` once `ready()`; `/metrics` when given."""

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        if ready():
            return web.Response(text="ok\n")
        return web.Response(status=503, text="not ready\n")

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    if metrics is not None:

        async def metrics_handler(_: web.Request) -> web.Response:
            return web.Response(text=metrics(), content_type="text/plain", charset="utf-8")

        app.router.add_get("/metrics", metrics_handler)


async def serve(app: web.Application, host: str, port: int, ssl_context: ssl.SSLContext | None = None) -> web.AppRunner:
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context, reuse_address=True)
    await site.start()
    return runner
