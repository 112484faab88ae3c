"""NodeAffinity: `spec.nodeSelector` and the required node selector terms of
`spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution` (In, NotIn, Exists, DoesNotExist, Gt,
Lt; matchFields on metadata.name) match the node's labels and name.

Score (kube-scheduler's NodeAffinity score): a node scores the sum of the weights of the pod's
`preferredDuringSchedulingIgnoredDuringExecution` terms it matches (a term matches as a required one does), scaled
so the best node scores 100 (DefaultNormalizeScore). A pod without preferred terms skips it."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from gpu_scheduling.scheduler import fit, framework
from gpu_scheduling.scheduler.framework import PodRefusal, Reason, Snapshot

TERMS = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
PREFERRED = "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"


@dataclasses.dataclass(frozen=True)
class Wanted:
    node_selector: Mapping[str, str]
    terms: tuple[Mapping[str, Any], ...] | None
    """The required node selector terms (any one must match), or None when the pod has none."""


class NodeAffinity(framework.Plugin):
    name = "NodeAffinity"
    wakes_on = frozenset({framework.NODE})

    def pre_filter(self, pod: Mapping[str, Any], snap: Snapshot) -> Any:
        try:
            wanted = read(pod)
        except fit.FitError as exc:
            return PodRefusal(str(exc))
        return framework.SKIP if not wanted.node_selector and wanted.terms is None else wanted

    def filter(self, state: Wanted, node: Mapping[str, Any], snap: Snapshot) -> Reason | None:
        return refusal(state, node)

    def pre_score(self, pod: Mapping[str, Any], snap: Snapshot) -> Any:
        try:
            terms = preferred(pod)
        except fit.FitError:
            return framework.SKIP
        return terms or framework.SKIP

    def score(
        self, state: tuple[tuple[int, Mapping[str, Any]], ...], nodes: Sequence[Mapping[str, Any]], snap: Snapshot
    ) -> dict[str, int]:
        return {
            node["metadata"]["name"]: sum(weight for weight, term in state if fit.term_matches(term, node))
            for node in nodes
        }

    def normalize(self, state: Any, scores: Mapping[str, int]) -> dict[str, int]:
        return framework.default_normalize(scores)


def read(pod: Mapping[str, Any]) -> Wanted:
    """The pod's node selector and required terms. Raises FitError naming the field that cannot be read."""
    spec = fit.spec_of(pod)
    selector = spec.get("nodeSelector") or {}
    if not isinstance(selector, Mapping) or not all(isinstance(v, str) for v in selector.values()):
        raise fit.FitError("spec.nodeSelector is not an object of strings")
    affinity = fit.obj(spec.get("affinity"), "spec.affinity")
    required = fit.obj(affinity.get("nodeAffinity"), "spec.affinity.nodeAffinity").get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    terms: tuple[Mapping[str, Any], ...] | None = None
    if required is not None:
        listed = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
        if not isinstance(listed, list) or not all(isinstance(t, Mapping) for t in listed):
            raise fit.FitError(f"{TERMS} is not an array of objects")
        for i, term in enumerate(listed):
            fit.check_term(term, f"{TERMS}[{i}]")
        terms = tuple(listed)
    return Wanted(dict(selector), terms)


def preferred(pod: Mapping[str, Any]) -> tuple[tuple[int, Mapping[str, Any]], ...]:
    """The pod's preferred node selector terms, each with its weight. Raises FitError naming the field that cannot be
    read."""
    affinity = fit.obj(fit.spec_of(pod).get("affinity"), "spec.affinity")
    listed = fit.obj(affinity.get("nodeAffinity"), "spec.affinity.nodeAffinity").get(
        "preferredDuringSchedulingIgnoredDuringExecution"
    )
    if listed is None:
        return ()
    if not isinstance(listed, list):
        raise fit.FitError(f"{PREFERRED} is not an array")
    out = []
    for i, weighted in enumerate(listed):
        where = f"{PREFERRED}[{i}]"
        if not isinstance(weighted, Mapping):
            raise fit.FitError(f"{where} is not an object")
        weight, term = weighted.get("weight"), weighted.get("preference")
        if not isinstance(weight, int) or isinstance(weight, bool) or not 1 <= weight <= 100:
            raise fit.FitError(f"{where}.weight is {weight!r}; expected an integer from 1 to 100")
        term = fit.obj(term, f"{where}.preference")
        fit.check_term(term, f"{where}.preference")
        out.append((weight, term))
    return tuple(out)


def refusal(wanted: Wanted, node: Mapping[str, Any]) -> Reason | None:
    name = node["metadata"]["name"]
    labels = node["metadata"].get("labels") or {}
    for key, value in wanted.node_selector.items():
        if labels.get(key) != value:
            return lambda: f"node {name} does not match the pod's nodeSelector ({key}={value})"
    if wanted.terms is not None and not any(fit.term_matches(t, node) for t in wanted.terms):
        return lambda: f"node {name} does not match the pod's required node affinity"
    return None
