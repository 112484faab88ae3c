"""The AdmissionReview v1 wire format and the webhook's decision for one request. Pure: no I/O.

Two kinds of failure are kept apart:
  * the *object* is bad (malformed map, index not resolvable or not in the map): the request is answered with
    ``allowed: false`` and a message the user can act on;
  * the *request* is bad (not an AdmissionReview): :class:`BadRequest`, answered by the server with HTTP 400.
"""

from __future__ import annotations

import base64
import json
from typing import Any, Literal, NotRequired, TypedDict

from gpu_scheduling import constants, gpumap, patches

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]


class GroupVersionKind(TypedDict):
    group: str
    version: str
    kind: str


class AdmissionRequest(TypedDict):
    uid: str
    kind: GroupVersionKind
    operation: Operation
    namespace: NotRequired[str]
    name: NotRequired[str]
    object: NotRequired[dict[str, Any] | None]


class Status(TypedDict, total=False):
    code: int
    message: str
    reason: str


class AdmissionResponse(TypedDict):
    uid: str
    allowed: bool
    status: NotRequired[Status]
    patchType: NotRequired[Literal["JSONPatch"]]
    patch: NotRequired[str]
    warnings: NotRequired[list[str]]


class AdmissionReview(TypedDict):
    apiVersion: Literal["admission.k8s.io/v1"]
    kind: Literal["AdmissionReview"]
    request: NotRequired[AdmissionRequest]
    response: NotRequired[AdmissionResponse]


class BadRequest(ValueError):
    """The HTTP body is not an AdmissionReview v1 with a request; the server answers 400."""


def parse_review(body: bytes) -> AdmissionRequest:
    """Decode and sanity-check an AdmissionReview body, raising :class:`BadRequest` with the reason."""
    try:
        review = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"body is not JSON: {exc}") from None
    if not isinstance(review, dict):
        raise BadRequest("body is not a JSON object")
    if review.get("apiVersion") != "admission.k8s.io/v1" or review.get("kind") != "AdmissionReview":
        raise BadRequest(
            f"expected apiVersion admission.k8s.io/v1 kind AdmissionReview, got "
            f"{review.get('apiVersion')!r} {review.get('kind')!r}"
        )
    request = review.get("request")
    if not isinstance(request, dict) or not isinstance(request.get("uid"), str):
        raise BadRequest("AdmissionReview has no request with a uid")
    obj = request.get("object")
    if obj is not None and not isinstance(obj, dict):
        raise BadRequest("request.object is not a JSON object")
    return request  # type: ignore[return-value]


def _review(response: AdmissionResponse) -> AdmissionReview:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def allow(uid: str, ops: list[patches.PatchOp] | None = None) -> AdmissionReview:
    response: AdmissionResponse = {"uid": uid, "allowed": True}
    if ops:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
    return _review(response)


def deny(uid: str, message: str, code: int = 400) -> AdmissionReview:
    return _review({"uid": uid, "allowed": False, "status": {"code": code, "message": message, "reason": "BadRequest"}})


def _describe(request: AdmissionRequest) -> str:
    obj = request.get("object") or {}
    meta = obj.get("metadata") or {}
    name = meta.get("name") or request.get("name") or meta.get("generateName", "") + "*"
    return f"pod {request.get('namespace', meta.get('namespace', ''))}/{name}"


def review_pod(request: AdmissionRequest) -> AdmissionReview:
    """Decide on one request: patch CUDA_VISIBLE_DEVICES in, deny with a reason, or allow untouched."""
    uid = request["uid"]
    kind = request.get("kind") or {}
    if kind.get("kind") != "Pod" or kind.get("group", "") != "" or request.get("operation") != "CREATE":
        return allow(uid)
    pod = request.get("object") or {}
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    if constants.CLAIM_ANNOTATION in annotations:
        return _review_claim_pod(request, pod, annotations)
    try:
        entry = gpumap.entry_for_pod(meta)
    except gpumap.PodMapError as exc:
        return deny(uid, f"{_describe(request)}: {exc}")
    if entry is None:
        return allow(uid)
    return allow(uid, patches.cuda_patch(pod, entry.cuda_visible_devices))


def _review_claim_pod(request: AdmissionRequest, pod: dict[str, Any], annotations: dict[str, str]) -> AdmissionReview:
    uid = request["uid"]
    if constants.MAP_ANNOTATION in annotations:
        return deny(uid, f"{_describe(request)}: it carries both {constants.CLAIM_ANNOTATION} and "
                         f"{constants.MAP_ANNOTATION}; use one: the map pins the node and GPU ids, the claim lets "
                         "the scheduler choose them")
    claim = annotations[constants.CLAIM_ANNOTATION].strip()
    if not claim:
        return deny(uid, f"{_describe(request)}: annotation {constants.CLAIM_ANNOTATION} is empty; expected the "
                         "name of a GpuClaim in the pod's namespace")
    # The GPUs are chosen after admission, when the pod is scheduled; the scheduler writes them to an annotation
    # before binding, and the kubelet resolves this downward-API reference when it starts the containers.
    return allow(uid, patches.env_patch(pod, {
        "name": constants.CUDA_ENV,
        "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{constants.GPU_IDS_ANNOTATION}']"}},
    }))
