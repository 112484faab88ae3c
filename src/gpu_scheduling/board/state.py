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
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from gpu_scheduling import constants
from gpu_scheduling import devices as devices_
from gpu_scheduling.claims import objects
from gpu_scheduling.claims.ledger import Hold, LeaseRecord

JSON = dict[str, Any]

#: The resources `apply` understands (the informers' names); anything else is ignored.
RESOURCES: Final = ("nodes", "gpunodestatuses", "pods", "gpuclaims", "leases", "policies")

#: The kinds of FLAG, with their severity.
FLAG_SEVERITY: Final = {
    "lease-without-allocation": "error",
    "allocation-without-lease": "error",
    "exclusive-shared": "error",
    "unknown-gpu": "error",
    "in-use-by-out-of-step": "warning",
    "lease-unreadable": "error",
    "foreign-inventory": "error",
    "kubelet-disagrees": "error",
}

#: Bounds on what one object may put into the document.
MAX_MESSAGE: Final = 1024  # characters of a flag message or a pending reason
MAX_TEXT: Final = 253  # characters of other copied text (island, health, label values, timestamps)
MAX_PENDING: Final = 500  # entries of `pending` (summary.pending is the true count)
MAX_CREATED: Final = 500  # workloads in `created`
MAX_CREATED_OBJECTS: Final = 100  # objects per created workload
MAX_GPU_ID: Final = 999_999  # the largest GPU id a Lease label can carry (6 digits); larger ids are ignored
MAX_GPUS_PER_HOLD: Final = 256  # distinct GPU ids one pod can be shown holding
MAX_HOLDERS_PER_LEASE: Final = 256  # holders read from one Lease
MAX_DEVICES: Final = 1024  # devices read from one GpuNodeStatus
MAX_IN_USE_BY: Final = 256  # inUseBy entries read per device
_SHOWN = 5  # items named in a message before "and N more"

_FINISHED = ("Succeeded", "Failed")
_SOURCE_ORDER = {"map": 0, "claim": 1, "lease": 2}
_LEASE_NAME_RE = re.compile(r"^gpu-(.+)-([0-9]{1,6})$")


# ---- changes -----------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Changes:
    """What changed since the last `take_changes`: the nodes (added, changed or gone) and whether the groups, the
    pending list, the strategy or the created workloads changed. `summary` is set when only the summary changed (a
    flag no node shows); the summary is in every patch anyway. Falsy when nothing changed."""

    nodes: set[str] = dataclasses.field(default_factory=set)
    groups: bool = False
    pending: bool = False
    strategy: bool = False
    created: bool = False
    summary: bool = False

    def merge(self, other: Changes) -> Changes:
        """The union of both (neither is modified)."""
        return Changes(
            self.nodes | other.nodes,
            self.groups or other.groups,
            self.pending or other.pending,
            self.strategy or other.strategy,
            self.created or other.created,
            self.summary or other.summary,
        )

    def __bool__(self) -> bool:
        return bool(self.nodes) or self.groups or self.pending or self.strategy or self.created or self.summary


# ---- reading fields of any type ------------------------------------------------------------------------------------


_EMPTY: Mapping[str, Any] = {}  # never modified


def _mapping(value: object) -> Mapping[str, Any]:
    if type(value) is dict:  # the common case, checked first: isinstance against an ABC is slow
        return value
    return value if isinstance(value, Mapping) else _EMPTY


def _string(value: object) -> str | None:
    """`value` when it is a non-empty string (an identity: never cut), else None."""
    return value if type(value) is str and value else None


def _text(value: object, limit: int = MAX_TEXT) -> str | None:
    """`value` cut to `limit` characters when it is a string (for display), else None."""
    return value[:limit] if type(value) is str else None


def _integer(value: object) -> int | None:
    return value if type(value) is int else None  # not a bool, nor a float


def _strings(value: object) -> dict[str, str]:
    """The string-to-string items of a mapping (labels, annotations); anything else is dropped."""
    if type(value) is not dict and not isinstance(value, Mapping):
        return {}
    return {k: v for k, v in value.items() if type(k) is str and type(v) is str}


def _list(value: object) -> list[Any]:
    return value if type(value) is list else []


def one_line(value: object, limit: int = MAX_MESSAGE) -> str:
    """A string on one line of at most `limit` characters ("" for anything that is not a string)."""
    if not isinstance(value, str):
        return ""
    return " ".join(value[: limit * 4].split())[:limit]


def _listing(items: Sequence[str]) -> str:
    shown = ", ".join(items[:_SHOWN])
    return shown + (f" and {len(items) - _SHOWN} more" if len(items) > _SHOWN else "")


def _flag(kind: str, message: str) -> JSON:
    return {"kind": kind, "severity": FLAG_SEVERITY[kind], "message": message[:MAX_MESSAGE]}


def _flag_order(flag: JSON) -> tuple[str, str]:
    return (flag["kind"], flag["message"])


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


def _hold(meta: _Meta, node: str | None) -> Hold | None:
    """What a live bound pod holds (objects.hold_from_pod on the pod's well-typed fields), its GPU ids bounded."""
    if node is None:
        return None
    clean = {
        "metadata": {
            "name": meta.name,
            "namespace": meta.namespace,
            "uid": meta.uid,
            "labels": meta.labels,
            "annotations": meta.annotations,
        },
        "spec": {"nodeName": node},
    }
    try:
        hold = objects.hold_from_pod(clean)
    except (ValueError, LookupError, TypeError):  # an annotation no reader can make sense of: it holds nothing
        return None
    if hold is None:
        return None
    ids = hold.gpu_ids
    if len(ids) > 1 or not 0 <= ids[0] <= MAX_GPU_ID:
        ids = tuple(dict.fromkeys(g for g in ids if 0 <= g <= MAX_GPU_ID))[:MAX_GPUS_PER_HOLD]
        if not ids:
            return None
    if ids is hold.gpu_ids and len(hold.exclusivity) <= 64 and len(hold.claim) <= MAX_TEXT:
        return hold
    return dataclasses.replace(hold, gpu_ids=ids, exclusivity=hold.exclusivity[:64], claim=hold.claim[:MAX_TEXT])


def _scheduled_false(status: Mapping[str, Any]) -> str:
    for cond in _list(status.get("conditions")):
        cond = _mapping(cond)
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return one_line(cond.get("message")) or one_line(cond.get("reason"))
    return ""


def _pod(obj: Mapping[str, Any], scheduler_name: str) -> _Pod | None:
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
        hold=None if phase in _FINISHED else _hold(meta, node),
        claim=claim,
        workload=workload,
        allocated=_text(meta.annotations.get(constants.ALLOCATED_ANNOTATION)),
        pending=pending,
        made=_made(meta, "Pod"),
    )


@dataclasses.dataclass(slots=True)
class _Lease:
    key: str
    name: str
    record: LeaseRecord | None  # None: unreadable (no node or GPU label)
    node: str | None  # the node it is shown on: the record's, else the best guess (labels, then its name)


def _lease(obj: Mapping[str, Any]) -> _Lease | None:
    """A GPU Lease (one carrying the GPU Lease label); None for anything else."""
    meta = _meta(obj)
    if meta is None or meta.labels.get(constants.LEASE_LABEL) != constants.LEASE_LABEL_VALUE:
        return None
    holder = _string(_mapping(obj.get("spec")).get("holderIdentity"))
    # Only well-typed fields, and no resourceVersion: a renewal that changes nothing else changes nothing here.
    clean = {
        "metadata": {"name": meta.name, "labels": meta.labels, "annotations": meta.annotations},
        "spec": {"holderIdentity": holder},
    }
    try:
        record = objects.lease_record(clean)
    except (ValueError, LookupError, TypeError):  # a reader shared with the scheduler: the board outlives its bugs
        record = None
    if record is not None and record.gpu > MAX_GPU_ID:
        record = None
    if record is not None:
        if len(record.holders) > 1 or len(record.exclusivity) > 64:
            holders = tuple(dict.fromkeys(record.holders))[:MAX_HOLDERS_PER_LEASE]
            record = dataclasses.replace(
                record,
                holders=holders,
                pods={uid: record.pods[uid] for uid in holders if uid in record.pods},
                exclusivity=record.exclusivity[:64],
            )
        return _Lease(meta.key, meta.name, record, record.node)
    match = _LEASE_NAME_RE.match(meta.name)
    guess = (
        meta.annotations.get(constants.LEASE_NODE_ANNOTATION)
        or meta.labels.get(constants.LEASE_NODE_LABEL)
        or (match.group(1) if match else None)
    )
    return _Lease(meta.key, meta.name, None, guess)


@dataclasses.dataclass(slots=True)
class _Device:
    id: int
    island: str
    health: str
    in_use_by: tuple[str, ...] | None
    kubelet_pods: tuple[str, ...] | None  # the pods the kubelet gave a device of it (None: no device plugin)
    fields: JSON  # the GPU document's fields the inventory alone gives (never modified)


def _device(value: object) -> _Device | None:
    device = _mapping(value)
    get = device.get
    gpu = get("id")
    if type(gpu) is not int or not 0 <= gpu <= MAX_GPU_ID:
        return None
    island = _text(get("island")) or "default"
    health = _text(get("health"), 64) or "Healthy"
    in_use = get("inUseBy")
    kubelet = get("kubeletPods")
    return _Device(
        gpu,
        island,
        health,
        (
            tuple(dict.fromkeys(u[:MAX_TEXT] for u in in_use[:MAX_IN_USE_BY] if type(u) is str))
            if type(in_use) is list
            else None
        ),
        (
            tuple(dict.fromkeys(u[:MAX_TEXT] for u in kubelet[:MAX_IN_USE_BY] if type(u) is str))
            if type(kubelet) is list
            else None
        ),
        {
            "id": gpu,
            "known": True,
            "island": island,
            "bandwidthGBps": _integer(get("bandwidthGBps")) or 0,
            "health": health,
            "memoryTotalMiB": _integer(get("memoryTotalMiB")),
            "memoryUsedMiB": _integer(get("memoryUsedMiB")),
            "utilizationPercent": _integer(get("utilizationPercent")),
        },
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


def _holder_order(holder: JSON) -> tuple[str, str]:
    return (holder["pod"], holder["uid"])


@dataclasses.dataclass(slots=True)
class _Status:
    name: str
    foreign: str | None  # spec.nodeName when it names another node: the inventory is then ignored
    devices: tuple[_Device, ...]  # by id, each id once (the first entry wins)


def _status(obj: Mapping[str, Any], name: str) -> _Status:
    spec_node = _string(_mapping(obj.get("spec")).get("nodeName"))
    clean = {"metadata": {"name": name}, "spec": {"nodeName": spec_node}}
    if objects.inventory_node(clean) is None:
        return _Status(name, spec_node, ())
    devices: dict[int, _Device] = {}
    for value in _list(_mapping(obj.get("status")).get("devices"))[:MAX_DEVICES]:
        device = _device(value)
        if device is not None:
            devices.setdefault(device.id, device)
    return _Status(name, None, tuple(devices[g] for g in sorted(devices)))


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
    return _Claim(meta.key, pending, _made(meta, constants.GPU_CLAIM_KIND))


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


def _add(index: dict[str, set[str]], key: str, value: str) -> None:
    index.setdefault(key, set()).add(value)


def _remove(index: dict[str, set[str]], key: str, value: str) -> None:
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
        self._strategy = strategy_document(None, default_strategy)
        # What changed since the last take_changes (candidates), and the parts as they were then.
        self._touched = Changes()
        self._taken_nodes: dict[str, JSON] = {}
        self._taken_groups: list[JSON] = self._groups
        self._taken_pending: tuple[list[JSON], int] = (self._pending_doc, 0)
        self._taken_created: list[JSON] = self._created
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
            self._set_pod(key, None if deleted else _pod(obj, self._scheduler_name))
        elif resource == "leases":
            self._set_lease(key, None if deleted else _lease(obj))
        elif resource == "gpunodestatuses":  # cluster-scoped: keyed by name
            self._set_status(name, None if deleted else _status(obj, name))
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
        devices = {d.id: d for d in status.devices} if status is not None and status.foreign is None else {}
        node_flags: list[JSON] = []
        if status is not None and status.foreign is not None:
            node_flags.append(
                _flag(
                    "foreign-inventory",
                    f"GpuNodeStatus {name} names node {status.foreign} in spec.nodeName; its inventory is ignored "
                    "(an inventory may describe only the node it is named after)",
                )
            )
        holders: dict[int, dict[str, JSON]] = {}  # GPU -> holder key -> HOLDER (sources as a list, sorted below)
        exclusivity: dict[int, set[str]] = {}
        flags: dict[int, list[JSON]] = {}
        claim_pods: list[_Pod] = []
        for key in sorted(self._node_pods.get(name, ())):
            pod = self._pods[key]
            hold = pod.hold
            assert hold is not None
            for gpu in hold.gpu_ids:
                _holder(holders.setdefault(gpu, {}), pod, hold.source)
                exclusivity.setdefault(gpu, set()).add(hold.exclusivity)
            if hold.source == "claim":
                claim_pods.append(pod)
        leased: dict[int, set[str]] = {}  # GPU -> uids its Leases name
        for key in sorted(self._node_leases.get(name, ())):
            lease = self._leases[key]
            record = lease.record
            if record is None:
                node_flags.append(
                    _flag(
                        "lease-unreadable",
                        f"Lease {lease.name} carries the GPU Lease label but no node or GPU label that can be read",
                    )
                )
                continue
            gpu = record.gpu
            leased.setdefault(gpu, set()).update(record.holders)
            exclusivity.setdefault(gpu, set()).add(record.exclusivity)
            for uid in record.holders:
                named = self._pod_of(uid)
                gpu_flags = flags.setdefault(gpu, [])
                if named is None:
                    who = record.pods.get(uid) or f"uid:{uid}"
                    _lease_holder(holders.setdefault(gpu, {}), uid, who)
                    gpu_flags.append(
                        _flag("lease-without-allocation", f"Lease {lease.name} names pod {who}, which is gone")
                    )
                    continue
                _holder(holders.setdefault(gpu, {}), named, "lease")
                hold = named.hold
                if named.finished:
                    gpu_flags.append(
                        _flag(
                            "lease-without-allocation",
                            f"Lease {lease.name} names pod {named.ref}, which is finished ({named.phase})",
                        )
                    )
                elif named.node is not None and (
                    hold is None or hold.source != "claim" or hold.node != name or gpu not in hold.gpu_ids
                ):
                    if hold is not None and hold.source == "map":
                        what = f"its {constants.MAP_ANNOTATION} entry ({hold.node}:{_ids(hold.gpu_ids)})"
                    else:
                        what = f"{constants.ALLOCATED_ANNOTATION} {named.allocated or '<none>'}"
                    gpu_flags.append(
                        _flag(
                            "lease-without-allocation",
                            f"Lease {lease.name} names pod {named.ref} for GPU {gpu} of {name}, but the pod holds "
                            f"{what}",
                        )
                    )
                # A live pod not bound yet is not flagged: the scheduler creates the Lease before it binds.
        for pod in claim_pods:
            assert pod.hold is not None
            for gpu in pod.hold.gpu_ids:
                if pod.uid not in leased.get(gpu, ()):
                    flags.setdefault(gpu, []).append(
                        _flag(
                            "allocation-without-lease",
                            f"pod {pod.ref} holds GPU {gpu} of {name} ({constants.ALLOCATED_ANNOTATION} "
                            f"{pod.allocated}), but no Lease names it",
                        )
                    )
        gpus: list[JSON] = []
        islands: dict[str, list[int]] = {}
        allocated = free = unhealthy = flag_count = 0
        for gpu in sorted(devices.keys() | holders.keys() | leased.keys()):
            device = devices.get(gpu)
            found = holders.get(gpu)
            shown = sorted(found.values(), key=_holder_order) if found else []
            for h in shown:
                if len(h["sources"]) > 1:
                    h["sources"].sort(key=_SOURCE_ORDER.__getitem__)
            gpu_flags = flags.get(gpu) or []
            kinds = exclusivity.get(gpu)
            exclusive = (
                None
                if not kinds
                else "Exclusive"
                if "Exclusive" in kinds
                else "Shared"
                if "Shared" in kinds
                else min(kinds)
            )
            if exclusive == "Exclusive" and len(shown) > 1:
                gpu_flags.append(
                    _flag(
                        "exclusive-shared",
                        f"GPU {gpu} of {name} is Exclusive but has {len(shown)} holder pods: "
                        f"{_listing([h['pod'] for h in shown])}",
                    )
                )
            if device is None and devices and shown:
                gpu_flags.append(
                    _flag(
                        "unknown-gpu",
                        f"GPU {gpu} of {name} is held by {_listing([h['pod'] for h in shown])}, but the "
                        f"GpuNodeStatus of {name} does not list it",
                    )
                )
            if device is not None and device.in_use_by is not None and _out_of_step(device.in_use_by, shown):
                gpu_flags.append(
                    _flag(
                        "in-use-by-out-of-step",
                        f"the GpuNodeStatus of {name} says GPU {gpu} is in use by "
                        f"[{_listing(device.in_use_by)}], the holders are [{_listing([h['pod'] for h in shown])}] "
                        "(the agent's copy lags by up to its period)",
                    )
                )
            if device is not None and device.kubelet_pods:
                strangers = devices_.kubelet_disagreements(device.kubelet_pods, [h["pod"] for h in shown])
                if strangers:
                    gpu_flags.append(
                        _flag(
                            "kubelet-disagrees",
                            f"the kubelet of {name} gave a device of GPU {gpu} to {_listing(strangers)}, which "
                            f"gpu-scheduler did not give GPU {gpu} (its holders: "
                            f"[{_listing([h['pod'] for h in shown])}])",
                        )
                    )
            if len(gpu_flags) > 1:
                gpu_flags.sort(key=_flag_order)
            flag_count += len(gpu_flags)
            if shown:
                allocated += 1
            if device is not None:
                islands.setdefault(device.island, []).append(gpu)
                if device.health != "Healthy":
                    unhealthy += 1
                elif not shown:
                    free += 1
                doc = dict(device.fields)
                doc["inUseBy"] = list(device.in_use_by) if device.in_use_by is not None else None
                doc["kubeletPods"] = list(device.kubelet_pods) if device.kubelet_pods is not None else None
            else:
                doc = _unknown_gpu(gpu)
                doc["inUseBy"] = None
                doc["kubeletPods"] = None
            doc["exclusivity"] = exclusive
            doc["holders"] = shown
            doc["flags"] = gpu_flags
            gpus.append(doc)
        node_flags.sort(key=_flag_order)
        flag_count += len(node_flags)
        labels = dict(node.labels) if node else {}
        return {
            "name": name,
            "path": [labels.get(level, "") for level in self._levels],
            "ready": node.ready if node else None,
            "inventory": status is not None and status.foreign is None,
            "labels": labels,
            "total": len(devices),
            "allocated": allocated,
            "unhealthy": unhealthy,
            "islands": [{"name": island, "gpus": islands[island]} for island in sorted(islands)],
            "gpus": gpus,
            "flags": node_flags,
        }, (len(devices), allocated, free, unhealthy, flag_count)


def _ids(ids: Iterable[int]) -> str:
    return ",".join(str(i) for i in ids)


def _holder(holders: dict[str, JSON], pod: _Pod, source: str) -> None:
    key = pod.uid or f"pod:{pod.key}"
    holder = holders.get(key)
    if holder is None:
        holders[key] = {
            "pod": pod.ref,
            "namespace": pod.namespace,
            "name": pod.name,
            "uid": pod.uid,
            "sources": [source],
            "claim": pod.claim,
            "workload": pod.workload,
            "phase": pod.phase,
        }
    elif source not in holder["sources"]:
        holder["sources"].append(source)


def _lease_holder(holders: dict[str, JSON], uid: str, who: str) -> None:
    """A Lease holder whose pod the board does not know: named as the Lease names it."""
    if uid in holders:
        if "lease" not in holders[uid]["sources"]:
            holders[uid]["sources"].append("lease")
        return
    namespace, slash, pod_name = who.partition("/")
    known = bool(slash and namespace and pod_name)
    holders[uid] = {
        "pod": who,
        "namespace": namespace if known else None,
        "name": pod_name if known else None,
        "uid": uid,
        "sources": ["lease"],
        "claim": None,
        "workload": f"{namespace}/Pod/{pod_name}" if known else who,
        "phase": None,
    }


def _out_of_step(in_use_by: tuple[str, ...], holders: list[JSON]) -> bool:
    """The agent's inUseBy names other pods than the holders (it writes a Lease holder's uid where the Lease gives
    no name, so a uid matches its holder too)."""
    if not in_use_by:
        return bool(holders)
    named = set(in_use_by)
    if any(h["pod"] not in named and h["uid"] not in named for h in holders):
        return True
    return bool(named - {h["pod"] for h in holders} - {h["uid"] for h in holders})
