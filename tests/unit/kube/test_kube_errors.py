"""The API's error answers map onto one exception hierarchy (shared by the async and the sync client); no answer at
all is one TransportError from the async client, whatever aiohttp raised."""

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable

import pytest

from gpu_scheduling.kube import errors
from gpu_scheduling.kube.client import Client
from gpu_scheduling.kube.config import ClusterConfig
from gpu_scheduling.kube.sync import SyncClient


def status(code: int, reason: str, message: str = "m") -> str:
    return json.dumps(
        {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": message}
    )


@pytest.mark.parametrize(
    "code, reason, cls",
    [
        (400, "BadRequest", errors.BadRequest),
        (401, "Unauthorized", errors.Unauthorized),
        (403, "Forbidden", errors.Forbidden),
        (404, "NotFound", errors.NotFound),
        (405, "MethodNotAllowed", errors.MethodNotAllowed),
        (409, "AlreadyExists", errors.AlreadyExists),
        (409, "Conflict", errors.Conflict),
        (410, "Expired", errors.Gone),
        (413, "RequestEntityTooLarge", errors.RequestEntityTooLarge),
        (422, "Invalid", errors.Invalid),
        (429, "TooManyRequests", errors.TooManyRequests),
        (500, "InternalError", errors.ServerError),
        (504, "Timeout", errors.ServerError),
        (418, "Teapot", errors.ApiError),
    ],
)
def test_each_status_has_its_class(code, reason, cls):
    exc = errors.error_for(code, status(code, reason, "what went wrong"), "phrase")
    assert type(exc) is cls and isinstance(exc, errors.ApiError)
    assert (exc.status, exc.reason, exc.message) == (code, reason, "what went wrong")
    assert exc.body["kind"] == "Status"


def test_already_exists_is_a_conflict():
    assert isinstance(errors.error_for(409, status(409, "AlreadyExists")), errors.Conflict)
    assert not isinstance(errors.error_for(409, status(409, "Conflict")), errors.AlreadyExists)


@pytest.mark.parametrize("text", ["not json", "[1, 2]", "", "null"])
def test_a_body_that_is_not_a_status_keeps_its_text(text):
    exc = errors.error_for(404, text, "Not Found")
    assert type(exc) is errors.NotFound
    assert (exc.reason, exc.message, exc.body) == ("Not Found", text, None)


def test_a_watch_error_event_becomes_the_same_class():
    exc = errors.from_status({"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"})
    assert type(exc) is errors.Gone and exc.message == "too old"
    assert type(errors.from_status({"kind": "Status"})) is errors.ServerError


# ---- no answer at all: one TransportError, whatever aiohttp raised ------------------------------------------------


@contextlib.asynccontextmanager
async def _server(handler: Callable[[socket.socket], None]) -> AsyncIterator[str]:
    """A TCP server on a free loopback port that gives each connection to `handler` (in a thread); its URL."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                handler(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def _hang_up(conn: socket.socket) -> None:
    conn.recv(65536)  # the request, then close without a word


def _half_answer(conn: socket.socket) -> None:
    conn.recv(65536)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")


def _silent(conn: socket.socket) -> None:
    conn.recv(65536)
    time.sleep(1.0)


def _closed_port() -> str:
    with socket.create_server(("127.0.0.1", 0)) as s:
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.parametrize(
    "handler, cause",
    [(None, "ClientConnectorError"), (_hang_up, "ServerDisconnectedError"), (_half_answer, "ClientPayloadError")],
)
def test_no_answer_is_a_transport_error(handler, cause):
    async def main() -> errors.TransportError:
        async with contextlib.AsyncExitStack() as stack:
            url = _closed_port() if handler is None else await stack.enter_async_context(_server(handler))
            c = await stack.enter_async_context(Client(ClusterConfig(url, ssl_context=False)))
            with pytest.raises(errors.TransportError) as raised:
                await c.get("/api/v1/nodes")
            return raised.value

    exc = asyncio.run(main())
    assert isinstance(exc, OSError) and not isinstance(exc, errors.ApiError)
    assert exc.cause == cause and type(exc.__cause__).__name__ == cause
    assert (exc.method, exc.path) == ("GET", "/api/v1/nodes")
    assert str(exc).startswith(f"GET /api/v1/nodes: {cause}")


def test_the_requests_own_deadline_is_a_transport_error():
    async def main() -> errors.TransportError:
        async with _server(_silent) as url, Client(ClusterConfig(url, ssl_context=False)) as c:
            with pytest.raises(errors.TransportError) as raised:
                await c.request("GET", "/api/v1/nodes", timeout=0.2)
            return raised.value

    exc = asyncio.run(main())
    assert isinstance(exc.__cause__, TimeoutError)


def test_a_watch_cut_short_is_a_transport_error_and_an_error_answer_stays_an_api_error():
    def cut(conn: socket.socket) -> None:
        conn.recv(65536)
        event = json.dumps({"type": "ADDED", "object": {}}).encode() + b"\n"
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"%x\r\n%s\r\n" % (len(event), event))

    def refuse(conn: socket.socket) -> None:
        conn.recv(65536)
        body = status(403, "Forbidden").encode()
        conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    async def main() -> list[dict[str, object]]:
        seen = []
        async with _server(cut) as url, Client(ClusterConfig(url, ssl_context=False)) as c:
            with pytest.raises(errors.TransportError, match=r"^WATCH /api/v1/pods: "):
                async for event in c.watch("/api/v1/pods", {}):
                    seen.append(event)  # noqa: PERF401 - the events before the cut are kept
        async with _server(refuse) as url, Client(ClusterConfig(url, ssl_context=False)) as c:
            with pytest.raises(errors.Forbidden):
                await c.get("/api/v1/pods")
        return seen

    assert asyncio.run(main()) == [{"type": "ADDED", "object": {}}]


@pytest.mark.parametrize(
    "handler, cause",
    [(None, "URLError"), (_hang_up, "RemoteDisconnected"), (_half_answer, "IncompleteRead")],
)
def test_the_blocking_client_says_no_answer_the_same_way(tmp_path, handler, cause):
    """kube.sync.SyncClient (the tests' and tools' client) raises the async client's TransportError too."""

    async def main() -> errors.TransportError:
        async with contextlib.AsyncExitStack() as stack:
            url = _closed_port() if handler is None else await stack.enter_async_context(_server(handler))
            kubeconfig = tmp_path / "kubeconfig"
            kubeconfig.write_text(
                "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
                f"clusters: [{{name: k, cluster: {{server: '{url}'}}}}]\n"
                "users: [{name: u, user: {token: t}}]\n"
                "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
            )
            client = SyncClient(str(kubeconfig), timeout=5)
            with pytest.raises(errors.TransportError) as raised:
                await asyncio.to_thread(client.get, "/api/v1/nodes", limit="1")
            return raised.value

    exc = asyncio.run(main())
    assert isinstance(exc, OSError) and not isinstance(exc, errors.ApiError)
    assert exc.cause == cause and type(exc.__cause__).__name__ == cause
    assert (exc.method, exc.path) == ("GET", "/api/v1/nodes?limit=1")
