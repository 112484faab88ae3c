"""gpu-webhook's ASGI application: the routes (`POST /mutate`, `GET /healthz`, `/readyz`, `/metrics`), the limits of
a request body, and the admission decision (:mod:`gpu_scheduling.admission`) applied to it. Knows nothing of
connections, TLS or the server that runs it (:mod:`gpu_scheduling.webhook.transport`).

It keeps serving whatever a client sends: a body that is not an AdmissionReview is answered 400, one over
MAX_BODY_BYTES 413 (without reading it), one that does not arrive within BODY_TIMEOUT 408; an unexpected error is
logged and answered 500 (a bug); a client that goes away is logged at debug level.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import time
from typing import TYPE_CHECKING, Any, ClassVar

from gpu_scheduling import admission, gpumap, health
from gpu_scheduling.webhook.metrics import MAX_BODY_BYTES, WebhookMetrics

if TYPE_CHECKING:
    from collections.abc import Iterable

    from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, HTTPScope, Scope

log = logging.getLogger("gpu_scheduling.webhook")

# Limits (see docs/gpu-webhook.md, "Bounded answers" and "Limits").
BODY_TIMEOUT = 10.0  # start of a request to the end of its body
BODY_BUDGET_BYTES = 16 * 1024 * 1024  # request bodies buffered at once, all connections together (memory limit)
LARGE_BODY_BYTES = 64 * 1024  # larger bodies are decided in one worker thread, one at a time (memory, event loop)
DRAIN_SECONDS = 5.0  # after an HTTP/1.1 413, read and drop the rest of the body for at most this long...
DRAIN_BYTES = 16 * 1024 * 1024  # ...and this many bytes, then close


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
        # The maps of the pods it reviews, each distinct map parsed once: a StatefulSet's replicas carry the same one.
        self.maps = gpumap.ParseCache()
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
            self.metrics.disconnects.inc()
            log.debug("client %s went away before its answer", _peer(scope))
        except Exception:  # a bug: answer 500 if we still can, keep serving
            self.metrics.errors.inc()
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
            self.metrics.bad_requests.inc()
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
                review = await asyncio.get_running_loop().run_in_executor(
                    self._large, _decide, body, self.gpu_resource, self.isolated, self.maps
                )
            else:
                review = _decide(body, self.gpu_resource, self.isolated, self.maps)
        except admission.BadRequest as exc:
            self.metrics.bad_requests.inc()
            log.warning("bad admission request from %s: %s", _peer(scope), exc)
            await self._send(send, 400, _json({"error": str(exc)}))
            return
        out = admission.encode_review(review)
        response = review["response"]
        self.metrics.requests.inc()
        if not response.get("allowed"):
            self.metrics.denied.inc()
            log.info("denied %s: %s", response.get("uid"), (response.get("status") or {}).get("message"))
        elif "patch" in response:
            self.metrics.patched.inc()
        self.metrics.response_size(len(out))
        await self._send(send, 200, out)
        self.metrics.duration.observe(time.perf_counter() - started)

    async def _read_body(self, scope: HTTPScope, receive: ASGIReceiveCallable) -> bytes:
        declared = None
        for name, value in scope["headers"]:
            if name == b"content-length":
                # h11 and h2 already refuse a malformed or disagreeing Content-Length.
                declared = int(value) if value.isdigit() and len(value) <= 12 else None
        if declared is not None and declared > self.max_body:
            self.metrics.too_large.inc()
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
                        self.metrics.too_large.inc()
                        raise _Answer(413, f"body is over the limit of {self.max_body} bytes", close=True)
                    if size > held:
                        await self._budget.take(size - held)
                        held = size
                    chunks.append(chunk)
        except TimeoutError:
            self.metrics.timeouts.inc()
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


def _decide(
    body: bytes, gpu_resource: str | None, isolated: bool, maps: gpumap.ParseCache
) -> admission.AdmissionReview:
    return admission.review_pod(admission.parse_review(body), gpu_resource, isolated, maps)


def _peer(scope: HTTPScope) -> str:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else "?"


def make_app(
    metrics: WebhookMetrics | None = None, gpu_resource: str | None = None, isolated: bool = False
) -> WebhookApp:
    return WebhookApp(metrics, gpu_resource=gpu_resource, isolated=isolated)
