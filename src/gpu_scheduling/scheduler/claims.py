"""Claim placement, the scheduler's GpuClaim path: choose GPUs with the pure allocator over the GPU ledger, lock
them with one Lease per GPU, and say on the claim what came of it.

Watches (no polling): GpuClaims and GpuNodeStatuses (the inventory); it starts the Lease reconciler's and the
runtime policy's watches with its own, since all four need the CRDs. The pods come from the scheduler's one pod
watch (scheduler.controller), the Leases through the reconciler (scheduler.leases), the strategy from the runtime
policy (scheduler.policy), the queue order and the nodes waiting pods keep from the scheduling queue
(scheduler.queue).

Placing a claim pod: the allocator reads the ledger (`Ledger.holdings`, cached per node) through a FreeIndex of the
usable GPU nodes (grouped by their free GPUs, brought up to date with the nodes whose holdings changed since it was
last read: a claim costs O(states + changes), not O(nodes)); the pod's other rules (its requests, ports, affinity)
are judged only on the node that stands for each group, and on every node only to say why none fits. The chosen
GPUs and the pod's room are *assumed* in the cache (scheduler.cache) before the first await (so the next claim never
picks them from a view the watch has not caught up with), and the Leases are created concurrently; the Lease (create
fails when it exists) is the cluster-wide lock. The controller then binds, carrying the allocation annotations on
the Binding. An attempt that ends without a binding hands the Leases naming it to the reconciler, which releases them
until the API agrees.

Choosing a node: the pod's preferred rules first, where it has any (the Score phase, plugins.SCORE_PROFILE: the
allocator's preference), then the claim's `spec.strategy`, else the GpuSchedulingPolicy's `defaultStrategy`, else the
scheduler's `--strategy` (claims.allocator has the rules). RoundRobin resumes after the node of the newest
RoundRobin allocation among the claims (`status.allocatedAt`), so its cursor survives a restart with no object of
its own. Order: with queueOrder Priority a claim pod that waits for busy GPUs keeps every node it could use from
pods of lower priority (claims.priority); there is no preemption.

It writes GPU Leases (create, join) and GpuClaim status, nothing else.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from gpu_scheduling import constants, devices
from gpu_scheduling.claims import allocator, objects, priority
from gpu_scheduling.claims.ledger import Hold
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import ApiError, Conflict, NotFound
from gpu_scheduling.kube.informer import Informer
from gpu_scheduling.scheduler import decision, framework, plugins
from gpu_scheduling.scheduler.cache import Cache, Trial
from gpu_scheduling.scheduler.events import TRANSIENT
from gpu_scheduling.scheduler.leases import LeaseReconciler
from gpu_scheduling.scheduler.plugins import taint_toleration
from gpu_scheduling.scheduler.plugins.taint_toleration import TaintToleration
from gpu_scheduling.scheduler.policy import RuntimePolicy
from gpu_scheduling.scheduler.queue import SchedulingQueue

if TYPE_CHECKING:
    from gpu_scheduling.kube.client import Client

log = logging.getLogger(__name__)


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
        return objects.allocation_annotations(self.hold)


@dataclasses.dataclass(frozen=True)
class Judged:
    """What `ClaimPath._judge` found for a pod: the nodes with a GPU inventory that take it by their own state, and
    whether it fits one by its other rules (`admits`; None: it fits every one of them)."""

    attempt: framework.Cycle
    inventory: list[allocator.Node]
    admits: Callable[[str], bool] | None


class ClaimPath:
    def __init__(
        self,
        client: Client,
        cache: Cache,
        queue: SchedulingQueue,
        policy: RuntimePolicy,
        leases: LeaseReconciler,
    ):
        self.client = client
        self.cache = cache
        """Where its choices are assumed, and what the filters and the allocator read (cache.snapshot): a claim pod
        goes only where it fits, on GPUs nobody holds."""
        self.ledger = cache.ledger
        self.queue = queue  # claim pods retried on a claim or inventory change; the nodes waiters keep
        self.policy = policy  # the strategy of a claim that names none
        self.leases = leases  # the Leases of an attempt that ended without a binding are released there
        self._cursor: tuple[str, str] = ("", "")  # (allocatedAt, node) of the newest RoundRobin allocation
        self.enabled = False
        self.claims = Informer(client, paths.ALL_GPU_CLAIMS, self._on_claim, name=constants.GPU_CLAIM_PLURAL)
        self.statuses = Informer(client, paths.NODE_STATUSES, self._on_status, name=constants.GPU_NODE_STATUS_PLURAL)
        # The allocator's inventory, rebuilt only when what it is made of changes: each GpuNodeStatus as a Node,
        # keyed by the two resourceVersions it comes from; the usable nodes per set of tolerations, dropped on any
        # node or inventory event; equal device tuples shared so the allocator can treat such nodes as one state.
        self._nodes: dict[str, tuple[tuple[str, str], allocator.Node]] = {}
        self._usable: dict[str, list[allocator.Node]] = {}
        self._devices: dict[tuple[allocator.Device, ...], tuple[allocator.Device, ...]] = {}
        self._alike: frozenset[str] | None = None  # the score plugins that rank every node alike, until a node changes
        # Per usable inventory list and kind of request: its nodes grouped by their free GPUs (allocator.FreeIndex),
        # and the ledger's position it is up to date with; dropped with the lists.
        self._indexes: dict[tuple[int, allocator.IndexKind], tuple[allocator.FreeIndex, int]] = {}
        self._written: dict[str, dict[str, Any]] = {}  # claim uid -> the status we last wrote
        # Every bound pod of each claim ("<ns>/<claim>" -> pod name -> its allocation), from the watch and our binds:
        # a claim named by several pods shows all of them in status.allocations.
        self._allocations: dict[str, dict[str, dict[str, Any]]] = {}

    # ---- start-up ---------------------------------------------------------------------------------------------
    async def watch(self) -> list[asyncio.Task[Any]]:
        """Watch what the claim path needs when the CRDs are installed (the claims, the inventory, the Leases and
        the policy); otherwise stay disabled."""
        try:
            api = await self.client.get(paths.GPU_API)
        except NotFound:
            log.info("GpuClaim CRDs are not installed: claim pods will be reported unschedulable")
            return []
        informers: tuple[Informer, ...] = (self.claims, self.statuses, self.leases.informer)
        served = {r.get("name") for r in api.get("resources") or []}
        if constants.GPU_SCHEDULING_POLICY_PLURAL in served:
            informers += (self.policy.informer,)
        else:
            log.info(
                "the GpuSchedulingPolicy CRD is not installed: strategy %s from the flag, queue order %s",
                self.policy.strategy,
                self.policy.queue_order,
            )
        tasks = [asyncio.create_task(i.run(), name=f"{i.name}-informer") for i in informers]
        for i in informers:
            await i.synced.wait()
        self.enabled = True
        return tasks

    async def lead(self) -> None:
        """The leader's work for claims, until cancelled: the Lease reconciler and the policy's status."""
        if not self.enabled:
            await asyncio.Event().wait()
        await asyncio.gather(self.leases.lead(), self.policy.lead())

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
            self.queue.changed(framework.ClusterEvent(framework.GPU_CLAIM, name=f"{meta['namespace']}/{meta['name']}"))

    def _on_status(self, kind: str, status: dict[str, Any], old: dict[str, Any] | None) -> None:
        self.nodes_changed()
        if kind == "DELETED":
            self._nodes.pop(status["metadata"]["name"], None)
        if kind != "MODIFIED" or old is None or _allocator_view(status) != _allocator_view(old):
            self.queue.changed(framework.ClusterEvent(framework.GPU_INVENTORY))

    def _advance_cursor(self, at: str, node: str) -> None:
        if at >= self._cursor[0]:
            self._cursor = (at, node)

    def strategy_of(self, claim_key: str) -> str:
        """The strategy that places the claim `namespace/name` now ("" when the claim is unknown)."""
        claim = self.claims.cache.get(claim_key)
        if claim is None:
            return ""
        return str((claim.get("spec") or {}).get("strategy") or self.policy.strategy)

    @property
    def cursor(self) -> str | None:
        """The node RoundRobin chose last (None: none yet)."""
        return self._cursor[1] or None

    def has_inventory(self, node: str) -> bool:
        """Whether `node` has a GpuNodeStatus the scheduler trusts (claims can be placed on it)."""
        status = self.statuses.cache.get(node)
        return status is not None and objects.inventory_node(status) == node

    def nodes_changed(self) -> None:
        """A Node or a GpuNodeStatus changed: the usable inventory must be worked out again."""
        self._usable.clear()
        self._indexes.clear()
        self._alike = None

    # ---- placing a pod ----------------------------------------------------------------------------------------
    async def place(
        self, pod: dict[str, Any], claim_name: str, nodes: Mapping[str, dict[str, Any]]
    ) -> Placed | decision.Unschedulable | None:
        """Allocate for `pod`, which names the GpuClaim `claim_name` (as podrequest.claim_name read it). None:
        nothing to decide or say yet (its claim exists but the claim watch has not brought it)."""
        meta = pod["metadata"]
        uid = meta["uid"]
        claim = self.claims.cache.get(f"{meta['namespace']}/{claim_name}")
        if claim is None:
            self.queue.release(f"{meta['namespace']}/{meta['name']}")
            return await self.unseen(meta["namespace"], meta["name"], claim_name)
        if self.ledger.releasing(uid):
            return decision.Unschedulable(
                f"GpuClaim {claim_name}: the GPUs of an earlier attempt are still being "
                "released; retrying once the API agrees"
            )
        request = objects.request_from_claim(claim, self.policy.strategy)
        key = f"{meta['namespace']}/{meta['name']}"
        mismatch = devices.count_mismatch(pod, request.count)
        if mismatch is not None:
            self.queue.release(key)
            return decision.Unschedulable(f"GpuClaim {claim_name}: {mismatch}")
        hold = self.ledger.hold(uid)
        if hold is not None and not hold.bound:
            message = f"allocated {hold.node}:{','.join(map(str, hold.gpu_ids))} (retrying an earlier attempt)"
        else:
            chosen = await self._allocate(pod, claim, claim_name, request, nodes)
            if isinstance(chosen, decision.Unschedulable):
                return chosen
            hold, message = chosen
        if not await self.acquire(hold):
            self.cache.forget(uid)
            return decision.Unschedulable(
                f"GpuClaim {claim_name}: GPUs {hold.node}:"
                f"{','.join(map(str, hold.gpu_ids))} were taken meanwhile; retrying"
            )
        return Placed(claim, hold, message, request.strategy)

    async def unseen(self, namespace: str, pod_name: str, claim_name: str) -> decision.Unschedulable | None:
        """The pod's claim is not in the cache: absent, or only not seen yet. The two watches (pods, claims) lag each
        other: a pod created right after its claim often comes first, and saying "not found" then would be false
        and written twice (the claim's arrival gives the pod its real reason). So the API is asked, on this miss
        only: a claim it has is waited for (None: its ADDED event tries the pod again, `names_claim` came first); a
        failed read is retried (None); only an absent claim is reported (why the pod waits)."""
        try:
            await self.client.get(paths.gpu_claim(namespace, claim_name))
        except NotFound:
            return decision.Unschedulable(f"GpuClaim {claim_name!r} not found in namespace {namespace}")
        except TRANSIENT as exc:
            log.warning("could not read GpuClaim %s/%s: %s; will retry", namespace, claim_name, exc)
            self.queue.failed(f"{namespace}/{pod_name}")
            return None
        log.info("GpuClaim %s/%s exists but was not seen yet: pod %s waits for it", namespace, claim_name, pod_name)
        return None

    async def _allocate(
        self,
        pod: dict[str, Any],
        claim: dict[str, Any],
        claim_name: str,
        request: allocator.Request,
        nodes: Mapping[str, dict[str, Any]],
    ) -> tuple[Hold, str] | decision.Unschedulable:
        """Choose GPUs for `pod` among the nodes it fits and assume them (and its room) in one step: the hold and
        the allocator's message; or why it waits, said on the claim too, keeping its nodes if it waits by priority."""
        meta = pod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        snap = self.cache.snapshot
        rank = priority.pod_priority(pod)
        judged = self._judge(pod, nodes, snap)
        if isinstance(judged, str):
            return await self._no_node(key, claim, claim_name, judged)
        index = self._index(request, judged.inventory, snap)
        outcome = self._allocate_on(request, judged.inventory, rank, snap, pod, judged.admits, index)
        inventory = judged.inventory
        if isinstance(outcome, allocator.NoFit) and judged.admits is not None:
            # Judged lazily, and nothing found: why, as the nodes the pod fits (every one judged) say it.
            fitting = self._fitting_of(judged, nodes)
            if isinstance(fitting, str):
                return await self._no_node(key, claim, claim_name, fitting)
            inventory = fitting
            outcome = self._allocate_on(request, inventory, rank, snap, pod)
        if isinstance(outcome, allocator.NoFit):
            if outcome.phase == "Pending" and self.queue.order == "Priority":
                created = str(meta.get("creationTimestamp") or "")
                could_use = priority.usable_nodes(request, inventory)
                self.queue.reserve(priority.Waiter(key, rank, created, could_use))
            else:
                self.queue.release(key)
            await self.set_claim_status(claim, {"phase": outcome.phase, "message": outcome.message})
            return decision.Unschedulable(f"GpuClaim {claim_name}: {outcome.message}")
        self.queue.release(key)
        taken = self._assume(pod, outcome, request, claim_name, self.cache)
        if isinstance(taken, str):
            return decision.Unschedulable(f"GpuClaim {claim_name}: {taken}")
        return taken, outcome.message

    def choose(
        self,
        pod: dict[str, Any],
        claim_name: str,
        nodes: Mapping[str, dict[str, Any]],
        trial: Trial,
        within: frozenset[str] | None = None,
    ) -> tuple[Hold, str] | str:
        """A gang member's step (scheduler.gangs): choose GPUs for `pod` on the nodes `within` (None: any) and
        assume them on `trial`, writing nothing; the hold and the allocator's message, or why it does not fit
        there."""
        meta = pod["metadata"]
        claim = self.claims.cache.get(f"{meta['namespace']}/{claim_name}")
        if claim is None:
            return f"GpuClaim {claim_name!r} not found in namespace {meta['namespace']}"
        request = objects.request_from_claim(claim, self.policy.strategy)
        mismatch = devices.count_mismatch(pod, request.count)
        if mismatch is not None:
            return f"GpuClaim {claim_name}: {mismatch}"
        judged = self._judge(pod, nodes, trial.snapshot)
        inventory = judged if isinstance(judged, str) else self._fitting_of(judged, nodes)
        if isinstance(inventory, str):
            return inventory
        if within is not None:
            inventory = [n for n in inventory if n.name in within]
            if not inventory:
                return "no node with a GPU inventory there takes the pod"
        outcome = self._allocate_on(request, inventory, priority.pod_priority(pod), trial.snapshot, pod)
        if isinstance(outcome, allocator.NoFit):
            return outcome.message
        taken = self._assume(pod, outcome, request, claim_name, trial)
        return taken if isinstance(taken, str) else (taken, outcome.message)

    def _allocate_on(
        self,
        request: allocator.Request,
        inventory: list[allocator.Node],
        rank: int,
        snap: framework.Snapshot,
        pod: Mapping[str, Any] | None = None,
        admits: Callable[[str], bool] | None = None,
        index: allocator.FreeIndex | None = None,
    ) -> allocator.Decision:
        """The allocator's choice on `inventory` for a pod of priority `rank`, over the GPUs `snap` says are held,
        past the nodes kept for higher priorities, RoundRobin resuming after its cursor; where there is a choice,
        `pod`'s preferred rules rank the nodes first (the Score phase: plugins.SCORE_PROFILE, read from `snap`).
        `admits`: the pod's other rules, judged only on the nodes the allocator would otherwise choose (`_judge`).
        `index`: `inventory`'s FreeIndex (`_index`), which spares the allocator reading every node."""
        assert snap.gpus is not None
        scoring = (
            framework.prepare_scores(pod, snap, plugins.SCORE_PROFILE, self._scored_alike(snap))
            if pod is not None and len(inventory) > 1
            else None
        )
        return allocator.allocate(
            request,
            inventory,
            held=snap.gpus.holdings,
            cursor=self.cursor if request.strategy == "RoundRobin" else None,
            reserved=self.queue.reserved_for(rank) or None,
            preference=scoring.rank if scoring is not None else None,
            admits=admits,
            index=index,
        )

    def _index(
        self, request: allocator.Request, inventory: list[allocator.Node], snap: framework.Snapshot
    ) -> allocator.FreeIndex | None:
        """The FreeIndex of the usable inventory list `inventory` for `request`'s kind, brought up to date with the
        ledger's changes since it was last read (built anew when the ledger no longer says which: O(nodes), as is
        the first claim after a node or inventory change). None for a decision on a trial, whose holdings are its
        own, and for a claim with a selector (the allocator reads every node then)."""
        if snap.gpus is not self.ledger or request.match_labels:
            return None
        kind = allocator.FreeIndex.kind_of(request)
        key = (id(inventory), kind)
        found = self._indexes.get(key)
        if found is not None and found[0].nodes is inventory:
            index, mark = found
            changed = self.ledger.changed_since(mark)
            if changed is not None:
                index.update(changed)
                self._indexes[key] = (index, self.ledger.position())
                return index
        if len(self._indexes) > 64:  # many kinds or toleration sets: keep the memory bounded
            self._indexes.clear()
        index = allocator.FreeIndex(inventory, self.ledger.holdings, kind)
        self._indexes[key] = (index, self.ledger.position())
        return index

    def _scored_alike(self, snap: framework.Snapshot) -> frozenset[str]:
        """The score plugins that rank every node alike now, whatever the pod (TaintToleration while no node has a
        PreferNoSchedule taint): worked out once per change of the nodes, so that a pod that prefers nothing is not
        scored at all."""
        if self._alike is None:
            soft = any(taint_toleration.prefers_no_schedule(node) for node in snap.nodes.values())
            self._alike = frozenset() if soft else frozenset({TaintToleration.name})
        return self._alike

    def could_use(
        self, pod: dict[str, Any], claim: dict[str, Any], nodes: Mapping[str, dict[str, Any]]
    ) -> frozenset[str]:
        """The nodes `pod`, naming `claim`, could ever be placed on (what it keeps while it waits by priority)."""
        request = objects.request_from_claim(claim, self.policy.strategy)
        tolerations = (pod.get("spec") or {}).get("tolerations") or []
        return priority.usable_nodes(request, self._usable_inventory(nodes, tolerations))

    def _judge(
        self, pod: dict[str, Any], nodes: Mapping[str, dict[str, Any]], snap: framework.Snapshot
    ) -> Judged | str:
        """The nodes with a GPU inventory that take `pod` by their own state, and how its other rules judge a node
        (as `snap` counts them); or why there is none."""
        attempt = decision.cycle(pod, snap)
        if isinstance(attempt, str):
            return attempt
        tolerations = attempt.state(TaintToleration.name) or []
        inventory = self._usable_inventory(nodes, tolerations)
        if not inventory:
            return self._no_inventory(nodes, tolerations)
        usage = attempt.snap.usage
        if plugins.asks_only_a_place(attempt) and not usage.full and all(usage.known(c.name) for c in inventory):
            # A pod that asks nothing of a node but a place fits every node whose pod count is not reached: while
            # none is (the common case), that costs one dictionary lookup per node (is its capacity known?).
            return Judged(attempt, inventory, None)

        def admits(name: str) -> bool:
            return attempt.fits(nodes[name], skip=plugins.NODE_STATE_NAMES)

        return Judged(attempt, inventory, admits)

    def _fitting_of(self, judged: Judged, nodes: Mapping[str, dict[str, Any]]) -> list[allocator.Node] | str:
        """The nodes of `judged` that the pod fits now, every one judged; or why there are none (the reasons are
        worked out for the message only, Cycle.explain)."""
        if judged.admits is None:
            return judged.inventory
        fitting = [c for c in judged.inventory if judged.admits(c.name)]
        if fitting:
            return fitting
        refused = [c.name for c in judged.inventory]
        reasons = judged.attempt.explain(refused, nodes)
        return f"the pod fits none of the {len(refused)} nodes with a GPU inventory: {reasons}"

    def _assume(
        self,
        pod: dict[str, Any],
        outcome: allocator.Allocation,
        request: allocator.Request,
        claim_name: str,
        into: Cache | Trial,
    ) -> Hold | str:
        """Assume the GPUs and the room the allocator chose for `pod` in `into`, before any await: the decision
        and the assumption are one step."""
        meta = pod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        hold = Hold(meta["uid"], key, outcome.node, outcome.gpu_ids, request.exclusivity, "claim", claim_name)
        conflicts = into.assume(pod, hold)
        if conflicts:  # the allocator read the same ledger, so this is a bug; never hand out the GPUs
            log.error("allocator chose GPUs the ledger says are held: %s", conflicts)
            return f"GPUs {outcome.allocated} are held by {conflicts[0].holder}; retrying"
        return hold

    async def _no_node(self, key: str, claim: dict[str, Any], claim_name: str, why: str) -> decision.Unschedulable:
        """Pod `key` has no node to be offered now (`why`): it keeps none for itself (a pod that fits nowhere holds
        no GPUs back from lower priorities), and it and its claim say why."""
        self.queue.release(key)
        await self.set_claim_status(claim, {"phase": "Pending", "message": why})
        return decision.Unschedulable(f"GpuClaim {claim_name}: {why}")

    async def bound(self, placed: Placed, write: bool = True) -> str:
        """The pod of `placed` is bound: confirm its hold and (unless `write` is False: a gang writes each claim once
        after its members are bound, with `write_bound`) say so on its claim. When it was allocated."""
        self.cache.confirm(placed.hold.uid)
        hold = placed.hold
        at = _micro_now()
        if placed.strategy == "RoundRobin":
            self._advance_cursor(at, hold.node)
        self.note_bound(hold)
        if write:
            await self.write_bound(placed, at)
        return at

    async def write_bound(self, placed: Placed, at: str) -> None:
        """Say on the claim of `placed` that its pods are bound: the pod of `placed` (allocated `at`) as the one bound
        last, every bound pod in allocations."""
        hold = placed.hold
        namespace = placed.claim["metadata"]["namespace"]
        await self.set_claim_status(
            placed.claim,
            {
                "phase": "Bound",
                "nodeName": hold.node,
                "gpuIds": list(hold.gpu_ids),
                "allocated": f"{hold.node}:{','.join(map(str, hold.gpu_ids))}",
                "allocations": self.allocations(f"{namespace}/{hold.claim}"),
                "strategy": placed.strategy,
                "allocatedAt": at,
                "message": placed.message,
            },
        )

    def note_bound(self, hold: Hold) -> None:
        """A claim pod is bound holding `hold` (our bind, or the watch): its claim lists it."""
        if hold.source != "claim" or not hold.claim:
            return
        namespace, _, name = hold.pod.partition("/")
        self._allocations.setdefault(f"{namespace}/{hold.claim}", {})[name] = {
            "pod": name,
            "nodeName": hold.node,
            "gpuIds": list(hold.gpu_ids),
        }

    def allocations(self, claim_key: str) -> list[dict[str, Any]]:
        """The claim's bound pods and their GPUs, by pod name."""
        return [a for _, a in sorted(self._allocations.get(claim_key, {}).items())]

    def pod_gone(self, hold: Hold) -> dict[str, Any] | None:
        """A bound claim pod is gone: its claim no longer lists it. The claim whose status must say so (the leader
        writes it with `write_allocations`), or None. The claim keeps its phase and last allocation."""
        if hold.source != "claim" or not hold.claim:
            return None
        namespace, _, name = hold.pod.partition("/")
        claim_key = f"{namespace}/{hold.claim}"
        listed = self._allocations.get(claim_key)
        if listed is None or listed.pop(name, None) is None:
            return None
        if not listed:
            del self._allocations[claim_key]
        return self.claims.cache.get(claim_key)

    async def write_allocations(self, claim: dict[str, Any]) -> None:
        meta = claim["metadata"]
        await self.set_claim_status(claim, {"allocations": self.allocations(f"{meta['namespace']}/{meta['name']}")})

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
            self.cache.usage.capacity(node)  # cached per node version, so that usage.full covers every usable node
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
            # Remember what we wrote (the informer's copy is never edited), so the same outcome is not written
            # again before the watch catches up.
            self._written[meta.get("uid", "")] = status
        except TRANSIENT as exc:
            log.warning("could not update GpuClaim %s/%s: %s", meta["namespace"], meta["name"], exc)

    # ---- leases -----------------------------------------------------------------------------------------------
    async def acquire(self, hold: Hold) -> bool:
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
        except ApiError:
            return False
        return True


def _allocator_view(status: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """What the allocator reads of a GpuNodeStatus (the agent also rewrites inUseBy, which it does not read)."""
    return [
        (d.get("id"), d.get("health"), d.get("island"), d.get("bandwidthGBps"))
        for d in (status.get("status") or {}).get("devices") or []
    ]
