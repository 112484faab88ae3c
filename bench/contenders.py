"""The three contenders, each started against a fresh BenchPlane with the same client settings:

  gpu-scheduler   this project's scheduler, with its webhook in the admission path (as deployed);
  kube-scheduler  the upstream scheduler built from the same Kubernetes version, default profile;
  ceiling         `loadgen bind`: list+watch, read the node from the map, POST the binding, nothing else. What
                  the apiserver allows on this machine for the same pods.

Client rate limits: both schedulers get QPS and burst CLIENT_QPS/CLIENT_BURST, high enough that neither is held
back by its own limiter (kube-scheduler's default 50/100 would cap it far below the apiserver); the ceiling has
no limiter at all.
"""

from __future__ import annotations

import ssl

from gpu_scheduling import constants
from tests.harness.api import wait_for
from tests.harness.components import Components
from tests.harness.processes import Process, free_port

from bench import workload
from bench.plane import BenchPlane, ProcessStats

CLIENT_QPS = 5000
CLIENT_BURST = 5000
SCHEDULER_WORKERS = 32  # gpu-scheduler bind workers and ceiling binder goroutines


class Contender:
    name: str
    scheduler_name: str
    python_processes: tuple[str, ...] = ()
    """Names (keys of processes()) that py-spy can profile."""

    def start(self, plane: BenchPlane) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def processes(self) -> dict[str, ProcessStats]:
        """The contender's own processes, for CPU and RSS."""
        raise NotImplementedError

    @staticmethod
    def _stats(proc: Process) -> ProcessStats:
        assert proc.proc is not None
        return ProcessStats(proc.proc.pid)


class GpuScheduler(Contender):
    name = "gpu-scheduler"
    scheduler_name = constants.DEFAULT_SCHEDULER_NAME
    python_processes = ("scheduler", "webhook")

    def _components(self, plane: BenchPlane) -> Components:
        self.components = Components(plane.cp, self.scheduler_name)
        self.components.scheduler.argv += [f"--qps={CLIENT_QPS}", f"--burst={CLIENT_BURST}",
                                           f"--workers={SCHEDULER_WORKERS}"]
        return self.components

    def start(self, plane: BenchPlane) -> None:
        self._components(plane).start()  # CRDs, webhook, its registration, scheduler (ready once caches synced)

    def stop(self) -> None:
        self.components.stop()

    def processes(self) -> dict[str, ProcessStats]:
        return {"scheduler": self._stats(self.components.scheduler),
                "webhook": self._stats(self.components.webhook)}


class GpuSchedulerWithoutWebhook(GpuScheduler):
    """Not one of the three: gpu-scheduler alone, the pods admitted without the webhook (so without
    CUDA_VISIBLE_DEVICES). Run it by name to see what the webhook costs the whole path."""

    name = "gpu-scheduler-no-webhook"
    python_processes = ("scheduler",)

    def start(self, plane: BenchPlane) -> None:
        components = self._components(plane)
        components.install_crds()
        components.start_scheduler()

    def processes(self) -> dict[str, ProcessStats]:
        return {"scheduler": self._stats(self.components.scheduler)}


class KubeScheduler(Contender):
    name = "kube-scheduler"
    scheduler_name = workload.KUBE_SCHEDULER

    def start(self, plane: BenchPlane) -> None:
        config = plane.dir / "kube-scheduler.yaml"
        config.write_text(f"""apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: {plane.cp.kubeconfig}
  qps: {CLIENT_QPS}
  burst: {CLIENT_BURST}
leaderElection:
  leaderElect: false
profiles:
- schedulerName: {self.scheduler_name}
""")
        port = free_port()
        self.proc = Process("kube-scheduler", [
            str(plane.cp.bin / "kube-scheduler"), f"--config={config}", "--bind-address=127.0.0.1",
            f"--secure-port={port}", f"--authentication-kubeconfig={plane.cp.kubeconfig}",
            f"--authorization-kubeconfig={plane.cp.kubeconfig}", f"--cert-dir={plane.dir / 'kube-scheduler-certs'}",
        ], plane.cp.logs).start()
        # /readyz includes the scheduler's informer sync; its self-signed serving certificate is not verified.
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        self.proc.wait_http(f"https://127.0.0.1:{port}/readyz", timeout=60, context=insecure)

    def stop(self) -> None:
        self.proc.stop()

    def processes(self) -> dict[str, ProcessStats]:
        return {"scheduler": self._stats(self.proc)}


class Ceiling(Contender):
    name = "ceiling"
    scheduler_name = workload.CEILING_SCHEDULER

    def start(self, plane: BenchPlane) -> None:
        self.proc = Process("ceiling-binder", [
            str(plane.loadgen), "bind", *plane.api_flags(), f"-scheduler-name={self.scheduler_name}",
            # Runs until stopped (not -expect), so its CPU and RSS can still be read when the run ends.
            f"-workers={SCHEDULER_WORKERS}",
        ], plane.cp.logs).start()
        wait_for("the ceiling binder watching", lambda: "watching" in self.proc.tail(5) or not self.proc.running,
                 timeout=30, interval=0.1)
        if not self.proc.running:
            raise RuntimeError(f"ceiling binder exited:\n{self.proc.tail()}")

    def stop(self) -> None:
        self.proc.stop()

    def processes(self) -> dict[str, ProcessStats]:
        return {"scheduler": self._stats(self.proc)}


THE_THREE = (GpuScheduler.name, KubeScheduler.name, Ceiling.name)
BY_NAME: dict[str, type[Contender]] = {c.name: c for c in (GpuScheduler, KubeScheduler, Ceiling,
                                                           GpuSchedulerWithoutWebhook)}
