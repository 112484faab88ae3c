"""The AdmissionReview v1 wire format and the webhook's decision for one request. Pure: no I/O.

Two kinds of failure are kept apart:
  * the *object* is bad (malformed map, index not resolvable or not in the map): the request is answered with
    ``allowed: false`` and a message the user can act on;
  * the *request* is bad (not an AdmissionReview): :class:`BadRequest`, answered by the server with HTTP 400.

Whatever the bytes, :func:`parse_review` and :func:`review_pod` raise nothing but :class:`BadRequest`, their
work is linear in the body, and :func:`encode_review` turns any answer into at most 64 KiB of JSON.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any, Literal, NotRequired, TypedDict, cast

from gpu_scheduling import constants, devices, gpumap, patches, podrequest
from gpu_scheduling.claims import gangs
from gpu_scheduling.text import json_type, plain, show

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
    apiVersion: Literal["admission.k8s.io/v1"]  # constants.ADMISSION_API_VERSION (a type names the literal)
    kind: Literal["AdmissionReview"]
    request: NotRequired[AdmissionRequest]
    response: NotRequired[AdmissionResponse]


class BadRequest(ValueError):
    """The HTTP body is not an AdmissionReview v1 with a request; the server answers 400. The message names the
    field and is bounded (user text in it is cut and escaped)."""


MAX_RESPONSE_BYTES = 64 * 1024
"""No answer of the webhook is larger than this (see :func:`encode_review`): a patch that would be is refused."""

MAX_MESSAGE_CHARS = 4096
"""A denial's message is cut to this many characters (the messages built here stay well below it)."""

MAX_UID_CHARS = 256
"""request.uid: 1 to this many printable ASCII characters (the apiserver sends a UUID, 36)."""

_MIN_OP_BYTES = 60  # {"op":"remove","path":"/spec/containers/0/env/0"} is 47 bytes, 64 in base64

_UID_RE = re.compile(rf"^[\x21-\x7e]{{1,{MAX_UID_CHARS}}}$")


def _check_request(request: Any) -> AdmissionRequest:
    """The shape of request: BadRequest naming the first field that is wrong."""
    if not isinstance(request, dict):
        raise BadRequest(f"AdmissionReview has no request with a uid (request is {json_type(request)})")
    uid = request.get("uid")
    if not isinstance(uid, str):
        raise BadRequest(f"AdmissionReview has no request with a uid (request.uid is {json_type(uid)})")
    if not _UID_RE.match(uid):
        raise BadRequest(
            f"request.uid {show(uid)} ({len(uid)} characters) is not 1 to {MAX_UID_CHARS} printable "
            "ASCII characters (the apiserver sends a UUID)"
        )
    obj = request.get("object")
    if obj is not None and not isinstance(obj, dict):
        raise BadRequest(f"request.object is not a JSON object (it is {json_type(obj)})")
    kind = request.get("kind")
    if not isinstance(kind, dict):
        raise BadRequest(f"request.kind is {json_type(kind)}; expected an object with group, version and kind")
    for field in ("group", "version", "kind"):
        if not isinstance(kind.get(field, ""), str):
            raise BadRequest(f"request.kind.{field} is {json_type(kind.get(field))}; expected a string")
    operation = request.get("operation")
    if not isinstance(operation, str):
        raise BadRequest(f"request.operation is {json_type(operation)}; expected CREATE, UPDATE, DELETE or CONNECT")
    for field in ("namespace", "name"):
        if not isinstance(request.get(field, ""), str):
            raise BadRequest(f"request.{field} is {json_type(request.get(field))}; expected a string")
    return cast("AdmissionRequest", request)  # its shape checked field by field above


def parse_review(body: bytes) -> AdmissionRequest:
    """Decode and sanity-check an AdmissionReview body, raising :class:`BadRequest` with the reason (and never
    anything else, whatever the bytes: deep nesting, huge numbers, invalid UTF-8 included). Linear in the body."""
    try:
        review = json.loads(body)
    except RecursionError:
        raise BadRequest("body is not an AdmissionReview: its JSON is nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer over Python's digit limit
        raise BadRequest(f"body is not JSON: {show(str(exc), 200)}") from None
    if not isinstance(review, dict):
        raise BadRequest("body is not a JSON object")
    if review.get("apiVersion") != constants.ADMISSION_API_VERSION or review.get("kind") != "AdmissionReview":
        raise BadRequest(
            f"expected apiVersion {constants.ADMISSION_API_VERSION} kind AdmissionReview, got "
            f"{show(review.get('apiVersion'))} {show(review.get('kind'))}"
        )
    return _check_request(review.get("request"))


def _review(response: AdmissionResponse) -> AdmissionReview:
    return {"apiVersion": constants.ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": response}


def allow(uid: str, ops: list[patches.PatchOp] | None = None) -> AdmissionReview:
    response: AdmissionResponse = {"uid": uid, "allowed": True}
    if ops:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(ops, separators=(",", ":")).encode()).decode()
    return _review(response)


def deny(uid: str, message: str, code: int = 400) -> AdmissionReview:
    """Refuse with `message` (cut to :data:`MAX_MESSAGE_CHARS`)."""
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[: MAX_MESSAGE_CHARS - 1] + "…"
    return _review({"uid": uid, "allowed": False, "status": {"code": code, "message": message, "reason": "BadRequest"}})


def _dumps(review: AdmissionReview) -> bytes:
    return json.dumps(review, separators=(",", ":")).encode()  # ensure_ascii: the bytes are ASCII


def encode_review(review: AdmissionReview) -> bytes:
    """The JSON body answering with `review`, never larger than :data:`MAX_RESPONSE_BYTES`: a larger allowing
    answer becomes a denial saying why, a larger denial has its message cut. ASCII only."""
    data = _dumps(review)
    if len(data) <= MAX_RESPONSE_BYTES:
        return data
    response: Any = review.get("response") or {}
    uid = response.get("uid") if isinstance(response.get("uid"), str) else ""
    uid = uid[:MAX_UID_CHARS]
    status = response.get("status") or {}
    if response.get("allowed") or not isinstance(status.get("message"), str):
        smaller = deny(
            uid,
            f"the webhook's answer would be {len(data)} bytes, over its limit of "
            f"{MAX_RESPONSE_BYTES} bytes (a pod with fewer containers, or fewer duplicate "
            f"{constants.CUDA_ENV} entries, fits)",
            code=status.get("code", 400) if isinstance(status.get("code"), int) else 400,
        )
    else:
        smaller = deny(
            uid,
            status["message"][:MAX_MESSAGE_CHARS],
            code=status["code"] if isinstance(status.get("code"), int) else 400,
        )
    data = _dumps(smaller)
    if len(data) > MAX_RESPONSE_BYTES:  # only a message of wide escapes could get here
        data = _dumps(deny(uid, "the webhook's answer was too large"))
    return data


def _describe(request: AdmissionRequest) -> str:
    obj = request.get("object")
    meta = (obj.get("metadata") if isinstance(obj, dict) else None) or {}
    if not isinstance(meta, dict):
        meta = {}
    namespace = request.get("namespace") or meta.get("namespace") or ""
    name = meta.get("name") or request.get("name")
    if name:
        shown = plain(name)
    else:
        generate = meta.get("generateName")
        shown = (plain(generate) if isinstance(generate, str) and generate else "") + "*"
    return f"pod {plain(namespace) if namespace else ''}/{shown}"


def _cuda_from_allocation() -> dict[str, Any]:
    # The GPUs are chosen after admission, when the pod is scheduled; the scheduler writes them to an annotation
    # before binding, and the kubelet resolves this downward-API reference when it starts the containers.
    return {
        "name": constants.CUDA_ENV,
        "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{constants.GPU_IDS_ANNOTATION}']"}},
    }


def _pod_group_record(pod: dict[str, Any]) -> list[patches.PatchOp]:
    """The operation that records the pod's `spec.schedulingGroup.podGroupName` in the annotation
    POD_GROUP_ANNOTATION (none when it names no PodGroup, or the annotation says so already): an apiserver whose
    GenericWorkload gate is off drops the field after mutating admission, and the record keeps the scheduler from
    placing alone a pod meant for a gang. Raises GangError for a reference that cannot be read
    (claims.gangs.pod_group_ref: an invalid name, the field and the annotation disagreeing, 1.35's workloadRef)."""
    meta = pod.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    annotations = annotations if isinstance(annotations, dict) else {}
    name = gangs.pod_group_ref(pod.get("spec"), annotations)
    if name is None or annotations.get(constants.POD_GROUP_ANNOTATION) == name:
        return []
    return patches.annotation_patch(pod, constants.POD_GROUP_ANNOTATION, name)


def review_pod(
    request: AdmissionRequest,
    gpu_resource: str | None = None,
    isolated: bool = False,
    maps: gpumap.ParseCache | None = None,
) -> AdmissionReview:
    """Decide on one request: patch CUDA_VISIBLE_DEVICES in, deny with a reason, or allow untouched.

    Only the CREATE of a Pod is looked at. What the pod asks for is read by :func:`podrequest.read`, the same
    function the scheduler uses. Raises :class:`BadRequest` for a request of the wrong shape (as
    :func:`parse_review` does) and nothing else; every pod, whatever its shape, is answered, and the answer
    serializes (see :func:`encode_review`) to at most :data:`MAX_RESPONSE_BYTES`.

    With `gpu_resource` (gpu-webhook's --gpu-resource, set where gpu-device-plugin runs), every container of a map
    pod also asks for that many units of it as its map entry has GPUs, so that the kubelet gives each container
    exactly those GPUs and counts them. With `isolated` (--isolated-gpus: the plugin gives containers only their
    own GPUs, as with NVML on a real node), CUDA_VISIBLE_DEVICES numbers them from 0 (gpumap.Entry.cuda_value)."""
    request = _check_request(request)
    uid = request["uid"]
    kind = request["kind"]
    if kind.get("kind") != "Pod" or kind.get("group", "") != "" or request["operation"] != "CREATE":
        return allow(uid)
    pod = request.get("object") or {}
    warning = ""
    try:
        asked = podrequest.read(pod.get("metadata"), maps)
        recorded = _pod_group_record(pod)
        if asked is None:
            return allow(uid, recorded)
        count = podrequest.count_containers(pod)
        if count * _MIN_OP_BYTES > MAX_RESPONSE_BYTES:  # at least one operation each: it cannot fit
            return deny(
                uid,
                f"{_describe(request)}: it has {count} containers and init containers; setting "
                f"{constants.CUDA_ENV} in each takes a patch larger than the webhook's limit of "
                f"{MAX_RESPONSE_BYTES} bytes (at most {MAX_RESPONSE_BYTES // _MIN_OP_BYTES} containers "
                "fit, fewer with long names or duplicate entries)",
            )
        if isinstance(asked, podrequest.MapRequest):
            ops = patches.cuda_patch(pod, asked.entry.cuda_value(isolated))
            if gpu_resource and asked.entry.gpu_ids:
                ops += patches.resource_patch(pod, gpu_resource, len(asked.entry.gpu_ids))
        else:
            # The most units a container asks for: the claim's GPU count, as its author wrote it.
            units = max((u for _, u in devices.requests(pod, gpu_resource)), default=0) if gpu_resource else 0
            if isolated and units:
                # Isolated GPUs are the container's 0..n-1 whichever the claim gets: known now, from its request.
                ops = patches.cuda_patch(pod, ",".join(str(i) for i in range(units)))
            else:
                ops = patches.env_patch(pod, _cuda_from_allocation())
            if gpu_resource and not units:
                warning = (
                    f"{_describe(request)} names GpuClaim {asked.name} but asks for no {gpu_resource}: the kubelet "
                    f"will give its containers no GPU device; write resources.limits {gpu_resource}: <the claim's "
                    "GPU count> in each container that uses the GPUs (a pod's requests are fixed at creation)"
                )
    except (gpumap.PodMapError, gangs.GangError) as exc:
        return deny(uid, f"{_describe(request)}: {exc}")
    ops = recorded + ops
    # Every operation takes more than _MIN_OP_BYTES of the answer: past that count, do not even serialize.
    size = len(ops) * _MIN_OP_BYTES if len(ops) * _MIN_OP_BYTES > MAX_RESPONSE_BYTES else 0
    review = allow(uid, ops) if not size else deny(uid, "")
    if warning and "response" in review:
        review["response"]["warnings"] = [warning[:MAX_MESSAGE_CHARS]]
    size = size or len(_dumps(review))
    if size > MAX_RESPONSE_BYTES:
        return deny(
            uid,
            f"{_describe(request)}: setting {constants.CUDA_ENV} in its {count} containers and init "
            f"containers takes a patch of {len(ops)} operations, an answer of at least {size} bytes, "
            f"over the webhook's limit of {MAX_RESPONSE_BYTES} bytes; use fewer containers (or remove "
            f"duplicate {constants.CUDA_ENV} entries)",
        )
    return review
