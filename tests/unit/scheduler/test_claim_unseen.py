"""A claim pod whose GpuClaim the claim watch has not brought yet (scheduler.claims `ClaimPath.unseen`; a gang's
members through scheduler.gangs): the pod and claim watches lag each other, and under load a pod created right after
its claim is often seen first. The scheduler then asks the API once: a claim that exists is waited for, with nothing
written, and the pod (or its gang) is reported once, with its real reason, when the claim arrives; an absent claim is
reported; a failed read is retried. This was the backlog scenario's double write under load (features/backlog:
`{'wait-0063': 2}`: "not found", then the real reason).

The real Scheduler and informers, fed watch events; a recording client answers the API's calls (its calls are the
assertions)."""

from __future__ import annotations

import asyncio
from typing import Any

from gpu_scheduling import constants
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import TransportError
from gpu_scheduling.scheduler.controller import Scheduler, SchedulerConfig
from tests.unit.scheduler import Recording

NAMESPACE = "ns"


def _claim(name: str) -> dict[str, Any]:
    return {
        "apiVersion": constants.API_VERSION,
        "kind": constants.GPU_CLAIM_KIND,
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": f"uid-{name}", "generation": 1},
        "spec": {"devices": {"count": 1}},
    }


def _pod(name: str, claim: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": f"uid-{name}",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": {constants.CLAIM_ANNOTATION: claim},
        },
        "spec": {"schedulerName": constants.DEFAULT_SCHEDULER_NAME, "containers": [{"name": "c"}]},
        "status": {"phase": "Pending"},
    }


def _scheduler(client: Recording) -> Scheduler:
    s = Scheduler(client, SchedulerConfig(retry_seconds=0.01, max_retry_seconds=0.01))  # type: ignore[arg-type]
    s.claim_path.enabled = True  # the CRDs are installed (their watch is not run here)
    s.leading = True
    return s


def _pod_status(name: str) -> tuple[str, str]:
    return ("PATCH", paths.pod_status(NAMESPACE, name))


def test_a_pod_seen_before_its_claim_says_nothing_then_its_real_reason_once() -> None:
    async def scenario() -> None:
        claim = _claim("c")
        client = Recording({paths.gpu_claim(NAMESPACE, "c"): claim})
        s = _scheduler(client)
        s.pods._apply({"type": "ADDED", "object": _pod("p", "c")})
        key = await asyncio.wait_for(s.queue.work.get(), 1)
        await s._schedule(key)
        s.queue.work.done(key)
        assert ("GET", paths.gpu_claim(NAMESPACE, "c")) in client.calls, "the API is asked about the unseen claim"
        assert client.writes() == [], f"nothing is said before the claim is seen: {client.writes()}"

        s.claim_path.claims._apply({"type": "ADDED", "object": claim})  # the claim watch catches up
        key = await asyncio.wait_for(s.queue.work.get(), 1)
        assert key == f"{NAMESPACE}/p", "the claim's arrival tries its pod again"
        await s._schedule(key)
        s.queue.work.done(key)
        assert client.writes().count(_pod_status("p")) == 1, client.writes()
        condition = s.queue._reported[key]
        assert "not found" not in condition and condition.startswith("GpuClaim c: "), condition

    asyncio.run(scenario())


def test_an_absent_claim_is_reported_and_a_failed_read_is_retried_without_a_report() -> None:
    async def scenario() -> None:
        flaky = paths.gpu_claim(NAMESPACE, "flaky")
        client = Recording({flaky: TransportError("GET", flaky, TimeoutError())})
        s = _scheduler(client)
        s.pods._apply({"type": "ADDED", "object": _pod("lost", "nowhere")})
        s.pods._apply({"type": "ADDED", "object": _pod("unsure", "flaky")})
        for _ in range(2):
            key = await asyncio.wait_for(s.queue.work.get(), 1)
            await s._schedule(key)
            s.queue.work.done(key)
        assert client.writes().count(_pod_status("lost")) == 1
        assert s.queue._reported[f"{NAMESPACE}/lost"] == f"GpuClaim 'nowhere' not found in namespace {NAMESPACE}"
        assert _pod_status("unsure") not in client.writes(), "a failed read is no reason to report"
        again = await asyncio.wait_for(s.queue.work.get(), 2)
        assert again == f"{NAMESPACE}/unsure", "a failed read is tried again"

    asyncio.run(scenario())


def test_a_gang_whose_member_names_an_unseen_claim_is_not_refused_for_it() -> None:
    async def scenario() -> None:
        seen, late = _claim("c0"), _claim("c1")
        client = Recording({paths.gpu_claim(NAMESPACE, "c1"): late})
        s = _scheduler(client)
        s.claim_path.claims._apply({"type": "ADDED", "object": seen})
        for i in range(2):
            pod = _pod(f"m{i}", f"c{i}")
            pod["metadata"]["annotations"] |= {
                constants.GANG_ANNOTATION: "g",
                constants.GANG_MIN_MEMBERS_ANNOTATION: "2",
            }
            s.pods._apply({"type": "ADDED", "object": pod})
        while len(s.queue.work):
            key = await asyncio.wait_for(s.queue.work.get(), 1)
            await s._schedule(key)
            s.queue.work.done(key)
        assert client.writes() == [], f"nothing is said while a member's claim is on its way: {client.writes()}"

        s.claim_path.claims._apply({"type": "ADDED", "object": late})
        key = await asyncio.wait_for(s.queue.work.get(), 1)
        await s._schedule(key)
        s.queue.work.done(key)
        for i in range(2):
            assert client.writes().count(_pod_status(f"m{i}")) == 1, client.writes()
            message = s.queue._reported[f"{NAMESPACE}/m{i}"]
            assert "not found" not in message, message

    asyncio.run(scenario())
