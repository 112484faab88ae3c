"""A map the webhook cannot honour is refused at admission (admission.feature, @errors: both tiers)."""

from __future__ import annotations

from pytest_bdd import given, scenarios, then, when

from features.support import (
    TAKE_HOME_MAP,
    StatefulSet,
    World,
    events_for,
    pod_body,
    pods_on_mapped_nodes,
    scale,
    step,
)
from gpu_scheduling import constants
from gpu_scheduling.kube import paths
from harness.wait import wait_for

scenarios("admission.feature")


@when(step('the pod "{name:q}" is created with the map'))
def create_pod_with_docstring_map(world: World, name: str, docstring: str) -> None:
    world.attempt(lambda: world.api.create(paths.pods(world.namespace), pod_body(name, gpu_map=docstring)))


@when(step('a pod with generateName "{prefix:q}" is created with the take-home map'))
def create_generate_name_pod(world: World, prefix: str) -> None:
    world.attempt(
        lambda: world.api.create(
            paths.pods(world.namespace), pod_body(prefix, gpu_map=TAKE_HOME_MAP, generate_name=True)
        )
    )


@given("all its pods run on their mapped nodes")
def all_pods_on_mapped_nodes(world: World, statefulset: StatefulSet) -> None:
    sts = world.api.get(statefulset.path)
    pods_on_mapped_nodes(world, statefulset, sts["spec"]["replicas"])


@when(step("the StatefulSet is scaled to {replicas:d} replicas"), target_fixture="pods_before_scaling")
def scale_statefulset(world: World, statefulset: StatefulSet, replicas: int) -> dict[str, tuple[str, str]]:
    return scale(world, statefulset, replicas)


@then(step('the StatefulSet has a FailedCreate event containing "{fragment:q}"'))
def statefulset_event(world: World, statefulset: StatefulSet, fragment: str) -> None:
    events = wait_for(
        "a FailedCreate event on the StatefulSet",
        lambda: [
            e for e in events_for(world, "StatefulSet", statefulset.name, "FailedCreate") if fragment in e["message"]
        ],
        timeout=60,
    )
    assert constants.WEBHOOK_NAME in events[0]["message"], events[0]["message"]


@then("pods 0 to 4 are the same pods on the same nodes as before")
def same_pods(world: World, statefulset: StatefulSet, pods_before_scaling: dict[str, tuple[str, str]]) -> None:
    now = {
        p["metadata"]["name"]: (p["metadata"]["uid"], p["spec"].get("nodeName", ""))
        for p in world.api.pods(world.namespace)
    }
    before = {statefulset.pod(i) for i in range(5)}
    assert {k: v for k, v in now.items() if k in before} == {k: pods_before_scaling[k] for k in before}
    sts = world.api.get(statefulset.path)
    assert sts["status"].get("replicas") == 5, sts["status"]
