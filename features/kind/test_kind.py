"""The deployed take-home on the KinD test-bed (kind.feature, KinD tier only): each check pod's log, a claim pod
given GPUs by the agent's inventory, and the leader election of the deployed scheduler: its Deployment runs two
replicas, one holds the leader Lease; deleting the leader's pod while a StatefulSet is being placed hands the work
to the other replica without losing or doubling a bind.

The replicas, their pods and the Lease are the test-bed's (roles/deploy); on the control-plane tier, where the
scheduler is a process of the test session, the leader steps skip. The shared steps (the round-robin StatefulSet,
"all N pods run on their mapped nodes", the Scheduled events, the claim steps) are features/conftest.py's.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest
from pytest_bdd import given, parsers, scenarios, then, when

from features.support import (
    SCHEDULER_DEPLOYMENT,
    SYSTEM_NAMESPACE,
    StatefulSet,
    World,
    live_pods,
    logs_show,
    pod_ready,
    running_on,
    scale,
    step,
)
from gpu_scheduling import constants
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.sync import SyncClient
from harness.wait import wait_for

scenarios("kind.feature")

# The leader Lease is named after the scheduler and lives in the project's namespace.
_LEADER_LEASE = paths.lease(constants.LEASE_NAMESPACE, constants.DEFAULT_SCHEDULER_NAME)
# A follower takes over within lease duration + jittered retry periods (15 s + 2 x 4.4 s with the defaults);
# a clean stop releases the Lease, so it is usually much sooner. Room for a loaded 2-core machine.
_HANDOVER_TIMEOUT = 60


# ---- the deployed StatefulSet's logs ---------------------------------------------------------------------------


@then(step('pod {index:d} logs its node {node} and CUDA_VISIBLE_DEVICES "{devices:q}" at least twice'))
def pod_logs(world: World, statefulset: StatefulSet, index: int, node: str, devices: str) -> None:
    _logs(world, statefulset.namespace, statefulset.pod(index), node, devices)


@then(step('the pod "{name:q}" logs its node {node} and CUDA_VISIBLE_DEVICES "{devices:q}" at least twice'))
def named_pod_logs(world: World, name: str, node: str, devices: str) -> None:
    _logs(world, world.namespace, name, node, devices)


def _logs(world: World, namespace: str, name: str, node: str, devices: str) -> None:
    wait_for(f"pod {name} Running on {node}", lambda: running_on(world, name, node, namespace), timeout=180)
    logs_show(world, namespace, name, node, devices)


# ---- the leader election -------------------------------------------------------------------------------------


@dataclasses.dataclass
class LeaderHandover:
    """What the leader scenario saw: the replicas at the start and the leader it deleted."""

    replicas: list[str] = dataclasses.field(default_factory=list)
    leader_pod: str = ""
    leader_identity: str = ""
    transitions: int = 0
    deleted_at: float = 0.0
    bound_at_deletion: int = 0


@pytest.fixture
def leader_handover() -> LeaderHandover:
    return LeaderHandover()


def _scheduler_pods(world: World) -> list[dict[str, Any]]:
    return live_pods(world, SYSTEM_NAMESPACE, SCHEDULER_DEPLOYMENT)


def _lease(api: SyncClient) -> dict[str, Any]:
    return api.get(_LEADER_LEASE)["spec"]


def _pod_of(identity: str) -> str:
    """The pod a holder identity names: gpu-scheduler's identity is `<hostname>_<uuid>`, and a pod's hostname is
    its name."""
    return identity.rpartition("_")[0]


def _leader_among(api: SyncClient, pods: list[str]) -> tuple[str, dict[str, Any]] | None:
    spec = _lease(api)
    holder = spec.get("holderIdentity") or ""
    return (holder, spec) if holder and _pod_of(holder) in pods else None


def _two_ready_replicas(world: World) -> list[str] | None:
    deployment = world.api.get(paths.deployment(SYSTEM_NAMESPACE, SCHEDULER_DEPLOYMENT))
    status = deployment.get("status") or {}
    pods = _scheduler_pods(world)
    if (
        deployment["spec"].get("replicas") == 2
        and status.get("readyReplicas") == 2
        and status.get("updatedReplicas") == 2
        and len(pods) == 2
        and all(pod_ready(p) for p in pods)
    ):
        return sorted(p["metadata"]["name"] for p in pods)
    return None


@given("two scheduler replicas are running")
def leader_two_replicas(world: World, leader_handover: LeaderHandover) -> None:
    if world.cluster.cp is not None:
        pytest.skip("needs the scheduler Deployment of the KinD test-bed")
    api = world.api
    leader_handover.replicas = wait_for(
        "the scheduler Deployment with 2 ready replicas", lambda: _two_ready_replicas(world), timeout=120, interval=1
    )
    # One of them leads (after a rollout the Lease may still name a replaced pod until it expires).
    wait_for(
        f"one of {leader_handover.replicas} holding the leader Lease",
        lambda: _leader_among(api, leader_handover.replicas),
        timeout=_HANDOVER_TIMEOUT,
        interval=0.5,
    )


@when(parsers.parse("the leader's scheduler pod is deleted after at least {count:d} of its pods are bound"))
def leader_pod_deleted(world: World, leader_handover: LeaderHandover, count: int) -> None:
    api = world.api
    leader_handover.bound_at_deletion = wait_for(
        f"{count} bound pods",
        lambda: (n := sum(1 for p in api.pods(world.namespace) if p["spec"].get("nodeName"))) >= count and n,
        timeout=120,
        interval=0.05,
    )
    leader = _leader_among(api, leader_handover.replicas)
    assert leader is not None, f"none of {leader_handover.replicas} holds the leader Lease: {_lease(api)}"
    identity, spec = leader
    leader_handover.leader_identity, leader_handover.leader_pod = identity, _pod_of(identity)
    leader_handover.transitions = spec.get("leaseTransitions") or 0
    leader_handover.deleted_at = time.monotonic()
    # An ordinary delete: the kubelet sends SIGTERM, the leader stops scheduling and hands the Lease back.
    api.delete(paths.pod(SYSTEM_NAMESPACE, leader_handover.leader_pod), missing_ok=False)


@when(step("the StatefulSet is scaled to {replicas:d} replicas once the deleted leader is gone"))
def scale_after_leader(world: World, statefulset: StatefulSet, leader_handover: LeaderHandover, replicas: int) -> None:
    """Pods that exist only once the deleted leader's pod is gone: no one but another replica can bind them, so the
    handover is shown even when the leader bound every first pod before its deletion took effect."""
    assert leader_handover.leader_pod, "no leader was deleted"

    def gone() -> bool:
        return all(p["metadata"]["name"] != leader_handover.leader_pod for p in world.api.pods(SYSTEM_NAMESPACE))

    wait_for(f"{leader_handover.leader_pod} gone", gone, timeout=120, interval=0.5)
    print(f"{leader_handover.bound_at_deletion} pods were bound when the leader was deleted")
    scale(world, statefulset, replicas)


@then("another replica holds the leader Lease")
def leader_moved(world: World, leader_handover: LeaderHandover) -> None:
    # Usually the follower that was waiting; the Deployment's replacement for the deleted pod may win the race.
    def new_leader() -> tuple[str, dict[str, Any]] | None:
        others = [p["metadata"]["name"] for p in _scheduler_pods(world)]
        return _leader_among(world.api, [p for p in others if p != leader_handover.leader_pod])

    holder, spec = wait_for(
        f"a replica other than {leader_handover.leader_pod} holding the leader Lease",
        new_leader,
        timeout=_HANDOVER_TIMEOUT,
        interval=0.25,
    )
    assert holder != leader_handover.leader_identity
    assert (spec.get("leaseTransitions") or 0) > leader_handover.transitions, spec
    print(
        f"leader {leader_handover.leader_pod} deleted; {_pod_of(holder)} leads "
        f"{time.monotonic() - leader_handover.deleted_at:.1f}s later"
    )


@then("the scheduler Deployment has 2 ready replicas again")
def leader_replicas_back(world: World, leader_handover: LeaderHandover) -> None:
    replicas = wait_for(
        "the scheduler Deployment back to 2 ready replicas", lambda: _two_ready_replicas(world), timeout=120, interval=1
    )
    assert leader_handover.leader_pod not in replicas
