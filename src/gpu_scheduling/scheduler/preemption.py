"""PostFilter: preemption, as kube-scheduler's DefaultPreemption judges it. Pure: no I/O; the controller
(scheduler.controller) feeds it the cache and carries out its choice.

For a pod that fits nowhere, each candidate node is tried on a copy of the cache (scheduler.cache.Trial):

1. every placed pod of lower priority than the preemptor's on the node is counted as gone (`Trial.remove`: its
   GPUs and its room);
2. if the preemptor still does not fit (GPUs, room, ports, volumes, affinity: the same filters and allocator as
   any attempt), the node cannot help;
3. otherwise the victims are reprieved greedily, the most important first (higher priority, then the earlier
   start), those whose eviction would break a PodDisruptionBudget first: each is counted again and stays only if
   the preemptor still fits.

What is evicted together is a `Victim`: one pod, or every placed member of a running gang (a gang is evicted whole
or not at all: its priority is its highest member's, and its members on other nodes go with it). A pod never
preempts pods of equal or higher priority, nor its own gang.

The candidates are ordered as kube-scheduler orders them (`Candidate.rank`): fewest PodDisruptionBudget
violations, then the lowest highest-victim priority, the smallest sum of priorities, the fewest victim pods, the
latest start among the highest-priority victims, and last the node's name (kube-scheduler takes the first of its
list).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from gpu_scheduling.scheduler import fit, selectors
from gpu_scheduling.scheduler.fields import FitError

PRIORITY_OFFSET = 2**31
"""Added to each victim's priority before they are summed (kube-scheduler adds MaxInt32 + 1), so that a negative
priority never makes more victims look cheaper than fewer."""


@dataclasses.dataclass(frozen=True)
class Pod:
    """A placed pod as preemption reads it (from the cache's fit.Footprint)."""

    uid: str
    namespace: str
    name: str
    node: str
    priority: int
    started: str
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def of(cls, uid: str, taken: fit.Footprint) -> Pod:
        return cls(uid, taken.namespace, taken.name, taken.node, taken.priority, taken.started, taken.labels)


@dataclasses.dataclass(frozen=True)
class Victim:
    """What is evicted together: one pod, or every placed member of a running gang."""

    pods: tuple[Pod, ...]
    gang: str | None = None

    @property
    def priority(self) -> int:
        return max(p.priority for p in self.pods)

    @property
    def started(self) -> str:
        return min(p.started for p in self.pods)

    def importance(self) -> tuple[int, str]:
        """Sort key, the most important first (kube-scheduler's MoreImportantPod: higher priority, then the
        earlier start)."""
        return (-self.priority, self.started)


@dataclasses.dataclass(frozen=True)
class Budget:
    """A PodDisruptionBudget as preemption reads it: the pods it covers and how many may be disrupted now."""

    namespace: str
    name: str
    selector: selectors.Selector
    allowed: int
    disrupted: frozenset[str] = frozenset()
    """Pods (names) the disruption controller already counts as disrupted: evicting them costs nothing more."""

    def covers(self, pod: Pod) -> bool:
        # kube-scheduler's preemption skips a budget with an empty (or absent) selector: it covers no pod. Nor does it
        # count a pod with no labels against any budget (filterPodsWithPDBViolation), although a NotIn or
        # DoesNotExist selector matches one and the disruption controller counts it.
        return (
            bool(pod.labels)
            and pod.namespace == self.namespace
            and not self.selector.empty
            and self.selector.matches(dict(pod.labels))
        )


def budget(pdb: Mapping[str, Any]) -> Budget | None:
    """A policy/v1 PodDisruptionBudget as preemption reads it; None when its selector cannot be read (the API never
    stores such a one)."""
    meta = pdb.get("metadata") or {}
    spec = pdb.get("spec") or {}
    status = pdb.get("status") or {}
    try:
        selector = selectors.selector(spec.get("selector"), "spec.selector")
    except FitError:
        return None
    allowed = status.get("disruptionsAllowed")
    return Budget(
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
        selector,
        allowed if isinstance(allowed, int) and not isinstance(allowed, bool) else 0,
        frozenset(status.get("disruptedPods") or {}),
    )


def split_by_budgets(victims: Sequence[Victim], budgets: Iterable[Budget]) -> tuple[list[Victim], list[Victim]]:
    """The victims whose eviction would break a PodDisruptionBudget, and the others, each in the given order:
    as kube-scheduler counts them, each pod a budget covers takes one of its allowed disruptions, in order, and a
    pod that finds none left breaks it. A victim breaks one when any of its pods does."""
    budgets = list(budgets)
    left = [b.allowed for b in budgets]
    violating: list[Victim] = []
    others: list[Victim] = []
    for victim in victims:
        broken = False
        for pod in victim.pods:
            for i, b in enumerate(budgets):
                if not b.covers(pod) or pod.name in b.disrupted:
                    continue
                left[i] -= 1
                if left[i] < 0:
                    broken = True
        (violating if broken else others).append(victim)
    return violating, others


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A node (or a gang's domain) where the preemptor fits once `victims` are gone."""

    node: str
    victims: tuple[Victim, ...]
    violations: int

    def pods(self) -> list[Pod]:
        return [p for v in self.victims for p in v.pods]

    def rank(self) -> tuple[Any, ...]:
        """Sort key, the best candidate first (kube-scheduler's pickOneNodeForPreemption)."""
        pods = self.pods()
        if not pods:  # the preemptor fits as it is: kube-scheduler takes such a node at once
            return (-1, self.node)
        highest = max(p.priority for p in pods)
        earliest = min(p.started for p in pods if p.priority == highest)
        return (
            self.violations,
            highest,
            sum(p.priority + PRIORITY_OFFSET for p in pods),
            len(pods),
            _latest_first(earliest),
            self.node,
        )


def _latest_first(stamp: str) -> tuple[int, ...]:
    """A key that sorts later RFC 3339 timestamps (as the apiserver writes them: UTC, `Z`) first."""
    return (*(-ord(c) for c in stamp), 1)


def victims_on(
    placed: Iterable[tuple[str, fit.Footprint]],
    rank: int,
    gang_of: Callable[[str, fit.Footprint], str | None],
    members: Callable[[str], Sequence[Pod]],
    own_gang: str | None = None,
    spare: Callable[[str], bool] = lambda _: False,
) -> list[Victim]:
    """The victims a preemptor of priority `rank` may take among the pods `placed` on a node (uid, what it takes):
    each pod of lower priority alone, or, for a member of a running gang (`gang_of`), every placed member of its
    gang (`members`; none: not a victim now) when all of them are of lower priority. Never a member of `own_gang`,
    nor a pod `spare` names (the preemptor itself, pods being bound)."""
    victims: list[Victim] = []
    seen: set[str] = set()
    for uid, taken in sorted(placed, key=lambda p: p[0]):
        if uid in seen or taken.priority >= rank or spare(uid):
            continue
        gang = gang_of(uid, taken)
        if gang is None:
            victims.append(Victim((Pod.of(uid, taken),)))
            continue
        if gang == own_gang:
            continue
        together = tuple(members(gang))
        seen.update(p.uid for p in together)
        if together and all(p.priority < rank for p in together):
            victims.append(Victim(together, gang))
    return victims


class Removable(Protocol):
    """Where victims are counted as gone or back (scheduler.cache.Trial)."""

    def remove(self, uid: str) -> None: ...

    def restore(self, uid: str) -> None: ...


def select_victims(
    trial: Removable,
    node: str,
    potential: Sequence[Victim],
    fits: Callable[[], bool],
    budgets: Iterable[Budget],
) -> Candidate | None:
    """The fewest victims among `potential` (the lower-priority victims touching `node`) that make the preemptor
    fit on `trial` (`fits`), reprieving the most important first; None when it does not fit even with all gone.
    `trial` is left with the victims removed."""
    for victim in potential:
        for pod in victim.pods:
            trial.remove(pod.uid)
    if not fits():
        return None
    ordered = sorted(potential, key=Victim.importance)
    violating, others = split_by_budgets(ordered, budgets)
    chosen: list[Victim] = []
    violations = 0
    for group, breaks in ((violating, True), (others, False)):
        for victim in group:
            for pod in victim.pods:
                trial.restore(pod.uid)
            if fits():
                continue
            for pod in victim.pods:
                trial.remove(pod.uid)
            chosen.append(victim)
            violations += breaks
    return Candidate(node, tuple(chosen), violations)


def candidates(
    trial: Removable,
    nodes: Iterable[str],
    victims_in: Callable[[str], Sequence[Victim]],
    fits: Callable[[str], bool],
    budgets: Iterable[Budget],
) -> list[Candidate]:
    """Each node's candidate (`select_victims`), all tried on one `trial`: `victims_in(node)` the node's potential
    victims, `fits(node)` whether the preemptor fits it on the trial now. A node without potential victims is none
    (kube-scheduler: "No preemption victims found"); each node's victims are counted back before the next."""
    budgets = list(budgets)
    found: list[Candidate] = []
    for node in nodes:
        potential = victims_in(node)
        if not potential:
            continue
        candidate = select_victims(trial, node, potential, functools.partial(fits, node), budgets)
        for victim in potential:
            for pod in victim.pods:
                trial.restore(pod.uid)
        if candidate is not None:
            found.append(candidate)
    return found


def best(candidates: Iterable[Candidate]) -> Candidate | None:
    """The candidate kube-scheduler would choose, or None."""
    return min(candidates, key=Candidate.rank, default=None)
