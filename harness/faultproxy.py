"""A fault-injecting HTTPS proxy between a program under test and the test kube-apiserver.

The proxy serves TLS with a certificate of its own CA and forwards every request to the real apiserver over a
pooled, kept-alive connection that presents the client certificate of the kubeconfig it was given, so the
apiserver sees the same user as without the proxy. Bodies stream both ways: a watch is a long chunked response
and each chunk is passed on as it arrives. A test adds rules that answer matching requests with an error (a
Kubernetes `Status`, as the apiserver would write it) or hold them back for a while, and reads how many requests
each rule changed and how many matching ones went through untouched.

It runs its own asyncio loop in a background thread, so the synchronous test steps call it directly. It knows
nothing about the scheduler or about Kubernetes objects; it must not change a request or answer that no rule
matches (apart from hop-by-hop headers). Upgrades (exec, port-forward) are not supported.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import logging
import pathlib
import re
import socket
import ssl
import threading
import time
from collections.abc import Iterable
from typing import Any, Self

import aiohttp
import yaml
from aiohttp import web

from harness import pki
from harness.processes import free_port

log = logging.getLogger(__name__)

# Headers that belong to one connection, not to the request (RFC 9110 7.6.1), plus Host, which the upstream
# client writes itself.
HOP_BY_HOP = frozenset(
    h.lower()
    for h in (
        "Connection",
        "Keep-Alive",
        "Proxy-Authenticate",
        "Proxy-Authorization",
        "Proxy-Connection",
        "TE",
        "Trailer",
        "Transfer-Encoding",
        "Upgrade",
        "Host",
    )
)

# The `reason` the apiserver writes for each status code (k8s.io/apimachinery/pkg/apis/meta/v1 StatusReason).
REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def status_body(code: int, message: str, retry_after: int | None = None) -> dict[str, Any]:
    """A `Status` object as kube-apiserver answers an error (kind Status, status Failure, reason, code)."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": REASONS.get(code, "Unknown"),
        "code": code,
    }
    if retry_after is not None:
        body["details"] = {"retryAfterSeconds": retry_after}
    return body


PathMatcher = str | re.Pattern[str] | None


@dataclasses.dataclass(eq=False)
class Rule:
    """What to do with the requests that match `method` and `path`, for at most `times` of them (None: all).

    `path` is matched against the request path without its query: a string must equal it, a compiled regular
    expression is searched in it. `query` (optional) is searched in the raw query string.
    """

    action: str  # "fail" or "delay"
    method: str | None = None
    path: PathMatcher = None
    query: re.Pattern[str] | None = None
    times: int | None = None
    status: int = 503
    message: str = ""
    retry_after: int | None = None
    seconds: float = 0.0
    injected: int = 0  # requests this rule changed so far
    paths: list[str] = dataclasses.field(default_factory=list)  # their paths, in order

    def matches(self, method: str, path: str, query: str) -> bool:
        if self.method is not None and self.method.upper() != method.upper():
            return False
        if isinstance(self.path, str) and self.path != path:
            return False
        if isinstance(self.path, re.Pattern) and not self.path.search(path):
            return False
        return self.query is None or bool(self.query.search(query))

    @property
    def exhausted(self) -> bool:
        return self.times is not None and self.injected >= self.times


@dataclasses.dataclass(frozen=True)
class Exchange:
    """One request the proxy handled: what came in and what it answered (`status` 0: the client went away)."""

    method: str
    path: str
    query: str
    status: int
    injected: bool
    user_agent: str
    at: float


def _matches(ex: Exchange, method: str | None, path: PathMatcher) -> bool:
    return Rule("probe", method, path).matches(ex.method, ex.path, ex.query)


class FaultProxy:
    """`FaultProxy(upstream_kubeconfig, ca, workdir).start()`; point clients at `kubeconfig`; `stop()` at the end.

    `upstream_kubeconfig` names the apiserver and the credentials (client certificate or token) the proxy uses;
    `ca` signs the proxy's serving certificate. The kubeconfig written for clients carries the same user as the
    upstream one, with the proxy's address and CA; when `client_ca` is given the proxy also requires a client
    certificate signed by it, as the apiserver would.
    """

    def __init__(
        self,
        upstream_kubeconfig: pathlib.Path,
        ca: pki.CA,
        workdir: pathlib.Path,
        *,
        name: str = "faultproxy",
        client_ca: pathlib.Path | None = None,
    ):
        from gpu_scheduling.kube import config  # the project's own kubeconfig loader: the same TLS settings

        self.name = name
        self.upstream_kubeconfig = upstream_kubeconfig
        self.upstream = config.from_kubeconfig(upstream_kubeconfig)
        self.ca = ca
        self.client_ca = client_ca
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        # Not the CA's own name: a certificate whose subject equals its issuer reads as self-signed.
        self.pair = ca.issue(f"{name}-serving", f"{name} serving", server=True, dns=("localhost",), ips=("127.0.0.1",))
        self.kubeconfig = workdir / f"{name}.kubeconfig"
        self.kubeconfig.write_text(self._client_kubeconfig())
        self._rules: list[Rule] = []
        self._exchanges: list[Exchange] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    def _client_kubeconfig(self) -> str:
        doc = yaml.safe_load(self.upstream_kubeconfig.read_text())
        for cluster in doc.get("clusters") or []:
            c = cluster["cluster"]
            c["server"] = self.url
            c.pop("certificate-authority", None)
            c.pop("insecure-skip-tls-verify", None)
            c["certificate-authority-data"] = base64.b64encode(self.ca.pem).decode()
        base = self.upstream_kubeconfig.parent
        for user in doc.get("users") or []:  # relative file names stay valid wherever the copy is written
            u = user.get("user") or {}
            for key in ("client-certificate", "client-key", "tokenFile"):
                if key in u and not pathlib.Path(u[key]).is_absolute():
                    u[key] = str(base / u[key])
        return yaml.safe_dump(doc, sort_keys=False)

    # ---- rules (called from the test's thread) ---------------------------------------------------------------
    def fail(
        self,
        method: str | None = None,
        path: PathMatcher = None,
        status: int = 503,
        *,
        times: int | None = None,
        message: str = "",
        retry_after: int | None = None,
        query: re.Pattern[str] | None = None,
    ) -> Rule:
        """Answer the matching requests with `status` and a Kubernetes Status body; they never reach the
        apiserver. With `retry_after` the answer carries `Retry-After` (as the apiserver's 429s do)."""
        message = message or f"injected by the test's fault proxy: {status} {REASONS.get(status, '')}".strip()
        return self._add(
            Rule("fail", method, path, query, times, status=status, message=message, retry_after=retry_after)
        )

    def delay(
        self,
        method: str | None = None,
        path: PathMatcher = None,
        seconds: float = 1.0,
        *,
        times: int | None = None,
        query: re.Pattern[str] | None = None,
    ) -> Rule:
        """Hold the matching requests back for `seconds`, then forward them (or, when a fail rule matches
        too, answer them as it says)."""
        return self._add(Rule("delay", method, path, query, times, seconds=seconds))

    def _add(self, rule: Rule) -> Rule:
        with self._lock:
            self._rules.append(rule)
        return rule

    def remove(self, rule: Rule) -> None:
        with self._lock:
            if rule in self._rules:
                self._rules.remove(rule)

    def reset(self) -> None:
        """Drop every rule and forget what was seen; requests in flight finish as they started."""
        with self._lock:
            self._rules.clear()
            self._exchanges.clear()

    def injected(self, rule: Rule) -> int:
        with self._lock:
            return rule.injected

    def exchanges(self, method: str | None = None, path: PathMatcher = None) -> list[Exchange]:
        """Requests handled since the last reset, the matching ones only when a filter is given."""
        with self._lock:
            seen = list(self._exchanges)
        return [e for e in seen if _matches(e, method, path)]

    def passed(self, method: str | None = None, path: PathMatcher = None) -> int:
        """Matching requests that were forwarded to the apiserver (not answered by a fail rule)."""
        return sum(1 for e in self.exchanges(method, path) if e.status and not e.injected)

    # ---- lifecycle -------------------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, timeout: float = 30) -> Self:
        if self.running:
            return self
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=self.name, daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout)
        return self

    def stop(self, timeout: float = 30) -> None:
        if not self.running:
            return
        assert self._loop is not None and self._thread is not None
        try:
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)
            self._loop.close()
            self._thread = self._loop = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _start(self) -> None:
        # No pool limit: every open watch holds one upstream connection for its whole life.
        connector = aiohttp.TCPConnector(limit=0, ssl=self.upstream.ssl_context)
        self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False)
        serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        serving.load_cert_chain(str(self.pair.cert), str(self.pair.key))
        if self.client_ca is not None:
            serving.load_verify_locations(cafile=str(self.client_ca))
            serving.verify_mode = ssl.CERT_REQUIRED
        app = web.Application(client_max_size=0)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # handler_cancellation: a client that goes away (a SIGKILLed scheduler) ends its upstream request and
        # watch too, as a direct connection would; auto_decompress off: request bodies pass byte for byte.
        self._runner = web.AppRunner(
            app,
            access_log=None,
            handle_signals=False,
            handler_cancellation=True,
            auto_decompress=False,
            shutdown_timeout=1.0,
        )
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        await web.SockSite(self._runner, sock, ssl_context=serving).start()

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    # ---- the request path (the proxy's loop) -----------------------------------------------------------------
    def _decide(self, method: str, path: str, query: str) -> tuple[float, Rule | None]:
        """Claim the rules this request uses, under the lock so that concurrent requests never overdraw `times`."""
        delay, failing = 0.0, None
        with self._lock:
            for rule in self._rules:
                if rule.exhausted or not rule.matches(method, path, query):
                    continue
                if rule.action == "delay":
                    rule.injected += 1
                    rule.paths.append(path)
                    delay += rule.seconds
                elif failing is None:
                    rule.injected += 1
                    rule.paths.append(path)
                    failing = rule
        return delay, failing

    def _record(self, request: web.Request, status: int, injected: bool) -> None:
        with self._lock:
            self._exchanges.append(
                Exchange(
                    request.method,
                    request.path,
                    request.query_string,
                    status,
                    injected,
                    request.headers.get("User-Agent", ""),
                    time.time(),
                )
            )

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        delay, failing = self._decide(request.method, request.path, request.query_string)
        if delay:
            log.info("%s: holding %s %s for %.1fs", self.name, request.method, request.path_qs, delay)
            await asyncio.sleep(delay)
        if failing is not None:
            log.info("%s: answering %s %s with %d", self.name, request.method, request.path_qs, failing.status)
            self._record(request, failing.status, True)
            headers = {}
            if failing.retry_after is not None:
                headers["Retry-After"] = str(failing.retry_after)
            return web.json_response(
                status_body(failing.status, failing.message, failing.retry_after),
                status=failing.status,
                headers=headers,
            )
        answered: list[int] = []  # the status, recorded as soon as the answer begins (a watch may never end)
        try:
            return await self._forward(request, answered)
        finally:
            if not answered:  # the client went away before the answer began
                self._record(request, 0, False)

    async def _forward(self, request: web.Request, answered: list[int]) -> web.StreamResponse:
        assert self._session is not None
        headers = _end_to_end(request.headers.items())
        names = {k.lower() for k, _ in headers}
        token = self.upstream.bearer()
        if token and "authorization" not in names:
            headers.append(("Authorization", f"Bearer {token}"))
        if "accept-encoding" not in names:  # else aiohttp asks for gzip that the client never asked for
            headers.append(("Accept-Encoding", "identity"))
        try:
            upstream = await self._session.request(
                request.method,
                self.upstream.server + request.path_qs,
                headers=headers,
                data=request.content if request.body_exists else None,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),  # watches last as long as they last
            )
        except (aiohttp.ClientError, OSError) as exc:
            log.warning("%s: %s %s: apiserver unreachable: %s", self.name, request.method, request.path, exc)
            answered.append(503)
            self._record(request, 503, False)
            return web.json_response(status_body(503, f"fault proxy: apiserver unreachable: {exc}"), status=503)
        async with upstream:
            response = web.StreamResponse(
                status=upstream.status, reason=upstream.reason, headers=_end_to_end(upstream.headers.items())
            )
            answered.append(upstream.status)
            self._record(request, upstream.status, False)
            try:
                await response.prepare(request)
                async for chunk in upstream.content.iter_any():  # each watch event as soon as it arrives
                    await response.write(chunk)
                await response.write_eof()
            except ConnectionError as exc:  # the client went away (a killed scheduler): drop the rest quietly
                log.debug("%s: %s %s: client gone: %s", self.name, request.method, request.path, exc)
            return response


def _end_to_end(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    items = list(headers)
    # A header named in Connection is hop-by-hop too.
    named = {t.strip().lower() for k, v in items if k.lower() == "connection" for t in v.split(",")}
    return [(k, v) for k, v in items if k.lower() not in HOP_BY_HOP and k.lower() not in named]
