"""Event series on the real apiserver (events.feature, control-plane tier): a waiting pod tried again and again for
the same reason, its attempts read from the leader's /metrics, its FailedScheduling Event from the apiserver, and the
Event's writes from the apiserver's audit log."""

from __future__ import annotations

import dataclasses
import datetime
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from pytest_bdd import given, scenarios, then, when

from features.support import World, get_pod, step
from gpu_scheduling import constants
from gpu_scheduling.kube import paths
from gpu_scheduling.scheduler.events import SeriesTiming
from harness.wait import wait_for

scenarios("events.feature")

ATTEMPTS = "gpu_scheduler_scheduling_attempts_total"
#: A label the scheduler reads (a pod's labels are part of what a decision reads) and no rule of the pod names:
#: changing it wakes the pod without helping it.
NUDGE_LABEL = "events.test/nudge"


@dataclasses.dataclass
class Attempts:
    """The map pods' unschedulable attempts of the leader, counted from the Given on (the scenario's pod is the only
    map pod of gpu-scheduler waiting, so they are its own)."""

    port: int
    base: float = 0.0
    changes: int = 0  # the label changes made so far, each tried
    message: str = ""  # the reason the pod waits for, as its PodScheduled condition says
    event: dict[str, Any] = dataclasses.field(default_factory=dict)  # its Event, once it counted every attempt

    def total(self) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as answer:
            text = answer.read().decode()
        return sum(
            sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == ATTEMPTS and sample.labels.get("kind") == "map"
            if sample.labels.get("result") == "unschedulable"
        )

    def made(self) -> int:
        return round(self.total() - self.base)


def _stamp(value: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(value)


def _failed_scheduling(world: World, pod: dict[str, Any]) -> list[dict[str, Any]]:
    """Every FailedScheduling Event about this pod (by its uid, not its name)."""
    uid = pod["metadata"]["uid"]
    return [
        e
        for e in world.api.events(world.namespace)
        if e["involvedObject"].get("uid") == uid and e.get("reason") == constants.EVENT_FAILED_SCHEDULING
    ]


def _still_waiting(world: World, name: str) -> str:
    """The pod is unbound and its PodScheduled condition says why: that message."""
    pod = get_pod(world, name)
    assert not pod["spec"].get("nodeName"), f"{name} was bound to {pod['spec']['nodeName']}"
    conditions = {c["type"]: c for c in pod["status"].get("conditions") or []}
    condition = conditions.get("PodScheduled") or {}
    assert condition.get("status") == "False", conditions
    return str(condition.get("message") or "")


@given(
    "gpu-scheduler's attempts on map pods are counted from now, no other pod of it waiting", target_fixture="attempts"
)
def count_attempts(world: World) -> Attempts:
    comps = world.cluster.components
    assert comps is not None, "the control-plane tier starts the scheduler"
    unbound = f"spec.schedulerName={comps.scheduler_name},spec.nodeName="
    wait_for(
        "no unbound pod of gpu-scheduler in any namespace (their attempts would be counted too)",
        lambda: not world.api.get(paths.ALL_PODS, fieldSelector=unbound)["items"],
        timeout=30,
    )
    attempts = Attempts(comps.wait_for_leader().health_port)
    attempts.base = attempts.total()
    return attempts


@when(
    step(
        'the labels of the pod "{name:q}" are changed {times:d} times, each change tried by gpu-scheduler and the '
        "pod still waiting"
    )
)
def relabel(world: World, attempts: Attempts, name: str, times: int) -> None:
    attempts.message = attempts.message or _still_waiting(world, name)
    # Its condition is written before its attempt is counted: wait for the count of the attempts made so far, so
    # that the first change is not taken for tried by the attempt before it.
    wait_for(
        f"gpu-scheduler's {1 + attempts.changes} attempts on {name} counted",
        lambda: attempts.made() >= 1 + attempts.changes,
        timeout=30,
        interval=0.1,
    )
    for _ in range(times):
        before = attempts.made()
        attempts.changes += 1
        patch = {"metadata": {"labels": {NUDGE_LABEL: str(attempts.changes)}}}
        world.api.patch(paths.pod(world.namespace, name), patch, kind="strategic")
        # One change at a time, each waited for: a change made while the pod is queued would be tried with it.
        wait_for(
            f"an attempt of gpu-scheduler on {name} after its label change {attempts.changes}",
            lambda before=before: attempts.made() > before,
            timeout=30,
            interval=0.1,
        )
        assert _still_waiting(world, name) == attempts.message, "the change made it wait for another reason"


@then(step('the FailedScheduling Event of "{name:q}" counts every attempt so far'))
def counts_every_attempt(world: World, attempts: Attempts, name: str) -> None:
    pod = get_pod(world, name)

    def counted() -> dict[str, Any] | None:
        made = attempts.made()
        return next((e for e in _failed_scheduling(world, pod) if e.get("count") == made), None)

    # Written back 10 s after the Event was created, then 20 s after that (SeriesTiming): a repeat seen after a
    # write waits for the next one.
    timing = SeriesTiming()
    event = wait_for(
        f"a FailedScheduling Event of {name} whose count is gpu-scheduler's attempts on it",
        counted,
        timeout=timing.first_update * 7 + 15,
        interval=0.5,
    )
    assert event["count"] >= 1 + attempts.changes, (
        f"count {event['count']}: fewer than the first attempt and the {attempts.changes} label changes"
    )
    attempts.event = event


@then(step('"{name:q}" has one FailedScheduling Event for its reason, its lastTimestamp later than its firstTimestamp'))
def one_event(world: World, attempts: Attempts, name: str) -> None:
    events = _failed_scheduling(world, get_pod(world, name))
    series = [e for e in events if e["message"] == attempts.message]
    assert len(series) == 1, f"{name} has {len(series)} FailedScheduling Events for one reason: " + ", ".join(
        f"{e['metadata']['name']} (count {e.get('count')}, first {e.get('firstTimestamp')})" for e in series
    )
    assert series == events, f"FailedScheduling Events of {name} for other reasons: {events}"
    (event,) = series
    assert event["metadata"]["name"] == attempts.event["metadata"]["name"]
    assert event["count"] >= attempts.event["count"], (event["count"], attempts.event["count"])
    first, last = _stamp(event["firstTimestamp"]), _stamp(event["lastTimestamp"])
    assert last > first, f"lastTimestamp {event['lastTimestamp']} is not later than firstTimestamp {first}"


@then(
    step(
        "the audit log has that Event created once, then patched: first {first:d} s or more after its firstTimestamp, "
        "each later patch at least twice as long after the one before"
    )
)
def created_once_then_patched(world: World, attempts: Attempts, first: int) -> None:
    cp = world.cluster.cp
    assert cp is not None, "the audit log is the test control plane's"
    timing = SeriesTiming()
    assert first == timing.first_update, f"the scheduler runs with the default first update, {timing.first_update} s"
    event = attempts.event
    prefix = f"{event['involvedObject']['name']}."  # the scheduler names a pod's Events <pod>.<hex>

    def writes() -> list[dict[str, Any]] | None:
        found = [
            w
            for w in cp.writes()
            if w["resource"] == "events"
            and w["namespace"] == world.namespace
            and (w["name"] or "").startswith(prefix)
            and 200 <= (w["code"] or 0) < 300
        ]
        # The audit log may be a moment behind the answers: the create and at least the two writes of the counts
        # seen, whatever they were.
        return sorted(found, key=lambda w: w["received"]) if len(found) >= 3 else None

    found = wait_for(f"the writes of {event['metadata']['name']} in the audit log", writes, timeout=10)
    creates = [w for w in found if w["verb"] == "create"]
    assert len(creates) == 1, f"{len(creates)} Events created for one series: " + ", ".join(
        f"{w['name']} at {w['received']:.3f}" for w in creates
    )
    assert creates[0]["name"] == event["metadata"]["name"], (creates[0]["name"], event["metadata"]["name"])
    assert found[0] is creates[0], f"written before it was created: {found[: found.index(creates[0])]}"
    rest = found[1:]
    assert all(w["verb"] == "patch" and w["name"] == event["metadata"]["name"] for w in rest), rest
    # The scheduler stamps firstTimestamp (whole seconds, rounded down) before it creates the Event and counts the
    # backoff from there, and each later interval from the answer to the previous patch, which the apiserver
    # received before: so these are lower bounds whatever the load.
    since, interval = _stamp(event["firstTimestamp"]).timestamp(), float(first)
    for i, w in enumerate(rest):
        assert w["received"] - since >= interval, (
            f"patch {i + 1} of {event['metadata']['name']} came {w['received'] - since:.3f} s after "
            f"{'its firstTimestamp' if i == 0 else f'patch {i}'}, sooner than {interval:g} s"
        )
        since, interval = w["received"], min(interval * 2, timing.max_interval)
