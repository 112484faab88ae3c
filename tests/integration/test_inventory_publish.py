"""The GpuNodeStatus writers.

harness.inventory.publish, the one writer of the tests and the benchmark, against a small local HTTPS server that
answers as the apiserver does (not Kubernetes): the resource unknown for a moment after its CRD is Established
(404), objects that exist already (409 AlreadyExists), and refusals.

The real gpu-inventory-agent process against a real kube-apiserver and etcd (harness.controlplane): it writes the
memory and utilization its node's annotation declares, and its health server's /readyz and /metrics say how its
syncs go."""

from __future__ import annotations

import http.server
import json
import pathlib
import socket
import ssl
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpu_scheduling import constants
from gpu_scheduling.agent.inventory import simulated_status
from gpu_scheduling.claims import objects
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import Forbidden, NotFound
from harness import inventory, pki
from harness.components import install_crds
from harness.controlplane import ControlPlane, kubeconfig, node_body
from harness.processes import Process, free_port
from harness.wait import wait_for

SCRIPTS = pathlib.Path(sys.executable).parent  # console scripts of the installed package


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


# ---- the real agent against the real apiserver ------------------------------------------------------------------


@pytest.fixture(scope="module")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """etcd and kube-apiserver (with the controller manager and kwok that harness.controlplane starts beside them),
    without the project's CRDs: the test installs them while the agent runs."""
    cp = ControlPlane(tmp_path_factory.mktemp("controlplane"))
    try:
        yield cp.start()
    finally:
        cp.stop()


def http_get(url: str, accept: str | None = None) -> tuple[int, str, str]:
    """Status, Content-Type and body of a GET (an HTTP error status is an answer too)."""
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read().decode()


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """/metrics as series (name, sorted labels) -> value."""
    status, _, body = http_get(url)
    assert status == 200, body
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }


def per_gpu(series: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str) -> dict[str, float]:
    return {dict(labels)["gpu"]: value for (n, labels), value in series.items() if n == name}


DECLARED = "count=4,islands=2,bandwidth=600/64,unhealthy=3,memory=40960/81920,used=1024/2048/0,utilization=10/55/90"


def test_the_agent_writes_memory_and_utilization_and_serves_its_health_and_metrics(control_plane, tmp_path):
    cp = control_plane
    api = cp.api
    assert api is not None
    node = "gpu-node-1"
    body = node_body(node)
    body["metadata"]["annotations"][constants.SIMULATED_ANNOTATION] = DECLARED
    api.create(paths.NODES, body)
    port = free_port()
    agent = Process(
        "gpu-inventory-agent",
        [
            str(SCRIPTS / "gpu-inventory-agent"),
            f"--kubeconfig={cp.kubeconfig}",
            f"--node-name={node}",
            "--source=simulated",
            "--interval=0.5",
            "--health-host=127.0.0.1",
            f"--health-port={port}",
        ],
        tmp_path,
    ).start()
    base = f"http://127.0.0.1:{port}"
    node_label = ("node", node)
    try:
        # No CRD yet: every sync fails (the resource is not served), the agent lives on, unready, counting them.
        agent.wait_http(f"{base}/healthz")
        errors = ("gpu_inventory_agent_syncs_total", (("result", "error"),))
        wait_for("a failed sync counted", lambda: scrape(f"{base}/metrics").get(errors, 0) >= 1)
        assert http_get(f"{base}/readyz")[0] == 503
        first = scrape(f"{base}/metrics")
        assert first[("gpu_inventory_agent_syncs_total", (("result", "ok"),))] == 0
        assert not per_gpu(first, "gpu_inventory_agent_gpu_memory_total_bytes")

        install_crds(cp.api)
        agent.wait_http(f"{base}/readyz", timeout=60)
        written = api.get(paths.gpu_node_status(node))["status"]
        assert [
            (d["id"], d["health"], d["memoryTotalMiB"], d["memoryUsedMiB"], d["utilizationPercent"])
            for d in written["devices"]
        ] == [
            (0, "Healthy", 40960, 1024, 10),
            (1, "Healthy", 81920, 2048, 55),
            (2, "Healthy", 81920, 0, 90),
            (3, "Unhealthy", 81920, 0, 0),
        ]

        series = scrape(f"{base}/metrics")
        assert series[("gpu_inventory_agent_syncs_total", (("result", "ok"),))] >= 1
        assert series[("gpu_inventory_agent_last_sync_timestamp_seconds", ())] > 0
        assert series[("gpu_inventory_agent_sync_duration_seconds_count", ())] >= 2
        assert series[("gpu_inventory_agent_info", (node_label, ("source", "simulated")))] == 1
        assert {
            state: series[("gpu_inventory_agent_gpus", (node_label, ("state", state)))]
            for state in ("healthy", "unhealthy", "in_use")
        } == {"healthy": 3, "unhealthy": 1, "in_use": 0}
        mib = 1024 * 1024
        assert per_gpu(series, "gpu_inventory_agent_gpu_memory_total_bytes") == {
            "0": 40960 * mib,
            "1": 81920 * mib,
            "2": 81920 * mib,
            "3": 81920 * mib,
        }
        assert per_gpu(series, "gpu_inventory_agent_gpu_memory_used_bytes") == {
            "0": 1024 * mib,
            "1": 2048 * mib,
            "2": 0,
            "3": 0,
        }
        assert per_gpu(series, "gpu_inventory_agent_gpu_utilization_ratio") == {"0": 0.1, "1": 0.55, "2": 0.9, "3": 0}
        status, content_type, text = http_get(f"{base}/metrics", accept="application/openmetrics-text; version=1.0.0")
        assert status == 200 and content_type.startswith("application/openmetrics-text"), content_type
        assert text.rstrip().endswith("# EOF")

        # The node shrinks to two GPUs: the status and /metrics follow, GPUs 2 and 3 lose their series.
        api.patch(paths.node(node), {"metadata": {"annotations": {constants.SIMULATED_ANNOTATION: "count=2"}}})
        wait_for(
            "GPUs 2 and 3 gone from /metrics",
            lambda: (
                per_gpu(scrape(f"{base}/metrics"), "gpu_inventory_agent_gpu_memory_total_bytes")
                == {"0": 81920 * mib, "1": 81920 * mib}
            ),
        )
        assert len(api.get(paths.gpu_node_status(node))["status"]["devices"]) == 2
        series = scrape(f"{base}/metrics")
        assert set(per_gpu(series, "gpu_inventory_agent_gpu_utilization_ratio")) == {"0", "1"}
        assert set(per_gpu(series, "gpu_inventory_agent_gpu_memory_used_bytes")) == {"0", "1"}
    finally:
        agent.stop()
    assert agent.proc is not None and agent.proc.returncode == 0, agent.tail()
