"""The scheduler's GpuClaim path: choose GPUs with the pure allocator, lock them with one Lease per GPU, tell the
pod and the claim, and release the locks when the pod goes away, even if it went away while we were down.

Caches (watches, no polling): GpuClaims, GpuNodeStatuses, the GPU Leases of LEASE_NAMESPACE, and the pods this
path has allocated to (labelled CLAIMED_POD_LABEL). Allocation decisions are serialized by one short lock that
covers no API call: the chosen GPUs are *assumed* held (as kube-scheduler assumes a pod bound) before the lock
is let go, so the next claim never picks them from a view the watch has not caught up with, and the Leases are
then created concurrently. The Lease itself (create fails when it exists) is the cluster-wide lock.

A pending claim pod is reconsidered only when something that could let it fit changes: a GPU is freed, an
inventory changes in what the allocator reads, or its own GpuClaim's spec changes. Taking a GPU never helps
anyone, so the path's own Lease creates and claim status updates wake nobody (the benchmark's W2 showed what
waking every pending pod on every Lease costs: a full re-placement of the queue per GPU taken).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
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
    def __init__(self, client: Client, requeue: Callable[[str | None], None], is_pending_pod: Callable[[str], bool],
                 gc_seconds: float = 60.0):
        self.client = client
        self._requeue = requeue  # requeue("<namespace>/<claim>"): the pods naming that claim; None: every claim pod
        self._is_pending_pod = is_pending_pod  # uid -> still an unbound pod of ours (its leases are in flight)
        self.gc_seconds = gc_seconds
        self.enabled = False
        self.claims = Informer(client, f"{API}/gpuclaims", self._on_claim, name="gpuclaims")
        self.statuses = Informer(client, f"{API}/gpunodestatuses", self._on_status, name="gpunodestatuses")
        self.leases = Informer(client, LEASES, self._on_lease, params={"labelSelector": f"{objects.LEASE_LABEL}=gpu"},
                               name="gpu-leases")
        # GPUs chosen but whose Leases are not created yet: pod uid -> holdings.
        self._assumed: dict[str, list[allocator.Holding]] = {}
        # Views for the allocator, rebuilt only when what they are made of changes (a claim costs O(nodes) cheap
        # steps instead of O(nodes + leases) parsing): each GpuNodeStatus as a Node, keyed by the two
        # resourceVersions it comes from; the usable inventory per set of tolerations, dropped on any node or
        # inventory event; each Lease as (holders, holding), keyed by its resourceVersion.
        self._nodes: dict[str, tuple[tuple[str, str], allocator.Node]] = {}
        self._usable: dict[str, list[allocator.Node]] = {}
        self._devices: dict[tuple[allocator.Device, ...], tuple[allocator.Device, ...]] = {}
        self._lease_views: dict[str, tuple[str, list[str], allocator.Holding | None]] = {}
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
    def _on_claim(self, kind: str, claim: dict[str, Any], old: dict[str, Any] | None) -> None:
        meta = claim["metadata"]
        # Status updates (ours) leave metadata.generation alone; only a new claim or a spec change can help.
        if kind == "ADDED" or (kind == "MODIFIED" and old is not None
                               and old["metadata"].get("generation") != meta.get("generation")):
            self._requeue(f"{meta['namespace']}/{meta['name']}")

    def _on_status(self, kind: str, status: dict[str, Any], old: dict[str, Any] | None) -> None:
        self.nodes_changed()
        if kind == "DELETED":
            self._nodes.pop(status["metadata"]["name"], None)
        if kind != "MODIFIED" or old is None or _allocator_view(status) != _allocator_view(old):
            self._requeue(None)

    def nodes_changed(self) -> None:
        """A Node or a GpuNodeStatus changed: the usable inventory must be worked out again."""
        self._usable.clear()

    def _on_lease(self, kind: str, lease: dict[str, Any], old: dict[str, Any] | None) -> None:
        if kind == "DELETED":
            self._lease_views.pop(f"{lease['metadata'].get('namespace')}/{lease['metadata']['name']}", None)
        if kind == "DELETED" or (kind == "MODIFIED" and old is not None
                                 and len(objects.lease_holders(lease)) < len(objects.lease_holders(old))):
            self._requeue(None)

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
        inventory = self._usable_inventory(nodes, (pod.get("spec") or {}).get("tolerations") or [])
        uid = meta["uid"]
        async with self._lock:  # no await inside: the decision and the assumption are one step
            holdings = self._holdings(except_pod=uid)
            holdings += [h for pod_uid, held in self._assumed.items() if pod_uid != uid for h in held]
            outcome = allocator.allocate(request, inventory, holdings)
            if not isinstance(outcome, allocator.NoFit):
                self._assumed[uid] = [allocator.Holding(outcome.node, outcome.gpu_ids, request.exclusivity)]
        if isinstance(outcome, allocator.NoFit):
            await self.set_claim_status(claim, {"phase": outcome.phase, "message": outcome.message})
            return decision.Unschedulable(f"GpuClaim {claim_name}: {outcome.message}")
        try:
            acquired = await self._acquire(outcome, uid, request.exclusivity)
        finally:
            self._assumed.pop(uid, None)  # from here on the Leases in the cache say it (or nothing holds them)
        if not acquired:
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

    def _usable_inventory(self, nodes: Mapping[str, dict[str, Any]],
                          tolerations: list[Mapping[str, Any]]) -> list[allocator.Node]:
        """The allocator's nodes: every inventory whose node exists and takes a pod with `tolerations` now."""
        signature = json.dumps(tolerations, sort_keys=True)
        usable = self._usable.get(signature)
        if usable is not None:
            return usable
        usable = []
        for key, status in self.statuses.cache.items():
            name = (status.get("spec") or {}).get("nodeName") or status["metadata"]["name"]
            node = nodes.get(name)
            if node is None or decision.node_problem(node, tolerations) is not None:
                continue
            version = (status["metadata"].get("resourceVersion", ""), node["metadata"].get("resourceVersion", ""))
            cached = self._nodes.get(key)
            if cached is None or cached[0] != version:
                view = objects.node_from_status(status, node["metadata"].get("labels") or {})
                # Equal device lists share one tuple, so the allocator can treat such nodes as one state.
                view = dataclasses.replace(view, devices=self._devices.setdefault(view.devices, view.devices))
                cached = self._nodes[key] = (version, view)
            usable.append(cached[1])
        if len(self._usable) > 64:  # many distinct toleration sets: keep the memory bounded
            self._usable.clear()
        self._usable[signature] = usable
        return usable

    def _holdings(self, except_pod: str) -> list[allocator.Holding]:
        """What the GPU Leases in the cache hold, leaving out the holdings of pod `except_pod`."""
        out = []
        for key, lease in self.leases.cache.items():
            version = lease["metadata"].get("resourceVersion", "")
            view = self._lease_views.get(key)
            if view is None or view[0] != version:
                held = objects.holdings_from_leases([lease])
                view = self._lease_views[key] = (version, objects.lease_holders(lease), held[0] if held else None)
            _, holders, holding = view
            if holding is not None and (len(holders) > 1 or holders[0] != except_pod):
                out.append(holding)
        return out

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
        """Create the Leases of every allocated GPU at once; all or nothing."""
        results = await asyncio.gather(*(self._acquire_one(alloc.node, gpu, pod_uid, exclusivity)
                                         for gpu in alloc.gpu_ids), return_exceptions=True)
        if all(r is True for r in results):
            return True
        await self.release(pod_uid)  # also the Leases that were created: a pending pod must hold nothing
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return False

    async def _acquire_one(self, node: str, gpu: int, pod_uid: str, exclusivity: str) -> bool:
        body = objects.lease_body(node, gpu, pod_uid, exclusivity)
        try:
            created = await self.client.post(LEASES, body)
        except ApiError as exc:
            joined = exc.status == 409 and await self._join(node, gpu, pod_uid, exclusivity)
            if not joined:
                log.info("lease %s is taken: %s", body["metadata"]["name"], exc.message)
            return joined
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
        mine = [(key, lease) for key, lease in self.leases.cache.items() if pod_uid in objects.lease_holders(lease)]
        # Forget the whole set before the first API call: a claim woken by the first deletion must see every GPU
        # of this pod free, not some of them (the Lease stays the lock if a deletion then fails).
        for key, lease in mine:
            if objects.lease_holders(lease) == [pod_uid]:
                self.leases.cache.pop(key, None)
        for key, lease in mine:
            holders = objects.lease_holders(lease)
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


def _allocator_view(status: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """What the allocator reads of a GpuNodeStatus (the agent also rewrites inUseBy, which it does not read)."""
    return [(d.get("id"), d.get("health"), d.get("island"), d.get("bandwidthGBps"))
            for d in (status.get("status") or {}).get("devices") or []]
