"""The webhook's decision for one AdmissionReview, and the rejection of bodies that are not reviews."""

import base64
import json

import pytest

from gpu_scheduling import admission, patches

TAKE_HOME = "0=node1:0,1\n1=node2:2\n2=node3:0,1,2\n3=node4:3\n4=node4:3\n"


def review(pod, operation="CREATE", kind="Pod", uid="u-1"):
    return json.dumps({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": uid, "kind": {"group": "", "version": "v1", "kind": kind}, "operation": operation,
                    "namespace": "default", "object": pod},
    }).encode()


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
        {"name": "CUDA_VISIBLE_DEVICES", "value": "0,1,2"}]


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
        (b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","object":3}}',
         "request.object is not a JSON object"),
        (b"\xff\xfe", "not JSON"),
    ],
)
def test_malformed_bodies_are_bad_requests(body, fragment):
    with pytest.raises(admission.BadRequest, match=fragment):
        admission.parse_review(body)


def claim_pod(claim="train", extra=None):
    annotations = {"gpu.scheduling/claim": claim, **(extra or {})}
    return {"metadata": {"name": "job", "namespace": "default", "annotations": annotations},
            "spec": {"schedulerName": "gpu-scheduler", "containers": [{"name": "c", "env": [{"name": "A", "value": "a"}]}]}}


def test_claim_pod_gets_cuda_from_the_allocation_annotation():
    resp = decide(review(claim_pod()))
    ops = json.loads(base64.b64decode(resp["patch"]))
    env = patches.apply(claim_pod(), ops)["spec"]["containers"][0]["env"]
    assert env == [{"name": "A", "value": "a"}, {"name": "CUDA_VISIBLE_DEVICES", "valueFrom": {
        "fieldRef": {"fieldPath": "metadata.annotations['gpu.scheduling/gpu-ids']"}}}]


def test_claim_and_map_together_are_refused():
    resp = decide(review(claim_pod(extra={"gpu-scheduling-map": "0=node1:0"})))
    assert not resp["allowed"]
    assert "carries both gpu.scheduling/claim and gpu-scheduling-map" in resp["status"]["message"]


def test_empty_claim_name_is_refused():
    resp = decide(review(claim_pod(claim="  ")))
    assert not resp["allowed"] and "is empty; expected the name of a GpuClaim" in resp["status"]["message"]
