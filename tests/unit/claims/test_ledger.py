"""The GPU ledger: table tests of each step, and a hypothesis state machine that drives a whole scheduler's worth
of decisions, watch events (delivered late), failed API calls and restarts against a model of the API, checking
after every step that no Exclusive GPU has two live holders and, once things settle, that no release was lost."""

from __future__ import annotations

import dataclasses

import hypothesis.strategies as st
import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from gpu_scheduling import constants, gpumap
from gpu_scheduling.claims import allocator, objects, occupancy
from gpu_scheduling.claims.ledger import Hold, LeaseRecord, Ledger


def claim(uid: str, node: str = "n1", gpus: tuple[int, ...] = (0,), exclusivity: str = "Exclusive") -> Hold:
    return Hold(uid, f"ns/{uid}", node, gpus, exclusivity, "claim", f"c-{uid}")


def map_hold(uid: str, node: str = "n1", gpus: tuple[int, ...] = (0,)) -> Hold:
    return Hold(uid, f"ns/{uid}", node, gpus, "Shared", "map")


def lease(node: str, gpu: int, *holders: str, exclusivity: str = "Exclusive", rv: str = "1") -> LeaseRecord:
    return LeaseRecord(
        objects.lease_name(node, gpu), node, gpu, exclusivity, holders, {h: f"ns/{h}" for h in holders}, rv
    )


def test_an_exclusive_gpu_is_never_assumed_twice():
    ledger = Ledger()
    assert ledger.assume(claim("a", gpus=(0, 1))) == []
    conflicts = ledger.assume(claim("b", gpus=(1, 2)))
    assert [(c.node, c.gpu) for c in conflicts] == [("n1", 1)]
    assert "pod ns/a (GpuClaim c-a)" in conflicts[0].holder
    assert ledger.hold("b") is None
    ledger.check()


def test_map_pods_share_among_themselves_but_block_exclusive_claims():
    ledger = Ledger()
    assert ledger.assume(map_hold("m3", gpus=(3,))) == []
    assert ledger.assume(map_hold("m4", gpus=(3,))) == []  # the take-home's pods 3 and 4
    assert ledger.assume(claim("x", gpus=(3,)))[0].holder.startswith("pod ns/m3")
    assert ledger.assume(claim("s", gpus=(3,), exclusivity="Shared")) == []
    assert ledger.holdings("n1") == (allocator.Holding("n1", (3,), "Shared"),)


def test_a_map_pod_waits_for_an_exclusive_claim_and_is_told_who_holds_it():
    ledger = Ledger()
    ledger.pod_bound(claim("big", node="node3", gpus=tuple(range(8))))
    conflicts = ledger.conflicts("node3", (0, 1, 2), "Shared", "check-2")
    assert [c.gpu for c in conflicts] == [0, 1, 2]
    assert conflicts[0].holder == "pod ns/big (GpuClaim c-big)"


def test_a_lease_keeps_its_gpu_busy_until_the_api_deletes_it():
    ledger = Ledger()
    ledger.lease_seen(lease("n1", 0, "a"))
    ledger.pod_bound(claim("a"))
    ledger.freed.clear()
    assert ledger.pod_gone("a") == {("n1", 0)}
    assert ledger.holdings("n1") == (allocator.Holding("n1", (0,), "Exclusive"),)  # the lock is still there
    assert ledger.releasing("a") and not ledger.freed
    plan = ledger.lease_plan(lease("n1", 0, "a"))
    assert plan.remove == ("a",) and plan.keep == () and not plan.verify
    ledger.lease_deleted(("n1", 0))
    assert ledger.holdings("n1") == () and ledger.freed == {"n1"} and not ledger.releasing("a")
    ledger.check()


def test_a_deleted_pod_no_lease_names_is_not_remembered():
    """The ledger remembers a released pod only while a Lease names it: a scheduler that ran for months would
    otherwise keep the uid of every pod ever deleted. A Lease that names it afterwards is verified instead."""
    ledger = Ledger()
    for uid in ("m1", "m2", "m3"):
        ledger.pod_bound(map_hold(uid))
        assert ledger.pod_gone(uid) == set()
    ledger.lease_seen(lease("n1", 1, "c1"))
    ledger.pod_bound(claim("c1", gpus=(1,)))
    assert ledger.pod_gone("c1") == {("n1", 1)}
    assert ledger._released == {"c1"}  # named by its Lease until the API deletes it
    ledger.lease_deleted(("n1", 1))
    assert ledger._released == set()
    ledger.lease_seen(lease("n1", 2, "m1"))  # a Lease of a pod the ledger forgot: asked of the API, not dropped
    assert ledger.lease_plan(lease("n1", 2, "m1")).verify == {"m1": "ns/m1"}
    ledger.check()


def test_a_holder_the_ledger_cannot_vouch_for_is_verified_not_dropped():
    ledger = Ledger()
    ledger.lease_seen(lease("n1", 0, "stranger"))
    plan = ledger.lease_plan(lease("n1", 0, "stranger"))
    assert plan.verify == {"stranger": "ns/stranger"} and not plan.remove
    ledger.pod_pending("stranger")  # the API shows it unbound and we are not placing it: it holds nothing
    assert ledger.lease_plan(lease("n1", 0, "stranger")).remove == ("stranger",)


def test_an_assumed_pod_is_not_released_by_a_pending_verdict():
    ledger = Ledger()
    ledger.assume(claim("a"))
    ledger.pod_pending("a")
    assert ledger.hold("a") is not None
    assert ledger.lease_plan(lease("n1", 0, "a")).settled


def test_a_bound_pod_keeps_only_the_leases_of_what_it_holds():
    ledger = Ledger()
    ledger.lease_seen(lease("n1", 0, "a"))
    ledger.lease_seen(lease("n1", 5, "a"))
    assert ledger.pod_bound(claim("a", gpus=(0,))) == {("n1", 5)}
    assert ledger.lease_plan(lease("n1", 5, "a")).remove == ("a",)
    assert ledger.lease_plan(lease("n1", 0, "a")).settled


def test_shared_leases_drop_only_the_gone_holder():
    ledger = Ledger()
    for uid in ("a", "b"):
        ledger.pod_bound(claim(uid, exclusivity="Shared"))
    ledger.lease_seen(lease("n1", 0, "a", "b", exclusivity="Shared"))
    ledger.pod_gone("a")
    plan = ledger.lease_plan(lease("n1", 0, "a", "b", exclusivity="Shared"))
    assert plan.keep == ("b",) and plan.remove == ("a",)


def test_holdings_are_per_node_and_cached_until_that_node_changes():
    ledger = Ledger()
    ledger.pod_bound(claim("a", node="n1", gpus=(0, 1)))
    ledger.pod_bound(claim("b", node="n2", gpus=(7,)))
    first = ledger.holdings("n1")
    assert first == (allocator.Holding("n1", (0,)), allocator.Holding("n1", (1,)))
    ledger.pod_bound(claim("c", node="n2", gpus=(6,)))
    assert ledger.holdings("n1") is first
    ledger.pod_gone("a")
    assert ledger.holdings("n1") == ()


def test_allocator_reads_the_ledger_per_node():
    ledger = Ledger()
    ledger.pod_bound(map_hold("m", node="n1", gpus=(0, 1, 2)))
    nodes = [allocator.Node("n1", tuple(allocator.Device(i) for i in range(4)))]
    outcome = allocator.allocate(allocator.Request(count=1), nodes, held=ledger.holdings)
    assert isinstance(outcome, allocator.Allocation) and outcome.gpu_ids == (3,)
    outcome = allocator.allocate(allocator.Request(count=2), nodes, held=ledger.holdings)
    assert isinstance(outcome, allocator.NoFit) and outcome.phase == "Pending"


def test_hold_from_pod_reads_claim_annotations_and_map_entries():
    pod = {
        "metadata": {
            "uid": "u",
            "namespace": "ns",
            "name": "train-0",
            "annotations": {
                "gpu.scheduling/allocated": "node2:0,1",
                "gpu.scheduling/claim": "train",
                "gpu.scheduling/exclusivity": "Shared",
            },
        },
        "spec": {"nodeName": "node2"},
    }
    assert objects.hold_from_pod(pod) == Hold("u", "ns/train-0", "node2", (0, 1), "Shared", "claim", "train", True)
    pod = {
        "metadata": {
            "uid": "v",
            "namespace": "default",
            "name": "check-2",
            "annotations": {"gpu-scheduling-map": "2=node3:0,1,2"},
        },
        "spec": {"nodeName": "node3"},
    }
    assert objects.hold_from_pod(pod) == Hold("v", "default/check-2", "node3", (0, 1, 2), "Shared", "map", "", True)
    assert objects.hold_from_pod({"metadata": {"uid": "w", "namespace": "a", "name": "b"}, "spec": {}}) is None


def test_a_map_pod_is_read_through_the_cache_its_reader_owns():
    """The scheduler, the board and the agent each pass their own gpumap.ParseCache: the map is parsed into the
    cache passed, and a reader that keeps none leaves every cache as it was."""
    meta = {"uid": "v", "namespace": "default", "name": "check-1", "annotations": {"gpu-scheduling-map": "1=node2:3"}}
    pod = {"metadata": meta, "spec": {"nodeName": "node2"}}
    mine, other = gpumap.ParseCache(), gpumap.ParseCache()
    assert (
        objects.hold_from_pod(pod, mine)
        == objects.hold_from_pod(pod)
        == Hold("v", "default/check-1", "node2", (3,), "Shared", "map", "", True)
    )
    assert (len(mine), len(other)) == (1, 0)
    read = occupancy.read_pod(pod, other)
    assert read is not None and read.hold is not None and read.hold.gpu_ids == (3,)
    assert (len(mine), len(other)) == (1, 1)


def test_lease_names_and_labels_are_valid_for_any_node_name():
    long_node = "a" * 120 + "." + "b" * 120
    name = objects.lease_name(long_node, 7)
    assert len(name) <= 253 and name.startswith("gpu-a") and name.endswith("-7")
    assert objects.lease_name("node1", 3) == "gpu-node1-3"
    label = objects.node_label_value(long_node)
    assert len(label) <= 63 and label[0].isalnum() and label[-1].isalnum()
    body = objects.lease_body(long_node, 7, "Exclusive", {"u": "ns/p"})
    record = objects.lease_record(body)
    assert record is not None and record.node == long_node and record.gpu == 7 and record.pods == {"u": "ns/p"}
    assert objects.lease_name("x" * 200, 1) != objects.lease_name("x" * 199 + "y", 1)


def test_a_lease_whose_gpu_label_is_not_ascii_digits_is_not_a_gpu_lease():
    # str.isdigit() accepts "²" and "٣", which int() then refuses or reads: neither may reach the ledger.
    for gpu in ("\u00b2", "\u0663", "-1", "1.0", "1234567", ""):
        body = objects.lease_body("node1", 0, "Exclusive", {"u": "ns/p"})
        body["metadata"]["labels"][constants.LEASE_GPU_LABEL] = gpu
        assert objects.lease_record(body) is None, gpu


# ---- the state machine ------------------------------------------------------------------------------------------

NODES = ("n1", "n2")
GPUS = 2
DEVICES = tuple(allocator.Device(i) for i in range(GPUS))
INVENTORY = [allocator.Node(name, DEVICES) for name in ("n0", *NODES)]  # one tuple: nodes alike share a state
INDEXED_REQUESTS = (
    allocator.Request(1),
    allocator.Request(2),
    allocator.Request(1, exclusivity="Shared"),
    allocator.Request(2, exclusivity="Shared", strategy="LeastUtilized"),
    allocator.Request(1, strategy="RoundRobin"),
)
"""What the machine asks of a FreeIndex after each step, on the ledger's nodes and one that never holds anything."""
INDEXED_KINDS = {allocator.FreeIndex.kind_of(r) for r in INDEXED_REQUESTS}
NAMES = ("p0", "p1", "p2")


@dataclasses.dataclass
class ApiPod:
    uid: str
    name: str
    bound: Hold | None = None  # what the Binding said, once bound
    alive: bool = True


@dataclasses.dataclass(frozen=True)
class LedgerPod:
    """A pod as the occupancy model reads it, from what the ledger knows of it."""

    hold: Hold
    phase: str | None = "Running"
    finished: bool = False

    @property
    def key(self) -> str:
        return self.hold.pod

    @property
    def uid(self) -> str:
        return self.hold.uid

    @property
    def ref(self) -> str:
        return self.hold.pod

    @property
    def node(self) -> str | None:
        return self.hold.node

    @property
    def allocated(self) -> str | None:
        return None


class LedgerMachine(RuleBasedStateMachine):
    """A scheduler's use of the ledger against a model of the API: pods (bound or not, alive or gone) and GPU
    Leases (the lock: a create fails when the Lease exists). Watch events reach the ledger late, in order, one
    stream each for pods and Leases (they lag each other). API calls may fail; the scheduler may restart.

    A pod created again under a name gets a new uid, as in Kubernetes, where a uid is never reused: the first pod
    called p0 has uid "p0", the next "p0.1"."""

    @initialize()
    def start(self) -> None:
        self.pods: dict[str, ApiPod] = {}  # uid -> pod, gone ones included (a Lease may still name them)
        self.named: dict[str, str] = {}  # name -> uid of the latest pod of that name
        self.leases: dict[tuple[str, int], tuple[str, tuple[str, ...], int]] = {}  # key -> (excl, holders, rv)
        self.rv = 0
        self.restart()

    def restart(self) -> None:
        """A new process: the ledger is rebuilt from fresh lists of the API, the Leases' and then the pods', both
        taken in before the first decision or release, as Scheduler.watch waits for every informer's `synced` (set
        once its list went through the handlers) before `lead` starts the workers and the release worker. Events
        from then on lag as usual. A pod that is gone is simply not in the list: the ledger learns nothing of it."""
        self.ledger = Ledger()
        self.mark = self.ledger.position()
        self.indexes = {kind: allocator.FreeIndex(INVENTORY, self.ledger.holdings, kind) for kind in INDEXED_KINDS}
        self.pod_events: list[tuple[str, ApiPod]] = []
        self.lease_events: list[tuple[tuple[str, int], tuple[str, tuple[str, ...], int] | None]] = []
        self.in_flight: dict[str, Hold] = {}  # uid -> our placement, between assume and its end
        self.acquired: set[str] = set()  # in-flight claims whose Leases were all created
        self.unanswered: set[str] = set()  # in-flight pods whose bind timed out: the worker is done, a retry is due
        for key, value in self.leases.items():
            self.ledger.lease_seen(self._record(key, value))
        for pod in self.pods.values():
            if pod.alive and pod.bound is not None:
                self.ledger.pod_bound(pod.bound)

    def _record(self, key: tuple[str, int], value: tuple[str, tuple[str, ...], int]) -> LeaseRecord:
        excl, holders, rv = value
        pods = {h: f"ns/{self.pods[h].name}" for h in holders}
        return LeaseRecord(objects.lease_name(*key), key[0], key[1], excl, holders, pods, str(rv))

    def _live(self, name: str) -> ApiPod | None:
        """The pod called `name` now, if one is alive."""
        pod = self.pods.get(self.named.get(name, ""))
        return pod if pod is not None and pod.alive else None

    def _bound_shown(self, uid: str) -> bool:
        """The pod watch has delivered the pod bound (its bound event is no longer on the way)."""
        pod = self.pods[uid]
        return pod.bound is not None and not any(u == uid and p.bound is not None for u, p in self.pod_events)

    def _attempt(self, name: str) -> str | None:
        """The oldest placement in flight for a pod called `name` (it may be for an earlier pod of that name)."""
        return next((uid for uid in self.in_flight if self.pods[uid].name == name), None)

    def _write_lease(self, key: tuple[str, int], value: tuple[str, tuple[str, ...]] | None) -> None:
        self.rv += 1
        if value is None:
            self.leases.pop(key, None)
            self.lease_events.append((key, None))
        else:
            self.leases[key] = (value[0], value[1], self.rv)
            self.lease_events.append((key, self.leases[key]))

    def _end(self, uid: str) -> None:
        self.in_flight.pop(uid, None)
        self.acquired.discard(uid)
        self.unanswered.discard(uid)

    def _pod_event(self, pod: ApiPod) -> None:
        self.pod_events.append((pod.uid, dataclasses.replace(pod)))

    # ---- the rules ------------------------------------------------------------------------------------------
    # Each picks among the pods it can act on (`pick` indexes that list, oldest first), and the rules that
    # wipe what is under way (a restart, a settle, a delete) run only when `now` is drawn, one time in five (in
    # two for a delete), as Hypothesis draws rules evenly. With names drawn blindly and every rule as likely, most
    # steps did nothing or undid the rest: with `confirm` broken to drop the hold (a claim could then take a map
    # pod's GPU), no seed of seven found it in 1500 examples; now nine of ten do, seven within 500. The regression
    # tests below call the name-keyed methods the rules pick for.

    @precondition(lambda self: any(self._live(name) is None for name in NAMES))
    @rule(pick=st.integers(0, 2))
    def new_pod(self, pick: int) -> None:
        free = [name for name in NAMES if self._live(name) is None]
        self.create_pod(free[pick % len(free)])

    @precondition(lambda self: any(pod.alive for pod in self.pods.values()))
    @rule(pick=st.integers(0, 2), now=st.sampled_from([True, False]))
    def delete_one(self, pick: int, now: bool) -> None:
        if not now:
            return
        live = [pod.name for pod in self.pods.values() if pod.alive]
        self.delete_pod(live[pick % len(live)])

    @precondition(lambda self: bool(self._placeable()))
    @rule(
        pick=st.integers(0, 2),
        node=st.sampled_from(NODES),
        count=st.integers(1, 2),
        shared=st.booleans(),
        as_map=st.booleans(),
    )
    def place_one(self, pick: int, node: str, count: int, shared: bool, as_map: bool) -> None:
        names = self._placeable()
        self.place(names[pick % len(names)], node, count, shared, as_map)

    @precondition(lambda self: bool(self._acquirable()))
    @rule(pick=st.integers(0, 2), fail_at=st.sampled_from([None, None, 0, 1]))
    def acquire_one(self, pick: int, fail_at: int | None) -> None:
        uids = self._acquirable()
        self._acquire(uids[pick % len(uids)], fail_at)

    @precondition(lambda self: bool(self._bindable()))
    @rule(pick=st.integers(0, 2), outcome=st.sampled_from(["ok", "refused", "timeout"]))
    def bind_one(self, pick: int, outcome: str) -> None:
        uids = self._bindable()
        self._bind(uids[pick % len(uids)], outcome)

    def _placeable(self) -> list[str]:
        """Names of the pods the scheduler would place now: alive and unbound, not being placed (or due a retry)."""
        return [
            pod.name
            for pod in self.pods.values()
            if pod.alive and ((pod.bound is None and pod.uid not in self.in_flight) or self._retry_due(pod.uid))
        ]

    def _retry_due(self, uid: str) -> bool:
        """A map pod whose bind timed out while the cache still shows it pending (the bind may have taken effect,
        its event is on the way): Scheduler._schedule tries it again, reading the same map entry. (A claim pod's
        retry reuses the hold it assumed, ClaimPath.place: nothing new for the ledger.)"""
        return uid in self.unanswered and self.in_flight[uid].source == "map" and not self._bound_shown(uid)

    def _acquirable(self) -> list[str]:
        return [uid for uid in self.in_flight if self.in_flight[uid].source == "claim" and uid not in self.acquired]

    def _bindable(self) -> list[str]:
        return [uid for uid in self.in_flight if self.in_flight[uid].source == "map" or uid in self.acquired]

    # ---- the world ------------------------------------------------------------------------------------------
    def create_pod(self, name: str) -> None:
        if self._live(name) is not None:
            return
        # A new uid, never one of a pod that was: the API makes a fresh one for every object it creates.
        earlier = sum(1 for pod in self.pods.values() if pod.name == name)
        uid = f"{name}.{earlier}" if earlier else name
        self.pods[uid] = ApiPod(uid, name)
        self.named[name] = uid
        self._pod_event(self.pods[uid])

    def delete_pod(self, name: str) -> None:
        pod = self._live(name)
        if pod is not None:
            pod.alive = False
            self._pod_event(pod)

    @precondition(lambda self: bool(self.pod_events))
    @rule()
    def deliver_pod_event(self) -> None:
        if not self.pod_events:
            return
        uid, pod = self.pod_events.pop(0)
        if not pod.alive:
            self.ledger.pod_gone(uid)
        elif pod.bound is not None:
            self.ledger.pod_bound(pod.bound)

    @precondition(lambda self: bool(self.lease_events))
    @rule()
    def deliver_lease_event(self) -> None:
        if not self.lease_events:
            return
        key, value = self.lease_events.pop(0)
        if value is None:
            self.ledger.lease_deleted(key)
        else:
            self.ledger.lease_seen(self._record(key, value))

    @rule(now=st.sampled_from([True, False, False, False, False]))
    def restart_scheduler(self, now: bool = True) -> None:
        if now:
            self.restart()

    # ---- the scheduler's decisions ---------------------------------------------------------------------------
    def place(self, name: str, node: str, count: int, shared: bool, as_map: bool) -> None:
        pod = self._live(name)
        if pod is None:
            return
        uid = pod.uid
        if uid in self.in_flight:
            if self._retry_due(uid):  # the same map entry, so the same hold, assumed again
                # It may conflict with a Lease the ledger saw since the first try (a failed claim's, not released
                # yet): the scheduler then reports the pod waiting and the hold stays as it was. Never with a pod's
                # hold: the first try's hold is still there, so no other pod can have been given those GPUs.
                conflicts = self.ledger.assume(self.in_flight[uid])
                assert all(c.holder.startswith("Lease ") for c in conflicts), conflicts
            return
        if pod.bound is not None:
            return
        if self.ledger.releasing(uid):
            return
        nodes = [allocator.Node(n, tuple(allocator.Device(i) for i in range(GPUS))) for n in NODES if n == node]
        excl = "Shared" if shared or as_map else "Exclusive"
        outcome = allocator.allocate(allocator.Request(count=count, exclusivity=excl), nodes, held=self.ledger.holdings)
        if isinstance(outcome, allocator.NoFit):
            return
        hold = (
            Hold(uid, f"ns/{name}", node, outcome.gpu_ids, "Shared", "map")
            if as_map
            else Hold(uid, f"ns/{name}", node, outcome.gpu_ids, excl, "claim", "c")
        )
        assert self.ledger.assume(hold) == [], "the allocator chose GPUs the ledger says are held"
        self.in_flight[uid] = hold

    def acquire_leases(self, name: str, fail_at: int | None) -> None:
        uid = self._attempt(name)
        if uid is not None:
            self._acquire(uid, fail_at)

    def _acquire(self, uid: str, fail_at: int | None) -> None:
        """Create the Leases of an in-flight claim (the API refuses a taken GPU); the call at `fail_at` fails
        (the Leases created before it stay in the API), and a failure or refusal ends the attempt."""
        hold = self.in_flight[uid]
        if hold.source != "claim" or uid in self.acquired:
            return
        for i, gpu in enumerate(hold.gpu_ids):
            key = (hold.node, gpu)
            current = self.leases.get(key)
            if current is not None and uid in current[1]:
                continue
            if i == fail_at or (current is not None and not (hold.exclusivity == "Shared" and current[0] == "Shared")):
                self._end(uid)
                self.ledger.forget(uid)
                return
            self._write_lease(key, (hold.exclusivity, (current[1] if current else ()) + (uid,)))
        self.acquired.add(uid)  # every Lease was created: the placer goes on to bind, whatever happens next

    def bind(self, name: str, outcome: str) -> None:
        uid = self._attempt(name)
        if uid is not None:
            self._bind(uid, outcome)

    def _bind(self, uid: str, outcome: str) -> None:
        """Bind an in-flight pod whose Leases all exist: bound, refused (the attempt ends), or a timeout after
        which the outcome is unknown (the hold stays assumed; the API may or may not have bound it). The Binding
        names the pod's uid, so one for a pod since deleted (and perhaps created again) binds nothing."""
        hold = self.in_flight[uid]
        if hold.source == "claim" and uid not in self.acquired:
            return
        pod = self.pods[uid]
        if pod.alive and pod.bound is not None and pod.bound.node == hold.node:
            # The API answers 409: an earlier attempt that timed out did bind it. As the scheduler does
            # (_bound_where), reading the pod bound to this node counts as done.
            self._end(uid)
            self.ledger.confirm(uid)
            return
        if outcome == "refused" or not pod.alive or pod.bound is not None:
            self._end(uid)
            self.ledger.forget(uid)
            return
        pod.bound = dataclasses.replace(hold, bound=True)
        self._pod_event(pod)
        if outcome == "ok":
            self._end(uid)
            self.ledger.confirm(uid)
        else:
            self.unanswered.add(uid)

    @precondition(lambda self: bool(self.leases))
    @rule()
    def reconcile_one(self) -> None:
        """The release worker on one Lease: read it fresh, verify unknown holders with the API, then remove."""
        for key, value in list(self.leases.items()):
            record = self._record(key, value)
            plan = self.ledger.lease_plan(record)
            for uid in plan.verify:
                self._verify(uid)
            plan = self.ledger.lease_plan(record)
            if plan.remove and not plan.verify:
                self._write_lease(key, (value[0], plan.keep) if plan.keep else None)
                return

    def _verify(self, uid: str) -> None:
        pod = self.pods.get(uid)
        if pod is None or not pod.alive:
            self.ledger.pod_gone(uid)
        elif pod.bound is not None:
            self.ledger.pod_bound(pod.bound)
        else:
            self.ledger.pod_pending(uid)

    # ---- what must always hold -------------------------------------------------------------------------------
    @invariant()
    def a_free_index_kept_up_by_the_ledgers_changes_decides_as_reading_every_node(self) -> None:
        """allocator.FreeIndex, told only of the nodes Ledger.changed_since names, gives every request the
        allocator's decision from reading each node's holdings now."""
        changed = self.ledger.changed_since(self.mark)
        assert changed is not None  # a run is far shorter than the record
        self.mark = self.ledger.position()
        for index in self.indexes.values():
            index.update(changed)
        for request in INDEXED_REQUESTS:
            index = self.indexes[allocator.FreeIndex.kind_of(request)]
            read = allocator.allocate(request, INVENTORY, held=self.ledger.holdings, cursor="n1")
            indexed = allocator.allocate(request, INVENTORY, held=self.ledger.holdings, cursor="n1", index=index)
            assert indexed == read, (request, indexed, read)

    @invariant()
    def ledger_is_consistent(self) -> None:
        # A pod already gone may still show bound in the events on their way (its bind took effect, the retry
        # found it gone, its GPUs went to another): not a live holder, as the API says; its own event drops it.
        self.ledger.check(gone={uid for uid, pod in self.pods.items() if not pod.alive})

    @invariant()
    def no_exclusive_gpu_has_two_live_holders(self) -> None:
        users: dict[tuple[str, int], list[Hold]] = {}
        for pod in self.pods.values():
            if pod.alive and pod.bound is not None:
                for key in pod.bound.gpus:
                    users.setdefault(key, []).append(pod.bound)
        for key, holds in users.items():
            if len(holds) > 1:
                assert all(h.exclusivity == "Shared" for h in holds), (key, holds)

    @invariant()
    def the_ledger_and_the_occupancy_model_count_the_same_gpus_busy(self) -> None:
        """The ledger (what the scheduler allocates from) and the occupancy model (what the board and kubectl gpu
        show) read from the same holds and Leases: the same GPUs are busy, and the same of them Exclusive."""
        holds, leases = list(self.ledger.holds()), list(self.ledger.leases())
        for node in {h.node for h in holds} | {lease.node for lease in leases}:
            model = occupancy.node(
                node,
                None,
                (LedgerPod(h) for h in holds if h.node == node),
                (occupancy.Lease(r.name, r.name, r, r.node) for r in leases if r.node == node),
                lambda uid: LedgerPod(h) if (h := self.ledger.hold(uid)) is not None else None,
            )
            holdings = self.ledger.holdings(node)
            assert {g for h in holdings for g in h.gpu_ids} == {g.id for g in model.gpus if g.holders}, node
            exclusive = {g for h in holdings if h.exclusivity == "Exclusive" for g in h.gpu_ids}
            assert exclusive == {g.id for g in model.gpus if g.holders and g.exclusivity == "Exclusive"}, node

    @rule(now=st.sampled_from([True, False, False, False, False]))
    def settle_and_check_no_release_is_lost(self, now: bool = True) -> None:
        """Deliver every event, finish every placement as failed, reconcile until quiet: then no Lease may name a
        pod that is gone or holds nothing, and every Exclusive Lease names one live holder."""
        if not now:
            return
        for uid in list(self.in_flight):
            self._end(uid)
            if self.pods[uid].bound is None:
                self.ledger.forget(uid)
        for _ in range(200):
            while self.pod_events or self.lease_events:
                self.deliver_pod_event()
                self.deliver_lease_event()
            before = dict(self.leases)
            self.reconcile_one()
            if self.leases == before and not self.lease_events:
                break
        for key, (_excl, holders, _) in self.leases.items():
            for uid in holders:
                pod = self.pods[uid]
                assert pod.alive and pod.bound is not None and key in set(pod.bound.gpus), (
                    f"lease {key} still names {uid}, which holds nothing: a release was lost"
                )
        # Every event delivered: the ledger holds what the API shows, no more (a gone pod's hold kept for ever
        # would keep its GPUs busy for ever) and no less.
        held = {hold.uid: hold for hold in self.ledger.holds()}
        bound = {uid: pod.bound for uid, pod in self.pods.items() if pod.alive and pod.bound is not None}
        assert held == bound, f"the ledger holds {held}, the API shows {bound}"


def schedule_one_gpu(m: LedgerMachine, name: str) -> None:
    m.create_pod(name)
    m.place(name, "n1", 1, False, False)
    m.acquire_leases(name, None)
    m.bind(name, "ok")


def test_machine_regression_after_a_restart_the_lease_of_a_bound_pod_is_kept():
    """After a restart the release worker must not release the Lease of a pod bound before it. (Written when the
    model delivered the pod list after the release worker had run; the scheduler never does that, see
    LedgerMachine.restart, so now the ledger knows the holder from the list. The sequence is kept.)"""
    m = LedgerMachine()
    m.start()
    schedule_one_gpu(m, "p0")
    m.restart_scheduler()
    m.reconcile_one()
    while m.lease_events:
        m.deliver_lease_event()
    schedule_one_gpu(m, "p1")
    m.no_exclusive_gpu_has_two_live_holders()
    m.settle_and_check_no_release_is_lost()


def test_machine_a_lease_of_a_pod_deleted_while_the_scheduler_was_down_is_verified_then_released():
    """The list after a restart does not show a deleted pod, so the ledger knows nothing of its Lease's holder:
    the release worker asks the API before it releases the GPU, never on the ledger's silence alone."""
    m = LedgerMachine()
    m.start()
    schedule_one_gpu(m, "p0")
    m.delete_pod("p0")
    m.restart_scheduler()
    record = m._record(("n1", 0), m.leases[("n1", 0)])
    plan = m.ledger.lease_plan(record)
    assert plan.verify == {"p0": "ns/p0"} and not plan.remove
    m.reconcile_one()
    assert ("n1", 0) not in m.leases
    m.settle_and_check_no_release_is_lost()


TestLedgerMachine = LedgerMachine.TestCase
TestLedgerMachine.settings = settings(max_examples=600, stateful_step_count=40)


def test_a_retry_that_finds_the_pod_bound_by_its_timed_out_attempt_keeps_the_hold():
    """Found by the state machine in CI: a bind times out having bound the pod, the retry's 409 shows it bound to
    the node it chose, and (as the scheduler's _bound_where does) that counts as done. Forgetting the hold
    instead let a claim take the GPU until the lagging pod event brought the hold back."""
    state = LedgerMachine()
    state.start()
    state.create_pod(name="p0")
    state.deliver_pod_event()
    state.create_pod(name="p2")
    state.place(as_map=True, count=1, node="n2", shared=False, name="p2")
    state.deliver_pod_event()
    state.bind(outcome="timeout", name="p2")
    state.bind(outcome="ok", name="p2")
    state.place(as_map=False, count=1, node="n2", shared=False, name="p0")
    state.deliver_pod_event()
    state.ledger_is_consistent()
    state.no_exclusive_gpu_has_two_live_holders()
    assert state.ledger.hold("p2") is not None and state.ledger.hold("p2").node == "n2"
    assert state.in_flight.get("p0") is None or 0 not in state.in_flight["p0"].gpu_ids
    state.teardown()


def test_after_a_restart_a_claim_never_takes_the_gpu_of_a_map_pod_bound_before_it():
    """Found by the state machine: a map pod bound on n2 GPU 0, the scheduler restarts, a claim pod is placed
    on n2. The model used to deliver the pod list as lagging events after the restart, so the claim took GPU 0
    before the ledger saw the map pod (which has no Lease to stop it). The scheduler cannot do that: `lead`
    starts only after `watch` has seen every informer's list; the model's restart now does the same."""
    state = LedgerMachine()
    state.start()
    state.create_pod(name="p1")
    state.place(as_map=True, count=1, node="n2", shared=False, name="p1")
    state.create_pod(name="p0")
    state.bind(outcome="ok", name="p1")
    state.restart_scheduler()
    state.place(as_map=False, count=1, node="n2", shared=False, name="p0")
    state.deliver_pod_event()
    state.ledger_is_consistent()
    state.no_exclusive_gpu_has_two_live_holders()
    assert state.in_flight["p0"].gpu_ids == (1,)
    state.settle_and_check_no_release_is_lost()
    state.teardown()


def test_a_pod_created_again_under_a_deleted_pods_name_is_another_pod():
    """Found by the state machine: the model gave a pod created again under the name of a deleted one the same
    uid, which Kubernetes never does (a uid is unique for ever). With its own uid the new pod is another holder:
    while the old pod's delete event lags, its map hold keeps GPU 0 and the claim of the new pod takes GPU 1."""
    state = LedgerMachine()
    state.start()
    state.create_pod(name="p0")
    state.place(as_map=True, count=1, node="n1", shared=False, name="p0")
    state.bind(outcome="ok", name="p0")
    state.delete_pod(name="p0")
    state.create_pod(name="p0")
    state.place(as_map=False, count=1, node="n1", shared=False, name="p0")
    state.ledger_is_consistent()
    assert state.in_flight["p0.1"].gpu_ids == (1,)
    assert state.ledger.hold("p0") is not None  # the API has not said yet that the old pod is gone
    state.deliver_pod_event()  # p0 created
    state.deliver_pod_event()  # p0 bound
    state.deliver_pod_event()  # p0 deleted
    assert state.ledger.hold("p0") is None and state.ledger.holdings("n1") == (allocator.Holding("n1", (1,)),)
    state.ledger_is_consistent()
    state.settle_and_check_no_release_is_lost()
    state.teardown()


def test_a_pod_holds_one_set_of_gpus_however_often_it_is_recorded():
    """Recording a hold for a pod that holds something already replaces it: the same hold assumed again (the retry
    of a map pod whose bind timed out) is counted once, other GPUs move it. `_put` used to overwrite the hold in
    place, leaving the GPU and node indexes counting the old GPUs for ever."""
    ledger = Ledger()
    assert ledger.assume(map_hold("a", gpus=(0,))) == []
    assert ledger.assume(map_hold("a", gpus=(0,))) == []
    ledger.check()
    assert ledger.assume(claim("a", gpus=(1,))) == []
    ledger.check()
    assert ledger.holdings("n1") == (allocator.Holding("n1", (1,)),)
    assert ledger.holders_of(("n1", 0)) == []
    ledger.pod_gone("a")
    ledger.check()
    assert ledger.holdings("n1") == ()


def test_the_retry_of_a_map_pod_whose_bind_timed_out_leaves_the_indexes_right():
    """Found by the state machine once it retried map pods as the scheduler does: after a bind that timed out,
    Scheduler._schedule assumes the same map hold again. `assume` put it a second time, counting its GPUs twice in
    the node index, so they stayed referenced after the pod was gone."""
    state = LedgerMachine()
    state.start()
    state.create_pod(name="p1")
    state.place(as_map=True, count=1, node="n1", shared=False, name="p1")
    state.bind(outcome="timeout", name="p1")
    state.place(as_map=True, count=1, node="n1", shared=False, name="p1")
    state.ledger_is_consistent()
    state.delete_pod(name="p1")
    state.settle_and_check_no_release_is_lost()
    state.ledger_is_consistent()
    assert state.ledger.holdings("n1") == ()
    state.teardown()


def test_the_retry_of_a_map_pod_may_wait_for_a_lease_seen_since_its_first_try():
    """Found by the state machine: a claim's Leases are created, its pod is deleted and the attempt fails; a map pod
    is placed on GPU 0 before the Lease watch shows that Lease, its bind times out, and its retry finds the Lease
    (of a released pod, not deleted yet). The retry waits for it; its first hold stays; nothing is held twice."""
    state = LedgerMachine()
    state.start()
    state.create_pod("p0")
    state.create_pod("p1")
    state.place("p0", "n1", 2, False, False)
    state.acquire_leases("p0", None)
    state.delete_pod("p0")
    state.bind("p0", "ok")  # the pod is gone: the attempt fails, its Leases are to be released
    state.place("p1", "n1", 1, False, True)
    state.deliver_lease_event()
    state.bind("p1", "timeout")
    state.place("p1", "n1", 1, False, False)  # the retry
    state.ledger_is_consistent()
    state.no_exclusive_gpu_has_two_live_holders()
    assert state.ledger.hold("p1") is not None and state.ledger.hold("p1").gpu_ids == (0,)
    state.settle_and_check_no_release_is_lost()
    state.teardown()


def test_a_late_bound_event_of_a_pod_already_gone_is_not_a_second_holder():
    """Found by the state machine: a map pod's bind times out having bound it, the pod is deleted, the retry finds
    it gone and forgets it, and a claim takes its GPU. The bound event, still on its way, then shows the gone pod
    bound on that GPU: the ledger keeps the GPU busy until the delete event follows, but the pod is no live holder
    (the API has no such pod), so nothing is held twice."""
    state = LedgerMachine()
    state.start()
    state.create_pod("p0")
    state.place("p0", "n1", 1, False, False)
    state.create_pod("p1")
    state.create_pod("p2")
    state.place("p1", "n1", 1, False, True)  # GPU 1: p0's claim is on GPU 0
    state.bind("p1", "timeout")  # bound, but no answer
    state.delete_pod("p1")
    state.bind("p1", "ok")  # the retry: the pod is gone
    state.place("p2", "n1", 1, False, False)
    assert state.in_flight["p2"].gpu_ids == (1,)
    while state.pod_events:
        state.deliver_pod_event()
        state.ledger_is_consistent()
        state.no_exclusive_gpu_has_two_live_holders()
    assert [h.uid for h in state.ledger.holders_of(("n1", 1))] == ["p2"]
    state.settle_and_check_no_release_is_lost()
    state.teardown()


@pytest.mark.parametrize(
    "hold",
    [
        Hold("u1", "ns/train-0", "node2", (0, 1), "Exclusive", "claim", "train", True),
        Hold("u2", "ns/one", "node1", (7,), "Shared", "claim", "shared", True),
        Hold("u3", "ns/wide", "a.b-c.example.com", (3, 0, 12), "Exclusive", "claim", "wide", True),
    ],
)
def test_allocation_annotations_read_back_as_the_hold(hold):
    """The Binding's annotations (objects.allocation_annotations) are what objects.hold_from_pod reads back."""
    ns, name = hold.pod.split("/")
    annotations = objects.allocation_annotations(hold) | {constants.CLAIM_ANNOTATION: hold.claim}
    pod = {
        "metadata": {"uid": hold.uid, "namespace": ns, "name": name, "annotations": annotations},
        "spec": {"nodeName": hold.node},
    }
    assert objects.hold_from_pod(pod) == hold
    assert annotations[constants.GPU_IDS_ANNOTATION] == ",".join(map(str, hold.gpu_ids))


@pytest.mark.parametrize("allocated", ["node1:", "node1:x", "node1:1,,a", "", "node1:" + "1," * 3000, ":"], ids=repr)
def test_an_allocation_annotation_that_cannot_be_read_holds_nothing(allocated):
    pod = {
        "metadata": {
            "uid": "u",
            "namespace": "ns",
            "name": "p",
            "annotations": {constants.ALLOCATED_ANNOTATION: allocated},
        },
        "spec": {"nodeName": "node1"},
    }
    assert objects.hold_from_pod(pod) is None
