"""The scheduling loop: two informers (our unbound pods, all nodes), a de-duplicating work queue and workers
that bind concurrently. No per-pod LIST: everything a decision needs is in the informer caches. Pods that name a
GpuClaim take the claim path (scheduler.claims), which adds its own caches and the GPU leases.

It must not touch pods of other schedulers, bound pods, or anything but bindings, pod status conditions, events,
and for claim pods their allocation annotations, their claims' status and the GPU leases.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import socket
import time
from collections import defaultdict
from typing import Any

import aiohttp

from gpu_scheduling import constants
from gpu_scheduling.kube.client import ApiError, Client
from gpu_scheduling.kube.informer import Informer
from gpu_scheduling.scheduler import decision
from gpu_scheduling.scheduler.claims import ClaimPath
from gpu_scheduling.scheduler.metrics import Metrics

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class SchedulerConfig:
    name: str = constants.DEFAULT_SCHEDULER_NAME
    """`spec.schedulerName` this scheduler answers to."""

    workers: int = 32
    """Concurrent bind workers. Binds are I/O-bound API calls; 32 keeps the apiserver busy without a storm."""

    resync_seconds: float = 30.0
    """Every this many seconds every pending pod is reconsidered, in case a node change was missed."""

    retry_seconds: float = 1.0
    """First delay before retrying a bind that failed with a server error (doubles, up to 30 s)."""


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Scheduler:
    def __init__(self, client: Client, config: SchedulerConfig, metrics: Metrics | None = None):
        self.client = client
        self.config = config
        self.metrics = metrics or Metrics()
        self.pods = Informer(
            client,
            "/api/v1/pods",
            self._on_pod,
            params={"fieldSelector": f"spec.schedulerName={config.name},spec.nodeName="},
            name="pods",
        )
        self.nodes = Informer(client, "/api/v1/nodes", self._on_node, name="nodes")
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._queued: set[str] = set()
        self._waiting: dict[str, set[str]] = defaultdict(set)  # node name -> pod keys waiting for it
        self._reported: dict[str, str] = {}  # pod key -> last Unschedulable message reported
        self._attempts: dict[str, int] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._instance = socket.gethostname()
        self._pending_uids: set[str] = set()
        # A key is worked on by one worker at a time; a key enqueued meanwhile is marked dirty and comes back
        # once that worker is done (client-go's workqueue does the same).
        self._processing: set[str] = set()
        self._dirty: set[str] = set()
        # Pods we bound whose watch has not yet said so: never place them again from a stale cache.
        self._assumed_bound: set[str] = set()
        self._claims_started = False
        self.claim_path = ClaimPath(client, self._requeue_claim_pods, self._pending_uids.__contains__)

    # ---- readiness -------------------------------------------------------------------------------------------
    def ready(self) -> bool:
        return self.pods.synced.is_set() and self.nodes.synced.is_set() and self._claims_started

    # ---- informer handlers (must not block) ------------------------------------------------------------------
    def _enqueue(self, key: str) -> None:
        if key in self._processing:
            self._dirty.add(key)
            return
        if key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    def _unwait(self, key: str) -> None:
        for waiting in self._waiting.values():
            waiting.discard(key)

    def _forget(self, key: str) -> None:
        self._reported.pop(key, None)
        self._attempts.pop(key, None)
        self._unwait(key)

    def _on_pod(self, kind: str, pod: dict[str, Any], _old: dict[str, Any] | None) -> None:
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        if kind == "DELETED":  # deleted, or bound (no longer matches spec.nodeName=)
            self._forget(key)
            self._assumed_bound.discard(key)
            self._pending_uids.discard(pod["metadata"]["uid"])
            return
        self._pending_uids.add(pod["metadata"]["uid"])
        if kind == "ADDED":
            self.metrics.pods_seen += 1
        if decision.is_schedulable_pod(pod, self.config.name):
            self._enqueue(key)

    def _requeue_claim_pods(self, claim_key: str | None) -> None:
        """Reconsider the pending pods naming GpuClaim `claim_key` ("<namespace>/<name>"), or all claim pods."""
        for key, pod in self.pods.cache.items():
            if not decision.is_claim_pod(pod) or not decision.is_schedulable_pod(pod, self.config.name):
                continue
            meta = pod["metadata"]
            claim = f"{meta['namespace']}/{meta['annotations'][constants.CLAIM_ANNOTATION].strip()}"
            if claim_key is None or claim_key == claim:
                self._enqueue(key)

    def _on_node(self, _kind: str, node: dict[str, Any], _old: dict[str, Any] | None) -> None:
        self.claim_path.nodes_changed()
        for key in list(self._waiting.get(node["metadata"]["name"], ())):
            self._enqueue(key)

    # ---- main loop -------------------------------------------------------------------------------------------
    async def run(self) -> None:
        tasks = [
            asyncio.create_task(self.nodes.run(), name="nodes-informer"),
        ]
        # Nodes first, so the first decisions for listed pods see every node.
        await self.nodes.synced.wait()
        tasks.append(asyncio.create_task(self.pods.run(), name="pods-informer"))
        await self.pods.synced.wait()
        tasks += await self.claim_path.start()
        self._claims_started = True
        log.info("caches synced: %d nodes, %d unbound pods for %s", len(self.nodes.cache), len(self.pods.cache),
                 self.config.name)
        tasks += [asyncio.create_task(self._worker(), name=f"worker-{i}") for i in range(self.config.workers)]
        tasks.append(asyncio.create_task(self._resync(), name="resync"))
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in [*tasks, *self._background]:
                t.cancel()

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(self.config.resync_seconds)
            for key, pod in list(self.pods.cache.items()):
                if decision.is_schedulable_pod(pod, self.config.name):
                    self._enqueue(key)

    async def _worker(self) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            self._processing.add(key)
            try:
                await self._schedule(key)
            except asyncio.CancelledError:
                raise
            except Exception:  # one bad pod must not stop the worker
                log.exception("unexpected error scheduling %s", key)
                self._retry_later(key)
            finally:
                self._processing.discard(key)
                if key in self._dirty:
                    self._dirty.discard(key)
                    self._enqueue(key)

    def _retry_later(self, key: str) -> None:
        attempts = self._attempts.get(key, 0) + 1
        self._attempts[key] = attempts
        delay = min(self.config.retry_seconds * 2 ** (attempts - 1), 30.0)
        asyncio.get_running_loop().call_later(delay, self._enqueue, key)

    async def _schedule(self, key: str) -> None:
        pod = self.pods.cache.get(key)
        if pod is None or key in self._assumed_bound or not decision.is_schedulable_pod(pod, self.config.name):
            return
        nodes = self.nodes.cache  # cluster-scoped: key == node name
        self._unwait(key)
        if decision.is_claim_pod(pod):
            await self._schedule_claim_pod(key, pod)
            return
        verdict = decision.decide(pod, nodes)
        if isinstance(verdict, decision.Unschedulable):
            if verdict.node:
                self._waiting[verdict.node].add(key)
            await self._report_unschedulable(pod, verdict.message)
            return
        await self._bind(key, pod, verdict.node)

    async def _schedule_claim_pod(self, key: str, pod: dict[str, Any]) -> None:
        if not self.claim_path.enabled:
            await self._report_unschedulable(pod, "pod names a GpuClaim but the GpuClaim CRDs are not installed")
            return
        placed = await self.claim_path.place(pod, self.nodes.cache)
        if isinstance(placed, decision.Unschedulable):
            await self._report_unschedulable(pod, placed.message)
            return
        if await self._bind(key, pod, placed.allocation.node):
            await self.claim_path.bound(placed)
        else:
            await self.claim_path.release(pod["metadata"]["uid"])

    async def _bind(self, key: str, pod: dict[str, Any], node: str) -> bool:
        """Bind; True when the pod is bound to `node` (now or already)."""
        meta = pod["metadata"]
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            # The uid makes the bind a no-op for a pod recreated under the same name since we saw it.
            "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        started = time.monotonic()
        try:
            await self.client.post(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/binding", body)
        except ApiError as exc:
            if exc.status in (404, 409):
                # Already bound (by us before a restart) or gone: never bind twice, nothing to retry.
                log.info("not binding %s: %s", key, exc.message)
                self.metrics.bind_conflicts += 1
                if exc.status == 409:
                    self._assumed_bound.add(key)
                return exc.status == 409
            log.warning("binding %s to %s failed: %s; will retry", key, node, exc)
            self.metrics.bind_errors += 1
            self._retry_later(key)
            return False
        self.metrics.observe_bind(time.monotonic() - started)
        self._forget(key)
        self._assumed_bound.add(key)
        log.info("bound %s to %s", key, node)
        self._spawn(self._event(pod, "Normal", constants.EVENT_SCHEDULED,
                                f"Successfully assigned {key} to {node}"))
        return True

    async def _report_unschedulable(self, pod: dict[str, Any], message: str) -> None:
        meta = pod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        if self._reported.get(key) == message:
            return
        self._reported[key] = message
        self.metrics.unschedulable += 1
        log.info("cannot schedule %s: %s", key, message)
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": constants.REASON_UNSCHEDULABLE,
            "message": message,
            "lastProbeTime": None,
            "lastTransitionTime": _now(),
        }
        try:
            await self.client.patch(
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
                {"status": {"conditions": [condition]}},
                kind="strategic",
            )
        except ApiError as exc:
            if exc.status != 404:
                log.warning("could not set PodScheduled=False on %s: %s", key, exc)
                self._reported.pop(key, None)
        await self._event(pod, "Warning", constants.EVENT_FAILED_SCHEDULING, message)

    # ---- events ----------------------------------------------------------------------------------------------
    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _event(self, pod: dict[str, Any], type_: str, reason: str, message: str) -> None:
        meta = pod["metadata"]
        now = _now()
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
            },
            "type": type_,
            "reason": reason,
            "message": message,
            "source": {"component": self.config.name},
            "reportingComponent": self.config.name,
            "reportingInstance": self._instance,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            await self.client.post(f"/api/v1/namespaces/{meta['namespace']}/events", event)
        except (ApiError, aiohttp.ClientError, asyncio.TimeoutError) as exc:
            # An event is a courtesy: losing one (the apiserver busy or going away) must not disturb scheduling.
            log.warning("could not record %s event for %s/%s: %s", reason, meta["namespace"], meta["name"], exc)
