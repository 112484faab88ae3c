"""Steps of the leader-election scenario on the KinD test-bed (features/kind.feature): the deployed gpu-scheduler
Deployment runs two replicas, one holds the leader Lease; deleting the leader's pod while a StatefulSet is being
placed hands the work to the other replica without losing or doubling a bind.

KinD tier only: the replicas, their pods and the Lease are the test-bed's (roles/deploy); on the control-plane
tier, where the scheduler is a process of the test session, these steps skip.

Imported into features/conftest.py (`from features.steps_leader import *`), so it must not import that module;
it uses the shared steps (the round-robin StatefulSet, "all N pods run on their mapped nodes", the Scheduled
events) through the Gherkin text. Names that the star import should not carry start with an underscore.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

import pytest
from pytest_bdd import given, parsers, then, when

from gpu_scheduling import constants
from tests.harness.api import Api, wait_for

if TYPE_CHECKING:
    from features.conftest import World

# Where roles/deploy puts the scheduler (its defaults deploy_system_namespace and deploy_scheduler_name); the
# leader Lease is named after the scheduler and lives in the project's namespace.
_SCHEDULER_NAMESPACE = "kube-system"
_DEPLOYMENT = constants.DEFAULT_SCHEDULER_NAME
_LEADER_LEASE = (f"/apis/coordination.k8s.io/v1/namespaces/{constants.LEASE_NAMESPACE}/leases/"
                 f"{constants.DEFAULT_SCHEDULER_NAME}")
# A follower takes over within lease duration + jittered retry periods (15 s + 2 x 4.4 s with the defaults);
# a clean stop releases the Lease, so it is usually much sooner. Room for a loaded 2-core machine.
_HANDOVER_TIMEOUT = 60


@dataclasses.dataclass
class LeaderHandover:
    """What the leader scenario saw: the replicas at the start and the leader it deleted."""

    replicas: list[str] = dataclasses.field(default_factory=list)
    leader_pod: str = ""
    leader_identity: str = ""
    transitions: int = 0
    deleted_at: float = 0.0


@pytest.fixture
def leader_handover() -> LeaderHandover:
    return LeaderHandover()


def _scheduler_pods(api: Api) -> list[dict[str, Any]]:
    return [p for p in api.pods(_SCHEDULER_NAMESPACE, labelSelector=f"app={_DEPLOYMENT}")
            if not p["metadata"].get("deletionTimestamp")]


def _ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def _lease(api: Api) -> dict[str, Any]:
    return api.get(_LEADER_LEASE)["spec"]


def _pod_of(identity: str) -> str:
    """The pod a holder identity names: gpu-scheduler's identity is `<hostname>_<uuid>`, and a pod's hostname is
    its name."""
    return identity.rpartition("_")[0]


def _leader_among(api: Api, pods: list[str]) -> tuple[str, dict[str, Any]] | None:
    spec = _lease(api)
    holder = spec.get("holderIdentity") or ""
    return (holder, spec) if holder and _pod_of(holder) in pods else None


def _two_ready_replicas(api: Api) -> list[str] | None:
    deployment = api.get(f"/apis/apps/v1/namespaces/{_SCHEDULER_NAMESPACE}/deployments/{_DEPLOYMENT}")
    status = deployment.get("status") or {}
    pods = _scheduler_pods(api)
    if (deployment["spec"].get("replicas") == 2 and status.get("readyReplicas") == 2
            and status.get("updatedReplicas") == 2 and len(pods) == 2 and all(_ready(p) for p in pods)):
        return sorted(p["metadata"]["name"] for p in pods)
    return None


@given("two scheduler replicas are running")
def leader_two_replicas(world: World, leader_handover: LeaderHandover) -> None:
    if world.cluster.cp is not None:
        pytest.skip("needs the scheduler Deployment of the KinD test-bed")
    api = world.api
    leader_handover.replicas = wait_for("the scheduler Deployment with 2 ready replicas",
                                        lambda: _two_ready_replicas(api), timeout=120, interval=1)
    # One of them leads (after a rollout the Lease may still name a replaced pod until it expires).
    wait_for(f"one of {leader_handover.replicas} holding the leader Lease",
             lambda: _leader_among(api, leader_handover.replicas), timeout=_HANDOVER_TIMEOUT, interval=0.5)


@when(parsers.parse("the leader's scheduler pod is deleted after at least {count:d} of its pods are bound"))
def leader_pod_deleted(world: World, leader_handover: LeaderHandover, count: int) -> None:
    api = world.api
    wait_for(f"{count} bound pods",
             lambda: sum(1 for p in api.pods(world.namespace) if p["spec"].get("nodeName")) >= count,
             timeout=120, interval=0.05)
    leader = _leader_among(api, leader_handover.replicas)
    assert leader is not None, f"none of {leader_handover.replicas} holds the leader Lease: {_lease(api)}"
    identity, spec = leader
    leader_handover.leader_identity, leader_handover.leader_pod = identity, _pod_of(identity)
    leader_handover.transitions = spec.get("leaseTransitions") or 0
    leader_handover.deleted_at = time.monotonic()
    # An ordinary delete: the kubelet sends SIGTERM, the leader stops scheduling and hands the Lease back.
    api.delete(f"/api/v1/namespaces/{_SCHEDULER_NAMESPACE}/pods/{leader_handover.leader_pod}", missing_ok=False)


@then("another replica holds the leader Lease")
def leader_moved(world: World, leader_handover: LeaderHandover) -> None:
    # Usually the follower that was waiting; the Deployment's replacement for the deleted pod may win the race.
    def new_leader() -> tuple[str, dict[str, Any]] | None:
        others = [p["metadata"]["name"] for p in _scheduler_pods(world.api)]
        return _leader_among(world.api, [p for p in others if p != leader_handover.leader_pod])

    holder, spec = wait_for(f"a replica other than {leader_handover.leader_pod} holding the leader Lease",
                            new_leader, timeout=_HANDOVER_TIMEOUT, interval=0.25)
    assert holder != leader_handover.leader_identity
    assert (spec.get("leaseTransitions") or 0) > leader_handover.transitions, spec
    print(f"leader {leader_handover.leader_pod} deleted; {_pod_of(holder)} leads "
          f"{time.monotonic() - leader_handover.deleted_at:.1f}s later")


@then("the scheduler Deployment has 2 ready replicas again")
def leader_replicas_back(world: World, leader_handover: LeaderHandover) -> None:
    replicas = wait_for("the scheduler Deployment back to 2 ready replicas",
                        lambda: _two_ready_replicas(world.api), timeout=120, interval=1)
    assert leader_handover.leader_pod not in replicas
