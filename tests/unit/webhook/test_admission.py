"""The webhook's decision for one AdmissionReview, and the rejection of bodies that are not reviews."""

import base64
import json

import pytest

from gpu_scheduling import admission, patches

TAKE_HOME = "0=node1:0,1\n1=node2:2\n2=node3:0,1,2\n3=node4:3\n4=node4:3\n"


def review(pod, operation="CREATE", kind="Pod", uid="u-1"):
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": uid,
                "kind": {"group": "", "version": "v1", "kind": kind},
                "operation": operation,
                "namespace": "default",
                "object": pod,
            },
        }
    ).encode()


def pod(name="check-2", annotation=TAKE_HOME, labels=None):
    meta = {"name": name, "namespace": "default"}
    if annotation is not None:
        meta["annotations"] = {"gpu-scheduling-map": annotation}
    if labels:
        meta["labels"] = labels
    return {"metadata": meta, "spec": {"containers": [{"name": "c"}]}}


def decide(body):
    return admission.review_pod(admission.parse_review(body))["response"]


def test_patches_annotated_pod_and_echoes_uid():
    resp = decide(review(pod(), uid="abc"))
    assert resp["uid"] == "abc" and resp["allowed"] and resp["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(resp["patch"]))
    assert patches.apply(pod(), ops)["spec"]["containers"][0]["env"] == [
        {"name": "CUDA_VISIBLE_DEVICES", "value": "0,1,2"}
    ]


def test_index_label_wins_over_name():
    resp = decide(review(pod(name="x-0", labels={"apps.kubernetes.io/pod-index": "3"})))
    ops = json.loads(base64.b64decode(resp["patch"]))
    assert ops[0]["value"] == [{"name": "CUDA_VISIBLE_DEVICES", "value": "3"}]


def test_pod_without_annotation_is_allowed_untouched():
    resp = decide(review(pod(annotation=None)))
    assert resp["allowed"] and "patch" not in resp


@pytest.mark.parametrize("operation, kind", [("UPDATE", "Pod"), ("DELETE", "Pod"), ("CREATE", "ConfigMap")])
def test_other_requests_are_allowed_untouched(operation, kind):
    resp = decide(review(pod(annotation="garbage"), operation=operation, kind=kind))
    assert resp["allowed"] and "patch" not in resp


@pytest.mark.parametrize(
    "the_pod, fragments",
    [
        (pod(annotation="0=node1:0\n1=node2"), ["pod default/check-2", "line 2 '1=node2'", "missing `:`"]),
        (pod(name="check-7"), ["pod index 7 is not in the gpu-scheduling-map", "0, 1, 2, 3, 4"]),
        (pod(name="loner"), ["cannot resolve the pod index", "'loner'"]),
    ],
)
def test_bad_pods_are_denied_with_a_message(the_pod, fragments):
    resp = decide(review(the_pod))
    assert resp["allowed"] is False and resp["status"]["code"] == 400
    for fragment in fragments:
        assert fragment in resp["status"]["message"]


def test_generate_name_pod_is_denied():
    p = pod()
    del p["metadata"]["name"]
    p["metadata"]["generateName"] = "worker-"
    resp = decide(review(p))
    assert not resp["allowed"] and "has no name yet (generateName 'worker-')" in resp["status"]["message"]


@pytest.mark.parametrize(
    "body, fragment",
    [
        (b"not json", "not JSON"),
        (b"[1,2]", "not a JSON object"),
        (b'{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview"}', "expected apiVersion"),
        (b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}', "no request with a uid"),
        (
            b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","object":3}}',
            "request.object is not a JSON object",
        ),
        (b"\xff\xfe", "not JSON"),
    ],
)
def test_malformed_bodies_are_bad_requests(body, fragment):
    with pytest.raises(admission.BadRequest, match=fragment):
        admission.parse_review(body)


def claim_pod(claim="train", extra=None):
    annotations = {"gpu.scheduling/claim": claim, **(extra or {})}
    return {
        "metadata": {"name": "job", "namespace": "default", "annotations": annotations},
        "spec": {"schedulerName": "gpu-scheduler", "containers": [{"name": "c", "env": [{"name": "A", "value": "a"}]}]},
    }


def test_claim_pod_gets_cuda_from_the_allocation_annotation():
    resp = decide(review(claim_pod()))
    ops = json.loads(base64.b64decode(resp["patch"]))
    env = patches.apply(claim_pod(), ops)["spec"]["containers"][0]["env"]
    assert env == [
        {"name": "A", "value": "a"},
        {
            "name": "CUDA_VISIBLE_DEVICES",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['gpu.scheduling/gpu-ids']"}},
        },
    ]


def test_claim_and_map_together_are_refused():
    resp = decide(review(claim_pod(extra={"gpu-scheduling-map": "0=node1:0"})))
    assert not resp["allowed"]
    assert "carries both gpu.scheduling/claim and gpu-scheduling-map" in resp["status"]["message"]


def test_empty_claim_name_is_refused():
    resp = decide(review(claim_pod(claim="  ")))
    assert not resp["allowed"] and "is empty; expected the name of a GpuClaim" in resp["status"]["message"]


# ---- hostile requests: a 400 or a denial naming the field, never another exception, never over 64 KiB ---------


def raw_review(request):
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode()


GOOD_REQUEST = {
    "uid": "u-1",
    "kind": {"group": "", "version": "v1", "kind": "Pod"},
    "operation": "CREATE",
    "namespace": "default",
}


@pytest.mark.parametrize(
    "body, fragment",
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"a":' * 100_000 + b"1" + b"}" * 100_000, "nested too deeply"),
        (
            b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","n":'
            + b"1" * 5000
            + b"}}",
            "body is not JSON: 'Exceeds the limit (4300 digits)",
        ),
        (b'{"apiVersion":"' + b"v" * 100_000 + b'"}', "got '" + "v" * 60 + "'…"),
        (raw_review({**GOOD_REQUEST, "uid": "u" * 257}), "(257 characters) is not 1 to 256 printable ASCII"),
        (raw_review({**GOOD_REQUEST, "uid": "u\nforged"}), "request.uid 'u\\nforged'"),
        (raw_review({**GOOD_REQUEST, "uid": ""}), "is not 1 to 256"),
        (raw_review({**GOOD_REQUEST, "uid": None}), "request.uid is null"),
        (raw_review({**GOOD_REQUEST, "uid": 7}), "request.uid is a number"),
        (raw_review({**GOOD_REQUEST, "kind": "Pod"}), "request.kind is a string; expected an object"),
        (raw_review({k: v for k, v in GOOD_REQUEST.items() if k != "kind"}), "request.kind is null"),
        (
            raw_review({**GOOD_REQUEST, "kind": {"group": "", "version": "v1", "kind": ["Pod"]}}),
            "request.kind.kind is an array",
        ),
        (
            raw_review({**GOOD_REQUEST, "kind": {"group": None, "version": "v1", "kind": "Pod"}}),
            "request.kind.group is null",
        ),
        (raw_review({**GOOD_REQUEST, "operation": 1}), "request.operation is a number"),
        (raw_review({**GOOD_REQUEST, "namespace": {}}), "request.namespace is an object"),
        (raw_review({**GOOD_REQUEST, "object": []}), "request.object is not a JSON object (it is an array)"),
        (raw_review([]), "request is an array"),
        (b'"\xed\xa0\x80"', "body is not a JSON object"),
    ],
)
def test_hostile_bodies_are_bad_requests(body, fragment):
    with pytest.raises(admission.BadRequest) as info:
        admission.parse_review(body)
    assert fragment in str(info.value), str(info.value)
    assert len(str(info.value)) < 1000 and "\n" not in str(info.value)


def request_with(obj, **changes):
    return {**GOOD_REQUEST, "object": obj, **changes}


MAP = {"gpu-scheduling-map": "0=node1:0"}


@pytest.mark.parametrize(
    "obj, fragment",
    [
        ({"metadata": []}, "metadata is an array; expected an object"),
        ({"metadata": {"name": "p-0", "annotations": []}}, "metadata.annotations is an array"),
        (
            {"metadata": {"name": "p-0", "annotations": {"gpu-scheduling-map": ["0=node1:0"]}}},
            "annotation gpu-scheduling-map is an array; expected a string",
        ),
        (
            {"metadata": {"name": "p-0", "annotations": {"gpu.scheduling/claim": None}}},
            "annotation gpu.scheduling/claim is null",
        ),
        (
            {"metadata": {"name": "p-0", "annotations": {"gpu.scheduling/claim": "Not_valid"}}},
            "'Not_valid' is not a valid GpuClaim name",
        ),
        ({"metadata": {"name": "p-0", "annotations": MAP, "labels": "x"}}, "metadata.labels is a string"),
        (
            {"metadata": {"name": "p-0", "annotations": MAP, "labels": {"apps.kubernetes.io/pod-index": 0}}},
            "pod default/p-0: label apps.kubernetes.io/pod-index is a number; expected a string",
        ),
        ({"metadata": {"name": "p-0", "annotations": MAP}, "spec": "x"}, "spec is a string; expected an object"),
        (
            {"metadata": {"name": "p-0", "annotations": MAP}, "spec": {"containers": "c"}},
            "spec.containers is a string; expected an array of containers",
        ),
        (
            {"metadata": {"name": "p-0", "annotations": MAP}, "spec": {"initContainers": [3]}},
            "spec.initContainers[0] is a number; expected a container object",
        ),
        (
            {"metadata": {"name": "p-0", "annotations": MAP}, "spec": {"containers": [{"env": "A=1"}]}},
            "spec.containers[0].env is a string; expected an array of env entries",
        ),
        (
            {"metadata": {"name": "p-0", "annotations": MAP}, "spec": {"containers": [{"env": [[]]}]}},
            "spec.containers[0].env[0] is an array; expected an object",
        ),
        (
            {"metadata": {"name": "p-0", "annotations": MAP}, "spec": {"containers": [{"env": [{"name": None}]}]}},
            "spec.containers[0].env[0].name is null; expected a string",
        ),
        (
            {"metadata": {"name": "p-0", "annotations": MAP}, "spec": {"containers": [{"name": 3}]}},
            "spec.containers[0].name is a number",
        ),
        ({"metadata": {"name": "p-" + "1" * 5000, "annotations": MAP}}, "has 5000 digits; at most 9"),
        ({"metadata": {"name": "p\n-0", "annotations": {"gpu-scheduling-map": "x"}}}, "pod default/'p\\n-0'"),
    ],
)
def test_pods_of_the_wrong_shape_are_denied_naming_the_field(obj, fragment):
    resp = admission.review_pod(admission.parse_review(raw_review(request_with(obj))))["response"]
    assert resp["allowed"] is False and fragment in resp["status"]["message"], resp
    assert len(admission.encode_review({"response": resp})) < 4096


def test_updates_are_not_looked_at():
    obj = {"metadata": [], "spec": "x"}
    resp = admission.review_pod(admission.parse_review(raw_review(request_with(obj, operation="UPDATE"))))
    assert resp["response"]["allowed"] and "patch" not in resp["response"]


def test_quadratic_map_gives_a_small_denial():
    text = "\n".join(["x" * 200] * 1000)  # 200 KB of bad lines: hundreds of MB of message before
    resp = decide(review(pod(annotation=text)))
    message = resp["status"]["message"]
    assert not resp["allowed"] and "and 990 more problems" in message and len(message) < 4000


def test_control_characters_never_reach_the_message_raw():
    resp = decide(review(pod(annotation="0=node1:0\n1=node\x1b[31m2:0\n2=\u2028node3:0")))
    message = resp["status"]["message"]
    assert "\x1b" not in message and "\u2028" not in message
    assert "character U+001B (control character) is not allowed" in message
    assert "line 2 '1=node\\x1b[31m2:0'" in message
    assert "character U+2028 (LINE SEPARATOR)" in message


def test_thousands_of_containers_are_denied_not_answered_with_a_huge_patch():
    the_pod = pod(name="check-0")
    the_pod["spec"]["containers"] = [{"name": f"c{i}"} for i in range(10_000)]
    review_ = admission.review_pod(admission.parse_review(review(the_pod)))
    resp = review_["response"]
    assert not resp["allowed"] and "it has 10000 containers and init containers" in resp["status"]["message"]
    assert "larger than the webhook's limit of 65536 bytes (at most 1092 containers fit" in resp["status"]["message"]
    assert len(admission.encode_review(review_)) < 1024


def test_a_patch_just_over_the_limit_is_denied_after_it_is_built():
    the_pod = pod(name="check-0")
    the_pod["spec"]["containers"] = [{"name": f"c{i}"} for i in range(700)]
    review_ = admission.review_pod(admission.parse_review(review(the_pod)))
    message = review_["response"]["status"]["message"]
    assert "a patch of 700 operations, an answer of at least" in message and "over the webhook's limit" in message


def test_a_hundred_containers_still_fit():
    the_pod = pod(name="check-0")
    the_pod["spec"]["containers"] = [{"name": f"c{i}"} for i in range(100)]
    review_ = admission.review_pod(admission.parse_review(review(the_pod)))
    assert review_["response"]["allowed"] and len(admission.encode_review(review_)) <= admission.MAX_RESPONSE_BYTES


def test_encode_review_bounds_any_answer():
    huge_allow = admission.allow("u", [{"op": "add", "path": "/x", "value": "v" * 200_000}])
    data = admission.encode_review(huge_allow)
    assert len(data) <= admission.MAX_RESPONSE_BYTES
    assert json.loads(data)["response"]["allowed"] is False and b"over its limit of 65536 bytes" in data
    huge_deny = admission._review(
        {"uid": "u", "allowed": False, "status": {"code": 400, "message": "m" * 500_000, "reason": "BadRequest"}}
    )
    data = admission.encode_review(huge_deny)
    assert len(data) <= admission.MAX_RESPONSE_BYTES and json.loads(data)["response"]["uid"] == "u"
    small = admission.allow("u")
    assert json.loads(admission.encode_review(small)) == small
    assert admission.encode_review(admission.deny("u", "\u2028é")).isascii()


def test_deny_cuts_its_message():
    assert len(admission.deny("u", "m" * 100_000)["response"]["status"]["message"]) == admission.MAX_MESSAGE_CHARS


# ---- the PodGroup a pod names, recorded where the apiserver would drop it ------------------------------------------

POD_GROUP = "gpu.scheduling/pod-group"


def grouped(the_pod, group="train", recorded=None):
    """`the_pod` naming the PodGroup `group` in spec.schedulingGroup (and, given, the annotation `recorded`)."""
    the_pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    if recorded is not None:
        the_pod["metadata"].setdefault("annotations", {})[POD_GROUP] = recorded
    return the_pod


@pytest.mark.parametrize(
    "the_pod",
    [grouped(claim_pod()), grouped(pod()), grouped(pod(annotation=None))],
    ids=["claim pod", "map pod", "pod of the scheduler with neither (no annotations)"],
)
def test_the_pod_group_a_pod_names_is_recorded_in_an_annotation(the_pod):
    """The apiserver drops spec.schedulingGroup after mutating admission where its GenericWorkload gate is off
    (PrepareForCreate): the record survives, and gpu-scheduler keeps the pod waiting instead of placing it alone."""
    resp = decide(review(the_pod))
    assert resp["allowed"], resp
    patched = patches.apply(the_pod, json.loads(base64.b64decode(resp["patch"])))
    assert patched["metadata"]["annotations"][POD_GROUP] == "train"
    assert patched["spec"]["schedulingGroup"] == {"podGroupName": "train"}, "the field itself is left alone"


def test_a_record_that_says_so_already_is_left_alone_and_a_pod_naming_none_gets_none():
    resp = decide(review(grouped(pod(annotation=None), recorded="train")))
    assert resp["allowed"] and "patch" not in resp
    resp = decide(review(claim_pod()))
    assert POD_GROUP not in json.dumps(json.loads(base64.b64decode(resp["patch"])))


@pytest.mark.parametrize(
    ("the_pod", "fragment"),
    [
        (grouped(claim_pod(), recorded="other"), "spec.schedulingGroup.podGroupName='train' and annotation"),
        (grouped(claim_pod(), group="Not_A_Name"), "podGroupName='Not_A_Name' is not a valid gang name"),
        (grouped(pod(annotation=None), group=["x"]), "podGroupName is an array; expected the gang's name"),
        (
            {**claim_pod(), "spec": {"workloadRef": {"name": "w", "podGroup": "g"}, "containers": []}},
            "spec.workloadRef (Kubernetes 1.35's alpha Workload API) is not read by gpu-scheduler",
        ),
    ],
)
def test_a_pod_group_reference_that_cannot_be_read_is_refused_with_the_reason(the_pod, fragment):
    resp = decide(review(the_pod))
    assert not resp["allowed"] and fragment in resp["status"]["message"], resp
