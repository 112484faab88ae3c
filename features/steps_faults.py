"""Steps of features/faults.feature: API faults injected by the harness's fault proxy, schedulers SIGKILLed in the
middle of a rollout, and two schedulers competing for the leader Lease.

Control-plane tier only: the proxy, the extra nodes, the processes and the audit log belong to the test session.
Everything a scenario changes is undone by the `faults` fixture (proxy rules reset, extra schedulers stopped,
the scheduler running again, the added nodes, their inventories and their Leases removed), so the scenarios that
run after it see the session as it was.

Imported into features/conftest.py (`from features.steps_faults import *`), so it must not import that module; it
uses the shared steps (claims Bound, pods deleted, "every pod was bound exactly once") through the Gherkin text.
Measured numbers (kills, handover) are printed and appended to `<control plane logs>/faults.log`.
"""

from __future__ import annotations

import dataclasses
import re
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

import parse
import pytest
from pytest_bdd import given, parsers, then, when

from gpu_scheduling import constants
from gpu_scheduling.claims import objects
from tests.harness.api import Api, ApiError, wait_for
from tests.harness.components import LEADER_ELECTION, Components, SchedulerProcess
from tests.harness.controlplane import ControlPlane, node_body
from tests.harness.faultproxy import FaultProxy, Rule

if TYPE_CHECKING:
    from features.conftest import World

CHECK_IMAGE = "gpu-scheduler-check:dev"  # kwok never pulls it
CLAIMS_API = f"/apis/{constants.CLAIM_GROUP}/{constants.CLAIM_VERSION}"
GPU_LEASE_PATH = re.compile(rf"^{re.escape(objects.LEASES_PATH)}/gpu-")
BINDING_PATH = re.compile(r"^/api/v1/namespaces/[^/]+/pods/[^/]+/binding$")
BINDS_BEFORE_KILL = 5  # successful bindings a scheduler makes before the rollout's next kill
POOL_LABEL = "faults.test/pool"  # the label the rollout's claims select; only the pool's nodes carry it
# How late a follower may take over after the leader's last renewal, beyond lease duration + retry period: it
# sees that renewal up to one jittered retry period (retry x 2.2) late and asks again up to one jittered retry
# period after the lease ran out; plus a second for a loaded 2-core machine.
HANDOVER_SLACK = 2 * 2.2 * LEADER_ELECTION.retry_period + 1.0
# From holding the lease to the first bind: caches are warm on a follower, one decision and one POST.
FIRST_BIND_SLACK = 2.0


@parse.with_pattern(r'[^"]*')
def _quoted(text: str) -> str:
    return text


def _step(text: str) -> parsers.StepParser:
    return parsers.parse(text, extra_types={"q": _quoted})


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
    def api(self) -> Api:
        return self.world.api

    @property
    def namespace(self) -> str:
        return self.world.namespace

    def report(self, line: str) -> None:
        print(f"\n[faults] {line}")
        with (self.cp.logs / "faults.log").open("a") as out:
            out.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {self.namespace} {line}\n")


@pytest.fixture
def faults(world: World) -> Faults:
    cluster = world.cluster
    if cluster.cp is None or cluster.components is None or cluster.components.proxy is None:
        pytest.skip("fault scenarios need the test control plane with the fault proxy")
    f = Faults(world, cluster.cp, cluster.components, cluster.components.proxy)
    f.proxy.reset()
    yield f
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
    f.api.delete(f"/api/v1/namespaces/{f.namespace}/pods", gracePeriodSeconds="0")
    pool = set(f.pool)
    try:
        wait_for("the Leases of the pool's GPUs released", lambda: not _pool_leases(f.api, pool), timeout=90)
    except AssertionError as exc:  # left over: a failure the scenario reported already; do not leak it further
        f.report(f"cleanup: {exc}; deleting them")
        for node in f.pool:
            f.api.delete(objects.LEASES_PATH, labelSelector=objects.node_lease_selector(node))
    for node in f.pool:
        f.api.delete(f"{CLAIMS_API}/gpunodestatuses/{node}")
        f.api.delete(f"/api/v1/nodes/{node}")


# ---- objects ---------------------------------------------------------------------------------------------------

def _pod(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations},
            "spec": {"schedulerName": constants.DEFAULT_SCHEDULER_NAME, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "check", "image": CHECK_IMAGE}]}}


def _claim(name: str, count: int, match_labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": f"{constants.CLAIM_GROUP}/{constants.CLAIM_VERSION}", "kind": "GpuClaim",
            "metadata": {"name": name},
            "spec": {"devices": {"count": count, "exclusivity": "Exclusive", "policy": "contiguous"},
                     "selector": {"matchLabels": match_labels}}}


def _create_claim_pod(api: Api, namespace: str, name: str, count: int, match_labels: dict[str, str]) -> None:
    """The GpuClaim `name` and the pod `name` naming it."""
    api.create(f"{CLAIMS_API}/namespaces/{namespace}/gpuclaims", _claim(name, count, match_labels))
    api.create(f"/api/v1/namespaces/{namespace}/pods", _pod(name, {constants.CLAIM_ANNOTATION: name}))


def _create(api: Api, path: str, body: dict[str, Any]) -> None:
    """Create `body`; one left by an interrupted earlier run is taken as it is."""
    try:
        api.create(path, body)
    except ApiError as exc:
        if exc.status != 409:
            raise


def _inventory() -> dict[str, Any]:
    """8 healthy GPUs in two NVLink islands, as the simulated inventory of node1..node4."""
    devices = [{"id": i, "health": "Healthy", "island": f"nvlink-group-{i // 4}",
                "bandwidthGBps": 600 if i < 4 else 64, "inUseBy": []} for i in range(8)]
    return {"total": 8, "free": 8, "unhealthy": 0, "devices": devices}


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


def _pool_leases(api: Api, pool: set[str]) -> dict[str, list[str]]:
    """GPU Lease name -> holder pod uids, for the Leases of the pool's nodes."""
    leases = api.get(objects.LEASES_PATH)["items"]
    return {lease["metadata"]["name"]: objects.lease_holders(lease) for lease in leases
            if (lease["metadata"].get("labels") or {}).get(objects.LEASE_NODE_LABEL) in pool}


def _leases_of(api: Api, uid: str) -> list[str]:
    return sorted(lease["metadata"]["name"] for lease in api.get(objects.LEASES_PATH)["items"]
                  if uid in objects.lease_holders(lease))


def _bindings(f: Faults, names: list[str] | None = None) -> list[dict[str, Any]]:
    wanted = None if names is None else set(names)
    return [b for b in f.cp.bindings()
            if b["namespace"] == f.namespace and (wanted is None or b["name"] in wanted)]


def _user_agent(f: Faults, proc: SchedulerProcess) -> str:
    return f"{f.components.scheduler_name}/{proc.identity}"


def _sent_by(user_agent: str, agent: str) -> bool:
    """Whether a request with `user_agent` came from the scheduler whose user agent is `agent`: that one, or one
    of its side clients (`<agent>/<purpose>`, such as the leader election's own)."""
    return user_agent == agent or user_agent.startswith(f"{agent}/")


# ---- a. a failed Lease delete --------------------------------------------------------------------------------

@when(_step("the next {count:d} deletes of GPU Leases are answered {status:d} by the API"))
def fail_lease_deletes(faults: Faults, count: int, status: int) -> None:
    faults.rule = faults.proxy.fail(method="DELETE", path=GPU_LEASE_PATH, status=status, times=count)


@then(_step("exactly {count:d} deletes of GPU Leases were answered {status:d}, and each of those Leases was "
            "deleted later"))
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
    faults.report(f"lease deletes refused: {[e.path.rsplit('/', 1)[1] for e in failed]}; "
                  f"deletes of GPU Leases that reached the apiserver: {faults.proxy.passed('DELETE', GPU_LEASE_PATH)}")


# ---- b. a rollout with the scheduler SIGKILLed ----------------------------------------------------------------

@given(_step('{count:d} extra kwok nodes "{prefix:q}NN" labelled "{label:q}", each with 8 simulated GPUs'))
def pool_nodes(faults: Faults, count: int, prefix: str, label: str) -> None:
    key, _, value = label.partition("=")
    assert key == POOL_LABEL, f"the pool's label is {POOL_LABEL}"
    names = [f"{prefix}{i:02d}" for i in range(count)]
    faults.pool = names  # cleaned up even if the rest of this step fails
    for name in names:  # all created first, then waited for together
        _create(faults.api, "/api/v1/nodes", node_body(name, 8, {key: value}))
    for name in names:
        faults.cp.add_node(name, 8, {key: value})  # exists already: waits until Ready and untainted
        _create(faults.api, f"{CLAIMS_API}/gpunodestatuses", {
            "apiVersion": f"{constants.CLAIM_GROUP}/{constants.CLAIM_VERSION}", "kind": "GpuNodeStatus",
            "metadata": {"name": name}, "spec": {"nodeName": name}})
        faults.api.patch(f"{CLAIMS_API}/gpunodestatuses/{name}/status", {"status": _inventory()})


@when(_step('{count:d} pods each naming its own GpuClaim of "{sizes:q}" Exclusive GPUs on the "{label:q}" nodes '
            'start being created, {rate:d} a second'))
def start_rollout(faults: Faults, count: int, sizes: str, label: str, rate: int) -> None:
    # Paced below what the scheduler binds, so that new pods keep arriving through every kill and restart: a
    # kill then always lands while pods wait to be bound, never after a backlog was cleared at once.
    key, _, value = label.partition("=")
    cycle = [int(s) for s in sizes.split(",")]
    wanted = sum(cycle[i % len(cycle)] for i in range(count))
    assert wanted <= 8 * len(faults.pool), f"{wanted} GPUs asked for, the pool has {8 * len(faults.pool)}"
    faults.rollout = [f"r-{i:03d}" for i in range(count)]
    api = Api(str(faults.cp.kubeconfig))  # a client of its own: it runs in another thread
    namespace = faults.namespace

    def create() -> None:
        started = time.monotonic()
        try:
            for i, name in enumerate(faults.rollout):
                time.sleep(max(0.0, started + i / rate - time.monotonic()))
                _create_claim_pod(api, namespace, name, cycle[i % len(cycle)], {key: value})
                faults.created = i + 1
        except Exception as exc:  # reported by the step that waits for the pods
            faults.creation_errors.append(exc)

    faults.creator = threading.Thread(target=create, name="rollout", daemon=True)
    faults.creator.start()
    faults.report(f"rollout: {count} claim pods asking for {wanted} GPUs of {8 * len(faults.pool)}, "
                  f"{rate} created a second")


@when(_step('the scheduler is SIGKILLed in the middle of a bind once "{points:q}" pods are created, and restarted '
            'each time'))
def kill_during_rollout(faults: Faults, points: str) -> None:
    comps = faults.components
    for point in (int(p) for p in points.split(",")):
        # Counted from the creating thread, not from the binds: a restarted scheduler binds its backlog at once,
        # and the rollout must still be under way at every kill.
        wait_for(f"{point} pods of the rollout created", lambda n=point: faults.created >= n or faults.creation_errors,
                 timeout=120, interval=0.05)
        assert not faults.creation_errors, faults.creation_errors
        # Spread out: the scheduler of the moment has bound a few pods of its own since it took over.
        agent = _user_agent(faults, comps.scheduler)
        wait_for(f"{BINDS_BEFORE_KILL} bindings by {agent}", lambda a=agent: sum(
            1 for e in faults.proxy.exchanges("POST", BINDING_PATH) if _sent_by(e.user_agent, a) and e.status == 201)
            >= BINDS_BEFORE_KILL, timeout=120, interval=0.1)
        # The next binding is held at the proxy, so the kill lands in the middle of a claim pod's placement: its
        # GPUs are leased, its binding has not reached the apiserver (other binds may be in flight besides). A
        # scheduler just restarted binds nothing until the dead one's leader Lease has run out.
        held = faults.proxy.delay(method="POST", path=BINDING_PATH, seconds=60, times=1)
        wait_for("a binding held at the proxy", lambda rule=held: faults.proxy.injected(rule), timeout=60,
                 interval=0.05)
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


@then(_step("all {count:d} pods of the rollout are bound"))
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
        faults.report(f"kill {i}: SIGKILL of {kill.identity} holding the binding of {kill.held}, with {kill.bound} "
                      f"of {kill.created} created pods bound (of {count}); first bind by its successor "
                      f"{kill.successor} {resumed}")


@then("no GPU is in two pods' allocation annotations, and each pod's annotation names its node")
def no_gpu_twice(faults: Faults) -> None:
    owners: dict[tuple[str, int], list[str]] = {}
    claims = {c["metadata"]["name"]: c for c in
              faults.api.get(f"{CLAIMS_API}/namespaces/{faults.namespace}/gpuclaims")["items"]}
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
        wait_for("the pool's Leases to match the allocation annotations",
                 lambda: _pool_leases(faults.api, pool) == expected, timeout=90, interval=1)
    except AssertionError:
        actual = _pool_leases(faults.api, pool)
        extra = {k: v for k, v in actual.items() if k not in expected}
        missing = sorted(set(expected) - set(actual))
        wrong = {k: (v, expected[k]) for k, v in actual.items() if k in expected and v != expected[k]}
        raise AssertionError(f"extra Leases {extra}; missing Leases {missing}; "
                             f"held by the wrong pod (held, expected) {wrong}") from None


# ---- c. pods deleted while every scheduler is down -----------------------------------------------------------

@given(_step('a second scheduler "{identity:q}" is running'))
def second_scheduler(faults: Faults, identity: str) -> None:
    faults.components.start_extra_scheduler(identity)


@given(_step('the pods "{names:q}" each naming its own GpuClaim of "{sizes:q}" GPUs on {node} are bound'))
def claim_pods_bound(faults: Faults, names: str, sizes: str, node: str) -> None:
    pods, counts = names.split(","), [int(s) for s in sizes.split(",")]
    assert len(pods) == len(counts)
    for name, count in zip(pods, counts):
        _create_claim_pod(faults.api, faults.namespace, name, count, {"kubernetes.io/hostname": node})
    wait_for(f"{names} bound", lambda: _bound(faults, pods) == len(pods), timeout=90)


@when("every scheduler is SIGKILLed")
def kill_every_scheduler(faults: Faults) -> None:
    for proc in faults.components.schedulers:
        proc.kill()
    assert not any(p.running for p in faults.components.schedulers)


@when(_step('the pods "{names:q}" are deleted'))
def delete_pods(faults: Faults, names: str) -> None:
    for name in names.split(","):
        pod = faults.api.get(f"/api/v1/namespaces/{faults.namespace}/pods/{name}")
        faults.deleted[name] = pod["metadata"]["uid"]
        assert _leases_of(faults.api, faults.deleted[name]), f"{name} held no Lease before its deletion"
        faults.api.delete(f"/api/v1/namespaces/{faults.namespace}/pods/{name}", gracePeriodSeconds="0")


@then("no GPU Lease is held by any of the deleted pods")
def deleted_pods_hold_nothing(faults: Faults) -> None:
    assert faults.deleted
    # The restarted scheduler first waits for the dead leader's lease to run out.
    wait_for("the Leases of the deleted pods released",
             lambda: not any(_leases_of(faults.api, uid) for uid in faults.deleted.values()), timeout=90)


@then("every remaining pod holds exactly the Leases of its allocation annotation")
def remaining_pods_keep_theirs(faults: Faults) -> None:
    remaining = _pods(faults)
    assert remaining
    for name, pod in remaining.items():
        node, ids = _allocated(pod)
        assert ids, f"{name} has no allocation annotation"
        assert _leases_of(faults.api, pod["metadata"]["uid"]) == sorted(objects.lease_name(node, g) for g in ids)


# ---- d. two schedulers: the leader binds, a handover ----------------------------------------------------------

@then(_step("exactly one scheduler holds the leader Lease, and keeps it for {seconds:d} seconds"))
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
    faults.report(f"leader {leader.identity}; follower "
                  f"{[p.identity for p in comps.schedulers if p is not leader]}")


@when(_step('{maps:d} map pods and {claims:d} claim pods of batch "{batch:q}" are created'))
def create_batch(faults: Faults, maps: int, claims: int, batch: str) -> None:
    # One map for every batch: index i maps round-robin onto node1..node4, GPUs 4-7 (the claims take 0-3).
    gpu_map = "".join(f"{i}=node{i % 4 + 1}:{4 + (i // 4) % 4}\n" for i in range(64))
    first = sum(1 for names in faults.batches.values() for n in names if "-claim-" not in n)
    names = []
    for i in range(first, first + maps):
        names.append(f"{batch}-{i}")
        faults.api.create(f"/api/v1/namespaces/{faults.namespace}/pods",
                          _pod(names[-1], {constants.MAP_ANNOTATION: gpu_map}))
    for i in range(claims):
        names.append(f"{batch}-claim-{i}")
        _create_claim_pod(faults.api, faults.namespace, names[-1], 1, {"kubernetes.io/hostname": f"node{i % 4 + 1}"})
    faults.batches[batch] = names


@then(_step('every pod of batch "{batch:q}" is bound, each by the leader'))
def batch_bound_by_leader(faults: Faults, batch: str) -> None:
    names = faults.batches[batch]
    wait_for(f"the {len(names)} pods of {batch} bound", lambda: _bound(faults, names) == len(names), timeout=90)
    assert faults.old_leader is not None
    agents = Counter(b["userAgent"] for b in _bindings(faults, names))
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
    takes = [w["received"] for w in faults.cp.lease_writes()
             if w["name"] == comps.scheduler_name and _sent_by(w["userAgent"], agent) and w["code"] in (200, 201)
             and w["received"] >= faults.killed_at]
    assert takes, f"no write of the leader Lease by {agent} in the audit log"
    faults.handover_at = min(takes)
    took = faults.handover_at - faults.killed_at
    limit = LEADER_ELECTION.lease_duration + LEADER_ELECTION.retry_period + HANDOVER_SLACK
    faults.report(f"handover: {faults.new_leader.identity} took the leader Lease {took:.2f}s after the SIGKILL of "
                  f"{faults.old_leader.identity if faults.old_leader else '?'} (limit {limit:.1f}s)")
    assert took <= limit, f"handover took {took:.2f}s, more than {limit:.1f}s"


@then(_step('the new leader binds every pod of batch "{batch:q}", the first within the lease duration plus the '
            'retry period'))
def new_leader_binds(faults: Faults, batch: str) -> None:
    assert faults.new_leader is not None and faults.old_leader is not None
    names = faults.batches[batch]
    wait_for(f"the {len(names)} pods of {batch} bound", lambda: _bound(faults, names) == len(names), timeout=90)
    binds = _bindings(faults, names)
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
    faults.report(f"after the SIGKILL: first bind by the new leader {first:.2f}s, all {len(names)} of {batch} "
                  f"bound {last:.2f}s (limit for the first {limit:.1f}s)")
    assert first <= limit, f"the first bind came {first:.2f}s after the kill, more than {limit:.1f}s"


# Only the steps and the fixture go into conftest's namespace (pytest-bdd registers each step as a fixture here).
__all__ = [name for name in list(globals()) if name.startswith("pytestbdd_")] + ["faults"]
