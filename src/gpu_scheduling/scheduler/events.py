"""The scheduler's Events: one recorder, given to whoever says something about an object (a pod scheduled or not,
a policy applied). An Event is a courtesy: losing one must never disturb scheduling, so nothing here raises for the
API's sake. It must not write anything but Events.

Repeats form a series, as kube-scheduler's events do: the first occurrence of an event (the same object, type,
reason and message) is created at once; later ones only count, and the count (with the time last seen) is written
back with a backoff (`SeriesTiming`), so a pod that fails the same way on every attempt costs one Event and a few
updates, not a write per attempt. A new message is a new Event. The series live in this replica's memory: a new
leader starts afresh, as kube-scheduler's does.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import heapq
import logging
import time
from typing import TYPE_CHECKING, Any

from gpu_scheduling import constants
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import ApiError, NotFound, TransportError

if TYPE_CHECKING:
    from gpu_scheduling.kube.client import Client

log = logging.getLogger(__name__)

TRANSIENT = (ApiError, TransportError, TimeoutError)
"""What a call to the API may fail with and be tried again (the scheduler's modules that write share it)."""


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclasses.dataclass(frozen=True)
class SeriesTiming:
    first_update: float = 10.0
    """Seconds after an Event is written before a repeat's count is written back."""

    max_interval: float = 1800.0
    """The interval between a series' writes doubles up to this (kube-scheduler refreshes its series every 30
    minutes)."""

    idle: float = 360.0
    """A series seen for the last time this long ago, with nothing left to write, is forgotten (kube-scheduler
    finishes its series after 6 minutes): a later occurrence starts a new Event."""


SeriesKey = tuple[str, str, str, str]
"""(the object's uid, type, reason, message)."""


@dataclasses.dataclass
class Series:
    """One Event and what has happened to it since it was written."""

    namespace: str
    name: str  # the Event's name, chosen here so that an update never waits for the create's answer
    involved: dict[str, Any]  # the object it is about (with the key and first_stamp: the Event as created)
    first_stamp: str
    count: int = 1  # occurrences seen
    written: int = 1  # the count the API has
    last_seen: float = 0.0  # monotonic
    last_seen_stamp: str = ""
    next_write: float = 0.0  # monotonic: when a pending count may be written
    interval: float = 0.0  # the wait after the next write
    queued: float | None = None  # when its one live entry in the book's heap falls due (others are stale)

    @property
    def pending(self) -> bool:
        return self.count > self.written


class SeriesBook:
    """The series and when each is due (pure: no API, no clock of its own). `Recorder` does the writing."""

    def __init__(self, timing: SeriesTiming):
        self.timing = timing
        self.series: dict[SeriesKey, Series] = {}
        self._due: list[tuple[float, SeriesKey]] = []  # heap of (when, key): one live entry per series

    def __len__(self) -> int:
        return len(self.series)

    def start(
        self, key: SeriesKey, namespace: str, name: str, involved: dict[str, Any], at: float, stamp: str
    ) -> Series:
        """A first occurrence, written now."""
        s = Series(namespace, name, involved, stamp, last_seen=at, last_seen_stamp=stamp)
        s.next_write, s.interval = at + self.timing.first_update, self.timing.first_update * 2
        self.series[key] = s
        self._queue(key, s, at + self.timing.idle)  # when it may be forgotten
        return s

    def _queue(self, key: SeriesKey, s: Series, when: float) -> None:
        """Make `when` the series' next look, unless an earlier one is queued: a series has one live entry in the
        heap however often it repeats, so the heap stays the size of the book."""
        if s.queued is None or when < s.queued:
            s.queued = when
            heapq.heappush(self._due, (when, key))

    def repeat(self, key: SeriesKey, at: float, stamp: str) -> bool:
        """Another occurrence of `key`: counted. False when there is no such series (write a new Event)."""
        s = self.series.get(key)
        if s is None:
            return False
        s.count += 1
        s.last_seen, s.last_seen_stamp = at, stamp
        self._queue(key, s, max(at, s.next_write))
        return True

    def next_due(self) -> float | None:
        return self._due[0][0] if self._due else None

    def take_due(self, at: float) -> list[tuple[SeriesKey, Series]]:
        """The series whose count is to be written now; forgets those idle past `timing.idle`."""
        out: dict[SeriesKey, Series] = {}
        while self._due and self._due[0][0] <= at:
            when, key = heapq.heappop(self._due)
            s = self.series.get(key)
            if s is None or s.queued != when:
                continue  # stale: the series was queued earlier since, or forgotten
            s.queued = None
            if s.pending and s.next_write <= at:
                out[key] = s  # `written` or `failed` queues its next look
            elif not s.pending and at - s.last_seen >= self.timing.idle:
                del self.series[key]
            else:
                self._queue(key, s, s.next_write if s.pending else s.last_seen + self.timing.idle)
        return list(out.items())

    def written(self, key: SeriesKey, count: int, at: float) -> None:
        """The API has `count` for `key` (written at `at`): the next write waits one interval more, doubled."""
        s = self.series.get(key)
        if s is None:
            return
        s.written = max(s.written, count)
        s.next_write = at + s.interval
        s.interval = min(s.interval * 2, self.timing.max_interval)
        s.queued = None  # whatever was queued for it is superseded
        self._queue(key, s, s.next_write if s.pending else s.last_seen + self.timing.idle)

    def failed(self, key: SeriesKey, at: float) -> None:
        """Writing `key` failed: try again after its interval (the count stays pending)."""
        s = self.series.get(key)
        if s is not None:
            s.next_write = at + s.interval
            s.queued = None
            self._queue(key, s, s.next_write)


class Recorder:
    def __init__(
        self,
        client: Client,
        component: str,
        instance: str,
        timing: SeriesTiming | None = None,
    ):
        self.client = client
        self.component = component  # the scheduler's name
        self.instance = instance  # this replica (its host name)
        self.book = SeriesBook(timing or SeriesTiming())
        self._wake = asyncio.Event()

    @staticmethod
    def _pod_ref(pod: dict[str, Any]) -> dict[str, Any]:
        meta = pod["metadata"]
        return {
            "apiVersion": constants.CORE_API_VERSION,
            "kind": "Pod",
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta["uid"],
        }

    async def pod(self, pod: dict[str, Any], type_: str, reason: str, message: str, *, series: bool = True) -> None:
        """Record an event about `pod`. `series=False`: one that cannot repeat (Scheduled), kept nowhere."""
        await self.post(self._pod_ref(pod), pod["metadata"]["namespace"], type_, reason, message, series=series)

    def repeated(self, pod: dict[str, Any], type_: str, reason: str, message: str) -> bool:
        """Count another occurrence of an event about `pod`, never writing now: False when this replica keeps no
        such series (a previous leader wrote the Event, say), and then nothing is counted."""
        return self._count((pod["metadata"]["uid"], type_, reason, message))

    def _count(self, key: SeriesKey) -> bool:
        if not self.book.repeat(key, time.monotonic(), now()):
            return False
        self._wake.set()
        return True

    async def post(
        self,
        involved: dict[str, Any],
        namespace: str,
        type_: str,
        reason: str,
        message: str,
        *,
        series: bool = True,
    ) -> None:
        key = (str(involved.get("uid") or ""), type_, reason, message)
        if series and self._count(key):
            return
        stamp = now()
        # Named here (as client-go names its Events) so that a series' update never waits for the create's answer.
        name = f"{involved['name']}.{time.time_ns():x}"
        if series and key[0]:
            self.book.start(key, namespace, name, involved, time.monotonic(), stamp)
        try:
            await self.client.post(paths.events(namespace), self._event(key, namespace, name, involved, stamp))
        except (ApiError, TransportError) as exc:
            # An event is a courtesy: losing one (the apiserver busy or going away) must not disturb scheduling.
            log.warning("could not record %s event for %s %s: %s", reason, involved["kind"], involved["name"], exc)

    def _event(
        self,
        key: SeriesKey,
        namespace: str,
        name: str,
        involved: dict[str, Any],
        first: str,
        last: str | None = None,
        count: int = 1,
    ) -> dict[str, Any]:
        _, type_, reason, message = key
        return {
            "apiVersion": constants.CORE_API_VERSION,
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": involved,
            "type": type_,
            "reason": reason,
            "message": message,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.instance,
            "firstTimestamp": first,
            "lastTimestamp": last or first,
            "count": count,
        }

    async def run(self) -> None:
        """Write the series' counts when they are due, until cancelled (the leader runs it)."""
        while True:
            due = self.book.next_due()
            delay = None if due is None else max(0.0, due - time.monotonic())
            self._wake.clear()
            if delay is None or delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), delay)
                continue
            for key, s in self.book.take_due(time.monotonic()):
                await self._write(key, s)

    async def _write(self, key: SeriesKey, s: Series) -> None:
        count = s.count
        patch = {"count": count, "lastTimestamp": s.last_seen_stamp}
        try:
            try:
                await self.client.patch(paths.event(s.namespace, s.name), patch)
            except NotFound:  # expired (the apiserver's event TTL) or never created: write it whole again
                body = self._event(key, s.namespace, s.name, s.involved, s.first_stamp, s.last_seen_stamp, count)
                await self.client.post(paths.events(s.namespace), body)
        except (ApiError, TransportError) as exc:
            log.warning("could not update event %s/%s: %s", s.namespace, s.name, exc)
            self.book.failed(key, time.monotonic())
            return
        self.book.written(key, count, time.monotonic())
