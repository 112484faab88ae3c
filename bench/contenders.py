"""The contenders, each started against a fresh BenchPlane with the same client settings:

  gpu-scheduler       this project's scheduler, with its webhook in the admission path (as deployed); GPUs are
                      asked for with GpuClaims;
  kube-scheduler      the upstream scheduler built from the same Kubernetes version, default profile; GPUs are
                      asked for as the extended resource nvidia.com/gpu; in W3 it is the native gang peer: the gangs
                      are PodGroups (`scheduling.k8s.io/v1beta1`, gang minCount) and its default profile at 1.37,
                      with the gates the plane passes (GenericWorkload, TopologyAwareWorkloadScheduling), includes
                      the GangScheduling plugin, so it holds a gang until it is whole and decides it in one
                      pod-group cycle (bench/gangproof.py proves it in every W3 run); in W4 it judges the same
                      spread constraint as gpu-scheduler (its PodTopologySpread plugin);
  kube-scheduler-dra  the same kube-scheduler, GPUs asked for with Dynamic Resource Allocation (ResourceClaims
                      against ResourceSlices): the native form of a claim, for W2 and the storm (its W1 and W4
                      would be kube-scheduler's);
  ceiling             `loadgen bind`: list+watch, read the node the benchmark named on the pod (the node of its
                      map entry), POST the binding, nothing else. What the apiserver allows on this machine for
                      the same pods (W1 only: only W1 pods name their node, and it judges no constraint, so it
                      takes no part in W4);
  ceiling-webhook     (only when named) the same binder with gpu-webhook in its pods' admission path: the limit of
                      a design that mutates every GPU pod and then binds it.

Each contender's scheduler signs in as plane.SCHEDULER_USER, so its writes can be counted from the audit log.
Both schedulers run one replica with leader election on, as deployed, with the same timings (LEADER_ELECTION),
so both pay for their renewals.
Client rate limits: every scheduler gets QPS and burst CLIENT_QPS/CLIENT_BURST, high enough that none is held
back by its own limiter (kube-scheduler's default 50/100 would cap it far below the apiserver); the ceiling has
no limiter at all.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
from typing import ClassVar

from bench import workload
from bench.plane import BenchPlane, ProcessStats
from gpu_scheduling import constants
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import ApiError
from harness.components import Components, LeaderElection, start_kube_scheduler
from harness.processes import Process
from harness.wait import wait_for

ROOT = pathlib.Path(__file__).resolve().parents[1]
CLIENT_QPS = 5000
CLIENT_BURST = 5000
SCHEDULER_WORKERS = 32  # gpu-scheduler bind workers and ceiling binder goroutines
LEADER_ELECTION = LeaderElection.program_defaults()
"""gpu-scheduler's own defaults, which are kube-scheduler's (15/10/2 s), for both."""


class Contender:
    name: str
    scheduler_name: str
    claim_api: workload.ClaimApi
    """How its pods ask for GPUs in W2 and the storm, and so which inventory the plane writes for it."""
    workloads: tuple[str, ...] = ("w1", "w2", "w3", "w4", "storm")
    """The workloads it takes part in."""
    python_processes: tuple[str, ...] = ()
    """Names (keys of processes()) that py-spy can profile."""
    cuda_env_in_pods: bool = False
    """Its W1 pods are created with the CUDA_VISIBLE_DEVICES the webhook would set (no webhook in its path)."""

    def start(self, plane: BenchPlane) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def processes(self) -> dict[str, ProcessStats]:
        """The contender's own processes, for CPU and RSS."""
        raise NotImplementedError

    def _programs(self) -> list[Process]:
        raise NotImplementedError

    def exited(self) -> str | None:
        """None while every program of the contender that was started runs; else which one exited, and the
        end of its log (a run cannot go on without its scheduler)."""
        for proc in self._programs():
            if proc.proc is not None and not proc.running:
                return f"{proc.name} exited with {proc.proc.returncode}:\n{proc.tail(8)}"
        return None

    @staticmethod
    def _stats(proc: Process) -> ProcessStats:
        assert proc.proc is not None
        return ProcessStats(proc.proc.pid)

    @staticmethod
    def _wait_leading(plane: BenchPlane, namespace: str, lease: str) -> None:
        """Wait until the scheduler holds its leader Lease: ready is not leading, and a pod created before it
        leads would wait in the timed window for the election, not for the scheduler."""

        def held() -> bool:
            try:
                return bool(plane.api.get(paths.lease(namespace, lease)).get("spec", {}).get("holderIdentity"))
            except ApiError:
                return False

        wait_for(f"the leader Lease {namespace}/{lease} held", held, timeout=60, interval=0.2)


class GpuScheduler(Contender):
    name = "gpu-scheduler"
    scheduler_name = constants.DEFAULT_SCHEDULER_NAME
    claim_api = workload.GPUCLAIM
    python_processes = ("scheduler", "webhook")

    def _components(self, plane: BenchPlane) -> Components:
        self.components = Components(plane.cp, self.scheduler_name, leader_election=LEADER_ELECTION)
        kubeconfig, _ = plane.scheduler_identity()
        argv = [a for a in self.components.scheduler.argv if not a.startswith("--kubeconfig=")]
        self.components.scheduler.argv = [
            *argv,
            f"--kubeconfig={kubeconfig}",
            f"--qps={CLIENT_QPS}",
            f"--burst={CLIENT_BURST}",
            f"--workers={SCHEDULER_WORKERS}",
        ]
        return self.components

    def start(self, plane: BenchPlane) -> None:
        self._components(plane).start()  # CRDs, webhook, its registration, scheduler (ready once caches synced)
        self._wait_leading(plane, constants.LEASE_NAMESPACE, self.scheduler_name)

    def stop(self) -> None:
        self.components.stop()

    def processes(self) -> dict[str, ProcessStats]:
        return {"scheduler": self._stats(self.components.scheduler), "webhook": self._stats(self.components.webhook)}

    def _programs(self) -> list[Process]:
        return [self.components.scheduler, self.components.webhook]


class GpuSchedulerWithoutWebhook(GpuScheduler):
    """Not in the default set: gpu-scheduler alone, the pods admitted without the webhook (they are created with
    the CUDA_VISIBLE_DEVICES it would set). Run it by name to see what the webhook costs the whole path."""

    name = "gpu-scheduler-no-webhook"
    python_processes = ("scheduler",)
    cuda_env_in_pods = True

    def start(self, plane: BenchPlane) -> None:
        components = self._components(plane)
        components.install_crds()
        components.start_scheduler()
        self._wait_leading(plane, constants.LEASE_NAMESPACE, self.scheduler_name)

    def processes(self) -> dict[str, ProcessStats]:
        return {"scheduler": self._stats(self.components.scheduler)}


class KubeScheduler(Contender):
    name = "kube-scheduler"
    scheduler_name = workload.KUBE_SCHEDULER
    claim_api = workload.EXTENDED
    workloads = ("w1", "w2", "w3", "w4")

    def start(self, plane: BenchPlane) -> None:
        kubeconfig, _ = plane.scheduler_identity()
        self.proc = start_kube_scheduler(
            plane.cp,
            plane.dir,
            kubeconfig=kubeconfig,
            scheduler_name=self.scheduler_name,
            qps=CLIENT_QPS,
            burst=CLIENT_BURST,
            leader_election=LEADER_ELECTION,
        )
        self._wait_leading(plane, "kube-system", "kube-scheduler")

    def stop(self) -> None:
        self.proc.stop()

    def processes(self) -> dict[str, ProcessStats]:
        return {"scheduler": self._stats(self.proc)}

    def _programs(self) -> list[Process]:
        return [self.proc]


class KubeSchedulerDra(KubeScheduler):
    """kube-scheduler with its default profile, whose DynamicResources plugin allocates the pods' ResourceClaims
    from the nodes' ResourceSlices and writes each claim's allocation and reservation before binding."""

    name = "kube-scheduler-dra"
    claim_api = workload.DRA
    workloads = ("w2", "storm")


class Ceiling(Contender):
    name = "ceiling"
    scheduler_name = workload.CEILING_SCHEDULER
    claim_api = workload.EXTENDED  # never used: the ceiling only binds W1 pods
    workloads = ("w1",)

    def start(self, plane: BenchPlane) -> None:
        _, identity = plane.scheduler_identity()
        self.proc = Process(
            "ceiling-binder",
            [
                str(plane.loadgen),
                "bind",
                *plane.api_flags(identity),
                f"-scheduler-name={self.scheduler_name}",
                f"-node-annotation={workload.CEILING_NODE_ANNOTATION}",
                # Runs until stopped (not -expect), so its CPU and RSS can still be read when the run ends.
                f"-workers={SCHEDULER_WORKERS}",
            ],
            plane.cp.logs,
        ).start()
        wait_for(
            "the ceiling binder watching",
            lambda: "watching" in self.proc.tail(5) or not self.proc.running,
            timeout=30,
            interval=0.1,
        )
        if not self.proc.running:
            raise RuntimeError(f"ceiling binder exited:\n{self.proc.tail()}")

    def stop(self) -> None:
        self.proc.stop()

    def processes(self) -> dict[str, ProcessStats]:
        return {"scheduler": self._stats(self.proc)}

    def _programs(self) -> list[Process]:
        return [self.proc]


class CeilingWithWebhook(Ceiling):
    """The ceiling's binder, its pods admitted through gpu-webhook (registered for the binder's scheduler name): the
    most this design (a mutating webhook on every GPU pod, then a bind) allows on this machine, which gpu-scheduler
    with its webhook is measured against (W1's target: 0.95× its rate)."""

    name = "ceiling-webhook"
    python_processes = ("webhook",)

    def start(self, plane: BenchPlane) -> None:
        self.components = Components(plane.cp, self.scheduler_name, leader_election=None)
        self.components.install_crds()
        self.components.start_webhook()
        self.components.register_webhook()
        super().start(plane)

    def stop(self) -> None:
        super().stop()
        self.components.stop()

    def processes(self) -> dict[str, ProcessStats]:
        return {**super().processes(), "webhook": self._stats(self.components.webhook)}

    def _programs(self) -> list[Process]:
        return [self.proc, self.components.webhook]


class GpuSchedulerBaseline(GpuScheduler):
    """Not in the default set: gpu-scheduler as it was at the git revision `BASELINE_REF` (`--baseline REF`), with
    today's webhook, so that one run measures what a change to the scheduler costs, before and after, on the same
    machine and plane. Its source is exported with `git archive` under the run's folder and put first on the
    scheduler's PYTHONPATH (so it shadows the editable install); it must run with today's dependencies."""

    name = "gpu-scheduler-baseline"
    python_processes = ("scheduler", "webhook")
    workloads = ("w1", "w2", "w3", "w4", "storm")
    ref: str = "HEAD"

    REQUIRES: ClassVar[dict[str, str]] = {
        "w3": "src/gpu_scheduling/scheduler/gangs.py",
        "w4": "src/gpu_scheduling/scheduler/plugins/pod_topology_spread.py",
    }
    """What a revision must have to take part in a workload: W3's gangs, W4's spread constraint (a revision from
    before them would leave W3's gangs waiting, or refuse W4's pods as asking a rule it does not support)."""

    @classmethod
    def at(cls, ref: str) -> None:
        """Measure the revision `ref`, in the workloads it can schedule (REQUIRES). The W4 pods are made by the
        benchmark, not the scheduler: any revision with the PodTopologySpread plugin schedules them."""
        cls.ref = ref

        def has(path: str) -> bool:
            found = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{ref}:{path}"], capture_output=True)
            return found.returncode == 0

        cls.workloads = tuple(w for w in GpuScheduler.workloads if w not in cls.REQUIRES or has(cls.REQUIRES[w]))

    def start(self, plane: BenchPlane) -> None:
        source = plane.dir / "baseline-src"
        if not source.exists():
            source.mkdir(parents=True)
            archive = subprocess.run(
                ["git", "-C", str(ROOT), "archive", "--format=tar", self.ref, "src"],
                check=True,
                capture_output=True,
            ).stdout
            subprocess.run(["tar", "-x", "-C", str(source)], input=archive, check=True)
        components = self._components(plane)
        scheduler = components.scheduler
        # The console script imports gpu_scheduling from the editable install; run the same entry point from the
        # exported tree instead.
        scheduler.argv = [sys.executable, "-m", "gpu_scheduling.scheduler.main", *scheduler.argv[1:]]
        scheduler.env["PYTHONPATH"] = str(source / "src")
        components.start()
        self._wait_leading(plane, constants.LEASE_NAMESPACE, self.scheduler_name)


DEFAULT = (GpuScheduler.name, KubeScheduler.name, KubeSchedulerDra.name, Ceiling.name, CeilingWithWebhook.name)
"""What `make bench` runs; gpu-scheduler-no-webhook and gpu-scheduler-baseline run only when named."""
BY_NAME: dict[str, type[Contender]] = {
    c.name: c
    for c in (
        GpuScheduler,
        KubeScheduler,
        KubeSchedulerDra,
        Ceiling,
        CeilingWithWebhook,
        GpuSchedulerWithoutWebhook,
        GpuSchedulerBaseline,
    )
}
