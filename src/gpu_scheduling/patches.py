"""Build the JSONPatch (RFC 6902) that sets CUDA_VISIBLE_DEVICES in every container (and the annotation that records
a pod's PodGroup). Pure: no I/O.

An existing CUDA_VISIBLE_DEVICES entry is replaced in place (its value, or a valueFrom it had), so the variable
appears exactly once and every other env entry keeps its position.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypedDict

from gpu_scheduling import constants, podrequest


class PatchOp(TypedDict, total=False):
    op: Literal["add", "replace", "remove"]
    path: str
    value: Any


def _container_ops(container: podrequest.Container, env_entry: dict[str, Any]) -> list[PatchOp]:
    base = f"/spec/{container.kind}/{container.position}/env"
    env = container.env
    if env is None:
        return [{"op": "add", "path": base, "value": [env_entry]}]
    positions = [j for j, e in enumerate(env) if e.get("name") == env_entry["name"]]
    if not positions:
        return [{"op": "add", "path": f"{base}/-", "value": env_entry}]
    # Replace the first occurrence, remove any duplicates from the back so earlier indices stay valid.
    ops: list[PatchOp] = [{"op": "replace", "path": f"{base}/{positions[0]}", "value": env_entry}]
    ops += [{"op": "remove", "path": f"{base}/{j}"} for j in reversed(positions[1:])]
    return ops


def env_patch(pod: Mapping[str, Any], env_entry: dict[str, Any]) -> list[PatchOp]:
    """Operations that make `env_entry` the one entry of its name in every container and init container.

    Raises :class:`podrequest.PodRequestError` (naming the field) when the spec, the containers or their env
    have the wrong shape. Linear in the size of the pod."""
    ops: list[PatchOp] = []
    for container in podrequest.containers(pod):
        ops += _container_ops(container, env_entry)
    return ops


def cuda_patch(pod: Mapping[str, Any], cuda_visible_devices: str) -> list[PatchOp]:
    """Set CUDA_VISIBLE_DEVICES to a literal value (the `gpu-scheduling-map` case)."""
    return env_patch(pod, {"name": constants.CUDA_ENV, "value": cuda_visible_devices})


def _pointer(key: str) -> str:
    """A key as one JSON Pointer token (RFC 6901: `~` as `~0`, `/` as `~1`)."""
    return key.replace("~", "~0").replace("/", "~1")


def resource_patch(pod: Mapping[str, Any], resource: str, units: int) -> list[PatchOp]:
    """Operations that make every container and init container ask for `units` of the extended resource `resource`
    (its limit and request, which Kubernetes requires equal). A container that already asks for exactly that keeps
    its value; one that asks for another amount raises :class:`podrequest.PodRequestError` naming it, since a pod's
    requests cannot change after creation and the kubelet would give it other devices than its GPUs."""
    ops: list[PatchOp] = []
    want = str(units)
    for container in podrequest.iter_containers(pod):
        raw = (pod["spec"][container.kind][container.position]).get("resources")
        base = f"/spec/{container.kind}/{container.position}/resources"
        if raw is None:
            ops.append({"op": "add", "path": base, "value": {"limits": {resource: want}, "requests": {resource: want}}})
            continue
        if not isinstance(raw, Mapping):
            raise podrequest.PodRequestError(f"spec.{container.kind}[{container.position}].resources is not an object")
        for field in ("limits", "requests"):
            amounts = raw.get(field)
            if amounts is None:
                ops.append({"op": "add", "path": f"{base}/{field}", "value": {resource: want}})
            elif not isinstance(amounts, Mapping):
                raise podrequest.PodRequestError(
                    f"spec.{container.kind}[{container.position}].resources.{field} is not an object"
                )
            elif resource not in amounts:
                ops.append({"op": "add", "path": f"{base}/{field}/{_pointer(resource)}", "value": want})
            elif str(amounts[resource]) != want:
                who = container.name or f"#{container.position}"
                raise podrequest.PodRequestError(
                    f"container {who} asks for {resource}: {amounts[resource]!s:.20} in resources.{field}, but its "
                    f"map entry gives the pod {units} GPU(s): leave it out (the webhook sets it) or write {want}"
                )
    return ops


def annotation_patch(pod: Mapping[str, Any], key: str, value: str) -> list[PatchOp]:
    """The operation that sets the annotation `key` to `value` (gpu-webhook's record of the pod's PodGroup)."""
    meta = pod.get("metadata")
    if not isinstance(meta, Mapping):
        return [{"op": "add", "path": "/metadata", "value": {"annotations": {key: value}}}]
    if not isinstance(meta.get("annotations"), Mapping):
        return [{"op": "add", "path": "/metadata/annotations", "value": {key: value}}]
    return [{"op": "add", "path": f"/metadata/annotations/{_pointer(key)}", "value": value}]


def apply(pod: dict[str, Any], ops: Sequence[PatchOp]) -> dict[str, Any]:
    """Apply the subset of JSONPatch produced here to a copy of `pod` (used by tests and the dry-run CLI)."""
    import copy

    result = copy.deepcopy(pod)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].lstrip("/").split("/")]
        parent: Any = result
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        last = parts[-1]
        if op["op"] == "add":
            if isinstance(parent, list):
                parent.insert(len(parent) if last == "-" else int(last), op["value"])
            else:
                parent[last] = op["value"]
        elif op["op"] == "replace":
            parent[int(last) if isinstance(parent, list) else last] = op["value"]
        elif op["op"] == "remove":
            del parent[int(last) if isinstance(parent, list) else last]
    return result
