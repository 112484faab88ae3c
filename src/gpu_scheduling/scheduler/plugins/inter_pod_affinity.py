"""InterPodAffinity: required pod affinity and anti-affinity, as kube-scheduler's plugin of the same name judges
them (its Filter), and the preferred terms, as it ranks nodes by them (its Score).

Filter checks, in kube-scheduler's order, the pod's affinity, its anti-affinity, then the placed pods'
anti-affinity. PreFilter reads the pod's terms (selectors.terms) and counts, once per attempt, per topology pair (a
node label's key and value):
- the pods already placed (bound, or assumed by this scheduler: the snapshot's NodeUsage) whose required
  anti-affinity terms match the incoming pod (`existing`): it may not go where one of them is;
- the placed pods that match all of its affinity terms (`affinity`): for each term, its node's domain must hold one;
- the placed pods that match any of its anti-affinity terms (`anti`): its node's domain must hold none.
A pod with no terms of its own, while no placed pod has anti-affinity towards it, is skipped (its Filter costs
nothing). The first pod of a group with affinity to itself may go anywhere its terms' topology labels are, as long
as no placed pod matches its terms yet. The counts read the snapshot, so the members of one gang placed on a trial
count for each other.

Score: PreScore adds up, per topology pair, over the placed pods (every one when the pod has preferred terms of its
own, else only those with Footprint.preferences, an index of NodeUsage):
- the weight of each of the pod's preferred affinity terms a placed pod matches, in that pod's domain of the term's
  topology key, and minus the weight of each of its preferred anti-affinity terms one matches;
- each placed pod's own terms that match the incoming pod (Footprint.preferences): its preferred affinity (+weight),
  its required affinity (+1, kube's hardPodAffinityWeight) and its preferred anti-affinity (-weight), in its domain.
A node scores the sum over the pairs of its labels; scores are scaled from the lowest (0) to the highest (100). A
pod that has no preferred terms, while no placed pod's terms match it, skips it.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from gpu_scheduling.scheduler import fit, framework, selectors
from gpu_scheduling.scheduler.framework import PodRefusal, Reason, Snapshot
from gpu_scheduling.scheduler.selectors import Term

Pair = tuple[str, str]


@dataclasses.dataclass(frozen=True)
class State:
    affinity: tuple[Term, ...]
    anti: tuple[Term, ...]
    existing: Counter[Pair]
    affinity_counts: Counter[Pair]
    anti_counts: Counter[Pair]
    matches_itself: bool
    """The pod matches all of its own affinity terms (it may be the first of its group)."""


class InterPodAffinity(framework.Plugin):
    name = "InterPodAffinity"
    wakes_on = frozenset({framework.NODE, framework.POD_GONE, framework.POD_ADDED, framework.NAMESPACE})

    def pre_filter(self, pod: Mapping[str, Any], snap: Snapshot) -> Any:
        try:
            affinity = selectors.terms(pod, "podAffinity")
            anti = selectors.terms(pod, "podAntiAffinity")
            labels = selectors.pod_labels(pod)
        except fit.FitError as exc:
            return PodRefusal(str(exc))
        meta = pod.get("metadata") or {}
        namespace, uid = str(meta.get("namespace") or ""), meta.get("uid")
        own_namespace = snap.namespace_labels(namespace)
        existing: Counter[Pair] = Counter()
        for other, taken in snap.usage.with_anti_affinity():
            node_labels = snap.node_labels(taken.node)
            if other == uid or node_labels is None:
                continue
            for term in taken.anti_affinity:
                value = node_labels.get(term.topology_key)
                if value is not None and term.matches(namespace, labels, own_namespace):
                    existing[(term.topology_key, value)] += 1
        if not affinity and not anti and not existing:
            return framework.SKIP
        affinity_counts: Counter[Pair] = Counter()
        anti_counts: Counter[Pair] = Counter()
        if affinity or anti:
            for other, taken in snap.usage.everyone():
                node_labels = snap.node_labels(taken.node)
                if other == uid or node_labels is None:
                    continue
                their_labels, their_namespace = dict(taken.labels), snap.namespace_labels(taken.namespace)
                if affinity and all(t.matches(taken.namespace, their_labels, their_namespace) for t in affinity):
                    _count(affinity_counts, affinity, node_labels)
                _count(
                    anti_counts,
                    [t for t in anti if t.matches(taken.namespace, their_labels, their_namespace)],
                    node_labels,
                )
        matches_itself = bool(affinity) and all(t.matches(namespace, labels, own_namespace) for t in affinity)
        return State(affinity, anti, existing, affinity_counts, anti_counts, matches_itself)

    def filter(self, state: State, node: Mapping[str, Any], snap: Snapshot) -> Reason | None:
        name = node["metadata"]["name"]
        labels: Mapping[str, str] = node["metadata"].get("labels") or {}
        if state.affinity:
            found = True
            for term in state.affinity:
                here = labels.get(term.topology_key)
                if here is None:
                    key = term.topology_key
                    return lambda: (
                        f"node {name} has no {key} label, a topology key of the pod's affinity "
                        "(node(s) didn't match pod affinity rules)"
                    )
                if state.affinity_counts.get((term.topology_key, here), 0) <= 0:
                    found = False
            if not found and not (not state.affinity_counts and state.matches_itself):
                return lambda: (
                    f"node {name}: no pod its affinity asks for runs in the node's domain of every term "
                    "(node(s) didn't match pod affinity rules)"
                )
        if state.anti_counts:
            for term in state.anti:
                there = labels.get(term.topology_key)
                if there is not None and state.anti_counts.get((term.topology_key, there), 0) > 0:
                    key = term.topology_key
                    return lambda: (
                        f"node {name}: a pod the pod's anti-affinity names runs in its {key}={there} domain "
                        "(node(s) didn't match pod anti-affinity rules)"
                    )
        if state.existing:
            for key, value in labels.items():
                if state.existing.get((key, value), 0) > 0:
                    return lambda: (
                        f"node {name}: a pod in its {key}={value} domain has required anti-affinity against this pod "
                        "(node(s) didn't satisfy existing pods anti-affinity rules)"
                    )
        return None

    def pre_score(self, pod: Mapping[str, Any], snap: Snapshot) -> Any:
        try:
            preferred = selectors.preferred_terms(pod, "podAffinity")
            avoided = selectors.preferred_terms(pod, "podAntiAffinity")
            labels = selectors.pod_labels(pod)
        except fit.FitError:
            return framework.SKIP
        own = (*preferred, *((term, -weight) for term, weight in avoided))
        meta = pod.get("metadata") or {}
        namespace, uid = str(meta.get("namespace") or ""), meta.get("uid")
        own_namespace = snap.namespace_labels(namespace)
        scores: dict[str, dict[str, int]] = {}
        for other, taken in snap.usage.everyone() if own else snap.usage.with_preferences():
            node_labels = snap.node_labels(taken.node)
            if other == uid or not node_labels:
                continue
            if own:
                their_labels, their_namespace = dict(taken.labels), snap.namespace_labels(taken.namespace)
                for term, weight in own:
                    if term.matches(taken.namespace, their_labels, their_namespace):
                        _add(scores, term.topology_key, node_labels, weight)
            for term, weight in taken.preferences:
                if term.matches(namespace, labels, own_namespace):
                    _add(scores, term.topology_key, node_labels, weight)
        return scores or framework.SKIP

    def score(
        self, state: dict[str, dict[str, int]], nodes: Sequence[Mapping[str, Any]], snap: Snapshot
    ) -> dict[str, int]:
        out = {}
        for node in nodes:
            labels: Mapping[str, str] = node["metadata"].get("labels") or {}
            out[node["metadata"]["name"]] = sum(
                values.get(labels[key], 0) for key, values in state.items() if key in labels
            )
        return out

    def normalize(self, state: Any, scores: Mapping[str, int]) -> dict[str, int]:
        lowest, highest = min(scores.values(), default=0), max(scores.values(), default=0)
        spread = highest - lowest
        if spread <= 0:
            return dict.fromkeys(scores, 0)
        # kube's float arithmetic, truncated, so that a node on a boundary scores as kube-scheduler scores it
        return {name: int(framework.MAX_NODE_SCORE * ((score - lowest) / spread)) for name, score in scores.items()}


def _add(scores: dict[str, dict[str, int]], key: str, node_labels: Mapping[str, str], weight: int) -> None:
    """Count `weight` for the domain of `key` that a node labelled `node_labels` is in (none without the key)."""
    value = node_labels.get(key)
    if value is not None:
        values = scores.setdefault(key, {})
        values[value] = values.get(value, 0) + weight


def _count(counts: Counter[Pair], terms: Any, node_labels: Mapping[str, str]) -> None:
    for term in terms:
        value = node_labels.get(term.topology_key)
        if value is not None:
            counts[(term.topology_key, value)] += 1
