"""The benchmark's control plane: the tests' real etcd + kube-apiserver + kube-controller-manager + kwok, tuned
for many fake nodes, plus what the benchmark needs around it (the load generator, process accounting, the
audit log that is the record of every create and bind).

Tuning, and why (each run gets a fresh plane, so no run inherits another's objects):
  - kwok renews node leases every 30 min (a quarter of the lease, 7200 s) instead of every 10 s: with 1000 nodes
    the default is 100 lease writes/s, a third of what this 2-core machine's apiserver can take. The nodes are
    made at once, so they renew at once: at every 5 min (the lease of 1200 s this plane had before) a storm
    window held either none or all 1000 of them, which moved the apiserver's CPU in the window by 0.03 CPU-s/s
    from run to run whatever the scheduler did; at 30 min no run's window holds one. The controller manager's
    node-monitor grace period (1 h) is above the renewal period, so nodes stay Ready. kwok writes a node's status
    once, to make it Ready, and never again (its default heartbeat would rewrite every node's status every 20-45
    s).
  - kwok runs no pods (an empty pod stage): a contender is done when the pod is bound; pod status updates
    would only add the same load to every contender.
  - the audit log records every write request (create, update, patch, delete) at Metadata level, in batch mode
    (off the request path): its microsecond timestamps are the apiserver's own account of when each pod was
    created and bound, and its user names say who wrote what. Every contender's scheduler signs in as
    SCHEDULER_USER with its own client certificate, so its writes are told apart from the load generator's and
    the controllers' (reads are not recorded: they cost the same audit work for every contender and say nothing
    the CPU figures do not).
  - Dynamic Resource Allocation needs nothing: Kubernetes serves `resource.k8s.io/v1` (since 1.34) and enables the
    DynamicResourceAllocation feature gate by default (`check_dra` fails the run early if that ever changes).
  - Kubernetes' gang API (PodGroups, `scheduling.k8s.io/v1beta1`), which W3's kube-scheduler contender uses, is
    served from 1.37 on with the feature gates ControlPlane turns on there (harness.controlplane.workload_api_flags,
    which start_kube_scheduler passes to kube-scheduler too); `check_gang_api` fails such a run early without it.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import time
from collections.abc import Iterable
from typing import Any

from bench import workload
from gpu_scheduling import constants
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import ApiError
from gpu_scheduling.kube.sync import SyncClient
from harness import inventory
from harness.controlplane import ControlPlane, create_namespace, kubeconfig, node_body, node_ready
from harness.pki import Pair
from harness.wait import wait_for

ROOT = pathlib.Path(__file__).resolve().parents[1]
LOADGEN_SRC = ROOT / "bench" / "loadgen"

AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
"""

SCHEDULER_USER = "bench-scheduler"
"""The user every contender's scheduler (and the ceiling binder) signs in as: a client certificate of its own in
group system:masters, so its writes can be counted from the audit log."""

# kwok's stages. Pods: a stage that matches no pod, so kwok leaves pods alone (without any pod stage it would
# load its defaults). Nodes: one stage that makes a new node Ready, and nothing after it. Without node stages
# kwok loads its defaults, whose heartbeat rewrites every node's status every 20-45 s: 20-50 writes/s with 1000
# nodes, all through every run, which would bury what the pending storm measures. The node lease (renewed every
# 30 min, NODE_LEASE_SECONDS / 4) is what the node controller reads to keep a node Ready, as with real kubelets.
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
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: bench-node-ready-once
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: NotIn
      values: ["True"]
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      {{ range NodeConditions }}
      - type: {{ .type | Quote }}
        status: {{ .status | Quote }}
        reason: {{ .reason | Quote }}
        message: {{ .message | Quote }}
        lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $now | Quote }}
      {{ end }}
      addresses:
      - type: InternalIP
        address: {{ NodeIP | Quote }}
      {{ with .status.allocatable }}
      allocatable:
      {{ YAML . 1 }}
      {{ end }}
      {{ with .status.capacity }}
      capacity:
      {{ YAML . 1 }}
      {{ end }}
      phase: Running
"""

NODE_LEASE_SECONDS = 7200


def node_bodies(count: int, zones: int = workload.ZONES, label: str = workload.ZONE_LABEL) -> list[dict[str, Any]]:
    """kwok nodes node1..node<count> with GPUS_PER_NODE GPUs each, each labelled `label` with its zone
    (workload.zone: node i in zone i mod `zones`). The zone is read only by W4's spread constraint: the W1-W3 pods
    ask nothing of it (no spread constraint, affinity, gang topology or volume), and kube-scheduler applies its
    default spread constraints only to pods of a Service or a controller, which the benchmark's pods are not."""
    return [
        node_body(name, workload.GPUS_PER_NODE, labels={label: zone})
        for name, zone in workload.node_zones(count, zones).items()
    ]


def build_loadgen(out_dir: pathlib.Path) -> pathlib.Path:
    """`go build` the load generator (standard library only, so offline and quick); rebuilt when its source
    changes."""
    out_dir.mkdir(parents=True, exist_ok=True)
    binary = out_dir / "loadgen"
    sources = sorted(LOADGEN_SRC.glob("*"))
    if binary.exists() and all(binary.stat().st_mtime >= s.stat().st_mtime for s in sources):
        return binary
    subprocess.run(
        ["go", "build", "-trimpath", "-o", str(binary), "."],
        cwd=LOADGEN_SRC,
        check=True,
        env=dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod"),
    )
    return binary


class ProcessStats:
    """CPU seconds and peak RSS of a running process, from /proc. Once the process is gone, the last values read
    (a contender that exits mid-run is reported, not a crash of the benchmark)."""

    TICK = os.sysconf("SC_CLK_TCK")

    def __init__(self, pid: int):
        self.pid = pid
        self._cpu = 0.0
        self._rss = 0.0

    def cpu_seconds(self) -> float:
        try:
            fields = pathlib.Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            return self._cpu
        self._cpu = (int(fields[11]) + int(fields[12])) / self.TICK  # utime + stime
        return self._cpu

    def peak_rss_mib(self) -> float:
        try:
            lines = pathlib.Path(f"/proc/{self.pid}/status").read_text().splitlines()
        except FileNotFoundError:
            return self._rss
        for line in lines:
            if line.startswith("VmHWM:"):
                self._rss = int(line.split()[1]) / 1024
        return self._rss


class BenchPlane:
    def __init__(self, workdir: pathlib.Path, loadgen: pathlib.Path, profiling: bool = False):
        self.dir = workdir
        self.loadgen = loadgen
        stages = workdir / "kwok-stages.yaml"
        workdir.mkdir(parents=True, exist_ok=True)
        stages.write_text(KWOK_STAGES)
        self.cp = ControlPlane(
            workdir,
            audit_policy=AUDIT_POLICY,
            extra_args={
                "kube-apiserver": [
                    "--audit-log-mode=batch",
                    "--max-requests-inflight=800",
                    "--max-mutating-requests-inflight=400",
                    f"--profiling={str(profiling).lower()}",
                ],  # /debug/pprof for `--profile`
                "kube-controller-manager": [
                    "--node-monitor-grace-period=3600s",
                    "--kube-api-qps=200",
                    "--kube-api-burst=400",
                ],
                "kwok": [f"--node-lease-duration-seconds={NODE_LEASE_SECONDS}", f"--config={stages}"],
            },
        )
        self._identity: tuple[pathlib.Path, Pair] | None = None

    def start(self) -> BenchPlane:
        self.cp.start()
        return self

    def stop(self) -> None:
        self.cp.stop()

    @property
    def api(self) -> SyncClient:
        assert self.cp.api is not None
        return self.cp.api

    def stats(self, name: str) -> ProcessStats:
        proc = self.cp.processes[name].proc
        assert proc is not None
        return ProcessStats(proc.pid)

    def scheduler_identity(self) -> tuple[pathlib.Path, Pair]:
        """(kubeconfig, client certificate) of SCHEDULER_USER, made once per plane."""
        if self._identity is None:
            pair = self.cp.ca.issue(SCHEDULER_USER, SCHEDULER_USER, org="system:masters", client=True)
            path = self.dir / f"{SCHEDULER_USER}.kubeconfig"
            path.write_text(kubeconfig(self.cp.server, self.cp.ca.pem, pair, SCHEDULER_USER))
            self._identity = (path, pair)
        return self._identity

    # ---- the load generator ----------------------------------------------------------------------------------
    def api_flags(self, identity: Pair | None = None) -> list[str]:
        """Flags of `loadgen` to reach the apiserver, as the admin or as `identity`."""
        who = identity or self.cp.admin
        return [f"-server={self.cp.server}", f"-ca={self.cp.ca.cert_path}", f"-cert={who.cert}", f"-key={who.key}"]

    def create(
        self, objects: Iterable[dict[str, Any]], name: str, concurrency: int = 64, rate: float = 0
    ) -> pathlib.Path:
        """Create `objects` through the load generator, each in its collection (`workload.collection_path`);
        returns its per-request timing CSV."""
        source = self.dir / f"{name}.txt"
        with source.open("w") as f:
            for obj in objects:
                f.write(f"{workload.collection_path(obj)} {json.dumps(obj, separators=(',', ':'))}\n")
        out = self.dir / f"{name}-requests.csv"
        subprocess.run(
            [
                str(self.loadgen),
                "create",
                *self.api_flags(),
                f"-in={source}",
                f"-concurrency={concurrency}",
                f"-rate={rate}",
                f"-out={out}",
            ],
            check=True,
        )
        return out

    # ---- cluster contents ------------------------------------------------------------------------------------
    def add_nodes(self, count: int, timeout: float = 600) -> float:
        """Create `count` kwok nodes with GPUS_PER_NODE GPUs each, in workload.ZONES zones (`node_bodies`), and wait
        until all are Ready and untainted; returns the seconds that took."""
        started = time.monotonic()
        self.create(node_bodies(count), "nodes", concurrency=32)

        def all_ready() -> bool:
            return sum(map(node_ready, self.api.get(paths.NODES)["items"])) == count

        wait_for(f"{count} kwok nodes Ready and untainted", all_ready, timeout=timeout, interval=2)
        return time.monotonic() - started

    def add_inventory(self, api: workload.ClaimApi, count: int) -> None:
        """What a scheduler reading `api` needs to know of the GPUs of nodes 0..count-1, written here and only
        here for every contender: the simulated GpuNodeStatus, written by the inventory agent's own writer
        (harness.inventory), or the DeviceClass and one ResourceSlice per node (what a DRA driver publishes), the
        same devices. `extended` needs nothing: the nodes already advertise nvidia.com/gpu."""
        if api == workload.GPUCLAIM:
            inventory.publish(self.cp.kubeconfig, workload.gpuclaim_inventory(count))
        elif api == workload.DRA:
            self.check_dra()
            self.create(workload.dra_inventory(count), "dra-inventory", concurrency=32)

    def check_dra(self) -> None:
        """Fail early, saying why, when this apiserver does not serve the DRA API the benchmark uses."""
        try:
            resources = {r["name"] for r in self.api.get(workload.dra_path())["resources"]}
        except ApiError as exc:
            raise RuntimeError(
                f"the apiserver does not serve {workload.DRA_API} ({exc}); Dynamic Resource "
                "Allocation needs it (--runtime-config, feature gate DynamicResourceAllocation)",
            ) from None
        missing = {"deviceclasses", "resourceslices", "resourceclaims", "resourceclaims/status"} - resources
        if missing:
            raise RuntimeError(f"{workload.DRA_API} lacks {sorted(missing)}")

    def check_gang_api(self) -> None:
        """Fail early, saying why, when this apiserver does not serve PodGroups (Kubernetes' gang API)."""
        try:
            resources = {r["name"] for r in self.api.get(paths.POD_GROUP_API)["resources"]}
        except ApiError as exc:
            raise RuntimeError(
                f"the apiserver does not serve {constants.POD_GROUP_API_VERSION} ({exc}): kube-scheduler's gangs need "
                "Kubernetes 1.37 or newer with the GenericWorkload feature gate (harness.controlplane)"
            ) from None
        if "podgroups" not in resources:
            raise RuntimeError(f"{constants.POD_GROUP_API_VERSION} serves no podgroups: {sorted(resources)}")

    def namespace(self, name: str) -> None:
        """Create a namespace and wait for its default ServiceAccount (pods are refused until it exists)."""
        create_namespace(self.api, name)
