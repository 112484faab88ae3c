"""The runtime policy: the GpuSchedulingPolicy's `defaultStrategy` and `queueOrder`, read from its watch, and the
leader's report of what it applies (the policy's `status` and a PolicyApplied Event), written until the API agrees.

A policy change applies from the next decision: the strategy is read by claim placement (scheduler.claims) when
a claim names none, the queue order is handed to the scheduling queue (scheduler.queue), which retries its
waiting claim pods in the new order. Without the CRD the flag's strategy and the default order apply. It must not
write anything but the policy's status and its Events.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from gpu_scheduling import constants
from gpu_scheduling.claims import allocator
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import NotFound
from gpu_scheduling.kube.informer import Informer
from gpu_scheduling.kube.workqueue import WorkQueue
from gpu_scheduling.scheduler.events import TRANSIENT, Recorder
from gpu_scheduling.scheduler.metrics import Metrics
from gpu_scheduling.scheduler.queue import SchedulingQueue

if TYPE_CHECKING:
    from gpu_scheduling.kube.client import Client

log = logging.getLogger(__name__)

#: Reason of the Event the leader records on the GpuSchedulingPolicy when it applies a generation.
EVENT_POLICY_APPLIED = "PolicyApplied"
#: Namespace of Events about cluster-scoped objects (as kubectl and the controllers put them).
CLUSTER_EVENTS_NAMESPACE = "default"


class RuntimePolicy:
    def __init__(
        self, client: Client, flag_strategy: str, queue: SchedulingQueue, metrics: Metrics, recorder: Recorder
    ):
        self.client = client
        self.flag_strategy = flag_strategy
        self.queue = queue
        self.metrics = metrics
        self.recorder = recorder
        # What the next decision applies: the policy's, else the flag's (see `_on_policy`).
        self.strategy: allocator.Strategy = cast("allocator.Strategy", flag_strategy)
        self.queue_order: str = constants.DEFAULT_QUEUE_ORDER
        self.metrics.set_policy(self.strategy, self.queue_order)
        self.informer = Informer(
            client,
            paths.SCHEDULING_POLICIES,
            self._on_policy,
            params={"fieldSelector": f"metadata.name={constants.POLICY_NAME}"},
            name=constants.GPU_SCHEDULING_POLICY_PLURAL,
        )
        # The policy's status to write: one key, retried with the work queue's backoff until it sticks.
        self._dirty: WorkQueue[str] = WorkQueue(base_delay=0.5, max_delay=30.0)

    def _on_policy(self, kind: str, policy: dict[str, Any], _old: dict[str, Any] | None) -> None:
        spec = {} if kind == "DELETED" else policy.get("spec") or {}
        strategy = spec.get("defaultStrategy") or self.flag_strategy
        queue_order = spec.get("queueOrder") or constants.DEFAULT_QUEUE_ORDER
        if strategy not in constants.STRATEGIES or queue_order not in constants.QUEUE_ORDERS:
            # The CRD's enums refuse these; an older CRD might not: keep what applies and say why.
            log.warning("GpuSchedulingPolicy %s: unknown strategy or queue order in %s; ignored", kind, spec)
            return
        if (strategy, queue_order) != (self.strategy, self.queue_order):
            log.info(
                "policy: strategy %s, queue order %s (generation %s)",
                strategy,
                queue_order,
                policy["metadata"].get("generation"),
            )
            self.strategy, self.queue_order = cast("allocator.Strategy", strategy), queue_order
            self.metrics.set_policy(strategy, queue_order)
            self.queue.set_order(queue_order)
        self._dirty.add(constants.POLICY_NAME)

    def status(self, policy: Mapping[str, Any]) -> dict[str, Any]:
        """The status that says what this scheduler applies from `policy`."""
        generation = policy["metadata"].get("generation")
        source = "the policy" if (policy.get("spec") or {}).get("defaultStrategy") else "the scheduler's --strategy"
        return {
            "observedGeneration": generation,
            "strategy": self.strategy,
            "queueOrder": self.queue_order,
            "message": f"applying strategy {self.strategy} (from {source}) and queue order {self.queue_order} "
            f"from generation {generation}",
        }

    async def lead(self) -> None:
        """Make the policy's status say what is applied (leader only): desired state, retried until it sticks."""
        self._dirty.add(constants.POLICY_NAME)  # say what this leader applies
        while True:
            key = await self._dirty.get()
            try:
                await self._write_status(key)
            finally:
                self._dirty.done(key)

    async def _write_status(self, key: str) -> None:
        policy = self.informer.cache.get(key)
        if policy is None:
            return
        want = self.status(policy)
        current = policy.get("status") or {}
        if all(current.get(k) == v for k, v in want.items()):
            self._dirty.forget(key)
            return
        try:
            await self.client.patch(paths.scheduling_policy_status(), {"status": want})
        except NotFound:
            return  # deleted meanwhile: the watch says so
        except TRANSIENT as exc:
            delay = self._dirty.add_rate_limited(key)
            log.warning("could not write the GpuSchedulingPolicy status: %s; retrying in %.1fs", exc, delay)
            return
        self._dirty.forget(key)
        if current.get("observedGeneration") != want["observedGeneration"]:
            meta = policy["metadata"]
            involved = {
                "apiVersion": constants.API_VERSION,
                "kind": constants.GPU_SCHEDULING_POLICY_KIND,
                "name": meta["name"],
                "uid": meta.get("uid", ""),
            }
            await self.recorder.post(
                involved, CLUSTER_EVENTS_NAMESPACE, "Normal", EVENT_POLICY_APPLIED, want["message"]
            )
