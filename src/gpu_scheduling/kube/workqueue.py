"""A keyed work queue like client-go's: a key waits in the queue at most once, is worked on by one worker at a
time (a key added meanwhile comes back once that worker is done), and can be retried with a per-key exponential
backoff until `forget` resets it. Nothing here drops a key: a failed step is a requeue."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    def __init__(self, base_delay: float = 0.2, max_delay: float = 30.0):
        self.base_delay, self.max_delay = base_delay, max_delay
        self._queue: asyncio.Queue[K] = asyncio.Queue()
        self._queued: set[K] = set()
        self._processing: set[K] = set()
        self._dirty: set[K] = set()
        self._failures: dict[K, int] = {}
        self._timers: dict[K, asyncio.TimerHandle] = {}

    def __len__(self) -> int:
        return len(self._queued)

    def add(self, key: K) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        if key in self._processing:
            self._dirty.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    def add_after(self, key: K, delay: float) -> None:
        """Add `key` in `delay` seconds (an earlier pending add wins)."""
        if delay <= 0:
            self.add(key)
            return
        if key in self._queued or key in self._timers:
            return
        self._timers[key] = asyncio.get_running_loop().call_later(delay, self._fire, key)

    def _fire(self, key: K) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def backoff(self, key: K) -> float:
        """The delay the next `add_rate_limited(key)` would wait."""
        failures = self._failures.get(key, 0)
        return min(self.base_delay * 2.0**failures, self.max_delay) if failures else 0.0

    def add_rate_limited(self, key: K) -> float:
        """Retry `key` after its backoff, which doubles with every call until `forget(key)`."""
        self._failures[key] = self._failures.get(key, 0) + 1
        delay = min(self.base_delay * 2.0 ** (self._failures[key] - 1), self.max_delay)
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        """The key succeeded (or is gone): its backoff starts over."""
        self._failures.pop(key, None)

    def discard(self, key: K) -> None:
        """Drop every trace of `key` except a worker already busy with it."""
        self.forget(key)
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()

    async def get(self) -> K:
        while True:
            key = await self._queue.get()
            if key in self._queued:
                self._queued.discard(key)
                self._processing.add(key)
                return key

    def done(self, key: K) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)


class Backoff:
    """When a key may be tried again: kube-scheduler's pod backoff (initial 1 s, doubling, at most 10 s) counted
    from its last attempt."""

    def __init__(self, initial: float = 1.0, maximum: float = 10.0):
        self.initial, self.maximum = initial, maximum
        self._attempts: dict[Hashable, tuple[int, float]] = {}

    def attempted(self, key: Hashable) -> None:
        count, _ = self._attempts.get(key, (0, 0.0))
        self._attempts[key] = (count + 1, time.monotonic())

    def remaining(self, key: Hashable) -> float:
        count, last = self._attempts.get(key, (0, 0.0))
        if not count:
            return 0.0
        wait = min(self.initial * 2.0 ** (count - 1), self.maximum)
        return max(0.0, last + wait - time.monotonic())

    def reset(self, key: Hashable) -> None:
        self._attempts.pop(key, None)
