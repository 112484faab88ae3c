"""The scheduler's cache (kube-scheduler's internal cache): the one owner of what this scheduler has assumed.

Two things are counted for every pod: the GPUs it holds (claims.ledger.Ledger) and its room on its node
(fit.NodeUsage). For bound pods the watch says both (`observe` for the room; the ledger's own watch events for the
GPUs). For the pods this scheduler decides, both are *assumed* here, in one step, before any API call (`assume`),
so that no concurrent decision reads a view without them; then the pod is bound (`confirm`) or the attempt is
undone, one way: `retract` while no API call was made for it (nothing to tell anyone), `forget` after (the attempt
failed: the room and the GPUs it freed wake the pods waiting for them, and the Leases that name it are handed to
the Lease reconciler until the API agrees).

Trial placements (a gang's candidate domains, later preemption's victims) never touch the live state: they run on a
`Trial` (`fork`), a copy-on-write of both that the same filters and allocator read through its snapshot, where
pods can be placed (`assume`, `retract`) and placed pods counted as gone (`remove`, `restore`); a trial that is
kept is assumed here with `commit`, with no await in between, so it cannot conflict.

Pure: no client and no I/O; what a change must wake is told to the `Listener` the controller sets.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import Any

from gpu_scheduling.claims.ledger import Conflict, GpuKey, Hold, Ledger, Overlay
from gpu_scheduling.scheduler import fit, framework
from gpu_scheduling.scheduler.volumes import VolumeCache

log = logging.getLogger(__name__)


def _nothing(*_: Any) -> None:
    return None


@dataclasses.dataclass
class Listener:
    """What the cache tells its owner (the controller wires it to the queue and the Lease reconciler)."""

    room_made: Callable[[str], None] = _nothing
    """A node has more room: a pod left it or asks less of it."""
    gpus_freed: Callable[[], None] = _nothing
    """The ledger may have freed GPUs (it collects the nodes in `Ledger.freed`)."""
    leases_released: Callable[[set[GpuKey]], None] = _nothing
    """These GPU Leases may name a pod that holds nothing now."""


def _taken(pod: Mapping[str, Any], node: str) -> fit.Footprint:
    taken = fit.footprint(pod, node)
    assert taken is not None, "a pod being placed is never finished"
    return taken


class Trial:
    """A copy of the cache to try placements on: assumptions made here change nothing in the cache."""

    def __init__(self, cache: Cache) -> None:
        self._cache = cache
        self.usage = cache.usage.fork()
        self.ledger = Overlay(cache.ledger)
        self.snapshot = dataclasses.replace(cache.snapshot, usage=self.usage, gpus=self.ledger)
        self._placed: dict[str, tuple[Mapping[str, Any], Hold]] = {}  # uid -> the pod placed here, in order

    def assume(self, pod: Mapping[str, Any], hold: Hold) -> list[Conflict]:
        """As `Cache.assume`, on this copy."""
        conflicts = self.ledger.assume(hold) if hold.gpu_ids else []
        if not conflicts:
            self.usage.set(hold.uid, _taken(pod, hold.node))
            self._placed[hold.uid] = (pod, hold)
        return conflicts

    def retract(self, uid: str) -> None:
        """Undo what this copy assumed for `uid`."""
        self.ledger.retract(uid)
        if self._placed.pop(uid, None) is not None:
            self.usage.set(uid, self._cache.usage.footprint(uid))

    def remove(self, uid: str) -> None:
        """Count the placed pod `uid` as gone on this copy: its GPUs (and its names on their Leases) and its room
        (preemption's victims)."""
        self.ledger.hide(uid)
        self.usage.set(uid, None)

    def restore(self, uid: str) -> None:
        """Count a removed pod again (a victim reprieved)."""
        self.ledger.unhide(uid)
        self.usage.set(uid, self._cache.usage.footprint(uid))

    def placed(self) -> list[tuple[Mapping[str, Any], Hold]]:
        """What this copy assumed, in order: each pod and its hold."""
        return list(self._placed.values())


class Cache:
    def __init__(
        self,
        ledger: Ledger | None = None,
        volumes: VolumeCache | None = None,
        nodes: Mapping[str, Mapping[str, Any]] | None = None,
        namespaces: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self.ledger = ledger or Ledger()
        self.usage = fit.NodeUsage()
        self.snapshot = framework.Snapshot(
            self.usage,
            volumes,
            self.ledger,
            nodes if nodes is not None else {},
            namespaces if namespaces is not None else {},
        )
        """What the filters and the allocator read: this cache, live."""
        self.listener = Listener()
        self._assumed: set[str] = set()  # pods whose room is our decision, not yet the watch's word

    # ---- the watch ---------------------------------------------------------------------------------------------
    def observe(self, uid: str, taken: fit.Footprint | None) -> None:
        """The API says what pod `uid` takes (None: nothing: unbound, finished or gone). Replaces an assumption."""
        self._assumed.discard(uid)
        self._made_room(self.usage.set(uid, taken))

    def node_gone(self, name: str) -> None:
        self.usage.node_gone(name)

    def assumed(self, uid: str) -> bool:
        """Whether `uid`'s room is counted from our decision, the watch not having shown it bound yet."""
        return uid in self._assumed

    # ---- this scheduler's decisions ----------------------------------------------------------------------------
    def assume(self, pod: Mapping[str, Any], hold: Hold) -> list[Conflict]:
        """Count `pod` on `hold.node` with `hold`'s GPUs (none for a pod that asks none) from now on, before any
        API call for it; or, when others hold those GPUs in a way it cannot share, nothing and who they are."""
        conflicts = self.ledger.assume(hold) if hold.gpu_ids else []
        if not conflicts:
            self.usage.set(hold.uid, _taken(pod, hold.node))
            self._assumed.add(hold.uid)
        return conflicts

    def confirm(self, uid: str) -> None:
        """The pod of an assumption is bound (the watch will say what it takes)."""
        self.ledger.confirm(uid)

    def retract(self, uid: str) -> None:
        """Undo an assumption no API call was made for: nothing was held in the API, so nothing counts as freed."""
        self.ledger.retract(uid)
        self.drop_room(uid)

    def drop_room(self, uid: str) -> str | None:
        """Stop counting the room our last decision gave `uid` (it is being decided again); its GPUs stay assumed.
        The node it had, if any."""
        if uid not in self._assumed:
            return None
        self._assumed.discard(uid)
        return self.usage.set(uid, None)

    def forget(self, uid: str) -> None:
        """The attempt for `uid` is over without a binding: it holds nothing and takes no room. What it freed wakes
        the pods waiting for it, and the Leases naming it (created by this attempt or not yet seen) are released."""
        room = self.drop_room(uid)
        hold = self.ledger.hold(uid)
        # A claim's Leases may exist before the watch shows them (this attempt created them); a map hold has none.
        keys = self.ledger.forget(uid) | (set(hold.gpus) if hold is not None and hold.source == "claim" else set())
        self._made_room(room)
        self.listener.leases_released(keys)
        self.listener.gpus_freed()

    # ---- trials --------------------------------------------------------------------------------------------------
    def fork(self) -> Trial:
        return Trial(self)

    def commit(self, trial: Trial) -> list[Conflict]:
        """Assume here what `trial` placed. Called with no await since the fork, so nothing can conflict; if
        something does (a bug), what was assumed is retracted and the conflicts are returned."""
        done: list[str] = []
        for pod, hold in trial.placed():
            conflicts = self.assume(pod, hold)
            if conflicts:
                log.error("a trial's placements conflict with the cache: %s", conflicts)
                for uid in done:
                    self.retract(uid)
                return conflicts
            done.append(hold.uid)
        return []

    def _made_room(self, node: str | None) -> None:
        if node is not None:
            self.listener.room_made(node)
