"""PodTopologySpread: the pod's `topologySpreadConstraints` with `whenUnsatisfiable: DoNotSchedule`, as
kube-scheduler's plugin of the same name judges them (its Filter), and those with `ScheduleAnyway`, as it ranks nodes
by them (its Score).

PreFilter counts, per constraint, the placed pods (bound, or assumed by this scheduler) of the pod's namespace that
its selector matches (`labelSelector`, with the pod's own values of `matchLabelKeys`; terminating pods do not count;
an empty selector, `{}`, counts none, as kube's, though the pod matches it itself), per value of the topology key,
over the eligible nodes: those with every constraint's topology key that pass its node inclusion policies
(`nodeAffinityPolicy`, Honor by default: the pod's nodeSelector and required node affinity; `nodeTaintsPolicy`,
Ignore by default: Honor leaves out nodes with a NoSchedule or NoExecute taint the pod does not tolerate). Filter: a
node without the topology key is refused; otherwise the count of its domain, plus one if the pod matches its own
selector, minus the fewest of any eligible domain (0 while there are fewer domains than `minDomains`) may not exceed
`maxSkew`.

Score: PreScore counts the ScheduleAnyway constraints' matching pods per domain as PreFilter does (the pod itself not
counted). Of the feasible nodes, one without every constraint's topology key scores 0; each other scores, summed over
the constraints, the count of its domain times log(domains + 2) plus maxSkew - 1, where `domains` is how many domains
the feasible nodes are in (for `kubernetes.io/hostname`, how many nodes; and that key counts the node's own pods),
rounded; NormalizeScore then gives the lowest 100 and the others 100 * (highest + lowest - score) / highest. A pod
without ScheduleAnyway constraints skips it. (kube-scheduler's system-default constraints, for a pod of a Service or
ReplicaSet that has none of its own, are not applied: they need the watches of those objects.)"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from gpu_scheduling.scheduler import fit, framework, selectors
from gpu_scheduling.scheduler.framework import PodRefusal, Reason, Snapshot
from gpu_scheduling.scheduler.plugins import node_affinity, taint_toleration
from gpu_scheduling.text import json_type

FIELD = "spec.topologySpreadConstraints"
HOSTNAME = "kubernetes.io/hostname"
_POLICIES = ("Honor", "Ignore")


@dataclasses.dataclass(frozen=True)
class Constraint:
    max_skew: int
    topology_key: str
    selector: selectors.Selector
    min_domains: int = 1
    honor_affinity: bool = True
    honor_taints: bool = False


@dataclasses.dataclass(frozen=True)
class State:
    constraints: tuple[Constraint, ...]
    counts: tuple[dict[str, int], ...]
    """Per constraint: matching pods per value of its topology key, over the eligible nodes (a domain with none: 0)."""
    self_match: tuple[bool, ...]
    fewest: tuple[int, ...]
    """Per constraint: the global minimum the skew is measured from (the fewest of any domain; 0 while there are
    fewer domains than `minDomains`), worked out once in PreFilter, not per node judged."""


@dataclasses.dataclass(frozen=True)
class Soft:
    """What Score reads of a pod with ScheduleAnyway constraints."""

    constraints: tuple[Constraint, ...]
    counts: tuple[dict[str, int], ...]
    """Per constraint: matching pods per value of its topology key, over the eligible nodes (as State.counts)."""
    namespace: str
    uid: Any


class PodTopologySpread(framework.Plugin):
    name = "PodTopologySpread"
    wakes_on = frozenset({framework.NODE, framework.POD_GONE, framework.POD_ADDED})

    def pre_filter(self, pod: Mapping[str, Any], snap: Snapshot) -> Any:
        try:
            constraints = read(pod)
            if not constraints:
                return framework.SKIP
            labels = selectors.pod_labels(pod)
            wanted = node_affinity.read(pod)
            tolerations = taint_toleration.tolerations(pod)
        except (fit.FitError, ValueError) as exc:
            return PodRefusal(str(exc))
        meta = pod.get("metadata") or {}
        namespace, uid = str(meta.get("namespace") or ""), meta.get("uid")
        counts = _counts(constraints, wanted, tolerations, namespace, uid, snap)
        self_match = tuple(c.selector.matches(labels) for c in constraints)
        fewest = tuple(
            0 if len(n) < c.min_domains else min(n.values(), default=0)
            for c, n in zip(constraints, counts, strict=True)
        )
        return State(constraints, tuple(counts), self_match, fewest)

    def filter(self, state: State, node: Mapping[str, Any], snap: Snapshot) -> Reason | None:
        name = node["metadata"]["name"]
        labels: Mapping[str, str] = node["metadata"].get("labels") or {}
        for c, counts, own, fewest in zip(state.constraints, state.counts, state.self_match, state.fewest, strict=True):
            key = c.topology_key
            value = labels.get(key)
            if value is None:
                return lambda: (
                    f"node {name} has no {key} label (node(s) didn't match pod topology spread constraints "
                    "(missing required label))"
                )
            here = counts.get(value, 0)
            if here + own - fewest > c.max_skew:
                return lambda: (
                    f"node {name}: {key}={value} has {here} matching pods and the emptiest domain {fewest}, "
                    f"maxSkew {c.max_skew} (node(s) didn't match pod topology spread constraints)"
                )
        return None

    def pre_score(self, pod: Mapping[str, Any], snap: Snapshot) -> Any:
        try:
            constraints = read(pod, "ScheduleAnyway")
            if not constraints:
                return framework.SKIP
            wanted = node_affinity.read(pod)
            tolerations = taint_toleration.tolerations(pod)
        except (fit.FitError, ValueError):
            return framework.SKIP
        meta = pod.get("metadata") or {}
        namespace, uid = str(meta.get("namespace") or ""), meta.get("uid")
        counts = _counts(constraints, wanted, tolerations, namespace, uid, snap)
        return Soft(constraints, tuple(counts), namespace, uid)

    def score(self, state: Soft, nodes: Sequence[Mapping[str, Any]], snap: Snapshot) -> dict[str, int]:
        keys = [c.topology_key for c in state.constraints]
        scored = [n for n in nodes if all(k in (n["metadata"].get("labels") or {}) for k in keys)]
        # kube's topology normalizing weight: log(domains + 2), the domains of the scored nodes (for the hostname
        # key, the scored nodes), so that a constraint over few domains is not watered down by one over many
        domains = [
            len(scored) if key == HOSTNAME else len({n["metadata"]["labels"][key] for n in scored}) for key in keys
        ]
        weights = [math.log(d + 2) for d in domains]
        out = dict.fromkeys((n["metadata"]["name"] for n in nodes), _IGNORED)
        for node in scored:
            name, labels = node["metadata"]["name"], node["metadata"]["labels"]
            total = 0.0
            for c, counts, weight in zip(state.constraints, state.counts, weights, strict=True):
                if c.topology_key == HOSTNAME:
                    here = _matching(c, snap.usage.pods_on(name), state.namespace, state.uid)
                else:
                    here = counts.get(labels[c.topology_key], 0)
                total += here * weight + (c.max_skew - 1)
            out[name] = _round(total)
        return out

    def normalize(self, state: Any, scores: Mapping[str, int]) -> dict[str, int]:
        valid = [score for score in scores.values() if score != _IGNORED]
        lowest, highest = min(valid, default=0), max([0, *valid])
        top = framework.MAX_NODE_SCORE
        return {
            name: 0 if score == _IGNORED else top if highest == 0 else top * (highest + lowest - score) // highest
            for name, score in scores.items()
        }


_IGNORED = -1
"""The raw score of a feasible node without every constraint's topology key (kube's invalidScore): it scores 0."""


def _round(x: float) -> int:
    """Go's math.Round of a non-negative number: half away from zero (Python's round() rounds half to even)."""
    whole = math.floor(x)
    return int(whole) + (1 if x - whole >= 0.5 else 0)


def _matching(c: Constraint, pods: Any, namespace: str, uid: Any) -> int:
    """How many of `pods` (uid, Footprint) count for `c`: of `namespace`, not terminating, not the pod itself,
    matched by its selector (an empty selector counts none, as kube's)."""
    if c.selector.empty:
        return 0
    return sum(
        1
        for other, taken in pods
        if other != uid
        and taken.namespace == namespace
        and not taken.terminating
        and c.selector.matches(dict(taken.labels))
    )


def _counts(
    constraints: tuple[Constraint, ...],
    wanted: node_affinity.Wanted,
    tolerations: list[Mapping[str, Any]],
    namespace: str,
    uid: Any,
    snap: Snapshot,
) -> list[dict[str, int]]:
    """Per constraint, the matching pods per value of its topology key, over the nodes that have every constraint's
    key and pass its node inclusion policies. O(nodes + the distinct label sets of the namespace's pods and the nodes
    they are on), not O(pods): the usage keeps the pods grouped by their labels (NodeUsage.label_groups), so each
    selector is matched once per label set."""
    counts: list[dict[str, int]] = [{} for _ in constraints]
    domain_of: list[dict[str, str]] = [{} for _ in constraints]  # per constraint: included node -> its domain
    for name, node in snap.nodes.items():
        node_labels = node["metadata"].get("labels") or {}
        if not all(c.topology_key in node_labels for c in constraints):
            continue
        # The node inclusion policies, judged at most once per node whatever the number of constraints.
        affinity_ok = taints_ok = None
        for i, c in enumerate(constraints):
            if c.honor_affinity:
                if affinity_ok is None:
                    affinity_ok = node_affinity.refusal(wanted, node) is None
                if not affinity_ok:
                    continue
            if c.honor_taints:
                if taints_ok is None:
                    taints_ok = taint_toleration.refusal(node, tolerations) is None
                if not taints_ok:
                    continue
            value = node_labels[c.topology_key]
            domain_of[i][name] = value
            counts[i].setdefault(value, 0)
    # kube counts no pod for an empty selector (and, in Filter, the pod itself, which it matches, still); nor the
    # pod itself when it is counted already (assumed on a node by an earlier attempt).
    own = snap.usage.footprint(uid) if isinstance(uid, str) else None
    for labels, on_nodes in snap.usage.label_groups(namespace):
        as_dict = dict(labels)
        for i, c in enumerate(constraints):
            if c.selector.empty or not c.selector.matches(as_dict):
                continue
            into, where = counts[i], domain_of[i]
            for node_name, pods in on_nodes.items():
                value = where.get(node_name)
                if value is not None:
                    into[value] += pods
            if own is not None and not own.terminating and own.namespace == namespace and own.labels == labels:
                value = where.get(own.node)
                if value is not None:
                    into[value] -= 1
    return counts


def read(pod: Mapping[str, Any], when: str = "DoNotSchedule") -> tuple[Constraint, ...]:
    """The pod's constraints whose `whenUnsatisfiable` is `when` (DoNotSchedule, the default, or ScheduleAnyway);
    FitError naming the field that cannot be read."""
    listed = fit.spec_of(pod).get("topologySpreadConstraints") or []
    if not isinstance(listed, list):
        raise fit.FitError(f"{FIELD} is {json_type(listed)}; expected an array")
    pod_labels = selectors.pod_labels(pod)
    out = []
    for i, c in enumerate(listed):
        where = f"{FIELD}[{i}]"
        if not isinstance(c, Mapping):
            raise fit.FitError(f"{where} is not an object")
        if c.get("whenUnsatisfiable", "DoNotSchedule") != when:
            continue
        skew, key, min_domains = c.get("maxSkew"), c.get("topologyKey"), c.get("minDomains", 1)
        if not isinstance(skew, int) or isinstance(skew, bool) or skew < 1:
            raise fit.FitError(f"{where}.maxSkew is {skew!r}; expected an integer of at least 1")
        if not isinstance(key, str) or not key:
            raise fit.FitError(f"{where}.topologyKey is {key!r}; expected a label key")
        if min_domains is None:
            min_domains = 1
        if not isinstance(min_domains, int) or isinstance(min_domains, bool) or min_domains < 1:
            raise fit.FitError(f"{where}.minDomains is {min_domains!r}; expected an integer of at least 1")
        policies = []
        for field, default in (("nodeAffinityPolicy", "Honor"), ("nodeTaintsPolicy", "Ignore")):
            policy = c.get(field) or default
            if policy not in _POLICIES:
                raise fit.FitError(f"{where}.{field} is {policy!r}; expected Honor or Ignore")
            policies.append(policy == "Honor")
        keys = c.get("matchLabelKeys") or []
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise fit.FitError(f"{where}.matchLabelKeys is not an array of strings")
        chosen = selectors.selector(c.get("labelSelector"), f"{where}.labelSelector")
        chosen = chosen.with_labels({k: pod_labels[k] for k in keys if k in pod_labels})
        out.append(Constraint(skew, key, chosen, min_domains, policies[0], policies[1]))
    return tuple(out)
