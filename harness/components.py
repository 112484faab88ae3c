"""The project's own programs (gpu-webhook, gpu-scheduler) run as real processes against the test control plane,
and the MutatingWebhookConfiguration that points the apiserver at the webhook by URL (the test-bed's own, rendered
by harness.manifests).

Every gpu-scheduler started here gets short leader-election timings (LEADER_ELECTION) and an identity of its
own; a second one can be started beside the first, and the leader read from the leader Lease. With
`fault_proxy=True` the schedulers talk to the apiserver through a FaultProxy (harness/faultproxy.py) that
the scenarios use to inject API faults; the webhook is always called by the apiserver directly.
"""

from __future__ import annotations

import base64
import dataclasses
import pathlib
import signal
import ssl
import subprocess
import sys
import threading
import time
from typing import Any

from gpu_scheduling import constants
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import NotFound
from gpu_scheduling.kube.leaderelection import ElectionConfig
from gpu_scheduling.kube.sync import SyncClient
from hack import toolchain
from harness import manifests, pki
from harness.controlplane import ControlPlane
from harness.faultproxy import FaultProxy
from harness.processes import Process, free_port
from harness.wait import wait_for
from harness.watch import exited_by_itself

SCRIPTS = pathlib.Path(sys.executable).parent  # console scripts of the installed package


@dataclasses.dataclass(frozen=True)
class LeaderElection:
    """Leader-election timings (seconds) the harness gives every gpu-scheduler (and the benchmark's kube-scheduler)."""

    lease_duration: float
    renew_deadline: float
    retry_period: float

    @classmethod
    def program_defaults(cls) -> LeaderElection:
        """gpu-scheduler's own defaults, which are kube-scheduler's and the chart's (15/10/2 s)."""
        config = ElectionConfig(namespace="-", name="-", identity="-")
        return cls(config.lease_duration, config.renew_deadline, config.retry_period)

    def flags(self) -> list[str]:
        return [
            f"--leader-elect-lease-duration={self.lease_duration:g}",
            f"--leader-elect-renew-deadline={self.renew_deadline:g}",
            f"--leader-elect-retry-period={self.retry_period:g}",
        ]


LEADER_ELECTION = LeaderElection.program_defaults()
"""The timings of the deployed program. The scenarios ran shorter ones (8/6/1 s) until a loaded 2-core machine (two
busy loops beside the control-plane tier, and more) stalled a leader's renewals for over 6 s while it worked through
a burst (a backlog of 2000 pods deleted at once, the restarts of a rollout): its GIL-bound threads each got a sliver
of a core, and it lost its Lease as it should have. A handover still fits in a scenario (the lease duration plus the
retry period), and the scenarios that time one read these values."""

UNSCHEDULABLE_FLUSH = 5.0
"""Seconds between the periodic retries of waiting pods (gpu-scheduler --unschedulable-flush; 5 minutes by
default): short, so that a scenario's quiet window spans several of them and a flush that retries pods nothing
helped shows up as writes."""


def start_kube_scheduler(
    cp: ControlPlane,
    workdir: pathlib.Path,
    *,
    kubeconfig: pathlib.Path | str,
    scheduler_name: str,
    qps: int,
    burst: int,
    leader_election: LeaderElection | None,
    verbosity: int = 0,
) -> Process:
    """The upstream kube-scheduler of the plane's Kubernetes version (toolchain.binary) with the plane's gates, one
    default profile for `scheduler_name`, signed in with `kubeconfig`; with `leader_election` its timings, else alone;
    logging at `verbosity` (klog's -v). Started and waited for until ready (its /readyz includes the informers' sync).
    The benchmark's contender and the fit differential test both run it."""
    if leader_election is None:
        election = "  leaderElect: false"
    else:
        election = f"""  leaderElect: true
  leaseDuration: {leader_election.lease_duration:g}s
  renewDeadline: {leader_election.renew_deadline:g}s
  retryPeriod: {leader_election.retry_period:g}s"""
    config = workdir / "kube-scheduler.yaml"
    config.write_text(f"""apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: {kubeconfig}
  qps: {qps}
  burst: {burst}
leaderElection:
{election}
profiles:
- schedulerName: {scheduler_name}
""")
    port = free_port()
    proc = Process(
        "kube-scheduler",
        [
            str(toolchain.binary("kube-scheduler")),
            f"--config={config}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--authentication-kubeconfig={cp.kubeconfig}",
            f"--authorization-kubeconfig={cp.kubeconfig}",
            f"--cert-dir={workdir / 'kube-scheduler-certs'}",
            f"--v={verbosity}",
            *cp.workload_flags.get("kube-scheduler", []),
        ],
        cp.logs,
    ).start()
    # Its serving certificate is self-signed: not verified.
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE
    proc.wait_http(f"https://127.0.0.1:{port}/readyz", timeout=60, context=insecure)
    return proc


class SchedulerProcess(Process):
    """One gpu-scheduler with its own health port and log file. With leader election, each start is a new
    candidate with a new identity (`<identity>`, then `<identity>-2`, ...), as a restarted container would be:
    `identity` is the one of the current (or last) run, and the user agent of its requests is
    `<scheduler name>/<identity>`."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        log_dir: pathlib.Path,
        *,
        base_identity: str,
        health_port: int,
        leader_election: bool,
        restart_on_failure: bool = False,
    ):
        super().__init__(name, argv, log_dir)
        self.base_identity = base_identity
        self.health_port = health_port
        self.leader_election = leader_election
        self.starts = 0
        self.identity = base_identity
        self.restart_on_failure = restart_on_failure
        self._lock = threading.RLock()
        self._stopped = True

    def start(self) -> SchedulerProcess:
        with self._lock:
            self._stopped = False
            self._start()
        if self.restart_on_failure:
            threading.Thread(
                target=self._supervise, args=(self.proc,), name=f"supervise-{self.name}", daemon=True
            ).start()
        return self

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10) -> None:
        with self._lock:
            self._stopped = True
        super().stop(sig, timeout)

    def retire(self) -> None:
        """Stop it for good, as `stop` does, except that a run that had already ended by itself stays one that
        the test did not stop, for harness/watch.py to find (`exited_by_itself`)."""
        with self._lock:
            self._stopped = True  # the supervisor starts it no more
            ended = exited_by_itself(self)
        if not ended:
            self.stop()

    def _supervise(self, proc: subprocess.Popen[bytes] | None) -> None:
        """The kubelet's `restartPolicy: Always` for a scheduler that exits by itself (a leader that lost its
        Lease exits 1 to come back as a follower): start it again, as a new candidate, after a second. A process
        the test stops or kills stays down until the test starts it."""
        assert proc is not None
        while proc.wait() != 0:
            time.sleep(1.0)
            with self._lock:
                if self._stopped or self.proc is not proc:
                    return
                self.restarts += 1
                self._start()
                proc = self.proc
                assert proc is not None

    def _start(self) -> None:
        self.starts += 1
        if self.leader_election:
            self.identity = self.base_identity if self.starts == 1 else f"{self.base_identity}-{self.starts}"
            # argv stays a plain list that callers (the benchmark) may rewrite; only the identity is ours.
            self.argv = [a for a in self.argv if not a.startswith("--leader-elect-identity=")]
            self.argv.append(f"--leader-elect-identity={self.identity}")
        super().start()

    def wait_ready(self, timeout: float = 60) -> None:
        # A follower is ready too: it keeps its caches warm while it waits for the lease.
        self.wait_http(f"http://127.0.0.1:{self.health_port}/readyz", timeout=timeout)


class AgentProcess(Process):
    """One gpu-inventory-agent for one node, with its health server (/healthz, /readyz, /metrics) on
    `health_port`."""

    def __init__(self, name: str, argv: list[str], log_dir: pathlib.Path, *, node: str, health_port: int):
        super().__init__(name, argv, log_dir)
        self.node = node
        self.health_port = health_port

    def wait_ready(self, timeout: float = 60) -> None:
        # Ready once its first sync has written the node's GpuNodeStatus.
        self.wait_http(f"http://127.0.0.1:{self.health_port}/readyz", timeout=timeout)


def install_crds(api: SyncClient) -> None:
    """The chart's crds/ (what Helm installs on the test-bed), applied and waited for until each is Established."""
    for crd in manifests.crds():
        api.apply_or_replace(paths.CRDS, crd)
        name = crd["metadata"]["name"]
        wait_for(
            f"CRD {name} Established",
            lambda n=name: any(
                c["type"] == "Established" and c["status"] == "True"
                for c in api.get(f"{paths.CRDS}/{n}").get("status", {}).get("conditions") or []
            ),
        )


class Components:
    """`fault_proxy`: route the schedulers through a FaultProxy (`self.proxy`), for the fault scenarios; off for
    the benchmark, which must measure the direct path. `restart_on_failure`: a scheduler that exits by itself is
    started again, as the kubelet would (the scenarios); off for the benchmark, where such an exit fails the run.
    `leader_election`: the timings every scheduler gets, or None for `--no-leader-elect` (each scheduler then
    schedules at once, alone)."""

    def __init__(
        self,
        cp: ControlPlane,
        scheduler_name: str = constants.DEFAULT_SCHEDULER_NAME,
        *,
        fault_proxy: bool = False,
        leader_election: LeaderElection | None = LEADER_ELECTION,
        restart_on_failure: bool = False,
    ):
        self.cp = cp
        self.restart_on_failure = restart_on_failure
        self.scheduler_name = scheduler_name
        ca = pki.CA(cp.pki_dir, "webhook")
        self.webhook_ca = ca
        self.webhook_pair = ca.issue("webhook", "gpu-webhook", server=True, dns=("localhost",), ips=("127.0.0.1",))
        self.webhook_port = free_port()
        self.webhook = Process(
            "gpu-webhook",
            [
                str(SCRIPTS / "gpu-webhook"),
                "--host",
                "127.0.0.1",
                f"--port={self.webhook_port}",
                f"--tls-cert-file={self.webhook_pair.cert}",
                f"--tls-private-key-file={self.webhook_pair.key}",
            ],
            cp.logs,
        )
        self.proxy: FaultProxy | None = None
        if fault_proxy:
            self.proxy = FaultProxy(cp.kubeconfig, pki.CA(cp.pki_dir, "faultproxy"), cp.dir, client_ca=cp.ca.cert_path)
        self.scheduler_kubeconfig = self.proxy.kubeconfig if self.proxy else cp.kubeconfig
        self.leader_election = leader_election
        self.scheduler = self._scheduler_process("gpu-scheduler", "scheduler-a")
        self.extra_schedulers: list[SchedulerProcess] = []
        #: The extra schedulers stopped so far: kept, with their restart counts and logs, so that a test's
        #: watch (harness/watch.py) still reads them after the test's own teardown stopped them.
        self.retired_schedulers: list[SchedulerProcess] = []

    @property
    def health_port(self) -> int:
        return self.scheduler.health_port

    def _scheduler_process(self, log_name: str, identity: str) -> SchedulerProcess:
        health_port = free_port()
        argv = [
            str(SCRIPTS / "gpu-scheduler"),
            f"--kubeconfig={self.scheduler_kubeconfig}",
            f"--scheduler-name={self.scheduler_name}",
            "--health-host=127.0.0.1",
            f"--health-port={health_port}",
            f"--unschedulable-flush={UNSCHEDULABLE_FLUSH:g}",
        ]
        if self.leader_election is None:
            argv.append("--no-leader-elect")
        else:
            argv += [
                "--leader-elect",
                f"--leader-elect-resource-namespace={constants.LEASE_NAMESPACE}",
                f"--leader-elect-resource-name={self.scheduler_name}",
                *self.leader_election.flags(),
            ]
        return SchedulerProcess(
            log_name,
            argv,
            self.cp.logs,
            base_identity=identity,
            health_port=health_port,
            leader_election=self.leader_election is not None,
            restart_on_failure=self.restart_on_failure,
        )

    @property
    def webhook_url(self) -> str:
        return f"https://127.0.0.1:{self.webhook_port}/mutate"

    def start_webhook(self) -> None:
        self.webhook.start()
        ctx = ssl.create_default_context(cafile=str(self.webhook_ca.cert_path))
        self.webhook.wait_http(f"https://127.0.0.1:{self.webhook_port}/readyz", context=ctx)

    def start_scheduler(self) -> None:
        if self.proxy is not None:
            self.proxy.start()
        self.scheduler.start()
        self.scheduler.wait_ready()

    @property
    def programs(self) -> list[Process]:
        """The webhook and every scheduler, the extra ones stopped already included: what harness/watch.py counts
        restarts and exits of."""
        return [self.webhook, *self.schedulers, *self.retired_schedulers]

    # ---- more schedulers and the leader ----------------------------------------------------------------------
    @property
    def schedulers(self) -> list[SchedulerProcess]:
        return [self.scheduler, *self.extra_schedulers]

    def start_extra_scheduler(self, identity: str) -> SchedulerProcess:
        """Another gpu-scheduler for the same scheduler name (so the same leader Lease), through the same path
        (proxy or not), logging to logs/gpu-scheduler-<identity>.log."""
        if any(s.base_identity == identity for s in self.schedulers):
            raise ValueError(f"a scheduler with identity {identity!r} exists already")
        proc = self._scheduler_process(f"gpu-scheduler-{identity}", identity)
        self.extra_schedulers.append(proc)
        if self.proxy is not None:
            self.proxy.start()
        proc.start()
        proc.wait_ready()
        return proc

    def stop_extra_schedulers(self) -> None:
        """Stop every extra scheduler (one that had exited by itself stays so: SchedulerProcess.retire) and keep
        it among `programs`."""
        for proc in self.extra_schedulers:
            proc.retire()
        self.retired_schedulers += self.extra_schedulers
        self.extra_schedulers.clear()

    @property
    def leader_lease_path(self) -> str:
        return paths.lease(constants.LEASE_NAMESPACE, self.scheduler_name)

    def leader_lease(self) -> dict[str, Any] | None:
        """The leader Lease as the apiserver has it now (read directly, never through the proxy)."""
        assert self.cp.api is not None
        try:
            return self.cp.api.get(self.leader_lease_path)
        except NotFound:
            return None

    def leader(self) -> str:
        """The identity holding the leader Lease ("" when there is none or it was released)."""
        lease = self.leader_lease()
        return ((lease or {}).get("spec") or {}).get("holderIdentity") or ""

    def leader_process(self) -> SchedulerProcess | None:
        """The running scheduler whose current identity holds the leader Lease."""
        holder = self.leader()
        return next((s for s in self.schedulers if s.running and s.identity == holder), None)

    def wait_for_leader(self, timeout: float = 60, among: list[SchedulerProcess] | None = None) -> SchedulerProcess:
        """Until one of `among` (default: every running scheduler) holds the leader Lease; that one."""

        def holder() -> SchedulerProcess | None:
            proc = self.leader_process()
            return proc if proc is not None and (among is None or proc in among) else None

        return wait_for("a gpu-scheduler holding the leader Lease", holder, timeout=timeout, interval=0.1)

    def inventory_agent(self, node: str, *, interval: float = 1.0) -> AgentProcess:
        """A gpu-inventory-agent for the fake node `node` (the simulated inventory: kwok nodes have no NVML),
        writing its GpuNodeStatus every `interval` seconds and serving its health server on a free loopback port,
        logging to logs/gpu-inventory-agent-<node>.log. Not started: the caller starts and stops it (it rewrites
        the node's GpuNodeStatus while it runs)."""
        health_port = free_port()
        argv = [
            str(SCRIPTS / "gpu-inventory-agent"),
            f"--kubeconfig={self.cp.kubeconfig}",
            f"--node-name={node}",
            "--source=simulated",
            f"--interval={interval:g}",
            "--health-host=127.0.0.1",
            f"--health-port={health_port}",
        ]
        return AgentProcess(f"gpu-inventory-agent-{node}", argv, self.cp.logs, node=node, health_port=health_port)

    def register_webhook(self) -> None:
        assert self.cp.api is not None
        self.cp.api.apply_or_replace(
            paths.MUTATING_WEBHOOK_CONFIGURATIONS,
            manifests.webhook_configuration(
                url=self.webhook_url,
                service=None,
                ca_bundle_b64=base64.b64encode(self.webhook_ca.pem).decode(),
                scheduler_name=self.scheduler_name,
            ),
        )

    def install_crds(self) -> None:
        """The project's namespace and the chart's CRDs (what Helm installs on the test-bed)."""
        assert self.cp.api is not None
        api = self.cp.api
        # the project's namespace: GPU Leases and the leader-election Lease
        api.create(
            paths.NAMESPACES,
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": constants.LEASE_NAMESPACE}},
            exist_ok=True,
        )
        install_crds(api)

    def start(self) -> Components:
        try:
            self.install_crds()
            self.start_webhook()
            self.register_webhook()
            self.start_scheduler()
        except BaseException:
            self.stop()  # the caller never gets this object to stop: leave no process or proxy behind
            raise
        return self

    def stop(self) -> None:
        self.stop_extra_schedulers()
        self.scheduler.stop()
        self.webhook.stop()
        if self.proxy is not None:
            self.proxy.stop()
