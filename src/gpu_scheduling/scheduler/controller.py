"""The scheduling loop: one watch of this scheduler's pods (bound and unbound: one stream, so what a pod holds and
whether it waits never come from two views that lag each other), one of the nodes, a keyed work queue and workers
that bind concurrently. No per-pod LIST: everything a decision needs is in the informer caches and the GPU ledger
(claims.ledger), the one owner of which pod holds which GPU. Pods that name a GpuClaim take the claim path
(scheduler.claims); map pods hold the GPUs of their map entry, so an Exclusive claim never gets them and a map pod
never gets a GPU an Exclusive claim holds.

The parts, along kube-scheduler's owners: the scheduling queue (scheduler.queue) decides when a pod is tried again;
the cache (scheduler.cache) alone owns what is assumed, a pod's GPUs and its room on the node together (a pod we
bound holds a confirmed hold until the watch shows it bound); the runtime policy (scheduler.policy), claim placement
(scheduler.claims) and the Lease reconciler (scheduler.leases) are each given what they need. This module feeds them
the informers' events and runs the workers that decide and bind.

Pending work is cheap: a pod that cannot be placed is retried only on an event that could help it (its node
changed, a GPU was freed, an inventory or its claim changed), no sooner than its backoff allows (1 s doubling to
10 s, as kube-scheduler), and every five minutes in case an event was missed; its condition, event and claim
status are written only when the reason changes.

It must not touch pods of other schedulers, bound pods, or anything but bindings (which carry a claim pod's
allocation annotations), pod status conditions, events, GpuClaim status and the GPU Leases. `watch` keeps the
caches warm (followers run it too); only `lead` (the leader) writes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import time
from typing import TYPE_CHECKING, Any

from gpu_scheduling import constants, gpumap, podrequest
from gpu_scheduling.claims import objects
from gpu_scheduling.claims.gangs import GangError
from gpu_scheduling.claims.ledger import Hold
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import ApiError, Conflict, NotFound, TransportError
from gpu_scheduling.kube.informer import Informer
from gpu_scheduling.scheduler import decision, fit, framework, volumes
from gpu_scheduling.scheduler.cache import Cache, Listener
from gpu_scheduling.scheduler.claims import ClaimPath, Placed
from gpu_scheduling.scheduler.events import Recorder, now
from gpu_scheduling.scheduler.gangs import GangPath
from gpu_scheduling.scheduler.leases import LeaseReconciler
from gpu_scheduling.scheduler.metrics import Metrics, SchedulerState
from gpu_scheduling.scheduler.policy import RuntimePolicy
from gpu_scheduling.scheduler.postfilter import PostFilter
from gpu_scheduling.scheduler.queue import SchedulingQueue
from gpu_scheduling.scheduler.volumebinder import Outcome, VolumeBinder

if TYPE_CHECKING:
    from gpu_scheduling.kube.client import Client

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class SchedulerConfig:
    name: str = constants.DEFAULT_SCHEDULER_NAME
    """`spec.schedulerName` this scheduler answers to."""

    workers: int = 32
    """Concurrent bind workers. Binds are I/O-bound API calls; 32 keeps the apiserver busy without a storm."""

    flush_seconds: float = 300.0
    """Every this many seconds every unschedulable pod is tried again, in case an event that could help it was
    missed (kube-scheduler's podMaxInUnschedulablePodsDuration is 5 minutes too)."""

    retry_seconds: float = 1.0
    """First delay before retrying a pod (a failed API call, or an event that could help it); doubles per attempt."""

    max_retry_seconds: float = 10.0
    """Longest such delay (kube-scheduler's podMaxBackoffSeconds)."""

    sweep_seconds: float = 60.0
    """Every this many seconds the Lease cache is compared with the ledger (scheduler.leases.LeaseReconciler.sweep)."""

    strategy: str = constants.DEFAULT_STRATEGY
    """Node strategy of the GpuClaims that name none while the GpuSchedulingPolicy sets no defaultStrategy."""

    gang_timeout_seconds: float = 300.0
    """A gang with fewer members than its minimum for this long is reported (a GangIncomplete event)."""

    volume_bind_timeout_seconds: float = 600.0
    """How long a pod's WaitForFirstConsumer claims may take to be bound once its node is chosen (kube-scheduler's
    bindTimeoutSeconds); then the attempt fails and what it assumed is released."""

    isolated_gpus: bool = False
    """gpu-device-plugin gives containers only their own GPUs (NVML): a map pod's CUDA_VISIBLE_DEVICES numbers them
    from 0 (gpu-webhook --isolated-gpus, set from the same chart value)."""


STOP_GRACE = 2.0
"""Seconds a stopping leader gives the binds in flight to finish, well inside the margin between the renew
deadline and the lease duration, so no new leader can be acting yet; then as long again for their events."""


@dataclasses.dataclass(frozen=True)
class _Refused:
    """A lone pod's Filter or Reserve found no place: why (None: nothing to say yet), and the strategy it was
    judged by."""

    message: str | None
    strategy: str = ""


def _result(bound: bool | None) -> str:
    """A bind's outcome as an attempt's result: bound, not bound (gone or bound elsewhere), or unknown."""
    return "scheduled" if bound is True else "unschedulable" if bound is False else "error"


_RUNNING = "status.phase!=Succeeded,status.phase!=Failed"
"""Field selector of the pods that take room on their node: kube-scheduler's own pod informer has the same."""


def _namespace_view(namespace: dict[str, Any]) -> dict[str, Any]:
    """What the scheduler keeps of a namespace: its name and labels."""
    meta = namespace.get("metadata") or {}
    return {"metadata": {k: meta[k] for k in ("name", "labels", "resourceVersion") if k in meta}}


def _key(pod: dict[str, Any]) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


def _scheduling_view(pod: dict[str, Any]) -> tuple[Any, ...]:
    """What a decision reads of a pod: a change elsewhere (its status, which we write) is no reason to retry."""
    meta = pod.get("metadata") or {}
    return (
        meta.get("annotations"),
        meta.get("labels"),
        meta.get("deletionTimestamp"),
        pod.get("spec"),
        (pod.get("status") or {}).get("phase"),
    )


class Scheduler:
    def __init__(self, client: Client, config: SchedulerConfig, metrics: Metrics | None = None):
        self.client = client
        self.config = config
        self.metrics = metrics or Metrics()
        # The maps of its pods, each distinct map parsed once: a StatefulSet's replicas all carry the same one.
        self.maps = gpumap.ParseCache()
        self.pods = Informer(
            client,
            paths.ALL_PODS,
            self._on_pod,
            params={"fieldSelector": f"spec.schedulerName={config.name}"},
            name="pods",
            transform=decision.pod_view,
        )
        self.nodes = Informer(client, paths.NODES, self._on_node, name="nodes", transform=decision.node_view)
        # What the other schedulers' pods take from the nodes (their requests and host ports, nothing else kept):
        # with our own bound pods, the running totals that a pod must fit in (the cache's fit.NodeUsage).
        self.others = Informer(
            client,
            paths.ALL_PODS,
            self._on_other_pod,
            params={"fieldSelector": f"spec.schedulerName!={config.name},spec.nodeName!=,{_RUNNING}"},
            name="other-pods",
            transform=fit.trimmed,
        )
        # The volume objects the volume plugins read (scheduler.volumes), kept as the informers' default keeps
        # objects (without their managed fields), and PreBind's writer of their bindings.
        self.volume_claims = Informer(
            client, paths.PERSISTENT_VOLUME_CLAIM.collection(), self._on_volume_claim, name="pvcs"
        )
        self.volume_objects = Informer(client, paths.PERSISTENT_VOLUME.collection(), self._on_volume, name="pvs")
        self.storage_classes = Informer(
            client, paths.STORAGE_CLASS.collection(), self._on_storage_class, name="storageclasses"
        )
        self.csi_nodes = Informer(client, paths.CSI_NODE.collection(), self._on_csi_node, name="csinodes")
        self.volume_cache = volumes.VolumeCache(
            self.volume_claims.cache, self.volume_objects.cache, self.storage_classes.cache, self.csi_nodes.cache
        )
        # The one owner of what is assumed (scheduler.cache): the GPU ledger (claims.ledger, which pod holds which
        # GPU) and the room each node has left; `snapshot` is what every decision reads of them.
        # The namespaces' labels, for pod affinity terms' namespace selectors (nothing else of them is kept).
        self.namespaces = Informer(
            client, paths.NAMESPACES, self._on_namespace, name="namespaces", transform=_namespace_view
        )
        self.cache = Cache(volumes=self.volume_cache, nodes=self.nodes.cache, namespaces=self.namespaces.cache)
        self.ledger = self.cache.ledger
        self.snapshot = self.cache.snapshot
        self.uids: dict[str, str] = {}  # pod uid -> key, for every cached pod
        self.queue = SchedulingQueue(self.pods.cache, config.retry_seconds, config.max_retry_seconds)
        self.recorder = Recorder(client, config.name, socket.gethostname())
        self.policy = RuntimePolicy(client, config.strategy, self.queue, self.metrics, self.recorder)
        self.leases = LeaseReconciler(
            client,
            self.ledger,
            self.queue,
            self.metrics,
            pods=self.pods.cache,
            uids=self.uids,
            maps=self.maps,
            scheduler_name=config.name,
            sweep_seconds=config.sweep_seconds,
        )
        self.binder = VolumeBinder(client, self.volume_cache, config.volume_bind_timeout_seconds)
        self.claim_path = ClaimPath(client, self.cache, self.queue, self.policy, self.leases)
        self.cache.listener = Listener(
            room_made=self._room_made,
            gpus_freed=lambda: self.queue.ledger_changed(self.ledger),
            leases_released=self.leases.reconcile,
        )
        self.gangs = GangPath(self, config.gang_timeout_seconds)
        self.postfilter = PostFilter(self)  # preemption; reads the PodDisruptionBudgets
        self.leading = False  # the leader's workers run (only then are events and statuses written)
        self._background: set[asyncio.Task[Any]] = set()
        self._watching = False
        self._stopping = False
        self._busy: set[asyncio.Task[Any]] = set()  # workers in the middle of a pod
        self.metrics.state_source = self.state

    # ---- readiness and metrics -------------------------------------------------------------------------------
    def ready(self) -> bool:
        return self._watching

    def state(self) -> SchedulerState:
        """What the metrics' gauges show, read from the caches and the ledger when Prometheus scrapes: O(pods +
        GPUs), nothing per event."""
        pending = {"map": 0, "claim": 0}
        for pod in self.pods.cache.values():
            if not (pod.get("spec") or {}).get("nodeName"):
                pending["claim" if decision.is_claim_pod(pod) else "map"] += 1
        node_gpus: dict[str, dict[str, int]] = {}
        islands: dict[tuple[str, str], int] = {}
        for status in self.claim_path.statuses.cache.values():
            node = objects.inventory_node(status)
            if node is None:
                continue
            held = {gpu for h in self.ledger.holdings(node) for gpu in h.gpu_ids}
            counts = node_gpus.setdefault(node, {"free": 0, "allocated": 0, "unhealthy": 0})
            for device in objects.node_from_status(status, {}).devices:
                island = (node, device.island)
                islands.setdefault(island, 0)
                if not device.healthy:
                    counts["unhealthy"] += 1
                elif device.id in held:
                    counts["allocated"] += 1
                    islands[island] += 1
                else:
                    counts["free"] += 1
        return SchedulerState(pending, node_gpus, islands)

    # ---- informer handlers (must not block) ------------------------------------------------------------------
    def _on_other_pod(self, kind: str, pod: dict[str, Any], _old: dict[str, Any] | None) -> None:
        """A pod of another scheduler, bound: count what it takes on its node."""
        taken = None if kind == "DELETED" else fit.footprint(pod)
        self.cache.observe(pod["metadata"]["uid"], taken)
        if kind == "ADDED" and taken is not None:
            self.queue.changed(framework.ClusterEvent(framework.POD_ADDED, frozenset({taken.node})))
        if taken is None:
            self._claims_freed(pod)

    def _on_pod(self, kind: str, pod: dict[str, Any], old: dict[str, Any] | None) -> None:
        key = _key(pod)
        uid = pod["metadata"]["uid"]
        if kind == "DELETED" or decision.is_finished(pod):
            self.cache.observe(uid, None)
            self._claims_freed(pod)
            self.queue.forget(key)
            if self.uids.get(uid) == key:
                del self.uids[uid]
            hold = self.ledger.hold(uid)
            self.leases.reconcile(self.ledger.pod_gone(uid))
            self.queue.ledger_changed(self.ledger)
            self.gangs.member_gone(key, (pod.get("status") or {}).get("phase") == "Succeeded")
            self.postfilter.forget(key)
            claim = self.claim_path.pod_gone(hold) if hold is not None and hold.bound else None
            if claim is not None and self.leading:
                self.spawn(self.claim_path.write_allocations(claim))
            return
        self.uids[uid] = key
        self.gangs.track(key, pod)
        if (pod.get("spec") or {}).get("nodeName"):  # bound: what it holds is the API's word
            self.cache.observe(uid, fit.footprint(pod))
            if old is None or not (old.get("spec") or {}).get("nodeName"):
                self.queue.forget(key)
                self.postfilter.forget(key)
                self.queue.changed(framework.ClusterEvent(framework.POD_ADDED, frozenset({pod["spec"]["nodeName"]})))
                hold = objects.hold_from_pod(pod, self.maps)
                if hold is not None:
                    self.leases.reconcile(self.ledger.pod_bound(hold))
                    self.queue.ledger_changed(self.ledger)
                    self.claim_path.note_bound(hold)
                self.gangs.member_bound(key)
            return
        if kind == "ADDED":
            self.metrics.pod_seen()
        elif old is not None and _scheduling_view(old) == _scheduling_view(pod):
            return  # only its status changed (our own condition, say): nothing a decision reads
        if decision.is_gated(pod):
            # Not tried while gated; whatever an earlier version of it had (a queued retry, a wait, a claim's
            # reservation) is dropped, and the update that removes the last gate brings it back at once.
            self.queue.forget(key)
            return
        if decision.is_schedulable_pod(pod, self.config.name):
            self.queue.add(key)

    def _claims_freed(self, pod: dict[str, Any]) -> None:
        """A pod left its node: a pod waiting on one of its claims (a ReadWriteOncePod claim it used) may go now."""
        for claim in self.binder.claims_of(pod):
            self.queue.changed(framework.ClusterEvent(framework.PVC, name=claim))

    def _room_made(self, node: str) -> None:
        """`node` has more room (a pod left it, or asks less of it): the cache says so."""
        gpus = self.claim_path.has_inventory(node)
        self.queue.changed(framework.ClusterEvent(framework.POD_GONE, frozenset({node}), gpus=gpus))

    def _on_volume_claim(self, kind: str, pvc: dict[str, Any], _old: dict[str, Any] | None) -> None:
        self.queue.changed(framework.ClusterEvent(framework.PVC, name=_key(pvc)))

    def _on_volume(self, kind: str, pv: dict[str, Any], _old: dict[str, Any] | None) -> None:
        self.volume_cache.volume_changed(pv)
        self.queue.changed(framework.ClusterEvent(framework.PV))

    def _on_storage_class(self, kind: str, _obj: dict[str, Any], _old: dict[str, Any] | None) -> None:
        self.queue.changed(framework.ClusterEvent(framework.STORAGE_CLASS))

    def _on_csi_node(self, kind: str, _obj: dict[str, Any], _old: dict[str, Any] | None) -> None:
        self.queue.changed(framework.ClusterEvent(framework.CSI_NODE))

    def _on_namespace(self, kind: str, _obj: dict[str, Any], _old: dict[str, Any] | None) -> None:
        """A namespace's labels changed: a pod affinity term's namespace selector may now match it (the pods
        waiting for a topology domain's rule are tried again)."""
        self.queue.changed(framework.ClusterEvent(framework.NAMESPACE))

    def _on_node(self, kind: str, node: dict[str, Any], old: dict[str, Any] | None) -> None:
        if kind == "MODIFIED" and decision.same_node(old, node):
            return  # a heartbeat, say: nothing a decision reads changed, so no waiting pod is woken
        name = node["metadata"]["name"]
        if kind == "DELETED":
            self.cache.node_gone(name)
        self.claim_path.nodes_changed()
        gpus = self.claim_path.has_inventory(name)
        self.queue.changed(framework.ClusterEvent(framework.NODE, frozenset({name}), gpus=gpus))

    def _assumed_bound(self, pod: dict[str, Any]) -> bool:
        """We bound this pod (the ledger confirmed its hold) and the watch has not said so yet: never place it again
        from a stale cache."""
        hold = self.ledger.hold(pod["metadata"]["uid"])
        return hold is not None and hold.bound

    # ---- main loop -------------------------------------------------------------------------------------------
    async def watch(self) -> list[asyncio.Task[Any]]:
        """Start every watch and wait until the caches (and so the ledger) are synced. Followers run this too, so
        that a new leader starts from warm caches."""
        tasks = [asyncio.create_task(self.nodes.run(), name="nodes-informer")]
        # Nodes first, so the first decisions for listed pods see every node; leases before pods is not needed:
        # the ledger takes the two in any order.
        await self.nodes.synced.wait()
        tasks += await self.claim_path.watch()
        tasks += await self.gangs.watch()  # Kubernetes' PodGroups, where served
        # The objects the rules read besides pods and nodes: the volume objects, and the namespaces' labels.
        rule_informers = (
            self.volume_claims,
            self.volume_objects,
            self.storage_classes,
            self.csi_nodes,
            self.namespaces,
            self.postfilter.budgets,
        )
        for informer in rule_informers:
            tasks.append(asyncio.create_task(informer.run(), name=f"{informer.name}-informer"))
        for informer in rule_informers:
            await informer.synced.wait()
        tasks.append(asyncio.create_task(self.others.run(), name="other-pods-informer"))
        tasks.append(asyncio.create_task(self.pods.run(), name="pods-informer"))
        await self.others.synced.wait()
        await self.pods.synced.wait()
        self._watching = True
        pending = sum(1 for p in self.pods.cache.values() if not (p.get("spec") or {}).get("nodeName"))
        log.info(
            "caches synced: %d nodes, %d pods of %s (%d pending), %d bound pods of other schedulers, %d GPU holds",
            len(self.nodes.cache),
            len(self.pods.cache),
            self.config.name,
            pending,
            len(self.others.cache),
            sum(1 for _ in self.ledger.holds()),
        )
        return tasks

    async def lead(self) -> None:
        """Schedule until cancelled: the workers, the releases and the sweep. Cancelling stops every write: pods
        being bound when it comes finish (bind and event, at most `STOP_GRACE` seconds), nothing new starts."""
        self._stopping = False
        self.leading = True
        # In the order they are served, so that a new leader's first pass sees a waiting high-priority claim pod
        # (and keeps its nodes) before the lower ones it would otherwise race.
        self.queue.add_ordered(
            (k, p) for k, p in self.pods.cache.items() if decision.is_schedulable_pod(p, self.config.name)
        )
        tasks = [asyncio.create_task(self._worker(), name=f"worker-{i}") for i in range(self.config.workers)]
        tasks.append(asyncio.create_task(self._flush(), name="flush-unschedulable"))
        tasks.append(asyncio.create_task(self.recorder.run(), name="event-series"))
        tasks.append(asyncio.create_task(self.claim_path.lead(), name="claims-lead"))
        try:
            # asyncio.wait, not gather: being cancelled must not cut off the workers' API calls mid-flight.
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for t in done:
                t.result()
        finally:
            self._stopping = True
            self.leading = False
            busy = [t for t in tasks if t in self._busy]
            for t in tasks:
                if t not in self._busy:
                    t.cancel()
            if busy:
                await asyncio.wait(busy, timeout=STOP_GRACE)
            if self._background:
                # The Scheduled events of binds that finished just now get a grace of their own: with one shared
                # deadline a bind finishing late left its event 0.1 s, and the pod was bound with no event (seen on
                # KinD when the leader's pod was deleted mid-rollout). An event decides nothing, so writing it after
                # the workers stopped cannot clash with a new leader.
                await asyncio.wait(list(self._background), timeout=STOP_GRACE)
            for t in [*tasks, *self._background]:
                t.cancel()
            await asyncio.gather(*tasks, *self._background, return_exceptions=True)

    async def run(self) -> None:
        """Watch and schedule, without leader election."""
        tasks = await self.watch()
        try:
            await self.lead()
        finally:
            for t in tasks:
                t.cancel()

    async def _flush(self) -> None:
        while True:
            await asyncio.sleep(self.config.flush_seconds)
            if retried := self.queue.flush():
                log.info("flush: %d unschedulable pods tried again", retried)

    async def _worker(self) -> None:
        me = asyncio.current_task()
        assert me is not None
        while not self._stopping:
            key = await self.queue.work.get()
            if self._stopping:  # leadership is going: leave the key for the next leader's list
                self.queue.work.done(key)
                return
            self._busy.add(me)
            try:
                await self._schedule(key)
            except asyncio.CancelledError:
                raise
            except Exception:  # one bad pod must not stop the worker
                log.exception("unexpected error scheduling %s", key)
                self.queue.failed(key)
            finally:
                self._busy.discard(me)
                self.queue.work.done(key)

    async def _schedule(self, key: str) -> None:
        pod = self.pods.cache.get(key)
        if pod is None or not decision.is_schedulable_pod(pod, self.config.name) or self._assumed_bound(pod):
            return
        self.queue.attempted(key)
        started = time.monotonic()
        kind, result, strategy = ("claim", "error", "") if decision.is_claim_pod(pod) else ("map", "error", "")
        gang = self.gangs.track(key, pod)  # again: its claim (and so its gang) may have come after it
        try:
            if isinstance(gang, GangError):
                await self.report_unschedulable(key, pod, str(gang))
                result = "unschedulable"
            elif gang is not None:
                decided = await self.gangs.schedule(key, gang)
                if decided is None:  # another worker is deciding for its gang: not an attempt of its own
                    kind = ""
                    return
                result, strategy = decided, self.gangs.strategy_of(pod)
            else:
                result, strategy = await self._schedule_pod(key, pod, kind)
        finally:
            if kind:
                self.metrics.attempt(kind, result, strategy, time.monotonic() - started)

    async def _schedule_pod(self, key: str, pod: dict[str, Any], kind: str) -> tuple[str, str]:
        """A lone pod, map or claim, through one cycle: Filter and Reserve (`_reserve_map`, or `_reserve_claim`,
        whose allocator also takes the GPUs' Leases), then PreBind (volumes) and Bind (`bind`), then the outcome:
        confirmed, or forgotten. The attempt's result and strategy for the metrics."""
        reserved = self._reserve_map(key, pod) if kind == "map" else await self._reserve_claim(key, pod)
        if isinstance(reserved, _Refused):
            if kind == "claim" and decision.asks_for_domains(pod):
                self.queue.wait_for_domains(key)
            if reserved.message is not None:
                # PostFilter: preempting pods of lower priority may make room (said in the same message).
                preempting = await self.postfilter.preempt(key, pod, kind)
                message = reserved.message if preempting is None else f"{reserved.message}; {preempting}"
                await self.report_unschedulable(key, pod, message)
            return "unschedulable", reserved.strategy
        hold, placed = reserved
        outcome = await self.bind(key, pod, hold.node, placed)
        if outcome is True:
            if placed is not None:
                await self.claim_path.bound(placed)
            else:
                self.cache.confirm(hold.uid)
        elif outcome is False:
            self.cache.forget(hold.uid)
        # None: unknown whether the bind took effect; the hold stays assumed and the retry binds the same GPUs.
        return _result(outcome), placed.strategy if placed is not None else ""

    def _reserve_map(self, key: str, pod: dict[str, Any]) -> tuple[Hold, None] | _Refused:
        """A map pod's Filter and Reserve: its map entry's node and GPUs, if it fits there, assumed in the cache."""
        # A retry after a bind of unknown outcome: the pod is still unbound in our cache, so what the last attempt
        # assumed for it is not counted against it (the watch counts it again if that bind took effect).
        self.cache.drop_room(pod["metadata"]["uid"])
        verdict = decision.decide(pod, self.nodes.cache, self.config.isolated_gpus, self.snapshot, self.maps)
        if isinstance(verdict, decision.Unschedulable):
            if verdict.node:
                self.queue.wait_on_node(key, verdict.node, verdict.wakes)
            return _Refused(verdict.message)
        hold = Hold(pod["metadata"]["uid"], key, verdict.node, verdict.entry.gpu_ids, "Shared", "map")
        # Its GPUs and its room on the node, before any await: the decision and what it takes are one step.
        conflicts = self.cache.assume(pod, hold)
        if conflicts:
            self.queue.wait_on_node(key, verdict.node, frozenset({framework.GPUS_FREED}))
            c = conflicts[0]
            return _Refused(
                f"GPU {c.gpu} of node {c.node} (map entry {verdict.entry.index}) is held exclusively by "
                f"{c.holder}; waiting for it to be released"
            )
        return hold, None

    async def _reserve_claim(self, key: str, pod: dict[str, Any]) -> tuple[Hold, Placed] | _Refused:
        """A claim pod's Filter, Score and Reserve (the claim path's allocator), and its GPUs' Leases."""
        meta = pod["metadata"]
        try:  # the same reading as the webhook's: a pod it would refuse is reported once, not retried forever
            claim_name = podrequest.claim_name(meta)
        except gpumap.PodMapError as exc:
            return _Refused(str(exc))
        claim = f"{meta['namespace']}/{claim_name}"
        self.queue.names_claim(key, claim)
        if not self.claim_path.enabled:
            return _Refused("pod names a GpuClaim but the GpuClaim CRDs are not installed")
        placed = await self.claim_path.place(pod, claim_name, self.nodes.cache)
        if placed is None:  # its claim is on its way: the claim's arrival tries it again
            return _Refused(None)
        if isinstance(placed, decision.Unschedulable):
            return _Refused(placed.message, self.claim_path.strategy_of(claim))
        return placed.hold, placed

    async def bind(self, key: str, pod: dict[str, Any], node: str, placed: Placed | None = None) -> bool | None:
        """Bind. True: the pod is bound to `node` (now, or already by us); False: it is not and will not be by
        this attempt (gone, or bound elsewhere); None: unknown (a server error or timeout), retried later."""
        meta = pod["metadata"]
        body: dict[str, Any] = {
            "apiVersion": constants.CORE_API_VERSION,
            "kind": "Binding",
            # The uid makes the bind a no-op for a pod recreated under the same name since we saw it.
            "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
            "target": {"apiVersion": constants.CORE_API_VERSION, "kind": "Node", "name": node},
        }
        if placed is not None:  # the apiserver copies them onto the pod in the same write
            body["metadata"]["annotations"] = placed.annotations
        volumes_ready = await self._prebind(key, pod, node)
        if volumes_ready is not True:
            return volumes_ready
        started = time.monotonic()
        path = paths.pod(meta["namespace"], meta["name"])
        try:
            await self.client.post(paths.pod_binding(meta["namespace"], meta["name"]), body)
        except NotFound as exc:
            log.info("not binding %s: %s", key, exc.message)
            self.metrics.bind_conflict()
            return False
        except Conflict:  # bound already: by us (a retry after a lost answer), or by someone else
            self.metrics.bind_conflict()
            return await self._bound_where(key, path, meta["uid"], node)
        except ApiError as exc:
            log.warning("binding %s to %s failed: %s; will retry", key, node, exc)
            self.metrics.bind_error()
            self.queue.failed(key)
            return None
        except TransportError as exc:
            log.warning("binding %s to %s: no answer (%s); will retry", key, node, exc)
            self.metrics.bind_error()
            self.queue.failed(key)
            return None
        self.metrics.observe_bind(time.monotonic() - started)
        self._bound(key, pod, node)
        return True

    async def _prebind(self, key: str, pod: dict[str, Any], node: str) -> bool | None:
        """VolumeBinding's PreBind (scheduler.volumebinder): True when the pod's claims are bound, so the pod may
        be; None while they are being bound (the pod keeps what it assumed and is tried again when its claims
        change, or after its backoff); False when they cannot be (said on the pod; what it assumed is released)."""
        node_object = self.nodes.cache.get(node)
        if node_object is None:
            return False
        outcome = await self.binder.prebind(pod, node_object)
        if outcome is Outcome.READY:
            return True
        self.queue.wait_for_claims(key, self.binder.claims_of(pod))
        if outcome is Outcome.WAITING:
            log.info("%s: %s", key, self.binder.message)
            self.queue.retry(key)
            return None
        await self.report_unschedulable(key, pod, self.binder.message)
        return False

    async def _bound_where(self, key: str, path: str, uid: str, node: str) -> bool | None:
        """A bind answered 409: read the pod to learn whether it is ours on `node`."""
        try:
            current = await self.client.get(path)
        except NotFound:
            return False
        except ApiError:
            self.queue.failed(key)
            return None
        where = (current.get("spec") or {}).get("nodeName")
        if current["metadata"].get("uid") != uid:
            log.info("not binding %s: it was recreated meanwhile", key)
            return False
        self.queue.forget(key)
        if where == node:
            log.info("%s was bound to %s already", key, node)
            return True
        log.warning("%s is bound to %s, not %s: keeping what the API says", key, where, node)
        return False

    def _bound(self, key: str, pod: dict[str, Any], node: str) -> None:
        created = decision.created_at(pod)
        if created is not None:
            kind = "claim" if decision.is_claim_pod(pod) else "map"
            self.metrics.scheduled(kind, max(0.0, time.time() - created))
        self.queue.forget(key)
        log.info("bound %s to %s", key, node)
        self.spawn(
            self.recorder.pod(
                pod, "Normal", constants.EVENT_SCHEDULED, f"Successfully assigned {key} to {node}", series=False
            )
        )

    async def report_unschedulable(self, key: str, pod: dict[str, Any], message: str) -> None:
        """Say why the pod waits: its condition and a FailedScheduling event when the reason changed; a repeat of
        the same reason only counts in the event's series (written back with a backoff, events.SeriesTiming)."""
        self.queue.wait_for_claims(key, self.binder.claims_of(pod))
        if not self.queue.unschedulable(key, message):
            self.recorder.repeated(pod, "Warning", constants.EVENT_FAILED_SCHEDULING, message)
            return
        conditions = {c.get("type"): c for c in (pod.get("status") or {}).get("conditions") or []}
        current = conditions.get("PodScheduled") or {}
        if current.get("status") == "False" and current.get("message") == message:
            return  # said already (by us before a restart, or by the previous leader)
        meta = pod["metadata"]
        self.metrics.unschedulable_reported()
        log.info("cannot schedule %s: %s", key, message)
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": constants.REASON_UNSCHEDULABLE,
            "message": message,
            "lastProbeTime": None,
            "lastTransitionTime": now(),
        }
        try:
            await self.client.patch(
                paths.pod_status(meta["namespace"], meta["name"]),
                {"status": {"conditions": [condition]}},
                kind="strategic",
            )
        except NotFound:
            pass
        except (ApiError, TransportError) as exc:
            log.warning("could not set PodScheduled=False on %s: %s", key, exc)
            self.queue.unreported(key)
        await self.recorder.pod(pod, "Warning", constants.EVENT_FAILED_SCHEDULING, message)

    # ---- events ----------------------------------------------------------------------------------------------
    def spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
