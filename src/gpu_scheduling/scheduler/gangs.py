"""The scheduler's gang path: a pod that belongs to a gang (claims.gangs) is never placed alone; the first of its
members a worker takes decides for the whole gang; a worker that takes another member meanwhile leaves it to that
one (which decides once more when done), so two workers never split a gang and none waits for another.

One decision, in three steps:

1. Read: the members in the cache, bound or waiting; their agreed spec; if fewer than its minimum are present the
   gang waits (said on every waiting member) and, past `--gang-timeout`, a GangIncomplete event says so once.
2. Decide, with no await: `claims.gangs.attempt` says which members to place and in which domains, and
   `claims.gangs.transact` places every one of them in one candidate domain (claim members through the claim path's
   allocator, map members on their map entry's node) on a trial copy of the cache (scheduler.cache.Trial), each
   member's GPUs and room assumed there before the next member is placed; a member that does not fit undoes the
   domain's placements and the next domain is tried. Only a domain that takes the whole gang is assumed in the
   cache itself (`Cache.commit`); the live state never sees a trial.
3. Commit: the GPU Leases of every claim member are created (any refused: every member's are released, but for
   a member whose earlier bind got no answer, and the gang is retried); only then are the members bound,
   concurrently. So no member is bound before the whole gang was decided and locked. A bind of unknown outcome
   keeps its member assumed and is retried by the next attempt. What each answer makes of the members is
   `claims.gangs.leases_answered` and `binds_answered`'s to say (pure, driven by tests/unit/claims/test_gangs.py's
   state machine); this module makes the calls and the writes.

Kubernetes' own gang API (KEP-4671): where discovery at start finds `scheduling.k8s.io/v1beta1` PodGroups served,
a PodGroup informer keeps them, and a pod naming one (`spec.schedulingGroup.podGroupName`, or gpu-webhook's record
of it) is a member of the gang of that name with the PodGroup's minimum and topology (claims.gangs `Native`). A
member whose PodGroup is missing, or not served, waits with the reason; a PodGroup's arrival or change tries the
pods that name it again at once (no LIST per pod). A basic PodGroup makes no gang: its pods are placed one by one.

A waiting gang holds nothing and keeps no nodes from others; gangs are tried as their members are (priority, then
age, on every change that could help) and a gang's failed decision is not repeated until something changed.
After start, a gang whose bound members drop below its minimum is reported (GangBelowMinimum) and kept running.

Preemption (scheduler.postfilter, scheduler.preemption): a gang that no domain takes may preempt pods of lower
priority than its lowest waiting member, for all of its members in one domain or not at all (`_fits_whole` tries
the whole gang on a trial); a running gang is a victim only whole, every placed member at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from gpu_scheduling import constants, gpumap, podrequest
from gpu_scheduling.claims import gangs, objects, priority
from gpu_scheduling.claims.ledger import Hold
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import NotFound
from gpu_scheduling.kube.informer import Informer
from gpu_scheduling.scheduler import decision
from gpu_scheduling.scheduler.claims import Placed
from gpu_scheduling.scheduler.volumebinder import Outcome

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from gpu_scheduling import gpumap as gpumap_module
    from gpu_scheduling.claims.ledger import Ledger
    from gpu_scheduling.kube.client import Client
    from gpu_scheduling.scheduler.cache import Cache, Trial
    from gpu_scheduling.scheduler.claims import ClaimPath
    from gpu_scheduling.scheduler.events import Recorder
    from gpu_scheduling.scheduler.metrics import Metrics
    from gpu_scheduling.scheduler.postfilter import PostFilter
    from gpu_scheduling.scheduler.queue import SchedulingQueue
    from gpu_scheduling.scheduler.volumebinder import VolumeBinder

log = logging.getLogger(__name__)

INCOMPLETE_GRACE = 5.0
"""Seconds a gang may be short of members before its waiting members say so."""


@dataclasses.dataclass(frozen=True)
class Member:
    key: str
    pod: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Placement:
    member: Member
    hold: Hold
    placed: Placed | None  # claim members: what their bind and claim status need


class Host(Protocol):
    """What the gang path reads and calls of the scheduler that runs it (scheduler.controller.Scheduler is one):
    named here, so that this module imports nothing of the controller."""

    config: Any
    client: Client
    pods: Informer
    nodes: Informer
    ledger: Ledger
    cache: Cache
    maps: gpumap_module.ParseCache
    queue: SchedulingQueue
    claim_path: ClaimPath
    binder: VolumeBinder
    metrics: Metrics
    recorder: Recorder
    postfilter: PostFilter
    leading: bool

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None: ...

    async def bind(self, key: str, pod: dict[str, Any], node: str, placed: Placed | None = None) -> bool | None: ...

    async def report_unschedulable(self, key: str, pod: dict[str, Any], message: str) -> None: ...


class GangPath:
    def __init__(self, scheduler: Host, timeout_seconds: float):
        self.s = scheduler
        self.timeout = timeout_seconds
        self.book = gangs.Book()
        self._deciding: set[str] = set()  # gangs a worker is deciding now
        self._again: set[str] = set()  # ... and that another member's worker asked to decide once more
        self._failed: dict[str, tuple[int, str]] = {}  # gang -> (queue generation, message) of its last refusal
        self._incomplete_since: dict[str, float] = {}  # gang -> when it was first found short of members
        self._overdue: set[str] = set()  # gangs whose GangIncomplete event was written
        # Kubernetes' PodGroups, where the apiserver serves them (`watch`), and which pods name which PodGroup
        # ("<namespace>/<name>"), so that a PodGroup's change reaches exactly them.
        self.groups = Informer(
            scheduler.client, paths.ALL_POD_GROUPS, self._on_pod_group, name="podgroups", transform=_pod_group_view
        )
        self.served = False
        self._naming: dict[str, set[str]] = {}  # PodGroup key -> keys of the pods that name it
        self._named: dict[str, str] = {}  # the reverse

    async def watch(self) -> list[asyncio.Task[Any]]:
        """Ask the apiserver whether it serves PodGroups; if so, watch them (until synced) and return the task.
        Otherwise pods naming one wait, saying so (a cluster whose minor or gates do not serve them, docs/gangs.md);
        the answer holds until the scheduler restarts."""
        try:
            api = await self.s.client.get(paths.POD_GROUP_API)
        except NotFound:
            api = {}
        if constants.POD_GROUP_PLURAL not in {r.get("name") for r in api.get("resources") or []}:
            log.info(
                "the apiserver serves no %s PodGroups: pods that name one wait (docs/gangs.md)",
                constants.POD_GROUP_API_VERSION,
            )
            return []
        self.served = True
        task = asyncio.create_task(self.groups.run(), name="podgroups-informer")
        await self.groups.synced.wait()
        return [task]

    # ---- membership (the controller's pod handler) --------------------------------------------------------------
    def gang_of(self, pod: Mapping[str, Any]) -> str | None:
        """The gang key ("<namespace>/<gang>") of a pod, or None; a malformed gang name counts as none here (the
        book's membership), and `read_gang` says why."""
        gang = self.read_gang(pod)
        return gang if isinstance(gang, str) else None

    def read_gang(self, pod: Mapping[str, Any]) -> str | gangs.GangError | None:
        """The gang key of a pod, None when it belongs to none, or why its gang cannot be read (such a pod is not
        placed: placing a member alone is what a gang must never do)."""
        meta = pod.get("metadata") or {}
        try:
            name = gangs.gang_name(meta.get("annotations") or {}, self._gang_ref(pod), self._native(pod))
        except gangs.GangError as exc:
            return exc
        return f"{meta.get('namespace')}/{name}" if name else None

    def _native(self, pod: Mapping[str, Any]) -> gangs.Native | None:
        """The PodGroup `pod` names and what the scheduler has of it; None when it names none. Raises GangError
        (claims.gangs.pod_group_ref)."""
        meta = pod.get("metadata") or {}
        name = gangs.pod_group_ref(pod.get("spec"), meta.get("annotations") or {})
        if name is None:
            return None
        group = self.groups.cache.get(f"{meta.get('namespace')}/{name}") if self.served else None
        return gangs.Native(name, group, self.served)

    def _index(self, key: str, pod: Mapping[str, Any] | None) -> None:
        """Record which PodGroup pod `key` names now (none when gone, or when the name cannot be read)."""
        try:
            native = self._native(pod) if pod is not None else None
        except gangs.GangError:
            native = None
        group = f"{key.partition('/')[0]}/{native.name}" if native is not None else None
        old = self._named.get(key)
        if old == group:
            return
        if old is not None:
            naming = self._naming[old]
            naming.discard(key)
            if not naming:
                del self._naming[old]
            del self._named[key]
        if group is not None:
            self._named[key] = group
            self._naming.setdefault(group, set()).add(key)

    def _on_pod_group(self, kind: str, group: dict[str, Any], old: dict[str, Any] | None) -> None:
        """A PodGroup appeared, changed or went: the pods that name it are read again (a basic policy takes them
        out of any gang) and the waiting ones tried again at once; its gang's last refusal is stale."""
        if kind == "MODIFIED" and old is not None and old.get("spec") == group.get("spec"):
            return  # its status (kube-scheduler's conditions, if it runs): nothing the gang reads
        meta = group["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        self._failed.pop(key, None)
        cache = self.s.pods.cache
        waiting = []
        for pod_key in sorted(self._naming.get(key, ())):
            pod = cache.get(pod_key)
            if pod is None:
                continue
            self.track(pod_key, pod)
            if not self._is_bound(pod):
                waiting.append(pod_key)
        self.s.queue.wake(waiting)

    def _gang_ref(self, pod: Mapping[str, Any]) -> Any:
        """The `spec.gangRef` of the claim a claim pod names (None: none, or no such claim yet)."""
        claim_key = self._claim_key(pod) if self.s.claim_path.enabled else None
        claim = self.s.claim_path.claims.cache.get(claim_key) if claim_key else None
        return ((claim or {}).get("spec") or {}).get("gangRef")

    def strategy_of(self, pod: Mapping[str, Any]) -> str:
        """The node strategy of a claim member (for the attempts' metrics); "" for a map member."""
        claim = self._claim_key(pod)
        return self.s.claim_path.strategy_of(claim) if claim else ""

    def track(self, key: str, pod: Mapping[str, Any]) -> str | gangs.GangError | None:
        """Record which gang pod `key` belongs to now (and which PodGroup it names); what `read_gang` says of it."""
        gang = self.read_gang(pod)
        self.book.set(key, gang if isinstance(gang, str) else None)
        self._index(key, pod)
        return gang

    def member_bound(self, key: str) -> None:
        gang = self.book.gang_of(key)
        if gang is not None and gang not in self.book.complete:
            spec = self._spec(gang)
            if spec is not None and self._bound_count(gang) >= spec.min_members:
                self.book.complete.add(gang)

    def member_gone(self, key: str, succeeded: bool) -> None:
        """Pod `key` is deleted or finished: a gang that was complete and now has fewer bound members than its
        minimum is reported on its remaining members (kept running: docs/gangs.md), unless the member left by
        succeeding (a finishing Job's members leave one by one)."""
        gang = self.book.gang_of(key)
        self.book.set(key, None)
        self._index(key, None)
        if gang is None:
            return
        # The gang changed: a refusal that named the member is stale, and a smaller gang may fit now.
        if self._failed.pop(gang, None) is not None or gang in self._incomplete_since:
            for other in self.book.members(gang):
                if not self._is_bound(self.s.pods.cache.get(other)):
                    self.s.queue.retry(other)
        if not self.book.members(gang):
            self._forget(gang)
            return
        if succeeded:
            self.book.complete.discard(gang)
            return
        spec = self._spec(gang)
        if gang not in self.book.complete or spec is None:
            return
        bound = self._bound_count(gang)
        if bound >= spec.min_members:
            return
        self.book.complete.discard(gang)
        self.s.metrics.gang_broken()
        message = (
            f"{spec.describe()} dropped below its minimum: {bound} of {spec.min_members} members bound after "
            f"{key} left; the others keep running (no eviction)"
        )
        log.warning("%s", message)
        if self.s.leading:
            for other in self.book.members(gang):
                pod = self.s.pods.cache.get(other)
                if pod is not None and (pod.get("spec") or {}).get("nodeName"):
                    self.s.spawn(self.s.recorder.pod(pod, "Warning", constants.EVENT_GANG_BROKEN, message))

    def _forget(self, gang: str) -> None:
        self.s.queue.release(_waiter(gang))
        self.s.postfilter.forget(gang)
        self._failed.pop(gang, None)
        self._incomplete_since.pop(gang, None)
        self._overdue.discard(gang)
        self._again.discard(gang)

    def _bound_count(self, gang: str) -> int:
        return sum(1 for k in self.book.members(gang) if self._is_bound(self.s.pods.cache.get(k)))

    def _is_bound(self, pod: Mapping[str, Any] | None) -> bool:
        if pod is None:
            return False
        if (pod.get("spec") or {}).get("nodeName"):
            return True
        hold = self.s.ledger.hold(pod["metadata"]["uid"])
        return hold is not None and hold.bound

    def _spec(self, gang: str) -> gangs.Spec | None:
        try:
            return self._read_spec(gang, self._pods(gang))
        except gangs.GangError:
            return None

    def _pods(self, gang: str) -> dict[str, dict[str, Any]]:
        cache = self.s.pods.cache
        return {k: cache[k] for k in sorted(self.book.members(gang)) if k in cache}

    def _read_spec(self, gang: str, pods: Mapping[str, Mapping[str, Any]]) -> gangs.Spec:
        name = gang.partition("/")[2]
        return gangs.agreed(
            {k: gangs.read((p["metadata"].get("annotations") or {}), name, self._native(p)) for k, p in pods.items()}
        )

    # ---- deciding ----------------------------------------------------------------------------------------------
    async def schedule(self, key: str, gang: str) -> str | None:
        """Decide for the gang of pod `key` (a worker took it off the queue); the result for the metrics, or None
        when another worker is deciding for the gang: that one decides once more when it is done (so it sees this
        member) and this worker is free for other pods, instead of waiting for a decision that may take seconds of
        Lease writes and binds (W3: every worker was waiting on gangs being bound while new gangs waited)."""
        if gang in self._deciding:
            self._again.add(gang)
            return None
        self._deciding.add(gang)
        try:
            while True:
                self._again.discard(gang)
                result = await self._decide(gang)
                if result is not None:
                    self.s.metrics.gang_attempt(result)
                if gang not in self._again:
                    break
        finally:
            self._deciding.discard(gang)
        return "scheduled" if result in (None, "scheduled") else "error" if result == "error" else "unschedulable"

    async def _decide(self, gang: str) -> str | None:
        s = self.s
        pods = self._pods(gang)
        bound = {k: p for k, p in pods.items() if self._is_bound(p)}
        waiting = {
            k: p
            for k, p in pods.items()
            if k not in bound and decision.is_schedulable_pod(p, s.config.name) and not decision.is_gated(p)
        }
        if not waiting:
            return None  # decided already (a member's earlier decision placed every one of them)
        for k, p in waiting.items():  # woken as claim pods are (freed GPUs, new room); a claim's pods by their claim
            s.queue.names_claim(k, self._claim_key(p) or f"{gang} (gang)")
        if not await self._claims_seen(waiting):
            return "unschedulable"  # nothing said: a claim's arrival tries its member, and so the gang, again
        try:
            spec = self._read_spec(gang, pods)
        except gangs.GangError as exc:
            await self._waits(waiting, str(exc))
            return "unschedulable"
        present = len(bound) + len(waiting)
        if present < spec.min_members:
            message = self._incomplete(gang, spec, present, waiting)
            s.queue.release(_waiter(gang))  # a gang short of members keeps nothing from others
            if message is not None:
                await self._waits(waiting, message)
            return "incomplete"
        self._incomplete_since.pop(gang, None)
        self._overdue.discard(gang)
        generation = s.queue.generation
        failed = self._failed.get(gang)
        if failed is not None and failed[0] == generation:
            await self._waits(waiting, failed[1])  # nothing changed since it was refused
            return "unschedulable"
        plan = gangs.attempt(
            spec,
            {k: Member(k, p) for k, p in waiting.items()},
            {k: h for k, p in waiting.items() if (h := s.ledger.hold(p["metadata"]["uid"])) is not None},
            [self._node_of(p) for p in bound.values()],
            self._labels,
            self._free,
        )
        if isinstance(plan.candidates, str):
            message = f"{spec.describe()}: {plan.candidates}"
            self._failed[gang] = (generation, message)
            await self._waits(waiting, message)
            return "unschedulable"
        trial = s.cache.fork()
        outcome = gangs.transact(
            plan.place,
            plan.candidates,
            lambda member, domain: self._place(trial, member, domain),
            lambda placement: trial.retract(placement.hold.uid),
            lambda m: m.key.partition("/")[2],
        )
        if not isinstance(outcome, list) and s.cache.commit(trial):
            for k in waiting:  # a bug (Cache.commit logged it): nothing was kept, and the gang is tried again
                s.queue.retry(k)
            return "error"
        if isinstance(outcome, list):
            message = gangs.explain(spec, outcome)
            # PostFilter: preempting pods of lower priority in one domain may let the whole gang in.
            preempting = await s.postfilter.preempt_gang(
                gang, waiting, plan.candidates, lambda t, d: self._fits_whole(t, plan.place, d)
            )
            if preempting is not None:
                message = f"{message}; {preempting}"
            self._failed[gang] = (generation, message)
            self._reserve(gang, waiting)
            for k, p in waiting.items():  # pod affinity or spread: a pod or node anywhere may change the verdict
                if decision.asks_for_domains(p):
                    s.queue.wait_for_domains(k)
            await self._waits(waiting, message)
            return "unschedulable"
        self._failed.pop(gang, None)
        s.queue.release(_waiter(gang))
        retried = [self._retry(waiting[k], h) for k, h in plan.retry.items()]
        placements = outcome.placements + retried
        log.info(
            "gang %s: %d members decided in %s: %s",
            gang,
            len(placements),
            outcome.domain.describe(),
            ", ".join(f"{p.member.key}->{p.hold.node}:{','.join(map(str, p.hold.gpu_ids))}" for p in placements),
        )
        return await self._commit(gang, outcome.placements, retried)

    def _incomplete(
        self, gang: str, spec: gangs.Spec, present: int, waiting: Mapping[str, dict[str, Any]]
    ) -> str | None:
        """Why a gang short of members waits; None while it has been short for less than INCOMPLETE_GRACE (a Job's
        pods are created within seconds of each other: saying so on each would cost two writes per member)."""
        now = time.monotonic()
        since = self._incomplete_since.setdefault(gang, now)
        overdue = now - since >= self.timeout
        first = next(iter(waiting))
        if now - since < INCOMPLETE_GRACE:
            self.s.queue.work.add_after(first, since + INCOMPLETE_GRACE - now + 0.01)
            return None
        message = gangs.incomplete(spec, self.timeout if overdue else None)
        if not overdue:
            self.s.queue.work.add_after(first, since + self.timeout - now + 0.01)  # say it once it is overdue
        elif gang not in self._overdue:
            self._overdue.add(gang)
            said = f"{message} ({present} of {spec.min_members} present)"
            for pod in waiting.values():
                self.s.spawn(self.s.recorder.pod(pod, "Warning", constants.EVENT_GANG_INCOMPLETE, said))
        return message

    def _node_of(self, pod: Mapping[str, Any]) -> str:
        """The node of a bound member: the API's word, or ours while the watch has not shown our bind."""
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            return str(node)
        hold = self.s.ledger.hold(pod["metadata"]["uid"])
        return hold.node if hold is not None else ""

    async def _claims_seen(self, waiting: Mapping[str, dict[str, Any]]) -> bool:
        """Whether every claim the waiting members name is in the cache or absent from the API too. A claim the
        watch has not brought yet (created just before its pod) would refuse the whole gang with a false "not
        found", written on every member and written again when it arrives (ClaimPath.unseen)."""
        for key, pod in waiting.items():
            claim = self._claim_key(pod)
            if claim is None or claim in self.s.claim_path.claims.cache:
                continue
            namespace, _, name = claim.partition("/")
            if await self.s.claim_path.unseen(namespace, key.partition("/")[2], name) is None:
                return False
        return True

    def _claim_key(self, pod: Mapping[str, Any]) -> str | None:
        """ "<namespace>/<claim>" of a claim member, None for a map member (or a claim name that cannot be read)."""
        if not decision.is_claim_pod(pod):
            return None
        meta = pod["metadata"]
        try:
            return f"{meta['namespace']}/{podrequest.claim_name(meta)}"
        except gpumap.PodMapError:
            return None

    def _reserve(self, gang: str, waiting: Mapping[str, dict[str, Any]]) -> None:
        """A gang refused for busy GPUs keeps every node its claim members could use from pods (and gangs) of lower
        priority, as a waiting claim pod does (claims.priority; queue order Priority only): a stream of small,
        lower-priority claims cannot starve it. Its priority is its lowest member's, so it keeps nothing from its
        own members."""
        s = self.s
        if s.queue.order != "Priority":
            return
        nodes: set[str] = set()
        for pod in waiting.values():
            claim_key = self._claim_key(pod)
            claim = s.claim_path.claims.cache.get(claim_key) if claim_key else None
            if claim is not None:
                nodes |= s.claim_path.could_use(pod, claim, s.nodes.cache)
        if nodes:
            rank = min(priority.pod_priority(p) for p in waiting.values())
            created = min(str(p["metadata"].get("creationTimestamp") or "") for p in waiting.values())
            s.queue.reserve(priority.Waiter(_waiter(gang), rank, created, frozenset(nodes)))

    def _labels(self) -> dict[str, Mapping[str, str]]:
        return {name: (n["metadata"].get("labels") or {}) for name, n in self.s.nodes.cache.items()}

    def _free(self) -> dict[str, int]:
        """Free GPUs per node with an inventory (to order the domains, tightest first)."""
        free: dict[str, int] = {}
        for status in self.s.claim_path.statuses.cache.values():
            node = objects.inventory_node(status)
            if node is None:
                continue
            held = {g for h in self.s.ledger.holdings(node) for g in h.gpu_ids}
            devices = (status.get("status") or {}).get("devices") or []
            free[node] = sum(1 for d in devices if d.get("health", "Healthy") == "Healthy" and d.get("id") not in held)
        return free

    def _place(self, trial: Trial, member: Member, domain: gangs.Domain) -> Placement | str:
        """Assume what `member` takes in `domain` on `trial` (no await), or why it does not fit there."""
        pod = member.pod
        meta = pod["metadata"]
        within = domain.nodes if domain.key else None
        if not decision.is_claim_pod(pod):
            return self._place_map(trial, member, within)
        try:
            claim_name = podrequest.claim_name(meta)
        except gpumap.PodMapError as exc:
            return str(exc)
        chosen = self.s.claim_path.choose(pod, claim_name, self.s.nodes.cache, trial, within)
        if isinstance(chosen, str):
            return chosen
        hold, message = chosen
        claim_key = f"{meta['namespace']}/{claim_name}"
        claim = self.s.claim_path.claims.cache[claim_key]
        return Placement(member, hold, Placed(claim, hold, message, self.s.claim_path.strategy_of(claim_key)))

    def _fits_whole(self, trial: Trial, members: list[Member], domain: gangs.Domain) -> bool:
        """Whether every member in `members` fits in `domain` on `trial` (preemption's question); nothing of the
        attempt stays on the trial."""
        outcome = gangs.transact(
            members,
            [domain],
            lambda member, d: self._place(trial, member, d),
            lambda placement: trial.retract(placement.hold.uid),
            lambda m: m.key,
        )
        if isinstance(outcome, list):
            return False
        for placement in outcome.placements:
            trial.retract(placement.hold.uid)
        return True

    def _place_map(self, trial: Trial, member: Member, within: frozenset[str] | None) -> Placement | str:
        s = self.s
        pod = member.pod
        verdict = decision.decide(pod, s.nodes.cache, s.config.isolated_gpus, trial.snapshot, s.maps)
        if isinstance(verdict, decision.Unschedulable):
            return verdict.message
        if within is not None and verdict.node not in within:
            return f"its map entry puts it on {verdict.node}, outside the domain"
        hold = Hold(pod["metadata"]["uid"], member.key, verdict.node, verdict.entry.gpu_ids, "Shared", "map")
        conflicts = trial.assume(pod, hold)
        if conflicts:
            c = conflicts[0]
            return f"GPU {c.gpu} of node {c.node} is held exclusively by {c.holder}"
        return Placement(member, hold, None)

    def _retry(self, pod: dict[str, Any], hold: Hold) -> Placement:
        """A member assumed by an earlier attempt whose bind got no answer: bound to the same GPUs."""
        member = Member(hold.pod, pod)
        if hold.source != "claim":
            return Placement(member, hold, None)
        claim_key = f"{pod['metadata']['namespace']}/{hold.claim}"
        claim = self.s.claim_path.claims.cache.get(claim_key) or {"metadata": {"namespace": "", "name": hold.claim}}
        message = f"allocated {hold.node}:{','.join(map(str, hold.gpu_ids))} (retrying an earlier attempt)"
        return Placement(member, hold, Placed(claim, hold, message, self.s.claim_path.strategy_of(claim_key)))

    # ---- committing --------------------------------------------------------------------------------------------
    async def _commit(self, gang: str, decided: list[Placement], retried: list[Placement]) -> str:
        """Lock and bind a decided gang: the members this decision placed (`decided`) and those an earlier one did,
        whose bind got no answer (`retried`)."""
        s = self.s
        placements = decided + retried
        claims = [p for p in placements if p.placed is not None]
        locked = await asyncio.gather(*(s.claim_path.acquire(p.hold) for p in claims))
        refused = gangs.leases_answered(decided, retried, locked)
        if refused is not None:
            for p in refused.abandoned:
                self._abandon(p)
            await self._waits(
                {p.member.key: p.member.pod for p in placements},
                f"gang {gang.partition('/')[2]}: some of its GPUs were taken meanwhile; retrying",
            )
            for p in placements:
                s.queue.retry(p.member.key)
            return "error"
        if not await self._volumes_ready(gang, placements):
            return "error"
        outcomes = await asyncio.gather(
            *(s.bind(p.member.key, p.member.pod, p.hold.node, p.placed) for p in placements)
        )
        settled = gangs.binds_answered(placements, outcomes)
        statuses: dict[str, tuple[Placed, str]] = {}  # each claim's status is written once, after its pods' binds
        for p in settled.bound:
            if p.placed is not None:
                at = await s.claim_path.bound(p.placed, write=False)
                statuses[p.placed.claim["metadata"].get("uid", p.hold.claim)] = (p.placed, at)
            else:
                s.cache.confirm(p.hold.uid)
        for p in settled.abandoned:
            self._abandon(p)
        for placed, at in statuses.values():
            await s.claim_path.write_bound(placed, at)
        if settled.whole:
            created = [decision.created_at(p.member.pod) for p in placements]
            known = [c for c in created if c is not None]
            if known:
                s.metrics.gang_scheduled(max(0.0, time.time() - max(known)))
            self.book.complete.add(gang)
            return "scheduled"
        return "error"

    async def _volumes_ready(self, gang: str, placements: list[Placement]) -> bool:
        """VolumeBinding's PreBind for the whole gang (scheduler.volumebinder): no member is bound until the claims
        of every member are. While some are being bound, every member keeps what it assumed and is tried again when
        its claims change (the next attempt finds them assumed and retries the same placement); if some cannot be,
        no member is bound and the gang holds nothing."""
        s = self.s
        outcomes = []
        for p in placements:
            node = s.nodes.cache.get(p.hold.node)
            outcomes.append(Outcome.FAILED if node is None else await s.binder.prebind(p.member.pod, node))
        if all(o is Outcome.READY for o in outcomes):
            return True
        message = s.binder.message
        for p in placements:
            s.queue.wait_for_claims(p.member.key, s.binder.claims_of(p.member.pod))
            s.queue.retry(p.member.key)
        if Outcome.FAILED in outcomes:
            for p in placements:
                self._abandon(p)
            await self._waits(
                {p.member.key: p.member.pod for p in placements}, f"gang {gang.partition('/')[2]}: {message}"
            )
        else:
            log.info("gang %s: %s; no member is bound before every member's claims are", gang, message)
        return False

    def _abandon(self, placement: Placement) -> None:
        """The attempt for this member is over without a binding: it holds nothing."""
        self.s.cache.forget(placement.hold.uid)

    async def _waits(self, waiting: Mapping[str, dict[str, Any]], message: str) -> None:
        """Every waiting member (and each claim they name) says why the gang waits."""
        claims: dict[str, dict[str, Any]] = {}
        for key, pod in waiting.items():
            await self.s.report_unschedulable(key, pod, message)
            claim_key = self._claim_key(pod)
            claim = self.s.claim_path.claims.cache.get(claim_key) if claim_key else None
            if claim is not None:
                claims[claim["metadata"].get("uid", claim_key or "")] = claim
        for claim in claims.values():
            await self.s.claim_path.set_claim_status(claim, {"phase": "Pending", "message": message})


def _pod_group_view(group: dict[str, Any]) -> dict[str, Any]:
    """What the scheduler keeps of a PodGroup (its informer's transform): its name and what makes its gang."""
    meta = group.get("metadata") or {}
    spec = group.get("spec") or {}
    return {
        "metadata": {k: meta[k] for k in ("name", "namespace", "resourceVersion") if k in meta},
        "spec": {k: spec[k] for k in ("schedulingPolicy", "schedulingConstraints") if k in spec},
    }


def _waiter(gang: str) -> str:
    """How a waiting gang is named to the pods it keeps nodes from (claims.priority)."""
    return f"gang {gang}"
