"""Event series (scheduler.events): the first occurrence of an event is created at once; repeats of it (the same
pod, type, reason and message) are only counted, their count written back no sooner than the series' interval,
which doubles up to a cap; a new message is a new Event; an expired Event is written whole again; a quiet series is
forgotten. Plain data for the book; a recording client for the recorder (no Kubernetes client is mocked: the
recorder's calls are the assertions)."""

from __future__ import annotations

import asyncio
from typing import Any

from gpu_scheduling.kube.errors import NotFound, ServerError
from gpu_scheduling.scheduler.events import Recorder, SeriesBook, SeriesTiming

TIMING = SeriesTiming(first_update=10.0, max_interval=40.0, idle=100.0)
KEY = ("uid-1", "Warning", "FailedScheduling", "no GPU free")


def _book() -> SeriesBook:
    book = SeriesBook(TIMING)
    book.start(KEY, "ns", "p.1", {"kind": "Pod", "name": "p"}, at=0.0, stamp="t0")
    return book


def test_repeats_are_counted_and_written_back_at_doubling_intervals_up_to_the_cap() -> None:
    book = _book()
    assert book.take_due(5.0) == [], "nothing repeated yet"
    for at in (1.0, 2.0, 3.0):
        assert book.repeat(KEY, at, f"t{at}")
    assert book.take_due(9.9) == [], "the first update waits first_update seconds after the create"
    ((key, s),) = book.take_due(10.0)
    assert (key, s.count, s.written, s.last_seen_stamp) == (KEY, 4, 1, "t3.0")
    book.written(KEY, 4, at=10.0)
    writes = []
    for at in range(11, 200):  # a repeat every second: written at 10 + 20, + 40, then every 40 (the cap)
        book.repeat(KEY, float(at), "")
        for k, s in book.take_due(float(at)):
            writes.append(at)
            book.written(k, s.count, float(at))
    assert writes == [30, 70, 110, 150, 190]


def test_a_series_with_nothing_new_writes_nothing_and_is_forgotten_when_quiet() -> None:
    book = _book()
    book.repeat(KEY, 1.0, "")
    ((_, s),) = book.take_due(10.0)
    book.written(KEY, s.count, 10.0)
    assert book.take_due(99.0) == [] and len(book) == 1, "nothing pending: nothing to write"
    assert book.take_due(101.0) == [] and len(book) == 0, "idle since 1.0 for 100 s: forgotten"
    assert not book.repeat(KEY, 102.0, ""), "a later occurrence starts a new Event"


def test_a_failed_write_keeps_the_count_pending_and_tries_again_after_the_interval() -> None:
    book = _book()
    book.repeat(KEY, 1.0, "")
    ((_, s),) = book.take_due(10.0)
    book.failed(KEY, 10.0)
    assert book.take_due(29.0) == []
    ((_, s),) = book.take_due(30.0)
    assert s.pending and s.count == 2


class _Recording:
    """The recorder's client: records each call and answers as told (an exception to raise, or a body)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.answers: list[Exception | None] = []

    async def _call(self, verb: str, path: str, body: Any) -> dict[str, Any]:
        self.calls.append((verb, path, body))
        answer = self.answers.pop(0) if self.answers else None
        if answer is not None:
            raise answer
        return {}

    async def post(self, path: str, body: Any) -> dict[str, Any]:
        return await self._call("POST", path, body)

    async def patch(self, path: str, body: Any, kind: str = "merge") -> dict[str, Any]:
        return await self._call("PATCH", path, body)


POD = {"metadata": {"namespace": "ns", "name": "p", "uid": "uid-1"}}


def _recorder(max_interval: float) -> tuple[_Recording, Recorder]:
    """A recorder on a recording client, whose series are due 0.05 s after their Event, then every `max_interval`
    at most."""
    client = _Recording()
    timing = SeriesTiming(first_update=0.05, max_interval=max_interval, idle=60)
    return client, Recorder(client, "gpu-scheduler", "here", timing)  # type: ignore[arg-type]


def test_the_recorder_creates_once_counts_repeats_and_patches_the_count_when_due() -> None:
    async def scenario() -> None:
        client, rec = _recorder(max_interval=1)
        runner = asyncio.create_task(rec.run())
        await rec.pod(POD, "Warning", "FailedScheduling", "no GPU free")
        for _ in range(3):
            await rec.pod(POD, "Warning", "FailedScheduling", "no GPU free")
        assert rec.repeated(POD, "Warning", "FailedScheduling", "no GPU free")
        assert not rec.repeated(POD, "Warning", "FailedScheduling", "a message never written"), "nothing to count"
        await rec.pod(POD, "Warning", "FailedScheduling", "another reason")  # a new message: a new Event
        await asyncio.sleep(0.3)
        runner.cancel()
        verbs = [(verb, path) for verb, path, _ in client.calls]
        created = client.calls[0][2]
        assert verbs == [
            ("POST", "/api/v1/namespaces/ns/events"),
            ("POST", "/api/v1/namespaces/ns/events"),
            ("PATCH", f"/api/v1/namespaces/ns/events/{created['metadata']['name']}"),
        ], verbs
        assert created["count"] == 1 and created["message"] == "no GPU free"
        assert created["metadata"]["name"].startswith("p.")
        assert client.calls[1][2]["message"] == "another reason"
        assert client.calls[2][2]["count"] == 5, "four repeats counted into one write"

    asyncio.run(scenario())


def test_an_expired_event_is_written_whole_again_and_a_failed_write_is_retried() -> None:
    async def scenario() -> None:
        client, rec = _recorder(max_interval=0.05)
        runner = asyncio.create_task(rec.run())
        await rec.pod(POD, "Warning", "FailedScheduling", "no GPU free")
        client.answers = [ServerError(500, "InternalError", "etcd busy"), NotFound(404, "NotFound", "gone"), None]
        rec.repeated(POD, "Warning", "FailedScheduling", "no GPU free")
        await asyncio.sleep(0.4)
        runner.cancel()
        verbs = [verb for verb, _, _ in client.calls]
        assert verbs == ["POST", "PATCH", "PATCH", "POST"], verbs
        created, recreated = client.calls[0][2], client.calls[-1][2]
        assert recreated["count"] == 2 and recreated["reason"] == "FailedScheduling"
        unchanged = {k for k in created if k not in ("count", "lastTimestamp")}
        assert {k: recreated[k] for k in unchanged} == {k: created[k] for k in unchanged}, "the same Event, whole"

    asyncio.run(scenario())


def test_the_heap_holds_one_entry_per_series_however_often_it_repeats():
    book = _book()
    for i in range(1000):
        book.repeat(KEY, 1.0 + i / 1000, "")
    assert len(book._due) <= 2, "the idle entry of the create, and one for the pending count"
    ((_, s),) = book.take_due(10.0)
    assert s.count == 1001
