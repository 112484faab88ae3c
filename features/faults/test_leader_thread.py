"""The leader election on its own thread, against the real apiserver of the control-plane tier: a leader whose
event loop is blocked for longer than the renew deadline (what thousands of watch events arriving at once do to a
busy scheduler) keeps renewing its Lease, and still stops its work and hands the Lease back when it is stopped."""

from __future__ import annotations

import asyncio
import functools
import time
import uuid

import pytest

from gpu_scheduling.kube import config as kubeconfig
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.client import Client
from gpu_scheduling.kube.errors import NotFound
from gpu_scheduling.kube.leaderelection import ElectionConfig, run_on_own_thread

pytestmark = pytest.mark.faults

NAMESPACE = "default"


def _block(seconds: float) -> None:
    """Hold the calling thread without yielding: called from a coroutine, its event loop stands still."""
    time.sleep(seconds)


def _lease(cluster, name: str) -> dict:
    try:
        return cluster.api.get(paths.lease(NAMESPACE, name))["spec"]
    except NotFound:
        return {}


def test_a_leader_with_a_blocked_event_loop_keeps_renewing(cluster):
    name = f"blocked-loop-{uuid.uuid4().hex[:8]}"
    election = ElectionConfig(NAMESPACE, name, "me_1", lease_duration=4, renew_deadline=3, retry_period=0.5)
    cfg = kubeconfig.load(str(cluster.cp.kubeconfig))
    seen: dict[str, object] = {}

    async def lead() -> str:
        await asyncio.sleep(0.5)
        seen["before"] = _lease(cluster, name)
        _block(8)  # the leader's loop does nothing else for over twice the renew deadline
        seen["after"] = _lease(cluster, name)
        await asyncio.sleep(0.2)
        return "done"

    async def main() -> str:
        return await run_on_own_thread(functools.partial(Client, cfg, connections=2), election, lead)

    assert asyncio.run(main()) == "done"
    before, after = seen["before"], seen["after"]
    assert before["holderIdentity"] == after["holderIdentity"] == "me_1", (before, after)
    assert after["renewTime"] > before["renewTime"], "the Lease was not renewed while the loop was blocked"
    # The work ended by itself: the Lease is handed back (holder cleared), no waiting for it to expire.
    assert not _lease(cluster, name).get("holderIdentity")


def test_cancelling_stops_the_work_before_the_lease_is_handed_back(cluster):
    name = f"cancelled-{uuid.uuid4().hex[:8]}"
    election = ElectionConfig(NAMESPACE, name, "me_2", lease_duration=4, renew_deadline=3, retry_period=0.5)
    cfg = kubeconfig.load(str(cluster.cp.kubeconfig))
    order: list[str] = []

    async def lead() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await asyncio.sleep(0.5)  # stopping takes a while, as the scheduler's binds in flight do
            order.append(f"work stopped, holder {_lease(cluster, name).get('holderIdentity')!r}")
            raise

    async def main() -> None:
        task = asyncio.create_task(run_on_own_thread(functools.partial(Client, cfg, connections=2), election, lead))
        for _ in range(100):
            await asyncio.sleep(0.1)
            if _lease(cluster, name).get("holderIdentity") == "me_2":
                break
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert order == ["work stopped, holder 'me_2'"], order
    assert not _lease(cluster, name).get("holderIdentity")
