"""The scheduler's GpuClaim path: choose GPUs with the pure allocator over the GPU ledger, lock them with one Lease
per GPU, and make sure a pod that holds nothing is named by no Lease, even if it went away while we were down.

Watches (no polling): GpuClaims, GpuNodeStatuses, the GpuSchedulingPolicy and the GPU Leases of LEASE_NAMESPACE.
The pods themselves come from the scheduler's one pod watch (scheduler.controller), which feeds the ledger with
what bound pods hold.

Placing a claim pod: the allocator reads the ledger (`Ledger.holdings`, cached per node), the chosen GPUs are
*assumed* in the ledger before the first await (so the next claim never picks them from a view the watch has not
caught up with), and the Leases are created concurrently; the Lease (create fails when it exists) is the
cluster-wide lock. The controller then binds, carrying the allocation annotations on the Binding.

Releasing is desired state, not a call: whatever makes a pod hold nothing (deleted, finished, a failed attempt)
puts the Leases that name it on a keyed queue; a worker reads the Lease fresh, asks the API about any holder the
ledger cannot vouch for, and deletes (or rewrites) it with the resourceVersion as precondition, retrying with
backoff until the API agrees. A sweep compares the ledger with a fresh list of the Leases, so nothing a watch
missed stays locked. Only the leader writes; followers keep their caches and ledger warm.

Choosing a node: the claim's `spec.strategy`, else the GpuSchedulingPolicy's `defaultStrategy`, else the
scheduler's `--strategy` (claims.allocator has the rules). RoundRobin resumes after the node of the newest
RoundRobin allocation among the claims (`status.allocatedAt`), so its cursor survives a restart with no object of
its own. Order: with queueOrder Priority a claim pod that waits for busy GPUs keeps every node it could use from
pods of lower priority (claims.priority); there is no preemption. A policy change applies from the next decision;
the leader then writes the policy's `status.observedGeneration` and an Event, reconciled until the API agrees.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from gpu_scheduling import constants, devices
from gpu_scheduling.claims import allocator, objects, priority
from gpu_scheduling.claims.ledger import GpuKey, Hold, LeaseRecord, Ledger
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import ApiError, Conflict, NotFound, TransportError
from gpu_scheduling.kube.informer import Informer
from gpu_scheduling.kube.workqueue import WorkQueue
from gpu_scheduling.scheduler import decision, fit
from gpu_scheduling.scheduler.metrics import Metrics

if TYPE_CHECKING:
    from gpu_scheduling.kube.client import Client

log = logging.getLogger(__name__)

TRANSIENT = (ApiError, TransportError, TimeoutError)


#: Reason of the Event the leader records on the GpuSchedulingPolicy when it applies a generation.
EVENT_POLICY_APPLIED = "PolicyApplied"
#: Namespace of Events about cluster-scoped objects (as kubectl and the controllers put them).
CLUSTER_EVENTS_NAMESPACE = "default"

EventSink = Callable[[dict[str, Any], str, str, str, str], Awaitable[None]]
"""(involvedObject, namespace, type, reason, message): records an Event (the controller's)."""


def _micro_now() -> str:
    """RFC 3339 with microseconds: `allocatedAt` orders allocations made within one second."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclasses.dataclass(frozen=True)
class Placed:
    claim: dict[str, Any]
    hold: Hold
    message: str
    strategy: str = constants.DEFAULT_STRATEGY

    @property
    def annotations(self) -> dict[str, str]:
        """What the Binding carries onto the pod."""
        ids = ",".join(map(str, self.hold.gpu_ids))
        return {
            constants.ALLOCATED_ANNOTATION: f"{self.hold.node}:{ids}",
            constants.GPU_IDS_ANNOTATION: ids,
            constants.EXCLUSIVITY_ANNOTATION: self.hold.exclusivity,
        }


class ClaimPath:
    def __init__(
        self,
        client: Client,
        ledger: Ledger,
        *,
        changed: Callable[[], None],
        claim_changed: Callable[[str], None],
        inventory_changed: Callable[[], None],
        cached_pod: Callable[[str], dict[str, Any] | None],
        scheduler_name: str,
        sweep_seconds: float = 60.0,
        workers: int = 4,
        strategy: str = constants.DEFAULT_STRATEGY,
        event: EventSink | None = None,
        queue_changed: Callable[[], None] | None = None,
        metrics: Metrics | None = None,
        usage: fit.NodeUsage | None = None,
        room_made: Callable[[str], None] | None = None,
    ):
        self.client = client
        self.usage = usage if usage is not None else fit.NodeUsage()
        """What the pods on each node take (kept by the controller): a claim pod goes only where it fits."""
        self._room_made = room_made or (lambda _node: None)  # a node has more room: wake who waits for it
        self.ledger = ledger
        self._changed = changed  # the ledger changed: the controller wakes the pods a freed GPU could help
        self._claim_changed = claim_changed  # "<namespace>/<claim>": its spec changed or it appeared
        self._inventory_changed = inventory_changed
        self._cached_pod = cached_pod  # uid -> the pod in the scheduler's cache, if any
        self.scheduler_name = scheduler_name
        self.flag_strategy = strategy
        self.metrics = metrics or Metrics()
        self._event = event
        self._queue_changed = queue_changed or (lambda: None)
        # What the next decision applies: the policy's, else the flag's (see `_apply_policy`).
        self.strategy: allocator.Strategy = cast("allocator.Strategy", strategy)
        self.queue_order: str = constants.DEFAULT_QUEUE_ORDER
        self.policy_enabled = False
        self._policy_dirty = asyncio.Event()
        self._cursor: tuple[str, str] = ("", "")  # (allocatedAt, node) of the newest RoundRobin allocation
        self.reservations = priority.Reservations()
        self.metrics.set_policy(self.strategy, self.queue_order)
        self.sweep_seconds = sweep_seconds
        self.workers = workers
        self.enabled = False
        self.leading = False
        self.claims = Informer(client, paths.ALL_GPU_CLAIMS, self._on_claim, name=constants.GPU_CLAIM_PLURAL)
        self.statuses = Informer(client, paths.NODE_STATUSES, self._on_status, name=constants.GPU_NODE_STATUS_PLURAL)
        self.leases = Informer(
            client,
            paths.GPU_LEASES,
            self._on_lease,
            params={"labelSelector": constants.GPU_LEASE_SELECTOR},
            name="gpu-leases",
        )
        self.policy = Informer(
            client,
            paths.SCHEDULING_POLICIES,
            self._on_policy,
            params={"fieldSelector": f"metadata.name={constants.POLICY_NAME}"},
            name=constants.GPU_SCHEDULING_POLICY_PLURAL,
        )
        self.releases: WorkQueue[GpuKey] = WorkQueue(base_delay=0.5, max_delay=30.0)
        # The allocator's inventory, rebuilt only when what it is made of changes: each GpuNodeStatus as a Node,
        # keyed by the two resourceVersions it comes from; the usable nodes per set of tolerations, dropped on any
        # node or inventory event; equal device tuples shared so the allocator can treat such nodes as one state.
        self._nodes: dict[str, tuple[tuple[str, str], allocator.Node]] = {}
        self._usable: dict[str, list[allocator.Node]] = {}
        self._devices: dict[tuple[allocator.Device, ...], tuple[allocator.Device, ...]] = {}
        self._written: dict[str, dict[str, Any]] = {}  # claim uid -> the status we last wrote
        self.stats = {
            "lease_creates": 0,
            "lease_deletes": 0,
            "lease_updates": 0,
            "release_retries": 0,
            "claim_status_writes": 0,
        }

    # ---- start-up ---------------------------------------------------------------------------------------------
    async def watch(self) -> list[asyncio.Task[Any]]:
        """Watch what the claim path needs when the CRDs are installed; otherwise stay disabled."""
        try:
            api = await self.client.get(paths.GPU_API)
        except NotFound:
            log.info("GpuClaim CRDs are not installed: claim pods will be reported unschedulable")
            return []
        informers: tuple[Informer, ...] = (self.claims, self.statuses, self.leases)
        served = {r.get("name") for r in api.get("resources") or []}
        if constants.GPU_SCHEDULING_POLICY_PLURAL in served:
            informers += (self.policy,)
            self.policy_enabled = True
        else:
            log.info(
                "the GpuSchedulingPolicy CRD is not installed: strategy %s from the flag, queue order %s",
                self.strategy,
                self.queue_order,
            )
        tasks = [asyncio.create_task(i.run(), name=f"{i.name}-informer") for i in informers]
        for i in informers:
            await i.synced.wait()
        self.enabled = True
        return tasks

    async def lead(self) -> None:
        """Release what must be released, until cancelled (leadership lost or shutdown)."""
        if not self.enabled:
            await asyncio.Event().wait()
        self.leading = True
        self._policy_dirty.set()  # say what this leader applies
        try:
            await asyncio.gather(
                self._sweep_loop(), self._policy_loop(), *(self._release_worker() for _ in range(self.workers))
            )
        finally:
            self.leading = False

    # ---- watch handlers ---------------------------------------------------------------------------------------
    def _on_claim(self, kind: str, claim: dict[str, Any], old: dict[str, Any] | None) -> None:
        meta = claim["metadata"]
        status = claim.get("status") or {}
        if status.get("strategy") == "RoundRobin" and status.get("nodeName"):
            self._advance_cursor(str(status.get("allocatedAt") or ""), status["nodeName"])
        if kind == "DELETED":
            self._written.pop(meta.get("uid", ""), None)
            return
        # Status updates (ours) leave metadata.generation alone; only a new claim or a spec change can help.
        if kind == "ADDED" or (
            kind == "MODIFIED" and old is not None and old["metadata"].get("generation") != meta.get("generation")
        ):
            self._claim_changed(f"{meta['namespace']}/{meta['name']}")

    def _on_status(self, kind: str, status: dict[str, Any], old: dict[str, Any] | None) -> None:
        self.nodes_changed()
        if kind == "DELETED":
            self._nodes.pop(status["metadata"]["name"], None)
        if kind != "MODIFIED" or old is None or _allocator_view(status) != _allocator_view(old):
            self._inventory_changed()

    def _advance_cursor(self, at: str, node: str) -> None:
        if at >= self._cursor[0]:
            self._cursor = (at, node)

    def strategy_of(self, claim_key: str) -> str:
        """The strategy that places the claim `namespace/name` now ("" when the claim is unknown)."""
        claim = self.claims.cache.get(claim_key)
        if claim is None:
            return ""
        return str((claim.get("spec") or {}).get("strategy") or self.strategy)

    @property
    def cursor(self) -> str | None:
        """The node RoundRobin chose last (None: none yet)."""
        return self._cursor[1] or None

    # ---- the runtime policy -----------------------------------------------------------------------------------
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
            order_changed = queue_order != self.queue_order
            self.strategy, self.queue_order = cast("allocator.Strategy", strategy), queue_order
            self.metrics.set_policy(strategy, queue_order)
            if order_changed:
                self._queue_changed()
        self._policy_dirty.set()

    def policy_status(self, policy: Mapping[str, Any]) -> dict[str, Any]:
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

    async def _policy_loop(self) -> None:
        """Make the policy's status say what is applied (leader only): desired state, retried until it sticks."""
        delay = 0.5
        while True:
            await self._policy_dirty.wait()
            self._policy_dirty.clear()
            policy = self.policy.cache.get(constants.POLICY_NAME)
            if policy is None:
                continue
            want = self.policy_status(policy)
            current = policy.get("status") or {}
            if all(current.get(k) == v for k, v in want.items()):
                delay = 0.5
                continue
            try:
                await self.client.patch(paths.scheduling_policy_status(), {"status": want})
            except NotFound:
                continue  # deleted meanwhile: the watch says so
            except TRANSIENT as exc:
                log.warning("could not write the GpuSchedulingPolicy status: %s; retrying in %.1fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
                self._policy_dirty.set()
                continue
            delay = 0.5
            if current.get("observedGeneration") != want["observedGeneration"] and self._event is not None:
                meta = policy["metadata"]
                involved = {
                    "apiVersion": constants.API_VERSION,
                    "kind": constants.GPU_SCHEDULING_POLICY_KIND,
                    "name": meta["name"],
                    "uid": meta.get("uid", ""),
                }
                await self._event(involved, CLUSTER_EVENTS_NAMESPACE, "Normal", EVENT_POLICY_APPLIED, want["message"])

    def has_inventory(self, node: str) -> bool:
        """Whether `node` has a GpuNodeStatus the scheduler trusts (claims can be placed on it)."""
        status = self.statuses.cache.get(node)
        return status is not None and objects.inventory_node(status) == node

    def nodes_changed(self) -> None:
        """A Node or a GpuNodeStatus changed: the usable inventory must be worked out again."""
        self._usable.clear()

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
        self._changed()

    def reconcile(self, keys: set[GpuKey]) -> None:
        """These Leases may name pods that hold nothing now: make the API agree (leader only)."""
        if self.leading:
            for key in keys:
                self.releases.add(key)

    # ---- placing a pod ----------------------------------------------------------------------------------------
    async def place(
        self, pod: dict[str, Any], claim_name: str, nodes: Mapping[str, dict[str, Any]]
    ) -> Placed | decision.Unschedulable:
        """Allocate for `pod`, which names the GpuClaim `claim_name` (as podrequest.claim_name read it)."""
        meta = pod["metadata"]
        uid = meta["uid"]
        claim = self.claims.cache.get(f"{meta['namespace']}/{claim_name}")
        if claim is None:
            self.released(f"{meta['namespace']}/{meta['name']}")
            return decision.Unschedulable(f"GpuClaim {claim_name!r} not found in namespace {meta['namespace']}")
        if self.ledger.releasing(uid):
            return decision.Unschedulable(
                f"GpuClaim {claim_name}: the GPUs of an earlier attempt are still being "
                "released; retrying once the API agrees"
            )
        request = objects.request_from_claim(claim, self.strategy)
        key = f"{meta['namespace']}/{meta['name']}"
        mismatch = devices.count_mismatch(pod, request.count)
        if mismatch is not None:
            self.released(key)
            return decision.Unschedulable(f"GpuClaim {claim_name}: {mismatch}")
        hold = self.ledger.hold(uid)
        if hold is not None and not hold.bound:
            message = f"allocated {hold.node}:{','.join(map(str, hold.gpu_ids))} (retrying an earlier attempt)"
        else:
            wanted = decision.pod_fit(pod)
            if isinstance(wanted, str):
                return await self._no_node(key, claim, claim_name, wanted)
            tolerations = (pod.get("spec") or {}).get("tolerations") or []
            inventory = self._usable_inventory(nodes, tolerations)
            if not inventory:
                return await self._no_node(key, claim, claim_name, self._no_inventory(nodes, tolerations))
            inventory, refused = self._fitting(wanted, inventory, nodes)
            if not inventory:
                why = f"the pod fits none of the {len(refused)} nodes with a GPU inventory: {fit.summary(refused)}"
                return await self._no_node(key, claim, claim_name, why)
            rank = priority.pod_priority(pod)
            outcome = allocator.allocate(
                request,
                inventory,
                held=self.ledger.holdings,
                cursor=self.cursor if request.strategy == "RoundRobin" else None,
                reserved=self.reservations.reserved_for(rank, self.queue_order) or None,
            )
            if isinstance(outcome, allocator.NoFit):
                if outcome.phase == "Pending" and self.queue_order == "Priority":
                    created = str(meta.get("creationTimestamp") or "")
                    could_use = priority.usable_nodes(request, inventory)
                    self.reservations.wait(priority.Waiter(key, rank, created, could_use))
                else:
                    self.released(key)
                await self.set_claim_status(claim, {"phase": outcome.phase, "message": outcome.message})
                return decision.Unschedulable(f"GpuClaim {claim_name}: {outcome.message}")
            self.released(key)
            hold = Hold(
                uid,
                f"{meta['namespace']}/{meta['name']}",
                outcome.node,
                outcome.gpu_ids,
                request.exclusivity,
                "claim",
                claim_name,
            )
            conflicts = self.ledger.assume(hold)  # before any await: the decision and the assumption are one step
            if conflicts:  # the allocator read the same ledger, so this is a bug; never hand out the GPUs
                log.error("allocator chose GPUs the ledger says are held: %s", conflicts)
                return decision.Unschedulable(
                    f"GpuClaim {claim_name}: GPUs {outcome.allocated} are held by {conflicts[0].holder}; retrying"
                )
            taken = fit.footprint(pod, outcome.node)
            assert taken is not None
            self.usage.assume(uid, taken)  # the node's room too, in the same step
            message = outcome.message
        if (claim.get("spec") or {}).get("gangRef"):
            message += f"; gangRef {claim['spec']['gangRef']!r} is not supported yet, the claim is served alone"
        if not await self._acquire(hold):
            self.failed(uid)
            return decision.Unschedulable(
                f"GpuClaim {claim_name}: GPUs {hold.node}:"
                f"{','.join(map(str, hold.gpu_ids))} were taken meanwhile; retrying"
            )
        return Placed(claim, hold, message, request.strategy)

    async def _no_node(self, key: str, claim: dict[str, Any], claim_name: str, why: str) -> decision.Unschedulable:
        """Pod `key` has no node to be offered now (`why`): it keeps none for itself (a pod that fits nowhere holds
        no GPUs back from lower priorities), and it and its claim say why."""
        self.released(key)
        await self.set_claim_status(claim, {"phase": "Pending", "message": why})
        return decision.Unschedulable(f"GpuClaim {claim_name}: {why}")

    def released(self, key: str) -> None:
        """Pod `key` waits no more (placed, gone, or can never fit): the nodes it kept are free for lower
        priorities, which are tried again."""
        if self.reservations.done(key):
            self._queue_changed()

    def failed(self, uid: str) -> None:
        """The attempt for `uid` is over without a binding: it holds nothing (its Leases are released) and takes
        no room on the node."""
        room = self.usage.unassume(uid)
        if room is not None:
            self._room_made(room)
        hold = self.ledger.hold(uid)
        keys = self.ledger.forget(uid) | (set(hold.gpus) if hold else set())
        self.reconcile(keys)
        self._changed()

    async def bound(self, placed: Placed) -> None:
        self.ledger.confirm(placed.hold.uid)
        hold = placed.hold
        at = _micro_now()
        if placed.strategy == "RoundRobin":
            self._advance_cursor(at, hold.node)
        await self.set_claim_status(
            placed.claim,
            {
                "phase": "Bound",
                "nodeName": hold.node,
                "gpuIds": list(hold.gpu_ids),
                "allocated": f"{hold.node}:{','.join(map(str, hold.gpu_ids))}",
                "strategy": placed.strategy,
                "allocatedAt": at,
                "message": placed.message,
            },
        )

    def _fitting(
        self, wanted: fit.Want, inventory: list[allocator.Node], nodes: Mapping[str, dict[str, Any]]
    ) -> tuple[list[allocator.Node], dict[str, str]]:
        """The nodes of `inventory` the pod fits now (scheduler.fit), and why each other one does not. A pod that asks
        nothing of a node but a place fits every node whose pod count is not reached: while none is (the common
        case), that costs one dictionary lookup per node (is its capacity known?) instead of judging it."""
        if wanted.bare and not self.usage.full and all(self.usage.known(c.name) for c in inventory):
            return inventory, {}
        fitting, refused = [], {}
        for candidate in inventory:
            why = fit.problem(wanted, nodes[candidate.name], self.usage)
            if why is None:
                fitting.append(candidate)
            else:
                refused[candidate.name] = why
        return fitting, refused

    def _usable_inventory(
        self, nodes: Mapping[str, dict[str, Any]], tolerations: list[Mapping[str, Any]]
    ) -> list[allocator.Node]:
        """The allocator's nodes: every inventory whose node exists and takes a pod with `tolerations` now."""
        signature = json.dumps(tolerations, sort_keys=True)
        usable = self._usable.get(signature)
        if usable is not None:
            return usable
        usable = []
        for key, status in self.statuses.cache.items():
            name = objects.inventory_node(status)
            node = nodes.get(name) if name is not None else None
            if node is None or decision.node_problem(node, tolerations) is not None:
                continue
            self.usage.capacity(node)  # cached per node version, so that usage.full covers every usable node
            version = (status["metadata"].get("resourceVersion", ""), node["metadata"].get("resourceVersion", ""))
            cached = self._nodes.get(key)
            if cached is None or cached[0] != version:
                view = objects.node_from_status(status, node["metadata"].get("labels") or {})
                view = dataclasses.replace(view, devices=self._devices.setdefault(view.devices, view.devices))
                cached = self._nodes[key] = (version, view)
            usable.append(cached[1])
        if len(self._usable) > 64:  # many distinct toleration sets: keep the memory bounded
            self._usable.clear()
        self._usable[signature] = usable
        return usable

    def _no_inventory(self, nodes: Mapping[str, dict[str, Any]], tolerations: list[Mapping[str, Any]]) -> str:
        """Why no node can be offered at all, naming the real cause."""
        if not self.statuses.cache:
            return "no GPU inventory: no node has a GpuNodeStatus (is gpu-inventory-agent running on the GPU nodes?)"
        problems = []
        for status in self.statuses.cache.values():
            name = objects.inventory_node(status)
            node = nodes.get(name) if name is not None else None
            if name is None:
                problems.append(
                    f"GpuNodeStatus {status['metadata']['name']} names another node "
                    f"({status['spec']['nodeName']}) and is ignored"
                )
            else:
                problems.append(
                    f"node {name} does not exist"
                    if node is None
                    else decision.node_problem(node, tolerations) or f"node {name} is usable"
                )
        shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
        return f"none of the {len(problems)} nodes with a GPU inventory takes the pod: {shown}"

    async def set_claim_status(self, claim: dict[str, Any], status: dict[str, Any]) -> None:
        """Write the claim's status only when it changes (a pending claim retried costs no write)."""
        meta = claim["metadata"]
        written = self._written.get(meta.get("uid", ""))
        current = claim.get("status") or {}
        if all(current.get(k) == v for k, v in status.items()) or written == status:
            return
        try:
            await self.client.patch(paths.gpu_claim_status(meta["namespace"], meta["name"]), {"status": status})
            self.stats["claim_status_writes"] += 1
            # Remember what we wrote (the informer's copy is never edited), so the same outcome is not written
            # again before the watch catches up.
            self._written[meta.get("uid", "")] = status
        except TRANSIENT as exc:
            log.warning("could not update GpuClaim %s/%s: %s", meta["namespace"], meta["name"], exc)

    # ---- leases -----------------------------------------------------------------------------------------------
    async def _acquire(self, hold: Hold) -> bool:
        """Create the Leases of every GPU of `hold` at once; True when all of them name the pod."""
        results = await asyncio.gather(*(self._acquire_one(hold, gpu) for gpu in hold.gpu_ids), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException) and not isinstance(r, TRANSIENT):
                raise r
        if all(r is True for r in results):
            return True
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            log.info("acquiring the GPUs of %s failed: %s", hold.pod, failed[0])
        return False

    async def _acquire_one(self, hold: Hold, gpu: int) -> bool:
        body = objects.lease_body(hold.node, gpu, hold.exclusivity, {hold.uid: hold.pod})
        try:
            await self.client.post(paths.GPU_LEASES, body)
            self.stats["lease_creates"] += 1
            return True
        except Conflict:
            pass
        return await self._join(hold, gpu)

    async def _join(self, hold: Hold, gpu: int) -> bool:
        """The Lease exists: ours already (a retry), or a Shared one a Shared claim may join."""
        name = objects.lease_name(hold.node, gpu)
        lease = await self.client.get(paths.lease(constants.LEASE_NAMESPACE, name))
        record = objects.lease_record(lease)
        if record is None:
            return False
        if hold.uid in record.holders:
            return True
        if hold.exclusivity != "Shared" or record.exclusivity != "Shared" or not record.holders:
            log.info("lease %s is held by %s", name, ",".join(record.pods.get(h, h) for h in record.holders))
            return False
        holders = {h: record.pods.get(h, "") for h in record.holders} | {hold.uid: hold.pod}
        lease["metadata"].setdefault("annotations", {}).update(objects.lease_holder_annotations(holders))
        try:  # the resourceVersion makes this a compare-and-swap
            await self.client.request("PUT", paths.lease(constants.LEASE_NAMESPACE, name), body=lease)
            self.stats["lease_updates"] += 1
        except ApiError:
            return False
        return True

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
                self.stats["release_retries"] += 1
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
                self.stats["lease_creates"] += 1
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
                self.stats["lease_updates"] += 1
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
                self.stats["lease_deletes"] += 1
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
            cached = self._cached_pod(uid)
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
            hold = objects.hold_from_pod(pod)
            if hold is None:
                self.reconcile(self.ledger.pod_gone(uid))  # bound but holds no GPU
            else:
                self.reconcile(self.ledger.pod_bound(hold))
        else:
            self.ledger.pod_pending(uid)
        self._changed()

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

    async def sweep(self) -> int:
        """Compare the ledger with a fresh list of the GPU Leases; queue every Lease that disagrees (and every GPU
        of a bound pod without its Lease). Returns how many were queued."""
        seen: dict[GpuKey, LeaseRecord] = {}
        async for page in self.client.list_pages(paths.GPU_LEASES, labelSelector=constants.GPU_LEASE_SELECTOR):
            for lease in page.get("items") or []:
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
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - keep sweeping
                log.warning("lease sweep failed (%s: %s)", type(exc).__name__, exc)
            await asyncio.sleep(self.sweep_seconds)


def _allocator_view(status: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """What the allocator reads of a GpuNodeStatus (the agent also rewrites inUseBy, which it does not read)."""
    return [
        (d.get("id"), d.get("health"), d.get("island"), d.get("bandwidthGBps"))
        for d in (status.get("status") or {}).get("devices") or []
    ]
