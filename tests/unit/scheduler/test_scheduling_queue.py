"""The scheduling queue (scheduler.queue): a waiting pod is tried again on the change that could help it and on no
other, in the order pods are served, never sooner than its backoff; forgetting a pod drops every reason it waited,
and the nodes it kept come back to lower priorities."""

from __future__ import annotations

import asyncio

from gpu_scheduling.claims.ledger import Hold, Ledger
from gpu_scheduling.claims.priority import Waiter
from gpu_scheduling.scheduler import framework
from gpu_scheduling.scheduler.framework import ClusterEvent
from gpu_scheduling.scheduler.plugins import (
    InterPodAffinity,
    NodeAffinity,
    NodePorts,
    NodeResourcesFit,
    PodTopologySpread,
    Unsupported,
)
from gpu_scheduling.scheduler.queue import SchedulingQueue
from tests.unit.scheduler import drain, queued_pod, run_async


def on(kind: str, node: str, gpus: bool = False) -> ClusterEvent:
    return ClusterEvent(kind, frozenset({node}), gpus=gpus)


def test_a_map_pod_is_tried_again_on_the_change_of_its_node_its_rule_names_and_on_no_other() -> None:
    async def scenario() -> None:
        q = SchedulingQueue({}, 1.0, 10.0)
        q.wait_on_node("ns/room", "node1", NodeResourcesFit.wakes_on)
        q.wait_on_node("ns/labels", "node1", NodeAffinity.wakes_on)
        q.wait_on_node("ns/port", "node1", NodePorts.wakes_on)
        q.wait_on_node("ns/never", "node1", Unsupported.wakes_on)
        q.wait_on_node("ns/gpus", "node2", frozenset({framework.GPUS_FREED}))
        q.changed(on(framework.POD_GONE, "node2"))  # room, not GPUs: gpus waits for GPUs
        q.changed(on(framework.NODE, "node3"))
        assert await drain(q) == []
        q.changed(on(framework.POD_GONE, "node1"))
        assert sorted(await drain(q)) == ["ns/port", "ns/room"], "a pod leaving changes no label"
        q.changed(on(framework.POD_GONE, "node1"))  # tried once: they wait for nothing until their attempt says so
        assert await drain(q) == []
        q.changed(on(framework.NODE, "node1"))
        assert await drain(q) == ["ns/labels"], "only a change of the pod itself helps ns/never"

    run_async(scenario)


def test_a_pod_refused_by_a_rule_of_topology_domains_wakes_on_a_pod_or_node_change_anywhere() -> None:
    async def scenario() -> None:
        q = SchedulingQueue({}, 1.0, 10.0)
        q.changed(on(framework.POD_ADDED, "node2"))
        assert q.generation == 0, "a pod bound while nobody waits for a domain's pods changes nothing"
        q.wait_on_node("ns/spread", "node1", PodTopologySpread.wakes_on)
        q.wait_on_node("ns/room", "node1", NodeResourcesFit.wakes_on)
        q.changed(on(framework.POD_ADDED, "node2"))
        assert await drain(q) == ["ns/spread"], "a pod added in node1's zone, on another node, may change its count"
        q.wait_on_node("ns/spread", "node1", InterPodAffinity.wakes_on)
        q.changed(on(framework.POD_GONE, "node3"))
        assert await drain(q) == ["ns/spread"]
        q.wait_on_node("ns/spread", "node1", InterPodAffinity.wakes_on)
        q.forget("ns/spread")
        q.changed(on(framework.NODE, "node3"))
        assert await drain(q) == [], "a forgotten pod waits for nothing"
        q.wait_for_domains("ns/claimer")  # a claim pod: no node of its own
        q.changed(on(framework.POD_ADDED, "node9"))
        assert await drain(q) == ["ns/claimer"]
        q.wait_for_domains("ns/claimer")
        q.changed(ClusterEvent(framework.NAMESPACE))
        assert await drain(q) == ["ns/claimer"], "a namespace's labels may change what a term's selector matches"

    run_async(scenario)


def test_claim_pods_wake_on_room_only_where_there_are_gpus_and_on_any_inventory_change() -> None:
    async def scenario() -> None:
        q = SchedulingQueue({}, 1.0, 10.0)
        q.names_claim("ns/claimer", "ns/train")
        q.unschedulable("ns/claimer", "busy")
        q.changed(on(framework.POD_GONE, "cpu-node"))
        q.changed(on(framework.NODE, "cpu-node"))
        assert await drain(q) == [], "a claim pod goes only to nodes with GPUs"
        q.changed(on(framework.POD_GONE, "gpu-node", gpus=True))
        assert await drain(q) == ["ns/claimer"]
        q.changed(ClusterEvent(framework.GPU_INVENTORY))
        assert await drain(q) == ["ns/claimer"]

    run_async(scenario)


def test_freed_gpus_wake_the_map_pods_waiting_for_that_node_and_the_waiting_claim_pods() -> None:
    async def scenario() -> None:
        ledger = Ledger()
        q = SchedulingQueue({}, 1.0, 10.0)
        q.wait_on_node("ns/on1", "node1", frozenset({framework.GPUS_FREED}))
        q.wait_on_node("ns/on2", "node2", frozenset({framework.GPUS_FREED}))
        q.names_claim("ns/claimer", "ns/train")
        q.unschedulable("ns/claimer", "busy")
        q.names_claim("ns/placing", "ns/train")  # names a claim but was not found unschedulable: not woken
        q.ledger_changed(ledger)  # nothing freed: nothing woken
        assert await drain(q) == []
        assert ledger.assume(Hold("u1", "ns/x", "node1", (0,))) == []
        ledger.forget("u1")
        q.ledger_changed(ledger)
        assert sorted(await drain(q)) == ["ns/claimer", "ns/on1"]
        assert ledger.freed == set(), "the freed nodes are taken, so the next change does not wake them again"

    run_async(scenario)


def test_waiting_claim_pods_are_retried_in_the_order_they_are_served_and_again_when_it_changes() -> None:
    async def scenario() -> None:
        pods = {
            "ns/old-low": queued_pod("ns/old-low", 0, "2026-01-01T00:00:00Z"),
            "ns/new-high": queued_pod("ns/new-high", 10, "2026-01-02T00:00:00Z"),
            "ns/mid": queued_pod("ns/mid", 5, "2026-01-01T12:00:00Z"),
        }
        q = SchedulingQueue(pods, 1.0, 10.0)
        for key in pods:
            q.names_claim(key, f"{key}-claim")
            q.unschedulable(key, "busy")
        q.wake_claim_pods()
        assert await drain(q) == ["ns/new-high", "ns/mid", "ns/old-low"]
        for key in pods:
            q.unschedulable(key, "busy")
        q.set_order("FIFO")
        assert q.order == "FIFO"
        assert await drain(q) == ["ns/old-low", "ns/mid", "ns/new-high"]
        q.set_order("FIFO")  # no change: nobody is woken
        assert await drain(q) == []

    run_async(scenario)


def test_a_retry_waits_for_the_pods_backoff() -> None:
    async def scenario() -> None:
        q = SchedulingQueue({}, 0.05, 1.0)
        q.attempted("ns/a")
        q.retry("ns/a")
        assert await drain(q) == [], "tried just now: the retry waits for its backoff"
        await asyncio.sleep(0.1)
        assert await drain(q) == ["ns/a"]
        q.changed(ClusterEvent(framework.GPU_CLAIM, name="ns/none"))  # a claim no pod names
        assert await drain(q) == []

    run_async(scenario)


def test_a_message_is_news_once_and_again_after_it_could_not_be_said() -> None:
    q = SchedulingQueue({}, 1.0, 10.0)
    assert q.unschedulable("ns/a", "no room")
    assert not q.unschedulable("ns/a", "no room")
    assert q.unschedulable("ns/a", "no GPUs")
    q.unreported("ns/a")
    assert q.unschedulable("ns/a", "no GPUs")


def test_forgetting_a_waiter_frees_its_nodes_for_lower_priorities_and_wakes_them() -> None:
    async def scenario() -> None:
        pods = {"ns/high": queued_pod("ns/high", 10), "ns/low": queued_pod("ns/low", 0)}
        q = SchedulingQueue(pods, 1.0, 10.0)
        for key in pods:
            q.names_claim(key, f"{key}-claim")
        q.unschedulable("ns/low", "kept for ns/high")
        q.reserve(Waiter("ns/high", 10, "", frozenset({"node1"})))
        q.reserve(Waiter("ns/low", 0, "", frozenset({"node1"})))  # kept out, it waits for busy GPUs too
        assert dict(q.reserved_for(0)) == {"node1": "ns/high (priority 10)"}
        assert dict(q.reserved_for(10)) == {}
        q.wait_on_node("ns/high", "node1", NodeResourcesFit.wakes_on)
        q.forget("ns/high")  # bound, say
        assert dict(q.reserved_for(0)) == {}
        assert await drain(q) == ["ns/low"], "the pod the node was kept from is tried again"
        q.changed(on(framework.POD_GONE, "node1"))
        assert await drain(q) == [], "a forgotten pod waits for nothing"
        q.forget("ns/low")
        q.wake_claim_pods()
        assert await drain(q) == []
        for key in ("ns/a", "ns/b"):  # equals keep nothing from each other
            q.names_claim(key, f"{key}-claim")
            q.unschedulable(key, "busy")
            q.reserve(Waiter(key, 0, "", frozenset({"node1"})))
        q.forget("ns/a")
        assert await drain(q) == [], "b was kept out of nothing by a: a backlog's deletions wake nobody"

    run_async(scenario)


def test_the_flush_retries_only_the_pods_tried_before_the_latest_change_that_could_help() -> None:
    """A backlog costs its first pass and then nothing: every change that could help a pod passes through the queue
    (its generation), so the five-minute flush leaves alone a pod tried since the last one, and retries the others
    (the change was routed to someone else, or a wake went missing)."""

    async def scenario() -> None:
        q = SchedulingQueue({}, 0.0, 0.0)
        for key in ("ns/a", "ns/b"):
            q.names_claim(key, f"{key}-claim")
            q.attempted(key)
            q.unschedulable(key, "busy")
        assert q.flush() == 0 and await drain(q) == [], "nothing changed since both were tried"
        generation = q.generation
        q.changed(ClusterEvent(framework.GPU_CLAIM, name="ns/a-claim"))  # exactly its pods: nothing for the flush
        assert q.generation > generation, "a gang refused before it is decided again"
        assert sorted(await drain(q)) == ["ns/a"]
        q.attempted("ns/a")
        q.unschedulable("ns/a", "busy")
        assert q.flush() == 0 and await drain(q) == [], "b could not be helped by a's claim"
        q.changed(on(framework.POD_GONE, "node1"))  # helps map pods of node1 only, but routed by a guess
        assert q.flush() == 2 and sorted(await drain(q)) == ["ns/a", "ns/b"]
        q.attempted("ns/a")
        q.unschedulable("ns/a", "busy")
        assert q.flush() == 1 and await drain(q) == ["ns/b"], "a was tried after the change; b was not"
        q.forget("ns/b")
        assert q.flush() == 0

    run_async(scenario)
