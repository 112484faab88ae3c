"""The scheduling queue: which pods are tried, when, and in what order (kube-scheduler's backend/queue). It owns
every reason a pod waits: the keyed work queue the workers take pods from, each pod's backoff, the pods waiting
for a node's room or its GPUs, the claim pods per GpuClaim, the pods last found unschedulable (and the message
they last reported), and the nodes waiting claim pods keep from lower priorities (claims.priority).

The informers make one call per change they see, `changed(framework.ClusterEvent)`, and it retries exactly the
pods such a change could help, no sooner than their backoff allows: a pod refused on its node waits for the kinds of
change the refusing rule names (`Plugin.wakes_on`: a NodeAffinity refusal for the node's labels, a NodePorts one
for a pod leaving it, a map entry's busy GPUs for their release); a pod with PersistentVolumeClaims for its claims
and the volume objects; a claim pod (it may go to any GPU node) for GPUs freed, an inventory, its GpuClaim, or room
on a node with GPUs. It reads the pod cache only to order claim pods; it makes no API call and holds no GPU: what is
assumed or held is the cache's alone (scheduler.cache).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from gpu_scheduling import constants
from gpu_scheduling.claims import priority
from gpu_scheduling.claims.ledger import Ledger
from gpu_scheduling.kube.workqueue import Backoff, WorkQueue
from gpu_scheduling.scheduler import framework
from gpu_scheduling.scheduler.framework import ClusterEvent

_VOLUME_OBJECTS = frozenset({framework.PV, framework.STORAGE_CLASS, framework.CSI_NODE})
"""Changes that may let any pod waiting on its PersistentVolumeClaims find a volume, or room for one."""

_EXACT = frozenset({framework.PVC, framework.GPU_CLAIM})
"""Changes that wake exactly the pods naming the object: no pod left waiting can have been helped by them."""


def _placeholder(key: str) -> dict[str, Any]:
    """A pod the cache no longer has, for ordering: it sorts by its name alone."""
    namespace, _, name = key.partition("/")
    return {"metadata": {"namespace": namespace, "name": name}}


class SchedulingQueue:
    def __init__(self, pods: Mapping[str, dict[str, Any]], retry_seconds: float, max_retry_seconds: float):
        self._pods = pods  # the scheduler's pod cache, "<namespace>/<name>" -> pod: read to order claim pods
        self.work: WorkQueue[str] = WorkQueue()
        self.backoff = Backoff(retry_seconds, max_retry_seconds)
        self.order: str = constants.DEFAULT_QUEUE_ORDER
        """The queue order that applies (the runtime policy's): Priority or FIFO."""
        self.reservations = priority.Reservations()
        self._on_node: dict[str, set[str]] = defaultdict(set)  # node name -> map pods waiting for a change of it
        self._domain: set[str] = set()  # ... of those, the ones a domain's rule refused: any node's change may help
        self._waits_on: dict[str, tuple[str, frozenset[str]]] = {}  # the reverse, with the kinds that can help
        self._for_claims: dict[str, set[str]] = defaultdict(set)  # "<ns>/<pvc>" -> pods waiting on the claim
        self._claims_of: dict[str, tuple[str, ...]] = {}  # the reverse
        self._claim_pods: dict[str, set[str]] = defaultdict(set)  # "<ns>/<claim>" -> unbound pods naming it
        self._pod_claim: dict[str, str] = {}  # the reverse
        self._unschedulable: set[str] = set()  # pods last found unschedulable (flushed every flush_seconds)
        self._reported: dict[str, str] = {}  # pod key -> last Unschedulable message reported
        self.generation = 0
        """Counts the changes that could help a waiting pod (every call below "what could help"): a gang refused at
        the current generation has nothing new to find (scheduler.gangs)."""
        self._guesses = 0
        """Counts the changes whose wake-up is routed by a guess (room on a node, GPUs freed, an inventory, a
        volume, the queue order): the flush's business. A claim's change is not one (a GpuClaim's or a
        PersistentVolumeClaim's): it wakes exactly the pods naming the claim, and can help no other. A pod tried
        since the latest guess has nothing new to find, so the flush leaves it alone (a backlog's first pass, its
        claims arriving one by one, leaves nothing to flush)."""
        self._tried_at: dict[str, int] = {}  # pod key -> `_guesses` at its last attempt

    # ---- adding pods --------------------------------------------------------------------------------------------
    def add(self, key: str) -> None:
        """Try `key` now (new, or changed in a way a decision reads)."""
        self.unwait(key)
        self.work.add(key)

    def add_ordered(self, pods: Iterable[tuple[str, dict[str, Any]]]) -> None:
        """Try these pods now, in the order they are served (a new leader's first pass)."""
        for key, _ in sorted(pods, key=lambda kp: priority.order_key(kp[1], self.order)):
            self.work.add(key)

    def retry(self, key: str) -> None:
        """Try `key` again once its backoff allows."""
        self.work.add_after(key, self.backoff.remaining(key))

    def failed(self, key: str) -> None:
        """An API call for `key` failed: try it again after the work queue's own backoff."""
        self.work.add_rate_limited(key)

    def attempted(self, key: str) -> None:
        """A worker tries `key` now: its backoff grows, and it waits for nothing until this attempt says so."""
        self.backoff.attempted(key)
        self._tried_at[key] = self._guesses
        self.unwait(key)

    # ---- why a pod waits ----------------------------------------------------------------------------------------
    def wait_on_node(self, key: str, node: str, kinds: frozenset[str]) -> None:
        """Map pod `key` waits for a change of `node` of one of the `kinds` (framework.NODE_SCOPED: what can help
        the rule that refused it there; none: only a change of the pod itself)."""
        self.unwait_node(key)
        self._on_node[node].add(key)
        self._waits_on[key] = (node, kinds)
        if framework.POD_ADDED in kinds:
            self._domain.add(key)

    def wait_for_domains(self, key: str) -> None:
        """Pod `key` (a claim pod: any node may do) was refused by a rule of topology domains (pod affinity,
        spread): any pod added or gone, or any node changed, may help it."""
        self._domain.add(key)

    def wait_for_claims(self, key: str, claims: Iterable[str]) -> None:
        """Pod `key` waits on its PersistentVolumeClaims `claims` ("<namespace>/<name>"): to exist, to be bound,
        or for a volume to be found for them."""
        listed = tuple(claims)
        if not listed:
            return
        self._claims_of[key] = listed
        for claim in listed:
            self._for_claims[claim].add(key)

    def names_claim(self, key: str, claim: str) -> None:
        """Pod `key` names the GpuClaim `claim` ("<namespace>/<name>")."""
        self._claim_pods[claim].add(key)
        self._pod_claim[key] = claim

    def unschedulable(self, key: str, message: str) -> bool:
        """`key` cannot be placed now, for `message`. True when that is news (not the message last reported)."""
        self._unschedulable.add(key)
        if self._reported.get(key) == message:
            return False
        self._reported[key] = message
        return True

    def unreported(self, key: str) -> None:
        """Saying why `key` waits failed: say it again next time."""
        self._reported.pop(key, None)

    def unwait(self, key: str) -> None:
        self._unschedulable.discard(key)
        self._domain.discard(key)
        for claim in self._claims_of.pop(key, ()):
            waiting = self._for_claims.get(claim)
            if waiting is not None:
                waiting.discard(key)
                if not waiting:
                    del self._for_claims[claim]
        self.unwait_node(key)

    def unwait_node(self, key: str) -> None:
        waits = self._waits_on.pop(key, None)
        self._domain.discard(key)
        if waits is not None:
            keys = self._on_node.get(waits[0])
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._on_node[waits[0]]

    def forget(self, key: str) -> None:
        """`key` is bound, gone or gated: drop every trace of it (a worker busy with it finishes)."""
        self._reported.pop(key, None)
        self._tried_at.pop(key, None)
        self.backoff.reset(key)
        self.work.discard(key)
        self.unwait(key)
        claim = self._pod_claim.pop(key, None)
        self.release(key)
        if claim is not None:
            self._claim_pods[claim].discard(key)
            if not self._claim_pods[claim]:
                del self._claim_pods[claim]

    # ---- what could help ----------------------------------------------------------------------------------------
    def changed(self, event: ClusterEvent) -> None:
        """A change the informers saw: retry the pods it can help (see the module's docstring)."""
        kind = event.kind
        if kind in (framework.POD_ADDED, framework.NAMESPACE) and not self._domain:
            return  # every pod bound says so: a change only for the pods a domain's rule refused, if any wait
        self.generation += 1
        if kind not in _EXACT:
            self._guesses += 1
        if kind == framework.GPU_CLAIM:  # its pods are tried again at once: their backoff is reset
            for key in list(self._claim_pods.get(event.name or "", ())):
                self.backoff.reset(key)
                self.retry(key)
        elif kind == framework.PVC:
            for key in list(self._for_claims.get(event.name or "", ())):
                self.retry(key)
        elif kind in _VOLUME_OBJECTS:
            for key in list(self._claims_of):
                self.retry(key)
        for node in event.nodes:
            waiting = self._on_node.get(node)
            for key in [k for k in waiting or () if kind in self._waits_on[k][1]]:
                self.unwait_node(key)
                self.retry(key)
        if kind in (framework.NODE, framework.POD_GONE, framework.POD_ADDED, framework.NAMESPACE):
            for key in list(self._domain):  # a pod or node anywhere may change a topology domain's counts
                self.unwait_node(key)
                self.retry(key)
        if kind in (framework.GPUS_FREED, framework.GPU_INVENTORY) or (kind in framework.NODE_SCOPED and event.gpus):
            self._retry_claim_pods()

    def wake(self, keys: Iterable[str]) -> None:
        """An object exactly these pods name changed (their PodGroup, scheduler.gangs): they are tried again at once,
        their backoff reset, as a GpuClaim's pods are when it changes; it can help no other pod (not a guess)."""
        self.generation += 1
        for key in keys:
            self.backoff.reset(key)
            self.retry(key)

    def ledger_changed(self, ledger: Ledger) -> None:
        """The ledger changed: if it freed GPUs, the change is `GPUS_FREED` on those nodes. (The ledger collects the
        nodes in `freed`; they are taken here.)"""
        if ledger.freed:
            freed, ledger.freed = ledger.freed, set()
            self.changed(ClusterEvent(framework.GPUS_FREED, frozenset(freed)))

    def wake_claim_pods(self) -> None:
        """Retry the waiting claim pods (the order they are served, or the nodes kept from them, changed)."""
        self.generation += 1
        self._guesses += 1
        self._retry_claim_pods()

    def _retry_claim_pods(self) -> None:
        """Retry the waiting claim pods, in the order they are served (priority, then age; or age alone)."""
        waiting = [key for keys in self._claim_pods.values() for key in keys if key in self._unschedulable]
        if len(waiting) > 1:
            waiting.sort(key=lambda k: priority.order_key(self._pods.get(k) or _placeholder(k), self.order))
        for key in waiting:
            self.retry(key)

    def set_order(self, order: str) -> None:
        """The queue order changed: the waiting claim pods are tried again in the new one."""
        if order != self.order:
            self.order = order
            self.wake_claim_pods()

    def flush(self) -> int:
        """Retry every pod last found unschedulable, in case the change that could help it was routed to other
        pods: those tried before the latest change routed by a guess (nothing has changed for the others, and
        every change the caches see passes through this class). How many were retried."""
        stale = [key for key in self._unschedulable if self._tried_at.get(key) != self._guesses]
        for key in stale:
            self.retry(key)
        return len(stale)

    # ---- reservations (claims.priority) -------------------------------------------------------------------------
    def reserved_for(self, rank: int) -> Mapping[str, str]:
        """The nodes kept from a pod of priority `rank` under the current order (node -> its waiter)."""
        return self.reservations.reserved_for(rank, self.order)

    def reserve(self, waiter: priority.Waiter) -> None:
        """`waiter` waits for busy GPUs and keeps its nodes from lower priorities."""
        self.reservations.wait(waiter)

    def release(self, key: str) -> None:
        """Pod `key` waits no more (placed, gone, or can never fit): the nodes it kept are free for lower
        priorities, which are tried again if any waits."""
        if self.reservations.done(key):
            self.wake_claim_pods()
