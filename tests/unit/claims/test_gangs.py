"""Gangs (claims.gangs): reading the members' annotations, the candidate domains, the all-or-nothing transaction and
what the commit's answers make of the members, and a hypothesis state machine that drives the scheduler's own
decision and commit rules (`attempt`, `transact`, `leases_answered`, `binds_answered`, as scheduler.gangs calls
them) through decisions, refused Leases, binds that fail, get no answer or take effect unanswered (the watch showing
them later), members replaced meanwhile, scheduler kills between any two API calls and deleted gangs, against a
model of the API, with the real ledger and allocator. After every step: an Exclusive GPU never has two holders, a
bound member holds its Leases, and the placed members of a Required gang share one zone; after a refused Lease, the
gang holds nothing but what its unanswered binds may have bound; once things settle, no gang is left partly placed
unless a kill or a replaced member cut its binds, no waiting gang holds a Lease, and no gang waits that would fit
(no deadlock, judged by an oracle independent of claims.gangs). Shown failing with the transaction's rollback
removed, with Required trying only its tightest zone, with Required taken as no topology ("g1 is Required in one
zone, but its members are on ['n1', 'n2', 'n3'] (zone a, b)"), and with a refused Lease abandoning a member whose
unanswered bind had bound it ("g1-0 is bound on n1 without the Leases of GPUs [('n1', 0)]")."""

from __future__ import annotations

import dataclasses

import hypothesis.strategies as st
import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from gpu_scheduling import constants
from gpu_scheduling.claims import allocator, gangs
from gpu_scheduling.claims.ledger import Hold, LeaseRecord, Ledger

MIN = constants.GANG_MIN_MEMBERS_ANNOTATION
TOPOLOGY = constants.GANG_TOPOLOGY_ANNOTATION
MODE = constants.GANG_TOPOLOGY_MODE_ANNOTATION


# ---- reading ------------------------------------------------------------------------------------------------------


def test_the_annotation_names_the_gang_before_the_claims_gang_ref():
    assert gangs.gang_name({constants.GANG_ANNOTATION: "a"}, "b") == "a"
    assert gangs.gang_name({}, "b") == "b"
    assert gangs.gang_name({}, None) is None
    assert gangs.gang_name({}, "") is None


@pytest.mark.parametrize(
    ("annotations", "ref", "fragment"),
    [
        ({constants.GANG_ANNOTATION: "Bad_Name"}, None, "annotation gpu.scheduling/gang='Bad_Name' is not a valid"),
        ({}, 7, "its GpuClaim's spec.gangRef is a number; expected"),
        ({constants.GANG_ANNOTATION: "x" * 300}, None, "is not a valid gang name"),
    ],
)
def test_a_malformed_gang_name_is_refused_naming_where_it_came_from(annotations, ref, fragment):
    with pytest.raises(gangs.GangError) as err:
        gangs.gang_name(annotations, ref)
    assert fragment in str(err.value)


def test_a_spec_reads_the_size_and_topology():
    spec = gangs.read({MIN: "4", TOPOLOGY: "topology.kubernetes.io/zone", MODE: "Preferred"}, "train")
    assert spec == gangs.Spec("train", 4, "topology.kubernetes.io/zone", "Preferred")
    assert spec.describe() == "gang train (min 4, Preferred topology.kubernetes.io/zone)"
    assert gangs.read({MIN: "1"}, "t") == gangs.Spec("t", 1)


@pytest.mark.parametrize(
    ("annotations", "fragment"),
    [
        ({}, f"annotation {MIN} is missing"),
        ({MIN: "four"}, "is not a count; expected an integer from 1 to 10000"),
        ({MIN: "0"}, "=0 is out of range"),
        ({MIN: "10001"}, "=10001 is out of range"),
        ({MIN: "٣"}, "is not a count"),  # a non-ASCII digit
        ({MIN: "2", TOPOLOGY: "a b"}, "is not a label key"),
        ({MIN: "2", TOPOLOGY: "zone", MODE: "Sometimes"}, "expected one of Required, Preferred"),
    ],
)
def test_a_malformed_spec_is_refused_naming_the_annotation(annotations, fragment):
    with pytest.raises(gangs.GangError) as err:
        gangs.read(annotations, "train")
    assert fragment in str(err.value) and str(err.value).startswith("gang train: ")


def test_members_that_disagree_are_named():
    with pytest.raises(gangs.GangError) as err:
        gangs.agreed({"ns/a-0": gangs.Spec("a", 2), "ns/a-1": gangs.Spec("a", 3)})
    assert "ns/a-0 says gang a (min 2), ns/a-1 says gang a (min 3)" in str(err.value)


# ---- domains ------------------------------------------------------------------------------------------------------

LABELS = {"n1": {"zone": "a"}, "n2": {"zone": "a"}, "n3": {"zone": "b"}, "n4": {}}


def test_without_topology_every_node_is_one_domain():
    assert gangs.domains(gangs.Spec("g", 2), LABELS, (), {}) == [gangs.Domain("", "", frozenset(LABELS))]


def test_required_tries_the_tightest_zone_first_and_never_unlabelled_nodes():
    found = gangs.domains(gangs.Spec("g", 2, "zone"), LABELS, (), {"n1": 4, "n2": 4, "n3": 2, "n4": 8})
    assert isinstance(found, list)
    assert [(d.value, sorted(d.nodes)) for d in found] == [("b", ["n3"]), ("a", ["n1", "n2"])]


def test_preferred_falls_back_to_every_node_last():
    found = gangs.domains(gangs.Spec("g", 2, "zone", "Preferred"), LABELS, (), {})
    assert isinstance(found, list)
    assert [d.describe() for d in found] == ["zone=a", "zone=b", "any nodes"]


def test_required_stays_in_the_zone_of_members_already_placed():
    found = gangs.domains(gangs.Spec("g", 2, "zone"), LABELS, {"n2"}, {})
    assert isinstance(found, list) and [d.value for d in found] == ["a"]
    split = gangs.domains(gangs.Spec("g", 2, "zone"), LABELS, {"n1", "n3"}, {})
    assert isinstance(split, str) and "2 zone values (a, b)" in split
    assert gangs.domains(gangs.Spec("g", 2, "rack"), LABELS, (), {}) == "no node has the label rack"


# ---- the transaction ----------------------------------------------------------------------------------------------


def test_a_member_that_does_not_fit_undoes_the_domain_and_the_next_domain_is_tried():
    room = {"a": 1, "b": 3}
    log: list[str] = []

    def place(member: str, domain: gangs.Domain) -> tuple[str, str] | str:
        if room[domain.value] == 0:
            return f"{domain.value} is full"
        room[domain.value] -= 1
        log.append(f"+{member}@{domain.value}")
        return (member, domain.value)

    def undo(p: tuple[str, str]) -> None:
        room[p[1]] += 1
        log.append(f"-{p[0]}@{p[1]}")

    domains = [gangs.Domain("zone", "a", frozenset()), gangs.Domain("zone", "b", frozenset())]
    outcome = gangs.transact(["m0", "m1", "m2"], domains, place, undo, str)
    assert isinstance(outcome, gangs.Placed) and outcome.domain.value == "b"
    assert log == ["+m0@a", "-m0@a", "+m0@b", "+m1@b", "+m2@b"]
    assert room == {"a": 1, "b": 0}
    refused = gangs.transact(["m0", "m1"], domains, place, undo, str)
    assert refused == [gangs.Refusal("zone=a", "m1", "a is full"), gangs.Refusal("zone=b", "m0", "b is full")]
    assert room == {"a": 1, "b": 0}


def test_an_attempt_retries_the_assumed_members_in_place_and_they_pin_a_required_gang():
    members = {"ns/m0": "m0", "ns/m1": "m1", "ns/m2": "m2"}
    assumed = Hold("u1", "ns/m1", "n3", (0,))
    plan = gangs.attempt(gangs.Spec("g", 3, "zone"), members, {"ns/m1": assumed}, [], lambda: LABELS, dict)
    assert plan.place == ["m0", "m2"] and plan.retry == {"ns/m1": assumed}
    assert isinstance(plan.candidates, list) and [d.value for d in plan.candidates] == ["b"]
    bound_in_a = gangs.attempt(gangs.Spec("g", 3, "zone"), members, {}, ["n1"], lambda: LABELS, dict)
    assert isinstance(bound_in_a.candidates, list) and [d.value for d in bound_in_a.candidates] == ["a"]
    split = gangs.attempt(gangs.Spec("g", 3, "zone"), members, {"ns/m1": assumed}, ["n1"], lambda: LABELS, dict)
    assert isinstance(split.candidates, str) and "2 zone values (a, b)" in split.candidates


def test_an_attempt_without_topology_reads_no_labels():
    def unread() -> dict[str, dict[str, str]]:
        raise AssertionError("read the nodes' labels for a gang without a topology")

    plan = gangs.attempt(gangs.Spec("g", 2), {"ns/m0": "m0", "ns/m1": "m1"}, {}, ["n1"], unread, unread)  # type: ignore[arg-type]
    assert plan.place == ["m0", "m1"] and plan.candidates == [gangs.ANYWHERE]


def test_one_refused_lease_abandons_every_member_but_the_unanswered_and_none_is_bound():
    assert gangs.leases_answered(["m0", "m1", "map"], ["r0"], [True, True, True]) is None
    assert gangs.leases_answered(["map"], [], []) is None  # map members only: no Lease to create
    refused = gangs.leases_answered(["m0", "m1", "map"], [], [True, False])
    assert refused == gangs.Settled([], ["m0", "m1", "map"], []) and not refused.whole
    # r0's earlier bind got no answer: it may be bound, so it keeps its Leases, even when its own one is refused
    assert gangs.leases_answered(["m0"], ["r0"], [True, False]) == gangs.Settled([], ["m0"], ["r0"])


def test_each_bind_answer_settles_its_member_and_an_unanswered_one_stays_assumed():
    settled = gangs.binds_answered(["m0", "m1", "m2", "m3"], [True, None, False, True])
    assert settled == gangs.Settled(["m0", "m3"], ["m2"], ["m1"]) and not settled.whole
    assert gangs.binds_answered(["m0", "m1"], [True, True]).whole
    with pytest.raises(ValueError):
        gangs.binds_answered(["m0", "m1"], [True])


def test_the_explanation_is_bounded():
    refusals = [gangs.Refusal(f"zone={i}", "m", "full") for i in range(50)]
    text = gangs.explain(gangs.Spec("g", 2, "zone"), refusals)
    assert text.count("does not fit:") == gangs.DOMAINS_SHOWN and text.endswith("; and 47 more domains")


def test_the_book_tracks_members_and_forgets_empty_gangs():
    book = gangs.Book()
    book.set("ns/a", "ns/g")
    book.set("ns/b", "ns/g")
    book.complete.add("ns/g")
    book.set("ns/a", None)
    assert book.members("ns/g") == {"ns/b"} and "ns/g" in book.complete
    book.set("ns/b", "ns/h")
    assert book.members("ns/g") == frozenset() and "ns/g" not in book.complete
    assert list(book.gangs()) == ["ns/h"]


# ---- the state machine --------------------------------------------------------------------------------------------

NODES = {f"n{i}": allocator.Node(f"n{i}", tuple(allocator.Device(g) for g in range(4)), {}) for i in range(1, 5)}
ZONES = {"n1": {"zone": "a"}, "n2": {"zone": "a"}, "n3": {"zone": "b"}, "n4": {"zone": "b"}}


BINDS = st.sampled_from(["bound", "bound", "lost", "unanswered", "replaced"])
"""How a bind goes: the simplest first, so that shrinking drops the faults it can."""


def _fault(data: st.DataObject, label: str, one_in: int) -> bool:
    """A fault, about one time in `one_in`; no fault is the simplest draw, so shrinking drops the faults it can."""
    return data.draw(st.integers(1, one_in), label=label) == one_in


@dataclasses.dataclass
class Gang:
    name: str
    spec: gangs.Spec
    count: int  # GPUs per member
    members: list[str]  # uids of its pods, in order (a pod replaced by its Job's controller: the new one's)
    cut: bool = False  # a kill cut its binds, or a member was replaced meanwhile: it may be left partly placed


class GangMachine(RuleBasedStateMachine):
    """The scheduler's gang decision (scheduler.gangs) on the real ledger and allocator: `claims.gangs.attempt` and
    `transact` decide, with no await; the commit's calls go to a model of the API (`bound`: uid -> hold, `leases`:
    (node, GPU) -> uid), and what their answers make of the members is `leases_answered` and `binds_answered`, the
    code the scheduler runs. The test itself does only what the claim path does to the ledger for each verdict
    (ClaimPath.choose: allocate and assume; retract; failed: forget, the reconciler deletes the Leases; bound:
    confirm) and what the API and its watch do."""

    @initialize()
    def start(self) -> None:
        self.ledger = Ledger()
        self.bound: dict[str, Hold] = {}
        self.leases: dict[tuple[str, int], str] = {}
        self.unseen: set[str] = set()  # bound in the API, and the watch has not shown it to the scheduler yet
        self.unanswered: set[str] = set()  # assumed, and their last bind got no answer
        self.gangs: dict[str, Gang] = {}
        self.serial = 0

    # ---- the scheduler: claims.gangs decides, the claim path's ledger updates --------------------------------------
    def _pending(self, gang: Gang) -> list[str]:
        """The members the API has not bound."""
        return [u for u in gang.members if u not in self.bound]

    def _waiting(self, gang: Gang) -> list[str]:
        """The members the scheduler sees unbound (GangPath._is_bound: the pod's nodeName, or a confirmed hold)."""
        return [u for u in gang.members if u not in self.bound or u in self.unseen]

    def _free(self) -> dict[str, int]:
        return {n: 4 - sum(len(h.gpu_ids) for h in self.ledger.holdings(n)) for n in NODES}

    def _attempt(self, gang: Gang, data: st.DataObject, faults: bool) -> None:
        """One decision for `gang`, as GangPath._decide and _commit make it."""
        waiting = self._waiting(gang)
        plan = gangs.attempt(
            gang.spec,
            {u: u for u in waiting},
            {u: h for u in waiting if (h := self.ledger.hold(u)) is not None},
            [self.bound[u].node for u in gang.members if u in self.bound and u not in self.unseen],
            lambda: ZONES,
            self._free,
        )
        if isinstance(plan.candidates, str):
            return
        request = allocator.Request(gang.count)

        def choose(uid: str, domain: gangs.Domain) -> Hold | str:
            nodes = [n for name, n in NODES.items() if not domain.key or name in domain.nodes]
            outcome = allocator.allocate(request, nodes, held=self.ledger.holdings)
            if isinstance(outcome, allocator.NoFit):
                return outcome.message
            hold = Hold(uid, f"ns/{uid}", outcome.node, outcome.gpu_ids, "Exclusive", "claim", gang.name)
            assert self.ledger.assume(hold) == []
            return hold

        before = {h.uid: h for h in self.ledger.holds()}
        outcome = gangs.transact(plan.place, plan.candidates, choose, lambda h: self.ledger.retract(h.uid), str)
        if isinstance(outcome, list):
            assert {h.uid: h for h in self.ledger.holds()} == before, "a refused gang left something assumed"
            return
        self._commit(gang, outcome.placements, list(plan.retry.values()), data, faults)

    def _commit(self, gang: Gang, placed: list[Hold], retried: list[Hold], data: st.DataObject, faults: bool) -> None:
        holds = placed + retried
        # The Leases of every member, concurrently; one may fail (a transient error) after some were created.
        failing: Hold | None = None
        if faults and _fault(data, "a Lease refused", 3):
            failing = data.draw(st.sampled_from(holds), label="refused to")
        locked: list[bool] = []
        for h in holds:
            keys = list(h.gpus)
            if h is failing:
                keys = keys[: data.draw(st.integers(0, len(keys) - 1), label="Leases created before")]
            created = [self._create_lease(key, h.uid) for key in keys]  # each one tried, as ClaimPath.acquire does
            locked.append(all(created) and h is not failing)
        refused = gangs.leases_answered(placed, retried, locked)
        if refused is not None:
            for h in refused.abandoned:
                self._failed(h.uid)
            retrying = {h.uid for h in retried}
            held = [
                u
                for u in self._waiting(gang)
                if u not in retrying and (self.ledger.hold(u) is not None or u in self.leases.values())
            ]
            assert not held, f"{gang.name}: a Lease was refused, yet {held} still hold GPUs"
            return
        if faults and _fault(data, "killed before the binds", 6):
            self._kill()
            return
        # The binds, concurrently; the scheduler may die with some of them made.
        made = len(holds)
        if faults and len(holds) > 1 and _fault(data, "killed during the binds", 6):
            made = data.draw(st.integers(1, len(holds) - 1), label="binds made before the kill")
        outcomes: list[bool | None] = []
        for h in holds[:made]:
            what = data.draw(BINDS, label=f"bind {h.uid}") if faults else "bound"
            if what == "lost":  # no answer, and it did not take effect
                outcomes.append(None)
            elif what == "unanswered":  # no answer, but it did: the scheduler learns it from the watch, later
                self._bind(h)
                self.unseen.add(h.uid)
                outcomes.append(None)
            elif what == "replaced":  # the pod was deleted, its Job made another: the bind answers 404
                self._replace(gang, h.uid)
                outcomes.append(False)
            else:
                outcomes.append(self._bind(h))
        if made < len(holds):
            gang.cut = True
            self._kill()
            return
        settled = gangs.binds_answered(holds, outcomes)
        for h in settled.bound:
            self.ledger.confirm(h.uid)
        for h in settled.abandoned:
            self._failed(h.uid)
        self.unanswered -= {h.uid for h in holds}
        self.unanswered |= {h.uid for h in settled.unanswered}

    def _failed(self, uid: str) -> None:
        """ClaimPath.failed, as the ledger and the API see it: the pod holds nothing, its Leases are deleted."""
        self.ledger.forget(uid)
        self._release(uid)

    # ---- the API ------------------------------------------------------------------------------------------------
    def _create_lease(self, key: tuple[str, int], uid: str) -> bool:
        """Create the Lease of GPU `key` naming `uid` (or find it ours already); False when another pod holds it."""
        if self.leases.setdefault(key, uid) != uid:
            return False
        self.ledger.lease_seen(LeaseRecord(f"gpu-{key[0]}-{key[1]}", key[0], key[1], "Exclusive", (uid,)))
        return True

    def _release(self, uid: str) -> None:
        for key in [k for k, u in self.leases.items() if u == uid]:
            del self.leases[key]
            self.ledger.lease_deleted(key)

    def _bind(self, hold: Hold) -> bool:
        """Bind the pod of `hold`; whether it is bound to that node now (Scheduler.bind: a pod bound already is
        read back, and it counts when it is on that node)."""
        if hold.uid in self.bound:
            return self.bound[hold.uid].node == hold.node
        self.bound[hold.uid] = dataclasses.replace(hold, bound=True)
        return True

    def _watch(self) -> None:
        """The watch shows the scheduler the pods bound meanwhile."""
        for uid in sorted(self.unseen):
            self.ledger.pod_bound(self.bound[uid])
        self.unseen.clear()

    def _replace(self, gang: Gang, uid: str) -> None:
        """Pod `uid` is deleted (the watch says so) and its Job's controller makes another in its place."""
        self.ledger.pod_gone(uid)
        self.bound.pop(uid, None)  # an earlier bind may have taken effect
        self.unseen.discard(uid)
        self.serial += 1
        gang.members[gang.members.index(uid)] = f"{uid.partition('.')[0]}.{self.serial}"
        gang.cut = True

    def _kill(self) -> None:
        """The scheduler dies: a new one rebuilds the ledger from the API, and the Lease reconciler releases the
        Leases of pods that are not bound (nobody is placing them now)."""
        self.ledger = Ledger()
        self.unseen.clear()  # the new one lists the pods
        self.unanswered.clear()
        for gang in self.gangs.values():
            gang.cut |= 0 < self._bound_count(gang) < len(gang.members)
        for hold in self.bound.values():
            self.ledger.pod_bound(hold)
        for uid in {u for u in self.leases.values() if u not in self.bound}:
            for key in [k for k, u in self.leases.items() if u == uid]:
                del self.leases[key]
        for key, uid in self.leases.items():
            self.ledger.lease_seen(LeaseRecord(f"gpu-{key[0]}-{key[1]}", key[0], key[1], "Exclusive", (uid,)))

    def _order(self) -> list[Gang]:
        """As the queue serves them (all of one priority here): by age."""
        return sorted(self.gangs.values(), key=lambda g: int(g.name[1:]))

    def _bound_count(self, gang: Gang) -> int:
        return sum(1 for u in gang.members if u in self.bound)

    # ---- rules --------------------------------------------------------------------------------------------------
    @rule(
        members=st.integers(1, 4),
        count=st.integers(1, 4),
        topology=st.sampled_from(["", "Required", "Preferred"]),
    )
    def new_gang(self, members: int, count: int, topology: str) -> None:
        self.serial += 1
        name = f"g{self.serial}"
        spec = gangs.Spec(name, members, "zone" if topology else "", topology or "Required")  # type: ignore[arg-type]
        self.gangs[name] = Gang(name, spec, count, [f"{name}-{i}" for i in range(members)])

    @precondition(lambda self: any(self._waiting(g) for g in self.gangs.values()))
    @rule(data=st.data())
    def attempt(self, data: st.DataObject) -> None:
        waiting = [g for g in self._order() if self._waiting(g)]
        gang = data.draw(st.sampled_from(waiting), label="gang")
        self._attempt(gang, data, faults=True)

    @precondition(lambda self: bool(self.gangs))
    @rule(data=st.data())
    def delete_gang(self, data: st.DataObject) -> None:
        gang = self.gangs.pop(data.draw(st.sampled_from(sorted(self.gangs)), label="deleted"))
        for uid in gang.members:
            self.bound.pop(uid, None)
            self.unseen.discard(uid)
            self.unanswered.discard(uid)
            self.ledger.pod_gone(uid)
            self._release(uid)

    @precondition(lambda self: any(not h.bound for h in self.ledger.holds()))
    @rule()
    def kill(self) -> None:
        """The scheduler dies with something assumed."""
        self._kill()

    @precondition(lambda self: bool(self.unseen))
    @rule(data=st.data())
    def watch(self, data: st.DataObject) -> None:
        """The watch shows the scheduler one pod bound meanwhile."""
        uid = data.draw(st.sampled_from(sorted(self.unseen)), label="shown bound")
        self.ledger.pod_bound(self.bound[uid])
        self.unseen.discard(uid)

    @rule(data=st.data())
    def settle(self, data: st.DataObject) -> None:
        """No more faults: the watch catches up and the scheduler tries every waiting gang, in the queue's order,
        until nothing changes."""
        self._watch()
        for _ in range(3 * len(self.gangs) + 1):
            before = dict(self.bound)
            for gang in self._order():
                if self._pending(gang):
                    self._attempt(gang, data, faults=False)
            if self.bound == before:
                break
        for gang in self.gangs.values():
            bound = self._bound_count(gang)
            if 0 < bound < len(gang.members):
                assert gang.cut, f"{gang.name} is partly placed ({bound} of {len(gang.members)}) with no kill"
            if bound < len(gang.members):
                # A member whose bind got no answer stays assumed, Leases and all, until a bind says where it is.
                held = [u for u in self._pending(gang) if u in self.leases.values() and u not in self.unanswered]
                assert not held, f"{gang.name} waits holding Leases {held}"
                assert not self._fits_now(gang), f"{gang.name} waits though it fits now (a deadlock)"
            else:
                gang.cut = False

    def _fits_now(self, gang: Gang) -> bool:
        """An oracle independent of claims.gangs: members of one size fit a set of nodes when the nodes' free GPUs,
        each divided by that size, add up to the members (a greedy packing of equal items is optimal)."""
        pending = [u for u in self._pending(gang) if self.ledger.hold(u) is None]
        free = {n: 4 - sum(len(h.gpu_ids) for h in self.ledger.holdings(n)) for n in NODES}
        fixed = {ZONES[self.bound[u].node]["zone"] for u in gang.members if u in self.bound}
        zones = {z: [n for n in NODES if ZONES[n]["zone"] == z] for z in ("a", "b")}
        if not gang.spec.topology:
            domains = [list(NODES)]
        else:
            domains = [nodes for z, nodes in zones.items() if not fixed or z in fixed]
            if gang.spec.mode == "Preferred":
                domains.append(list(NODES))
        return bool(pending) and any(sum(free[n] // gang.count for n in d) >= len(pending) for d in domains)

    # ---- invariants ---------------------------------------------------------------------------------------------
    @invariant()
    def no_gpu_has_two_holders(self) -> None:
        if not hasattr(self, "ledger"):
            return
        self.ledger.check()
        taken: dict[tuple[str, int], str] = {}
        for hold in self.bound.values():
            for key in hold.gpus:
                assert key not in taken, f"{key} bound to {taken[key]} and {hold.uid}"
                taken[key] = hold.uid
        for key, uid in self.leases.items():
            assert taken.get(key, uid) == uid, f"Lease {key} names {uid}, bound to {taken[key]}"

    @invariant()
    def a_bound_member_holds_its_leases(self) -> None:
        """No member is bound before its Leases are held, and none of a bound member's is released."""
        if not hasattr(self, "ledger"):
            return
        for uid, hold in self.bound.items():
            missing = [key for key in hold.gpus if self.leases.get(key) != uid]
            assert not missing, f"{uid} is bound on {hold.node} without the Leases of GPUs {missing}"

    @invariant()
    def a_required_gang_stays_in_one_domain(self) -> None:
        """Every placed member (assumed or bound) of a Required gang is on nodes of one value of its label."""
        if not hasattr(self, "ledger"):
            return
        for gang in self.gangs.values():
            if not gang.spec.topology or gang.spec.mode != "Required":
                continue
            nodes = {self.bound[u].node for u in gang.members if u in self.bound}
            nodes |= {h.node for u in gang.members if (h := self.ledger.hold(u)) is not None}
            values = {ZONES[n][gang.spec.topology] for n in nodes}
            assert len(values) <= 1, (
                f"{gang.name} is Required in one {gang.spec.topology}, but its members are on {sorted(nodes)} "
                f"({gang.spec.topology} {', '.join(sorted(values))})"
            )


TestGangMachine = GangMachine.TestCase
TestGangMachine.settings = settings(max_examples=300, stateful_step_count=30, deadline=None)
