"""Gangs (claims.gangs): reading the members' annotations, the candidate domains, the all-or-nothing transaction,
and a hypothesis state machine that drives gangs through decisions, refused Leases, binds that fail or get no
answer, scheduler kills between any two API calls and deleted gangs, against a model of the API, with the real
ledger and allocator: an Exclusive GPU never has two holders, and once things settle no gang is left partly
placed unless a kill cut its binds, no waiting gang holds a Lease, and no gang waits that would fit (no deadlock,
judged by an oracle independent of claims.gangs)."""

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


@dataclasses.dataclass
class Gang:
    name: str
    spec: gangs.Spec
    count: int  # GPUs per member
    members: list[str]  # uids, in order
    killed_mid_bind: bool = False


class GangMachine(RuleBasedStateMachine):
    """The scheduler's three steps (scheduler.gangs: decide with no await, then the Leases, then the binds) on the
    real ledger and allocator; the API is `bound` (uid -> hold) and `leases` ((node, gpu) -> uid)."""

    @initialize()
    def start(self) -> None:
        self.ledger = Ledger()
        self.bound: dict[str, Hold] = {}
        self.leases: dict[tuple[str, int], str] = {}
        self.gangs: dict[str, Gang] = {}
        self.serial = 0

    # ---- the scheduler, modelled ------------------------------------------------------------------------------
    def _pending(self, gang: Gang) -> list[str]:
        return [u for u in gang.members if u not in self.bound]

    def _decide(self, gang: Gang) -> list[Hold] | None:
        """Step 2: every pending member assumed in one domain, or nothing (the ledger unchanged)."""
        pending = [u for u in self._pending(gang) if self.ledger.hold(u) is None]
        fixed = {self.bound[u].node for u in gang.members if u in self.bound}
        fixed |= {h.node for u in gang.members if (h := self.ledger.hold(u)) is not None and not h.bound}
        free = {n: 4 - sum(len(h.gpu_ids) for h in self.ledger.holdings(n)) for n in NODES}
        candidates = gangs.domains(gang.spec, ZONES, fixed, free)
        if isinstance(candidates, str):
            return None
        request = allocator.Request(gang.count)

        def place(uid: str, domain: gangs.Domain) -> Hold | str:
            nodes = [n for name, n in NODES.items() if not domain.key or name in domain.nodes]
            outcome = allocator.allocate(request, nodes, held=self.ledger.holdings)
            if isinstance(outcome, allocator.NoFit):
                return outcome.message
            hold = Hold(uid, f"ns/{uid}", outcome.node, outcome.gpu_ids, "Exclusive", "claim", gang.name)
            assert self.ledger.assume(hold) == []
            return hold

        before = {h.uid: h for h in self.ledger.holds()}
        outcome = gangs.transact(pending, candidates, place, lambda h: self.ledger.retract(h.uid), str)
        if isinstance(outcome, list):
            assert {h.uid: h for h in self.ledger.holds()} == before, "a refused gang left something assumed"
            return None
        retrying = [h for u in self._pending(gang) if (h := self.ledger.hold(u)) is not None and u not in pending]
        return outcome.placements + retrying

    def _lease(self, hold: Hold) -> None:
        for key in hold.gpus:
            self.leases[key] = hold.uid
            self.ledger.lease_seen(LeaseRecord(f"gpu-{key[0]}-{key[1]}", key[0], key[1], "Exclusive", (hold.uid,)))

    def _release(self, uid: str) -> None:
        for key in [k for k, u in self.leases.items() if u == uid]:
            del self.leases[key]
            self.ledger.lease_deleted(key)

    def _attempt(self, gang: Gang, data: st.DataObject, faults: bool) -> None:
        holds = self._decide(gang)
        if holds is None:
            return
        # Step 3a: the Leases of every member; one refused (or failed) and every member's are released.
        if faults and data.draw(st.booleans(), label="a Lease refused"):
            for h in holds:
                self.ledger.forget(h.uid)
                self._release(h.uid)
            return
        for h in holds:
            self._lease(h)
        if faults and data.draw(st.booleans(), label="killed before the binds"):
            self._kill()
            return
        # Step 3b: the binds; each may get no answer (stays assumed, retried), and the scheduler may die midway.
        for i, h in enumerate(holds):
            if faults and data.draw(st.integers(0, 5), label=f"bind {i}") == 0:
                continue  # no answer: assumed, retried by the next attempt
            self.bound[h.uid] = dataclasses.replace(h, bound=True)
            self.ledger.confirm(h.uid)
            if faults and i < len(holds) - 1 and data.draw(st.integers(0, 5), label=f"killed after bind {i}") == 0:
                gang.killed_mid_bind = True
                self._kill()
                return

    def _kill(self) -> None:
        """The scheduler dies: a new one rebuilds the ledger from the API, and the Lease reconciler releases the
        Leases of pods that are not bound (nobody is placing them now)."""
        self.ledger = Ledger()
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

    @precondition(lambda self: any(self._pending(g) for g in self.gangs.values()))
    @rule(data=st.data())
    def attempt(self, data: st.DataObject) -> None:
        waiting = [g for g in self._order() if self._pending(g)]
        gang = data.draw(st.sampled_from(waiting), label="gang")
        self._attempt(gang, data, faults=True)

    @precondition(lambda self: bool(self.gangs))
    @rule(data=st.data())
    def delete_gang(self, data: st.DataObject) -> None:
        gang = self.gangs.pop(data.draw(st.sampled_from(sorted(self.gangs)), label="deleted"))
        for uid in gang.members:
            self.bound.pop(uid, None)
            self.ledger.pod_gone(uid)
            self._release(uid)

    @rule()
    def kill(self) -> None:
        self._kill()

    @rule(data=st.data())
    def settle(self, data: st.DataObject) -> None:
        """No more faults: the scheduler tries every waiting gang, in the queue's order, until nothing changes."""
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
                assert gang.killed_mid_bind, (
                    f"{gang.name} is partly placed ({bound} of {len(gang.members)}) with no kill"
                )
            if bound == 0:
                held = [u for u in gang.members if any(v == u for v in self.leases.values())]
                assert not held, f"{gang.name} waits holding Leases {held}"
                assert not self._fits_now(gang), f"{gang.name} waits though it fits now (a deadlock)"
            if bound == len(gang.members):
                gang.killed_mid_bind = False

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


TestGangMachine = GangMachine.TestCase
TestGangMachine.settings = settings(max_examples=300, stateful_step_count=30, deadline=None)
