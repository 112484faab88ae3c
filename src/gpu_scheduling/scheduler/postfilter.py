"""The controller's PostFilter: a pod that fits nowhere may preempt pods of lower priority (scheduler.preemption
judges which; this module finds the candidates in the cache and carries the choice out).

Who may preempt: any pod of this scheduler (a claim pod on any node with a GPU inventory; a map pod on its map
entry's node only, the one node it may go to), unless its `spec.preemptionPolicy` is `Never`, and unless the pods
it preempted still hold their room or their GPUs (or, nominated by an earlier leader, a pod of lower priority on its
nominated node is still terminating): kube-scheduler's PodEligibleToPreemptOthers, it waits for the victims it
chose instead of choosing more.

Who may be preempted: every pod bound to the node with a lower priority (this scheduler's, of either kind, and
other schedulers'), but not one this scheduler has assumed and not yet bound, and never a member of the
preemptor's own gang. A member of a running gang is evicted only with every other placed member of its gang.

Carrying it out, as kube-scheduler does: the preemptor's `status.nominatedNodeName` is set; each victim gets the
`DisruptionTarget` condition (reason PreemptionByScheduler) and a Preempted event, and is deleted with its own grace
period (a uid precondition, so a pod recreated under the same name is never touched). The node is then kept for the
preemptor from pods of lower priority by the same mechanism that keeps nodes for claim pods waiting for busy GPUs
(claims.priority's reservations, queue order Priority): a waiter named after it. Its GPUs count as free only once
the victims' pod objects are gone (or finished), as the ledger counts every pod's: never at their deletion
timestamp, while their containers may still run. kube-scheduler does not read gpu-scheduler's nominations (nor
gpu-scheduler kube-scheduler's): on a node both schedulers use, a default-scheduler pod may take the room freed.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from gpu_scheduling import constants, gpumap, podrequest
from gpu_scheduling.claims import priority
from gpu_scheduling.claims.ledger import Hold
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import ApiError, NotFound, TransportError
from gpu_scheduling.kube.informer import Informer
from gpu_scheduling.scheduler import decision, fit, framework, preemption
from gpu_scheduling.scheduler.events import now

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from gpu_scheduling.claims.gangs import Book, Domain
    from gpu_scheduling.kube.client import Client
    from gpu_scheduling.scheduler.cache import Cache, Trial
    from gpu_scheduling.scheduler.claims import ClaimPath
    from gpu_scheduling.scheduler.events import Recorder
    from gpu_scheduling.scheduler.metrics import Metrics
    from gpu_scheduling.scheduler.queue import SchedulingQueue

log = logging.getLogger(__name__)


class Gangs(Protocol):
    book: Book

    def gang_of(self, pod: Mapping[str, Any]) -> str | None: ...


class Host(Protocol):
    """What preemption reads and calls of the scheduler (scheduler.controller.Scheduler is one)."""

    client: Client
    config: Any
    cache: Cache
    snapshot: framework.Snapshot
    uids: dict[str, str]
    pods: Informer
    nodes: Informer
    maps: gpumap.ParseCache
    queue: SchedulingQueue
    claim_path: ClaimPath
    metrics: Metrics
    recorder: Recorder

    @property
    def gangs(self) -> Gangs: ...

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None: ...


def _budget_view(pdb: dict[str, Any]) -> dict[str, Any]:
    """What preemption reads of a PodDisruptionBudget."""
    meta = pdb.get("metadata") or {}
    status = pdb.get("status") or {}
    return {
        "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in meta},
        "spec": {"selector": (pdb.get("spec") or {}).get("selector")},
        "status": {k: status[k] for k in ("disruptionsAllowed", "disruptedPods") if k in status},
    }


def nomination(key: str) -> str:
    """The name a nominated pod keeps its node under (claims.priority.Waiter.key)."""
    return f"{key} (nominated)"


class PostFilter:
    def __init__(self, scheduler: Host) -> None:
        self.s = scheduler
        self.budgets = Informer(
            scheduler.client,
            paths.POD_DISRUPTION_BUDGET.collection(),
            lambda *_: None,
            name="pdbs",
            transform=_budget_view,
        )
        self.nominated: dict[str, str] = {}  # pod key -> the node it preempted on
        self.victims: dict[str, frozenset[str]] = {}  # pod or gang key -> the uids it preempted

    # ---- who may preempt --------------------------------------------------------------------------------------
    def ineligible(self, key: str, pod: Mapping[str, Any]) -> str | None:
        """Why `pod` may not preempt now, or None."""
        spec = pod.get("spec") or {}
        if spec.get("preemptionPolicy") == "Never":
            return "it does not preempt (preemptionPolicy Never)"
        if self._victims_remain(key):
            return "waiting for the pods it preempted to terminate"
        node = (pod.get("status") or {}).get("nominatedNodeName")
        if node:  # nominated by an earlier leader: kube-scheduler's rule, its terminating victims
            rank = priority.pod_priority(pod)
            for _, taken in self.s.cache.usage.pods_on(node):
                if taken.terminating and taken.priority < rank:
                    return f"waiting for the pods it preempted on node {node} to terminate"
        return None

    def _victims_remain(self, key: str) -> bool:
        """Whether a pod `key` preempted (or its gang did) still holds something: its room on its node (its pod
        object is not gone), or its GPUs (a GPU Lease still names it: the GPU is free only when the API agrees)."""
        victims = self.victims.get(key)
        if victims is None:
            return False
        cache = self.s.cache
        if any(cache.usage.footprint(uid) is not None or cache.ledger.releasing(uid) for uid in victims):
            return True
        del self.victims[key]
        return False

    def forget(self, key: str) -> None:
        """Pod (or gang) `key` was bound or deleted: its nomination, and the node kept for it, are over."""
        self.victims.pop(key, None)
        if self.nominated.pop(key, None) is not None:
            self.s.queue.release(nomination(key))

    # ---- which victims -----------------------------------------------------------------------------------------
    def _victims_on(self, node: str, rank: int, uid: str, own_gang: str | None) -> list[preemption.Victim]:
        s = self.s

        def gang_of(victim: str, taken: fit.Footprint) -> str | None:
            key = f"{taken.namespace}/{taken.name}"
            return s.gangs.book.gang_of(key) if s.uids.get(victim) == key else None  # only this scheduler's pods

        return preemption.victims_on(
            s.cache.usage.pods_on(node),
            rank,
            gang_of,
            self._placed_members,
            own_gang,
            spare=lambda victim: victim == uid or s.cache.assumed(victim),
        )

    def _placed_members(self, gang: str) -> list[preemption.Pod]:
        """Every member of `gang` counted on a node (none assumed only)."""
        s = self.s
        members: list[preemption.Pod] = []
        for key in sorted(s.gangs.book.members(gang)):
            pod = s.pods.cache.get(key)
            uid = (pod or {}).get("metadata", {}).get("uid")
            taken = s.cache.usage.footprint(uid) if uid else None
            if taken is None:
                continue
            if s.cache.assumed(uid):
                return []  # being bound: not a victim now
            members.append(preemption.Pod.of(uid, taken))
        return members

    # ---- does the preemptor fit ------------------------------------------------------------------------------
    def _fits_on(self, key: str, pod: dict[str, Any], kind: str) -> Callable[[Trial, str], bool] | None:
        """How to ask whether `pod` fits a node on a trial (its GPUs, room and every rule, as its attempt judges
        it), or None when it cannot be asked (its claim is not known)."""
        s = self.s
        uid = pod["metadata"]["uid"]
        if kind == "claim":
            try:
                claim_name = podrequest.claim_name(pod["metadata"])
            except gpumap.PodMapError:
                return None
            if s.claim_path.claims.cache.get(f"{pod['metadata']['namespace']}/{claim_name}") is None:
                return None

            def claim_fits(trial: Trial, node: str) -> bool:
                chosen = s.claim_path.choose(pod, claim_name, s.nodes.cache, trial, frozenset({node}))
                if isinstance(chosen, str):
                    return False
                trial.retract(uid)
                return True

            return claim_fits

        def map_fits(trial: Trial, node: str) -> bool:
            verdict = decision.decide(pod, s.nodes.cache, s.config.isolated_gpus, trial.snapshot, s.maps)
            if isinstance(verdict, decision.Unschedulable) or verdict.node != node:
                return False
            hold = Hold(uid, key, node, verdict.entry.gpu_ids, "Shared", "map")
            if trial.assume(pod, hold):
                return False
            trial.retract(uid)
            return True

        return map_fits

    def _gpu_nodes(self) -> list[str]:
        """The nodes with a GPU inventory, in name order: where a claim pod may preempt."""
        s = self.s
        return sorted(n for n in s.nodes.cache if s.claim_path.has_inventory(n))

    def _nodes_for(self, pod: dict[str, Any], kind: str) -> list[str]:
        """The nodes preemption may help on: a map pod's map node; any node with a GPU inventory for a claim pod."""
        s = self.s
        if kind == "map":
            verdict = decision.decide(pod, s.nodes.cache, s.config.isolated_gpus, s.snapshot, s.maps)
            return [verdict.node] if verdict.node else []
        return self._gpu_nodes()

    def _nothing_below(self, rank: int) -> bool:
        """No counted pod anywhere is of lower priority than `rank` (every pod, under one priority): nothing to
        preempt, known in O(distinct priorities)."""
        lowest = self.s.cache.usage.lowest_priority()
        return lowest is None or lowest >= rank

    def _budgets(self) -> list[preemption.Budget]:
        return [b for pdb in self.budgets.cache.values() if (b := preemption.budget(pdb)) is not None]

    def choose(self, key: str, pod: dict[str, Any], kind: str) -> preemption.Candidate | None:
        """The node and victims kube-scheduler's rules choose for `pod`, or None when preempting cannot help. One
        trial copy of the cache for all the nodes: each node's victims are counted back before the next."""
        s = self.s
        rank = priority.pod_priority(pod)
        if self._nothing_below(rank):
            return None
        fits = self._fits_on(key, pod, kind)
        if fits is None:
            return None
        uid = pod["metadata"]["uid"]
        own_gang = s.gangs.gang_of(pod)
        trial = s.cache.fork()
        return preemption.best(
            preemption.candidates(
                trial,
                self._nodes_for(pod, kind),
                lambda node: self._victims_on(node, rank, uid, own_gang),
                functools.partial(fits, trial),
                self._budgets(),
            )
        )

    # ---- carrying it out ---------------------------------------------------------------------------------------
    async def preempt(self, key: str, pod: dict[str, Any], kind: str) -> str | None:
        """Preempt for `pod`, refused everywhere: what was done, in words (for its FailedScheduling message), or
        None when it cannot or may not preempt."""
        if self.ineligible(key, pod) is not None:
            return None
        candidate = self.choose(key, pod, kind)
        if candidate is None or not candidate.victims:  # none helps, or it fits as it is now: tried again anyway
            return None
        s = self.s
        node = candidate.node
        self.nominated[key] = node
        rank = priority.pod_priority(pod)
        created = str(pod["metadata"].get("creationTimestamp") or "")
        s.queue.reserve(priority.Waiter(nomination(key), rank, created, frozenset({node})))
        await self._nominate(key, pod, node)
        return await self._carry_out(key, pod, candidate, f"node {node}")

    async def _carry_out(self, key: str, preemptor: dict[str, Any], candidate: preemption.Candidate, where: str) -> str:
        victims = candidate.pods()
        self.victims[key] = frozenset(v.uid for v in victims)
        log.info("%s preempts %d pods in %s: %s", key, len(victims), where, ", ".join(v.key for v in victims))
        self.s.metrics.preempted(len(victims))
        await asyncio.gather(*(self._evict(preemptor, victim) for victim in victims))
        return f"preempting {len(victims)} pod(s) of lower priority in {where}: " + ", ".join(v.key for v in victims)

    # ---- a waiting gang ------------------------------------------------------------------------------------------
    async def preempt_gang(
        self,
        gang: str,
        waiting: Mapping[str, dict[str, Any]],
        candidates: Sequence[Domain],
        fits_in: Callable[[Trial, Domain], bool],
    ) -> str | None:
        """Preempt for a waiting gang that no domain takes whole: in the one domain kube-scheduler's order prefers,
        the fewest victims that let every member in at once (`fits_in` tries the whole gang on a trial, and undoes
        it), or nothing. Its priority is its lowest waiting member's; it never preempts its own members. What was
        done, in words, or None."""
        pods = list(waiting.values())
        if not pods or any((p.get("spec") or {}).get("preemptionPolicy") == "Never" for p in pods):
            return None
        if self._victims_remain(gang):
            return None
        rank = min(priority.pod_priority(p) for p in pods)
        if self._nothing_below(rank):
            return None
        everywhere = self._gpu_nodes()
        domains = {d.describe(): d for d in candidates}  # a candidate's "node" is its domain, described

        def victims_in(where: str) -> list[preemption.Victim]:
            """Every victim touching the domain's nodes, each once (a gang may touch several)."""
            domain = domains[where]
            found: dict[tuple[str, ...], preemption.Victim] = {}
            for node in sorted(domain.nodes) if domain.key else everywhere:
                for victim in self._victims_on(node, rank, "", gang):
                    found.setdefault(tuple(p.uid for p in victim.pods), victim)
            return list(found.values())

        trial = self.s.cache.fork()
        best = preemption.best(
            preemption.candidates(
                trial, domains, victims_in, lambda where: fits_in(trial, domains[where]), self._budgets()
            )
        )
        if best is None or not best.victims:
            return None
        return await self._carry_out(gang, pods[0], best, best.node)

    async def _nominate(self, key: str, pod: dict[str, Any], node: str) -> None:
        meta = pod["metadata"]
        try:
            await self.s.client.patch(
                paths.pod_status(meta["namespace"], meta["name"]), {"status": {"nominatedNodeName": node}}
            )
        except NotFound:
            pass
        except (ApiError, TransportError) as exc:  # the nomination only informs; the reservation is ours
            log.warning("could not set nominatedNodeName on %s: %s", key, exc)

    async def _evict(self, preemptor: dict[str, Any], victim: preemption.Pod) -> None:
        """Say why on the victim (its DisruptionTarget condition, a Preempted event), then delete it with its own
        grace period. A victim already gone is what was wanted; a failed call is logged, and the preemptor's next
        attempt (its victims still there) chooses again."""
        s = self.s
        pmeta = preemptor["metadata"]
        condition = {
            "type": constants.CONDITION_DISRUPTION_TARGET,
            "status": "True",
            "reason": constants.REASON_PREEMPTION_BY_SCHEDULER,
            "message": f"{s.config.name}: preempting to accommodate a higher priority pod",
            "lastTransitionTime": now(),
        }
        ref = {"metadata": {"namespace": victim.namespace, "name": victim.name, "uid": victim.uid}}
        try:
            await s.client.patch(
                paths.pod_status(victim.namespace, victim.name),
                {"metadata": {"uid": victim.uid}, "status": {"conditions": [condition]}},
                kind="strategic",
            )
            await s.client.delete(
                paths.pod(victim.namespace, victim.name),
                {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": victim.uid}},
            )
        except NotFound:
            return
        except (ApiError, TransportError) as exc:
            log.warning("preempting %s for %s/%s failed: %s", victim.key, pmeta["namespace"], pmeta["name"], exc)
            return
        s.spawn(
            s.recorder.pod(
                ref,
                "Normal",
                constants.EVENT_PREEMPTED,
                f"Preempted by pod {pmeta['uid']} on node {victim.node}",
                series=False,
            )
        )
