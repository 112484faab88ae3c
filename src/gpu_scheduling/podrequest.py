"""What a pod asks for, read from its metadata: a map entry, a GpuClaim, or nothing. Pure: no I/O.

The webhook (admission.review_pod) and the scheduler (decision.decide, the controller's claim path) both read a
pod through :func:`read`, so they can never disagree about a pod. Every wrong shape, whatever JSON it is, raises
one error type, :class:`gpumap.PodMapError` (:class:`PodRequestError` for a field of the wrong shape,
:class:`gpumap.MapError` for a malformed map, :class:`gpumap.PodIndexError` for an index that cannot be resolved),
with a bounded message naming the field and what was expected. Nothing else is raised.

:func:`containers` reads the containers and their env the same way, for the webhook's patch and the scheduler's
check that a map pod's containers carry the CUDA_VISIBLE_DEVICES its map entry gives.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from gpu_scheduling import constants, gpumap, names
from gpu_scheduling.text import json_type, plain, show

MAX_CLAIM_NAME = names.MAX_SUBDOMAIN
_ASCII_SPACE = " \t\r\n\f\v"


class PodRequestError(gpumap.PodMapError, ValueError):
    """A field of the pod has the wrong shape (an annotation that is not a string, a null claim name, containers
    that are not a list, ...). The message names the field and what was expected."""


@dataclasses.dataclass(frozen=True)
class MapRequest:
    """The pod carries a `gpu-scheduling-map`: its entry pins the node and the GPU ids."""

    entry: gpumap.Entry


@dataclasses.dataclass(frozen=True)
class ClaimRequest:
    """The pod names a GpuClaim (in its namespace) through `gpu.scheduling/claim`."""

    name: str


Request = MapRequest | ClaimRequest | None


def _object(value: Any, field: str, what: str = "an object") -> Mapping[str, Any]:
    """`value` when it is an object, {} when it is absent or null; PodRequestError otherwise."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PodRequestError(f"{field} is {json_type(value)}; expected {what}")
    return value


def _annotations(metadata: Any) -> Mapping[str, Any]:
    """The pod's annotations ({} when none); PodRequestError when metadata or annotations are not objects."""
    meta = _object(metadata, "metadata")
    return _object(meta.get("annotations"), "metadata.annotations", "an object of strings")


def _claim_name(value: Any) -> str:
    if not isinstance(value, str):
        raise PodRequestError(
            f"annotation {constants.CLAIM_ANNOTATION} is {json_type(value)}; expected the name "
            "of a GpuClaim in the pod's namespace (a string)"
        )
    name = value.strip(_ASCII_SPACE)
    if not name:
        raise PodRequestError(
            f"annotation {constants.CLAIM_ANNOTATION} is empty; expected the name of a GpuClaim in the pod's namespace"
        )
    if not names.is_subdomain(name):
        raise PodRequestError(
            f"annotation {constants.CLAIM_ANNOTATION}={show(name)} is not a valid GpuClaim name: expected an RFC 1123 "
            f"subdomain ({names.subdomain_rule(MAX_CLAIM_NAME)})"
        )
    return name


def read(metadata: Any, maps: gpumap.ParseCache | None = None) -> Request:
    """What the pod with this metadata asks for: its map entry, its GpuClaim's name, or None (neither). The map is
    parsed through `maps`, the caller's cache.

    Raises :class:`gpumap.PodMapError` (and nothing else) for any other shape: metadata, annotations or labels
    that are not objects, a map or claim annotation that is not a string, an empty or invalid claim name, both
    annotations at once, a malformed map, an index that cannot be resolved or is not in the map."""
    notes = _annotations(metadata)
    has_map = constants.MAP_ANNOTATION in notes
    has_claim = constants.CLAIM_ANNOTATION in notes
    if has_map and has_claim:
        raise PodRequestError(
            f"it carries both {constants.CLAIM_ANNOTATION} and {constants.MAP_ANNOTATION}; use one: the map pins "
            "the node and GPU ids, the claim lets the scheduler choose them"
        )
    if has_claim:
        return ClaimRequest(_claim_name(notes[constants.CLAIM_ANNOTATION]))
    if not has_map:
        return None
    text = notes[constants.MAP_ANNOTATION]
    if not isinstance(text, str):
        raise PodRequestError(
            f"annotation {constants.MAP_ANNOTATION} is {json_type(text)}; expected a string "
            "of `<index>=<node>:<gpu ids>` lines"
        )
    return MapRequest(gpumap.parse_with(maps, text).entry_for(gpumap.pod_index(metadata)))


def claim_name(metadata: Any) -> str:
    """The GpuClaim a claim pod names (validated, without surrounding spaces); PodMapError when the pod's
    metadata cannot be read or it names no valid claim."""
    request = read(metadata)
    if not isinstance(request, ClaimRequest):
        raise PodRequestError(f"the pod has no {constants.CLAIM_ANNOTATION} annotation")
    return request.name


class Container(NamedTuple):
    """One container or init container: where it is in the pod, its name and its env (None when absent)."""

    kind: str  # "initContainers" or "containers"
    position: int
    name: str
    env: list[Mapping[str, Any]] | None


def count_containers(pod: Any) -> int:
    """How many init containers and containers the pod has (0 for a pod of the wrong shape). Constant time."""
    spec = pod.get("spec") if isinstance(pod, Mapping) else None
    if not isinstance(spec, Mapping):
        return 0
    return sum(len(items) for kind in ("initContainers", "containers") if isinstance(items := spec.get(kind), list))


def iter_containers(pod: Any) -> Iterator[Container]:
    """Every init container and container of the pod, in that order, each checked as it comes: spec, the
    container lists, each container and each env entry must be objects, every env entry's name a string.
    Raises :class:`PodRequestError` naming the first field of the wrong shape."""
    spec = _object(_object(pod, "the pod").get("spec"), "spec")
    for kind in ("initContainers", "containers"):
        items = spec.get(kind)
        if items is None:
            continue
        if not isinstance(items, list):
            raise PodRequestError(f"spec.{kind} is {json_type(items)}; expected an array of containers")
        for i, container in enumerate(items):
            if not isinstance(container, Mapping):
                raise PodRequestError(f"spec.{kind}[{i}] is {json_type(container)}; expected a container object")
            name = container.get("name")
            if name is None:
                name = ""
            if not isinstance(name, str):
                raise PodRequestError(f"spec.{kind}[{i}].name is {json_type(name)}; expected a string")
            env = container.get("env")
            if env is not None:
                if not isinstance(env, list):
                    raise PodRequestError(f"spec.{kind}[{i}].env is {json_type(env)}; expected an array of env entries")
                for j, item in enumerate(env):
                    if not isinstance(item, Mapping):
                        raise PodRequestError(f"spec.{kind}[{i}].env[{j}] is {json_type(item)}; expected an object")
                    if not isinstance(item.get("name"), str):
                        raise PodRequestError(
                            f"spec.{kind}[{i}].env[{j}].name is {json_type(item.get('name'))}; expected a string"
                        )
            yield Container(kind, i, name, env)


def containers(pod: Any) -> list[Container]:
    """:func:`iter_containers` as a list (every container checked)."""
    return list(iter_containers(pod))


def missing_cuda(pod: Any, entry: gpumap.Entry, isolated: bool = False) -> str | None:
    """Why the pod's containers do not all see the GPUs of its map entry, or None when every container and init
    container has CUDA_VISIBLE_DEVICES set to the entry's ids (as the gpu-webhook sets it at creation; numbered from
    0 where GPUs are `isolated`, gpumap.Entry.cuda_value). Raises :class:`PodRequestError` for containers of the
    wrong shape."""
    wanted = entry.cuda_value(isolated)
    for container in iter_containers(pod):  # stops at the first that lacks it
        found = [e for e in container.env or () if e.get("name") == constants.CUDA_ENV]
        what = "init container" if container.kind == "initContainers" else "container"
        who = f"{what} {plain(container.name) if container.name else f'#{container.position}'}"
        why = (
            "the gpu-webhook sets it at creation; was the map annotation added after the pod was created, "
            "or the pod created while the webhook was not registered?"
        )
        if not found:
            return f"{who} has no {constants.CUDA_ENV}={wanted} ({why})"
        last = found[-1]  # Kubernetes: the last of duplicate names wins
        if "valueFrom" in last or last.get("value") != wanted:
            shown = show(last.get("value")) if "valueFrom" not in last else "a valueFrom reference"
            return f"{who} has {constants.CUDA_ENV}={shown}, not {wanted} as its map entry {entry.index} gives ({why})"
    return None
