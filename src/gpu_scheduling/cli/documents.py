"""What `kubectl gpu submit` accepts: a YAML stream of GpuClaims and the pods that use them (or GPU map pods), checked
before anything is sent, each problem named by its document's number and field. Pure: text in, documents or
errors out. Whether a claim a pod names exists in the cluster is the caller's question (`claims_to_look_up`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

import yaml

from gpu_scheduling import constants, names

#: The kinds accepted and the apiVersion each must carry.
KINDS = {constants.GPU_CLAIM_KIND: constants.API_VERSION, "Pod": constants.CORE_API_VERSION}
#: Annotations that only the scheduler's Binding may write (the admission policies refuse them at creation).
SCHEDULER_ANNOTATIONS = (
    constants.ALLOCATED_ANNOTATION,
    constants.GPU_IDS_ANNOTATION,
    constants.EXCLUSIVITY_ANNOTATION,
)


class DocumentError(ValueError):
    """The input cannot be submitted; `problems` lists every reason, one line each."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


@dataclasses.dataclass(frozen=True)
class Document:
    """One accepted object: its place in the input (1-based), kind, namespace and name, and the body to apply
    (with its namespace filled in)."""

    index: int
    kind: str
    namespace: str
    name: str
    body: dict[str, Any]

    @property
    def claim(self) -> str | None:
        """The GpuClaim a pod names (None for claims and map pods)."""
        if self.kind != "Pod":
            return None
        value = (self.body["metadata"].get("annotations") or {}).get(constants.CLAIM_ANNOTATION)
        return value.strip() if isinstance(value, str) else None


def load(text: str, source: str = "<stdin>") -> list[Any]:
    """The YAML documents of `text` (empty ones dropped, their numbers kept by the caller's count); a syntax error
    names the line."""
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise DocumentError([f"{source}: malformed YAML{where}: {problem}"]) from None
    return docs


def check(
    docs: Sequence[Any], namespace: str, scheduler_name: str = constants.DEFAULT_SCHEDULER_NAME
) -> list[Document]:
    """Every document accepted, claims first (in input order), then pods; DocumentError with every problem
    otherwise. `namespace` is for documents that name none."""
    problems: list[str] = []
    accepted: list[Document] = []
    seen: dict[tuple[str, str, str], int] = {}
    for index, doc in enumerate(docs, 1):
        if doc is None:
            continue
        found = _check_one(index, doc, namespace, scheduler_name)
        if isinstance(found, list):
            problems += found
            continue
        key = (found.kind, found.namespace, found.name)
        if key in seen:
            problems.append(
                f"document {index} ({found.kind} {found.namespace}/{found.name}): metadata.name is the same as "
                f"document {seen[key]}'s"
            )
            continue
        seen[key] = index
        accepted.append(found)
    if not problems and not accepted:
        problems.append("no documents: the input holds no GpuClaim or Pod")
    if problems:
        raise DocumentError(problems)
    return sorted(accepted, key=lambda d: (d.kind != constants.GPU_CLAIM_KIND, d.index))


def claims_to_look_up(documents: Iterable[Document]) -> dict[tuple[str, str], Document]:
    """(namespace, claim) -> the first pod naming it, for each claim a pod names that the input does not hold:
    those must exist in the cluster."""
    docs = list(documents)
    present = {(d.namespace, d.name) for d in docs if d.kind == constants.GPU_CLAIM_KIND}
    wanted: dict[tuple[str, str], Document] = {}
    for d in docs:
        if d.claim and (d.namespace, d.claim) not in present:
            wanted.setdefault((d.namespace, d.claim), d)
    return wanted


def missing_claim(doc: Document) -> str:
    return (
        f"document {doc.index} (Pod {doc.namespace}/{doc.name}): metadata.annotations[{constants.CLAIM_ANNOTATION}] "
        f"names the GpuClaim {doc.claim!r}, which is neither in the input nor in namespace {doc.namespace}"
    )


def _check_one(index: int, doc: Any, namespace: str, scheduler_name: str) -> Document | list[str]:
    where = f"document {index}"
    if not isinstance(doc, dict):
        return [f"{where}: not a mapping (each document must be one Kubernetes object)"]
    kind = doc.get("kind")
    if not kind:
        return [f"{where}: kind is missing"]
    if kind not in KINDS:
        if kind == "List":
            return [f"{where}: kind List is not accepted: give each object as a document of its own (---)"]
        return [f"{where}: kind {kind} is not accepted: submit takes GpuClaim and Pod documents"]
    problems = []
    if doc.get("apiVersion") != KINDS[kind]:
        problems.append(f"{where} ({kind}): apiVersion is {doc.get('apiVersion')!r}, expected {KINDS[kind]!r}")
    meta = doc.get("metadata")
    if not isinstance(meta, dict):
        return [*problems, f"{where} ({kind}): metadata is missing"]
    name = meta.get("name")
    if not name:
        why = (
            " (metadata.generateName cannot be applied: server-side apply needs a name)"
            if "generateName" in meta
            else ""
        )
        return [*problems, f"{where} ({kind}): metadata.name is missing{why}"]
    if not names.is_subdomain(name):
        return [*problems, f"{where} ({kind}): metadata.name {name!r} is not a valid name ({names.subdomain_rule()})"]
    ns = meta.get("namespace") or namespace
    if not names.is_label(ns):
        return [
            *problems,
            f"{where} ({kind} {name}): metadata.namespace {ns!r} is not a valid namespace name ({names.label_rule()})",
        ]
    where = f"{where} ({kind} {ns}/{name})"
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, dict) or not all(isinstance(v, str) for v in annotations.values()):
        return [*problems, f"{where}: metadata.annotations must map names to strings"]
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        problems.append(f"{where}: spec is missing")
    elif kind == "Pod":
        problems += _check_pod(where, annotations, spec, scheduler_name)
    else:
        devices = spec.get("devices")
        if not isinstance(devices, dict) or "count" not in devices:
            problems.append(f"{where}: spec.devices.count is missing (how many GPUs the claim needs)")
    if problems:
        return problems
    body = dict(doc, metadata=dict(meta, namespace=ns))
    return Document(index, kind, ns, name, body)


def _check_pod(where: str, annotations: dict[str, str], spec: dict[str, Any], scheduler_name: str) -> list[str]:
    problems = []
    claim = annotations.get(constants.CLAIM_ANNOTATION)
    has_map = constants.MAP_ANNOTATION in annotations
    if claim is not None and not claim.strip():
        problems.append(f"{where}: metadata.annotations[{constants.CLAIM_ANNOTATION}] is empty")
    if claim is not None and has_map:
        problems.append(
            f"{where}: metadata.annotations carries both {constants.CLAIM_ANNOTATION} and "
            f"{constants.MAP_ANNOTATION}: a pod takes its GPUs from one of them"
        )
    if claim is None and not has_map:
        problems.append(
            f"{where}: metadata.annotations names no GpuClaim ({constants.CLAIM_ANNOTATION}) and no GPU map "
            f"({constants.MAP_ANNOTATION}): submit is for GPU pods"
        )
    problems += [
        f"{where}: metadata.annotations[{key}] is written by the scheduler when it binds, not by you"
        for key in SCHEDULER_ANNOTATIONS
        if key in annotations
    ]
    scheduler = spec.get("schedulerName")
    if scheduler != scheduler_name:
        shown = repr(scheduler) if scheduler else "unset (the default scheduler)"
        problems.append(
            f"{where}: spec.schedulerName is {shown}; a GPU pod must name {scheduler_name!r}, or no one gives it GPUs"
        )
    if spec.get("nodeName"):
        problems.append(f"{where}: spec.nodeName is set: the scheduler chooses the node")
    if not isinstance(spec.get("containers"), list) or not spec["containers"]:
        problems.append(f"{where}: spec.containers is missing")
    return problems
