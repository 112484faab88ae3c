"""The Lease reconciler: make sure a pod that holds nothing is named by no GPU Lease, and a bound claim pod's
Leases exist, even if something went away while the scheduler was down.

Releasing is desired state, not a call: whatever makes a pod hold nothing (deleted, finished, a failed attempt)
puts the Leases that name it on a keyed work queue (`reconcile`); a worker reads the Lease fresh, asks the API about
any holder the ledger cannot vouch for, and deletes (or rewrites) it with the resourceVersion as precondition,
retrying with the work queue's backoff until the API agrees. A sweep (when a replica starts leading, then every
minute) compares the ledger with the Lease cache, so a Lease that changed while this replica did not lead, or whose
release was never asked for, is reconciled too. Only the leader writes; followers keep the ledger warm from the
Lease watch.

It reads and writes GPU Leases and reads pods; it tells the ledger what the API said and the scheduling queue
that GPUs may have been freed. It must not write pods or claims.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpu_scheduling import constants, gpumap
from gpu_scheduling.claims import objects
from gpu_scheduling.claims.ledger import GpuKey, LeaseRecord, Ledger
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import Conflict, NotFound
from gpu_scheduling.kube.informer import Informer
from gpu_scheduling.kube.workqueue import WorkQueue
from gpu_scheduling.scheduler import decision
from gpu_scheduling.scheduler.metrics import Metrics
from gpu_scheduling.scheduler.queue import SchedulingQueue

if TYPE_CHECKING:
    from gpu_scheduling.kube.client import Client

log = logging.getLogger(__name__)


class LeaseReconciler:
    def __init__(
        self,
        client: Client,
        ledger: Ledger,
        queue: SchedulingQueue,
        metrics: Metrics,
        *,
        pods: Mapping[str, dict[str, Any]],
        uids: Mapping[str, str],
        maps: gpumap.ParseCache,
        scheduler_name: str,
        sweep_seconds: float = 60.0,
        workers: int = 4,
    ):
        self.client = client
        self.ledger = ledger
        self.queue = queue  # told when the ledger changed, so the pods a freed GPU could help are tried again
        self.metrics = metrics
        self._pods = pods  # the scheduler's pod cache, "<namespace>/<name>" -> pod
        self._uids = uids  # pod uid -> its key in that cache
        self._maps = maps  # the scheduler's map parse cache
        self.scheduler_name = scheduler_name
        self.sweep_seconds = sweep_seconds
        self.workers = workers
        self.leading = False
        self.informer = Informer(
            client,
            paths.GPU_LEASES,
            self._on_lease,
            params={"labelSelector": constants.GPU_LEASE_SELECTOR},
            name="gpu-leases",
        )
        self.releases: WorkQueue[GpuKey] = WorkQueue(base_delay=0.5, max_delay=30.0)

    async def lead(self) -> None:
        """Release what must be released, until cancelled (leadership lost or shutdown)."""
        self.leading = True
        try:
            await asyncio.gather(self._sweep_loop(), *(self._release_worker() for _ in range(self.workers)))
        finally:
            self.leading = False

    def _on_lease(self, kind: str, lease: dict[str, Any], _old: dict[str, Any] | None) -> None:
        record = objects.lease_record(lease)
        if record is None:
            return
        if kind == "DELETED":
            self.ledger.lease_deleted(record.key)
        else:
            self.ledger.lease_seen(record)
            if self.leading and not self.ledger.lease_plan(record).settled:
                self.releases.add(record.key)
        self.queue.ledger_changed(self.ledger)

    def reconcile(self, keys: set[GpuKey]) -> None:
        """These Leases may name pods that hold nothing now: make the API agree (leader only)."""
        if self.leading:
            for key in keys:
                self.releases.add(key)

    async def _release_worker(self) -> None:
        while True:
            key = await self.releases.get()
            try:
                settled = await self._reconcile_lease(key)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure is a retry, never a dropped release
                settled = False
                log.warning(
                    "reconciling lease %s failed (%s: %s); retrying", objects.lease_name(*key), type(exc).__name__, exc
                )
            finally:
                self.releases.done(key)
            if settled:
                self.releases.forget(key)
            else:
                self.metrics.lease_reconciled("retried")
                self.releases.add_rate_limited(key)

    async def _reconcile_lease(self, key: GpuKey) -> bool:
        """Make the Lease of GPU `key` name exactly the live pods the ledger says hold it. True when done."""
        name = objects.lease_name(*key)
        try:
            lease: dict[str, Any] | None = await self.client.get(paths.lease(constants.LEASE_NAMESPACE, name))
        except NotFound:
            lease = None
        record = objects.lease_record(lease) if lease is not None else None
        if record is not None:
            plan = self.ledger.lease_plan(record)
            for uid, ref in plan.verify.items():
                await self._verify(uid, ref)
            plan = self.ledger.lease_plan(record)
            if plan.verify:
                return False
            if plan.remove:
                # Done when the API took it (the watch then frees the GPU); changed meanwhile: plan again.
                return await self._remove_holders(record, plan.keep)
        missing = [
            h
            for h in self.ledger.holders_of(key)
            if h.source == "claim" and h.bound and (record is None or h.uid not in record.holders)
        ]
        if not missing:
            return True
        if record is None or not record.holders:  # a bound pod's lock is gone: put it back
            body = objects.lease_body(key[0], key[1], missing[0].exclusivity, {h.uid: h.pod for h in missing})
            if record is None:
                await self.client.post(paths.GPU_LEASES, body)
                self.metrics.lease_reconciled("recreated")
                log.warning("re-created lease %s for %s", name, ", ".join(h.pod for h in missing))
                return False
        log.error(
            "lease %s names %s but %s is bound to that GPU: a GPU is allocated twice",
            name,
            ",".join(record.holders) if record else "",
            ", ".join(h.pod for h in missing),
        )
        return True

    async def _remove_holders(self, record: LeaseRecord, keep: tuple[str, ...]) -> bool:
        path = paths.lease(constants.LEASE_NAMESPACE, record.name)
        try:
            if keep:
                lease = await self.client.get(path)
                if lease["metadata"].get("resourceVersion") != record.resource_version:
                    return False  # changed since we planned: plan again
                holders = {uid: record.pods.get(uid, "") for uid in keep}
                lease["metadata"].setdefault("annotations", {}).update(objects.lease_holder_annotations(holders))
                lease.setdefault("spec", {})["holderIdentity"] = keep[0]
                await self.client.request("PUT", path, body=lease)
                self.metrics.lease_reconciled("updated")
            else:
                await self.client.request(
                    "DELETE",
                    path,
                    body={
                        "kind": "DeleteOptions",
                        "apiVersion": constants.CORE_API_VERSION,
                        "preconditions": {"resourceVersion": record.resource_version},
                    },
                )
                self.metrics.lease_reconciled("released")
            log.info("released lease %s (kept: %s)", record.name, ",".join(keep) or "nobody")
            return True
        except NotFound:  # gone already
            return True
        except Conflict:  # changed meanwhile: plan again
            return False

    async def _verify(self, uid: str, ref: str) -> None:
        """Ask the API whether pod `uid` (named `ref`, "<namespace>/<name>", when known) still holds GPUs, and tell
        the ledger: gone or finished, bound (what it holds), or pending (nothing)."""
        if not ref:
            cached_key = self._uids.get(uid)
            cached = self._pods.get(cached_key) if cached_key else None
            if cached is not None:
                ref = f"{cached['metadata']['namespace']}/{cached['metadata']['name']}"
        pod: dict[str, Any] | None = None
        if ref:
            namespace, _, name = ref.partition("/")
            with contextlib.suppress(NotFound):
                pod = await self.client.get(paths.pod(namespace, name))
        else:
            pod = await self._find_pod(uid)
        if pod is None or pod["metadata"].get("uid") != uid or decision.is_finished(pod):
            self.reconcile(self.ledger.pod_gone(uid))
        elif (pod.get("spec") or {}).get("nodeName"):
            hold = objects.hold_from_pod(pod, self._maps)
            if hold is None:
                self.reconcile(self.ledger.pod_gone(uid))  # bound but holds no GPU
            else:
                self.reconcile(self.ledger.pod_bound(hold))
        else:
            self.ledger.pod_pending(uid)
        self.queue.ledger_changed(self.ledger)

    async def _find_pod(self, uid: str) -> dict[str, Any] | None:
        """A Lease without the holder's name (written by an older version): look for the uid in a fresh list."""
        async for page in self.client.list_pages(
            paths.ALL_PODS, fieldSelector=f"spec.schedulerName={self.scheduler_name}"
        ):
            items: list[dict[str, Any]] = page.get("items") or []
            for pod in items:
                if pod["metadata"].get("uid") == uid:
                    return pod
        return None

    def sweep(self) -> int:
        """Compare the ledger with the Lease informer's cache (the API's view, kept by list and watch: a watch
        that falls behind is answered 410 and lists again, so nothing is missed for good); queue every Lease that
        disagrees (and every GPU of a bound pod without its Lease). Returns how many were queued. No API call: a
        fresh list of every GPU Lease each minute made the apiserver serialize, and the scheduler parse, 8000 Leases
        at 1000 nodes to learn what the watch had already said."""
        seen: dict[GpuKey, LeaseRecord] = {}
        for lease in self.informer.cache.values():
            record = objects.lease_record(lease)
            if record is not None:
                seen[record.key] = record
        queue = {key for key, record in seen.items() if not self.ledger.lease_plan(record).settled}
        queue |= {lease.key for lease in self.ledger.leases() if lease.key not in seen}
        for hold in self.ledger.holds():
            if hold.source == "claim" and hold.bound:
                queue |= {key for key in hold.gpus if key not in seen or hold.uid not in seen[key].holders}
        for key in queue:
            self.releases.add(key)
        if queue:
            log.info("sweep: %d GPU leases to reconcile", len(queue))
        return len(queue)

    async def _sweep_loop(self) -> None:
        while True:
            try:
                self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - keep sweeping
                log.warning("lease sweep failed (%s: %s)", type(exc).__name__, exc)
            await asyncio.sleep(self.sweep_seconds)
