"""The benchmark's control plane: the tests' real etcd + kube-apiserver + kube-controller-manager + kwok, tuned
for many fake nodes, plus what the benchmark needs around it (the load generator, process accounting, the
audit log that is the record of every create and bind).

Tuning, and why (each run gets a fresh plane, so no run inherits another's objects):
  - kwok renews node leases every 5 min (lease 1200 s) instead of every 10 s: with 1000 nodes the default is
    100 lease writes/s, a third of what this 2-core machine's apiserver can take. The controller manager's
    node-monitor grace period is raised to match, so nodes stay Ready.
  - kwok runs no pods (an empty pod stage): a contender is done when the pod is bound; pod status updates
    would only add the same load to every contender.
  - the audit log records pod creates and bindings at Metadata level, in batch mode (off the request path);
    its microsecond timestamps are the apiserver's own account of when each pod was created and bound.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gpu_scheduling import constants
from tests.harness.api import ApiError, wait_for
from tests.harness.controlplane import ControlPlane, node_body

from bench import workload

ROOT = pathlib.Path(__file__).resolve().parents[1]
LOADGEN_SRC = ROOT / "bench" / "loadgen"

AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["create"]
  resources:
  - group: ""
    resources: ["pods", "pods/binding"]
- level: None
"""

# A pod stage that matches no pod: kwok then leaves pods alone (without any pod stage it would load its defaults).
KWOK_STAGES = """apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: bench-pods-untouched
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchLabels:
      gpu-bench/kwok-runs-this-pod: "never"
  next:
    statusTemplate: |
      phase: Running
"""

NODE_LEASE_SECONDS = 1200


def build_loadgen(out_dir: pathlib.Path) -> pathlib.Path:
    """`go build` the load generator (standard library only, so offline and quick); rebuilt when its source
    changes."""
    out_dir.mkdir(parents=True, exist_ok=True)
    binary = out_dir / "loadgen"
    sources = sorted(LOADGEN_SRC.glob("*"))
    if binary.exists() and all(binary.stat().st_mtime >= s.stat().st_mtime for s in sources):
        return binary
    subprocess.run(["go", "build", "-trimpath", "-o", str(binary), "."], cwd=LOADGEN_SRC, check=True,
                   env=dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod"))
    return binary


class ProcessStats:
    """CPU seconds and peak RSS of a running process, from /proc."""

    TICK = os.sysconf("SC_CLK_TCK")

    def __init__(self, pid: int):
        self.pid = pid

    def cpu_seconds(self) -> float:
        fields = pathlib.Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / self.TICK  # utime + stime

    def peak_rss_mib(self) -> float:
        for line in pathlib.Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return 0.0


class BenchPlane:
    def __init__(self, workdir: pathlib.Path, loadgen: pathlib.Path):
        self.dir = workdir
        self.loadgen = loadgen
        stages = workdir / "kwok-stages.yaml"
        workdir.mkdir(parents=True, exist_ok=True)
        stages.write_text(KWOK_STAGES)
        self.cp = ControlPlane(workdir, audit_policy=AUDIT_POLICY, extra_args={
            "kube-apiserver": ["--audit-log-mode=batch", "--max-requests-inflight=800",
                               "--max-mutating-requests-inflight=400"],
            "kube-controller-manager": ["--node-monitor-grace-period=3600s", "--kube-api-qps=200",
                                        "--kube-api-burst=400"],
            "kwok": [f"--node-lease-duration-seconds={NODE_LEASE_SECONDS}", f"--config={stages}"],
        })

    def start(self) -> BenchPlane:
        self.cp.start()
        return self

    def stop(self) -> None:
        self.cp.stop()

    @property
    def api(self):  # noqa: ANN201 - the harness's synchronous Api
        assert self.cp.api is not None
        return self.cp.api

    def stats(self, name: str) -> ProcessStats:
        proc = self.cp.processes[name].proc
        assert proc is not None
        return ProcessStats(proc.pid)

    # ---- the load generator ----------------------------------------------------------------------------------
    def api_flags(self) -> list[str]:
        admin = self.cp.admin
        return [f"-server={self.cp.server}", f"-ca={self.cp.ca.cert_path}", f"-cert={admin.cert}",
                f"-key={admin.key}"]

    def create(self, objects: Iterable[dict[str, Any]], name: str, concurrency: int = 64,
               rate: float = 0) -> pathlib.Path:
        """Create `objects` through the load generator; returns its per-request timing CSV."""
        source = self.dir / f"{name}.jsonl"
        with source.open("w") as f:
            for obj in objects:
                f.write(json.dumps(obj, separators=(",", ":")) + "\n")
        out = self.dir / f"{name}-requests.csv"
        subprocess.run([str(self.loadgen), "create", *self.api_flags(), f"-in={source}",
                        f"-concurrency={concurrency}", f"-rate={rate}", f"-out={out}"], check=True)
        return out

    # ---- cluster contents ------------------------------------------------------------------------------------
    def add_nodes(self, count: int, timeout: float = 600) -> float:
        """Create `count` kwok nodes with 8 GPUs each and wait until all are Ready and untainted; returns the
        seconds that took."""
        started = time.monotonic()
        nodes = [node_body(workload.node_name(i), workload.GPUS_PER_NODE) for i in range(count)]
        self.create(nodes, "nodes", concurrency=32)

        def all_ready() -> bool:
            ready = 0
            for node in self.api.get("/api/v1/nodes")["items"]:
                conditions = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions") or []}
                tainted = any(t.get("key") == "node.kubernetes.io/not-ready" for t in node["spec"].get("taints") or [])
                ready += conditions.get("Ready") == "True" and not tainted
            return ready == count

        wait_for(f"{count} kwok nodes Ready and untainted", all_ready, timeout=timeout, interval=2)
        return time.monotonic() - started

    def add_inventory(self, count: int) -> None:
        """The simulated GpuNodeStatus of every node (what the inventory agent writes on real nodes)."""
        path = f"/apis/{constants.CLAIM_GROUP}/{constants.CLAIM_VERSION}/gpunodestatuses"
        status = workload.simulated_inventory()

        def write(i: int) -> None:
            node = workload.node_name(i)
            body = {"apiVersion": f"{constants.CLAIM_GROUP}/{constants.CLAIM_VERSION}", "kind": "GpuNodeStatus",
                    "metadata": {"name": node}, "spec": {"nodeName": node}}
            try:
                self.api.create(path, body)
            except ApiError as exc:
                if exc.status != 409:
                    raise
            self.api.patch(f"{path}/{node}/status", {"status": status})

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(write, range(count)))

    def namespace(self, name: str) -> None:
        """Create a namespace and wait for its default ServiceAccount (pods are refused until it exists)."""
        self.api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        wait_for(f"ServiceAccount default in {name}",
                 lambda: self.api.get(f"/api/v1/namespaces/{name}/serviceaccounts/default"), timeout=60)
