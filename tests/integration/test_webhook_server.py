"""The real gpu-webhook program over real TLS: answers reviews, rejects bad bodies with 400, survives 500s."""

from __future__ import annotations

import base64
import http.client
import json
import pathlib
import ssl
import sys

import pytest

from tests.harness import pki
from tests.harness.processes import Process, free_port

SCRIPTS = pathlib.Path(sys.executable).parent


@pytest.fixture(scope="module")
def webhook(tmp_path_factory):
    d = tmp_path_factory.mktemp("webhook")
    ca = pki.CA(d, "test")
    pair = ca.issue("serving", "gpu-webhook", server=True, dns=("localhost",), ips=("127.0.0.1",))
    port = free_port()
    proc = Process("gpu-webhook", [str(SCRIPTS / "gpu-webhook"), "--host", "127.0.0.1", "--port", str(port),
                                   "--tls-cert-file", str(pair.cert), "--tls-private-key-file", str(pair.key)], d)
    proc.start()
    ctx = ssl.create_default_context(cafile=str(ca.cert_path))
    try:
        proc.wait_http(f"https://127.0.0.1:{port}/readyz", context=ctx)
        yield port, ctx, proc
    finally:
        proc.stop()


def post(webhook, body: bytes, path: str = "/mutate") -> tuple[int, bytes]:
    port, ctx, _ = webhook
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    return resp.status, resp.read()


def review(obj) -> bytes:
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": "u-42", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                                   "operation": "CREATE", "namespace": "default", "object": obj}}).encode()


GOOD_POD = {"metadata": {"name": "check-1", "annotations": {"gpu-scheduling-map": "1=node2:2"}},
            "spec": {"containers": [{"name": "c"}]}}


def test_patches_a_pod(webhook):
    status, body = post(webhook, review(GOOD_POD))
    assert status == 200
    response = json.loads(body)["response"]
    assert response["uid"] == "u-42" and response["allowed"]
    assert json.loads(base64.b64decode(response["patch"])) == [
        {"op": "add", "path": "/spec/containers/0/env", "value": [{"name": "CUDA_VISIBLE_DEVICES", "value": "2"}]}]


def test_denies_a_bad_map_with_the_line(webhook):
    bad = {"metadata": {"name": "check-1", "annotations": {"gpu-scheduling-map": "1=node2:x"}}, "spec": {}}
    status, body = post(webhook, review(bad))
    response = json.loads(body)["response"]
    assert status == 200 and response["allowed"] is False
    assert "line 1 '1=node2:x': gpu id 'x' is not a non-negative integer" in response["status"]["message"]


@pytest.mark.parametrize("body", [b"", b"{", b'{"kind":"Pod"}', b"\x00\x01"])
def test_malformed_body_is_400_and_server_keeps_serving(webhook, body):
    status, text = post(webhook, body)
    assert status == 400 and b"error" in text
    assert post(webhook, review(GOOD_POD))[0] == 200


def test_unexpected_error_is_500_logged_and_server_keeps_serving(webhook):
    status, _ = post(webhook, review({"metadata": ["not", "a", "map"]}))
    assert status == 500
    assert "unexpected error answering an admission request" in webhook[2].log_path.read_text()
    assert post(webhook, review(GOOD_POD))[0] == 200


def test_oversized_body_is_refused(webhook):
    status, _ = post(webhook, b"{" + b" " * (4 * 1024 * 1024) + b"}")
    assert status == 413
    assert post(webhook, review(GOOD_POD))[0] == 200


def test_plain_http_is_refused(webhook):
    conn = http.client.HTTPConnection("127.0.0.1", webhook[0], timeout=5)
    try:
        conn.request("GET", "/healthz")
        status = conn.getresponse().status
    except (ConnectionError, http.client.HTTPException, OSError):
        status = None
    assert status != 200, "a TLS-only server answered plain HTTP"


def test_metrics_count_requests(webhook):
    port, ctx, _ = webhook
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=5)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    assert "gpu_webhook_requests_total" in text and "gpu_webhook_bad_requests_total" in text
