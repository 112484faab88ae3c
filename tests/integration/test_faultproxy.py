"""The harness's fault proxy over real TLS, in front of a small local HTTPS server (not Kubernetes): it forwards
untouched what no rule matches, with the upstream kubeconfig's client certificate, streams, keeps connections
alive, and answers or holds back exactly the requests its rules name, as many times as they say."""

from __future__ import annotations

import gzip
import http.client
import http.server
import json
import re
import socket
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from gpu_scheduling.kube.errors import ApiError
from gpu_scheduling.kube.sync import SyncClient
from harness import pki
from harness.controlplane import kubeconfig
from harness.faultproxy import FaultProxy
from harness.processes import free_port


class Upstream(http.server.ThreadingHTTPServer):
    """HTTPS, HTTP/1.1 keep-alive, client certificates required; remembers every request it served."""

    daemon_threads = True

    def __init__(self, port: int, ctx: ssl.SSLContext):
        super().__init__(("127.0.0.1", port), Handler)
        self.ctx = ctx
        self.seen: list[dict[str, Any]] = []
        self.release_stream = threading.Event()

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = super().get_request()
        return self.ctx.wrap_socket(sock, server_side=True), addr


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Upstream

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _record(self, body: bytes) -> dict[str, Any]:
        subject = dict(x[0] for x in self.connection.getpeercert()["subject"])
        entry = {
            "method": self.command,
            "path": self.path,
            "body": body.decode(),
            "client_cn": subject["commonName"],
            "peer_port": self.client_address[1],
            "user_agent": self.headers.get("User-Agent"),
            "content_type": self.headers.get("Content-Type"),
        }
        self.server.seen.append(entry)
        return entry

    def _reply(self, status: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in {
            "Content-Type": "application/json",
            "Content-Length": str(len(payload)),
            **(headers or {}),
        }.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(payload)

    def _any(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        entry = self._record(body)
        if self.path.startswith("/stream"):
            return self._stream()
        if self.path.startswith("/gzip"):
            if "gzip" in (self.headers.get("Accept-Encoding") or ""):
                return self._reply(200, gzip.compress(b'{"compressed": true}'), {"Content-Encoding": "gzip"})
            return self._reply(200, b'{"compressed": false}')
        if self.path.startswith("/teapot"):
            return self._reply(418, b'{"kind": "Status", "code": 418}', {"X-Upstream": "yes"})
        return self._reply(200, json.dumps(entry).encode(), {"X-Upstream": "yes"})

    def _stream(self) -> None:
        """Like a watch: a chunked answer whose second event comes only when the test says so."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def chunk(data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        chunk(b'{"type": "ADDED"}\n')
        self.server.release_stream.wait(10)
        chunk(b'{"type": "DELETED"}\n')
        self.wfile.write(b"0\r\n\r\n")

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any


@pytest.fixture(scope="module")
def pki_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("faultproxy")
    cluster = pki.CA(d, "cluster")  # the "apiserver's" CA: serving certificate and client certificates
    serving = cluster.issue("upstream", "upstream", server=True, ips=("127.0.0.1",))
    client = cluster.issue("scheduler", "scheduler-test", org="system:masters", client=True)
    return d, cluster, serving, client


@pytest.fixture(scope="module")
def upstream(pki_dir):
    _, cluster, serving, _ = pki_dir
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(serving.cert), str(serving.key))
    ctx.load_verify_locations(cafile=str(cluster.cert_path))
    ctx.verify_mode = ssl.CERT_REQUIRED
    server = Upstream(free_port(), ctx)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.release_stream.set()
    server.shutdown()
    server.server_close()


@pytest.fixture
def proxy(pki_dir, upstream):
    d, cluster, _, client = pki_dir
    upstream_config = d / "upstream.kubeconfig"
    upstream_config.write_text(kubeconfig(f"https://127.0.0.1:{upstream.server_address[1]}", cluster.pem, client))
    upstream.seen.clear()
    upstream.release_stream.clear()
    # The CA named as the proxy, as the harness has it (harness/components.py).
    with FaultProxy(upstream_config, pki.CA(d, "faultproxy"), d, client_ca=cluster.cert_path) as p:
        yield p


def connect(proxy: FaultProxy, pki_dir, with_client_cert: bool = True) -> http.client.HTTPSConnection:
    _, _, _, client = pki_dir
    ctx = ssl.create_default_context(cafile=str(proxy.ca.cert_path))
    if with_client_cert:
        ctx.load_cert_chain(str(client.cert), str(client.key))
    return http.client.HTTPSConnection("127.0.0.1", proxy.port, context=ctx, timeout=15)


def call(
    conn: http.client.HTTPSConnection,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    conn.request(method, path, body=body, headers=headers or {})
    resp = conn.getresponse()
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()


def test_forwards_untouched_with_the_kubeconfig_client_certificate(proxy, upstream, pki_dir):
    conn = connect(proxy, pki_dir)
    status, headers, body = call(
        conn,
        "PATCH",
        "/api/v1/namespaces/a/pods/p?fieldManager=x",
        b'{"spec": {}}',
        {"Content-Type": "application/merge-patch+json", "User-Agent": "gpu-scheduler/a"},
    )
    seen = json.loads(body)
    assert status == 200 and headers["x-upstream"] == "yes"
    assert seen == {
        "method": "PATCH",
        "path": "/api/v1/namespaces/a/pods/p?fieldManager=x",
        "body": '{"spec": {}}',
        "client_cn": "scheduler-test",
        "peer_port": seen["peer_port"],
        "user_agent": "gpu-scheduler/a",
        "content_type": "application/merge-patch+json",
    }
    # An upstream error is passed on as it is: status, headers and body.
    status, headers, body = call(conn, "GET", "/teapot")
    assert (status, headers["x-upstream"], json.loads(body)) == (418, "yes", {"kind": "Status", "code": 418})
    assert [e.status for e in proxy.exchanges()] == [200, 418]
    assert proxy.passed() == 2 and proxy.passed("GET") == 1


def test_client_kubeconfig_reaches_upstream_through_the_proxy(proxy, upstream):
    # The kubeconfig written for clients: the same user, the proxy's address and CA (what the scheduler loads).
    api = SyncClient(str(proxy.kubeconfig))
    assert api.cfg.server == proxy.url
    assert api.get("/api/v1/nodes")["client_cn"] == "scheduler-test"
    assert api.create("/api/v1/namespaces/a/pods", {"x": 1})["body"] == '{"x": 1}'


def test_requires_a_client_certificate_when_given_a_client_ca(proxy, pki_dir):
    conn = connect(proxy, pki_dir, with_client_cert=False)
    with pytest.raises((ssl.SSLError, ConnectionError)):
        call(conn, "GET", "/api/v1/nodes")
    assert proxy.exchanges() == []


def test_keeps_both_connections_alive(proxy, upstream, pki_dir):
    conn = connect(proxy, pki_dir)
    call(conn, "GET", "/one")
    client_socket = conn.sock
    call(conn, "GET", "/two")
    call(conn, "DELETE", "/three")
    assert conn.sock is client_socket, "the proxy closed the client's connection between requests"
    ports = {e["peer_port"] for e in upstream.seen}
    assert len(upstream.seen) == 3 and len(ports) == 1, f"upstream connections per request: {upstream.seen}"


def test_streams_a_watch_chunk_by_chunk(proxy, upstream, pki_dir):
    conn = connect(proxy, pki_dir)
    conn.request("GET", "/stream?watch=true")
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Transfer-Encoding") == "chunked"
    # The first event arrives while the upstream still holds the answer open.
    assert json.loads(resp.readline()) == {"type": "ADDED"}
    assert not upstream.release_stream.is_set()
    upstream.release_stream.set()
    assert json.loads(resp.readline()) == {"type": "DELETED"}
    assert resp.read() == b""
    assert call(conn, "GET", "/after")[0] == 200  # and the connection is reusable after a stream


def test_passes_compressed_answers_through_and_never_asks_for_them_itself(proxy, pki_dir):
    conn = connect(proxy, pki_dir)
    status, headers, body = call(conn, "GET", "/gzip", headers={"Accept-Encoding": "gzip"})
    assert status == 200 and headers["content-encoding"] == "gzip"
    assert json.loads(gzip.decompress(body)) == {"compressed": True}
    status, headers, body = call(conn, "GET", "/gzip")
    assert status == 200 and "content-encoding" not in headers and json.loads(body) == {"compressed": False}


def test_fail_answers_the_matching_requests_with_a_status_then_lets_them_through(proxy, upstream, pki_dir):
    rule = proxy.fail(method="DELETE", path=re.compile(r"/leases/gpu-"), status=503, times=2)
    conn = connect(proxy, pki_dir)
    lease = "/apis/coordination.k8s.io/v1/namespaces/gpu-scheduling/leases/gpu-node1-0"
    answers = []
    for _ in range(3):
        status, headers, body = call(conn, "DELETE", lease)
        answers.append((status, headers.get("content-type", "").split(";")[0], json.loads(body).get("code")))
    # The upstream's answer has no code; the injected ones are Statuses.
    assert answers == [(503, "application/json", 503)] * 2 + [(200, "application/json", None)]
    # Not matching: another method on the same path, the same method on another lease.
    assert call(conn, "GET", lease)[0] == 200
    assert call(conn, "DELETE", lease.replace("gpu-node1-0", "scheduler"))[0] == 200
    assert proxy.injected(rule) == 2 and rule.paths == [lease, lease]
    assert proxy.passed("DELETE", re.compile(r"/leases/gpu-")) == 1
    assert [(e["method"], e["path"]) for e in upstream.seen] == [
        ("DELETE", lease),
        ("GET", lease),
        ("DELETE", lease.replace("gpu-node1-0", "scheduler")),
    ]


def test_an_injected_failure_is_a_kubernetes_status(proxy, pki_dir):
    proxy.fail(path="/api/v1/nodes", status=429, retry_after=3, message="slow down")
    proxy.fail(method="POST", status=504)
    conn = connect(proxy, pki_dir)
    status, headers, body = call(conn, "GET", "/api/v1/nodes")
    assert status == 429 and headers["retry-after"] == "3"
    assert json.loads(body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "slow down",
        "reason": "TooManyRequests",
        "code": 429,
        "details": {"retryAfterSeconds": 3},
    }
    # The project's own client reads it as the apiserver's error.
    with pytest.raises(ApiError) as err:
        SyncClient(str(proxy.kubeconfig)).create("/api/v1/namespaces/a/pods", {})
    assert (err.value.status, err.value.reason) == (504, "Timeout")
    assert "fault proxy" in err.value.message


def test_delay_holds_only_the_matching_requests_only_as_often_as_told(proxy, pki_dir):
    rule = proxy.delay(method="POST", path=re.compile(r"/binding$"), seconds=1.0, times=1)
    conn = connect(proxy, pki_dir)
    timings = []
    for method, path in [
        ("POST", "/api/v1/namespaces/a/pods/p/binding"),
        ("GET", "/api/v1/namespaces/a/pods/p"),
        ("POST", "/api/v1/namespaces/a/pods/p/binding"),
    ]:
        started = time.monotonic()
        assert call(conn, method, path)[0] == 200
        timings.append(time.monotonic() - started)
    assert timings[0] >= 1.0 and timings[1] < 0.5 and timings[2] < 0.5, timings
    assert proxy.injected(rule) == 1
    assert proxy.passed("POST") == 2  # a delayed request is forwarded


def test_concurrent_requests_never_overdraw_times(proxy, pki_dir):
    rule = proxy.fail(method="DELETE", status=500, times=3)

    def one(_: int) -> int:
        return call(connect(proxy, pki_dir), "DELETE", "/x")[0]

    with ThreadPoolExecutor(8) as pool:
        statuses = sorted(pool.map(one, range(12)))
    assert statuses == [200] * 9 + [500] * 3
    assert proxy.injected(rule) == 3 and proxy.passed("DELETE") == 9


def test_reset_drops_rules_and_counters(proxy, pki_dir):
    rule = proxy.fail(status=503)
    conn = connect(proxy, pki_dir)
    assert call(conn, "GET", "/a")[0] == 503
    proxy.reset()
    assert call(conn, "GET", "/a")[0] == 200
    assert proxy.injected(rule) == 1  # the rule's own count stays readable after the reset
    assert [(e.path, e.status, e.injected) for e in proxy.exchanges()] == [("/a", 200, False)]


def test_an_unreachable_upstream_is_a_503_status(pki_dir, tmp_path):
    _, cluster, _, client = pki_dir
    config = tmp_path / "down.kubeconfig"
    config.write_text(kubeconfig(f"https://127.0.0.1:{free_port()}", cluster.pem, client))
    with FaultProxy(config, pki.CA(tmp_path, "proxy"), tmp_path) as p:
        status, _, body = call(connect(p, pki_dir), "GET", "/api/v1/nodes")
    assert status == 503
    assert json.loads(body)["reason"] == "ServiceUnavailable" and "unreachable" in json.loads(body)["message"]
    assert not p.running
