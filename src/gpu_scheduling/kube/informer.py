"""List-then-watch cache of one resource, with relist on expiry. The only place that LISTs.

Handlers are called for every change with (event type, new object, old object); they must not block.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpu_scheduling.kube.errors import ApiError, Gone, from_status

if TYPE_CHECKING:
    from gpu_scheduling.kube.client import Client

log = logging.getLogger(__name__)

Handler = Callable[[str, dict[str, Any], dict[str, Any] | None], None]


def slim(obj: dict[str, Any]) -> dict[str, Any]:
    """Drop what no handler reads and that often outweighs the rest of an object: `metadata.managedFields`
    (client-go's informers are commonly given the same transform)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


class Compactor:
    """Share the strings that many cached objects repeat. Every watch event is a JSON document of its own, so each
    cached object would otherwise carry its own copy of every key ("metadata", "namespace", ...) and of every
    common value (a namespace, "nvidia.com/gpu", "NoExecute"): about half of a pod's memory. Keys are interned
    (their vocabulary is small); values up to `VALUE_CHARS` long are shared through a table this compactor owns,
    emptied whenever it reaches `TABLE_SIZE` entries so that names and uids of objects long gone are not kept."""

    VALUE_CHARS = 64
    TABLE_SIZE = 20_000

    def __init__(self) -> None:
        self._values: dict[str, str] = {}

    def __call__(self, obj: Any) -> Any:
        if isinstance(obj, dict):
            return {sys.intern(k) if type(k) is str else k: self(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self(v) for v in obj]
        if type(obj) is str and len(obj) <= self.VALUE_CHARS:
            shared = self._values.get(obj)
            if shared is not None:
                return shared
            if len(self._values) >= self.TABLE_SIZE:
                self._values.clear()
            self._values[obj] = obj
        return obj


def key_of(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    ns = meta.get("namespace")
    return f"{ns}/{meta['name']}" if ns else meta["name"]


class Informer:
    """Keeps `cache` (key -> object) equal to the server's view of `path` filtered by `params`."""

    def __init__(
        self,
        client: Client,
        path: str,
        handler: Handler,
        *,
        params: dict[str, str] | None = None,
        name: str = "",
        page_size: int = 500,
        transform: Callable[[dict[str, Any]], dict[str, Any]] = slim,
    ):
        self.client, self.path, self.handler = client, path, handler
        self.params = params or {}
        self.name = name or path
        self.page_size = page_size
        self.transform = transform
        """What is kept of each object, in the cache and for the handler (client-go's SetTransform): `slim` by
        default; an informer of many objects of which it reads little keeps only that. What it keeps is then
        compacted (`Compactor`)."""
        self._compact = Compactor()
        self.cache: dict[str, dict[str, Any]] = {}
        self.synced = asyncio.Event()
        self._rv = ""

    async def _list(self) -> None:
        fresh: dict[str, dict[str, Any]] = {}
        async for page in self.client.list_pages(self.path, self.page_size, **self.params):
            for item in page.get("items") or []:
                fresh[key_of(item)] = self._compact(self.transform(item))
            self._rv = page["metadata"]["resourceVersion"]
        old = dict(self.cache)
        # In place, never a new dict: readers are handed `cache` once, at construction (the scheduler's volume
        # cache, its queue, its Lease reconciler), and must see every list, the first one included.
        self.cache.clear()
        self.cache.update(fresh)
        # Deliver the difference so handlers see deletions that happened while we were not watching.
        for key, obj in old.items():
            if key not in fresh:
                self.handler("DELETED", obj, obj)
        for key, obj in fresh.items():
            prev = old.get(key)
            if prev is None:
                self.handler("ADDED", obj, None)
            elif prev["metadata"].get("resourceVersion") != obj["metadata"].get("resourceVersion"):
                self.handler("MODIFIED", obj, prev)
        self.synced.set()
        log.info("%s: listed %d objects at resourceVersion %s", self.name, len(fresh), self._rv)

    async def run(self) -> None:
        backoff = 0.2
        need_list = True
        while True:
            try:
                if need_list:
                    await self._list()
                    need_list = False
                params = dict(self.params, resourceVersion=self._rv, allowWatchBookmarks="true")
                async for event in self.client.watch(self.path, params):
                    self._apply(event)
                backoff = 0.2
            except Gone:  # our resourceVersion is too old (answered, or sent in the stream): start over
                log.info("%s: watch expired, relisting", self.name)
                need_list = True
                continue
            except ApiError as exc:
                log.warning("%s: %s; retrying in %.1fs", self.name, exc, backoff)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - network trouble: keep the cache, reconnect
                log.warning("%s: watch failed (%s: %s); retrying in %.1fs", self.name, type(exc).__name__, exc, backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 10)

    def _apply(self, event: dict[str, Any]) -> None:
        kind: str = event.get("type", "")
        raw = event.get("object") or {}
        if kind == "ERROR":
            raise from_status(raw)
        obj = raw if kind == "BOOKMARK" else self._compact(self.transform(raw))
        self._rv = obj.get("metadata", {}).get("resourceVersion", self._rv)
        if kind == "BOOKMARK":
            return
        key = key_of(obj)
        old = self.cache.get(key)
        if kind == "DELETED":
            self.cache.pop(key, None)
        else:
            self.cache[key] = obj
        self.handler(kind, obj, old)
