"""Preemption's judgement (scheduler.preemption): kube-scheduler's order of candidates, PodDisruptionBudget
violations counted as kube-scheduler counts them, the greedy reprieve; and a property over random clusters of GPU
pods and gangs on a real scheduler.cache.Cache: the victims are all of lower priority, gangs go whole, each victim
is needed, the preemptor then fits on GPUs nobody else holds, and when no candidate is found none exists."""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
from hypothesis import given, settings

from gpu_scheduling.claims.ledger import Hold
from gpu_scheduling.scheduler import fit, preemption
from gpu_scheduling.scheduler.cache import Cache, Trial
from gpu_scheduling.scheduler.preemption import Candidate, Pod, Victim

GPUS_PER_NODE = 4


def vpod(name: str, priority: int = 0, started: str = "2026-11-28T10:00:00Z", **labels: str) -> Pod:
    return Pod(f"uid-{name}", "ns", name, "n1", priority, started, tuple(sorted(labels.items())))


def lone(name: str, priority: int = 0, started: str = "2026-11-28T10:00:00Z", **labels: str) -> Victim:
    return Victim((vpod(name, priority, started, **labels),))


def candidate(node: str, *victims: Victim, violations: int = 0) -> Candidate:
    return Candidate(node, victims, violations)


def chosen(*candidates: Candidate) -> str:
    best = preemption.best(candidates)
    assert best is not None
    return best.node


# ---- the order of candidates (kube-scheduler's pickOneNodeForPreemption) ---------------------------------------


def test_fewest_budget_violations_first():
    assert chosen(candidate("a", lone("x"), violations=1), candidate("b", lone("y", 5), lone("z", 5))) == "b"


def test_then_the_lowest_highest_priority():
    assert chosen(candidate("a", lone("x", 5)), candidate("b", lone("y", 1), lone("z", 4))) == "b"


def test_then_the_smallest_sum_of_priorities():
    assert chosen(candidate("a", lone("x", 4), lone("w", 4)), candidate("b", lone("y", 1), lone("z", 4))) == "b"


def test_negative_priorities_do_not_make_more_victims_cheaper():
    # Summed as they are, two victims of -10 (sum -20) would beat one of -10; offset as kube-scheduler's, they do not.
    assert chosen(candidate("a", lone("x", -10), lone("w", -10)), candidate("b", lone("y", -10))) == "b"


def test_then_the_fewest_victims():
    assert chosen(candidate("a", lone("x", 0), lone("w", 0)), candidate("b", lone("y", 0))) == "b"


def test_then_the_latest_start_of_the_highest_priority_victims():
    early, late = "2026-11-28T09:00:00Z", "2026-11-28T11:00:00Z"
    assert chosen(candidate("a", lone("x", 3, early)), candidate("b", lone("y", 3, late))) == "b"
    assert chosen(candidate("a", lone("x", 3, late)), candidate("b", lone("y", 3, early))) == "a"


def test_then_the_first_node_by_name():
    assert chosen(candidate("b", lone("x")), candidate("a", lone("y"))) == "a"


def test_a_node_that_needs_no_victim_comes_first():
    assert chosen(candidate("b", lone("x", -100)), candidate("c")) == "c"


def test_no_candidate_no_choice():
    assert preemption.best([]) is None


# ---- PodDisruptionBudgets ----------------------------------------------------------------------------------------


def budget(allowed: int, selector: dict[str, Any] | None, namespace: str = "ns", disrupted: tuple[str, ...] = ()):
    b = preemption.budget(
        {
            "metadata": {"namespace": namespace, "name": "pdb"},
            "spec": {"selector": selector},
            "status": {"disruptionsAllowed": allowed, "disruptedPods": dict.fromkeys(disrupted, "t")},
        }
    )
    assert b is not None
    return b


def names(victims: list[Victim]) -> list[str]:
    return [p.name for v in victims for p in v.pods]


def test_each_covered_pod_takes_one_allowed_disruption_in_order():
    pdb = budget(1, {"matchLabels": {"app": "web"}})
    violating, others = preemption.split_by_budgets(
        [lone("a", app="web"), lone("b", app="web"), lone("c", app="db")], [pdb]
    )
    assert names(violating) == ["b"] and names(others) == ["a", "c"]


def test_a_budget_of_another_namespace_or_an_empty_selector_covers_nothing():
    assert (
        preemption.split_by_budgets([lone("a", app="web")], [budget(0, {"matchLabels": {"app": "web"}}, "x")])[0] == []
    )
    assert preemption.split_by_budgets([lone("a", app="web")], [budget(0, {})])[0] == []
    assert preemption.split_by_budgets([lone("a", app="web")], [budget(0, None)])[0] == []


def test_a_pod_without_labels_breaks_no_budget():
    # kube-scheduler's filterPodsWithPDBViolation skips it, though a NotIn or DoesNotExist selector matches it.
    pdb = budget(0, {"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]})
    assert preemption.split_by_budgets([lone("a")], [pdb]) == ([], [lone("a")])
    assert preemption.split_by_budgets([lone("b", tier="x")], [pdb])[0] == [lone("b", tier="x")]


def test_a_pod_already_disrupted_costs_nothing_more():
    pdb = budget(0, {"matchLabels": {"app": "web"}}, disrupted=("a",))
    assert preemption.split_by_budgets([lone("a", app="web")], [pdb]) == ([], [lone("a", app="web")])


def test_a_gang_breaks_a_budget_when_any_member_does():
    gang = Victim((vpod("a", app="web"), vpod("b", app="db")), "ns/g")
    assert preemption.split_by_budgets([gang], [budget(0, {"matchLabels": {"app": "db"}})])[0] == [gang]


def test_a_budget_that_cannot_be_read_is_none():
    assert preemption.budget({"metadata": {}, "spec": {"selector": {"matchLabels": "x"}}}) is None


# ---- the reprieve ------------------------------------------------------------------------------------------------


class Room:
    """A trial of a node with `slots` places: the preemptor needs one."""

    def __init__(self, present: set[str], slots: int) -> None:
        self.present, self.slots = set(present), slots

    def remove(self, uid: str) -> None:
        self.present.discard(uid)

    def restore(self, uid: str) -> None:
        self.present.add(uid)

    def fits(self) -> bool:
        return len(self.present) < self.slots


def test_the_most_important_victims_are_reprieved_first():
    victims = [lone("low", 1), lone("high", 5), lone("mid", 3)]
    room = Room({v.pods[0].uid for v in victims}, 3)
    got = preemption.select_victims(room, "n1", victims, room.fits, [])
    assert got is not None and names(list(got.victims)) == ["low"] and got.violations == 0


def test_budget_violators_are_reprieved_before_the_others():
    victims = [lone("guarded", 1, app="web"), lone("free", 5)]
    room = Room({v.pods[0].uid for v in victims}, 2)
    got = preemption.select_victims(room, "n1", victims, room.fits, [budget(0, {"matchLabels": {"app": "web"}})])
    assert got is not None and names(list(got.victims)) == ["free"] and got.violations == 0


def test_a_violation_is_counted_when_the_violator_must_go():
    victims = [lone("guarded", 1, app="web")]
    room = Room({v.pods[0].uid for v in victims}, 1)
    got = preemption.select_victims(room, "n1", victims, room.fits, [budget(0, {"matchLabels": {"app": "web"}})])
    assert got is not None and got.violations == 1


def test_no_candidate_when_even_all_victims_gone_is_not_enough():
    room = Room({"uid-a", "other"}, 1)
    assert preemption.select_victims(room, "n1", [lone("a")], room.fits, []) is None


# ---- a property over random clusters on the real cache --------------------------------------------------------


PRIORITIES = st.integers(min_value=0, max_value=3)


@st.composite
def clusters(draw: st.DrawFn) -> tuple[Cache, dict[str, str | None], dict[str, int], dict[str, int]]:
    """A cache with GPU pods bound on nodes n0..n3 (GPUS_PER_NODE each, Exclusive), some of them in gangs spanning
    nodes: the cache, each pod uid's gang, each uid's priority, and each gang's priority."""
    cache = Cache()
    gang_of: dict[str, str | None] = {}
    priorities: dict[str, int] = {}
    free = {f"n{i}": list(range(GPUS_PER_NODE)) for i in range(4)}
    gang_priority = {g: draw(PRIORITIES) for g in ("g0", "g1")}
    for i in range(draw(st.integers(min_value=0, max_value=12))):
        node = draw(st.sampled_from(sorted(free)))
        if not free[node]:
            continue
        count = draw(st.integers(min_value=1, max_value=min(2, len(free[node]))))
        gpus = tuple(free[node][:count])
        del free[node][:count]
        gang = draw(st.sampled_from([None, None, "g0", "g1"]))
        rank = gang_priority[gang] if gang else draw(PRIORITIES)
        uid = f"p{i}"
        pod = {
            "metadata": {"name": uid, "namespace": "ns", "uid": uid, "creationTimestamp": f"2026-11-28T10:{i:02}:00Z"},
            "spec": {"nodeName": node, "priority": rank, "containers": [{"name": "c"}]},
        }
        cache.ledger.pod_bound(Hold(uid, f"ns/{uid}", node, gpus, "Exclusive", "claim", f"c-{uid}"))
        cache.observe(uid, fit.footprint(pod))
        gang_of[uid], priorities[uid] = gang, rank
    return cache, gang_of, priorities, gang_priority


def free_gpus(holdings: Any, node: str) -> list[int]:
    busy = {g for h in holdings(node) for g in h.gpu_ids}
    return [g for g in range(GPUS_PER_NODE) if g not in busy]


def victims_on(cache: Cache, node: str, rank: int, gang_of: dict[str, str | None], own: str | None) -> list[Victim]:
    def members(gang: str) -> list[Pod]:
        return [Pod.of(u, t) for u, t in sorted(cache.usage.everyone()) if gang_of[u] == gang]

    return preemption.victims_on(cache.usage.pods_on(node), rank, lambda uid, _: gang_of[uid], members, own)


@given(
    clusters(), PRIORITIES.map(lambda p: p + 1), st.integers(min_value=1, max_value=3), st.sampled_from([None, "g0"])
)
@settings(max_examples=300, deadline=None)
def test_preemption_on_random_clusters(
    cluster: tuple[Cache, dict[str, str | None], dict[str, int], dict[str, int]],
    rank: int,
    count: int,
    own: str | None,
) -> None:
    cache, gang_of, priorities, _ = cluster
    trial: Trial = cache.fork()

    def fits(node: str) -> bool:
        return len(free_gpus(trial.ledger.holdings, node)) >= count

    found: list[Candidate] = []
    for node in sorted({f"n{i}" for i in range(4)}):
        potential = victims_on(cache, node, rank, gang_of, own)
        if not potential:
            continue
        got = preemption.select_victims(trial, node, potential, lambda n=node: fits(n), [])
        if got is not None:
            # Each victim is needed: counting any one of them back, the preemptor no longer fits.
            for victim in got.victims:
                for p in victim.pods:
                    trial.restore(p.uid)
                assert not fits(node), f"{victim} was not needed on {node}"
                for p in victim.pods:
                    trial.remove(p.uid)
            found.append(got)
        for victim in potential:
            for p in victim.pods:
                trial.restore(p.uid)
        # The trial is back to the cache's view.
        assert trial.ledger.holdings(node) == cache.ledger.holdings(node)
    best = preemption.best(found)
    if best is None:
        # No candidate: on no node with victims does removing every one of them make room.
        for node in sorted({f"n{i}" for i in range(4)}):
            everyone = [p.uid for v in victims_on(cache, node, rank, gang_of, own) for p in v.pods]
            for uid in everyone:
                trial.remove(uid)
            assert not everyone or not fits(node)
            for uid in everyone:
                trial.restore(uid)
        return
    victims = best.pods()
    # Nothing of equal or higher priority, nothing of its own gang, and gangs whole.
    assert all(priorities[p.uid] < rank for p in victims)
    assert all(gang_of[p.uid] != own or own is None for p in victims)
    taken = {p.uid for p in victims}
    for gang in {gang_of[p.uid] for p in victims} - {None}:
        assert {u for u, g in gang_of.items() if g == gang} <= taken, f"gang {gang} partly evicted"
    # The victims' pods go (the ledger frees their GPUs only then); the preemptor is then placed on free GPUs.
    for uid in taken:
        cache.ledger.pod_gone(uid)
        cache.observe(uid, None)
    free = free_gpus(cache.ledger.holdings, best.node)
    assert len(free) >= count
    pod = {"metadata": {"name": "pre", "namespace": "ns", "uid": "pre"}, "spec": {"containers": [{"name": "c"}]}}
    assert cache.assume(pod, Hold("pre", "ns/pre", best.node, tuple(free[:count]), "Exclusive", "claim", "c")) == []
    # No GPU is held twice.
    for node in (f"n{i}" for i in range(4)):
        gpus = [g for h in cache.ledger.holdings(node) for g in h.gpu_ids]
        assert len(gpus) == len(set(gpus))
