"""The GPU ledger: the one in-memory answer to "which pod holds which GPU of which node". Pure: plain data in and
out, no client, no clock, no I/O.

Every GPU in use counts, whichever API put it there:
  * a claim pod holds the GPUs the scheduler allocated to it (Exclusive or Shared, as its GpuClaim says);
  * a map pod holds the GPUs of its `gpu-scheduling-map` entry. Map pods may share GPUs among themselves (the
    take-home's pods 3 and 4 do), so a map hold is Shared: an Exclusive claim never gets those GPUs;
  * a GPU Lease names the pods that hold it in the API. A Lease whose holders are all released still counts
    until the API has deleted it: the Lease is the cluster-wide lock, and a GPU is free only when the API agrees.

How the ledger changes (as kube-scheduler's cache does for pods):
  * the scheduler's own decisions: `assume` before the API calls, then `confirm` once the pod is bound, or
    `forget` when the attempt failed;
  * watch events: `pod_bound` (a bound pod with its allocation annotation or its map entry: the authoritative
    state, also what the ledger is rebuilt from after a restart), `pod_gone` (deleted or finished: the API says
    so), `lease_seen` / `lease_deleted`. Each event costs O(GPUs it touches).

Releases cannot be lost: "pod P holds nothing" is recorded (`released`) and stays until no Lease names P any more;
`lease_plan` tells the reconciler, for one Lease, which holders must go and which it still has to ask the API
about. A holder is dropped only when the API said its pod is gone or finished, or when this scheduler decided it
holds nothing (a failed attempt); anything else is verified first.

Reads for the allocator: `holdings(node)` (cached per node, rebuilt only after a change on that node) and
`conflicts` for a map pod's entry. Nothing here ever gives an Exclusive GPU to two live pods: `assume` refuses
when the GPUs are taken.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import Literal

from gpu_scheduling.claims.allocator import Holding

Source = Literal["claim", "map"]
GpuKey = tuple[str, int]  # (node, GPU id)


@dataclasses.dataclass(frozen=True, slots=True)
class Hold:
    """What one pod holds: GPUs of one node."""

    uid: str
    pod: str  # "<namespace>/<name>", for messages
    node: str
    gpu_ids: tuple[int, ...]
    exclusivity: str = "Exclusive"  # Exclusive | Shared (map holds are Shared)
    source: Source = "claim"
    claim: str = ""  # the GpuClaim's name, for claim holds
    bound: bool = False  # False: assumed (our decision, API calls in flight); True: the pod is bound

    @property
    def gpus(self) -> Iterator[GpuKey]:
        return ((self.node, g) for g in self.gpu_ids)

    def describe(self) -> str:
        what = f"GpuClaim {self.claim}" if self.claim else "its gpu-scheduling-map entry"
        return f"pod {self.pod} ({what})"


@dataclasses.dataclass(frozen=True, slots=True)
class LeaseRecord:
    """One GPU Lease as the API last showed it."""

    name: str
    node: str
    gpu: int
    exclusivity: str
    holders: tuple[str, ...]  # pod uids
    pods: Mapping[str, str] = dataclasses.field(default_factory=dict)  # uid -> "<namespace>/<name>", where known
    resource_version: str = ""

    @property
    def key(self) -> GpuKey:
        return (self.node, self.gpu)


@dataclasses.dataclass(frozen=True, slots=True)
class Conflict:
    node: str
    gpu: int
    holder: str  # a description: "pod ns/name (GpuClaim c)" or "Lease gpu-n-0 of pod <uid>"


@dataclasses.dataclass(frozen=True, slots=True)
class LeasePlan:
    """What the reconciler must do to one Lease: drop `remove` from its holders (delete it when nobody stays),
    after asking the API about the pods in `verify` (uid -> "<namespace>/<name>" or "" when unknown)."""

    lease: LeaseRecord
    keep: tuple[str, ...]
    remove: tuple[str, ...]
    verify: Mapping[str, str]

    @property
    def settled(self) -> bool:
        return not self.remove and not self.verify


JOURNAL_LIMIT = 65536
"""The most changes `Ledger.changed_since` keeps (a few per claim: about 13 thousand claims' worth)."""


class Ledger:
    def __init__(self) -> None:
        self._holds: dict[str, Hold] = {}
        self._leases: dict[GpuKey, LeaseRecord] = {}
        self._gpu_holders: dict[GpuKey, set[str]] = {}  # GPU -> uids of holds covering it
        self._uid_leases: dict[str, set[GpuKey]] = {}  # uid -> Leases naming it
        self._released: set[str] = set()  # pods that hold nothing (desired), while a Lease may still name them
        self._holdings: dict[str, tuple[Holding, ...]] = {}  # node -> allocator view, dropped on change
        self._by_node: dict[str, dict[GpuKey, int]] = {}  # node -> {GPU: references (holds + its Lease)}
        self.freed: set[str] = set()  # nodes where a GPU became (more) free since the caller last cleared it
        self._journal: list[str] = []  # the nodes whose holdings changed, in order (`changed_since`)
        self._journal_start = 0  # the position of _journal[0] among every change since the ledger began

    # ---- reads ------------------------------------------------------------------------------------------------
    def hold(self, uid: str) -> Hold | None:
        return self._holds.get(uid)

    def holds(self) -> Iterable[Hold]:
        return self._holds.values()

    def lease(self, key: GpuKey) -> LeaseRecord | None:
        return self._leases.get(key)

    def leases(self) -> Iterable[LeaseRecord]:
        return self._leases.values()

    def holders_of(self, key: GpuKey) -> list[Hold]:
        return [self._holds[uid] for uid in sorted(self._gpu_holders.get(key, ()))]

    def leases_of(self, uid: str) -> set[GpuKey]:
        return set(self._uid_leases.get(uid, ()))

    def releasing(self, uid: str) -> bool:
        """The pod was given up but a Lease still names it: it must not be placed again until the API agrees."""
        return uid in self._released and bool(self._uid_leases.get(uid))

    def holdings(self, node: str, hidden: Collection[str] = ()) -> tuple[Holding, ...]:
        """Everything held on `node`, as the allocator reads it: one Holding per busy GPU and exclusivity. `hidden`:
        pods counted as gone, their holds and their names on Leases with them (a trial's victims)."""
        cached = None if hidden else self._holdings.get(node)
        if cached is not None:
            return cached
        exclusive: set[int] = set()
        shared: set[int] = set()
        for key in self._node_gpus(node):
            for uid in self._gpu_holders.get(key, ()):
                if uid not in hidden:
                    (exclusive if self._holds[uid].exclusivity == "Exclusive" else shared).add(key[1])
            lease = self._leases.get(key)
            if lease is not None and any(h not in hidden for h in lease.holders):
                (exclusive if lease.exclusivity == "Exclusive" else shared).add(key[1])
        out = _holdings(node, exclusive, shared)
        if not hidden:
            self._holdings[node] = out
        return out

    def position(self) -> int:
        """How many changes of holdings the ledger has recorded since it began (`changed_since`)."""
        return self._journal_start + len(self._journal)

    def changed_since(self, mark: int) -> list[str] | None:
        """The nodes whose holdings (`holdings`) changed since `mark` (a `position`), each as often as it changed;
        None when the record no longer reaches back that far (anything may have changed). A reader that keeps its
        own view of the holdings (allocator.FreeIndex) re-reads only those nodes."""
        if mark < self._journal_start:
            return None
        return self._journal[mark - self._journal_start :]

    def _changed(self, node: str) -> None:
        """`node`'s holdings changed: its cached view goes, and the record of changes says so (bounded: the older
        half is dropped past JOURNAL_LIMIT, and a reader that far behind reads every node again)."""
        self._holdings.pop(node, None)
        self._journal.append(node)
        if len(self._journal) > JOURNAL_LIMIT:
            half = len(self._journal) // 2
            del self._journal[:half]
            self._journal_start += half

    def _node_gpus(self, node: str) -> list[GpuKey]:
        return list(self._by_node.get(node, ()))

    def _ref(self, key: GpuKey, delta: int) -> None:
        index = self._by_node.setdefault(key[0], {})
        count = index.get(key, 0) + delta
        if count > 0:
            index[key] = count
        else:
            index.pop(key, None)
            if not index:
                self._by_node.pop(key[0], None)
        self._changed(key[0])

    def conflicts(
        self, node: str, gpu_ids: Iterable[int], exclusivity: str, uid: str, hidden: Collection[str] = ()
    ) -> list[Conflict]:
        """Who stops pod `uid` from holding `gpu_ids` of `node` with `exclusivity` now (empty: nobody); the pods in
        `hidden` counted as gone."""
        out: list[Conflict] = []
        for gpu in gpu_ids:
            key = (node, gpu)
            out.extend(
                Conflict(node, gpu, self._holds[other].describe())
                for other in sorted(self._gpu_holders.get(key, ()))
                if other != uid
                and other not in hidden
                and (exclusivity == "Exclusive" or self._holds[other].exclusivity == "Exclusive")
            )
            lease = self._leases.get(key)
            if lease is not None:
                others = [
                    h for h in lease.holders if h != uid and h not in hidden and h not in self._gpu_holders.get(key, ())
                ]
                if others and (exclusivity == "Exclusive" or lease.exclusivity == "Exclusive"):
                    out.append(
                        Conflict(node, gpu, f"Lease {lease.name} of pod {lease.pods.get(others[0]) or others[0]}")
                    )
        return out

    # ---- the scheduler's decisions ----------------------------------------------------------------------------
    def assume(self, hold: Hold) -> list[Conflict]:
        """Record `hold` (not yet bound) unless someone else holds its GPUs in a way it cannot share. Assuming
        again for the same pod (a map pod's retry after a bind that got no answer) replaces what it held."""
        conflicts = self.conflicts(hold.node, hold.gpu_ids, hold.exclusivity, hold.uid)
        if conflicts:
            return conflicts
        hold = dataclasses.replace(hold, bound=False)
        if self._holds.get(hold.uid) != hold:  # the same hold again changes nothing (and frees nothing)
            self._put(hold)
        return []

    def confirm(self, uid: str) -> None:
        """The pod of an assumed hold is bound."""
        hold = self._holds.get(uid)
        if hold is not None and not hold.bound:
            self._holds[uid] = dataclasses.replace(hold, bound=True)

    def forget(self, uid: str) -> set[GpuKey]:
        """Our attempt for `uid` failed: it holds nothing. Returns the Leases naming it, to reconcile."""
        self._drop(uid)
        self._released.add(uid)
        return self.leases_of(uid)

    def retract(self, uid: str) -> None:
        """Undo an assumption no API call was made for (a gang member placed in a domain that did not take the
        whole gang): the pod holds nothing, and since nothing was held in the API nothing counts as freed."""
        hold = self._holds.get(uid)
        if hold is None or hold.bound:
            return
        freed = set(self.freed)
        self._drop(uid)
        self.freed = freed

    # ---- watch events ------------------------------------------------------------------------------------------
    def pod_bound(self, hold: Hold) -> set[GpuKey]:
        """The API shows the pod bound, holding `hold`'s GPUs (from its allocation annotation or map entry).
        Returns the Leases that name the pod for GPUs it does not hold (to reconcile)."""
        hold = dataclasses.replace(hold, bound=True)
        if self._holds.get(hold.uid) != hold:
            self._put(hold)
        self._released.discard(hold.uid)
        return {key for key in self._uid_leases.get(hold.uid, ()) if key not in set(hold.gpus)}

    def pod_gone(self, uid: str) -> set[GpuKey]:
        """The API says the pod is deleted or finished: it holds nothing. Returns the Leases naming it."""
        leases = self.forget(uid)
        if not leases:
            # Nothing names it, so nothing to remember: every pod ever deleted would stay here otherwise. A Lease
            # that names it later (written just before the pod went) is verified against the API instead.
            self._released.discard(uid)
        return leases

    def lease_seen(self, lease: LeaseRecord) -> None:
        old = self._leases.get(lease.key)
        if old is None:
            self._ref(lease.key, +1)
        self._leases[lease.key] = lease
        self._changed(lease.node)
        self._reindex(lease.key, old.holders if old else (), lease.holders)

    def lease_deleted(self, key: GpuKey) -> None:
        old = self._leases.pop(key, None)
        if old is None:
            return
        self._ref(key, -1)
        self._reindex(key, old.holders, ())

    def _reindex(self, key: GpuKey, before: Iterable[str], after: Iterable[str]) -> None:
        gone = set(before) - set(after)
        for uid in set(after) - set(before):
            self._uid_leases.setdefault(uid, set()).add(key)
        for uid in gone:
            leases = self._uid_leases.get(uid)
            if leases is not None:
                leases.discard(key)
                if not leases:
                    del self._uid_leases[uid]
            if uid not in self._uid_leases and uid not in self._holds:
                # The last Lease of a released pod is gone: its GPUs are free in the API too.
                self._released.discard(uid)
                self.freed.add(key[0])
            elif uid not in self._released:
                self.freed.add(key[0])

    # ---- reconciling Leases ----------------------------------------------------------------------------------
    def lease_plan(self, lease: LeaseRecord) -> LeasePlan:
        """Compare one Lease (as just read from the API) with the ledger."""
        keep, remove, verify = [], [], {}
        for uid in lease.holders:
            hold = self._holds.get(uid)
            if hold is not None and hold.source == "claim" and lease.key in set(hold.gpus):
                keep.append(uid)
            elif hold is not None or uid in self._released:
                # It holds other GPUs (bound: the API's word; assumed: our decision), or nothing at all.
                remove.append(uid)
            else:
                verify[uid] = lease.pods.get(uid, "")
        return LeasePlan(lease, tuple(keep), tuple(remove), verify)

    def pod_pending(self, uid: str) -> None:
        """The API shows the pod unbound. Unless we are placing it now (an assumed hold), it holds nothing."""
        hold = self._holds.get(uid)
        if hold is None or hold.bound:
            self.forget(uid)

    # ---- internals ---------------------------------------------------------------------------------------------
    def _put(self, hold: Hold) -> None:
        # A pod holds one set of GPUs: whatever it held before is unindexed first, or the GPU and node indexes
        # would keep the old GPUs busy for ever (a stale entry no event ever removes).
        if hold.uid in self._holds:
            self._drop(hold.uid)
        self._holds[hold.uid] = hold
        self._released.discard(hold.uid)
        for key in hold.gpus:
            self._gpu_holders.setdefault(key, set()).add(hold.uid)
            self._ref(key, +1)

    def _drop(self, uid: str) -> None:
        hold = self._holds.pop(uid, None)
        if hold is None:
            return
        for key in hold.gpus:
            holders = self._gpu_holders.get(key)
            if holders is not None:
                holders.discard(uid)
                if not holders:
                    del self._gpu_holders[key]
            self._ref(key, -1)
        if not self._uid_leases.get(uid):
            self.freed.add(hold.node)  # nothing in the API to wait for (a map pod, or no Lease yet)

    def check(self, gone: Collection[str] = ()) -> None:
        """Raise AssertionError when the ledger's own indexes disagree, or an Exclusive GPU has two live holders.
        The holds of pods in `gone` (the API has none of them any more, the watch has not said so yet) do not count:
        a late event may show such a pod bound after its GPUs went to another, which only keeps them busy longer.
        For tests; O(everything)."""
        by_gpu: dict[GpuKey, set[str]] = {}
        for hold in self._holds.values():
            for key in hold.gpus:
                by_gpu.setdefault(key, set()).add(hold.uid)
        assert by_gpu == {k: v for k, v in self._gpu_holders.items() if v}, "GPU index out of date"
        for key, uids in by_gpu.items():
            holds = [self._holds[u] for u in uids if u not in gone]
            if len(holds) > 1:
                assert all(h.exclusivity != "Exclusive" for h in holds), f"{key} held exclusively twice: {holds}"
        uid_leases: dict[str, set[GpuKey]] = {}
        for lease in self._leases.values():
            for uid in lease.holders:
                uid_leases.setdefault(uid, set()).add(lease.key)
        assert uid_leases == self._uid_leases, "uid -> Leases index out of date"
        refs: dict[str, dict[GpuKey, int]] = {}
        for key in [k for h in self._holds.values() for k in h.gpus] + list(self._leases):
            refs.setdefault(key[0], {}).setdefault(key, 0)
            refs[key[0]][key] += 1
        assert refs == self._by_node, "node index out of date"


def _holdings(node: str, exclusive: set[int], shared: set[int]) -> tuple[Holding, ...]:
    return tuple(
        [Holding(node, (g,), "Exclusive") for g in sorted(exclusive)]
        + [Holding(node, (g,), "Shared") for g in sorted(shared - exclusive)]
    )


class Overlay:
    """A ledger's copy for trial placements (a gang's domains, preemption's victims): the ledger's holds as they are,
    less the pods `hide` counts as gone (with their names on Leases), plus the holds assumed on this copy only.
    Reads answer as the ledger would after those changes; nothing done here changes the ledger. O(the trial's
    holds) per read of a node they touch, nothing for the others.

    A trial places pods the ledger holds nothing for (a pod assumed by an earlier attempt keeps that hold: it is
    retried as it is). Kept trials are assumed on the ledger itself (scheduler.cache.Cache.commit)."""

    def __init__(self, base: Ledger) -> None:
        self._base = base
        self._holds: dict[str, Hold] = {}
        self._on_node: dict[str, set[str]] = {}  # node -> uids assumed here on it
        self._hidden: set[str] = set()  # the pods counted as gone

    def hold(self, uid: str) -> Hold | None:
        if uid in self._hidden:
            return None
        return self._holds.get(uid) or self._base.hold(uid)

    def hide(self, uid: str) -> None:
        """Count pod `uid` as gone: its hold and its names on Leases no longer count."""
        self._hidden.add(uid)

    def unhide(self, uid: str) -> None:
        """Count a hidden pod again (a victim reprieved)."""
        self._hidden.discard(uid)

    def holdings(self, node: str) -> tuple[Holding, ...]:
        mine = self._on_node.get(node)
        base = self._base.holdings(node, self._hidden)
        if not mine:
            return base
        exclusive = {g for h in base if h.exclusivity == "Exclusive" for g in h.gpu_ids}
        shared = {g for h in base if h.exclusivity != "Exclusive" for g in h.gpu_ids}
        for uid in mine:
            hold = self._holds[uid]
            (exclusive if hold.exclusivity == "Exclusive" else shared).update(hold.gpu_ids)
        return _holdings(node, exclusive, shared)

    def conflicts(self, node: str, gpu_ids: Iterable[int], exclusivity: str, uid: str) -> list[Conflict]:
        wanted = tuple(gpu_ids)
        out = self._base.conflicts(node, wanted, exclusivity, uid, self._hidden)
        for other in sorted(self._on_node.get(node, ())):
            hold = self._holds[other]
            if other == uid or not (exclusivity == "Exclusive" or hold.exclusivity == "Exclusive"):
                continue
            out.extend(Conflict(node, gpu, hold.describe()) for gpu in wanted if gpu in hold.gpu_ids)
        return out

    def assume(self, hold: Hold) -> list[Conflict]:
        """As `Ledger.assume`, on this copy."""
        conflicts = self.conflicts(hold.node, hold.gpu_ids, hold.exclusivity, hold.uid)
        if conflicts:
            return conflicts
        self.retract(hold.uid)
        self._holds[hold.uid] = dataclasses.replace(hold, bound=False)
        self._on_node.setdefault(hold.node, set()).add(hold.uid)
        return []

    def retract(self, uid: str) -> None:
        """Undo an assumption made on this copy."""
        hold = self._holds.pop(uid, None)
        if hold is not None:
            self._on_node[hold.node].discard(uid)
