"""The webhook's drain when it is told to stop (SIGTERM), over real TLS on loopback: an HTTP/2 connection gets a
GOAWAY "open no more streams" (last stream id 2^31-1) and a request sent on it after that is still answered; a new
connection made during the drain is served; an HTTP/1.1 answer during the drain says `Connection: close`; after the
drain a new stream is refused with REFUSED_STREAM, a busy stream is still answered, an idle connection gets a GOAWAY
with its real last stream, the listener closes and the server ends within GRACEFUL_SECONDS.

serve() runs in process (the drain short, the clients frame by frame with h2); the last test runs the real program
and sends it SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import signal
import ssl
import time
from collections.abc import AsyncIterator, Callable

import h2.config
import h2.connection
import h2.errors
import h2.events
import pytest
from hyperframe.frame import GoAwayFrame

from gpu_scheduling import runtime
from gpu_scheduling.webhook import main, transport
from gpu_scheduling.webhook.app import WebhookApp
from harness import pki
from harness.processes import free_port
from tests.integration.test_webhook_server import GOOD_POD, assert_patched, review, start_webhook

DRAIN = 1.0  # seconds: long enough for a few loopback requests, short enough for a test
LAST_STREAM = 2**31 - 1
NO_ERROR = h2.errors.ErrorCodes.NO_ERROR
WAIT = 5.0  # seconds a client waits for the server's next frames


@pytest.fixture(scope="module")
def tls(tmp_path_factory) -> tuple[ssl.SSLContext, pathlib.Path]:
    """(the server's context, the CA a client trusts) for 127.0.0.1."""
    d = tmp_path_factory.mktemp("drain")
    ca = pki.CA(d, "test")
    pair = ca.issue("serving", "gpu-webhook", server=True, dns=("localhost",), ips=("127.0.0.1",))
    return runtime.server_tls(str(pair.cert), str(pair.key), transport.ALPN), ca.cert_path


async def connect(port: int, ca: pathlib.Path, alpn: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.set_alpn_protocols([alpn])
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1")
    assert writer.get_extra_info("ssl_object").selected_alpn_protocol() == alpn
    return reader, writer


class Running:
    """serve() in this event loop, and the Event that stops it."""

    def __init__(self, port: int, stop: asyncio.Event, task: asyncio.Task[None]):
        self.port, self.stop, self.task = port, stop, task
        self.stopped_at = 0.0

    def stop_now(self) -> None:
        self.stopped_at = time.monotonic()
        self.stop.set()

    async def after_drain(self) -> None:
        """Until a moment after the drain is over (serve()'s sleep is on this loop: it ends first)."""
        await asyncio.sleep(self.stopped_at + DRAIN + 0.2 - time.monotonic())


@contextlib.asynccontextmanager
async def running(server_ctx: ssl.SSLContext, limits: transport.Limits | None = None) -> AsyncIterator[Running]:
    port, stop, started = free_port(), asyncio.Event(), asyncio.Event()
    app = WebhookApp()
    task = asyncio.create_task(
        transport.serve(app, app.metrics, "127.0.0.1", port, server_ctx, stop, limits, started, drain_seconds=DRAIN)
    )
    await asyncio.wait_for(started.wait(), 10)
    try:
        yield Running(port, stop, task)
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, DRAIN + transport.GRACEFUL_SECONDS + 2)


class H2Client:
    """One HTTP/2 connection, frame by frame. The server's GOAWAYs are noted and not given to h2, which would then
    refuse to send anything more: this client goes on sending as one does whose request crossed the GOAWAY."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
        self.goaways: list[tuple[int, int]] = []  # (last stream id, error code)
        self.status: dict[int, int] = {}
        self.body: dict[int, bytes] = {}
        self.ended: set[int] = set()
        self.resets: dict[int, int] = {}
        self.closed = False
        self._buffer = b""

    @classmethod
    async def open(cls, port: int, ca: pathlib.Path) -> H2Client:
        client = cls(*await connect(port, ca, "h2"))
        client.conn.initiate_connection()
        await client.flush()
        return client

    async def flush(self) -> None:
        self.writer.write(self.conn.data_to_send())
        await self.writer.drain()

    async def start(self, method: str, path: str, body: bytes | None, *, end: bool = True) -> int:
        """A new stream: its headers, and its body when `end` (else the body follows with finish())."""
        stream = self.conn.get_next_available_stream_id()
        headers = [(b":method", method.encode()), (b":path", path.encode()), (b":scheme", b"https")]
        headers += [(b":authority", b"127.0.0.1"), (b"content-type", b"application/json")]
        if body is not None:
            headers.append((b"content-length", str(len(body)).encode()))
        self.conn.send_headers(stream, headers, end_stream=end and not body)
        if end and body:
            self.conn.send_data(stream, body, end_stream=True)
        await self.flush()
        return stream

    async def finish(self, stream: int, body: bytes) -> None:
        self.conn.send_data(stream, body, end_stream=True)
        await self.flush()

    async def review(self) -> int:
        """POST /mutate with a review; waits for the answer."""
        stream = await self.start("POST", "/mutate", review(GOOD_POD))
        await self.until(lambda: stream in self.ended or stream in self.resets)
        return stream

    async def until(self, condition: Callable[[], bool]) -> None:
        async with asyncio.timeout(WAIT):
            while not condition():
                data = await self.reader.read(65536)
                if not data:
                    self.closed = True
                    assert condition(), "the server closed the connection"
                    return
                self._feed(data)
                with contextlib.suppress(ConnectionError):  # acknowledgements; the server may be closing
                    await self.flush()

    def _feed(self, data: bytes) -> None:
        self._buffer += data
        while len(self._buffer) >= 9 and len(self._buffer) >= 9 + int.from_bytes(self._buffer[:3], "big"):
            size = 9 + int.from_bytes(self._buffer[:3], "big")
            frame, self._buffer = self._buffer[:size], self._buffer[size:]
            if frame[3] == GoAwayFrame.type:
                goaway = GoAwayFrame(0)
                goaway.parse_body(memoryview(frame[9:]))
                self.goaways.append((goaway.last_stream_id, goaway.error_code))
                continue
            for event in self.conn.receive_data(frame):
                if isinstance(event, h2.events.ResponseReceived):
                    self.status[event.stream_id] = int(dict(event.headers)[b":status"])
                    self.body[event.stream_id] = b""
                elif isinstance(event, h2.events.DataReceived):
                    self.body[event.stream_id] += event.data
                    self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    self.ended.add(event.stream_id)
                elif isinstance(event, h2.events.StreamReset):
                    self.resets[event.stream_id] = event.error_code

    def close(self) -> None:
        self.writer.transport.abort()


async def h1_request(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str = "/healthz"
) -> tuple[int, dict[str, str], bytes]:
    """GET over HTTP/1.1 on an open connection: (status, headers with lower-case names, body)."""
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    await writer.drain()
    async with asyncio.timeout(WAIT):
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = dict(line.lower().split(": ", 1) for line in lines[1:] if line)
        body = await reader.readexactly(int(headers["content-length"]))
    return int(lines[0].split()[1]), headers, body


async def closed_by_server(reader: asyncio.StreamReader) -> bool:
    """Whether the server ends the connection within WAIT (reads nothing but the end)."""
    async with asyncio.timeout(WAIT):
        return await reader.read(1) == b""


# ---- HTTP/2 ------------------------------------------------------------------------------------------------------


def test_http2_at_its_request_limit_a_connection_answers_every_open_stream_and_says_goaway(tls):
    """The request limit of a connection (Limits.max_requests) ends it gracefully: the streams open when it is
    reached, and those that cross the GOAWAY, are all answered; the GOAWAY says "open no more streams" (none of
    them unprocessed), once; nothing is reset and the connection is not dropped. (Hypercorn's own limit dropped the
    connection with its open streams: the apiserver's admission calls failed, and the webhook fails closed.)"""
    server_ctx, ca = tls

    async def scenario() -> None:
        async with running(server_ctx, transport.Limits(max_requests=3)) as hook:
            client = await H2Client.open(hook.port, ca)
            streams = [await client.start("POST", "/mutate", review(GOOD_POD)) for _ in range(8)]
            await client.until(lambda: all(s in client.ended or s in client.resets for s in streams))
            assert not client.resets and not client.closed
            assert [client.status[s] for s in streams] == [200] * len(streams)
            for s in streams:
                assert_patched(client.body[s])
            assert client.goaways == [(LAST_STREAM, NO_ERROR)]
            client.close()

    asyncio.run(scenario())


def test_http2_goaway_then_still_served_then_refused_after_the_drain(tls):
    server_ctx, ca = tls

    async def scenario() -> None:
        async with running(server_ctx) as hook:
            held = await H2Client.open(hook.port, ca)  # the apiserver's long-lived connection
            first = await held.review()
            assert held.status[first] == 200 and held.goaways == []

            hook.stop_now()
            await held.until(lambda: bool(held.goaways))
            assert held.goaways == [(LAST_STREAM, NO_ERROR)]  # "open no more streams", none of them unprocessed
            crossed = await held.review()  # a request sent as the GOAWAY came: served as any other
            assert held.status[crossed] == 200 and crossed not in held.resets
            assert_patched(held.body[crossed])

            late = await H2Client.open(hook.port, ca)  # routed here during the drain: served, told to go
            answered = await late.review()
            assert late.status[answered] == 200
            assert_patched(late.body[answered])
            await late.until(lambda: bool(late.goaways))
            assert late.goaways == [(LAST_STREAM, NO_ERROR)]

            busy = await held.start("POST", "/mutate", review(GOOD_POD), end=False)  # its body after the drain
            await hook.after_drain()
            assert not hook.task.done(), "serve() ended with a stream still open"

            refused = await held.start("GET", "/healthz", None)
            await held.until(lambda: refused in held.resets)
            assert held.resets[refused] == h2.errors.ErrorCodes.REFUSED_STREAM  # not processed: the client may retry
            assert refused not in held.status

            await held.finish(busy, review(GOOD_POD))
            await held.until(lambda: busy in held.ended)
            assert held.status[busy] == 200
            assert_patched(held.body[busy])
            await held.until(lambda: held.closed)  # after its last answer: the final GOAWAY, then the end
            assert held.goaways[1:] == [(refused, NO_ERROR)]

            await late.until(lambda: late.closed)  # idle at the end of the drain: its real last stream, then closed
            assert late.goaways[1:] == [(answered, NO_ERROR)]

            await asyncio.wait_for(hook.task, transport.GRACEFUL_SECONDS)
            with pytest.raises(OSError):
                await asyncio.open_connection("127.0.0.1", hook.port)

    asyncio.run(scenario())


def test_a_stream_still_busy_after_the_grace_is_dropped(tls, monkeypatch):
    """A client that never finishes its request does not keep the server: GRACEFUL_SECONDS after the drain the
    connection is dropped and serve() ends."""
    monkeypatch.setattr(transport, "GRACEFUL_SECONDS", 0.5)
    server_ctx, ca = tls

    async def scenario() -> None:
        async with running(server_ctx) as hook:
            stuck = await H2Client.open(hook.port, ca)
            await stuck.start("POST", "/mutate", review(GOOD_POD), end=False)
            await asyncio.sleep(0.1)
            hook.stop_now()
            await asyncio.wait_for(asyncio.shield(hook.task), DRAIN + 0.5 + 1 + 1)
            took = time.monotonic() - hook.stopped_at
            assert took >= DRAIN + 0.5, f"serve() ended after {took:.2f}s, before the drain and the grace"
            await stuck.until(lambda: stuck.closed)

    asyncio.run(scenario())


# ---- HTTP/1.1 ----------------------------------------------------------------------------------------------------


def test_http11_answers_say_connection_close_during_the_drain(tls):
    server_ctx, ca = tls

    async def scenario() -> None:
        async with running(server_ctx) as hook:
            kept = await connect(hook.port, ca, "http/1.1")
            status, headers, _ = await h1_request(*kept)
            assert status == 200 and "connection" not in headers  # keep-alive
            idle = await connect(hook.port, ca, "http/1.1")  # never used: left open by the drain, closed after it
            await h1_request(*idle)
            unused = await connect(hook.port, ca, "http/1.1")

            hook.stop_now()
            await asyncio.sleep(0.1)
            status, headers, body = await h1_request(*kept)
            assert (status, body) == (200, b"ok\n") and headers["connection"] == "close"
            assert await closed_by_server(kept[0])

            late = await connect(hook.port, ca, "http/1.1")  # a connection made during the drain
            status, headers, _ = await h1_request(*late)
            assert status == 200 and headers["connection"] == "close"

            status, headers, _ = await h1_request(*idle)  # an idle one was not closed under its client
            assert status == 200 and headers["connection"] == "close"

            await hook.after_drain()
            assert await closed_by_server(unused[0])
            await asyncio.wait_for(hook.task, transport.GRACEFUL_SECONDS)

    asyncio.run(scenario())


# ---- the program -------------------------------------------------------------------------------------------------


def test_sigterm_drains_then_the_program_exits(tmp_path):
    """The real gpu-webhook with --drain-seconds 2: SIGTERM sends the GOAWAY on the open HTTP/2 connection, a new
    connection made during the drain is answered, and the process exits after the drain, within GRACEFUL_SECONDS
    of it, with status 0 and the phases in its log."""
    drain = 2.0
    hook = start_webhook(tmp_path, "--drain-seconds", f"{drain:g}")
    try:

        async def scenario() -> float:
            held = await H2Client.open(hook.port, hook.ca_path)
            assert held.status[await held.review()] == 200
            assert hook.proc.proc is not None
            hook.proc.proc.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            await held.until(lambda: bool(held.goaways))
            assert held.goaways == [(LAST_STREAM, NO_ERROR)]
            late = await H2Client.open(hook.port, hook.ca_path)
            assert late.status[await late.review()] == 200
            assert time.monotonic() - signalled < drain, "too slow to check the drain: make it longer"
            return signalled

        signalled = asyncio.run(scenario())
        assert hook.proc.proc is not None
        code = hook.proc.proc.wait(drain + transport.GRACEFUL_SECONDS + 5)
        took = time.monotonic() - signalled
    finally:
        hook.proc.stop()
    assert code == 0, hook.log()
    assert drain <= took < drain + transport.GRACEFUL_SECONDS, f"exited {took:.2f}s after SIGTERM"
    log = hook.log()
    for phase in ("stopping: serving on for 2s", "closing the listener", "stopped"):
        assert phase in log, log


@pytest.mark.parametrize("text", ["-1", "nan", "3601", "soon"])
def test_drain_seconds_must_be_seconds(text, capsys):
    with pytest.raises(SystemExit):
        main.parse_args(["--tls-cert-file", "c", "--tls-private-key-file", "k", "--drain-seconds", text])
    assert "--drain-seconds: expected seconds from 0 to 3600" in capsys.readouterr().err


def test_drain_seconds_default_and_zero():
    required = ["--tls-cert-file", "c", "--tls-private-key-file", "k"]
    assert main.parse_args(required).drain_seconds == transport.SHUTDOWN_DRAIN_SECONDS == 2.0
    assert main.parse_args([*required, "--drain-seconds", "0"]).drain_seconds == 0


def test_the_drain_goaway_says_no_stream_is_unprocessed():
    frame = GoAwayFrame(0)
    frame.parse_body(memoryview(transport.GOAWAY_DRAIN[9:]))
    assert transport.GOAWAY_DRAIN[3] == GoAwayFrame.type and int.from_bytes(transport.GOAWAY_DRAIN[:3], "big") == 8
    assert (frame.last_stream_id, frame.error_code) == (LAST_STREAM, NO_ERROR)
