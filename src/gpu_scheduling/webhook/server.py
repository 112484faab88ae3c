"""HTTPS server for the mutating webhook: `POST /mutate`, `GET /healthz`, `GET /readyz`, `GET /metrics`.

HTTP/2 (ALPN `h2`) and HTTP/1.1 on one TLS port, served by Hypercorn (h2 and h11 under a plain ASGI app): the
kube-apiserver keeps one multiplexed HTTP/2 connection to a webhook that offers it instead of handshaking TLS again
and again.

The decision itself lives in :mod:`gpu_scheduling.admission`; this module only moves bytes and keeps serving
whatever a client sends: a body that is not an AdmissionReview is answered 400, one over MAX_BODY_BYTES 413 (without
reading it), one that does not arrive within BODY_TIMEOUT 408; an unexpected error is logged and answered 500 (a
bug). Connections are bounded in number, in the time their headers and bodies may take and in idle time; a client
that goes away is logged at debug level.

Stopping (SIGTERM) drains before it closes, because the apiserver may still be sending on a connection it holds:
for `drain_seconds` everything is still served, a new connection included, while every HTTP/2 connection gets a
GOAWAY that says "open no more streams here" (last stream id 2^31-1, RFC 9113 section 6.8) and every HTTP/1.1
answer says `Connection: close`; then Hypercorn's own shutdown (`terminated`): the listener closes, a stream opened
after that is refused with REFUSED_STREAM (the client may send it again elsewhere), an idle connection gets a GOAWAY
with its real last stream and closes, a busy one after its answers, within GRACEFUL_SECONDS.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import concurrent.futures
import contextlib
import dataclasses
import json
import logging
import signal
import ssl
import time
from typing import TYPE_CHECKING, Any, ClassVar

import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import hypercorn.protocol
import prometheus_client
from hypercorn.asyncio.tcp_server import MAX_RECV, TCPServer
from hypercorn.asyncio.worker_context import WorkerContext
from hypercorn.config import Config
from hypercorn.events import Closed, Event, RawData, Updated
from hypercorn.protocol.events import Response
from hypercorn.protocol.h2 import H2Protocol
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.utils import wrap_app
from hyperframe.frame import GoAwayFrame
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from gpu_scheduling import admission, constants, health, logs

if TYPE_CHECKING:
    from collections.abc import Iterable

    from hypercorn.protocol.events import Event as StreamEvent
    from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, HTTPScope, Scope

log = logging.getLogger("gpu_scheduling.webhook")

# Limits (see docs/gpu-webhook.md, "Bounded answers" and "Limits").
MAX_BODY_BYTES = 3 * 1024 * 1024  # the apiserver's own request limit for objects is ~3 MiB
MAX_HEADER_BYTES = 16 * 1024  # request line and headers (HTTP/1.1); header list (HTTP/2)
HEADER_TIMEOUT = 10.0  # first byte of a request to the end of its headers (HTTP/1.1)
BODY_TIMEOUT = 10.0  # start of a request to the end of its body
IDLE_TIMEOUT = 60.0  # keep-alive: a connection with no request in flight (HTTP/2: no open stream) is closed
TLS_HANDSHAKE_TIMEOUT = 10.0
TLS_SHUTDOWN_TIMEOUT = 5.0  # wait for the client's close_notify at most this long
MAX_CONNECTIONS = 256  # at the cap the longest-idle connection makes room; if none is idle, the new one is closed
MAX_REQUESTS_PER_CONNECTION = 10_000
MAX_STREAMS = 100  # concurrent HTTP/2 streams per connection (RFC 9113 recommends no fewer than 100)
BODY_BUDGET_BYTES = 16 * 1024 * 1024  # request bodies buffered at once, all connections together (memory limit)
LARGE_BODY_BYTES = 64 * 1024  # larger bodies are decided in one worker thread, one at a time (memory, event loop)
GRACEFUL_SECONDS = 5.0  # after the drain: busy connections get this long to finish their answers, then are dropped
SHUTDOWN_DRAIN_SECONDS = 2.0  # on SIGTERM: serve on this long while telling clients to go elsewhere (--drain-seconds)
DRAIN_SECONDS = 5.0  # after an HTTP/1.1 413, read and drop the rest of the body for at most this long...
DRAIN_BYTES = 16 * 1024 * 1024  # ...and this many bytes, then close

# TLS 1.2 with ECDHE key exchange and AEAD ciphers only (no CBC, no RSA key exchange); TLS 1.3 suites are all AEAD.
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"
ALPN = ["h2", "http/1.1"]
# "Open no more streams": a GOAWAY whose last stream id is the highest there is, so that none the client has sent or
# is sending counts as unprocessed (RFC 9113 section 6.8, graceful shutdown). Written as bytes, not through h2's
# close_connection(), which would put the connection in a state where it refuses the streams still to come.
GOAWAY_DRAIN = GoAwayFrame(0, last_stream_id=2**31 - 1, error_code=h2.errors.ErrorCodes.NO_ERROR).serialize()

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


@dataclasses.dataclass
class WebhookMetrics:
    """What the webhook counts, in plain attributes the server moves as it works; :attr:`registry` renders them
    through prometheus_client when /metrics is asked for (nothing is kept twice)."""

    requests: int = 0
    patched: int = 0
    denied: int = 0
    bad_requests: int = 0
    errors: int = 0
    seconds_sum: float = 0.0
    too_large: int = 0
    timeouts: int = 0
    disconnects: int = 0
    connections: int = 0
    connections_h2: int = 0
    connections_h1: int = 0
    connections_refused: int = 0
    connections_evicted: int = 0
    largest_response_bytes: int = 0
    bucket_counts: list[int] = dataclasses.field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    registry: prometheus_client.CollectorRegistry = dataclasses.field(
        init=False, repr=False, compare=False, default_factory=prometheus_client.CollectorRegistry
    )

    def __post_init__(self) -> None:
        self.registry.register(_WebhookCollector(self))

    def observe(self, seconds: float) -> None:
        self.seconds_sum += seconds
        self.bucket_counts[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1


class _WebhookCollector(Collector):
    """The families of a WebhookMetrics, read from its attributes at scrape time."""

    def __init__(self, metrics: WebhookMetrics) -> None:
        self._m = metrics

    def describe(self) -> Iterable[Metric]:
        return self.collect()

    def collect(self) -> Iterable[Metric]:
        m = self._m
        counters = [
            ("gpu_webhook_requests_total", "Admission requests answered.", m.requests),
            ("gpu_webhook_patched_total", "Pods given CUDA_VISIBLE_DEVICES.", m.patched),
            ("gpu_webhook_denied_total", "Pods refused with a message.", m.denied),
            (
                "gpu_webhook_bad_requests_total",
                "Bodies that were not AdmissionReviews, too large or too slow (HTTP 4xx).",
                m.bad_requests,
            ),
            ("gpu_webhook_errors_total", "Unexpected errors (HTTP 500).", m.errors),
            ("gpu_webhook_too_large_total", f"Bodies over {MAX_BODY_BYTES} bytes (HTTP 413).", m.too_large),
            ("gpu_webhook_timeouts_total", "Bodies not received in time (HTTP 408).", m.timeouts),
            ("gpu_webhook_client_disconnects_total", "Clients gone before their answer.", m.disconnects),
            (
                "gpu_webhook_connections_refused_total",
                "Connections closed at once because the cap was reached with none idle.",
                m.connections_refused,
            ),
            (
                "gpu_webhook_connections_evicted_total",
                "Idle connections closed to make room under the cap.",
                m.connections_evicted,
            ),
        ]
        families: list[Metric] = [CounterMetricFamily(n, h, value=v) for n, h, v in counters]
        families.append(GaugeMetricFamily("gpu_webhook_open_connections", "Open client connections.", m.connections))
        families.append(
            GaugeMetricFamily(
                "gpu_webhook_largest_response_bytes", "Largest /mutate answer so far.", m.largest_response_bytes
            )
        )
        accepted = CounterMetricFamily(
            "gpu_webhook_connections_total", "Client connections accepted, by protocol (ALPN).", labels=["protocol"]
        )
        accepted.add_metric(["h2"], m.connections_h2)
        accepted.add_metric(["http/1.1"], m.connections_h1)
        families.append(accepted)
        cumulative, buckets = 0, []
        for le, count in zip((*map(str, LATENCY_BUCKETS), "+Inf"), m.bucket_counts, strict=True):
            cumulative += count
            buckets.append((le, cumulative))
        families.append(
            HistogramMetricFamily(
                "gpu_webhook_request_duration_seconds",
                "Time from the start of a /mutate request to its answer.",
                buckets=buckets,
                sum_value=m.seconds_sum,
            )
        )
        return families


class _BodyBudget:
    """Bytes of request bodies held at once by all requests together; a request waits (within its body deadline)
    for room instead of pushing the process past its memory limit. Event-loop only (no lock needed)."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.free = capacity, capacity
        self._waiters: list[asyncio.Future[None]] = []

    async def take(self, n: int) -> None:
        while self.free < n:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        self.free -= n

    def give(self, n: int) -> None:
        self.free += n
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:  # each checks again whether there is room for it
            if not waiter.done():
                waiter.set_result(None)


class _Answer(Exception):
    """Stop reading the request and answer `status` (and close the connection when `close`)."""

    def __init__(self, status: int, message: str, close: bool = False) -> None:
        super().__init__(message)
        self.status, self.message, self.close = status, message, close


class _Gone(Exception):
    """The client went away."""


def _json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class WebhookApp:
    """The ASGI application: routes, body limits and the admission decision."""

    ROUTES: ClassVar[dict[str, tuple[str, ...]]] = {
        "/mutate": ("POST",),
        "/healthz": ("GET", "HEAD"),
        "/readyz": ("GET", "HEAD"),
        "/metrics": ("GET", "HEAD"),
    }

    def __init__(
        self,
        metrics: WebhookMetrics | None = None,
        *,
        max_body: int = MAX_BODY_BYTES,
        body_timeout: float = BODY_TIMEOUT,
        body_budget: int = BODY_BUDGET_BYTES,
        gpu_resource: str | None = None,
        isolated: bool = False,
    ) -> None:
        self.metrics = metrics or WebhookMetrics()
        self.gpu_resource, self.isolated = gpu_resource, isolated
        self.max_body, self.body_timeout = max_body, body_timeout
        self._budget_bytes = body_budget
        self._budget: _BodyBudget | None = None
        self._large: concurrent.futures.ThreadPoolExecutor | None = None

    async def __call__(self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        if scope["type"] != "http":  # websocket: refuse (lifespan is never run by serve())
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008, "reason": None})
            return
        try:
            await self._route(scope, receive, send)
        except _Gone:
            self.metrics.disconnects += 1
            log.debug("client %s went away before its answer", _peer(scope))
        except Exception:  # a bug: answer 500 if we still can, keep serving
            self.metrics.errors += 1
            log.exception(
                "unexpected error answering an admission request (%s %s)", scope.get("method"), scope.get("path")
            )
            with contextlib.suppress(Exception):
                await self._send(send, 500, _json({"error": "internal error, see the webhook's log"}))

    async def _route(self, scope: HTTPScope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        path, method = scope["path"], scope["method"]
        allowed = self.ROUTES.get(path)
        if allowed is None:
            await self._send(send, 404, b"not found\n", "text/plain; charset=utf-8")
            return
        if method not in allowed:
            await self._send(
                send,
                405,
                b"method not allowed\n",
                "text/plain; charset=utf-8",
                [(b"allow", ", ".join(allowed).encode())],
            )
            return
        if path == "/mutate":
            await self._mutate(scope, receive, send)
            return
        if path == "/metrics":
            accept = b", ".join(value for name, value in scope["headers"] if name == b"accept").decode("latin-1")
            text, ctype = health.render_metrics(self.metrics.registry, accept)
        else:
            text, ctype = b"ok\n", "text/plain; charset=utf-8"
        await self._send(send, 200, b"" if method == "HEAD" else text, ctype)

    async def _mutate(self, scope: HTTPScope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        started = time.perf_counter()
        try:
            body = await self._read_body(scope, receive)
        except _Answer as answer:
            self.metrics.bad_requests += 1
            log.debug("request from %s answered %d: %s", _peer(scope), answer.status, answer)
            if answer.status == 413:
                await self._refuse_and_drain(scope, receive, send, answer)
            else:
                await self._send(
                    send,
                    answer.status,
                    _json({"error": answer.message}),
                    extra=[(b"connection", b"close")] if answer.close and scope["http_version"] < "2" else (),
                )
            return
        try:
            if len(body) > LARGE_BODY_BYTES:
                # A large body takes a while to parse: in a thread, so that the event loop (and /healthz) goes on,
                # and one at a time, so that their parsed forms do not add up past the memory limit.
                if self._large is None:
                    self._large = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="decide-large")
                review = await asyncio.get_running_loop().run_in_executor(self._large, _decide, body, self.gpu_resource)
            else:
                review = _decide(body, self.gpu_resource)
        except admission.BadRequest as exc:
            self.metrics.bad_requests += 1
            log.warning("bad admission request from %s: %s", _peer(scope), exc)
            await self._send(send, 400, _json({"error": str(exc)}))
            return
        out = admission.encode_review(review)
        response = review["response"]
        self.metrics.requests += 1
        if not response.get("allowed"):
            self.metrics.denied += 1
            log.info("denied %s: %s", response.get("uid"), (response.get("status") or {}).get("message"))
        elif "patch" in response:
            self.metrics.patched += 1
        self.metrics.largest_response_bytes = max(self.metrics.largest_response_bytes, len(out))
        await self._send(send, 200, out)
        self.metrics.observe(time.perf_counter() - started)

    async def _read_body(self, scope: HTTPScope, receive: ASGIReceiveCallable) -> bytes:
        declared = None
        for name, value in scope["headers"]:
            if name == b"content-length":
                # h11 and h2 already refuse a malformed or disagreeing Content-Length.
                declared = int(value) if value.isdigit() and len(value) <= 12 else None
        if declared is not None and declared > self.max_body:
            self.metrics.too_large += 1
            raise _Answer(413, f"body of {declared} bytes is over the limit of {self.max_body}", close=True)
        if self._budget is None:
            self._budget = _BodyBudget(self._budget_bytes)
        held = 0
        chunks: list[bytes] = []
        try:
            async with asyncio.timeout(self.body_timeout):
                if declared:
                    await self._budget.take(declared)
                    held = declared
                size, more = 0, True
                while more:
                    message = await receive()
                    if message["type"] != "http.request":  # http.disconnect, the one other message of HTTP
                        raise _Gone
                    chunk = message.get("body", b"")
                    more = message.get("more_body", False)
                    size += len(chunk)
                    if size > self.max_body:
                        self.metrics.too_large += 1
                        raise _Answer(413, f"body is over the limit of {self.max_body} bytes", close=True)
                    if size > held:
                        await self._budget.take(size - held)
                        held = size
                    chunks.append(chunk)
        except TimeoutError:
            self.metrics.timeouts += 1
            raise _Answer(408, f"body not received within {self.body_timeout:g}s", close=True) from None
        finally:
            self._budget.give(held)
        return b"".join(chunks)

    async def _refuse_and_drain(
        self, scope: HTTPScope, receive: ASGIReceiveCallable, send: ASGISendCallable, answer: _Answer
    ) -> None:
        """413: the whole answer goes out at once, then what the client is still sending is read and dropped (not
        kept) for at most DRAIN_SECONDS and DRAIN_BYTES before the exchange ends (HTTP/1.1: the connection closes;
        HTTP/2: the stream ends, and is reset if the client still sends), so that a client that writes its whole
        body before it reads (most do) gets the 413 rather than a reset."""
        body = _json({"error": answer.message})
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        if scope["http_version"] < "2":
            headers.append((b"connection", b"close"))
        try:
            await send({"type": "http.response.start", "status": answer.status, "headers": headers})
            await send({"type": "http.response.body", "body": body, "more_body": True})
            drained = 0
            try:
                async with asyncio.timeout(DRAIN_SECONDS):
                    while drained < DRAIN_BYTES:
                        message = await receive()
                        if message["type"] != "http.request":
                            break
                        drained += len(message.get("body", b""))
                        if not message.get("more_body", False):
                            break
            except TimeoutError:
                pass
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except (ConnectionError, OSError) as exc:
            raise _Gone from exc

    async def _send(
        self,
        send: ASGISendCallable,
        status: int,
        body: bytes,
        content_type: str = "application/json",
        extra: Iterable[tuple[bytes, bytes]] = (),
    ) -> None:
        headers = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode()), *extra]
        try:
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body, "more_body": False})
        except (ConnectionError, OSError) as exc:
            raise _Gone from exc


def _decide(body: bytes, gpu_resource: str | None = None, isolated: bool = False) -> admission.AdmissionReview:
    return admission.review_pod(admission.parse_review(body), gpu_resource, isolated)


def _peer(scope: HTTPScope) -> str:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else "?"


def make_app(
    metrics: WebhookMetrics | None = None, gpu_resource: str | None = None, isolated: bool = False
) -> WebhookApp:
    return WebhookApp(metrics, gpu_resource=gpu_resource, isolated=isolated)


def ssl_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(TLS12_CIPHERS)
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE | ssl.OP_NO_RENEGOTIATION
    ctx.set_alpn_protocols(ALPN)
    ctx.load_cert_chain(cert_file, key_file)
    return ctx


@dataclasses.dataclass
class Limits:
    max_connections: int = MAX_CONNECTIONS
    header_timeout: float = HEADER_TIMEOUT
    idle_timeout: float = IDLE_TIMEOUT
    handshake_timeout: float = TLS_HANDSHAKE_TIMEOUT


class _Context(WorkerContext):
    """Hypercorn's worker context (its `terminated` ends the connections) and the drain before it: `draining` is set
    when the program is told to stop, `terminated` a drain period later."""

    def __init__(self) -> None:
        super().__init__(None)
        self.draining = False


def _draining(context: object) -> bool:
    return isinstance(context, _Context) and context.draining


class _Pool:
    """The open connections, for the cap and the drain."""

    def __init__(self, limits: Limits, metrics: WebhookMetrics) -> None:
        self.limits, self.metrics = limits, metrics
        self.open: set[_Connection] = set()
        self._warned = -1e9

    def admit(self, conn: _Connection) -> bool:
        if len(self.open) >= self.limits.max_connections:
            idle = [c for c in self.open if c.idle]
            if not idle:
                self.metrics.connections_refused += 1
                if time.monotonic() - self._warned > 10:  # at most one line per 10 s under a flood
                    self._warned = time.monotonic()
                    log.warning(
                        "connection cap of %d reached with every connection busy: closing new ones (%d so "
                        "far; gpu_webhook_connections_refused_total)",
                        self.limits.max_connections,
                        self.metrics.connections_refused,
                    )
                return False
            oldest = min(idle, key=lambda c: c.idle_since)
            self.metrics.connections_evicted += 1
            log.debug(
                "connection cap reached: closing the connection from %s, idle for %.1fs",
                oldest.peer,
                time.monotonic() - oldest.idle_since,
            )
            oldest.close_soon()  # leaves self.open at once
        self.open.add(conn)
        self.metrics.connections = len(self.open)
        return True

    def remove(self, conn: _Connection) -> None:
        self.open.discard(conn)
        self.metrics.connections = len(self.open)


class _Connection(TCPServer):
    """Hypercorn's connection with three additions: it counts toward the cap, it knows whether it is idle (no
    request in flight) and since when, and on HTTP/1.1 the headers of a request must arrive within
    `header_timeout` of its first byte (Hypercorn's own idle timer covers a connection that sends nothing)."""

    def __init__(self, pool: _Pool, *args: Any) -> None:
        super().__init__(*args)
        self.pool = pool
        self.idle = True
        self.idle_since = time.monotonic()
        self.closing = False
        self.h2 = False
        self.peer = "?"
        self._header_timer: asyncio.TimerHandle | None = None
        self._preface_sent = False  # HTTP/2: the server's SETTINGS must be its first frame, a GOAWAY after it
        self._goaway_sent = False

    async def run(self) -> None:
        ssl_object = self.writer.get_extra_info("ssl_object")
        self.h2 = ssl_object is not None and ssl_object.selected_alpn_protocol() == "h2"
        peer = self.writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else "?"
        if not self.pool.admit(self):
            self.writer.transport.abort()
            return
        log.debug("connection from %s (%s)", self.peer, "h2" if self.h2 else "http/1.1")
        if self.h2:
            self.pool.metrics.connections_h2 += 1
        else:
            self.pool.metrics.connections_h1 += 1
        try:
            await super().run()
        except Exception as exc:  # noqa: BLE001 - e.g. a TLS error while closing: the client's doing, not ours
            log.debug("connection from %s ended: %s: %s", self.peer, type(exc).__name__, exc)
        finally:
            self._cancel_header_timer()
            self.pool.remove(self)
            log.debug("connection from %s closed", self.peer)

    async def protocol_send(self, event: Event) -> None:
        if isinstance(event, Updated):
            self.idle = event.idle
            if event.idle:
                self.idle_since = time.monotonic()
                if self._next_request_started():
                    self._start_header_timer()
            else:
                self._cancel_header_timer()
        await super().protocol_send(event)
        if isinstance(event, RawData) and not self._preface_sent:
            self._preface_sent = True
            if _draining(self.context):  # a connection made during the drain is told at once
                self.drain()

    def drain(self) -> None:
        """The program is stopping: an HTTP/2 client is asked to open no more streams here (and goes on with those
        it has opened or is opening, which are answered). Written at once, between two whole frames (the writer
        takes each of Hypercorn's writes whole), without waiting for a client that does not read. HTTP/1.1 needs
        nothing here: its next answer says `Connection: close` (_H11Protocol)."""
        if self.h2 and self._preface_sent and not self._goaway_sent and not self.writer.transport.is_closing():
            self._goaway_sent = True
            self.writer.write(GOAWAY_DRAIN)

    def drain_over(self) -> None:
        """The drain is over and Hypercorn's shutdown follows, which closes an idle connection without a word: an
        idle HTTP/2 connection first gets a GOAWAY with its real last stream, so that a request the client sends
        as it closes is known not to have been processed (a busy one gets it from Hypercorn after its answers)."""
        if not (self.h2 and self.idle and self._preface_sent) or self.writer.transport.is_closing():
            return
        connection = getattr(self.protocol.protocol, "connection", None)
        if isinstance(connection, h2.connection.H2Connection):
            with contextlib.suppress(h2.exceptions.ProtocolError):  # already closed (the client's GOAWAY)
                connection.close_connection()
                self.writer.write(connection.data_to_send())

    def _next_request_started(self) -> bool:
        """Whether bytes of the next HTTP/1.1 request came with the last one (pipelined, or a lying length)."""
        h11_connection = getattr(getattr(self.protocol, "protocol", None), "connection", None)
        trailing = getattr(h11_connection, "trailing_data", (b"", False))
        return not self.h2 and bool(trailing[0])

    def _start_header_timer(self) -> None:
        if self._header_timer is None:
            self._header_timer = asyncio.get_running_loop().call_later(
                self.pool.limits.header_timeout, self._headers_late
            )

    async def _read_data(self) -> None:
        # As TCPServer._read_data, and the header timer started by the first byte of a request.
        while not self.reader.at_eof():
            try:
                data = await asyncio.wait_for(self.reader.read(MAX_RECV), self.config.read_timeout)
            except (ConnectionError, OSError, TimeoutError, ssl.SSLError):
                break
            if data and self.idle and not self.h2:
                self._start_header_timer()
            await self.protocol.handle(RawData(data))
        await self.protocol.handle(Closed())

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if self.idle:
            log.debug(
                "closing the connection from %s: request headers not received within %gs",
                self.peer,
                self.pool.limits.header_timeout,
            )
            self.close_soon()

    def close_soon(self) -> None:
        """Drop the connection now, without waiting for the client's TLS close_notify: it is idle (evicted) or
        a client too slow with its headers, and stops counting toward the cap at once."""
        if self.closing:
            return
        self.closing = True
        self.pool.remove(self)
        self.writer.transport.abort()


class _H2Protocol(H2Protocol):
    """Hypercorn's HTTP/2 connection, answering early safely: when the answer (a 413, a 408) went out before the
    whole request body came in, the client's further DATA frames are for a stream Hypercorn has forgotten, which
    raised KeyError and dropped the connection (and the flow-control credit of that data was never returned).
    Here such data is acknowledged and the stream reset with NO_ERROR, as RFC 9113 section 8.1 describes.

    And refusing safely once the server is shutting down (`terminated`): Hypercorn resets a new stream with
    NO_ERROR, which a client cannot tell from "processed, nothing to say"; REFUSED_STREAM tells it the request was
    not processed, so it may send it again on another connection (RFC 9113 section 8.7; Go's client, the
    apiserver's, does)."""

    async def _handle_events(self, events: list[h2.events.Event]) -> None:
        batch: list[h2.events.Event] = []
        for event in events:
            if isinstance(event, h2.events.RequestReceived) and self.context.terminated.is_set():
                self.connection.reset_stream(event.stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
                continue  # its other events (StreamEnded, DataReceived) find no stream, as after an early answer
            if isinstance(event, h2.events.DataReceived) and event.stream_id not in self.streams:
                if batch:  # the stream may be opened by an event before this one
                    await super()._handle_events(batch)
                    batch = []
                if event.stream_id not in self.streams:
                    self.connection.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                    with contextlib.suppress(h2.exceptions.H2Error):  # already closed or reset
                        self.connection.reset_stream(event.stream_id, h2.errors.ErrorCodes.NO_ERROR)
                    continue
            batch.append(event)
        await super()._handle_events(batch)


class _H11Protocol(H11Protocol):
    """Hypercorn's HTTP/1.1 connection; while the program drains before it stops, every answer says
    `Connection: close`, and the connection closes after it (the client makes its next one elsewhere)."""

    async def stream_send(self, event: StreamEvent) -> None:
        if (
            isinstance(event, Response)
            and event.status_code >= 200
            and _draining(self.context)
            and not any(name.lower() == b"connection" for name, _ in event.headers)
        ):
            event = dataclasses.replace(event, headers=[*event.headers, (b"connection", b"close")])
        await super().stream_send(event)


# ProtocolWrapper looks the classes up here when a connection speaks h2 or HTTP/1.1.
hypercorn.protocol.H2Protocol = _H2Protocol  # type: ignore[attr-defined]  # a re-export hypercorn does not declare
hypercorn.protocol.H11Protocol = _H11Protocol  # type: ignore[attr-defined]  # as above


def hypercorn_config(limits: Limits) -> Config:
    config = Config()
    config.keep_alive_timeout = limits.idle_timeout
    # Hypercorn closes a connection after 1,000 requests by default: a TLS handshake every 5 s at 200 req/s.
    # 10,000 keeps handshakes rare and still lets the apiserver spread its connections over the replicas now and
    # then (HTTP/2: a graceful GOAWAY).
    config.keep_alive_max_requests = MAX_REQUESTS_PER_CONNECTION
    config.ssl_handshake_timeout = limits.handshake_timeout
    config.h11_max_incomplete_size = MAX_HEADER_BYTES
    config.h2_max_header_list_size = MAX_HEADER_BYTES
    config.h2_max_concurrent_streams = MAX_STREAMS
    config.include_server_header = False
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")  # through our handlers and format
    config.graceful_timeout = GRACEFUL_SECONDS
    return config


async def serve(
    app: WebhookApp,
    host: str,
    port: int,
    ctx: ssl.SSLContext,
    stop: asyncio.Event,
    limits: Limits | None = None,
    started: asyncio.Event | None = None,
    *,
    drain_seconds: float = SHUTDOWN_DRAIN_SECONDS,
) -> None:
    """Serve `app` on host:port over TLS until `stop` is set, then drain for `drain_seconds` (still serving, clients
    told to go elsewhere) and close gracefully (busy connections get GRACEFUL_SECONDS more)."""
    limits = limits or Limits()
    config = hypercorn_config(limits)
    asgi = wrap_app(app, config.wsgi_max_body_size, "asgi")
    context = _Context()
    pool = _Pool(limits, app.metrics)
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[Any]] = set()

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None  # a callback of start_server runs as a task
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        await _Connection(pool, asgi, loop, config, context, {}, reader, writer)

    server = await asyncio.start_server(
        on_connection,
        host,
        port,
        ssl=ctx,
        backlog=1024,
        reuse_address=True,
        ssl_handshake_timeout=limits.handshake_timeout,
        ssl_shutdown_timeout=TLS_SHUTDOWN_TIMEOUT,
    )
    if started is not None:
        started.set()
    try:
        await stop.wait()
        # The drain: the listener stays open and everything is served, since a client may still be sending on a
        # connection it holds, or still be routed here for a moment (a Service's endpoints lag behind a pod's end).
        context.draining = True
        for conn in list(pool.open):
            conn.drain()
        log.info(
            "stopping: serving on for %gs while clients move away (HTTP/2: GOAWAY, HTTP/1.1: Connection: close); "
            "%d connections open",
            drain_seconds,
            len(pool.open),
        )
        await asyncio.sleep(drain_seconds)
    finally:
        for conn in list(pool.open):
            conn.drain_over()
        log.info(
            "closing the listener and %d connections; those busy (%d) get up to %gs to answer",
            len(pool.open),
            sum(not conn.idle for conn in pool.open),
            GRACEFUL_SECONDS,
        )
        server.close()
        await context.terminated.set()  # idle connections close now, busy ones after their answer
        if tasks:
            _, pending = await asyncio.wait(set(tasks), timeout=GRACEFUL_SECONDS)
            if pending:
                log.info("dropping %d connections still busy after %gs", len(pending), GRACEFUL_SECONDS)
                for conn in list(pool.open):
                    conn.close_soon()  # their requests see the client gone and end
                _, pending = await asyncio.wait(pending, timeout=1)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1)
        log.info("stopped")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="gpu-webhook",
        description="Mutating admission webhook that sets CUDA_VISIBLE_DEVICES from the gpu-scheduling-map annotation.",
    )
    p.add_argument("--port", type=int, default=8443, help="HTTPS port (default 8443)")
    p.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    p.add_argument("--tls-cert-file", required=True, help="PEM serving certificate (chain)")
    p.add_argument("--tls-private-key-file", required=True, help="PEM private key")
    p.add_argument(
        "--max-connections",
        type=int,
        default=MAX_CONNECTIONS,
        help=f"open connections at most; at the cap the longest-idle one makes room (default {MAX_CONNECTIONS})",
    )
    p.add_argument(
        "--drain-seconds",
        type=_seconds,
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


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 3600:  # NaN too
        raise argparse.ArgumentTypeError(f"expected seconds from 0 to 3600, got {text!r}")
    return value


async def run(args: argparse.Namespace) -> None:
    ctx = ssl_context(args.tls_cert_file, args.tls_private_key_file)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    started = asyncio.Event()
    task = asyncio.create_task(
        serve(
            make_app(gpu_resource=args.gpu_resource or None, isolated=args.isolated_gpus),
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
    try:
        asyncio.run(run(args))
    except (OSError, ssl.SSLError) as exc:
        raise SystemExit(f"gpu-webhook: cannot start: {exc}") from None


if __name__ == "__main__":
    main()
