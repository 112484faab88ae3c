"""Polling with a deadline, for steps and set-up that wait on the real API."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from gpu_scheduling.kube.errors import ApiError

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 60, interval: float = 0.25) -> T:
    """Poll `probe` until it returns something truthy; fail naming `what` and the last value seen (an API error
    counts as not yet)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = probe()
        except ApiError as exc:
            last = exc
        if last and not isinstance(last, Exception):
            return last  # type: ignore[no-any-return]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last seen: {last!r}")
        time.sleep(interval)
