"""What gpu-webhook counts, as prometheus_client metrics in a registry of its own (rendered on its /metrics by
:func:`gpu_scheduling.health.render_metrics`). The app counts requests and answers, the transport connections.
Imports no server."""

from __future__ import annotations

import prometheus_client

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
#: In gpu_webhook_too_large_total's help; the app's default body limit.
MAX_BODY_BYTES = 3 * 1024 * 1024  # the apiserver's own request limit for objects is ~3 MiB


class WebhookMetrics:
    """The webhook's families, each in :attr:`registry`."""

    def __init__(self) -> None:
        self.registry = prometheus_client.CollectorRegistry()
        r = self.registry
        self.requests = prometheus_client.Counter("gpu_webhook_requests", "Admission requests answered.", registry=r)
        self.patched = prometheus_client.Counter("gpu_webhook_patched", "Pods given CUDA_VISIBLE_DEVICES.", registry=r)
        self.denied = prometheus_client.Counter("gpu_webhook_denied", "Pods refused with a message.", registry=r)
        self.bad_requests = prometheus_client.Counter(
            "gpu_webhook_bad_requests",
            "Bodies that were not AdmissionReviews, too large or too slow (HTTP 4xx).",
            registry=r,
        )
        self.errors = prometheus_client.Counter("gpu_webhook_errors", "Unexpected errors (HTTP 500).", registry=r)
        self.too_large = prometheus_client.Counter(
            "gpu_webhook_too_large", f"Bodies over {MAX_BODY_BYTES} bytes (HTTP 413).", registry=r
        )
        self.timeouts = prometheus_client.Counter(
            "gpu_webhook_timeouts", "Bodies not received in time (HTTP 408).", registry=r
        )
        self.disconnects = prometheus_client.Counter(
            "gpu_webhook_client_disconnects", "Clients gone before their answer.", registry=r
        )
        self.connections_refused = prometheus_client.Counter(
            "gpu_webhook_connections_refused",
            "Connections closed at once because the cap was reached with none idle.",
            registry=r,
        )
        self.connections_evicted = prometheus_client.Counter(
            "gpu_webhook_connections_evicted", "Idle connections closed to make room under the cap.", registry=r
        )
        self.open_connections = prometheus_client.Gauge(
            "gpu_webhook_open_connections", "Open client connections.", registry=r
        )
        self.largest_response_bytes = prometheus_client.Gauge(
            "gpu_webhook_largest_response_bytes", "Largest /mutate answer so far.", registry=r
        )
        self.connections = prometheus_client.Counter(
            "gpu_webhook_connections",
            "Client connections accepted, by protocol (ALPN).",
            ["protocol"],
            registry=r,
        )
        for protocol in ("h2", "http/1.1"):  # both shown from the start, at 0
            self.connections.labels(protocol)
        self.duration = prometheus_client.Histogram(
            "gpu_webhook_request_duration_seconds",
            "Time from the start of a /mutate request to its answer.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self._largest = 0

    def response_size(self, size: int) -> None:
        """A /mutate answer of `size` bytes is going out."""
        if size > self._largest:
            self._largest = size
            self.largest_response_bytes.set(size)
