"""Unit tests of the scheduler's modules; what several of them build is here."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from gpu_scheduling.kube.errors import NotFound

if TYPE_CHECKING:
    from gpu_scheduling.scheduler.queue import SchedulingQueue


def queued_pod(key: str, priority: int = 0, created: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    """A pending pod as the scheduling queue orders it: `<namespace>/<name>`, spec.priority, its creation time."""
    namespace, _, name = key.partition("/")
    return {
        "metadata": {"namespace": namespace, "name": name, "creationTimestamp": created},
        "spec": {"priority": priority},
    }


async def drain(queue: SchedulingQueue) -> list[str]:
    """The keys the workers would take now, in order (each done at once)."""
    out = []
    while len(queue.work):
        key = await queue.work.get()
        queue.work.done(key)
        out.append(key)
    return out


def run_async(scenario: Callable[[], Coroutine[Any, Any, Any]]) -> None:
    asyncio.run(scenario())


def labelled_pod(
    name: str = "incoming",
    labels: dict[str, str] | None = None,
    namespace: str = "ns",
    bound_to: str | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A pod with these labels and spec fields (bound to `bound_to`, if given), its uid its name: what the pod
    affinity, spread and score tests place and judge."""
    body: dict[str, Any] = {"containers": [{"name": "c"}], **spec}
    if bound_to:
        body["nodeName"] = bound_to
    return {"metadata": {"name": name, "namespace": namespace, "uid": name, "labels": labels or {}}, "spec": body}


class Recording:
    """A plain-data stand-in for the scheduler's API client in unit tests: answers GETs from `objects` (path -> object,
    or the exception to raise; else 404), answers every PATCH and POST with {}, and records every call."""

    def __init__(self, objects: dict[str, Any]):
        self.objects = objects
        self.calls: list[tuple[str, str]] = []

    async def get(self, path: str, **_params: Any) -> Any:
        self.calls.append(("GET", path))
        answer = self.objects.get(path, NotFound(404, "NotFound", f"{path} not found"))
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def patch(self, path: str, _body: Any, kind: str = "merge") -> Any:
        self.calls.append(("PATCH", path))
        return {}

    async def post(self, path: str, _body: Any) -> Any:
        self.calls.append(("POST", path))
        return {}

    def writes(self) -> list[tuple[str, str]]:
        return [c for c in self.calls if c[0] != "GET"]
