"""Node strategies, the runtime GpuSchedulingPolicy and priority order (strategies.feature, control-plane tier).

Each scenario adds a pool of kwok nodes of its own, labelled with its namespace, and its claims select that pool:
what other scenarios hold on node1..node4 cannot change where they go. The pool's inventories are written here as
the agent would write them (harness.inventory). The policy and the PriorityClass are cluster-wide: they are
deleted when the scenario ends."""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Iterator
from typing import Any

import pytest
from pytest_bdd import given, scenarios, then, when

from features.support import World, claim_status, gang_member_body, get_pod, on_node, pod_body, step
from gpu_scheduling import constants
from gpu_scheduling.agent.inventory import simulated_status
from gpu_scheduling.claims import objects
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import NotFound
from harness.inventory import publish
from harness.wait import wait_for

scenarios("strategies.feature")

POOL_LABEL = "gpu-scheduling.test/pool"
PRIORITY_CLASS = "gpu-high"


@pytest.fixture(autouse=True)
def cluster_wide_undo(world: World) -> Iterator[None]:
    """The policy and the PriorityClass outlive a scenario's namespace: take them away afterwards, and wait until
    the scheduler applies its flag's strategy again, so the next scenario starts from the default."""
    yield
    with contextlib.suppress(NotFound):
        world.api.delete(paths.scheduling_policy())
    with contextlib.suppress(NotFound):
        world.api.delete(paths.priority_class(PRIORITY_CLASS))
    for node in world.added_nodes:
        with contextlib.suppress(NotFound):
            world.api.delete(paths.gpu_node_status(node))


def pool_node(world: World, letter: str) -> str:
    return f"{world.namespace}-{letter}"


def pool_selector(world: World) -> dict[str, Any]:
    return {"matchLabels": {POOL_LABEL: world.namespace}}


def _add_pool(world: World, count: int, status: dict[str, Any]) -> None:
    assert world.cluster.cp is not None, "the pool is made of kwok nodes (control-plane tier)"
    names = [pool_node(world, chr(ord("a") + i)) for i in range(count)]
    for name in names:
        world.cluster.cp.add_node(name, labels={POOL_LABEL: world.namespace})
        world.added_nodes.append(name)
    publish(world.cluster.kubeconfig, dict.fromkeys(names, status))


@given(step("a pool of {count:d} nodes with 8 GPUs each"))
def pool(world: World, count: int) -> None:
    _add_pool(world, count, simulated_status())


@given(step('a pool of {count:d} nodes whose GPUs have {total:d} MiB with "{used:q}" MiB used'))
def pool_with_memory(world: World, count: int, total: int, used: str) -> None:
    status = simulated_status()
    for device, mib in zip(status["devices"], used.split(","), strict=True):
        device["memoryTotalMiB"], device["memoryUsedMiB"] = total, int(mib)
    _add_pool(world, count, status)


def _claim(world: World, name: str, count: int, **spec: Any) -> None:
    body = {"devices": {"count": count}, "selector": pool_selector(world)} | spec
    world.api.create(paths.gpu_claims(world.namespace), objects.claim_body(name, body))


def _pod(world: World, name: str, claim: str, priority_class: str | None = None) -> None:
    body = pod_body(name, gpu_map=None, claim=claim)
    if priority_class:
        body["spec"]["priorityClassName"] = priority_class
    world.api.create(paths.pods(world.namespace), body)


def _bound(world: World, name: str) -> dict[str, Any]:
    return wait_for(
        f"GpuClaim {name} Bound",
        lambda: (s := claim_status(world, name)).get("phase") == "Bound" and s,
        timeout=60,
    )


@given(step('the GpuClaim "{name:q}" asking for {count:d} GPUs on pool node "{letter:q}" is created'))
def claim_on_pool_node(world: World, name: str, count: int, letter: str) -> None:
    body = {"devices": {"count": count}, "selector": on_node(pool_node(world, letter))}
    world.api.create(paths.gpu_claims(world.namespace), objects.claim_body(name, body))


@when(
    step('the claims "{names:q}" asking for 1 GPU each with strategy "{strategy:q}" are bound one after another'),
    target_fixture="placed",
)
def claims_one_after_another(world: World, names: str, strategy: str) -> list[dict[str, Any]]:
    """One claim and its pod at a time, each waited for: the order the strategies are compared in."""
    placed = []
    for name in names.split(","):
        _claim(world, name, 1, **({"strategy": strategy} if strategy else {}))
        _pod(world, f"{name}-0", name)
        placed.append(_bound(world, name))
    return placed


@when(
    step('the gang "{gang:q}" of {n:d} pods of {count:d} GPUs each in the pool is created with priority class "{pc:q}"')
)
def gang_in_pool(world: World, gang: str, n: int, count: int, pc: str) -> None:
    _claim(world, gang, count, gangRef=gang)
    for i in range(n):
        body = gang_member_body(f"{gang}-{i}", gang, n)
        body["spec"]["priorityClassName"] = pc
        world.api.create(paths.pods(world.namespace), body)


@then(step('the pods "{names:q}" are bound, one on each pool node'))
def pods_on_each_pool_node(world: World, names: str) -> None:
    wanted = names.split(",")

    def bound() -> list[str] | None:
        nodes = [get_pod(world, n)["spec"].get("nodeName") for n in wanted]
        return nodes if all(nodes) else None  # type: ignore[return-value]

    nodes = wait_for(f"{names} bound", bound, timeout=60)
    assert sorted(nodes) == sorted(pool_node(world, chr(ord("a") + i)) for i in range(len(wanted))), nodes


@given(step('the claims "{names:q}" asking for {counts} GPUs in the pool are bound'))
def claims_bound(world: World, names: str, counts: str) -> None:
    for name, count in zip(names.split(","), counts.split(","), strict=True):
        _claim(world, name, int(count))
        _pod(world, f"{name}-0", name)
        _bound(world, name)


@when(step('the claims "{name:q}" asking for 1 GPU with at least {mib:d} MiB free are bound one after another'))
def memory_claim_bound(world: World, name: str, mib: int) -> None:
    _claim(world, name, 1, devices={"count": 1, "minMemoryMiB": mib})
    _pod(world, f"{name}-0", name)
    _bound(world, name)


@when(step('the claims "{name:q}" asking for 1 GPU with at least {mib:d} MiB free are created'))
def memory_claim_created(world: World, name: str, mib: int) -> None:
    _claim(world, name, 1, devices={"count": 1, "minMemoryMiB": mib})
    _pod(world, f"{name}-0", name)


@when(step('the pod "{pod:q}" naming the GpuClaim "{claim:q}" of {count:d} GPUs in the pool is created'))
def claim_and_pod(world: World, pod: str, claim: str, count: int) -> None:
    _claim(world, claim, count)
    _pod(world, pod, claim)


@when(
    step(
        'the pod "{pod:q}" naming the GpuClaim "{claim:q}" of {count:d} GPUs in the pool is created '
        'with priority class "{priority_class:q}"'
    )
)
def claim_and_priority_pod(world: World, pod: str, claim: str, count: int, priority_class: str) -> None:
    _claim(world, claim, count)
    _pod(world, pod, claim, priority_class)
    assert get_pod(world, pod)["spec"].get("priority") == 1000, "the Priority admission plugin resolves the class"


@then(step('the GpuClaim "{name:q}" is Bound on pool node "{letter:q}" by strategy "{strategy:q}"'))
def bound_on_pool_node(world: World, name: str, letter: str, strategy: str) -> None:
    status = _bound(world, name)
    assert (status["nodeName"], status["strategy"]) == (pool_node(world, letter), strategy), status


@then(step('the GpuClaim "{name:q}" is Bound on pool node "{letter:q}" with GPU "{gpu:d}"'))
def bound_on_gpu(world: World, name: str, letter: str, gpu: int) -> None:
    status = _bound(world, name)
    assert (status["nodeName"], status["gpuIds"]) == (pool_node(world, letter), [gpu]), status


@then(step('they are on the pool nodes "{letters:q}" by strategy "{strategy:q}"'))
def on_pool_nodes(world: World, placed: list[dict[str, Any]], letters: str, strategy: str) -> None:
    want = [(pool_node(world, letter), strategy) for letter in letters.split(",")]
    assert [(s["nodeName"], s["strategy"]) for s in placed] == want, placed


def _consecutive(world: World, nodes: list[str]) -> None:
    pool = sorted(world.added_nodes)
    positions = [pool.index(n) for n in nodes]
    assert all(b == (a + 1) % len(pool) for a, b in itertools.pairwise(positions)), (nodes, pool)


@then("they are on consecutive pool nodes in name order, wrapping around")
def consecutive(world: World, placed: list[dict[str, Any]]) -> None:
    assert all(s["strategy"] == "RoundRobin" for s in placed), placed
    _consecutive(world, [s["nodeName"] for s in placed])


@then(step('the claims "{names:q}" are on consecutive pool nodes in name order, wrapping around'))
def claims_consecutive(world: World, names: str) -> None:
    statuses = [claim_status(world, name) for name in names.split(",")]
    assert all(s.get("strategy") == "RoundRobin" for s in statuses), statuses
    _consecutive(world, [s["nodeName"] for s in statuses])


# ---- the policy ------------------------------------------------------------------------------------------------


def _apply_policy(world: World, spec: dict[str, Any]) -> None:
    body = {
        "apiVersion": constants.API_VERSION,
        "kind": constants.GPU_SCHEDULING_POLICY_KIND,
        "metadata": {"name": constants.POLICY_NAME},
        "spec": spec,
    }
    try:
        world.api.patch(paths.scheduling_policy(), {"spec": spec})
    except NotFound:
        world.api.create(paths.SCHEDULING_POLICIES, body)


def _applied(world: World) -> dict[str, Any]:
    """The policy once the scheduler says it applies its current generation."""

    def observed() -> dict[str, Any] | None:
        policy = world.api.get(paths.scheduling_policy())
        status = policy.get("status") or {}
        return policy if status.get("observedGeneration") == policy["metadata"]["generation"] else None

    return wait_for("the GpuSchedulingPolicy's generation observed", observed, timeout=30)


@given(step('the GpuSchedulingPolicy sets the default strategy "{strategy:q}"'))
@when(step('the GpuSchedulingPolicy sets the default strategy "{strategy:q}"'))
def set_strategy(world: World, strategy: str) -> None:
    _apply_policy(world, {"defaultStrategy": strategy})


@given(step('the GpuSchedulingPolicy sets the queue order "{order:q}"'))
def set_queue_order(world: World, order: str) -> None:
    _apply_policy(world, {"queueOrder": order})
    assert (_applied(world)["status"]["queueOrder"]) == order


@when("the GpuSchedulingPolicy is deleted")
def delete_policy(world: World) -> None:
    world.api.delete(paths.scheduling_policy())
    # Nothing in the API says the scheduler saw the deletion; the next placement is the proof, so give its watch
    # a moment to deliver it.
    time.sleep(1)


@then(step('the policy\'s status says strategy "{strategy:q}" is applied from its generation'))
def policy_applied(world: World, strategy: str) -> None:
    policy = _applied(world)
    status = policy["status"]
    assert (status["strategy"], status["queueOrder"]) == (strategy, constants.DEFAULT_QUEUE_ORDER), status
    assert f"generation {policy['metadata']['generation']}" in status["message"], status


@then(step('the policy has a PolicyApplied event naming "{strategy:q}"'))
def policy_event(world: World, strategy: str) -> None:
    policy = world.api.get(paths.scheduling_policy())

    def event() -> dict[str, Any] | None:
        for e in world.api.get(paths.events("default"))["items"]:
            involved = e.get("involvedObject") or {}
            if (
                involved.get("kind") == constants.GPU_SCHEDULING_POLICY_KIND
                and involved.get("uid") == policy["metadata"]["uid"]
                and e.get("reason") == "PolicyApplied"
                and strategy in e.get("message", "")
            ):
                return e
        return None

    found = wait_for("a PolicyApplied event", event, timeout=30)
    assert found["source"]["component"] == constants.DEFAULT_SCHEDULER_NAME, found


# ---- priority --------------------------------------------------------------------------------------------------


@given(step('the PriorityClass "{name:q}" of value {value:d} that never preempts'))
def priority_class(world: World, name: str, value: int) -> None:
    """A priority that orders the queue and keeps nodes for its waiters, but preempts nothing (preemptionPolicy
    Never, which the Priority admission plugin copies onto its pods): what these scenarios watch is the waiting."""
    body = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "preemptionPolicy": "Never",
    }
    world.api.create(paths.PRIORITY_CLASSES, body, exist_ok=True)


@then(step('the GpuClaim "{name:q}" is Failed with a message containing "{fragment:q}"'))
def claim_failed(world: World, name: str, fragment: str) -> None:
    wait_for(
        f"GpuClaim {name} Failed mentioning {fragment!r}",
        lambda: (s := claim_status(world, name)).get("phase") == "Failed" and fragment in s.get("message", ""),
        timeout=60,
    )
