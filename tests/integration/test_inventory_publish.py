"""harness.inventory.publish, the one GpuNodeStatus writer of the tests and the benchmark, against a small local
HTTPS server that answers as the apiserver does (not Kubernetes): the resource unknown for a moment after its CRD
is Established (404), objects that exist already (409 AlreadyExists), and refusals."""

from __future__ import annotations

import http.server
import json
import pathlib
import socket
import ssl
import threading
from typing import Any

import pytest

from gpu_scheduling.agent.inventory import simulated_status
from gpu_scheduling.claims import objects
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import Forbidden, NotFound
from harness import inventory, pki
from harness.controlplane import kubeconfig
from harness.processes import free_port


class FakeApiserver(http.server.ThreadingHTTPServer):
    """GpuNodeStatus objects by name and their status. `missing` answers 404 to that many requests first (the
    resource not served yet); `forbidden` nodes are refused."""

    daemon_threads = True

    def __init__(self, port: int, ctx: ssl.SSLContext):
        super().__init__(("127.0.0.1", port), Handler)
        self.ctx = ctx
        self.lock = threading.Lock()
        self.objects: dict[str, dict[str, Any]] = {}
        self.missing = 0
        self.forbidden: set[str] = set()
        self.requests: list[tuple[str, str]] = []
        self.kubeconfig = pathlib.Path()

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = super().get_request()
        return self.ctx.wrap_socket(sock, server_side=True), addr


def status(code: int, reason: str) -> bytes:
    return json.dumps(
        {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": reason}
    ).encode()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FakeApiserver

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _reply(self, code: int, payload: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _any(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")
        api = self.server
        with api.lock:
            api.requests.append((self.command, self.path))
            if api.missing > 0:
                api.missing -= 1
                return self._reply(404, status(404, "NotFound"))
            if self.command == "POST" and self.path == paths.NODE_STATUSES:
                name = body["metadata"]["name"]
                if name in api.forbidden:
                    return self._reply(403, status(403, "Forbidden"))
                if name in api.objects:
                    return self._reply(409, status(409, "AlreadyExists"))
                api.objects[name] = body
                return self._reply(201, json.dumps(body).encode())
            name = self.path.removeprefix(paths.NODE_STATUSES + "/").removesuffix("/status")
            if self.command == "PATCH" and self.path == paths.gpu_node_status_status(name) and name in api.objects:
                api.objects[name]["status"] = body["status"]
                return self._reply(200, json.dumps(api.objects[name]).encode())
            return self._reply(404, status(404, "NotFound"))

    do_POST = do_PATCH = _any


@pytest.fixture
def apiserver(tmp_path):
    cluster = pki.CA(tmp_path, "cluster")
    serving = cluster.issue("apiserver", "apiserver", server=True, ips=("127.0.0.1",))
    client = cluster.issue("harness", "harness", org="system:masters", client=True)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(serving.cert), str(serving.key))
    ctx.load_verify_locations(cafile=str(cluster.cert_path))
    ctx.verify_mode = ssl.CERT_REQUIRED
    server = FakeApiserver(free_port(), ctx)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.kubeconfig = tmp_path / "admin.kubeconfig"
    server.kubeconfig.write_text(kubeconfig(f"https://127.0.0.1:{server.server_address[1]}", cluster.pem, client))
    yield server
    server.shutdown()
    server.server_close()


def test_publish_writes_every_node_through_a_moment_of_not_found(apiserver):
    apiserver.missing = 5  # the CRD just Established: its resource is not served yet
    apiserver.objects["node2"] = {**objects.node_status_body("node2"), "status": {"stale": True}}  # already there
    statuses = {f"node{i}": simulated_status() for i in range(1, 41)}
    inventory.publish(apiserver.kubeconfig, statuses)
    assert set(apiserver.objects) == set(statuses)
    for node, obj in apiserver.objects.items():
        assert {k: v for k, v in obj.items() if k != "status"} == objects.node_status_body(node)
        assert obj["status"] == statuses[node]
    assert apiserver.missing == 0
    assert ("PATCH", paths.gpu_node_status_status("node2")) in apiserver.requests


def test_publish_gives_up_on_not_found_after_the_timeout(apiserver):
    apiserver.missing = 10**9
    with pytest.raises(NotFound):
        inventory.publish(str(apiserver.kubeconfig), {"node1": simulated_status()}, timeout=1)


def test_publish_raises_any_other_refusal_at_once(apiserver):
    apiserver.forbidden = {"node3"}
    with pytest.raises(Forbidden):
        inventory.publish(apiserver.kubeconfig, {f"node{i}": simulated_status() for i in range(1, 6)}, timeout=60)
    assert sum(r == ("POST", paths.NODE_STATUSES) for r in apiserver.requests) <= 5  # node3 was not retried
