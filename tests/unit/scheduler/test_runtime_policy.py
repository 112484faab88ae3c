"""The runtime policy (scheduler.policy): what the GpuSchedulingPolicy's watch makes the scheduler apply, and the
status that says so. A queue order change reaches the scheduling queue, which retries its waiting claim pods in it;
a value the scheduler does not know changes nothing; without a policy the flag's strategy and the default order
apply."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from gpu_scheduling.scheduler.events import Recorder
from gpu_scheduling.scheduler.metrics import Metrics
from gpu_scheduling.scheduler.policy import RuntimePolicy
from gpu_scheduling.scheduler.queue import SchedulingQueue
from tests.unit.scheduler import queued_pod


def _policy(generation: int, **spec: str) -> dict[str, Any]:
    return {"metadata": {"name": "default", "generation": generation}, "spec": spec}


def test_the_policy_applies_until_it_is_deleted_and_its_queue_order_reaches_the_queue() -> None:
    async def scenario() -> None:
        pods = {
            "ns/old": queued_pod("ns/old", 0, "2026-01-01T00:00:00Z"),
            "ns/high": queued_pod("ns/high", 9, "2026-01-02T00:00:00Z"),
        }
        queue = SchedulingQueue(pods, 1.0, 10.0)
        for key in pods:
            queue.names_claim(key, f"{key}-claim")
            queue.unschedulable(key, "busy")
        client = cast(Any, None)  # nothing here calls the API
        policy = RuntimePolicy(client, "BestFit", queue, Metrics(), Recorder(client, "gpu-scheduler", "here"))
        assert (policy.strategy, policy.queue_order, queue.order) == ("BestFit", "Priority", "Priority")

        policy._on_policy("ADDED", _policy(1, defaultStrategy="LeastUtilized", queueOrder="FIFO"), None)
        assert (policy.strategy, policy.queue_order, queue.order) == ("LeastUtilized", "FIFO", "FIFO")
        woken = []
        while len(queue.work):
            key = await queue.work.get()
            queue.work.done(key)
            woken.append(key)
        assert woken == ["ns/old", "ns/high"], "the waiting claim pods are retried in the new order"
        status = policy.status(_policy(1, defaultStrategy="LeastUtilized", queueOrder="FIFO"))
        assert status == {
            "observedGeneration": 1,
            "strategy": "LeastUtilized",
            "queueOrder": "FIFO",
            "message": "applying strategy LeastUtilized (from the policy) and queue order FIFO from generation 1",
        }

        policy._on_policy("MODIFIED", _policy(2, defaultStrategy="Nearest", queueOrder="Priority"), None)
        assert (policy.strategy, queue.order) == ("LeastUtilized", "FIFO"), "an unknown value changes nothing"

        policy._on_policy("DELETED", _policy(2), None)
        assert (policy.strategy, policy.queue_order, queue.order) == ("BestFit", "Priority", "Priority")
        assert policy.status(_policy(3))["message"] == (
            "applying strategy BestFit (from the scheduler's --strategy) and queue order Priority from generation 3"
        )

    asyncio.run(scenario())
