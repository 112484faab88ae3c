"""The scheduler's cache (scheduler.cache): the one owner of what is assumed, a pod's GPUs and its room together, and
its trial copies. Table tests of each step, and a property that a trial's view of the GPUs (claims.ledger.Overlay)
answers exactly as a ledger holding the same holds would, while the ledger itself never changes."""

from __future__ import annotations

import dataclasses
from typing import Any

import hypothesis.strategies as st
from hypothesis import given, settings

from gpu_scheduling.claims.ledger import Hold, LeaseRecord, Ledger
from gpu_scheduling.scheduler.cache import Cache, Listener


def pod(uid: str, cpu: str = "1") -> dict[str, Any]:
    return {
        "metadata": {"name": uid, "namespace": "ns", "uid": uid},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
    }


def claim_hold(uid: str, node: str = "n1", gpus: tuple[int, ...] = (0,), exclusivity: str = "Exclusive") -> Hold:
    return Hold(uid, f"ns/{uid}", node, gpus, exclusivity, "claim", f"c-{uid}")


def map_hold(uid: str, node: str = "n1", gpus: tuple[int, ...] = (0,)) -> Hold:
    return Hold(uid, f"ns/{uid}", node, gpus, "Shared", "map")


class Heard:
    """What the cache told its listener."""

    def __init__(self) -> None:
        self.rooms: list[str] = []
        self.freed = 0
        self.leases: list[set[tuple[str, int]]] = []

    def listener(self) -> Listener:
        def freed() -> None:
            self.freed += 1

        return Listener(self.rooms.append, freed, self.leases.append)


def cache_with_listener() -> tuple[Cache, Heard]:
    cache, heard = Cache(), Heard()
    cache.listener = heard.listener()
    return cache, heard


def held(cache_or_gpus: Any, node: str = "n1") -> list[tuple[tuple[int, ...], str]]:
    return [(h.gpu_ids, h.exclusivity) for h in cache_or_gpus.holdings(node)]


def test_assume_counts_the_gpus_and_the_room_in_one_step():
    cache, _ = cache_with_listener()
    assert cache.assume(pod("a", "2"), claim_hold("a", gpus=(0, 1))) == []
    assert held(cache.ledger) == [((0,), "Exclusive"), ((1,), "Exclusive")]
    assert cache.usage.requested("n1", "cpu") == 2000 and cache.usage.pods("n1") == 1
    assert cache.assumed("a")


def test_a_conflicting_assumption_counts_nothing():
    cache, _ = cache_with_listener()
    cache.assume(pod("a"), claim_hold("a"))
    conflicts = cache.assume(pod("b"), claim_hold("b"))
    assert [(c.node, c.gpu) for c in conflicts] == [("n1", 0)]
    assert cache.ledger.hold("b") is None and cache.usage.pods("n1") == 1 and not cache.assumed("b")


def test_a_pod_that_asks_no_gpu_takes_room_only():
    cache, _ = cache_with_listener()
    assert cache.assume(pod("a"), map_hold("a", gpus=())) == []
    assert cache.ledger.hold("a") is None and cache.usage.pods("n1") == 1


def test_the_watch_replaces_an_assumption():
    cache, heard = cache_with_listener()
    cache.assume(pod("a"), map_hold("a"))
    footprint = cache.usage.footprint("a")
    cache.observe("a", footprint)
    assert not cache.assumed("a")
    assert cache.drop_room("a") is None, "the watch has spoken: nothing of ours to drop"
    assert cache.usage.pods("n1") == 1
    cache.observe("a", None)
    assert heard.rooms == ["n1"] and cache.usage.pods("n1") == 0


def test_forget_frees_and_says_so_retract_says_nothing():
    cache, heard = cache_with_listener()
    cache.assume(pod("a"), claim_hold("a", gpus=(0, 1)))
    cache.assume(pod("b"), claim_hold("b", gpus=(2,)))
    cache.retract("b")
    assert heard.rooms == [] and heard.freed == 0 and heard.leases == []
    assert cache.ledger.hold("b") is None and cache.usage.pods("n1") == 1
    cache.forget("a")
    assert heard.rooms == ["n1"]
    assert heard.freed == 1 and cache.ledger.freed == {"n1"}
    assert heard.leases == [{("n1", 0), ("n1", 1)}], "a claim's Leases may exist unseen: they are reconciled"
    assert cache.ledger.hold("a") is None and cache.usage.pods("n1") == 0


def test_forgetting_a_map_pod_reconciles_no_lease():
    cache, heard = cache_with_listener()
    cache.assume(pod("m"), map_hold("m", gpus=(3,)))
    cache.forget("m")
    assert heard.leases == [set()]


def test_drop_room_keeps_the_gpus():
    cache, _ = cache_with_listener()
    cache.assume(pod("a"), map_hold("a", gpus=(1,)))
    assert cache.drop_room("a") == "n1"
    assert cache.usage.pods("n1") == 0 and cache.ledger.hold("a") is not None


def test_a_trial_changes_nothing_live_until_committed():
    cache, heard = cache_with_listener()
    cache.assume(pod("live"), claim_hold("live", gpus=(0,)))
    trial = cache.fork()
    assert trial.assume(pod("t1", "3"), claim_hold("t1", gpus=(1, 2))) == []
    assert trial.assume(pod("t2"), map_hold("t2", "n2", gpus=(0,))) == []
    assert [c.gpu for c in trial.assume(pod("t3"), claim_hold("t3", gpus=(2,)))] == [2], "the trial's own holds count"
    assert [c.gpu for c in trial.assume(pod("t4"), claim_hold("t4", gpus=(0,)))] == [0], "and the cache's"
    assert held(trial.ledger) == [((0,), "Exclusive"), ((1,), "Exclusive"), ((2,), "Exclusive")]
    assert trial.usage.requested("n1", "cpu") == 4000 and trial.usage.pods("n2") == 1
    assert held(cache.ledger) == [((0,), "Exclusive")]
    assert cache.usage.requested("n1", "cpu") == 1000 and cache.usage.pods("n2") == 0
    trial.retract("t2")
    assert trial.usage.pods("n2") == 0 and held(trial.ledger, "n2") == []
    assert cache.commit(trial) == []
    assert held(cache.ledger) == [((0,), "Exclusive"), ((1,), "Exclusive"), ((2,), "Exclusive")]
    assert cache.usage.requested("n1", "cpu") == 4000 and cache.assumed("t1") and not cache.assumed("t2")
    assert heard.rooms == [] and heard.freed == 0


def test_a_commit_that_conflicts_keeps_nothing():
    cache, _ = cache_with_listener()
    trial = cache.fork()
    trial.assume(pod("t1"), claim_hold("t1", gpus=(5,)))
    trial.assume(pod("t2"), claim_hold("t2", gpus=(6,)))
    cache.assume(pod("late"), claim_hold("late", gpus=(6,)))  # a change behind the trial's back: a bug to report
    assert [c.gpu for c in cache.commit(trial)] == [6]
    assert cache.ledger.hold("t1") is None and cache.ledger.hold("t2") is None
    assert cache.usage.pods("n1") == 1


def test_a_trial_counts_removed_pods_as_gone_and_restores_them():
    cache, heard = cache_with_listener()
    victim = pod("victim", "2")
    cache.assume(victim, claim_hold("victim", gpus=(0, 1)))
    cache.observe("victim", cache.usage.footprint("victim"))
    cache.ledger.lease_seen(LeaseRecord("gpu-n1-0", "n1", 0, "Exclusive", ("victim",)))
    trial = cache.fork()
    trial.remove("victim")
    assert held(trial.ledger) == [] and trial.usage.pods("n1") == 0, "its hold and its Lease no longer count"
    assert trial.ledger.hold("victim") is None
    assert trial.assume(pod("preemptor"), claim_hold("preemptor", gpus=(0, 1))) == []
    assert held(cache.ledger) == [((0,), "Exclusive"), ((1,), "Exclusive")] and cache.usage.pods("n1") == 1
    trial.retract("preemptor")
    trial.restore("victim")
    assert held(trial.ledger) == held(cache.ledger) and trial.usage.pods("n1") == 1
    assert heard.rooms == [] and heard.freed == 0


# ---- the trial's view of the GPUs, against a ledger holding the same -------------------------------------------
NODES = ("n1", "n2")
HOLDS = st.builds(
    lambda uid, node, gpus, exclusivity: Hold(uid, f"ns/{uid}", node, tuple(sorted(gpus)), exclusivity),
    st.sampled_from(("a", "b", "c", "d", "e", "f")),
    st.sampled_from(NODES),
    st.sets(st.integers(0, 3), min_size=1, max_size=2),
    st.sampled_from(("Exclusive", "Shared")),
)
LEASES = st.builds(
    lambda node, gpu, holder, exclusivity: LeaseRecord(f"gpu-{node}-{gpu}", node, gpu, exclusivity, (holder,)),
    st.sampled_from(NODES),
    st.integers(0, 3),
    st.sampled_from(("x", "y")),
    st.sampled_from(("Exclusive", "Shared")),
)


@settings(max_examples=300)
@given(
    base=st.lists(HOLDS, max_size=5),
    leases=st.lists(LEASES, max_size=3),
    tried=st.lists(HOLDS, max_size=5),
    retracted=st.sets(st.sampled_from(("a", "b", "c", "d", "e", "f"))),
    removed=st.sets(st.sampled_from(("a", "b", "c", "x", "y"))),
    asked=HOLDS,
)
def test_a_trial_reads_as_a_ledger_with_its_holds_would(base, leases, tried, retracted, removed, asked):
    """The trial's ledger, with `removed` counted gone (their holds and their names on Leases) and `tried` placed,
    answers as a ledger built without the removed and with the tried would."""
    ledger, same = Ledger(), Ledger()
    for lease in leases:
        ledger.lease_seen(lease)
        holders = tuple(h for h in lease.holders if h not in removed)
        if holders:
            same.lease_seen(dataclasses.replace(lease, holders=holders))
        else:  # the same Lease seen again naming only removed pods: what it said before holds no more
            same.lease_deleted((lease.node, lease.gpu))
    for hold in base:
        if ledger.hold(hold.uid) is None and ledger.assume(hold) == [] and hold.uid not in removed:
            same.assume(hold)
    before = {n: ledger.holdings(n) for n in NODES}
    cache = Cache(ledger)
    trial = cache.fork()
    for uid in removed:
        trial.ledger.hide(uid)
    for hold in tried:
        if ledger.hold(hold.uid) is not None or trial.ledger.hold(hold.uid) is not None or hold.uid in removed:
            continue  # a trial places pods the ledger holds nothing for
        got = trial.ledger.assume(hold)
        assert sorted((c.node, c.gpu) for c in got) == sorted((c.node, c.gpu) for c in same.assume(hold))
    for uid in retracted:
        if ledger.hold(uid) is None:
            trial.ledger.retract(uid)
            same.retract(uid)
    for n in NODES:
        assert trial.ledger.holdings(n) == same.holdings(n)
    want = same.conflicts(asked.node, asked.gpu_ids, asked.exclusivity, asked.uid)
    got = trial.ledger.conflicts(asked.node, asked.gpu_ids, asked.exclusivity, asked.uid)
    assert sorted((c.node, c.gpu) for c in got) == sorted((c.node, c.gpu) for c in want)
    assert {n: ledger.holdings(n) for n in NODES} == before, "a trial never changes the ledger"
