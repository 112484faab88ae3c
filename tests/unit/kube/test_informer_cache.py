"""kube.informer.Informer keeps one cache object for its whole life: the scheduler hands `informer.cache` to its
readers once, at construction (the volume cache, the queue, the Lease reconciler), so every list, the first one
included, and every relist after an expired watch must land in that same dict. (Each list replaced it, and the
scheduler's volume plugins saw no claim at all: found by features/volumes.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from gpu_scheduling.kube.informer import Informer


class Pages:
    """What Informer._list reads of its client: `list_pages`, answering the objects it is given."""

    def __init__(self) -> None:
        self.objects: list[dict[str, Any]] = []
        self.version = 0

    async def list_pages(self, path: str, page_size: int, **params: Any) -> AsyncIterator[dict[str, Any]]:
        self.version += 1
        yield {"items": list(self.objects), "metadata": {"resourceVersion": str(self.version)}}


def pvc(name: str, version: str = "1") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": version}}


def test_a_reader_handed_the_cache_before_the_first_list_sees_every_list():
    pages = Pages()
    events: list[tuple[str, str]] = []
    informer = Informer(
        pages, "/api/v1/persistentvolumeclaims", lambda k, o, _: events.append((k, o["metadata"]["name"]))
    )  # type: ignore[arg-type]
    held = informer.cache
    pages.objects = [pvc("a"), pvc("b")]
    asyncio.run(informer._list())
    assert informer.cache is held
    assert sorted(held) == ["ns/a", "ns/b"]
    pages.objects = [pvc("b", "2"), pvc("c")]  # a relist: a gone, b changed, c new
    asyncio.run(informer._list())
    assert informer.cache is held and sorted(held) == ["ns/b", "ns/c"]
    assert events == [("ADDED", "a"), ("ADDED", "b"), ("DELETED", "a"), ("MODIFIED", "b"), ("ADDED", "c")]
