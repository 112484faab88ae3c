"""JSON requests and watches against the Kubernetes API over one pooled aiohttp session (the programs' client;
`sync.SyncClient` is its blocking twin for test steps and tools). An error answer is an `errors.ApiError` subclass;
no answer (no connection, a reset, TLS, the request's deadline) is `errors.TransportError`, whatever aiohttp raised,
so that aiohttp stays inside this module."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import Any

import aiohttp

from gpu_scheduling.kube.config import ClusterConfig
from gpu_scheduling.kube.errors import ApiError, TransportError, error_for
from gpu_scheduling.kube.wire import JSON, PATCH_CONTENT_TYPES

log = logging.getLogger(__name__)


@contextlib.contextmanager
def _transport(method: str, path: str) -> Iterator[None]:
    """What aiohttp raises when no answer comes (its ClientError family, its timeouts, socket and TLS errors) leaves
    as a TransportError; error answers (ApiError) and bad JSON (ValueError) pass as they are."""
    try:
        yield
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise TransportError(method, path, exc) from exc


class RateLimiter:
    """Token bucket like client-go's (qps, burst): at most `burst` requests at once, then `qps` per second; callers
    wait in turn (FIFO). qps <= 0 disables it. `clock` and `sleep` are the monotonic clock and the sleep it uses
    (tests give a simulated pair)."""

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ):
        self.qps, self.burst = qps, max(1, burst)
        self._clock, self._sleep = clock, sleep
        self._tokens = float(self.burst)
        self._last = clock()
        self._lock = asyncio.Lock()

    async def acquire(self) -> None:
        if self.qps <= 0:
            return
        async with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
            self._last = now
            if self._tokens < 1:
                await self._sleep((1 - self._tokens) / self.qps)
                self._last = self._clock()
                self._tokens = 0
            else:
                self._tokens -= 1


class Client:
    """An async client. Use as `async with Client(cfg) as c:`; paths are absolute API paths."""

    def __init__(
        self,
        config: ClusterConfig,
        *,
        qps: float = 0,
        burst: int = 100,
        connections: int = 64,
        user_agent: str = "gpu-scheduling",
    ):
        self.config = config
        self.limiter = RateLimiter(qps, burst)
        self._connections = connections
        self._user_agent = user_agent
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Client:
        connector = aiohttp.TCPConnector(limit=self._connections, ssl=self.config.ssl_context)
        self._session = aiohttp.ClientSession(
            connector=connector,
            headers={"User-Agent": self._user_agent, "Accept": "application/json"},
            json_serialize=json.dumps,
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers = {}
        token = self.config.bearer()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    @staticmethod
    async def _error(resp: aiohttp.ClientResponse) -> ApiError:
        return error_for(resp.status, await resp.text(), resp.reason or "")

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float = 30,  # noqa: ASYNC109 - aiohttp's total timeout of this one request, not a cancel scope
    ) -> JSON:
        assert self._session is not None, "use `async with Client(...)`"
        await self.limiter.acquire()
        with _transport(method, path):
            async with self._session.request(
                method,
                self.config.server + path,
                params=params,
                data=None if body is None else json.dumps(body),
                headers=self._headers(content_type if body is not None else None),
                timeout=aiohttp.ClientTimeout(total=timeout),
            ) as resp:
                if resp.status >= 400:
                    raise await self._error(resp)
                answer: JSON = await resp.json(content_type=None)
                return answer

    async def get(self, path: str, **params: Any) -> JSON:
        return await self.request("GET", path, params=params or None)

    async def post(self, path: str, body: Any) -> JSON:
        return await self.request("POST", path, body=body)

    async def delete(self, path: str, body: Any = None) -> JSON:
        """DELETE; `body`: DeleteOptions (preconditions, a grace period)."""
        return await self.request("DELETE", path, body=body)

    async def patch(self, path: str, body: Any, kind: str = "merge") -> JSON:
        return await self.request("PATCH", path, body=body, content_type=PATCH_CONTENT_TYPES[kind])

    async def list_pages(self, path: str, page_size: int = 500, **params: Any) -> AsyncIterator[JSON]:
        """LIST `path` in pages of `page_size` (the apiserver's `limit`/`continue`), yielding each page."""
        cont = ""
        while True:
            query = dict(params, limit=str(page_size))
            if cont:
                query["continue"] = cont
            page = await self.get(path, **query)
            yield page
            cont = (page.get("metadata") or {}).get("continue") or ""
            if not cont:
                return

    async def watch(self, path: str, params: Mapping[str, Any], timeout_seconds: int = 300) -> AsyncIterator[JSON]:
        """Yield watch events (`{"type": ..., "object": ...}`) until the server closes the stream."""
        assert self._session is not None, "use `async with Client(...)`"
        query = dict(params, watch="true", timeoutSeconds=str(timeout_seconds))
        # Only the reads are guarded: what the consumer raises while it holds an event never comes back in here.
        with _transport("WATCH", path):
            async with self._session.get(
                self.config.server + path,
                params=query,
                headers=self._headers(),
                timeout=aiohttp.ClientTimeout(total=None, sock_read=timeout_seconds + 30),
            ) as resp:
                if resp.status >= 400:
                    raise await self._error(resp)
                buffer = b""
                async for chunk in resp.content.iter_any():
                    buffer += chunk
                    while b"\n" in buffer:
                        line, buffer = buffer.split(b"\n", 1)
                        if line.strip():
                            yield json.loads(line)
