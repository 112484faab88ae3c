"""The scheduler's GpuClaim path: choose GPUs with the pure allocator, lock them with one Lease per GPU, tell the
pod and the claim, and release the locks when the pod goes away, even if it went away while we were down.

Caches (watches, no polling): GpuClaims, GpuNodeStatuses, the GPU Leases of LEASE_NAMESPACE, and the pods this
path has allocated to (labelled CLAIMED_POD_LABEL). Allocation decisions are serialized by one lock, and each
acquired Lease goes into the cache at once, so two claims never pick the same free GPU from a stale view; the
Lease itself (create fails when it exists) is the cluster-wide lock.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import Any

from gpu_scheduling import constants
from gpu_scheduling.claims import allocator, objects
from gpu_scheduling.kube.client import ApiError, Client
from gpu_scheduling.kube.informer import Informer
from gpu_scheduling.scheduler import decision

log = logging.getLogger(__name__)

API = f"/apis/{constants.CLAIM_GROUP}/{constants.CLAIM_VERSION}"
LEASES = objects.LEASES_PATH


@dataclasses.dataclass(frozen=True)
class Placed:
    claim: dict[str, Any]
    allocation: allocator.Allocation


class ClaimPath:
    def __init__(self, client: Client, requeue: Callable[[], None], is_pending_pod: Callable[[str], bool],
                 gc_seconds: float = 60.0):
        self.client = client
        self._requeue = requeue
        self._is_pending_pod = is_pending_pod  # uid -> still an unbound pod of ours (its leases are in flight)
        self.gc_seconds = gc_seconds
        self.enabled = False
        self.claims = Informer(client, f"{API}/gpuclaims", self._changed, name="gpuclaims")
        self.statuses = Informer(client, f"{API}/gpunodestatuses", self._changed, name="gpunodestatuses")
        self.leases = Informer(client, LEASES, self._changed, params={"labelSelector": f"{objects.LEASE_LABEL}=gpu"},
                               name="gpu-leases")
        self.claimed_pods = Informer(client, "/api/v1/pods", self._on_claimed_pod,
                                     params={"labelSelector": objects.CLAIMED_POD_LABEL}, name="claimed-pods")
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()

    # ---- start-up ---------------------------------------------------------------------------------------------
    async def start(self) -> list[asyncio.Task[Any]]:
        """Watch what the claim path needs when the CRDs are installed; otherwise stay disabled."""
        try:
            await self.client.get(API)
        except ApiError as exc:
            if exc.status == 404:
                log.info("GpuClaim CRDs are not installed: claim pods will be reported unschedulable")
                return []
            raise
        informers = (self.claims, self.statuses, self.leases, self.claimed_pods)
        tasks = [asyncio.create_task(i.run(), name=f"{i.name}-informer") for i in informers]
        for i in informers:
            await i.synced.wait()
        self.enabled = True
        await self.collect_garbage()
        tasks.append(asyncio.create_task(self._gc_loop(), name="lease-gc"))
        return tasks

    def ready(self) -> bool:
        return all(i.synced.is_set() for i in (self.claims, self.statuses, self.leases, self.claimed_pods))

    # ---- watch handlers ---------------------------------------------------------------------------------------
    def _changed(self, _kind: str, _obj: dict[str, Any], _old: dict[str, Any] | None) -> None:
        self._requeue()

    def _on_claimed_pod(self, kind: str, pod: dict[str, Any], _old: dict[str, Any] | None) -> None:
        if kind == "DELETED" or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            self._spawn(self.release(pod["metadata"]["uid"]))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- placing a pod ----------------------------------------------------------------------------------------
    async def place(self, pod: dict[str, Any], nodes: Mapping[str, dict[str, Any]]) -> Placed | decision.Unschedulable:
        meta = pod["metadata"]
        claim_name = meta["annotations"][constants.CLAIM_ANNOTATION].strip()
        claim = self.claims.cache.get(f"{meta['namespace']}/{claim_name}")
        if claim is None:
            return decision.Unschedulable(f"GpuClaim {claim_name!r} not found in namespace {meta['namespace']}")
        request = objects.request_from_claim(claim)
        tolerations = (pod.get("spec") or {}).get("tolerations") or []
        inventory = []
        for status in self.statuses.cache.values():
            name = (status.get("spec") or {}).get("nodeName") or status["metadata"]["name"]
            node = nodes.get(name)
            if node is not None and decision.node_problem(node, tolerations) is None:
                inventory.append(objects.node_from_status(status, node["metadata"].get("labels") or {}))
        async with self._lock:
            holdings = objects.holdings_from_leases(self.leases.cache.values(), except_pod=meta["uid"])
            outcome = allocator.allocate(request, inventory, holdings)
            if isinstance(outcome, allocator.NoFit):
                await self.set_claim_status(claim, {"phase": outcome.phase, "message": outcome.message})
                return decision.Unschedulable(f"GpuClaim {claim_name}: {outcome.message}")
            if not await self._acquire(outcome, meta["uid"], request.exclusivity):
                return decision.Unschedulable(f"GpuClaim {claim_name}: GPUs {outcome.allocated} were taken "
                                              "meanwhile; retrying")
        message = outcome.message
        if (claim.get("spec") or {}).get("gangRef"):
            message += f"; gangRef {claim['spec']['gangRef']!r} is not supported yet, the claim is served alone"
        ids = ",".join(map(str, outcome.gpu_ids))
        await self.client.patch(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", {
            "metadata": {
                "labels": {objects.CLAIMED_POD_LABEL: "true"},
                "annotations": {constants.ALLOCATED_ANNOTATION: outcome.allocated, constants.GPU_IDS_ANNOTATION: ids},
            }})
        await self.set_claim_status(claim, {"phase": "Reserved", "nodeName": outcome.node,
                                            "gpuIds": list(outcome.gpu_ids), "allocated": outcome.allocated,
                                            "message": message})
        return Placed(claim, dataclasses.replace(outcome, message=message))

    async def bound(self, placed: Placed) -> None:
        await self.set_claim_status(placed.claim, {"phase": "Bound", "message": placed.allocation.message})

    async def set_claim_status(self, claim: dict[str, Any], status: dict[str, Any]) -> None:
        meta = claim["metadata"]
        try:
            await self.client.patch(f"{API}/namespaces/{meta['namespace']}/gpuclaims/{meta['name']}/status",
                                    {"status": status})
        except ApiError as exc:
            log.warning("could not update GpuClaim %s/%s: %s", meta["namespace"], meta["name"], exc)

    # ---- leases -----------------------------------------------------------------------------------------------
    async def _acquire(self, alloc: allocator.Allocation, pod_uid: str, exclusivity: str) -> bool:
        for gpu in alloc.gpu_ids:
            body = objects.lease_body(alloc.node, gpu, pod_uid, exclusivity)
            try:
                created = await self.client.post(LEASES, body)
            except ApiError as exc:
                joined = exc.status == 409 and await self._join(alloc.node, gpu, pod_uid, exclusivity)
                if not joined:
                    log.info("lease %s is taken: %s", body["metadata"]["name"], exc.message)
                    await self.release(pod_uid)
                    return False
            else:
                self.leases.cache[f"{constants.LEASE_NAMESPACE}/{created['metadata']['name']}"] = created
        return True

    async def _join(self, node: str, gpu: int, pod_uid: str, exclusivity: str) -> bool:
        """The lease exists: ours already (a retry), or a Shared one a Shared claim may join."""
        name = objects.lease_name(node, gpu)
        lease = await self.client.get(f"{LEASES}/{name}")
        holders = objects.lease_holders(lease)
        if pod_uid in holders:
            return True
        labels = lease["metadata"].get("labels") or {}
        if exclusivity != "Shared" or labels.get(objects.LEASE_EXCLUSIVITY_LABEL) != "Shared":
            return False
        lease["metadata"].setdefault("annotations", {})[objects.LEASE_HOLDERS_ANNOTATION] = ",".join(holders + [pod_uid])
        try:  # the resourceVersion makes this a compare-and-swap
            updated = await self.client.request("PUT", f"{LEASES}/{name}", body=lease)
        except ApiError:
            return False
        self.leases.cache[f"{constants.LEASE_NAMESPACE}/{name}"] = updated
        return True

    async def release(self, pod_uid: str) -> None:
        """Give up every GPU lease `pod_uid` holds."""
        for key, lease in list(self.leases.cache.items()):
            holders = objects.lease_holders(lease)
            if pod_uid not in holders:
                continue
            name = lease["metadata"]["name"]
            rest = [h for h in holders if h != pod_uid]
            try:
                if rest:
                    update = copy.deepcopy(lease)
                    update["metadata"]["annotations"][objects.LEASE_HOLDERS_ANNOTATION] = ",".join(rest)
                    update["spec"]["holderIdentity"] = rest[0]
                    self.leases.cache[key] = await self.client.request("PUT", f"{LEASES}/{name}", body=update)
                else:
                    await self.client.request("DELETE", f"{LEASES}/{name}", body={
                        "kind": "DeleteOptions", "apiVersion": "v1",
                        "preconditions": {"resourceVersion": lease["metadata"]["resourceVersion"]}})
                    self.leases.cache.pop(key, None)
                log.info("released lease %s of pod %s", name, pod_uid)
            except ApiError as exc:
                if exc.status != 404:
                    log.warning("could not release lease %s of pod %s: %s (the next sweep retries)", name, pod_uid, exc)

    async def collect_garbage(self) -> None:
        """Release leases whose pods are gone or finished: also those that went away while we were down."""
        alive = {p["metadata"]["uid"] for p in self.claimed_pods.cache.values()
                 if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")}
        dead = {h for lease in self.leases.cache.values() for h in objects.lease_holders(lease)
                if h not in alive and not self._is_pending_pod(h)}
        for uid in dead:
            await self.release(uid)
        if dead:
            log.info("released the leases of %d pods that are gone", len(dead))

    async def _gc_loop(self) -> None:
        while True:
            await asyncio.sleep(self.gc_seconds)
            try:
                await self.collect_garbage()
            except Exception:  # keep sweeping
                log.exception("lease sweep failed")
