"""The GPU ledger: table tests of each step, and a hypothesis state machine that drives a whole scheduler's worth
of decisions, watch events (delivered late), failed API calls and restarts against a model of the API, checking
after every step that no Exclusive GPU has two live holders and, once things settle, that no release was lost."""

from __future__ import annotations

import dataclasses

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from gpu_scheduling.claims import allocator, objects
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


# ---- the state machine ------------------------------------------------------------------------------------------

NODES = ("n1", "n2")
GPUS = 2
UIDS = ("p0", "p1", "p2")


@dataclasses.dataclass
class ApiPod:
    uid: str
    bound: Hold | None = None  # what the Binding said, once bound
    alive: bool = True


class LedgerMachine(RuleBasedStateMachine):
    """A scheduler's use of the ledger against a model of the API: pods (bound or not, alive or gone) and GPU
    Leases (the lock: a create fails when the Lease exists). Watch events reach the ledger late, in order, one
    stream each for pods and Leases (they lag each other). API calls may fail; the scheduler may restart."""

    @initialize()
    def start(self) -> None:
        self.pods: dict[str, ApiPod] = {}
        self.leases: dict[tuple[str, int], tuple[str, tuple[str, ...], int]] = {}  # key -> (excl, holders, rv)
        self.rv = 0
        self.restart()

    def restart(self) -> None:
        """A new process: the ledger is rebuilt from fresh lists of the API, which lag each other."""
        self.ledger = Ledger()
        self.pod_events: list[tuple[str, ApiPod | None]] = []
        self.lease_events: list[tuple[tuple[str, int], tuple[str, tuple[str, ...], int] | None]] = []
        self.in_flight: dict[str, Hold] = {}  # our placements between assume and their end
        self.acquired: set[str] = set()  # in-flight claims whose Leases were all created
        for key, value in self.leases.items():
            self.ledger.lease_seen(self._record(key, value))
        # The pod watch lists later than the Lease watch: the pods arrive as events, after the Leases.
        for pod in self.pods.values():
            self._pod_event(pod)

    def _record(self, key: tuple[str, int], value: tuple[str, tuple[str, ...], int]) -> LeaseRecord:
        excl, holders, rv = value
        return LeaseRecord(
            objects.lease_name(*key), key[0], key[1], excl, holders, {h: f"ns/{h}" for h in holders}, str(rv)
        )

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

    def _pod_event(self, pod: ApiPod) -> None:
        self.pod_events.append((pod.uid, dataclasses.replace(pod)))

    # ---- the world ------------------------------------------------------------------------------------------
    @rule(uid=st.sampled_from(UIDS))
    def create_pod(self, uid: str) -> None:
        if uid not in self.pods or not self.pods[uid].alive:
            self.pods[uid] = ApiPod(uid)
            self._pod_event(self.pods[uid])

    @rule(uid=st.sampled_from(UIDS))
    def delete_pod(self, uid: str) -> None:
        pod = self.pods.get(uid)
        if pod is not None and pod.alive:
            pod.alive = False
            self._pod_event(pod)

    @rule()
    def deliver_pod_event(self) -> None:
        if not self.pod_events:
            return
        uid, pod = self.pod_events.pop(0)
        if pod is None or not pod.alive:
            self.ledger.pod_gone(uid)
        elif pod.bound is not None:
            self.ledger.pod_bound(pod.bound)

    @rule()
    def deliver_lease_event(self) -> None:
        if not self.lease_events:
            return
        key, value = self.lease_events.pop(0)
        if value is None:
            self.ledger.lease_deleted(key)
        else:
            self.ledger.lease_seen(self._record(key, value))

    @rule()
    def restart_scheduler(self) -> None:
        self.restart()

    # ---- the scheduler's decisions ---------------------------------------------------------------------------
    @rule(
        uid=st.sampled_from(UIDS),
        node=st.sampled_from(NODES),
        count=st.integers(1, 2),
        shared=st.booleans(),
        as_map=st.booleans(),
    )
    def place(self, uid: str, node: str, count: int, shared: bool, as_map: bool) -> None:
        pod = self.pods.get(uid)
        if pod is None or not pod.alive or pod.bound is not None or uid in self.in_flight:
            return
        if self.ledger.releasing(uid):
            return
        nodes = [allocator.Node(n, tuple(allocator.Device(i) for i in range(GPUS))) for n in NODES if n == node]
        excl = "Shared" if shared or as_map else "Exclusive"
        outcome = allocator.allocate(allocator.Request(count=count, exclusivity=excl), nodes, held=self.ledger.holdings)
        if isinstance(outcome, allocator.NoFit):
            return
        hold = (
            Hold(uid, f"ns/{uid}", node, outcome.gpu_ids, "Shared", "map")
            if as_map
            else Hold(uid, f"ns/{uid}", node, outcome.gpu_ids, excl, "claim", "c")
        )
        assert self.ledger.assume(hold) == [], "the allocator chose GPUs the ledger says are held"
        self.in_flight[uid] = hold

    @rule(uid=st.sampled_from(UIDS), fail_at=st.sampled_from([None, None, 0, 1]))
    def acquire_leases(self, uid: str, fail_at: int | None) -> None:
        """Create the Leases of an in-flight claim (the API refuses a taken GPU); the call at `fail_at` fails
        (the Leases created before it stay in the API), and a failure or refusal ends the attempt."""
        hold = self.in_flight.get(uid)
        if hold is None or hold.source != "claim" or uid in self.acquired:
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

    @rule(uid=st.sampled_from(UIDS), outcome=st.sampled_from(["ok", "refused", "timeout"]))
    def bind(self, uid: str, outcome: str) -> None:
        """Bind an in-flight pod whose Leases all exist: bound, refused (the attempt ends), or a timeout after
        which the outcome is unknown (the hold stays assumed; the API may or may not have bound it)."""
        hold = self.in_flight.get(uid)
        if hold is None:
            return
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
    def ledger_is_consistent(self) -> None:
        self.ledger.check()

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

    @precondition(lambda self: True)
    @rule()
    def settle_and_check_no_release_is_lost(self) -> None:
        """Deliver every event, finish every placement as failed, reconcile until quiet: then no Lease may name a
        pod that is gone or holds nothing, and every Exclusive Lease names one live holder."""
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


def test_machine_regression_a_lease_is_not_released_before_the_lagging_pod_watch_shows_its_holder():
    """After a restart the Lease watch may list before the pod watch: a Lease naming a pod the ledger has not
    seen yet must be verified with the API, never released on the ledger's silence."""

    def schedule_one_gpu(uid: str) -> None:
        m.create_pod(uid)
        m.place(uid, "n1", 1, False, False)
        m.acquire_leases(uid, None)
        m.bind(uid, "ok")

    m = LedgerMachine()
    m.start()
    schedule_one_gpu("p0")
    m.restart_scheduler()
    m.reconcile_one()
    while m.lease_events:
        m.deliver_lease_event()
    schedule_one_gpu("p1")
    m.no_exclusive_gpu_has_two_live_holders()
    m.settle_and_check_no_release_is_lost()


TestLedgerMachine = LedgerMachine.TestCase
TestLedgerMachine.settings = settings(max_examples=600, stateful_step_count=40, deadline=None)


def test_a_retry_that_finds_the_pod_bound_by_its_timed_out_attempt_keeps_the_hold():
    """Found by the state machine in CI: a bind times out having bound the pod, the retry's 409 shows it bound to
    the node it chose, and (as the scheduler's _bound_where does) that counts as done. Forgetting the hold
    instead let a claim take the GPU until the lagging pod event brought the hold back."""
    state = LedgerMachine()
    state.start()
    state.create_pod(uid="p0")
    state.deliver_pod_event()
    state.create_pod(uid="p2")
    state.place(as_map=True, count=1, node="n2", shared=False, uid="p2")
    state.deliver_pod_event()
    state.bind(outcome="timeout", uid="p2")
    state.bind(outcome="ok", uid="p2")
    state.place(as_map=False, count=1, node="n2", shared=False, uid="p0")
    state.deliver_pod_event()
    state.ledger_is_consistent()
    state.no_exclusive_gpu_has_two_live_holders()
    assert state.ledger.hold("p2") is not None and state.ledger.hold("p2").node == "n2"
    assert state.in_flight.get("p0") is None or 0 not in state.in_flight["p0"].gpu_ids
    state.teardown()
