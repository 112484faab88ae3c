"""gpu-webhook's transport: HTTP/2 (ALPN `h2`) and HTTP/1.1 on one TLS port, served by Hypercorn's protocol
classes (h2 and h11 under a plain ASGI app). The kube-apiserver keeps one multiplexed HTTP/2 connection to a webhook
that offers it instead of handshaking TLS again and again.

Connections are bounded in number, in the time their headers may take and in idle time. Hypercorn's `serve()` has
no connection cap, no per-request header deadline and no drain, so the connection is the project's: a subclass of
Hypercorn's TCPServer (`_Connection`) that runs the project's own choice of protocol (`_Protocols`: Hypercorn's
H2Protocol and H11Protocol, each extended by an explicit subclass below), wired here when a connection is accepted.
Nothing of Hypercorn is replaced at import; `hypercorn.protocol` keeps its own classes (a test checks). The subclasses
use Hypercorn internals, so pyproject.toml pins Hypercorn's minor release and tests/integration runs them.

Stopping (SIGTERM) drains before it closes, because the apiserver may still be sending on a connection it holds:
for `drain_seconds` everything is still served, a new connection included, while every HTTP/2 connection gets a
GOAWAY that says "open no more streams here" (last stream id 2^31-1, RFC 9113 section 6.8) and every HTTP/1.1
answer says `Connection: close`; then Hypercorn's own shutdown (`terminated`): the listener closes, a stream opened
after that is refused with REFUSED_STREAM (the client may send it again elsewhere), an idle connection gets a GOAWAY
with its real last stream and closes, a busy one after its answers, within GRACEFUL_SECONDS.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import logging
import ssl
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import h2.connection
import h2.errors
import h2.events
import h2.exceptions
from hypercorn.asyncio.task_group import TaskGroup
from hypercorn.asyncio.tcp_server import TCPServer
from hypercorn.asyncio.worker_context import WorkerContext
from hypercorn.config import Config
from hypercorn.events import Event, RawData, Updated
from hypercorn.protocol import ProtocolWrapper
from hypercorn.protocol.events import Response
from hypercorn.protocol.h2 import H2Protocol
from hypercorn.protocol.h11 import H2CProtocolRequiredError, H2ProtocolAssumedError, H11Protocol
from hypercorn.typing import ConnectionState
from hypercorn.utils import parse_socket_addr, wrap_app
from hyperframe.frame import GoAwayFrame

from gpu_scheduling.webhook.metrics import WebhookMetrics

if TYPE_CHECKING:
    from hypercorn.protocol.events import Event as StreamEvent
    from hypercorn.typing import AppWrapper, ASGIFramework
    from hypercorn.typing import TaskGroup as TaskGroupType
    from hypercorn.typing import WorkerContext as ContextType

log = logging.getLogger("gpu_scheduling.webhook")

# Limits (see docs/gpu-webhook.md, "Limits").
MAX_HEADER_BYTES = 16 * 1024  # request line and headers (HTTP/1.1); header list (HTTP/2)
HEADER_TIMEOUT = 10.0  # first byte of a request to the end of its headers (HTTP/1.1)
IDLE_TIMEOUT = 60.0  # keep-alive: a connection with no request in flight (HTTP/2: no open stream) is closed
TLS_HANDSHAKE_TIMEOUT = 10.0
TLS_SHUTDOWN_TIMEOUT = 5.0  # wait for the client's close_notify at most this long
MAX_CONNECTIONS = 256  # at the cap the longest-idle connection makes room; if none is idle, the new one is closed
MAX_REQUESTS_PER_CONNECTION = 10_000
MAX_STREAMS = 100  # concurrent HTTP/2 streams per connection (RFC 9113 recommends no fewer than 100)
GRACEFUL_SECONDS = 5.0  # after the drain: busy connections get this long to finish their answers, then are dropped
SHUTDOWN_DRAIN_SECONDS = 2.0  # on SIGTERM: serve on this long while telling clients to go elsewhere (--drain-seconds)

ALPN = ["h2", "http/1.1"]
# "Open no more streams": a GOAWAY whose last stream id is the highest there is, so that none the client has sent or
# is sending counts as unprocessed (RFC 9113 section 6.8, graceful shutdown). Written as bytes, not through h2's
# close_connection(), which would put the connection in a state where it refuses the streams still to come.
GOAWAY_DRAIN = GoAwayFrame(0, last_stream_id=2**31 - 1, error_code=h2.errors.ErrorCodes.NO_ERROR).serialize()


@dataclasses.dataclass
class Limits:
    max_connections: int = MAX_CONNECTIONS
    max_requests: int = MAX_REQUESTS_PER_CONNECTION
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
        self.refused = 0
        self._warned = -1e9

    def admit(self, conn: _Connection) -> bool:
        if len(self.open) >= self.limits.max_connections:
            idle = [c for c in self.open if c.idle]
            if not idle:
                self.refused += 1
                self.metrics.connections_refused.inc()
                if time.monotonic() - self._warned > 10:  # at most one line per 10 s under a flood
                    self._warned = time.monotonic()
                    log.warning(
                        "connection cap of %d reached with every connection busy: closing new ones (%d so "
                        "far; gpu_webhook_connections_refused_total)",
                        self.limits.max_connections,
                        self.refused,
                    )
                return False
            oldest = min(idle, key=lambda c: c.idle_since)
            self.metrics.connections_evicted.inc()
            log.debug(
                "connection cap reached: closing the connection from %s, idle for %.1fs",
                oldest.peer,
                time.monotonic() - oldest.idle_since,
            )
            oldest.close_soon()  # leaves self.open at once
        self.open.add(conn)
        self.metrics.open_connections.set(len(self.open))
        return True

    def remove(self, conn: _Connection) -> None:
        self.open.discard(conn)
        self.metrics.open_connections.set(len(self.open))


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
        self.pool.metrics.connections.labels("h2" if self.h2 else "http/1.1").inc()
        try:
            await self._serve()
        except Exception as exc:  # noqa: BLE001 - e.g. a TLS error while closing: the client's doing, not ours
            log.debug("connection from %s ended: %s: %s", self.peer, type(exc).__name__, exc)
        finally:
            self._cancel_header_timer()
            self.pool.remove(self)
            log.debug("connection from %s closed", self.peer)

    async def _serve(self) -> None:
        # As TCPServer.run, with the project's protocols (_Protocols) instead of Hypercorn's ProtocolWrapper.
        sock = self.writer.get_extra_info("socket")
        try:
            client = parse_socket_addr(sock.family, sock.getpeername())
            server = parse_socket_addr(sock.family, sock.getsockname())
            ssl_object = self.writer.get_extra_info("ssl_object")
            alpn = ssl_object.selected_alpn_protocol() if ssl_object is not None else "http/1.1"
            async with TaskGroup(self.loop) as task_group:
                self._task_group = task_group
                self.protocol = _Protocols(
                    self.app,
                    self.config,
                    self.context,
                    task_group,
                    ConnectionState(self.state),
                    ssl_object is not None,
                    client,
                    server,
                    self.protocol_send,
                    alpn,
                    on_data=self._data_arrived,
                )
                await self.protocol.initiate()
                await self.idle_task.restart(task_group, self._idle_timeout)
                await self._read_data()
        except OSError:
            pass
        finally:
            await self._close()

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

    def _data_arrived(self) -> None:
        """Bytes came in (before the protocol reads them): on an idle HTTP/1.1 connection, the first byte of a
        request, which starts its header deadline."""
        if self.idle and not self.h2:
            self._start_header_timer()

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
    apiserver's, does).

    And ending a connection at its request limit (Limits.max_requests) gracefully: Hypercorn calls h2's
    close_connection() there, after which h2 refuses to send the answers of the streams still open, and the
    connection is dropped with them; under the benchmark's load the apiserver lost up to a dozen admission calls
    at once every 10,000 pods (500s: the webhook fails closed). Here Hypercorn's own limit is lifted, and the
    connection says GOAWAY "open no more streams" (as the drain does) once it has taken the limit: the streams
    open are answered, the client opens its next ones on a new connection."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.max_requests = self.config.keep_alive_max_requests
        self.config = copy.copy(self.config)
        self.config.keep_alive_max_requests = sys.maxsize  # Hypercorn's check never fires; ours (below) does
        self.said_goaway = False

    async def _handle_events(self, events: list[h2.events.Event]) -> None:
        await self._handle_events_safely(events)
        if not self.said_goaway and self.keep_alive_requests >= self.max_requests:
            self.said_goaway = True
            await self.send(RawData(data=GOAWAY_DRAIN))

    async def _handle_events_safely(self, events: list[h2.events.Event]) -> None:
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
class _Protocols(ProtocolWrapper):
    """Hypercorn's ProtocolWrapper (the protocol of one connection, chosen by ALPN, and the switch to HTTP/2 when a
    client sends HTTP/2's preface or asks for h2c), choosing the project's _H2Protocol and _H11Protocol, and telling
    the connection (`on_data`) when bytes arrive."""

    def __init__(
        self,
        app: AppWrapper,
        config: Config,
        context: ContextType,
        task_group: TaskGroupType,
        state: ConnectionState,
        ssl: bool,
        client: tuple[str, int] | None,
        server: tuple[str, int] | None,
        send: Callable[[Event], Awaitable[None]],
        alpn_protocol: str | None = None,
        *,
        on_data: Callable[[], None] = lambda: None,
    ) -> None:
        # ProtocolWrapper.__init__ is not called: it would build Hypercorn's own class first.
        self.on_data = on_data
        self.app, self.config, self.context, self.task_group = app, config, context, task_group
        self.ssl, self.client, self.server, self.send, self.state = ssl, client, server, send, state
        self.protocol: H11Protocol | H2Protocol = self._h2() if alpn_protocol == "h2" else self._h11()

    def _h2(self) -> _H2Protocol:
        return _H2Protocol(*self._arguments())

    def _h11(self) -> _H11Protocol:
        return _H11Protocol(*self._arguments())

    def _arguments(self) -> tuple[Any, ...]:
        """What both of Hypercorn's protocols are built with, in their constructors' order."""
        return (
            self.app,
            self.config,
            self.context,
            self.task_group,
            self.state,
            self.ssl,
            self.client,
            self.server,
            self.send,
        )

    async def handle(self, event: Event) -> None:
        if isinstance(event, RawData) and event.data:
            self.on_data()
        try:
            await self.protocol.handle(event)
        except H2ProtocolAssumedError as error:  # HTTP/2's preface without ALPN h2
            self.protocol = h2_protocol = self._h2()
            await h2_protocol.initiate()
            if error.data != b"":
                await h2_protocol.handle(RawData(data=error.data))
        except H2CProtocolRequiredError as error:  # an HTTP/1.1 request asking for h2c
            self.protocol = h2_protocol = self._h2()
            await h2_protocol.initiate(error.headers, error.settings)
            if error.data != b"":
                await h2_protocol.handle(RawData(data=error.data))


def hypercorn_config(limits: Limits) -> Config:
    config = Config()
    config.keep_alive_timeout = limits.idle_timeout
    # Hypercorn closes a connection after 1,000 requests by default: a TLS handshake every 5 s at 200 req/s.
    # 10,000 keeps handshakes rare and still lets the apiserver spread its connections over the replicas now and
    # then (HTTP/2: a graceful GOAWAY, sent by _H2Protocol, which lifts Hypercorn's own limit).
    config.keep_alive_max_requests = limits.max_requests
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
    app: ASGIFramework,
    metrics: WebhookMetrics,
    host: str,
    port: int,
    ctx: ssl.SSLContext,
    stop: asyncio.Event,
    limits: Limits | None = None,
    started: asyncio.Event | None = None,
    *,
    drain_seconds: float = SHUTDOWN_DRAIN_SECONDS,
) -> None:
    """Serve `app` on host:port over TLS (connections counted in `metrics`) until `stop` is set, then drain for
    `drain_seconds` (still serving, clients told to go elsewhere) and close gracefully (busy connections get
    GRACEFUL_SECONDS more)."""
    limits = limits or Limits()
    config = hypercorn_config(limits)
    asgi = wrap_app(app, config.wsgi_max_body_size, "asgi")
    context = _Context()
    pool = _Pool(limits, metrics)
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
