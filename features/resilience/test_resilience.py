"""Restarts and outages (resilience.feature, control-plane tier): a scheduler killed mid-rollout, the webhook
down."""

from __future__ import annotations

from pytest_bdd import given, scenarios, then, when

from features.support import (
    StatefulSet,
    World,
    assert_refused,
    assert_scheduled_event,
    bindings,
    events_for,
    get_pod,
    scale,
    step,
)
from gpu_scheduling import constants
from harness.wait import wait_for

scenarios("resilience.feature")


@given("the webhook is down")
def webhook_down(world: World) -> None:
    assert world.cluster.components is not None
    world.cluster.components.webhook.stop()


@when(step("the scheduler is killed after at least {count:d} of its pods are bound"))
def kill_scheduler(world: World, count: int) -> None:
    assert world.cluster.components is not None
    wait_for(
        f"{count} bound pods",
        lambda: sum(1 for p in world.api.pods(world.namespace) if p["spec"].get("nodeName")) >= count,
        timeout=60,
        interval=0.05,
    )
    world.cluster.components.scheduler.kill()


@when(step("the StatefulSet is scaled to {replicas:d} replicas while the scheduler is down"))
def scale_while_down(world: World, statefulset: StatefulSet, replicas: int) -> None:
    assert world.cluster.components is not None and not world.cluster.components.scheduler.running
    scale(world, statefulset, replicas)
    wait_for(f"{replicas} pods to exist", lambda: len(world.api.pods(world.namespace)) >= replicas, timeout=60)


@then("every pod bound after the restart has a Scheduled event from gpu-scheduler")
def events_after_restart(world: World, restarted_at: float) -> None:
    """The scheduler records one Scheduled event after each bind. A pod that the killed scheduler bound may have
    lost its event with the process (SIGKILLed between the bind and the event) and never gets one later, since
    the restarted scheduler finds it bound; so the apiserver's audit log says which pods the restarted scheduler
    bound: each of those has exactly one Scheduled event from gpu-scheduler, and every other pod at most one."""
    pods = world.api.pods(world.namespace)
    after = {b["name"] for b in bindings(world) if b["received"] >= restarted_at}
    assert after, "no pod was bound after the restart"  # else "exactly one" below would check nothing
    assert after <= {p["metadata"]["name"] for p in pods}, after
    for pod in pods:
        name = pod["metadata"]["name"]
        if name in after:
            events = wait_for(
                f"the Scheduled event of {name}, bound after the restart",
                lambda name=name: events_for(world, "Pod", name, constants.EVENT_SCHEDULED),
                timeout=30,
            )
            assert_scheduled_event(world, pod, events)
        else:
            events = events_for(world, "Pod", name, constants.EVENT_SCHEDULED)
            assert len(events) <= 1, f"{name} has {len(events)} Scheduled events: {events}"
            if events:
                assert_scheduled_event(world, pod, events)


@then(step('the creation is refused because the webhook "{name:q}" could not be called'))
def refused_webhook_down(world: World, name: str) -> None:
    assert_refused(world, f'failed calling webhook "{name}"')


@then(step('the pod "{name:q}" exists'))
def pod_exists(world: World, name: str) -> None:
    assert world.error is None, world.error
    assert get_pod(world, name)["metadata"]["name"] == name
