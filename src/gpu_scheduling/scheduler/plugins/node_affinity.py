"""NodeAffinity: `spec.nodeSelector` and the required node selector terms of
`spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution` (In, NotIn, Exists, DoesNotExist, Gt,
Lt; matchFields on metadata.name) match the node's labels and name."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from gpu_scheduling.scheduler import fit, framework
from gpu_scheduling.scheduler.framework import PodRefusal, Reason, Snapshot

TERMS = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"


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


def refusal(wanted: Wanted, node: Mapping[str, Any]) -> Reason | None:
    name = node["metadata"]["name"]
    labels = node["metadata"].get("labels") or {}
    for key, value in wanted.node_selector.items():
        if labels.get(key) != value:
            return lambda: f"node {name} does not match the pod's nodeSelector ({key}={value})"
    if wanted.terms is not None and not any(fit.term_matches(t, node) for t in wanted.terms):
        return lambda: f"node {name} does not match the pod's required node affinity"
    return None
