"""Preemption on the control plane (preemption.feature): claim pods and gangs of PriorityClasses on the kwok nodes'
simulated GPUs. The pods that may be preempted carry a finalizer of the test's (HOLD), so that each victim stays,
terminating, until 'the preempted pods are gone': what it holds must not be given away before then."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from pytest_bdd import given, parsers, scenarios, then, when

from features.support import (
    ZONE_LABEL,
    ZONES,
    World,
    events_for,
    gang_member_body,
    get_pod,
    on_node,
    pod_body,
    step,
)
from gpu_scheduling import constants
from gpu_scheduling.claims import objects
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import NotFound
from harness.controlplane import KWOK_LEAVE_ALONE
from harness.wait import wait_for

scenarios("preemption.feature")

HOLD = "testbed.gpu.scheduling/hold"
"""The finalizer that keeps a deleted pod of a scenario, terminating, until the scenario lets it go."""
GROUP_LABEL = "testbed.gpu.scheduling/group"
PRIORITY_CLASSES = ("preempt-low", "preempt-high", "preempt-never")


@pytest.fixture(autouse=True)
def let_go(world: World) -> Iterator[None]:
    """After the scenario: the finalizers go (so its namespace can), and so do the PriorityClasses."""
    yield
    _release(world, world.api.pods(world.namespace))
    for name in PRIORITY_CLASSES:
        with contextlib.suppress(NotFound):
            world.api.delete(paths.priority_class(name))


def _release(world: World, pods: list[dict[str, Any]]) -> None:
    for pod in pods:
        if HOLD in (pod["metadata"].get("finalizers") or []):
            with contextlib.suppress(NotFound):
                world.api.patch(
                    paths.pod(world.namespace, pod["metadata"]["name"]),
                    {"metadata": {"finalizers": None}},
                    kind="merge",
                )


@pytest.fixture
def preempted() -> dict[str, dict[str, Any]]:
    """The pods a 'preempted' step found, by name (as they were when found)."""
    return {}


@given(
    parsers.re(
        r'the PriorityClasses "(?P<low>[^"]+)" of value (?P<low_value>\d+), "(?P<high>[^"]+)" of value '
        r'(?P<high_value>\d+) and "(?P<never>[^"]+)" of value (?P<never_value>\d+) that never preempts'
    )
)
def priority_classes(
    world: World, low: str, low_value: str, high: str, high_value: str, never: str, never_value: str
) -> None:
    for name, value, policy in (
        (low, low_value, None),
        (high, high_value, None),
        (never, never_value, "Never"),
    ):
        body: dict[str, Any] = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": int(value),
        }
        if policy:
            body["preemptionPolicy"] = policy
        world.api.create(paths.PRIORITY_CLASSES, body, exist_ok=True)


def _claim(world: World, name: str, gpus: int, nodes: list[str] | None, gang: str | None = None) -> None:
    spec: dict[str, Any] = {"devices": {"count": gpus}}
    if nodes and len(nodes) == 1:
        spec["selector"] = on_node(nodes[0])
    if gang:
        spec["gangRef"] = gang
    world.api.create(paths.gpu_claims(world.namespace), objects.claim_body(name, spec))


def _pod(name: str, claim: str, priority_class: str, group: str, nodes: list[str] | None = None) -> dict[str, Any]:
    body = pod_body(name, gpu_map=None, claim=claim, affinity_nodes=nodes if nodes and len(nodes) > 1 else None)
    body["spec"]["priorityClassName"] = priority_class
    body["metadata"]["labels"] = {GROUP_LABEL: group}
    body["metadata"]["finalizers"] = [HOLD]
    return body


def _group(world: World, group: str) -> list[dict[str, Any]]:
    return world.api.pods(world.namespace, labelSelector=f"{GROUP_LABEL}={group}")


def _running(world: World, group: str, count: int) -> list[dict[str, Any]]:
    def ready() -> list[dict[str, Any]] | None:
        pods = _group(world, group)
        ok = len(pods) == count and all(
            p["spec"].get("nodeName") and p["status"].get("phase") == "Running" for p in pods
        )
        return pods if ok else None

    pods = wait_for(f"the {count} pods {group} running", ready, timeout=90)
    for pod in pods:  # from now on kwok leaves them alone: deleted, they stay terminating until let go
        world.api.patch(
            paths.pod(world.namespace, pod["metadata"]["name"]), {"metadata": {"annotations": KWOK_LEAVE_ALONE}}
        )
    return pods


@given(
    parsers.re(
        r'(?P<count>\d+) pods "(?P<group>[^"]+)" of priority class "(?P<pc>[^"]+)" holding (?P<gpus>\d+) GPUs each'
        r'(?: on node "(?P<node>[^"]+)")? are running'
    )
)
def running_pods(world: World, count: str, group: str, pc: str, gpus: str, node: str | None) -> None:
    _claim(world, group, int(gpus), [node] if node else None)
    for i in range(int(count)):
        world.api.create(paths.pods(world.namespace), _pod(f"{group}-{i}", group, pc, group))
        # One after another, so that their start times, which order the victims, differ.
        wait_for(f"{group}-{i} bound", lambda i=i: get_pod(world, f"{group}-{i}")["spec"].get("nodeName"), timeout=60)
    _running(world, group, int(count))


@given(
    parsers.re(
        r'the gang "(?P<gang>[^"]+)" of (?P<count>\d+) pods of priority class "(?P<pc>[^"]+)" holding (?P<gpus>\d+) '
        r"GPUs each is running"
    )
)
def running_gang(world: World, gang: str, count: str, pc: str, gpus: str) -> None:
    _create_gang(world, gang, int(count), pc, int(gpus), zoned=False, held=True)
    _running(world, gang, int(count))


def _create_gang(world: World, gang: str, count: int, pc: str, gpus: int, zoned: bool, held: bool) -> None:
    """A gang of `count` members of `gpus` GPUs each (in one zone, Required, when `zoned`); `held`: its members may
    be preempted and carry HOLD."""
    _claim(world, gang, gpus, None, gang=gang)
    for i in range(count):
        body = gang_member_body(
            f"{gang}-{i}", gang, count, ZONE_LABEL if zoned else None, "Required" if zoned else None
        )
        body["spec"]["priorityClassName"] = pc
        body["metadata"]["labels"] = {GROUP_LABEL: gang}
        if held:
            body["metadata"]["finalizers"] = [HOLD]
        world.api.create(paths.pods(world.namespace), body)


@given(step('a PodDisruptionBudget allows no disruption of the pods "{group:q}"'))
def budget(world: World, group: str) -> None:
    body = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": group},
        # minAvailable as a count: the disruption controller needs no owner of the pods for it.
        "spec": {"minAvailable": len(_group(world, group)), "selector": {"matchLabels": {GROUP_LABEL: group}}},
    }
    world.api.create(paths.POD_DISRUPTION_BUDGET.collection(world.namespace), body)
    path = paths.POD_DISRUPTION_BUDGET.item(group, world.namespace)

    def observed() -> bool:
        pdb = world.api.get(path)
        status = pdb.get("status") or {}
        return status.get("observedGeneration") == pdb["metadata"]["generation"] and status.get("expectedPods", 0) > 0

    # The disruption controller has counted the pods: none may be disrupted.
    wait_for(f"the PodDisruptionBudget {group} observed", observed, timeout=60)
    assert world.api.get(path)["status"]["disruptionsAllowed"] == 0


@when(
    parsers.re(
        r'the pod "(?P<name>[^"]+)" of priority class "(?P<pc>[^"]+)" naming a new GpuClaim of (?P<gpus>\d+) GPUs'
        r'(?: on nodes? "(?P<nodes>[^"]+)")? is created'
    )
)
def create_preemptor(world: World, name: str, pc: str, gpus: str, nodes: str | None) -> None:
    listed = nodes.split(",") if nodes else None
    _claim(world, name, int(gpus), listed)
    body = _pod(name, name, pc, name, listed)
    body["metadata"]["finalizers"] = []
    world.api.create(paths.pods(world.namespace), body)


@when(
    parsers.re(
        r'the gang "(?P<gang>[^"]+)" of (?P<count>\d+) pods of priority class "(?P<pc>[^"]+)" holding (?P<gpus>\d+) '
        r"GPUs each in one zone is created"
    )
)
def create_zoned_gang(world: World, gang: str, count: str, pc: str, gpus: str) -> None:
    _create_gang(world, gang, int(count), pc, int(gpus), zoned=True, held=False)


@then(
    parsers.re(
        r'exactly (?P<count>\d+) of the pods "(?P<group>[^"]+)" (?:is|are) preempted, each with a DisruptionTarget '
        r"condition and a Preempted event"
    )
)
def exactly_preempted(world: World, count: str, group: str, preempted: dict[str, dict[str, Any]]) -> None:
    def terminating() -> list[dict[str, Any]] | None:
        pods = [p for p in _group(world, group) if p["metadata"].get("deletionTimestamp")]
        return pods if len(pods) >= int(count) else None

    found = wait_for(f"{count} pods of {group} preempted", terminating, timeout=60)
    time.sleep(1)  # no more than that, a second later: the preemptor asked for no more
    for pod in _group(world, group):
        if pod["metadata"].get("deletionTimestamp"):
            preempted[pod["metadata"]["name"]] = pod
    assert len(preempted) == int(count) == len(found), sorted(preempted)
    for name, pod in preempted.items():
        conditions = {c["type"]: c for c in pod["status"].get("conditions") or []}
        target = conditions.get(constants.CONDITION_DISRUPTION_TARGET)
        assert target is not None and target["status"] == "True", (name, conditions)
        assert target["reason"] == constants.REASON_PREEMPTION_BY_SCHEDULER, target
        events = wait_for(
            f"a Preempted event of {name}",
            lambda name=name: events_for(world, "Pod", name, constants.EVENT_PREEMPTED),
            timeout=30,
        )
        assert events[0]["source"]["component"] == constants.DEFAULT_SCHEDULER_NAME, events[0]


@then(
    step(
        'while the preempted pods terminate, the pod "{name:q}" is nominated to {node} '
        "and stays unbound for {s:d} seconds"
    )
)
def nominated_and_waiting(world: World, name: str, node: str, s: int, preempted: dict[str, dict[str, Any]]) -> None:
    wait_for(
        f"{name} nominated to {node}",
        lambda: (get_pod(world, name).get("status") or {}).get("nominatedNodeName") == node,
        timeout=30,
    )
    deadline = time.monotonic() + s
    while time.monotonic() < deadline:
        assert not get_pod(world, name)["spec"].get("nodeName"), f"{name} bound while its victims still terminate"
        assert all(_exists(world, n) for n in preempted), "a victim went before the scenario let it go"
        time.sleep(0.5)


def _exists(world: World, name: str) -> bool:
    try:
        get_pod(world, name)
    except NotFound:
        return False
    return True


@when("the preempted pods are gone")
def victims_gone(world: World, preempted: dict[str, dict[str, Any]]) -> None:
    """The test does what the kubelet would once their containers stopped: the pods go."""
    _release(world, [get_pod(world, n) for n in preempted if _exists(world, n)])
    for name in preempted:
        world.api.delete(paths.pod(world.namespace, name), gracePeriodSeconds="0")
    wait_for("the preempted pods gone", lambda: not any(_exists(world, n) for n in preempted), timeout=60)


def _gpus(pod: dict[str, Any]) -> set[tuple[str, int]]:
    hold = objects.hold_from_pod(pod)
    assert hold is not None, f"{pod['metadata']['name']} holds no GPU"
    return {(hold.node, g) for g in hold.gpu_ids}


def _bound(world: World, name: str) -> dict[str, Any]:
    return wait_for(f"{name} bound", lambda: (p := get_pod(world, name))["spec"].get("nodeName") and p, timeout=60)


@then(step('the pod "{name:q}" is bound to {node} on the GPUs the preempted pods held'))
def bound_on_freed(world: World, name: str, node: str, preempted: dict[str, dict[str, Any]]) -> None:
    pod = _bound(world, name)
    assert pod["spec"]["nodeName"] == node, pod["spec"]["nodeName"]
    freed = set().union(*(_gpus(p) for p in preempted.values()))
    assert _gpus(pod) <= freed, (sorted(_gpus(pod)), sorted(freed))


@then(step('the pod "{name:q}" is bound on GPUs the preempted pods held'))
def bound_on_some_freed(world: World, name: str, preempted: dict[str, dict[str, Any]]) -> None:
    pod = _bound(world, name)
    freed = set().union(*(_gpus(p) for p in preempted.values()))
    assert _gpus(pod) <= freed, (sorted(_gpus(pod)), sorted(freed))


@then(step('the other pods "{group:q}" still run'))
def others_run(world: World, group: str, preempted: dict[str, dict[str, Any]]) -> None:
    for pod in _group(world, group):
        if pod["metadata"]["name"] in preempted:
            continue
        assert not pod["metadata"].get("deletionTimestamp"), f"{pod['metadata']['name']} was deleted too"
        assert pod["spec"].get("nodeName") and pod["status"].get("phase") == "Running", pod["metadata"]["name"]


@then(step('the preempted pods were all in one zone, and every pod of the gang "{gang:q}" is bound in that zone'))
def gang_in_victims_zone(world: World, gang: str, preempted: dict[str, dict[str, Any]]) -> None:
    zones = {ZONES[p["spec"]["nodeName"]] for p in preempted.values()}
    assert len(zones) == 1, zones
    pods = wait_for(
        f"every pod of {gang} bound",
        lambda: (ps := _group(world, gang)) and all(p["spec"].get("nodeName") for p in ps) and ps,
        timeout=60,
    )
    assert {ZONES[p["spec"]["nodeName"]] for p in pods} == zones, [p["spec"]["nodeName"] for p in pods]
