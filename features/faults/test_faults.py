"""Steps of features/faults.feature: API faults injected by the harness's fault proxy, schedulers SIGKILLed in the
middle of a rollout, and two schedulers competing for the leader Lease.

Control-plane tier only: the proxy, the extra nodes, the processes and the audit log belong to the test session.
Everything a scenario changes is undone by the `faults` fixture (proxy rules reset, extra schedulers stopped,
the scheduler running again, the added nodes, their inventories and their Leases removed), so the scenarios that
run after it see the session as it was. The shared steps (claims Bound, pods deleted, "every pod was bound exactly
once") are features/conftest.py's. Measured numbers (kills, handover) are printed and appended to
`<control plane logs>/faults.log`.
"""

from __future__ import annotations

import dataclasses
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from pytest_bdd import given, scenarios, then, when

from features.conftest import Watched
from features.support import CHECK_IMAGE, World, leases_of, on_node, path_pattern, step
from gpu_scheduling import constants
from gpu_scheduling.agent.inventory import simulated_status
from gpu_scheduling.claims import objects
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import ApiError
from gpu_scheduling.kube.sync import SyncClient
from harness.components import LEADER_ELECTION, Components, SchedulerProcess
from harness.controlplane import ControlPlane, node_body
from harness.faultproxy import FaultProxy, Rule
from harness.inventory import publish
from harness.wait import wait_for

scenarios("faults.feature")

GPU_LEASE_PATH = re.compile(rf"^{re.escape(paths.GPU_LEASES)}/gpu-")
BINDING_PATH = path_pattern(paths.pod_binding)
BINDS_BEFORE_KILL = 5  # successful bindings a scheduler makes before the rollout's next kill
POOL_LABEL = "faults.test/pool"  # the label the rollout's claims select; only the pool's nodes carry it
# How late a follower may take over after the leader's last renewal, beyond lease duration + retry period: it
# sees that renewal up to one jittered retry period (retry x 2.2) late and asks again up to one jittered retry
# period after the lease ran out; plus a second for a loaded 2-core machine.
HANDOVER_SLACK = 2 * 2.2 * LEADER_ELECTION.retry_period + 1.0
# From holding the lease to the first bind: caches are warm on a follower, one decision and one POST.
FIRST_BIND_SLACK = 2.0


@dataclasses.dataclass
class Kill:
    at: float
    bound: int
    created: int
    identity: str
    successor: str = ""  # the identity of the scheduler started after the kill
    held: str = ""  # the pod whose binding the proxy held when the kill came


@dataclasses.dataclass
class Faults:
    """What the fault scenario did, for its later steps and for the cleanup."""

    world: World
    cp: ControlPlane
    components: Components
    proxy: FaultProxy
    rule: Rule | None = None
    pool: list[str] = dataclasses.field(default_factory=list)
    rollout: list[str] = dataclasses.field(default_factory=list)  # pod names, in creation order
    created: int = 0  # how many of them the creating thread has created so far
    creator: threading.Thread | None = None
    creation_errors: list[BaseException] = dataclasses.field(default_factory=list)
    kills: list[Kill] = dataclasses.field(default_factory=list)
    deleted: dict[str, str] = dataclasses.field(default_factory=dict)  # pod name -> uid
    batches: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    old_leader: SchedulerProcess | None = None
    new_leader: SchedulerProcess | None = None
    killed_at: float = 0.0
    handover_at: float = 0.0

    @property
    def api(self) -> SyncClient:
        return self.world.api

    @property
    def namespace(self) -> str:
        return self.world.namespace

    def report(self, line: str) -> None:
        print(f"\n[faults] {line}")
        with (self.cp.logs / "faults.log").open("a") as out:
            out.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {self.namespace} {line}\n")


@pytest.fixture
def faults(world: World, watched: Watched) -> Iterator[Faults]:
    cluster = world.cluster
    if cluster.cp is None or cluster.components is None or cluster.components.proxy is None:
        pytest.skip("fault scenarios need the test control plane with the fault proxy")
    f = Faults(world, cluster.cp, cluster.components, cluster.components.proxy)
    f.proxy.reset()
    yield f
    watched.settle()  # before the clean-up starts again a scheduler that exited by itself
    _clean_up(f)


def _clean_up(f: Faults) -> None:
    """Undo the scenario before `world` drops its namespace: nothing may be left for the next one."""
    if f.creator is not None:
        f.creator.join(120)
    f.proxy.reset()
    f.components.stop_extra_schedulers()
    if not f.components.scheduler.running:
        f.components.start_scheduler()
    if not f.pool:
        return
    # The pods first, while their nodes exist, so that the scheduler releases their Leases as it would in life.
    f.api.delete(paths.pods(f.namespace), gracePeriodSeconds="0")
    pool = set(f.pool)
    try:
        wait_for("the Leases of the pool's GPUs released", lambda: not _pool_leases(f.api, pool), timeout=90)
    except AssertionError as exc:  # left over: a failure the scenario reported already; do not leak it further
        f.report(f"cleanup: {exc}; deleting them")
        for node in f.pool:
            f.api.delete(paths.GPU_LEASES, labelSelector=objects.node_lease_selector(node))
    for node in f.pool:
        f.api.delete(paths.gpu_node_status(node))
        f.api.delete(paths.node(node))


# ---- objects ---------------------------------------------------------------------------------------------------


def _pod(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    """A pod of one container (lighter than features.support.pod_body: the rollout creates 120)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "schedulerName": constants.DEFAULT_SCHEDULER_NAME,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "check", "image": CHECK_IMAGE}],
        },
    }


def _create_claim_pod(api: SyncClient, namespace: str, name: str, count: int, selector: dict[str, Any]) -> None:
    """The GpuClaim `name` (`count` Exclusive GPUs on a node `selector` matches) and the pod `name` naming it."""
    api.create(
        paths.gpu_claims(namespace),
        objects.claim_body(
            name,
            {"devices": {"count": count, "exclusivity": "Exclusive", "policy": "contiguous"}, "selector": selector},
        ),
    )
    api.create(paths.pods(namespace), _pod(name, {constants.CLAIM_ANNOTATION: name}))


# ---- reading state ---------------------------------------------------------------------------------------------


def _pods(f: Faults, names: list[str] | None = None) -> dict[str, dict[str, Any]]:
    pods = {p["metadata"]["name"]: p for p in f.api.pods(f.namespace)}
    return pods if names is None else {n: pods[n] for n in names if n in pods}


def _bound(f: Faults, names: list[str] | None = None) -> int:
    return sum(1 for p in _pods(f, names).values() if p["spec"].get("nodeName"))


def _allocated(pod: dict[str, Any]) -> tuple[str, list[int]]:
    value = (pod["metadata"].get("annotations") or {}).get(constants.ALLOCATED_ANNOTATION, "")
    node, _, ids = value.partition(":")
    return node, [int(i) for i in ids.split(",") if i]


def _pool_leases(api: SyncClient, pool: set[str]) -> dict[str, list[str]]:
    """GPU Lease name -> holder pod uids, for the Leases of the pool's nodes."""
    leases = api.get(paths.GPU_LEASES)["items"]
    return {
        lease["metadata"]["name"]: objects.lease_holders(lease)
        for lease in leases
        if (lease["metadata"].get("labels") or {}).get(constants.LEASE_NODE_LABEL) in pool
    }


def _bindings(f: Faults, names: list[str] | None = None) -> list[dict[str, Any]]:
    wanted = None if names is None else set(names)
    return [b for b in f.cp.bindings() if b["namespace"] == f.namespace and (wanted is None or b["name"] in wanted)]


def _recorded_bindings(f: Faults, names: list[str]) -> list[dict[str, Any]]:
    """The bindings of `names` once the audit log holds one for each: the apiserver writes a request's audit event
    after its response, so a pod can read as bound a moment before its binding is in the log."""

    def all_recorded() -> list[dict[str, Any]] | None:
        found = _bindings(f, names)
        return found if {b["name"] for b in found} >= set(names) else None

    return wait_for(f"the audit log records a binding of each of {len(names)} pods", all_recorded, timeout=15)


def _user_agent(f: Faults, proc: SchedulerProcess) -> str:
    return f"{f.components.scheduler_name}/{proc.identity}"


def _sent_by(user_agent: str, agent: str) -> bool:
    """Whether a request with `user_agent` came from the scheduler whose user agent is `agent`: that one, or one
    of its side clients (`<agent>/<purpose>`, such as the leader election's own)."""
    return user_agent == agent or user_agent.startswith(f"{agent}/")


# ---- a. a failed Lease delete --------------------------------------------------------------------------------


@when(step("the next {count:d} deletes of GPU Leases are answered {status:d} by the API"))
def fail_lease_deletes(faults: Faults, count: int, status: int) -> None:
    faults.rule = faults.proxy.fail(method="DELETE", path=GPU_LEASE_PATH, status=status, times=count)


@when(step("the next {count:d} bindings are answered {status:d} by the API"))
def fail_bindings(faults: Faults, count: int, status: int) -> None:
    faults.rule = faults.proxy.fail(method="POST", path=path_pattern(paths.pod_binding), status=status, times=count)


@then(step("exactly {count:d} bindings were answered {status:d}"))
def bindings_failed(faults: Faults, count: int, status: int) -> None:
    assert faults.rule is not None
    assert faults.proxy.injected(faults.rule) == count


@then(
    step("exactly {count:d} deletes of GPU Leases were answered {status:d}, and each of those Leases was deleted later")
)
def lease_deletes_failed_then_retried(faults: Faults, count: int, status: int) -> None:
    assert faults.rule is not None
    assert faults.proxy.injected(faults.rule) == count
    failed = [e for e in faults.proxy.exchanges("DELETE", GPU_LEASE_PATH) if e.injected]
    assert [e.status for e in failed] == [status] * count, failed
    # The apiserver's record: every Lease whose delete was refused got a successful delete afterwards.
    deletes = [w for w in faults.cp.lease_writes() if w["verb"] == "delete" and w["code"] == 200]
    for exchange in failed:
        name = exchange.path.rsplit("/", 1)[1]
        later = [w for w in deletes if w["name"] == name and w["received"] >= exchange.at]
        assert later, f"the delete of Lease {name} refused at {exchange.at:.3f} was never retried successfully"
    faults.report(
        f"lease deletes refused: {[e.path.rsplit('/', 1)[1] for e in failed]}; "
        f"deletes of GPU Leases that reached the apiserver: {faults.proxy.passed('DELETE', GPU_LEASE_PATH)}"
    )


# ---- b. a rollout with the scheduler SIGKILLed ----------------------------------------------------------------


@given(step('{count:d} extra kwok nodes "{prefix:q}NN" labelled "{label:q}", each with 8 simulated GPUs'))
def pool_nodes(faults: Faults, count: int, prefix: str, label: str) -> None:
    key, _, value = label.partition("=")
    assert key == POOL_LABEL, f"the pool's label is {POOL_LABEL}"
    names = [f"{prefix}{i:02d}" for i in range(count)]
    faults.pool = names  # cleaned up even if the rest of this step fails
    for name in names:  # all created first, then waited for together (one left by an interrupted run is taken)
        faults.api.create(paths.NODES, node_body(name, 8, {key: value}), exist_ok=True)
    for name in names:
        faults.cp.add_node(name, 8, {key: value})  # exists already: waits until Ready and untainted
    publish(faults.world.cluster.kubeconfig, {name: simulated_status() for name in names})


@when(
    step(
        '{count:d} pods each naming its own GpuClaim of "{sizes:q}" Exclusive GPUs on the "{label:q}" nodes '
        "start being created, {rate:d} a second"
    )
)
def start_rollout(faults: Faults, count: int, sizes: str, label: str, rate: int) -> None:
    # Paced below what the scheduler binds, so that new pods keep arriving through every kill and restart: a
    # kill then always lands while pods wait to be bound, never after a backlog was cleared at once.
    key, _, value = label.partition("=")
    cycle = [int(s) for s in sizes.split(",")]
    wanted = sum(cycle[i % len(cycle)] for i in range(count))
    assert wanted <= 8 * len(faults.pool), f"{wanted} GPUs asked for, the pool has {8 * len(faults.pool)}"
    faults.rollout = [f"r-{i:03d}" for i in range(count)]
    api = SyncClient(str(faults.cp.kubeconfig))  # a client of its own: it runs in another thread
    namespace = faults.namespace

    def create() -> None:
        started = time.monotonic()
        try:
            for i, name in enumerate(faults.rollout):
                time.sleep(max(0.0, started + i / rate - time.monotonic()))
                _create_claim_pod(api, namespace, name, cycle[i % len(cycle)], {"matchLabels": {key: value}})
                faults.created = i + 1
        except (ApiError, OSError) as exc:  # refused, or the connection failed: reported by the step that waits
            faults.creation_errors.append(exc)

    faults.creator = threading.Thread(target=create, name="rollout", daemon=True)
    faults.creator.start()
    faults.report(
        f"rollout: {count} claim pods asking for {wanted} GPUs of {8 * len(faults.pool)}, {rate} created a second"
    )


@when(
    step(
        'the scheduler is SIGKILLed in the middle of a bind once "{points:q}" pods are created, and restarted each time'
    )
)
def kill_during_rollout(faults: Faults, points: str) -> None:
    comps = faults.components
    for point in (int(p) for p in points.split(",")):
        # Counted from the creating thread, not from the binds: a restarted scheduler binds its backlog at once,
        # and the rollout must still be under way at every kill.
        wait_for(
            f"{point} pods of the rollout created",
            lambda n=point: faults.created >= n or faults.creation_errors,
            timeout=120,
            interval=0.05,
        )
        assert not faults.creation_errors, faults.creation_errors
        # Spread out: the scheduler of the moment has bound a few pods of its own since it took over.
        agent = _user_agent(faults, comps.scheduler)
        wait_for(
            f"{BINDS_BEFORE_KILL} bindings by {agent}",
            lambda a=agent: (
                sum(
                    1
                    for e in faults.proxy.exchanges("POST", BINDING_PATH)
                    if _sent_by(e.user_agent, a) and e.status == 201
                )
                >= BINDS_BEFORE_KILL
            ),
            timeout=120,
            interval=0.1,
        )
        # The next binding is held at the proxy, so the kill lands in the middle of a claim pod's placement: its
        # GPUs are leased, its binding has not reached the apiserver (other binds may be in flight besides). A
        # scheduler just restarted binds nothing until the dead one's leader Lease has run out.
        held = faults.proxy.delay(method="POST", path=BINDING_PATH, seconds=60, times=1)
        wait_for(
            "a binding held at the proxy", lambda rule=held: faults.proxy.injected(rule), timeout=60, interval=0.05
        )
        victim = comps.scheduler
        kill = Kill(time.time(), 0, 0, victim.identity, held=held.paths[0].split("/")[-2])
        victim.kill()
        faults.proxy.remove(held)  # its request dies with the client's connection; the apiserver never sees it
        pods = _pods(faults, faults.rollout)
        kill.bound, kill.created = sum(1 for p in pods.values() if p["spec"].get("nodeName")), len(pods)
        faults.kills.append(kill)
        assert not pods[kill.held]["spec"].get("nodeName"), f"{kill.held} was bound although its binding was held"
        comps.start_scheduler()
        kill.successor = comps.scheduler.identity


@then(step("all {count:d} pods of the rollout are bound"))
def rollout_bound(faults: Faults, count: int) -> None:
    assert faults.creator is not None
    faults.creator.join(180)
    assert not faults.creation_errors, faults.creation_errors
    assert len(faults.rollout) == count
    wait_for(f"{count} pods bound", lambda: _bound(faults, faults.rollout) == count, timeout=240, interval=0.5)
    binds = [b for b in _bindings(faults, faults.rollout) if 200 <= b["code"] < 300]
    for i, kill in enumerate(faults.kills, 1):
        agent = f"{faults.components.scheduler_name}/{kill.successor}"
        after = [b["received"] for b in binds if b["userAgent"] == agent]
        resumed = f"{min(after) - kill.at:.1f}s later" if after else "never"
        faults.report(
            f"kill {i}: SIGKILL of {kill.identity} holding the binding of {kill.held}, with {kill.bound} "
            f"of {kill.created} created pods bound (of {count}); first bind by its successor "
            f"{kill.successor} {resumed}"
        )


@then("no GPU is in two pods' allocation annotations, and each pod's annotation names its node")
def no_gpu_twice(faults: Faults) -> None:
    owners: dict[tuple[str, int], list[str]] = {}
    claims = {c["metadata"]["name"]: c for c in faults.api.get(paths.gpu_claims(faults.namespace))["items"]}
    for name, pod in _pods(faults, faults.rollout).items():
        node, ids = _allocated(pod)
        assert node == pod["spec"]["nodeName"], f"{name}: allocated {node}:{ids}, bound to {pod['spec']['nodeName']}"
        assert len(ids) == claims[name]["spec"]["devices"]["count"], f"{name}: {ids} for {claims[name]['spec']}"
        for gpu in ids:
            owners.setdefault((node, gpu), []).append(name)
    shared = {k: v for k, v in owners.items() if len(v) > 1}
    assert not shared, f"GPUs in more than one pod's annotation: {shared}"


@then("the pool's GPU Leases are exactly the allocated GPUs, each held by the pod whose annotation names it")
def leases_match_annotations(faults: Faults) -> None:
    expected: dict[str, list[str]] = {}
    for pod in _pods(faults, faults.rollout).values():
        node, ids = _allocated(pod)
        for gpu in ids:
            expected[objects.lease_name(node, gpu)] = [pod["metadata"]["uid"]]
    pool = set(faults.pool)
    # A Lease left by an allocation that a kill cut short is the scheduler's to sweep: give it its sweep period.
    try:
        wait_for(
            "the pool's Leases to match the allocation annotations",
            lambda: _pool_leases(faults.api, pool) == expected,
            timeout=90,
            interval=1,
        )
    except AssertionError:
        actual = _pool_leases(faults.api, pool)
        extra = {k: v for k, v in actual.items() if k not in expected}
        missing = sorted(set(expected) - set(actual))
        wrong = {k: (v, expected[k]) for k, v in actual.items() if k in expected and v != expected[k]}
        raise AssertionError(
            f"extra Leases {extra}; missing Leases {missing}; held by the wrong pod (held, expected) {wrong}"
        ) from None


# ---- c. pods deleted while every scheduler is down -----------------------------------------------------------


@given(step('a second scheduler "{identity:q}" is running'))
def second_scheduler(faults: Faults, identity: str) -> None:
    faults.components.start_extra_scheduler(identity)


@given(step('the pods "{names:q}" each naming its own GpuClaim of "{sizes:q}" GPUs on {node} are bound'))
def claim_pods_bound(faults: Faults, names: str, sizes: str, node: str) -> None:
    pods, counts = names.split(","), [int(s) for s in sizes.split(",")]
    assert len(pods) == len(counts)
    for name, count in zip(pods, counts, strict=True):
        _create_claim_pod(faults.api, faults.namespace, name, count, on_node(node))
    wait_for(f"{names} bound", lambda: _bound(faults, pods) == len(pods), timeout=90)


@when("every scheduler is SIGKILLed")
def kill_every_scheduler(faults: Faults) -> None:
    for proc in faults.components.schedulers:
        proc.kill()
    assert not any(p.running for p in faults.components.schedulers)


@when(step('the pods "{names:q}" are deleted'))
def delete_pods(faults: Faults, names: str) -> None:
    for name in names.split(","):
        pod = faults.api.get(paths.pod(faults.namespace, name))
        faults.deleted[name] = pod["metadata"]["uid"]
        assert leases_of(faults.api, faults.deleted[name]), f"{name} held no Lease before its deletion"
        faults.api.delete(paths.pod(faults.namespace, name), gracePeriodSeconds="0")


@then("no GPU Lease is held by any of the deleted pods")
def deleted_pods_hold_nothing(faults: Faults) -> None:
    assert faults.deleted
    # The restarted scheduler first waits for the dead leader's lease to run out.
    wait_for(
        "the Leases of the deleted pods released",
        lambda: not any(leases_of(faults.api, uid) for uid in faults.deleted.values()),
        timeout=90,
    )


@then("every remaining pod holds exactly the Leases of its allocation annotation")
def remaining_pods_keep_theirs(faults: Faults) -> None:
    remaining = _pods(faults)
    assert remaining
    for name, pod in remaining.items():
        node, ids = _allocated(pod)
        assert ids, f"{name} has no allocation annotation"
        assert leases_of(faults.api, pod["metadata"]["uid"]) == sorted(objects.lease_name(node, g) for g in ids)


# ---- d. two schedulers: the leader binds, a handover ----------------------------------------------------------


@then(step("exactly one scheduler holds the leader Lease, and keeps it for {seconds:d} seconds"))
def one_leader(faults: Faults, seconds: int) -> None:
    comps = faults.components
    assert sum(1 for p in comps.schedulers if p.running) == 2
    leader = comps.wait_for_leader(timeout=60)
    lease = comps.leader_lease()
    assert lease is not None
    transitions = lease["spec"].get("leaseTransitions", 0)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        now = comps.leader_lease() or {}
        assert (now.get("spec") or {}).get("holderIdentity") == leader.identity, now
        assert now["spec"].get("leaseTransitions", 0) == transitions, now
        assert all(p.running for p in comps.schedulers)
        time.sleep(0.5)
    faults.old_leader = leader
    faults.report(f"leader {leader.identity}; follower {[p.identity for p in comps.schedulers if p is not leader]}")


@when(step('{maps:d} map pods and {claims:d} claim pods of batch "{batch:q}" are created'))
def create_batch(faults: Faults, maps: int, claims: int, batch: str) -> None:
    # One map for every batch: index i maps round-robin onto node1..node4, GPUs 4-7 (the claims take 0-3).
    gpu_map = "".join(f"{i}=node{i % 4 + 1}:{4 + (i // 4) % 4}\n" for i in range(64))
    first = sum(1 for names in faults.batches.values() for n in names if "-claim-" not in n)
    names = []
    for i in range(first, first + maps):
        names.append(f"{batch}-{i}")
        faults.api.create(paths.pods(faults.namespace), _pod(names[-1], {constants.MAP_ANNOTATION: gpu_map}))
    for i in range(claims):
        names.append(f"{batch}-claim-{i}")
        _create_claim_pod(faults.api, faults.namespace, names[-1], 1, on_node(f"node{i % 4 + 1}"))
    faults.batches[batch] = names


@then(step('every pod of batch "{batch:q}" is bound, each by the leader'))
def batch_bound_by_leader(faults: Faults, batch: str) -> None:
    names = faults.batches[batch]
    wait_for(f"the {len(names)} pods of {batch} bound", lambda: _bound(faults, names) == len(names), timeout=90)
    assert faults.old_leader is not None
    agents = Counter(b["userAgent"] for b in _recorded_bindings(faults, names))
    assert agents == Counter({_user_agent(faults, faults.old_leader): len(names)}), agents


@when("the leader is SIGKILLed")
def kill_leader(faults: Faults) -> None:
    leader = faults.components.leader_process()
    assert leader is not None and leader is faults.old_leader, (faults.components.leader(), faults.old_leader)
    faults.killed_at = time.time()
    leader.kill()


@then("the other scheduler takes the leader Lease within the lease duration plus the retry period")
def handover(faults: Faults) -> None:
    comps = faults.components
    others = [p for p in comps.schedulers if p is not faults.old_leader and p.running]
    assert len(others) == 1
    faults.new_leader = comps.wait_for_leader(timeout=60, among=others)
    # When the apiserver accepted its write of the leader Lease: the apiserver's clock, as the kill's.
    agent = _user_agent(faults, faults.new_leader)
    takes = [
        w["received"]
        for w in faults.cp.lease_writes()
        if w["name"] == comps.scheduler_name
        and _sent_by(w["userAgent"], agent)
        and w["code"] in (200, 201)
        and w["received"] >= faults.killed_at
    ]
    assert takes, f"no write of the leader Lease by {agent} in the audit log"
    faults.handover_at = min(takes)
    took = faults.handover_at - faults.killed_at
    limit = LEADER_ELECTION.lease_duration + LEADER_ELECTION.retry_period + HANDOVER_SLACK
    faults.report(
        f"handover: {faults.new_leader.identity} took the leader Lease {took:.2f}s after the SIGKILL of "
        f"{faults.old_leader.identity if faults.old_leader else '?'} (limit {limit:.1f}s)"
    )
    assert took <= limit, f"handover took {took:.2f}s, more than {limit:.1f}s"


@then(
    step(
        'the new leader binds every pod of batch "{batch:q}", the first within the lease duration plus the retry period'
    )
)
def new_leader_binds(faults: Faults, batch: str) -> None:
    assert faults.new_leader is not None and faults.old_leader is not None
    names = faults.batches[batch]
    wait_for(f"the {len(names)} pods of {batch} bound", lambda: _bound(faults, names) == len(names), timeout=90)
    binds = _recorded_bindings(faults, names)
    assert Counter(b["userAgent"] for b in binds) == Counter({_user_agent(faults, faults.new_leader): len(names)})
    # Only the leader of the moment ever bound: the old one before the handover, the new one after it.
    everything = _bindings(faults)
    before = {b["userAgent"] for b in everything if b["received"] < faults.handover_at}
    after = {b["userAgent"] for b in everything if b["received"] >= faults.handover_at}
    assert before <= {_user_agent(faults, faults.old_leader)}, before
    assert after <= {_user_agent(faults, faults.new_leader)}, after
    first = min(b["received"] for b in binds) - faults.killed_at
    last = max(b["received"] for b in binds) - faults.killed_at
    limit = LEADER_ELECTION.lease_duration + LEADER_ELECTION.retry_period + HANDOVER_SLACK + FIRST_BIND_SLACK
    faults.report(
        f"after the SIGKILL: first bind by the new leader {first:.2f}s, all {len(names)} of {batch} "
        f"bound {last:.2f}s (limit for the first {limit:.1f}s)"
    )
    assert first <= limit, f"the first bind came {first:.2f}s after the kill, more than {limit:.1f}s"
