"""The client's write limiter (kube.client.RateLimiter, client-go's token bucket): on a simulated clock, whatever
the arrivals, no more than `burst + qps * d` requests pass in any window of `d` seconds (an idle spell saves up no
more than `burst`), and every caller gets through."""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from gpu_scheduling.kube.client import RateLimiter


class SimulatedClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += max(0.0, seconds)
        await asyncio.sleep(0)


def _grant_times(qps: float, burst: int, arrivals: list[float]) -> list[float]:
    """When each request, arriving at the given (sorted) moments, was let through."""
    clock = SimulatedClock()
    limiter = RateLimiter(qps, burst, clock=clock, sleep=clock.sleep)
    granted: list[float] = []

    async def main() -> None:
        for at in arrivals:
            clock.now = max(clock.now, at)
            await limiter.acquire()
            granted.append(clock.now)

    asyncio.run(main())
    return granted


@given(
    qps=st.floats(0.5, 200),
    burst=st.integers(1, 50),
    gaps=st.lists(st.floats(0, 0.5), min_size=1, max_size=300),
)
def test_no_window_passes_more_than_burst_plus_qps_times_its_length(qps, burst, gaps):
    arrivals, at = [], 0.0
    for gap in gaps:
        at += gap
        arrivals.append(at)
    granted = _grant_times(qps, burst, arrivals)
    assert len(granted) == len(arrivals), "every caller gets through"
    for i, start in enumerate(granted):
        for j in range(i, len(granted)):
            passed, window = j - i + 1, granted[j] - start
            assert passed <= burst + qps * window + 1e-6, (
                f"{passed} requests passed in {window:.3f}s (qps {qps}, burst {burst})"
            )


def test_a_burst_passes_at_once_then_qps_per_second():
    granted = _grant_times(50, 100, [0.0] * 200)
    assert granted[:100] == [0.0] * 100
    assert abs(granted[-1] - 2.0) < 1e-6, "the other 100 at 50/s take two seconds"


def test_no_limit_when_qps_is_zero():
    assert _grant_times(0, 1, [0.0] * 1000) == [0.0] * 1000
