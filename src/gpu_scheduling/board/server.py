"""gpu-board's HTTP application: the page, the state document, its event stream and the create form's endpoints.

Routes (all answers to a bad request are JSON `{"kind": "Error", "status", "message", "field"?}`, never a 500 for
any input; a bug is logged and answered 500 without stopping the server):

- `GET /` the page, with a Content-Security-Policy that allows exactly its one inline script and style (their
  sha256 hashes, computed when the server is made) and nothing from elsewhere.
- `GET /api/state` the board's snapshot; `GET /api/config` what the page needs to draw the form.
- `GET /api/events` Server-Sent Events: `retry`, the snapshot (id = its version), then one `patch` per coalesced
  change and a heartbeat comment; see :class:`EventHub`.
- `POST /api/preview`, `POST /api/create`, `DELETE /api/workloads/<namespace>/<name>`: only with `allow_create`,
  only from the page's own origin, only in the configured namespaces. The form is turned into objects by the pure
  :mod:`gpu_scheduling.board.forms`; the apiserver does the rest (a dry run for the preview), and its refusals are
  passed on (422, 409 when the name is in use).
- `/healthz`, `/readyz`, `/metrics` (health.add_probes; families `gpu_board_*`).

Hostile input is bounded before it is parsed: a body over `max_body` is refused (413) unread, one that does not
arrive within `body_timeout` gets 408, anything but `application/json` 415, JSON nested deeper than MAX_DEPTH 400.
The Board and the API client are given to the server (:func:`make_app`), so tests feed a Board with plain objects
and need no cluster for anything but create, preview and delete.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import functools
import hashlib
import html.parser
import importlib.resources
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Protocol

import aiohttp
import prometheus_client
from aiohttp import web

from gpu_scheduling import constants, health, names
from gpu_scheduling.board import forms
from gpu_scheduling.board.state import Board, Changes
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import AlreadyExists, ApiError, NotFound, TransportError
from gpu_scheduling.text import show

log = logging.getLogger("gpu_scheduling.board")

MAX_BODY_BYTES: Final = 64 * 1024  # a form is a few hundred bytes; a map of 64 lines a few KB
MAX_DEPTH: Final = 8  # a form nests two levels ({"selector": {...}}); deeper is not a form
BODY_TIMEOUT: Final = 10.0  # seconds from the start of a request to the end of its body
WRITE_TIMEOUT: Final = 10.0  # an event stream whose write is blocked this long (a client that does not read) is dropped
RETRY_MS: Final = 2000  # the EventSource's reconnection delay
DEFAULT_POD_IMAGE: Final = "gpu-scheduler-check:latest"
#: How often an idle stream looks whether its client went away (aiohttp does not cancel the handler by itself).
LIVENESS_SECONDS: Final = 1.0
#: Answers of an apiserver write that take longer are given up (the page shows the error).
API_TIMEOUT: Final = 30.0

SECONDS_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
#: Object kinds the board creates and deletes (labels of its counters, all present from the first scrape).
OBJECT_KINDS: Final = (constants.GPU_CLAIM_KIND, "Pod", "StatefulSet")

JSON = Any
_MISSING: Final = object()  # what BoardServer._call answers for NotFound when that is fine


class Api(Protocol):
    """What the server needs of the Kubernetes client (kube.client.Client has it): one request."""

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float = 30,
    ) -> Awaitable[JSON]: ...


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    """The server's settings, from gpu-board's flags (main.py)."""

    allow_create: bool = False
    """Serve preview, create and delete (`--allow-create`); off: they answer 403."""
    namespaces: tuple[str, ...] = ("default",)
    """Where the form may create and delete (`--namespace`, repeatable)."""
    scheduler_name: str = constants.DEFAULT_SCHEDULER_NAME
    """`spec.schedulerName` of the pods the form makes, and what /api/config tells the page."""
    pod_image: str = DEFAULT_POD_IMAGE
    """Image of the pods the form makes (`--pod-image`)."""
    coalesce: float = 0.25
    """Seconds between patches at most (`--coalesce`): the changes of that long go out as one patch."""
    heartbeat: float = 15.0
    """Seconds between heartbeat comments on an idle stream (`--heartbeat`)."""
    max_clients: int = 100
    """Event streams at once (`--max-clients`); beyond, 503."""
    write_timeout: float = WRITE_TIMEOUT
    """Seconds a write to a stream may block before its client is dropped."""
    body_timeout: float = BODY_TIMEOUT
    max_body: int = MAX_BODY_BYTES

    @property
    def form_settings(self) -> forms.Settings:
        return forms.Settings(scheduler_name=self.scheduler_name, pod_image=self.pod_image, namespaces=self.namespaces)


# ---- answers ---------------------------------------------------------------------------------------------------


class Refusal(Exception):
    """Answer `status` with a JSON Error naming `field` (when there is one)."""

    def __init__(self, status: int, message: str, field: str | None = None, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.field = status, message, field
        self.headers = dict(headers or {})
        self.problems: list[tuple[str, str]] = []


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def json_response(obj: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(
        text=dumps(obj), status=status, content_type="application/json", charset="utf-8", headers=headers
    )


def error_response(refusal: Refusal) -> web.Response:
    body: dict[str, Any] = {"kind": "Error", "status": refusal.status, "message": refusal.message}
    if refusal.field is not None:
        body["field"] = refusal.field
    if len(refusal.problems) > 1:
        body["problems"] = [{"field": f, "message": m} for f, m in refusal.problems]
    return json_response(body, refusal.status, refusal.headers)


# ---- the page --------------------------------------------------------------------------------------------------


class _InlineParts(html.parser.HTMLParser):
    """The text of every inline `<script>` and `<style>` element of a page, exactly as the browser hashes it (an
    HTML parser, not a regular expression: a comment that mentions `<script>` is no script)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.parts: dict[str, list[str]] = {"script": [], "style": []}
        self._open: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.parts:
            self._open, self._text = tag, []

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == self._open:
            self.parts[tag].append("".join(self._text))
            self._open = None


def load_page() -> str:
    """The page shipped in the package (static/index.html)."""
    resource = importlib.resources.files("gpu_scheduling.board").joinpath("static", "index.html")
    try:
        return resource.read_text(encoding="utf-8")
    except OSError as exc:
        raise RuntimeError(f"the board's page {resource} cannot be read: {exc}") from None


def _hashes(texts: list[str]) -> str:
    found = [f"'sha256-{base64.b64encode(hashlib.sha256(t.encode()).digest()).decode()}'" for t in texts]
    return " ".join(found) or "'none'"


def content_security_policy(page: str) -> str:
    """The page's CSP: its inline scripts and styles by hash (their text between the tags, as the browser hashes
    it), connections to its own origin only, nothing else."""
    parser = _InlineParts()
    parser.feed(page)
    parser.close()
    scripts, styles = _hashes(parser.parts["script"]), _hashes(parser.parts["style"])
    return (
        f"default-src 'none'; script-src {scripts}; style-src {styles}; "
        "connect-src 'self'; img-src 'self' data:; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
    )


# ---- metrics ---------------------------------------------------------------------------------------------------


class BoardMetrics:
    """gpu-board's metrics in a registry of their own (what /metrics renders)."""

    def __init__(self) -> None:
        self.registry = prometheus_client.CollectorRegistry()
        r = self.registry
        self.requests = prometheus_client.Counter(
            "gpu_board_http_requests_total",
            "HTTP requests answered, by route and status.",
            ["route", "code"],
            registry=r,
        )
        self.events = prometheus_client.Counter(
            "gpu_board_watch_events_total", "Watch events applied to the board, by resource.", ["resource"], registry=r
        )
        self.apply_errors = prometheus_client.Counter(
            "gpu_board_apply_errors_total", "Watch events the board failed to apply (a bug; logged).", registry=r
        )
        self.synced = prometheus_client.Gauge(
            "gpu_board_informer_synced", "1 once the resource's informer has listed, else 0.", ["resource"], registry=r
        )
        self.version = prometheus_client.Gauge("gpu_board_version", "The board's version (patches made).", registry=r)
        self.clients = prometheus_client.Gauge("gpu_board_sse_clients", "Open event streams.", registry=r)
        self.streams = prometheus_client.Counter(
            "gpu_board_sse_streams_total", "Event streams opened (a snapshot sent).", registry=r
        )
        self.refused = prometheus_client.Counter(
            "gpu_board_sse_refused_total", "Event streams refused at --max-clients (HTTP 503).", registry=r
        )
        self.dropped = prometheus_client.Counter(
            "gpu_board_sse_dropped_total", "Event streams dropped because their client stopped reading.", registry=r
        )
        self.patches = prometheus_client.Counter(
            "gpu_board_patches_total", "Coalesced changes published to the event streams.", registry=r
        )
        self.sent_bytes = prometheus_client.Counter(
            "gpu_board_sse_sent_bytes_total", "Bytes written to event streams.", registry=r
        )
        self.snapshot_seconds = prometheus_client.Histogram(
            "gpu_board_snapshot_seconds",
            "Time to build and encode a full snapshot.",
            buckets=SECONDS_BUCKETS,
            registry=r,
        )
        self.patch_seconds = prometheus_client.Histogram(
            "gpu_board_patch_seconds", "Time to build and encode a patch.", buckets=SECONDS_BUCKETS, registry=r
        )
        self.created = prometheus_client.Counter(
            "gpu_board_created_objects_total", "Objects created through the form, by kind.", ["kind"], registry=r
        )
        self.deleted = prometheus_client.Counter(
            "gpu_board_deleted_objects_total", "Objects deleted from the page, by kind.", ["kind"], registry=r
        )
        self.api_refusals = prometheus_client.Counter(
            "gpu_board_api_refusals_total",
            "Writes (preview, create, delete) the Kubernetes API refused or did not answer.",
            registry=r,
        )
        for kind in OBJECT_KINDS:
            self.created.labels(kind)
            self.deleted.labels(kind)


# ---- the event stream ------------------------------------------------------------------------------------------


class _Stream:
    """One client's stream: the changes it has not been sent yet, and their patch when it is the shared one."""

    __slots__ = ("encoded", "pending", "wake")

    def __init__(self) -> None:
        self.pending: Changes | None = None
        self.encoded: bytes | None = None  # the event for exactly `pending`, shared by every client that was caught up
        self.wake = asyncio.Event()


def sse_event(event: str, version: int, data: str) -> bytes:
    """One SSE message. `data` is one line of JSON (json.dumps escapes CR and LF inside strings)."""
    return f"event: {event}\nid: {version}\ndata: {data}\n\n".encode()


class EventHub:
    """The event streams: a snapshot on connect, then the board's changes, coalesced.

    :meth:`run` takes the board's changes every `coalesce` seconds and hands them to every stream. A stream that is
    caught up gets the patch built once for all; one still writing its last patch merges the new changes into what
    it owes and builds its own patch (with the current contents) when it can write again, so a slow client costs
    one merge per tick, never a queue. A write blocked longer than `write_timeout` drops the client; the page's
    EventSource reconnects by itself and starts again from a snapshot."""

    def __init__(self, board: Board, config: ServerConfig, metrics: BoardMetrics) -> None:
        self.board, self.config, self.metrics = board, config, metrics
        self.streams: set[_Stream] = set()
        self.closing = False
        self._snapshot: tuple[int, str] | None = None
        metrics.clients.set_function(lambda: len(self.streams))
        metrics.version.set_function(lambda: self.board.version)

    def tick(self) -> Changes | None:
        """Take the board's changes and hand them to every stream; the changes, or None when there were none."""
        changes = self.board.take_changes()
        if changes is None:
            return None
        self.metrics.patches.inc()
        shared: bytes | None = None
        for stream in self.streams:
            if stream.pending is None:
                if shared is None:
                    shared = self._patch(changes)
                stream.pending, stream.encoded = changes, shared
            else:
                stream.pending, stream.encoded = stream.pending.merge(changes), None
            stream.wake.set()
        return changes

    def _patch(self, changes: Changes) -> bytes:
        started = time.perf_counter()
        event = sse_event("patch", self.board.version, dumps(self.board.patch(changes)))
        self.metrics.patch_seconds.observe(time.perf_counter() - started)
        return event

    def snapshot(self) -> tuple[int, str]:
        """The snapshot's version and JSON text, serialised once per version: at 1000 nodes it is megabytes, and a
        burst of reconnecting pages must not each block the event loop for its serialisation. A change applied after
        the text was made is not lost: it is in the next patch, which every stream registered by then receives."""
        if self._snapshot is not None and self._snapshot[0] == self.board.version:
            return self._snapshot
        started = time.perf_counter()
        self._snapshot = (self.board.version, dumps(self.board.document()))
        self.metrics.snapshot_seconds.observe(time.perf_counter() - started)
        return self._snapshot

    async def run(self) -> None:
        """Publish the board's changes every `coalesce` seconds, until cancelled."""
        while True:
            await asyncio.sleep(self.config.coalesce)
            try:
                self.tick()
            except Exception:  # a bug in building a patch: log it, keep the streams going
                log.exception("publishing the board's changes failed")

    async def close(self, _: web.Application | None = None) -> None:
        """End every stream (the server is stopping); the pages reconnect to another replica or to this one."""
        self.closing = True
        for stream in self.streams:
            stream.wake.set()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if self.closing:
            raise Refusal(503, "the board is stopping; reconnect in a moment", headers={"Retry-After": "2"})
        if len(self.streams) >= self.config.max_clients:
            self.metrics.refused.inc()
            raise Refusal(
                503,
                f"too many event streams: the board serves at most {self.config.max_clients} at once "
                "(--max-clients); try again later",
                headers={"Retry-After": "10"},
            )
        stream = _Stream()
        # Registered before the snapshot is built, in the same step of the event loop: no change falls between.
        self.streams.add(stream)
        try:
            return await self._serve(request, stream)
        finally:
            self.streams.discard(stream)

    async def _serve(self, request: web.Request, stream: _Stream) -> web.StreamResponse:
        version, snapshot = self.snapshot()
        resp = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-store",
                "X-Accel-Buffering": "no",  # a proxy in front must not hold the events back
            }
        )
        self.metrics.streams.inc()
        try:
            await resp.prepare(request)
            await self._write(
                request, resp, f"retry: {RETRY_MS}\n\n".encode() + sse_event("snapshot", version, snapshot)
            )
            next_beat = time.monotonic() + self.config.heartbeat
            while not self.closing:
                timeout = max(0.0, min(next_beat - time.monotonic(), LIVENESS_SECONDS))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stream.wake.wait(), timeout)
                stream.wake.clear()
                transport = request.transport
                if transport is None or transport.is_closing():
                    break  # the client went away
                if stream.pending is not None:
                    changes, encoded = stream.pending, stream.encoded
                    stream.pending = stream.encoded = None
                    await self._write(request, resp, encoded if encoded is not None else self._patch(changes))
                elif time.monotonic() >= next_beat:
                    await self._write(request, resp, f": heartbeat {int(time.time())}\n\n".encode())
                    next_beat = time.monotonic() + self.config.heartbeat
        except _Dropped:
            self.metrics.dropped.inc()
            log.info(
                "dropped the event stream of %s: a write was blocked for %gs (the client does not read)",
                request.remote,
                self.config.write_timeout,
            )
        except (ConnectionError, aiohttp.ClientConnectionResetError):
            log.debug("the event stream of %s ended: the client went away", request.remote)
        return resp

    async def _write(self, request: web.Request, resp: web.StreamResponse, data: bytes) -> None:
        try:
            await asyncio.wait_for(resp.write(data), self.config.write_timeout)
        except TimeoutError:
            if request.transport is not None:
                request.transport.abort()
            raise _Dropped from None
        self.metrics.sent_bytes.inc(len(data))


class _Dropped(Exception):
    """A stream's client stopped reading."""


# ---- the server ------------------------------------------------------------------------------------------------


def _depth(value: Any) -> int:
    """Nesting depth of decoded JSON (a scalar is 0), without recursion."""
    deepest, todo = 0, [(value, 0)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, dict):
            todo.extend((v, level + 1) for v in item.values())
            deepest = max(deepest, level + 1)
        elif isinstance(item, list):
            todo.extend((v, level + 1) for v in item)
            deepest = max(deepest, level + 1)
    return deepest


def decode_body(body: bytes) -> Any:
    """The JSON of a request body, or a 400 Refusal (field "body") saying what is wrong with it."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Refusal(400, f"the body is not UTF-8 (byte {exc.start})", "body") from None

    def constant(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    try:
        value = json.loads(text, parse_constant=constant)
    except RecursionError:
        raise Refusal(400, f"the body nests deeper than {MAX_DEPTH} levels", "body") from None
    except ValueError as exc:
        raise Refusal(400, f"the body is not JSON: {show(str(exc), 120)}", "body") from None
    if _depth(value) > MAX_DEPTH:
        raise Refusal(400, f"the body nests deeper than {MAX_DEPTH} levels", "body")
    return value


def _api_message(exc: ApiError) -> str:
    return f"the Kubernetes API refused it ({exc.reason or exc.status}): {exc.message}"


class BoardServer:
    """The routes. `board` is the live Board (fed by the informers in main.py), `api` the Kubernetes client the
    form's endpoints use (None: they answer 503), `ready` what /readyz answers."""

    def __init__(
        self,
        board: Board,
        api: Api | None,
        config: ServerConfig | None = None,
        *,
        ready: Callable[[], bool] = lambda: True,
        page: str | None = None,
        metrics: BoardMetrics | None = None,
    ) -> None:
        self.board, self.api = board, api
        self.config = config or ServerConfig()
        self.metrics = metrics or BoardMetrics()
        self.ready = ready
        self.page = load_page() if page is None else page
        self.csp = content_security_policy(self.page)
        self.hub = EventHub(board, self.config, self.metrics)

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._errors], client_max_size=self.config.max_body)
        r = app.router
        r.add_get("/", self.index)
        r.add_get("/api/state", self.state)
        r.add_get("/api/config", self.settings)
        r.add_get("/api/events", self.hub.handle, allow_head=False)
        r.add_post("/api/preview", self.preview)
        r.add_post("/api/create", self.create)
        r.add_delete("/api/workloads/{namespace}/{name}", self.delete)
        health.add_probes(app, self.ready, self.metrics.registry)
        app.on_response_prepare.append(self._headers)
        app.on_shutdown.append(self.hub.close)
        return app

    # ---- plumbing ----------------------------------------------------------------------------------------------

    @web.middleware
    async def _errors(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        route = request.match_info.route.resource
        name = route.canonical if route is not None else "other"
        try:
            resp = await handler(request)
        except Refusal as refusal:
            resp = error_response(refusal)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            resp = error_response(self._http_refusal(request, exc))
        except Exception:  # a bug: log it, answer 500, keep serving
            log.exception("unexpected error answering %s %s", request.method, request.path)
            resp = error_response(Refusal(500, "internal error, see the board's log"))
        self.metrics.requests.labels(name, str(resp.status)).inc()
        return resp

    @staticmethod
    def _http_refusal(request: web.Request, exc: web.HTTPException) -> Refusal:
        headers = {k: v for k, v in exc.headers.items() if k.lower() in ("allow", "retry-after")}
        if exc.status == 404:
            message = f"no such path {show(request.path)}; the board serves /, /api/state, /api/config, /api/events"
        elif exc.status == 405:
            message = f"{request.method} is not allowed here; allowed: {exc.headers.get('Allow', '')}"
        elif exc.status == 413:
            return Refusal(413, "the body is too large", "body", headers)
        else:
            message = exc.reason
        return Refusal(exc.status, message, headers=headers)

    @staticmethod
    async def _headers(request: web.Request, resp: web.StreamResponse) -> None:
        resp.headers.setdefault("X-Content-Type-Options", "nosniff")
        resp.headers.setdefault("Referrer-Policy", "no-referrer")
        resp.headers.setdefault("Cache-Control", "no-store")

    def _check_write(self, request: web.Request) -> None:
        """Creation is on, and the request comes from the page's own origin (a browser always sends Origin on a
        POST or DELETE; another site's page cannot forge it)."""
        if not self.config.allow_create:
            raise Refusal(403, "creation is off: the board was started without --allow-create")
        origin = request.headers.get("Origin")
        own = f"{request.scheme}://{request.host}".lower()
        if origin is None:
            raise Refusal(403, f"the request has no Origin header; only the board's own page ({own}) may write")
        if origin.lower() != own:
            raise Refusal(403, f"Origin {show(origin)} is not the board's own ({own}); refused")

    async def _read_body(self, request: web.Request) -> bytes:
        if request.content_type != "application/json":
            raise Refusal(415, f"the body must be application/json, got {show(request.content_type)}", "body")
        limit = self.config.max_body
        if request.content_length is not None and request.content_length > limit:
            raise Refusal(413, f"the body is {request.content_length} bytes; at most {limit} are allowed", "body")
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.config.body_timeout):
                while True:
                    chunk = await request.content.read(16 * 1024)
                    if not chunk:
                        break
                    size += len(chunk)
                    if size > limit:
                        raise Refusal(413, f"the body is over {limit} bytes; at most {limit} are allowed", "body")
                    chunks.append(chunk)
        except TimeoutError:
            raise Refusal(408, f"the body did not arrive within {self.config.body_timeout:g}s", "body") from None
        return b"".join(chunks)

    async def _workload(self, request: web.Request) -> forms.Workload:
        self._check_write(request)
        form = decode_body(await self._read_body(request))
        try:
            return forms.build(form, self.config.form_settings)
        except forms.FormError as exc:
            refusal = Refusal(exc.status, exc.message, exc.field)
            refusal.problems = exc.problems
            raise refusal from None

    def _client(self) -> Api:
        if self.api is None:
            raise Refusal(503, "the board has no Kubernetes client")
        return self.api

    async def _call(self, what: str, request: Callable[[], Awaitable[JSON]], *, missing_ok: bool = False) -> JSON:
        """An apiserver call; its refusal becomes a 422 (409 for a name in use) with the apiserver's message. With
        `missing_ok`, NotFound answers _MISSING."""
        try:
            return await request()
        except NotFound as exc:
            if missing_ok:
                return _MISSING
            self.metrics.api_refusals.inc()
            raise Refusal(422, f"{what}: {_api_message(exc)}") from None
        except AlreadyExists as exc:
            self.metrics.api_refusals.inc()
            raise Refusal(409, f"{what}: {_api_message(exc)}", "name") from None
        except ApiError as exc:
            self.metrics.api_refusals.inc()
            raise Refusal(422, f"{what}: {_api_message(exc)}") from None
        except TransportError as exc:
            self.metrics.api_refusals.inc()
            log.warning("%s: the Kubernetes API did not answer: %s", what, exc)
            raise Refusal(503, f"{what}: the Kubernetes API did not answer ({exc.cause})") from None

    def _post(self, namespace: str, obj: forms.Object, dry_run: bool) -> Callable[[], Awaitable[JSON]]:
        path = {
            constants.GPU_CLAIM_PLURAL: paths.gpu_claims,
            "pods": paths.pods,
            "statefulsets": paths.statefulsets,
        }[obj.resource](namespace)
        params = {"dryRun": "All"} if dry_run else None
        return functools.partial(
            self._client().request, "POST", path, params=params, body=obj.body, timeout=API_TIMEOUT
        )

    # ---- routes ------------------------------------------------------------------------------------------------

    async def index(self, _: web.Request) -> web.Response:
        return web.Response(
            text=self.page,
            content_type="text/html",
            charset="utf-8",
            headers={"Content-Security-Policy": self.csp},
        )

    async def state(self, _: web.Request) -> web.Response:
        return web.Response(text=self.hub.snapshot()[1], content_type="application/json", charset="utf-8")

    async def settings(self, _: web.Request) -> web.Response:
        return json_response(
            {
                "apiVersion": constants.BOARD_API_VERSION,
                "kind": "BoardConfig",
                "allowCreate": self.config.allow_create,
                "namespaces": list(self.config.namespaces),
                "strategies": list(constants.STRATEGIES),
                "schedulerName": self.config.scheduler_name,
                "heartbeatSeconds": self.config.heartbeat,
            }
        )

    async def preview(self, request: web.Request) -> web.Response:
        workload = await self._workload(request)
        answers = []
        for obj in workload.objects:
            what = f"{obj.kind} {workload.namespace}/{obj.name} (dry run)"
            answers.append(await self._call(what, self._post(workload.namespace, obj, dry_run=True)))
        return json_response({"kind": "Preview", "objects": answers})

    async def create(self, request: web.Request) -> web.Response:
        workload = await self._workload(request)
        made: list[forms.Object] = []
        try:
            for obj in workload.objects:
                what = f"{obj.kind} {workload.namespace}/{obj.name}"
                await self._call(what, self._post(workload.namespace, obj, dry_run=False))
                made.append(obj)
                self.metrics.created.labels(obj.kind).inc()
        except Refusal:
            # The claim without its pod would hold nothing and only clutter the list: take it back.
            for obj in reversed(made):
                await self._undo(workload.namespace, obj)
            raise
        log.info("created %s %s/%s (%s)", workload.kind, workload.namespace, workload.name, len(made))
        return json_response(
            {
                "kind": "Created",
                "objects": [{"kind": o.kind, "namespace": workload.namespace, "name": o.name} for o in made],
            },
            status=201,
        )

    async def _undo(self, namespace: str, obj: forms.Object) -> None:
        path = paths.gpu_claim(namespace, obj.name) if obj.resource == constants.GPU_CLAIM_PLURAL else None
        if path is None or self.api is None:
            return
        try:
            await self.api.request("DELETE", path, timeout=API_TIMEOUT)
            self.metrics.deleted.labels(obj.kind).inc()
        except NotFound:
            pass
        except (ApiError, TransportError) as exc:
            log.warning("could not delete %s %s/%s after its pod failed: %s", obj.kind, namespace, obj.name, exc)

    async def delete(self, request: web.Request) -> web.Response:
        self._check_write(request)
        try:
            namespace = forms.check_namespace(request.match_info["namespace"], self.config.form_settings)
        except forms.FormError as exc:
            raise Refusal(exc.status, exc.message, exc.field) from None
        name = request.match_info["name"]
        if not names.is_label(name, forms.MAX_NAME):
            raise Refusal(422, f"name {show(name)} is not a workload name (a DNS label)", "name")
        api = self._client()
        selector = forms.selector(name)
        found: list[tuple[str, str, JSON]] = []  # kind, path, object
        # The StatefulSet first, so that its controller does not make the pods again; the pods before their claim.
        for kind, collection, item in (
            ("StatefulSet", paths.statefulsets, paths.statefulset),
            ("Pod", paths.pods, paths.pod),
            (constants.GPU_CLAIM_KIND, paths.gpu_claims, paths.gpu_claim),
        ):
            params = {"labelSelector": selector, "limit": "500"}
            listed = await self._call(
                f"listing {kind}s of workload {namespace}/{name}",
                functools.partial(api.request, "GET", collection(namespace), params=params, timeout=API_TIMEOUT),
            )
            items = listed.get("items") if isinstance(listed, dict) else None
            for obj in items or []:
                meta = obj.get("metadata") or {}
                obj_labels = meta.get("labels") or {}
                # The selector already says so; checked again because nothing without both labels may be touched.
                if (
                    obj_labels.get(constants.BOARD_CREATED_LABEL) == constants.BOARD_NAME
                    and obj_labels.get(constants.BOARD_WORKLOAD_LABEL) == name
                ):
                    found.append((kind, item(namespace, meta["name"]), obj))
        if not found:
            raise Refusal(404, f"the board created no workload {name!r} in namespace {namespace!r}", "name")
        deleted = []
        for kind, path, obj in found:
            meta = obj["metadata"]
            options = {
                "apiVersion": "v1",
                "kind": "DeleteOptions",
                "propagationPolicy": "Background",
                # Only the object listed, not one made again under the same name since.
                "preconditions": {"uid": meta.get("uid")},
            }
            answer = await self._call(
                f"deleting {kind} {namespace}/{meta['name']}",
                functools.partial(api.request, "DELETE", path, body=options, timeout=API_TIMEOUT),
                missing_ok=True,
            )
            if answer is _MISSING:
                continue  # gone already (a StatefulSet's pod, deleted with it)
            self.metrics.deleted.labels(kind).inc()
            deleted.append({"kind": kind, "namespace": namespace, "name": meta["name"]})
        log.info("deleted workload %s/%s: %d objects", namespace, name, len(deleted))
        return json_response({"kind": "Deleted", "objects": deleted})


def make_app(
    board: Board,
    api: Api | None,
    config: ServerConfig | None = None,
    *,
    ready: Callable[[], bool] = lambda: True,
    page: str | None = None,
    metrics: BoardMetrics | None = None,
) -> tuple[web.Application, BoardServer]:
    """The application and its server (whose `hub.run()` the caller runs beside it)."""
    server = BoardServer(board, api, config, ready=ready, page=page, metrics=metrics)
    return server.app(), server
