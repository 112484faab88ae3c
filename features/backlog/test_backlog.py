"""A backlog of waiting claim pods (backlog.feature, control-plane tier): what the schedulers write for it, read from
the apiserver's audit log, and whether the leader keeps its Lease meanwhile; and how the real apiserver classifies
the scheduler's requests under the chart's FlowSchemas (API Priority and Fairness), read from the headers it answers
with."""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from pytest_bdd import given, scenarios, then, when

from features.conftest import Watched
from features.support import WORKER_NODES, World, on_node, pod_body, step
from gpu_scheduling import constants
from gpu_scheduling.claims import objects
from gpu_scheduling.kube import paths
from harness import manifests
from harness.components import LEADER_ELECTION, UNSCHEDULABLE_FLUSH, Components
from harness.controlplane import create_namespace
from harness.wait import wait_for

scenarios("backlog.feature")

FLOWCONTROL_TEMPLATE = "templates/scheduler/flowcontrol.yaml"
WAITING = "backlog.test/waiting"
"""Label of the waiting pods, so that the teardown deletes them before the pods holding the GPUs."""


@dataclasses.dataclass
class Backlog:
    components: Components
    started: float = 0.0  # when the second replica was up (seconds since the epoch)
    leader: str = ""
    pods: list[str] = dataclasses.field(default_factory=list)
    settled: float = 0.0  # when every waiting pod had been reported


@pytest.fixture
def backlog(world: World, watched: Watched) -> Iterator[Backlog]:
    comps = world.cluster.components
    assert comps is not None, "the control-plane tier starts the schedulers"
    yield Backlog(comps)
    watched.settle()  # the second replica's restarts and exits, read while it still runs (its log at the end)
    comps.stop_extra_schedulers()
    # The waiting pods go first, and are gone, before `world` deletes the rest: the pods watch delivers their
    # deletions before the fill pods', so no scheduler tries to place 2000 pods on the GPUs the fill pods free
    # in a namespace being deleted (that storm loaded the next scenarios: the leader lost its Lease under load).
    world.api.delete(paths.pods(world.namespace), labelSelector=f"{WAITING}=true", gracePeriodSeconds="0")

    def none_waiting() -> bool | None:
        pods = world.api.get(paths.pods(world.namespace), labelSelector=WAITING, limit="1")["items"]
        return True if not pods else None

    wait_for("the waiting pods deleted", none_waiting, timeout=120, interval=1)


def _scheduler_writes(world: World, backlog: Backlog, since: float = 0.0) -> list[dict[str, Any]]:
    """Every write the schedulers (any replica: their user agent starts with the scheduler's name) made since
    `since`, as the audit log records them."""
    assert world.cluster.cp is not None
    mine = f"{backlog.components.scheduler_name}/"
    return [w for w in world.cluster.cp.writes() if w["userAgent"].startswith(mine) and w["received"] >= since]


@given("a second gpu-scheduler replica is running")
def second_replica(world: World, backlog: Backlog) -> None:
    backlog.components.start_extra_scheduler("scheduler-b")
    backlog.leader = wait_for("a leader", backlog.components.leader, timeout=60)
    backlog.started = time.time()


@given("every GPU of every kwok node is taken by a bound claim pod")
def fill(world: World) -> None:
    for node in WORKER_NODES:
        claim = objects.claim_body(f"fill-{node}", {"devices": {"count": 8}, "selector": on_node(node)})
        world.api.create(paths.gpu_claims(world.namespace), claim)
        world.api.create(paths.pods(world.namespace), pod_body(f"fill-{node}", gpu_map=None, claim=f"fill-{node}"))

    def all_bound() -> bool | None:
        return True if all(p["spec"].get("nodeName") for p in world.api.pods(world.namespace)) else None

    wait_for("the fill pods bound, one per node", all_bound, timeout=120)


@when(step("{count:d} claim pods of one GPU each, each with its own GpuClaim, are created"))
def create_backlog(world: World, backlog: Backlog, count: int) -> None:
    backlog.pods = [f"wait-{i:04d}" for i in range(count)]

    def create(name: str) -> None:
        world.api.create(paths.gpu_claims(world.namespace), objects.claim_body(name, {"devices": {"count": 1}}))
        body = pod_body(name, gpu_map=None, claim=name)
        body["metadata"].setdefault("labels", {})[WAITING] = "true"
        world.api.create(paths.pods(world.namespace), body)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, backlog.pods))


def _reports(writes: list[dict[str, Any]], namespace: str) -> dict[str, Counter[str]]:
    """Per kind of report (pods/status, events, gpuclaims/status), how many writes each pod (or its claim) had.
    An Event is named `<pod>.<hex>` by the scheduler."""
    out: dict[str, Counter[str]] = {"pods/status": Counter(), "events": Counter(), "gpuclaims/status": Counter()}
    for w in writes:
        if w["namespace"] != namespace or w["resource"] not in out or not 200 <= (w["code"] or 0) < 300:
            continue
        name = w["name"].rsplit(".", 1)[0] if w["resource"] == "events" else w["name"]
        out[w["resource"]][name] += 1
    return out


@then(
    step(
        "every one of the {count:d} pods was reported once: its condition, one FailedScheduling event and its "
        "claim's status"
    )
)
def reported_once(world: World, backlog: Backlog, count: int) -> None:
    waiting = set(backlog.pods)
    assert len(waiting) == count

    def all_reported() -> dict[str, Counter[str]] | None:
        reports = _reports(_scheduler_writes(world, backlog, backlog.started), world.namespace)
        done = all(waiting <= set(c) for c in reports.values())
        return reports if done else None

    # The first pass writes three reports per pod at the scheduler's default client rate (50/s).
    reports = wait_for(f"the {count} waiting pods reported", all_reported, timeout=600, interval=2)
    backlog.settled = time.time()
    for kind, counts in reports.items():
        again = {name: n for name, n in counts.items() if name in waiting and n != 1}
        assert not again, f"{kind} written more than once for {len(again)} pods: {dict(list(again.items())[:5])}"
    pods = {p["metadata"]["name"]: p for p in world.api.pods(world.namespace)}
    for name in backlog.pods:
        conditions = {c["type"]: c for c in pods[name]["status"].get("conditions") or []}
        assert conditions["PodScheduled"]["status"] == "False", (name, conditions)
        assert not pods[name]["spec"].get("nodeName"), f"{name} was bound while every GPU was taken"


@then(
    step(
        "after {seconds:d} more seconds the schedulers have written nothing else for the waiting pods, and no GPU Lease"
    )
)
def nothing_more(world: World, backlog: Backlog, seconds: int) -> None:
    assert world.cluster.cp is not None
    # The window spans at least two of the schedulers' periodic retries (--unschedulable-flush, the harness's
    # UNSCHEDULABLE_FLUSH): a flush that retried pods nothing helped would show here as event series written back.
    assert seconds >= 2 * UNSCHEDULABLE_FLUSH, f"{seconds}s spans fewer than two flushes of {UNSCHEDULABLE_FLUSH:g}s"
    time.sleep(seconds)
    world.cluster.cp.check_alive()
    time.sleep(1)  # the audit log is written in batches
    since = backlog.settled
    writes = _scheduler_writes(world, backlog, since)
    for_pods = [w for w in writes if w["namespace"] == world.namespace]
    gpu_leases = [w for w in writes if w["resource"] == "leases" and w["name"] != backlog.components.scheduler_name]
    assert for_pods == [], f"{len(for_pods)} writes for the waiting pods after the first pass: {for_pods[:5]}"
    assert gpu_leases == [], f"GPU Lease writes while nothing changed: {gpu_leases[:5]}"
    # Over the whole scenario, still exactly one of each report per pod.
    reports = _reports(_scheduler_writes(world, backlog, backlog.started), world.namespace)
    for kind, counts in reports.items():
        assert all(counts[name] == 1 for name in backlog.pods), kind


@then("the leader Lease kept its holder throughout, renewed by it within every lease duration")
def lease_kept(world: World, backlog: Backlog) -> None:
    assert world.cluster.cp is not None
    comps = backlog.components
    assert comps.leader() == backlog.leader, f"the leader changed from {backlog.leader} to {comps.leader()}"
    renewer = f"{comps.scheduler_name}/{backlog.leader}/leader-election"
    ours = [
        w
        for w in world.cluster.cp.lease_writes()
        if w["name"] == comps.scheduler_name and w["received"] >= backlog.started and 200 <= (w["code"] or 0) < 300
    ]
    strangers = {w["userAgent"] for w in ours if w["userAgent"] != renewer}
    assert not strangers, f"the leader Lease was written by {strangers} besides its holder {renewer}"
    moments = [backlog.started, *sorted(w["received"] for w in ours), time.time()]
    gaps = [b - a for a, b in itertools.pairwise(moments)]
    assert len(ours) > 10, f"only {len(ours)} renewals over {moments[-1] - moments[0]:.0f}s"
    assert max(gaps) < LEADER_ELECTION.lease_duration, (
        f"the leader Lease went {max(gaps):.1f}s without a renewal (lease duration {LEADER_ELECTION.lease_duration}s)"
    )


# ---- API Priority and Fairness ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Release:
    namespace: str
    tokens: dict[str, str]  # service account -> a token of it


@pytest.fixture
def flow_release(world: World) -> Iterator[list[Release]]:
    made: list[Release] = []
    yield made
    for release in made:
        for doc in manifests.render(namespace=release.namespace, show_only=[FLOWCONTROL_TEMPLATE]):
            world.api.delete(paths.FLOW_SCHEMA.item(doc["metadata"]["name"]))
        world.api.delete(paths.namespace(release.namespace))


@given(
    step("the chart's FlowSchemas and the scheduler's service account for a release in the namespace \"{ns:q}\""),
    target_fixture="release",
)
def flowschemas(world: World, flow_release: list[Release], ns: str) -> Release:
    create_namespace(world.api, ns, timeout=60)
    for doc in manifests.render(namespace=ns, show_only=[FLOWCONTROL_TEMPLATE]):
        world.api.apply_or_replace(paths.FLOW_SCHEMA.collection(), doc)
    tokens = {}
    for account in (constants.DEFAULT_SCHEDULER_NAME, "someone-else"):
        body = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": ns}}
        world.api.create(paths.SERVICE_ACCOUNT.collection(ns), body, exist_ok=True)
        review = world.api.create(
            paths.service_account_token(ns, account),
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 600}},
        )
        tokens[account] = review["status"]["token"]
    release = Release(ns, tokens)
    flow_release.append(release)
    return release


def _classified(world: World, token: str, path: str) -> tuple[str, str]:
    """(FlowSchema, priority level) the apiserver put a GET of `path` by `token`'s owner in, from the UIDs in its
    answer's X-Kubernetes-PF-* headers (an answer of 403 carries them too: classifying comes before
    authorizing)."""
    headers = {k.lower(): v for k, v in world.api.as_token(token).headers(path).items()}
    schema_uid = headers.get("x-kubernetes-pf-flowschema-uid")
    level_uid = headers.get("x-kubernetes-pf-prioritylevel-uid")
    assert schema_uid and level_uid, f"GET {path} was answered without APF headers: {headers}"
    api = world.api
    schemas = {d["metadata"]["uid"]: d["metadata"]["name"] for d in api.get(paths.FLOW_SCHEMA.collection())["items"]}
    levels = {d["metadata"]["uid"]: d["metadata"]["name"] for d in api.get(paths.PRIORITY_LEVEL.collection())["items"]}
    return schemas.get(schema_uid, schema_uid), levels.get(level_uid, level_uid)


def _check(world: World, release: Release, account: str, path: str, schema: str, level: str) -> None:
    # The apiserver reads FlowSchemas from its informer: a new one takes a moment to apply.
    def as_expected() -> tuple[str, str] | None:
        got = _classified(world, release.tokens[account], path)
        return got if got == (schema, level) else None

    try:
        wait_for(f"{account}'s GET {path} classified as {schema}/{level}", as_expected, timeout=30, interval=1)
    except AssertionError:
        raise AssertionError(
            f"{account}'s GET {path}: {_classified(world, release.tokens[account], path)}, not {(schema, level)}"
        ) from None


#: Who asks, in the steps' words: the service account whose token the request carries.
ACCOUNTS = {
    "the scheduler's service account": constants.DEFAULT_SCHEDULER_NAME,
    "another service account of that namespace": "someone-else",
}
#: What is asked, in the steps' words: the path of the GET.
REQUESTS = {
    "a Lease read": paths.lease(constants.LEASE_NAMESPACE, constants.DEFAULT_SCHEDULER_NAME),
    "a pod list": paths.ALL_PODS,
}


@then(step('{request} by {who} is classified by the FlowSchema "{schema:q}" at the priority level "{level:q}"'))
def classified(world: World, release: Release, request: str, who: str, schema: str, level: str) -> None:
    _check(world, release, ACCOUNTS[who], REQUESTS[request], schema, level)
