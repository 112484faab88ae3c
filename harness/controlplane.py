"""etcd + kube-apiserver + kube-controller-manager + kwok on loopback, with fake Ready nodes.

The binaries come from hack/toolchain.py's cache (built from the Go module proxy at the versions in
versions.yml), the Kubernetes ones at the supported minor $GPU_TESTBED_KUBERNETES chooses (newest, the default, or
oldest). Everything is written below one working folder that the caller owns.
"""

from __future__ import annotations

import base64
import datetime
import json
import pathlib
import ssl
import threading
import time
from typing import Any

from gpu_scheduling import constants
from gpu_scheduling.agent.inventory import simulated_status
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.sync import SyncClient
from hack import toolchain
from harness import pki
from harness.processes import Process, free_port
from harness.wait import wait_for

KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_LEAVE_ALONE: dict[str, str] = {"kwok.x-k8s.io/status": "custom"}
"""A pod with this annotation is left alone by kwok (its status, and its finalizers on deletion): a test that must
see a pod stay terminating gives it this and a finalizer of its own."""
SIMULATED_GPUS: int = simulated_status()["total"]
"""GPUs of a node with the simulated inventory (gpu_scheduling.agent.inventory), what a fake node advertises."""
# Every pods/binding request, every write of a Lease in the project's namespace (GPU Leases and the leader Lease),
# and every write of what the scheduler reports (a pod's status, an Event, a GpuClaim's status), each with its
# response code and user agent: the scenarios prove "bound exactly once", "only the leader binds", what happened to
# the Leases and what a backlog of waiting pods costs from the apiserver's own record.
AUDIT_LOG_MAX_MB = 1_000_000
"""The audit log's size before the apiserver would rotate it (MB): never, in practice."""
AUDIT_POLICY = f"""apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  resources:
  - group: ""
    resources: ["pods/binding"]
- level: Metadata
  namespaces: ["{constants.LEASE_NAMESPACE}"]
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
  resources:
  - group: "coordination.k8s.io"
    resources: ["leases"]
- level: Metadata
  verbs: ["create", "update", "patch"]
  resources:
  - group: ""
    resources: ["pods/status", "events"]
  - group: "{constants.CLAIM_GROUP}"
    resources: ["{constants.GPU_CLAIM_PLURAL}/status"]
- level: None
"""


def _audit_time(stamp: str | None) -> float:
    """An audit event's MicroTime (`2026-01-02T03:04:05.123456Z`) as seconds since the epoch (0 when absent)."""
    if not stamp:
        return 0.0
    return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.UTC).timestamp()


def default_service_account(namespace: str) -> str:
    """The path of the namespace's `default` ServiceAccount, which the controller manager makes."""
    return paths.service_account(namespace, "default")


def create_namespace(api: SyncClient, name: str, timeout: float = 60, labels: dict[str, str] | None = None) -> None:
    """Create the namespace `name` (if missing; with `labels`) and wait for its default ServiceAccount: pods are
    refused until it exists."""
    metadata: dict[str, Any] = {"name": name, **({"labels": labels} if labels else {})}
    api.create(paths.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}, exist_ok=True)
    wait_for(f"ServiceAccount default in {name}", lambda: api.get(default_service_account(name)), timeout=timeout)


def kubeconfig(server: str, ca: bytes, cert: pki.Pair, user: str = "admin") -> str:
    b64 = lambda data: base64.b64encode(data).decode()  # noqa: E731
    return f"""apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: {server}
    certificate-authority-data: {b64(ca)}
users:
- name: {user}
  user:
    client-certificate-data: {b64(cert.cert.read_bytes())}
    client-key-data: {b64(cert.key.read_bytes())}
contexts:
- name: test
  context: {{cluster: test, user: {user}}}
current-context: test
"""


def node_body(name: str, gpus: int = SIMULATED_GPUS, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A kwok-managed fake node advertising `gpus` nvidia.com/gpu (by default those of the simulated inventory)."""
    resources = {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "type": "kwok", **(labels or {})},
        },
        "status": {"allocatable": dict(resources), "capacity": dict(resources)},
    }


def node_ready(node: dict[str, Any]) -> bool:
    """Whether the node is Ready and no longer carries the not-ready taint (pods can be bound to it)."""
    conditions = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions") or []}
    tainted = any(t.get("key") == "node.kubernetes.io/not-ready" for t in node["spec"].get("taints") or [])
    return conditions.get("Ready") == "True" and not tainted


def minor(kubernetes: str) -> int:
    """The minor of a Kubernetes release: v1.37.2 -> 37."""
    return int(kubernetes.lstrip("v").split(".")[1])


WORKLOAD_API_GATES = "GenericWorkload=true,TopologyAwareWorkloadScheduling=true"
"""Kubernetes' gang API (KEP-4671): GenericWorkload serves PodGroups and pods' spec.schedulingGroup and turns on
kube-scheduler's gang plugins and the controller manager's PodGroup protection; TopologyAwareWorkloadScheduling
keeps a PodGroup's topology constraint (alpha). Both off by default in 1.37."""


def workload_api_flags(kubernetes: str) -> dict[str, list[str]]:
    """The flags per program that serve and honour Kubernetes' gang API where the minor has it as beta (1.37 on):
    the planes run with it on, as a cluster using native gangs does. Older minors run with their defaults."""
    if minor(kubernetes) < 37:
        return {}
    gates = f"--feature-gates={WORKLOAD_API_GATES}"
    return {
        "kube-apiserver": [gates, f"--runtime-config={constants.POD_GROUP_API_VERSION}=true"],
        "kube-controller-manager": [gates],
        "kube-scheduler": [gates],
    }


class ControlPlane:
    """`extra_args` adds flags per program ("kube-apiserver", "kube-controller-manager", "kwok"); a flag given
    again there overrides the default (the last occurrence wins). The benchmark tunes the plane this way."""

    def __init__(
        self, workdir: pathlib.Path, *, audit_policy: str = AUDIT_POLICY, extra_args: dict[str, list[str]] | None = None
    ):
        self.dir = workdir
        self.audit_policy = audit_policy
        self.extra_args = extra_args or {}
        self.logs = workdir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.pki_dir = workdir / "pki"
        self.pki_dir.mkdir(exist_ok=True)
        self.kubernetes = toolchain.at_kubernetes(toolchain.read_versions())["kubernetes_version"]
        self.workload_flags = workload_api_flags(self.kubernetes)
        # Each program is looked up now, so that a missing one fails here, naming the command that builds it.
        self.bin = {b: toolchain.binary(b) for b in ("etcd", "kube-apiserver", "kube-controller-manager", "kwok")}
        self.processes: dict[str, Process] = {}
        self.ca = pki.CA(self.pki_dir, "kubernetes")
        self.kubeconfig = workdir / "admin.kubeconfig"
        self.api: SyncClient | None = None

    # ---- lifecycle -------------------------------------------------------------------------------------------
    def start(self) -> ControlPlane:
        started = time.monotonic()
        etcd_port, etcd_peer, api_port = free_port(), free_port(), free_port()
        self.server = f"https://127.0.0.1:{api_port}"
        serving = self.ca.issue(
            "apiserver",
            "kube-apiserver",
            server=True,
            dns=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
            ips=("127.0.0.1", "10.96.0.1"),
        )
        admin = self.admin = self.ca.issue("admin", "admin", org="system:masters", client=True)
        sa = pki.service_account_keys(self.pki_dir)
        self.kubeconfig.write_text(kubeconfig(self.server, self.ca.pem, admin))

        self._run(
            "etcd",
            [
                str(self.bin["etcd"]),
                "--data-dir",
                str(self.dir / "etcd"),
                "--name",
                "test",
                "--listen-client-urls",
                f"http://127.0.0.1:{etcd_port}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{etcd_port}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{etcd_peer}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{etcd_peer}",
                "--initial-cluster",
                f"test=http://127.0.0.1:{etcd_peer}",
                "--unsafe-no-fsync",
                "--log-level",
                "warn",
            ],
        ).wait_http(f"http://127.0.0.1:{etcd_port}/health")

        # Audit every pods/binding request: the scenarios count binds per pod from this log, the apiserver's own
        # record, to prove that no pod is ever bound twice.
        self.audit_log = self.logs / "audit.jsonl"
        self._audit_read = 0  # bytes of the audit log parsed into _audited
        self._audited: list[dict[str, Any]] = []
        self._audit_lock = threading.Lock()
        policy = self.dir / "audit-policy.yaml"
        policy.write_text(self.audit_policy)
        ctx = ssl.create_default_context(cafile=str(self.ca.cert_path))
        ctx.load_cert_chain(str(admin.cert), str(admin.key))
        self._run(
            "kube-apiserver",
            [
                str(self.bin["kube-apiserver"]),
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                "--bind-address=127.0.0.1",
                f"--secure-port={api_port}",
                "--advertise-address=127.0.0.1",
                f"--tls-cert-file={serving.cert}",
                f"--tls-private-key-file={serving.key}",
                f"--client-ca-file={self.ca.cert_path}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={sa.cert}",
                f"--service-account-signing-key-file={sa.key}",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--authorization-mode=Node,RBAC",
                "--endpoint-reconciler-type=none",
                f"--audit-policy-file={policy}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json",
                "--audit-log-mode=blocking",
                # The log is read as one growing file (its readers keep their offset): no rotation, which by default
                # starts a new file at 100 MB (a 20,000-pod benchmark run at 4000 nodes passed that, and its reader
                # saw no bind after it).
                f"--audit-log-maxsize={AUDIT_LOG_MAX_MB}",
                f"--cert-dir={self.pki_dir}",
                "--profiling=false",
                *self.workload_flags.get("kube-apiserver", []),
            ],
        ).wait_http(f"{self.server}/readyz", timeout=120, context=ctx)
        self.api = SyncClient(str(self.kubeconfig))

        self._run(
            "kube-controller-manager",
            [
                str(self.bin["kube-controller-manager"]),
                f"--kubeconfig={self.kubeconfig}",
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
                # nodelifecycle lifts the not-ready taint that admission puts on every new node, as in a real cluster;
                # job creates the pods of the Indexed Jobs the workload scenarios place (features/placement);
                # persistentvolume-binder binds a claim to the volume a scheduler reserved or had provisioned,
                # ephemeral-volume makes a pod's ephemeral claims, and the two protection controllers lift the
                # finalizers the apiserver puts on claims and volumes, so that they (and a namespace holding
                # them) can be deleted (features/volumes); disruption keeps the PodDisruptionBudgets' status, which
                # preemption reads (features/preemption); where the gang API is served, podgroup-protection lifts the
                # finalizer the apiserver puts on PodGroups (features/gangs).
                (
                    "--controllers=serviceaccount,serviceaccount-token,statefulset,job,namespace,garbagecollector,"
                    "nodelifecycle,persistentvolume-binder,ephemeral-volume,pvc-protection,pv-protection,disruption"
                    + (",podgroup-protection-controller" if self.workload_flags else "")
                ),
                f"--service-account-private-key-file={sa.key}",
                f"--root-ca-file={self.ca.cert_path}",
                "--leader-elect=false",
                "--use-service-account-credentials=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                f"--cert-dir={self.pki_dir}",
                *self.workload_flags.get("kube-controller-manager", []),
            ],
        )
        self._run(
            "kwok",
            [
                str(self.bin["kwok"]),
                f"--kubeconfig={self.kubeconfig}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
                "--disregard-status-with-annotation-selector="
                + ",".join(f"{k}={v}" for k, v in KWOK_LEAVE_ALONE.items()),
                "--cidr=10.0.0.1/16",
                "--node-ip=10.0.0.1",
                "--node-lease-duration-seconds=40",
                f"--server-address=127.0.0.1:{free_port()}",
            ],
        )
        api = self.api
        wait_for(
            "the default ServiceAccount (controller manager up)",
            lambda: api.get(default_service_account("default")),
            timeout=90,
        )
        self.elapsed = time.monotonic() - started
        return self

    def _run(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Process:
        proc = Process(name, argv + self.extra_args.get(name, []), self.logs, env).start()
        self.processes[name] = proc
        return proc

    def stop(self) -> None:
        for proc in reversed(list(self.processes.values())):
            proc.stop()

    def check_alive(self) -> None:
        dead = [p for p in self.processes.values() if p.proc is not None and not p.running]
        if dead:
            raise RuntimeError("; ".join(f"{p.name} exited ({p.proc.returncode}):\n{p.tail()}" for p in dead))

    def _audit_events(self) -> list[dict[str, Any]]:
        """The completed requests of the audit log so far. Only what was appended since the last call is parsed:
        a scenario polls the log every few seconds, and parsing the whole of it (megabytes after a backlog) each
        time took the CPU from this process's fault proxy, the schedulers' path to the apiserver."""
        with self._audit_lock:
            try:
                with self.audit_log.open("rb") as f:
                    f.seek(self._audit_read)
                    chunk = f.read()
            except FileNotFoundError:
                return []
            complete = chunk.rfind(b"\n") + 1  # a line still being written is read next time
            for line in chunk[:complete].splitlines():
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if event.get("stage") == "ResponseComplete":
                    self._audited.append(event)
            self._audit_read += complete
            return list(self._audited)

    @staticmethod
    def _audit_entry(event: dict[str, Any]) -> dict[str, Any]:
        ref = event.get("objectRef") or {}
        return {
            "namespace": ref.get("namespace"),
            "name": ref.get("name"),
            "code": (event.get("responseStatus") or {}).get("code"),
            "userAgent": event.get("userAgent", ""),
            "verb": event.get("verb"),
            "resource": ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else ""),
            "received": _audit_time(event.get("requestReceivedTimestamp")),
        }

    def bindings(self) -> list[dict[str, Any]]:
        """Every binding request the apiserver completed: namespace, pod name, response code, the client's user
        agent, and when the request was received (seconds since the epoch)."""
        return [
            self._audit_entry(e)
            for e in self._audit_events()
            if (e.get("objectRef") or {}).get("subresource") == "binding"
        ]

    def lease_writes(self) -> list[dict[str, Any]]:
        """Every write of a Lease in LEASE_NAMESPACE the apiserver completed, as `bindings()` has them, with `verb`
        (create, update, patch, delete, deletecollection)."""
        return [
            self._audit_entry(e) for e in self._audit_events() if (e.get("objectRef") or {}).get("resource") == "leases"
        ]

    def writes(self) -> list[dict[str, Any]]:
        """Every write the audit policy records (bindings, Leases, pod statuses, Events, GpuClaim statuses), as
        `bindings()` has them, with `verb` and `resource` ("pods/status", "events", "leases", ...)."""
        return [self._audit_entry(e) for e in self._audit_events()]

    # ---- nodes -----------------------------------------------------------------------------------------------
    def add_node(self, name: str, gpus: int = SIMULATED_GPUS, labels: dict[str, str] | None = None) -> dict[str, Any]:
        """Create a kwok-managed fake node; kwok keeps it Ready and runs the pods bound to it."""
        assert self.api is not None
        body = node_body(name, gpus, labels)
        self.api.create(paths.NODES, body, exist_ok=True)
        api = self.api

        def ready_node() -> dict[str, Any] | None:
            node = api.get(paths.node(name))
            return node if node_ready(node) else None

        return wait_for(f"node {name} Ready", ready_node, timeout=60)
