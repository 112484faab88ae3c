"""The board's state: which pod holds which GPU of which node, by which source, and where the sources disagree, built
incrementally from the objects the informers deliver. Pure: plain dicts in, plain dicts out; no client, no event
loop, no clock (the server owns those and calls `apply` from its informer handlers).

Who holds a GPU is what the scheduler's ledger counts (see claims.ledger): a live bound map pod's map entry, a live
bound claim pod's allocation annotation, and the holders of the GPU's Lease. The board shows all three side by side
and flags a GPU where they disagree; the inventory agent's `inUseBy` is shown too, as the copy it is.

Cost: `apply` costs O(what the object touches): indexes (pods by name, uid and node; Leases by name, node and the
uids they name; inventories, Nodes, claims) say which nodes an object changes, and only those nodes' documents are
rebuilt, lazily, when `document`, `patch` or `take_changes` next asks. A rebuilt part that came out equal to the old
one keeps the old object, so `take_changes` reports only what really changed.

Nothing here raises on a malformed object: a field of the wrong type is read as absent (hostile annotations, a Lease
with garbage labels), and what is copied into the document is bounded (messages, the pending list, holders).
The documents returned share their parts with the caches: callers serialise them and must not modify them.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeVar

from gpu_scheduling import constants, gpumap
from gpu_scheduling.claims import gang_rows, occupancy
from gpu_scheduling.claims.ledger import Hold
from gpu_scheduling.claims.occupancy import MAX_GPUS_PER_HOLD as MAX_GPUS_PER_HOLD
from gpu_scheduling.claims.occupancy import MAX_MESSAGE as MAX_MESSAGE
from gpu_scheduling.claims.occupancy import MAX_TEXT as MAX_TEXT
from gpu_scheduling.claims.occupancy import Finding, Holder
from gpu_scheduling.claims.occupancy import Inventory as _Status
from gpu_scheduling.claims.occupancy import Lease as _Lease
from gpu_scheduling.claims.occupancy import integer as _integer
from gpu_scheduling.claims.occupancy import items as _list
from gpu_scheduling.claims.occupancy import mapping as _mapping
from gpu_scheduling.claims.occupancy import string as _string
from gpu_scheduling.claims.occupancy import strings as _strings
from gpu_scheduling.claims.occupancy import text as _text

JSON = dict[str, Any]

#: The resources `apply` understands (the informers' names); anything else is ignored.
RESOURCES: Final = ("nodes", "gpunodestatuses", "pods", "gpuclaims", "leases", "policies")

#: The kinds of FLAG, with their severity (the occupancy model's findings).
FLAG_SEVERITY: Final = occupancy.FINDINGS

#: Bounds on what one object may put into the document.
MAX_PENDING: Final = 500  # entries of `pending` (summary.pending is the true count)
MAX_CREATED: Final = 500  # workloads in `created`
MAX_CREATED_OBJECTS: Final = 100  # objects per created workload
MAX_GANGS: Final = 500  # rows of `gangs`, by namespace and name (gangs.total is the true count)
MAX_GANG_REF: Final = 512  # characters of a claim's gangRef kept (a longer one is no valid name either)

_FINISHED = occupancy.FINISHED


# ---- changes -----------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Changes:
    """What changed since the last `take_changes`: the nodes (added, changed or gone) and whether the groups, the
    pending list, the strategy, the created workloads or the gangs changed. `summary` is set when only the summary
    changed (a flag no node shows); the summary is in every patch anyway. Falsy when nothing changed."""

    nodes: set[str] = dataclasses.field(default_factory=set)
    groups: bool = False
    pending: bool = False
    strategy: bool = False
    created: bool = False
    gangs: bool = False
    summary: bool = False

    def merge(self, other: Changes) -> Changes:
        """The union of both (neither is modified)."""
        return Changes(
            self.nodes | other.nodes,
            self.groups or other.groups,
            self.pending or other.pending,
            self.strategy or other.strategy,
            self.created or other.created,
            self.gangs or other.gangs,
            self.summary or other.summary,
        )

    def __bool__(self) -> bool:
        return (
            bool(self.nodes)
            or self.groups
            or self.pending
            or self.strategy
            or self.created
            or self.gangs
            or self.summary
        )


# ---- reading fields of any type ------------------------------------------------------------------------------------


def one_line(value: object, limit: int = MAX_MESSAGE) -> str:
    """A string on one line of at most `limit` characters ("" for anything that is not a string)."""
    if not isinstance(value, str):
        return ""
    return " ".join(value[: limit * 4].split())[:limit]


def _flag(finding: Finding) -> JSON:
    return {"kind": finding.kind, "severity": finding.severity, "message": finding.message}


# The records below are built per event: plain slotted dataclasses (a frozen one's __init__ is several times slower).
# They are never modified once built.


@dataclasses.dataclass(slots=True)
class _Meta:
    key: str  # the informer's key: "<namespace>/<name>", or "<name>" for cluster-scoped objects
    name: str
    namespace: str
    uid: str
    labels: dict[str, str]
    annotations: dict[str, str]
    created: str | None
    deleting: bool
    controller: tuple[str, str] | None  # (kind, name) of the controller ownerReference

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


def _key(obj: object) -> tuple[str, str] | None:
    """(name, the informer's key) of an object, or None when it has no name (nothing can key it)."""
    meta = _mapping(_mapping(obj).get("metadata"))
    name = _string(meta.get("name"))
    if name is None:
        return None
    namespace = _string(meta.get("namespace"))
    return name, f"{namespace}/{name}" if namespace else name


def _meta(obj: Mapping[str, Any], *, annotations: bool = True) -> _Meta | None:
    """The metadata the board reads (the annotations only when asked for), or None when the object has no name."""
    meta = _mapping(obj.get("metadata"))
    name = _string(meta.get("name"))
    if name is None:
        return None
    namespace = _string(meta.get("namespace")) or ""
    controller = None
    for owner in _list(meta.get("ownerReferences")):
        owner = _mapping(owner)
        kind, owner_name = _string(owner.get("kind")), _string(owner.get("name"))
        if owner.get("controller") is True and kind and owner_name:
            controller = (kind, owner_name)
            break
    return _Meta(
        key=f"{namespace}/{name}" if namespace else name,
        name=name,
        namespace=namespace,
        uid=_string(meta.get("uid")) or "",
        labels=_strings(meta.get("labels")),
        annotations=_strings(meta.get("annotations")) if annotations else {},
        created=_text(meta.get("creationTimestamp"), 64),
        deleting=bool(meta.get("deletionTimestamp")),
        controller=controller,
    )


# ---- what the board keeps of each object -----------------------------------------------------------------------

Made = tuple[str, str, str, str]  # (namespace, workload, kind, name) of an object the board created


def _made(meta: _Meta, kind: str) -> frozenset[Made]:
    """What `meta`'s object adds to `created`: itself (and a pod's StatefulSet) when the board made it."""
    if meta.labels.get(constants.BOARD_CREATED_LABEL) != constants.BOARD_NAME:
        return frozenset()
    workload = meta.labels.get(constants.BOARD_WORKLOAD_LABEL) or meta.name
    out = {(meta.namespace, workload, kind, meta.name)}
    if kind == "Pod" and meta.controller is not None and meta.controller[0] == "StatefulSet":
        out.add((meta.namespace, workload, "StatefulSet", meta.controller[1]))
    return frozenset(out)


@dataclasses.dataclass(slots=True)
class _Pod:
    key: str
    uid: str
    namespace: str
    name: str
    node: str | None  # spec.nodeName
    phase: str | None
    hold: Hold | None  # what it holds: live and bound only
    claim: str | None
    workload: str
    allocated: str | None  # the allocation annotation, for messages
    pending: JSON | None  # its PENDING entry, when it waits for this scheduler
    made: frozenset[Made]
    gang: gang_rows.Member | None  # what a gang row reads of it: this scheduler's pods only

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def finished(self) -> bool:
        return self.phase in _FINISHED

    def shown(self) -> tuple[Any, ...]:
        """What the node documents read of the pod: nothing else of it changes them."""
        return (
            self.uid,
            self.namespace,
            self.name,
            self.node,
            self.phase,
            self.hold,
            self.claim,
            self.workload,
            self.allocated,
        )


def _scheduled_false(status: Mapping[str, Any]) -> str:
    for cond in _list(status.get("conditions")):
        cond = _mapping(cond)
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return one_line(cond.get("message")) or one_line(cond.get("reason"))
    return ""


def _pod(obj: Mapping[str, Any], scheduler_name: str, maps: gpumap.ParseCache) -> _Pod | None:
    meta = _meta(obj)
    if meta is None:
        return None
    spec, status = _mapping(obj.get("spec")), _mapping(obj.get("status"))
    node = _string(spec.get("nodeName"))
    phase = _text(status.get("phase"), 64)
    claim = meta.annotations.get(constants.CLAIM_ANNOTATION, "").strip()[:MAX_TEXT] or None
    if meta.controller is not None:
        workload = f"{meta.namespace}/{meta.controller[0]}/{meta.controller[1]}"
    elif claim:
        workload = f"{meta.namespace}/{constants.GPU_CLAIM_KIND}/{claim}"
    else:
        workload = f"{meta.namespace}/Pod/{meta.name}"
    pending = None
    if spec.get("schedulerName") == scheduler_name and node is None and phase not in _FINISHED and not meta.deleting:
        source = "claim" if claim else "map" if constants.MAP_ANNOTATION in meta.annotations else None
        pending = {
            "kind": "Pod",
            "namespace": meta.namespace,
            "name": meta.name,
            "source": source,
            "claim": claim,
            "reason": _scheduled_false(status),
            "since": meta.created,
            "priority": _integer(spec.get("priority")) or 0,
        }
    return _Pod(
        key=meta.key,
        uid=meta.uid,
        namespace=meta.namespace,
        name=meta.name,
        node=node,
        phase=phase,
        hold=None
        if phase in _FINISHED
        else occupancy.pod_hold(meta.uid, meta.namespace, meta.name, meta.labels, meta.annotations, node, maps),
        claim=claim,
        workload=workload,
        allocated=_text(meta.annotations.get(constants.ALLOCATED_ANNOTATION)),
        pending=pending,
        made=_made(meta, "Pod"),
        gang=gang_rows.member(obj) if spec.get("schedulerName") == scheduler_name else None,
    )


def _unknown_gpu(gpu: int) -> JSON:
    """The fields of a GPU the inventory does not list (or of a node without one)."""
    return {
        "id": gpu,
        "known": False,
        "island": None,
        "bandwidthGBps": None,
        "health": "Unknown",
        "memoryTotalMiB": None,
        "memoryUsedMiB": None,
        "utilizationPercent": None,
    }


@dataclasses.dataclass(slots=True)
class _Node:
    name: str
    ready: bool
    labels: tuple[tuple[str, str], ...]  # the topology labels it carries, in level order


def _node(obj: Mapping[str, Any], levels: Sequence[str]) -> _Node | None:
    meta = _meta(obj, annotations=False)
    if meta is None:
        return None
    ready = any(
        _mapping(c).get("type") == "Ready" and _mapping(c).get("status") == "True"
        for c in _list(_mapping(obj.get("status")).get("conditions"))
    )
    labels = tuple((label, meta.labels[label][:MAX_TEXT]) for label in levels if label in meta.labels)
    return _Node(meta.name, ready, labels)


@dataclasses.dataclass(slots=True)
class _Claim:
    key: str
    pending: JSON | None
    made: frozenset[Made]
    gang_ref: Any  # spec.gangRef: a string (cut), None, or a stand-in of its JSON type (the gang row names the type)


def _gang_ref(value: object) -> Any:
    if isinstance(value, str):
        return value[:MAX_GANG_REF]
    if isinstance(value, Mapping):
        return {}
    if isinstance(value, list):
        return []
    return value if value is None or isinstance(value, (bool, int, float)) else ""


def _claim(obj: Mapping[str, Any]) -> _Claim | None:
    meta = _meta(obj, annotations=False)
    if meta is None:
        return None
    status = _mapping(obj.get("status"))
    pending = None
    if _string(status.get("phase")) in (None, "Pending", "Failed"):
        pending = {
            "kind": constants.GPU_CLAIM_KIND,
            "namespace": meta.namespace,
            "name": meta.name,
            "source": "claim",
            "claim": meta.name,
            "reason": one_line(status.get("message")),
            "since": meta.created,
            "priority": 0,
        }
    gang_ref = _gang_ref(_mapping(obj.get("spec")).get("gangRef"))
    return _Claim(meta.key, pending, _made(meta, constants.GPU_CLAIM_KIND), gang_ref)


def strategy_document(policy: Mapping[str, Any] | None, default_strategy: str) -> JSON:
    """The strategy in effect: the GpuSchedulingPolicy's (what its status says the scheduler applies, once a
    scheduler observed it; else its spec), else the scheduler's flag (`default_strategy`) and the default queue
    order."""
    policy = _mapping(policy)
    keys = _key(policy)
    if keys is None or keys[0] != constants.POLICY_NAME:
        return {
            "defaultStrategy": default_strategy,
            "queueOrder": constants.DEFAULT_QUEUE_ORDER,
            "source": "scheduler",
            "generation": None,
            "observedGeneration": None,
        }
    spec, status = _mapping(policy.get("spec")), _mapping(policy.get("status"))
    observed = _integer(status.get("observedGeneration"))
    applied = status if observed is not None else {}
    return {
        "defaultStrategy": _text(applied.get("strategy"), 64)
        or _text(spec.get("defaultStrategy"), 64)
        or default_strategy,
        "queueOrder": _text(applied.get("queueOrder"), 64)
        or _text(spec.get("queueOrder"), 64)
        or constants.DEFAULT_QUEUE_ORDER,
        "source": "policy",
        "generation": _integer(_mapping(policy.get("metadata")).get("generation")),
        "observedGeneration": observed,
    }


def _pending_order(entry: JSON) -> tuple[str, str, str, str]:
    return (entry["since"] or "", entry["kind"], entry["namespace"], entry["name"])


K = TypeVar("K")


def _add(index: dict[K, set[str]], key: K, value: str) -> None:
    index.setdefault(key, set()).add(value)


def _remove(index: dict[K, set[str]], key: K, value: str) -> None:
    values = index.get(key)
    if values is not None:
        values.discard(value)
        if not values:
            del index[key]


# ---- the board -----------------------------------------------------------------------------------------------------

_Counts = tuple[int, int, int, int, int]  # total, allocated, free, unhealthy, flags of one node


class Board:
    """The cluster's GPUs as the board shows them, kept current by `apply` (see the module docstring)."""

    def __init__(
        self,
        *,
        topology_labels: Sequence[str] = constants.DEFAULT_TOPOLOGY_LABELS,
        scheduler_name: str = constants.DEFAULT_SCHEDULER_NAME,
        default_strategy: str = constants.DEFAULT_STRATEGY,
    ) -> None:
        self._levels = tuple(topology_labels)
        self._scheduler_name = scheduler_name
        self._maps = gpumap.ParseCache()  # the maps of the pods it reads, each parsed once
        self._default_strategy = default_strategy
        #: 0 at start, +1 per non-empty take_changes().
        self.version = 0
        # The objects, as far as the board reads them, by the informer's key.
        self._pods: dict[str, _Pod] = {}
        self._leases: dict[str, _Lease] = {}
        self._statuses: dict[str, _Status] = {}
        self._nodes: dict[str, _Node] = {}
        self._claims: dict[str, _Claim] = {}
        # Indexes.
        self._node_pods: dict[str, set[str]] = {}  # node -> pods holding GPUs there
        self._uid_pods: dict[str, set[str]] = {}  # uid -> pods (one, unless the objects are corrupt)
        self._node_leases: dict[str, set[str]] = {}  # node -> Leases shown there
        self._uid_leases: dict[str, set[str]] = {}  # uid -> Leases naming it
        self._orphans: set[str] = set()  # unreadable Leases with no node to show them on
        self._pending: dict[tuple[str, str], JSON] = {}  # (resource, key) -> PENDING
        self._made: dict[tuple[str, str], dict[tuple[str, str], int]] = {}  # (ns, workload) -> (kind, name) -> refs
        self._members: set[str] = set()  # the nodes on the board
        self._gang_of: dict[str, gang_rows.Membership] = {}  # pod -> its gang (pods in a gang only)
        self._gang_pods: dict[gang_rows.Membership, set[str]] = {}  # gang -> its member pods
        self._claim_pods: dict[str, set[str]] = {}  # claim key -> the gang candidates naming it
        self._gang_refs: dict[str, Any] = {}  # claim key -> its spec.gangRef (claims with one only)
        # Caches: rebuilt when stale; a rebuild equal to the old part keeps the old object.
        self._node_docs: dict[str, JSON] = {}
        self._node_counts: dict[str, _Counts] = {}
        self._totals = [0, 0, 0, 0, 0]
        self._stale: set[str] = set()
        self._groups: list[JSON] = []
        self._groups_stale = False
        self._pending_doc: list[JSON] = []
        self._pending_stale = False
        self._created: list[JSON] = []
        self._created_stale = False
        self._gang_rows: dict[gang_rows.Membership, JSON] = {}
        self._gangs_stale: set[gang_rows.Membership] = set()
        self._gangs: JSON = {"total": 0, "rows": []}
        self._strategy = strategy_document(None, default_strategy)
        # What changed since the last take_changes (candidates), and the parts as they were then.
        self._touched = Changes()
        self._taken_nodes: dict[str, JSON] = {}
        self._taken_groups: list[JSON] = self._groups
        self._taken_pending: tuple[list[JSON], int] = (self._pending_doc, 0)
        self._taken_created: list[JSON] = self._created
        self._taken_gangs: JSON = self._gangs
        self._taken_strategy: JSON = self._strategy
        self._taken_orphans = 0

    # ---- events ----------------------------------------------------------------------------------------------------

    def apply(self, resource: str, event: str, obj: Mapping[str, Any], old: Mapping[str, Any] | None = None) -> None:
        """One informer event (`event`: ADDED, MODIFIED or DELETED; an ADDED of a known object replaces it, as a
        MODIFIED of an unknown one adds it). O(what the object touches); never raises."""
        deleted = event == "DELETED"
        keys = _key(obj) or _key(old)
        if keys is None:
            return
        name, key = keys
        obj = _mapping(obj)
        if resource == "pods":
            self._set_pod(key, None if deleted else _pod(obj, self._scheduler_name, self._maps))
        elif resource == "leases":
            self._set_lease(key, None if deleted else occupancy.read_lease(obj))
        elif resource == "gpunodestatuses":  # cluster-scoped: keyed by name
            self._set_status(name, None if deleted else occupancy.read_inventory(obj))
        elif resource == "nodes":
            self._set_node(name, None if deleted else _node(obj, self._levels))
        elif resource == "gpuclaims":
            self._set_claim(key, None if deleted else _claim(obj))
        elif resource == "policies" and name == constants.POLICY_NAME:
            strategy = strategy_document(None if deleted else obj, self._default_strategy)
            if strategy != self._strategy:
                self._strategy = strategy
                self._touched.strategy = True

    def _set_pod(self, key: str, new: _Pod | None) -> None:
        old = self._pods.get(key)
        if old == new:
            return
        if old is not None:
            del self._pods[key]
            if old.hold is not None:
                _remove(self._node_pods, old.hold.node, key)
            if old.uid:
                _remove(self._uid_pods, old.uid, key)
        if new is not None:
            self._pods[key] = new
            if new.hold is not None:
                _add(self._node_pods, new.hold.node, key)
            if new.uid:
                _add(self._uid_pods, new.uid, key)
        if old is None or new is None or old.shown() != new.shown():
            nodes: set[str] = set()
            for pod in (old, new):
                if pod is not None:
                    if pod.hold is not None:
                        nodes.add(pod.hold.node)
                    for lease in self._uid_leases.get(pod.uid, ()) if pod.uid else ():
                        nodes.add(self._leases[lease].node or "")
            nodes.discard("")
            for node in nodes:
                self._touch(node)
        self._set_pending(("pods", key), new.pending if new else None)
        self._set_made(old.made if old else frozenset(), new.made if new else frozenset())
        self._set_gang_member(key, old.gang if old else None, new.gang if new else None)

    def _set_gang_member(self, key: str, old: gang_rows.Member | None, new: gang_rows.Member | None) -> None:
        if old == new:
            return
        if old is not None and old.claim:
            _remove(self._claim_pods, f"{old.namespace}/{old.claim}", key)
        if new is not None and new.claim:
            _add(self._claim_pods, f"{new.namespace}/{new.claim}", key)
        self._place_in_gang(key, new)

    def _place_in_gang(self, key: str, member: gang_rows.Member | None) -> None:
        """Pod `key` (as `member`, None: no candidate) in the gang it belongs to now; both gangs' rows go stale."""
        before = self._gang_of.pop(key, None)
        if before is not None:
            _remove(self._gang_pods, before, key)
            self._gangs_stale.add(before)
        after = None
        if member is not None:
            ref = self._gang_refs.get(f"{member.namespace}/{member.claim}") if member.claim else None
            after = gang_rows.membership(member, ref)
        if after is not None:
            self._gang_of[key] = after
            _add(self._gang_pods, after, key)
            self._gangs_stale.add(after)
        if before is not None or after is not None:
            self._touched.gangs = True

    def _set_lease(self, key: str, new: _Lease | None) -> None:
        old = self._leases.get(key)
        if old == new:
            return
        if old is not None:
            del self._leases[key]
            self._unindex_lease(old)
        if new is not None:
            self._leases[key] = new
            if new.node is not None:
                _add(self._node_leases, new.node, key)
            else:
                self._orphans.add(key)
            for uid in new.record.holders if new.record else ():
                _add(self._uid_leases, uid, key)
        for lease in (old, new):
            if lease is not None and lease.node is not None:
                self._touch(lease.node)

    def _unindex_lease(self, lease: _Lease) -> None:
        if lease.node is not None:
            _remove(self._node_leases, lease.node, lease.key)
        self._orphans.discard(lease.key)
        for uid in lease.record.holders if lease.record else ():
            _remove(self._uid_leases, uid, lease.key)

    def _set_status(self, key: str, new: _Status | None) -> None:
        old = self._statuses.get(key)
        if old == new:
            return
        if new is None:
            del self._statuses[key]
        else:
            self._statuses[key] = new
        self._touch(key)

    def _set_node(self, key: str, new: _Node | None) -> None:
        old = self._nodes.get(key)
        if old == new:
            return
        if new is None:
            del self._nodes[key]
        else:
            self._nodes[key] = new
        if (old.labels if old else ()) != (new.labels if new else ()):
            self._groups_stale = self._touched.groups = True
        self._touch(key)

    def _set_claim(self, key: str, new: _Claim | None) -> None:
        old = self._claims.get(key)
        if old == new:
            return
        if new is None:
            del self._claims[key]
        else:
            self._claims[key] = new
        self._set_pending(("gpuclaims", key), new.pending if new else None)
        self._set_made(old.made if old else frozenset(), new.made if new else frozenset())
        ref = new.gang_ref if new else None
        if ref != self._gang_refs.get(key):
            if ref is None:
                del self._gang_refs[key]
            else:
                self._gang_refs[key] = ref
            for pod in sorted(self._claim_pods.get(key, ())):  # its pods without a gang annotation may move
                self._place_in_gang(pod, self._pods[pod].gang)

    def _set_pending(self, key: tuple[str, str], entry: JSON | None) -> None:
        if self._pending.get(key) == entry:
            return
        if entry is None:
            del self._pending[key]
        else:
            self._pending[key] = entry
        self._pending_stale = self._touched.pending = True

    def _set_made(self, old: frozenset[Made], new: frozenset[Made]) -> None:
        if old == new:
            return
        for ns, workload, kind, name in old - new:
            objs = self._made[(ns, workload)]
            objs[(kind, name)] -= 1
            if not objs[(kind, name)]:
                del objs[(kind, name)]
                if not objs:
                    del self._made[(ns, workload)]
        for ns, workload, kind, name in new - old:
            objs = self._made.setdefault((ns, workload), {})
            objs[(kind, name)] = objs.get((kind, name), 0) + 1
        self._created_stale = self._touched.created = True

    def _touch(self, node: str) -> None:
        """`node`'s document may have changed; it may have joined or left the board."""
        self._stale.add(node)
        self._touched.nodes.add(node)
        member = node in self._nodes or node in self._statuses or node in self._node_pods or node in self._node_leases
        if member != (node in self._members):
            if member:
                self._members.add(node)
            else:
                self._members.discard(node)
            self._groups_stale = self._touched.groups = True

    # ---- reads ------------------------------------------------------------------------------------------------------

    def take_changes(self) -> Changes | None:
        """What changed since the last call (None: nothing); bumps `version` when something did."""
        self._refresh()
        touched, self._touched = self._touched, Changes()
        out = Changes()
        for node in touched.nodes:
            doc = self._node_docs.get(node)
            if doc is not self._taken_nodes.get(node):
                out.nodes.add(node)
                if doc is None:
                    del self._taken_nodes[node]
                else:
                    self._taken_nodes[node] = doc
        if self._groups is not self._taken_groups:
            out.groups, self._taken_groups = True, self._groups
        pending = (self._pending_doc, len(self._pending))
        if pending[0] is not self._taken_pending[0] or pending[1] != self._taken_pending[1]:
            out.pending, self._taken_pending = True, pending
        if self._created is not self._taken_created:
            out.created, self._taken_created = True, self._created
        if self._gangs is not self._taken_gangs:
            out.gangs, self._taken_gangs = True, self._gangs
        if self._strategy is not self._taken_strategy:
            out.strategy, self._taken_strategy = True, self._strategy
        if len(self._orphans) != self._taken_orphans:
            out.summary, self._taken_orphans = True, len(self._orphans)
        if not out:
            return None
        self.version += 1
        return out

    def document(self) -> JSON:
        """The whole board (`GET /api/state`, the SSE snapshot)."""
        self._refresh()
        return {
            "apiVersion": constants.BOARD_API_VERSION,
            "kind": "Board",
            "version": self.version,
            "topology": {"levels": [*self._levels, "node", "island"]},
            "strategy": self._strategy,
            "summary": self._summary(),
            "groups": self._groups,
            "nodes": {name: self._node_docs[name] for name in sorted(self._node_docs)},
            "pending": self._pending_doc,
            "created": self._created,
            "gangs": self._gangs,
        }

    def patch(self, changes: Changes) -> JSON:
        """The patch for `changes` with the current contents: each changed node's document (None: gone), and the
        other parts only when they changed."""
        self._refresh()
        out: JSON = {
            "apiVersion": constants.BOARD_API_VERSION,
            "kind": "BoardPatch",
            "version": self.version,
            "summary": self._summary(),
            "nodes": {name: self._node_docs.get(name) for name in sorted(changes.nodes)},
        }
        if changes.groups:
            out["groups"] = self._groups
        if changes.pending:
            out["pending"] = self._pending_doc
        if changes.strategy:
            out["strategy"] = self._strategy
        if changes.created:
            out["created"] = self._created
        if changes.gangs:
            out["gangs"] = self._gangs
        return out

    def _summary(self) -> JSON:
        total, allocated, free, unhealthy, flags = self._totals
        return {
            "nodes": len(self._node_docs),
            "gpus": total,
            "allocated": allocated,
            "free": free,
            "unhealthy": unhealthy,
            "pending": len(self._pending),
            "flags": flags + len(self._orphans),
        }

    # ---- rebuilding stale parts -------------------------------------------------------------------------------------

    def _refresh(self) -> None:
        zero: _Counts = (0, 0, 0, 0, 0)
        for name in self._stale:
            old = self._node_docs.get(name)
            if name in self._members:
                doc, counts = self._build_node(name)
                if doc == old:
                    continue  # keep the old object: take_changes compares by identity
                self._node_docs[name] = doc
            elif old is None:
                continue
            else:
                del self._node_docs[name]
                counts = zero
            before = self._node_counts.pop(name, zero)
            self._totals = [t - b + c for t, b, c in zip(self._totals, before, counts, strict=True)]
            if name in self._node_docs:
                self._node_counts[name] = counts
        self._stale.clear()
        if self._groups_stale:
            self._groups_stale = False
            groups = self._build_groups()
            if groups != self._groups:
                self._groups = groups
        if self._pending_stale:
            self._pending_stale = False
            pending = heapq.nsmallest(MAX_PENDING, self._pending.values(), key=_pending_order)
            if pending != self._pending_doc:
                self._pending_doc = pending
        if self._created_stale:
            self._created_stale = False
            created = self._build_created()
            if created != self._created:
                self._created = created
        if self._gangs_stale:
            self._refresh_gangs()

    def _refresh_gangs(self) -> None:
        """Rebuild the rows of the stale gangs (claims.gang_rows, as `kubectl gpu gangs` builds them), then the
        list when a row changed."""
        changed = False
        for of in self._gangs_stale:
            keys = self._gang_pods.get(of)
            if not keys:
                changed |= self._gang_rows.pop(of, None) is not None
                continue
            members = [m for k in keys if (m := self._pods[k].gang) is not None]
            doc = gang_rows.row(of.namespace, of.gang, members, of.error).document()
            if doc != self._gang_rows.get(of):
                self._gang_rows[of] = doc
                changed = True
        self._gangs_stale.clear()
        if changed:
            order = heapq.nsmallest(MAX_GANGS, self._gang_rows, key=lambda of: (of.namespace, of.gang, of.error))
            gangs = {"total": len(self._gang_rows), "rows": [self._gang_rows[of] for of in order]}
            if gangs != self._gangs:
                self._gangs = gangs

    def _path(self, name: str) -> tuple[str, ...]:
        node = self._nodes.get(name)
        labels = dict(node.labels) if node else {}
        return tuple(labels.get(level, "") for level in self._levels)

    def _build_groups(self) -> list[JSON]:
        groups: dict[tuple[str, ...], list[str]] = {}
        for name in self._members:
            groups.setdefault(self._path(name), []).append(name)
        return [{"path": list(path), "nodes": sorted(groups[path])} for path in sorted(groups)]

    def _build_created(self) -> list[JSON]:
        return [
            {
                "workload": workload,
                "namespace": ns,
                "objects": [{"kind": kind, "name": name} for kind, name in sorted(self._made[(ns, workload)])][
                    :MAX_CREATED_OBJECTS
                ],
            }
            for ns, workload in sorted(self._made)[:MAX_CREATED]
        ]

    def _pod_of(self, uid: str) -> _Pod | None:
        keys = self._uid_pods.get(uid)
        return self._pods[min(keys)] if keys else None

    def _build_node(self, name: str) -> tuple[JSON, _Counts]:
        node = self._nodes.get(name)
        status = self._statuses.get(name)
        model = occupancy.node(
            name,
            status,
            (self._pods[key] for key in sorted(self._node_pods.get(name, ()))),
            (self._leases[key] for key in sorted(self._node_leases.get(name, ()))),
            self._pod_of,
        )
        gpus: list[JSON] = []
        islands: dict[str, list[int]] = {}
        flag_count = len(model.findings)
        for gpu in model.gpus:
            device = gpu.device
            if device is not None:
                islands.setdefault(device.island, []).append(gpu.id)
                doc = dict(device.fields)
                doc["inUseBy"] = list(device.in_use_by) if device.in_use_by is not None else None
                doc["kubeletPods"] = list(device.kubelet_pods) if device.kubelet_pods is not None else None
            else:
                doc = _unknown_gpu(gpu.id)
                doc["inUseBy"] = None
                doc["kubeletPods"] = None
            doc["exclusivity"] = gpu.exclusivity
            doc["holders"] = [_holder(h) for h in gpu.holders]
            doc["flags"] = [_flag(f) for f in gpu.findings]
            flag_count += len(gpu.findings)
            gpus.append(doc)
        labels = dict(node.labels) if node else {}
        return {
            "name": name,
            "path": [labels.get(level, "") for level in self._levels],
            "ready": node.ready if node else None,
            "inventory": model.inventory,
            "labels": labels,
            "total": model.total,
            "allocated": model.allocated,
            "unhealthy": model.unhealthy,
            "islands": [{"name": island, "gpus": islands[island]} for island in sorted(islands)],
            "gpus": gpus,
            "flags": [_flag(f) for f in model.findings],
        }, (model.total, model.allocated, model.free, model.unhealthy, flag_count)


def _holder(holder: Holder[_Pod]) -> JSON:
    pod = holder.known
    if pod is not None:
        return {
            "pod": pod.ref,
            "namespace": pod.namespace,
            "name": pod.name,
            "uid": pod.uid,
            "sources": list(holder.sources),
            "claim": pod.claim,
            "workload": pod.workload,
            "phase": pod.phase,
        }
    # A Lease holder whose pod the board does not know: named as the Lease names it.
    who = holder.pod
    namespace, slash, pod_name = who.partition("/")
    known = bool(slash and namespace and pod_name)
    return {
        "pod": who,
        "namespace": namespace if known else None,
        "name": pod_name if known else None,
        "uid": holder.uid,
        "sources": list(holder.sources),
        "claim": None,
        "workload": f"{namespace}/Pod/{pod_name}" if known else who,
        "phase": None,
    }
