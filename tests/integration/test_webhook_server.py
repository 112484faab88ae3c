"""The real gpu-webhook program over real TLS: answers reviews over HTTP/2 and HTTP/1.1, rejects bad bodies with
4xx, refuses weak TLS, and an unexpected error (a bug) is a logged 500 that does not stop it."""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import pathlib
import socket
import ssl
import sys

import httpx
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from gpu_scheduling import admission, constants
from gpu_scheduling.webhook.app import WebhookApp
from harness import pki
from harness.processes import Process, free_port

SCRIPTS = pathlib.Path(sys.executable).parent


class Webhook:
    """A running gpu-webhook process and what a client needs to reach it."""

    def __init__(self, proc: Process, port: int, ctx: ssl.SSLContext, ca_path: pathlib.Path):
        self.proc, self.port, self.ctx, self.ca_path = proc, port, ctx, ca_path

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.proc.log_path.read_text(errors="replace")


def start_webhook(d: pathlib.Path, *extra: str, env: dict[str, str] | None = None) -> Webhook:
    ca = pki.CA(d, "test")
    pair = ca.issue("serving", "gpu-webhook", server=True, dns=("localhost",), ips=("127.0.0.1",))
    port = free_port()
    proc = Process(
        "gpu-webhook",
        [
            str(SCRIPTS / "gpu-webhook"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--tls-cert-file",
            str(pair.cert),
            "--tls-private-key-file",
            str(pair.key),
            *extra,
        ],
        d,
        env=env,
    )
    proc.start()
    ctx = ssl.create_default_context(cafile=str(ca.cert_path))
    try:
        proc.wait_http(f"https://127.0.0.1:{port}/readyz", context=ctx)
    except Exception:
        proc.stop()
        raise
    return Webhook(proc, port, ctx, ca.cert_path)


@pytest.fixture(scope="module")
def webhook(tmp_path_factory):
    hook = start_webhook(tmp_path_factory.mktemp("webhook"))
    try:
        yield hook
    finally:
        hook.proc.stop()


def post(webhook: Webhook, body: bytes, path: str = "/mutate", method: str = "POST") -> tuple[int, bytes]:
    conn = http.client.HTTPSConnection("127.0.0.1", webhook.port, context=webhook.ctx, timeout=10)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def review(obj) -> bytes:
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u-42",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "operation": "CREATE",
                "namespace": "default",
                "object": obj,
            },
        }
    ).encode()


GOOD_POD = {
    "metadata": {"name": "check-1", "annotations": {constants.MAP_ANNOTATION: "1=node2:2"}},
    "spec": {"containers": [{"name": "c"}]},
}
PATCH = [{"op": "add", "path": "/spec/containers/0/env", "value": [{"name": "CUDA_VISIBLE_DEVICES", "value": "2"}]}]


def assert_patched(body: bytes) -> None:
    response = json.loads(body)["response"]
    assert response["uid"] == "u-42" and response["allowed"]
    assert json.loads(base64.b64decode(response["patch"])) == PATCH


def test_patches_a_pod(webhook):
    status, body = post(webhook, review(GOOD_POD))
    assert status == 200
    assert_patched(body)


def test_denies_a_bad_map_with_the_line(webhook):
    bad = {"metadata": {"name": "check-1", "annotations": {constants.MAP_ANNOTATION: "1=node2:x"}}, "spec": {}}
    status, body = post(webhook, review(bad))
    response = json.loads(body)["response"]
    assert status == 200 and response["allowed"] is False
    assert "line 1" in response["status"]["message"] and "'x'" in response["status"]["message"]


@pytest.mark.parametrize("body", [b"", b"{", b'{"kind":"Pod"}', b"\x00\x01"])
def test_malformed_body_is_400_and_server_keeps_serving(webhook, body):
    status, text = post(webhook, body)
    assert status == 400 and b"error" in text
    assert post(webhook, review(GOOD_POD))[0] == 200


@pytest.mark.parametrize(
    "method, path, status",
    [
        ("GET", "/mutate", 405),
        ("PUT", "/mutate", 405),
        ("POST", "/healthz", 405),
        ("DELETE", "/metrics", 405),
        ("GET", "/", 404),
        ("POST", "/nope", 404),
        ("GET", "/mutate/../healthz", 404),
    ],
)
def test_wrong_method_or_path_is_4xx(webhook, method, path, status):
    assert post(webhook, b"{}", path=path, method=method)[0] == status


def _raw_https(webhook: Webhook, alpn: list[str] | None = None) -> ssl.SSLSocket:
    ctx = ssl.create_default_context(cafile=str(webhook.ca_path))
    if alpn:
        ctx.set_alpn_protocols(alpn)
    return ctx.wrap_socket(
        socket.create_connection(("127.0.0.1", webhook.port), timeout=10), server_hostname="127.0.0.1"
    )


def _read_response(sock: ssl.SSLSocket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_oversized_body_is_refused_without_reading_it(webhook):
    """A declared Content-Length over 3 MiB is answered 413 at once, before the body is sent."""
    with _raw_https(webhook) as sock:
        sock.sendall(
            b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n{" % (4 * 1024 * 1024)
        )
        head = _read_response(sock)
    assert head.startswith(b"HTTP/1.1 413"), head
    assert post(webhook, review(GOOD_POD))[0] == 200


def test_oversized_chunked_body_is_refused(webhook):
    """Without a Content-Length the body is counted as it comes: 413 once it passes 3 MiB."""

    def chunks():
        piece = b" " * (256 * 1024)
        for _ in range(16):
            yield piece

    with httpx.Client(verify=webhook.ctx, http2=False, timeout=10) as client:
        try:
            status = client.post(f"{webhook.url}/mutate", content=chunks()).status_code
        except httpx.TransportError:
            status = None  # the server may close while the client is still writing; then it must not be 2xx
    assert status in (413, None)
    assert post(webhook, review(GOOD_POD))[0] == 200


def test_alpn_offers_h2_then_http11(webhook):
    with _raw_https(webhook, ["h2", "http/1.1"]) as sock:
        assert sock.selected_alpn_protocol() == "h2"
    with _raw_https(webhook, ["http/1.1"]) as sock:
        assert sock.selected_alpn_protocol() == "http/1.1"


def test_http2_request(webhook):
    with httpx.Client(verify=webhook.ctx, http2=True, timeout=10) as client:
        for _ in range(3):  # several streams on one connection
            resp = client.post(
                f"{webhook.url}/mutate", content=review(GOOD_POD), headers={"content-type": "application/json"}
            )
            assert resp.http_version == "HTTP/2" and resp.status_code == 200
            assert_patched(resp.content)
        assert client.get(f"{webhook.url}/healthz").text == "ok\n"
        assert client.post(f"{webhook.url}/mutate", content=b"{").status_code == 400
        assert client.get(f"{webhook.url}/nope").status_code == 404


def test_http11_keep_alive(webhook):
    with httpx.Client(verify=webhook.ctx, http2=False, timeout=10) as client:
        for _ in range(3):
            resp = client.post(f"{webhook.url}/mutate", content=review(GOOD_POD))
            assert resp.http_version == "HTTP/1.1" and resp.status_code == 200
            assert_patched(resp.content)


@pytest.mark.parametrize(
    "ciphers",
    [
        (
            "ECDHE-ECDSA-AES128-SHA:ECDHE-ECDSA-AES256-SHA384:ECDHE-ECDSA-AES128-SHA256:"
            "ECDHE-RSA-AES128-SHA:ECDHE-RSA-AES128-SHA256:AES128-SHA:AES256-SHA256"
        ),
        "AES128-GCM-SHA256:AES256-GCM-SHA384",
    ],
)
def test_tls12_without_aead_ecdhe_suites_is_refused(webhook, ciphers):
    """A TLS 1.2 client offering only CBC suites (or only RSA key exchange) gets no connection."""
    ctx = ssl.create_default_context(cafile=str(webhook.ca_path))
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(ciphers)
    with (
        pytest.raises((ssl.SSLError, ConnectionError)),
        ctx.wrap_socket(socket.create_connection(("127.0.0.1", webhook.port), timeout=10), server_hostname="127.0.0.1"),
    ):
        pass


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_tls12_aead_and_tls13_work(webhook, version):
    ctx = ssl.create_default_context(cafile=str(webhook.ca_path))
    ctx.minimum_version = ctx.maximum_version = version
    with ctx.wrap_socket(
        socket.create_connection(("127.0.0.1", webhook.port), timeout=10), server_hostname="127.0.0.1"
    ) as sock:
        assert sock.version() == ("TLSv1.2" if version == ssl.TLSVersion.TLSv1_2 else "TLSv1.3")
        name = sock.cipher()[0]
        assert "GCM" in name or "CHACHA20" in name


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_tls11_is_refused(webhook):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    try:
        ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_1
        ctx.set_ciphers("ALL:@SECLEVEL=0")
    except (ValueError, ssl.SSLError):
        pytest.skip("this OpenSSL cannot even offer TLS 1.1")
    with (
        pytest.raises((ssl.SSLError, ConnectionError)),
        ctx.wrap_socket(socket.create_connection(("127.0.0.1", webhook.port), timeout=10)),
    ):
        pass


def test_plain_http_is_refused(webhook):
    conn = http.client.HTTPConnection("127.0.0.1", webhook.port, timeout=5)
    try:
        conn.request("GET", "/healthz")
        status = conn.getresponse().status
    except (ConnectionError, http.client.HTTPException, OSError):
        status = None
    assert status != 200, "a TLS-only server answered plain HTTP"


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_metrics_count_requests(webhook):
    with httpx.Client(verify=webhook.ctx, timeout=10) as client:
        before = _samples(client.get(f"{webhook.url}/metrics").text)
        assert post(webhook, review(GOOD_POD))[0] == 200
        assert post(webhook, b"not json")[0] == 400
        plain = client.get(f"{webhook.url}/metrics")
        openmetrics = client.get(
            f"{webhook.url}/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
        )
        head = client.head(f"{webhook.url}/metrics")
    assert plain.status_code == 200
    assert plain.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    after = _samples(plain.text)

    def delta(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after[key] - before[key]

    assert delta("gpu_webhook_requests_total") == 1
    assert delta("gpu_webhook_patched_total") == 1
    assert delta("gpu_webhook_bad_requests_total") == 1
    assert delta("gpu_webhook_errors_total") == 0
    assert delta("gpu_webhook_request_duration_seconds_count") == 1
    assert delta("gpu_webhook_request_duration_seconds_bucket", le="+Inf") == 1
    assert ("gpu_webhook_request_duration_seconds_bucket", (("le", "0.005"),)) in after
    assert after[("gpu_webhook_open_connections", ())] >= 1  # this client's own connection
    assert after[("gpu_webhook_connections_total", (("protocol", "http/1.1"),))] >= 1
    assert "# TYPE gpu_webhook_open_connections gauge" in plain.text
    assert "# TYPE gpu_webhook_connections_total counter" in plain.text
    assert not [line for line in plain.text.splitlines() if "_created" in line]
    assert openmetrics.status_code == 200
    assert openmetrics.headers["content-type"].startswith("application/openmetrics-text; version=1.0.0")
    assert openmetrics.text.endswith("# EOF\n")
    names = {family.name for family in openmetrics_families(openmetrics.text)}
    assert {"gpu_webhook_requests", "gpu_webhook_open_connections", "gpu_webhook_request_duration_seconds"} <= names
    assert head.status_code == 200 and head.content == b""


def test_log_format_json(tmp_path):
    hook = start_webhook(tmp_path, "--log-format", "json", "--log-level", "debug")
    try:
        assert post(hook, review(GOOD_POD))[0] == 200
    finally:
        hook.proc.stop()
    lines = [line for line in hook.log().splitlines() if line.startswith("{")]
    assert lines and all({"time", "level", "logger", "msg"} <= json.loads(line).keys() for line in lines)
    assert any("serving HTTPS" in json.loads(line)["msg"] for line in lines)


# An unexpected error (a bug in the decision) is answered 500, logged and counted: in process, with a decision
# that raises, since the real one must never do so.


def _call(app: WebhookApp, method: str, path: str, body: bytes) -> tuple[int, bytes]:
    sent: list[dict] = []
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "headers": [],
        "http_version": "1.1",
        "client": ("127.0.0.1", 1),
    }
    asyncio.run(app(scope, receive, send))
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def test_unexpected_error_is_500_logged_and_counted(monkeypatch, caplog):
    def broken(_request):
        raise RuntimeError("a bug")

    monkeypatch.setattr(admission, "review_pod", broken)
    app = WebhookApp()
    status, body = _call(app, "POST", "/mutate", review(GOOD_POD))
    assert status == 500 and b"internal error" in body
    assert app.metrics.registry.get_sample_value("gpu_webhook_errors_total") == 1
    assert "unexpected error answering an admission request" in caplog.text
    monkeypatch.undo()
    status, body = _call(app, "POST", "/mutate", review(GOOD_POD))
    assert status == 200
    assert_patched(body)


def test_isolated_gpus_number_the_pods_gpus_from_zero():
    """--isolated-gpus reaches the decision: the pod sees its one GPU as 0, not as the node's GPU 2 (the flag was
    once parsed and handed to the app, which then decided without it)."""
    status, body = _call(WebhookApp(isolated=True), "POST", "/mutate", review(GOOD_POD))
    assert status == 200
    patch = json.loads(base64.b64decode(json.loads(body)["response"]["patch"]))
    assert patch == [{**PATCH[0], "value": [{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}]}]
    status, body = _call(WebhookApp(), "POST", "/mutate", review(GOOD_POD))
    assert status == 200
    assert_patched(body)
