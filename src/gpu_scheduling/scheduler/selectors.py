"""Label selectors and pod affinity terms, read once and matched as Kubernetes matches them
(metav1.LabelSelectorAsSelector, the scheduler's AffinityTerm). Pure: plain dicts in, frozen values out, so that what
a pod asks can sit in fit.Footprint and be compared and hashed.

- A label selector absent (None) matches nothing; an empty one ({}) matches everything; otherwise every matchLabels
  pair and every expression (In, NotIn, Exists, DoesNotExist) must hold.
- A pod affinity term applies to the pods of its `namespaces`, and of the namespaces its `namespaceSelector`
  matches (an empty selector: all of them); with neither, to the pods of its own pod's namespace.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from gpu_scheduling.scheduler import fields

_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})

Labels = Mapping[str, str]


@dataclasses.dataclass(frozen=True, slots=True)
class Selector:
    """A label selector: `nothing` for an absent one."""

    match_labels: tuple[tuple[str, str], ...] = ()
    expressions: tuple[tuple[str, str, frozenset[str]], ...] = ()
    nothing: bool = False

    @property
    def empty(self) -> bool:
        """A selector of no requirement ({}): it matches every label set."""
        return not self.nothing and not self.match_labels and not self.expressions

    def matches(self, labels: Labels) -> bool:
        if self.nothing:
            return False
        for key, value in self.match_labels:
            if labels.get(key) != value:
                return False
        return all(fields.requirement_holds(key, op, values, labels) for key, op, values in self.expressions)

    def with_labels(self, pairs: Mapping[str, str]) -> Selector:
        """This selector and `pairs` too (matchLabelKeys: the pod's own values of the keys it names). An absent
        selector with pairs is the pairs alone, as kube merges them."""
        if not pairs:
            return self
        if self.nothing:
            return Selector(tuple(sorted(pairs.items())))
        return dataclasses.replace(self, match_labels=tuple(sorted({**dict(self.match_labels), **pairs}.items())))


NOTHING = Selector(nothing=True)


def selector(value: Any, field: str) -> Selector:
    """A LabelSelector from the API; FitError naming `field` when it is not of the API's shape."""
    if value is None:
        return NOTHING
    if not isinstance(value, Mapping):
        raise fields.FitError(f"{field} is not an object")
    labels = value.get("matchLabels") or {}
    if not isinstance(labels, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise fields.FitError(f"{field}.matchLabels is not an object of strings")
    listed = value.get("matchExpressions") or []
    if not isinstance(listed, list):
        raise fields.FitError(f"{field}.matchExpressions is not an array")
    expressions = []
    for i, e in enumerate(listed):
        where = f"{field}.matchExpressions[{i}]"
        if not isinstance(e, Mapping) or not isinstance(e.get("key"), str):
            raise fields.FitError(f"{where} is not an object with a string key")
        op = e.get("operator")
        if not isinstance(op, str) or op not in _OPERATORS:
            raise fields.FitError(f"{where}.operator is {op!r}; expected In, NotIn, Exists or DoesNotExist")
        values = e.get("values") or []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise fields.FitError(f"{where}.values is not an array of strings")
        expressions.append((e["key"], str(op), frozenset(values)))
    return Selector(tuple(sorted(labels.items())), tuple(expressions))


@dataclasses.dataclass(frozen=True, slots=True)
class Term:
    """A pod affinity or anti-affinity term, its namespaces resolved against its own pod's."""

    selector: Selector
    topology_key: str
    namespaces: frozenset[str]
    namespace_selector: Selector | None = None

    def matches(self, namespace: str, labels: Labels, namespace_labels: Labels) -> bool:
        """Whether a pod of `namespace` (whose labels are `namespace_labels`: none for a namespace not known) with
        `labels` is one this term is about."""
        if namespace not in self.namespaces and not (
            self.namespace_selector is not None and self.namespace_selector.matches(namespace_labels)
        ):
            return False
        return self.selector.matches(labels)


def terms(pod: Mapping[str, Any], kind: str) -> tuple[Term, ...]:
    """The pod's required terms of `kind` (podAffinity or podAntiAffinity), with matchLabelKeys and
    mismatchLabelKeys merged into their selectors; FitError naming the field that cannot be read."""
    listed, field, namespace, pod_labels = _listed(pod, kind, "requiredDuringSchedulingIgnoredDuringExecution")
    return tuple(_term(term, f"{field}[{i}]", namespace, pod_labels) for i, term in enumerate(listed))


def preferred_terms(pod: Mapping[str, Any], kind: str) -> tuple[tuple[Term, int], ...]:
    """The pod's preferred terms of `kind` (podAffinity or podAntiAffinity), each with its weight, read as `terms`
    reads the required ones; FitError naming the field that cannot be read."""
    listed, field, namespace, pod_labels = _listed(pod, kind, "preferredDuringSchedulingIgnoredDuringExecution")
    out = []
    for i, weighted in enumerate(listed):
        where = f"{field}[{i}]"
        if not isinstance(weighted, Mapping):
            raise fields.FitError(f"{where} is not an object")
        weight = weighted.get("weight")
        if not isinstance(weight, int) or isinstance(weight, bool) or not 1 <= weight <= 100:
            raise fields.FitError(f"{where}.weight is {weight!r}; expected an integer from 1 to 100")
        out.append((_term(weighted.get("podAffinityTerm"), f"{where}.podAffinityTerm", namespace, pod_labels), weight))
    return tuple(out)


def _listed(pod: Mapping[str, Any], kind: str, which: str) -> tuple[list[Any], str, str, dict[str, str]]:
    """The pod's list `spec.affinity.<kind>.<which>` (empty when absent), its field, the pod's namespace and labels."""
    meta = fields.obj(pod.get("metadata"), "metadata")
    own_namespace = str(meta.get("namespace") or "")
    pod_labels = _labels(meta)
    affinity = fields.obj(fields.spec_of(pod).get("affinity"), "spec.affinity")
    field = f"spec.affinity.{kind}.{which}"
    listed = fields.obj(affinity.get(kind), f"spec.affinity.{kind}").get(which)
    if listed is None:
        return [], field, own_namespace, pod_labels
    if not isinstance(listed, list):
        raise fields.FitError(f"{field} is not an array")
    return listed, field, own_namespace, pod_labels


def _term(term: Any, where: str, own_namespace: str, pod_labels: Labels) -> Term:
    """One pod affinity term of a pod of `own_namespace` with `pod_labels`."""
    if not isinstance(term, Mapping) or not isinstance(term.get("topologyKey"), str):
        raise fields.FitError(f"{where} is not an object with a string topologyKey")
    chosen = selector(term.get("labelSelector"), f"{where}.labelSelector")
    chosen = chosen.with_labels(_keys(term, "matchLabelKeys", where, pod_labels))
    mismatch = _keys(term, "mismatchLabelKeys", where, pod_labels)
    if mismatch and not chosen.nothing:
        notin = tuple((k, "NotIn", frozenset({v})) for k, v in sorted(mismatch.items()))
        chosen = dataclasses.replace(chosen, expressions=chosen.expressions + notin)
    namespaces = term.get("namespaces") or []
    if not isinstance(namespaces, list) or not all(isinstance(n, str) for n in namespaces):
        raise fields.FitError(f"{where}.namespaces is not an array of strings")
    ns_selector = term.get("namespaceSelector")
    resolved = frozenset(namespaces) or (frozenset() if ns_selector is not None else frozenset({own_namespace}))
    return Term(
        chosen,
        term["topologyKey"],
        resolved,
        selector(ns_selector, f"{where}.namespaceSelector") if ns_selector is not None else None,
    )


def _keys(term: Mapping[str, Any], name: str, where: str, pod_labels: Labels) -> dict[str, str]:
    keys = term.get(name) or []
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise fields.FitError(f"{where}.{name} is not an array of strings")
    return {k: pod_labels[k] for k in keys if k in pod_labels}


def _labels(meta: Mapping[str, Any]) -> dict[str, str]:
    labels = meta.get("labels") or {}
    if not isinstance(labels, Mapping):
        raise fields.FitError("metadata.labels is not an object")
    return {str(k): str(v) for k, v in labels.items()}


def pod_labels(pod: Mapping[str, Any]) -> dict[str, str]:
    """The pod's labels; FitError when they are not an object."""
    return _labels(fields.obj(pod.get("metadata"), "metadata"))
