"""A tiny HTTP server for liveness/readiness probes and Prometheus metrics, shared by the long-running programs.

:func:`render_metrics` is also what the webhook's own server renders /metrics with; aiohttp is imported only where
a server of this module is made, so that the webhook (served by Hypercorn) does not load it.
"""

from __future__ import annotations

import copy
import ssl
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import prometheus_client
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from aiohttp import web

# Families whose samples prometheus_client follows with a `<name>_created` timestamp (one more series per label set,
# which the text format exposes as a gauge family of its own): left out of what /metrics renders.
_WITH_CREATED = frozenset({"counter", "histogram", "summary"})


class _WithoutCreated(Collector):
    """`registry` as /metrics renders it: without the `_created` samples (a per-registry choice, unlike
    `prometheus_client.disable_created_metrics()`, which changes every registry in the process)."""

    def __init__(self, registry: Collector) -> None:
        self._registry = registry

    def collect(self) -> Iterable[Metric]:
        for metric in self._registry.collect():
            if metric.type in _WITH_CREATED:
                created = metric.name + "_created"
                kept = copy.copy(metric)
                kept.samples = [s for s in metric.samples if s.name != created]
                yield kept
            else:
                yield metric


def render_metrics(registry: prometheus_client.CollectorRegistry, accept: str | None) -> tuple[bytes, str]:
    """The exposition of `registry` in the format the `Accept` header asks for (OpenMetrics or the text format 0.0.4),
    and its content type. The `_created` series prometheus_client keeps for counters and histograms are left out."""
    encoder, content_type = choose_encoder(accept or "")
    return encoder(_WithoutCreated(registry)), content_type


def metrics_response(request: web.Request, registry: prometheus_client.CollectorRegistry) -> web.Response:
    """A `/metrics` answer for `request`: `registry` rendered as its `Accept` header asks."""
    from aiohttp import web

    body, content_type = render_metrics(registry, request.headers.get("Accept"))
    return web.Response(body=body, headers={"Content-Type": content_type})


def add_probes(
    app: web.Application,
    ready: Callable[[], bool],
    registry: prometheus_client.CollectorRegistry | None = None,
) -> None:
    """`/healthz` answers while the event loop runs; `/readyz` once `ready()`; `/metrics` renders `registry` when
    given (OpenMetrics when the scraper's `Accept` header asks for it, else the Prometheus text format)."""
    from aiohttp import web

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        if ready():
            return web.Response(text="ok\n")
        return web.Response(status=503, text="not ready\n")

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    if registry is not None:
        metrics_registry = registry

        async def metrics_handler(request: web.Request) -> web.Response:
            return metrics_response(request, metrics_registry)

        app.router.add_get("/metrics", metrics_handler)


async def serve(app: web.Application, host: str, port: int, ssl_context: ssl.SSLContext | None = None) -> web.AppRunner:
    from aiohttp import web

    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context, reuse_address=True)
    await site.start()
    return runner
