"""The order pending claim pods are served in, and the nodes kept for those that wait. Pure: no I/O.

Queue order `Priority` (the default) serves by pod priority (`spec.priority`, which the PriorityClass admission
sets; absent counts as 0), then age (`metadata.creationTimestamp`), then `namespace/name`. `FIFO` ignores priority:
age, then name.

Serving in order is not enough on its own: a claim for a whole node that waits behind a stream of one-GPU claims
would find a GPU busy whenever it is tried, and the small claims, tried after it, would take each GPU that frees
up. So under `Priority` a claim pod that waits because GPUs are busy now (the allocator's `Pending`) keeps every
node it could ever use (its selector matches and `allocator.ever_fits`) from pods of strictly lower priority,
until it is placed, deleted or stops waiting. Those nodes drain as their pods finish, and the first that frees
enough GPUs is its. The nodes are kept from lower priorities only: pods of equal priority do not reserve against
each other (they are served by age, and a reservation among equals would let any waiter stall all the others).
`FIFO` reserves nothing. Nothing is preempted: a waiter waits for running pods to finish, however low their
priority.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from gpu_scheduling.claims.allocator import Node, Request, ever_fits

_NOTHING: Mapping[str, str] = MappingProxyType({})


def pod_priority(pod: Mapping[str, Any]) -> int:
    """The pod's `spec.priority`; 0 when it has none (no PriorityClass, or the admission plugin is off)."""
    return int((pod.get("spec") or {}).get("priority") or 0)


def order_key(pod: Mapping[str, Any], queue_order: str) -> tuple[int, str, str]:
    """Sort key of a pending pod: the one served first sorts first. RFC 3339 timestamps as the apiserver writes them
    (UTC, `Z`) compare in time order as strings; a pod with none sorts before those that have one. Any queue order
    but `FIFO` reads as `Priority`."""
    meta = pod.get("metadata") or {}
    created = str(meta.get("creationTimestamp") or "")
    name = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    return (0 if queue_order == "FIFO" else -pod_priority(pod), created, name)


def usable_nodes(request: Request, nodes: Iterable[Node]) -> frozenset[str]:
    """The nodes `request` could ever be placed on: its selector matches and they are big enough."""
    return frozenset(
        n.name
        for n in nodes
        if all(n.labels.get(k) == v for k, v in request.match_labels.items()) and ever_fits(n, request)
    )


@dataclasses.dataclass(frozen=True)
class Waiter:
    """A claim pod waiting for busy GPUs, and the nodes it keeps from lower priorities."""

    key: str
    """`namespace/name`, as the waiter is named to the pods it keeps out."""
    priority: int
    created: str
    nodes: frozenset[str]


class Reservations:
    """The waiting claim pods, indexed by priority so that a pod with nothing of higher priority waiting (under
    one priority, every pod) finds no reservation in O(1); the nodes kept above each priority are computed once
    per change."""

    def __init__(self) -> None:
        self._waiters: dict[str, Waiter] = {}
        self._levels: list[int] = []  # the distinct priorities waiting, ascending
        self._at: dict[int, int] = {}  # priority -> how many wait at it
        self._kept: dict[int, Mapping[str, str]] = {}  # lowest waiting priority above the asker's -> kept nodes

    def __len__(self) -> int:
        return len(self._waiters)

    def wait(self, waiter: Waiter) -> None:
        """`waiter` waits (again) and keeps its nodes; a pod already waiting has its priority and nodes updated."""
        old = self._waiters.get(waiter.key)
        if old == waiter:
            return
        if old is not None:
            self._drop(old)
        self._waiters[waiter.key] = waiter
        if waiter.priority not in self._at:
            self._at[waiter.priority] = 0
            bisect.insort(self._levels, waiter.priority)
        self._at[waiter.priority] += 1
        self._kept.clear()

    def done(self, key: str) -> bool:
        """Pod `key` waits no more (placed, deleted, or no longer waiting for busy GPUs). True when its nodes were
        kept from someone, so that the caller tries them again: a pod its nodes kept out waits for busy GPUs itself
        (the allocator's `Pending`), so it is a waiter of lower priority. Under one priority nothing was kept from
        anyone: deleting a backlog of 2000 such pods woke every other one 2000 times."""
        old = self._waiters.pop(key, None)
        if old is None:
            return False
        self._drop(old)
        return bool(self._levels) and self._levels[0] < old.priority

    def _drop(self, waiter: Waiter) -> None:
        self._waiters.pop(waiter.key, None)
        self._at[waiter.priority] -= 1
        if not self._at[waiter.priority]:
            del self._at[waiter.priority]
            self._levels.remove(waiter.priority)
        self._kept.clear()

    def reserved_for(self, priority: int, queue_order: str) -> Mapping[str, str]:
        """The nodes a pod of `priority` may not take: node -> `ns/name (priority N)` of the waiter keeping it (of
        several, the highest priority, then the oldest). Empty under `FIFO`. Read-only, and valid until the next
        `wait` or `done`."""
        if queue_order == "FIFO" or not self._levels or self._levels[-1] <= priority:
            return _NOTHING
        floor = self._levels[bisect.bisect_right(self._levels, priority)]
        kept = self._kept.get(floor)
        if kept is None:
            above = sorted(
                (w for w in self._waiters.values() if w.priority >= floor),
                key=lambda w: (-w.priority, w.created, w.key),
            )
            table: dict[str, str] = {}
            for w in above:
                for node in w.nodes:
                    table.setdefault(node, f"{w.key} (priority {w.priority})")
            kept = self._kept[floor] = MappingProxyType(table)
        return kept
