"""What the node rules of scheduler.plugins read, and the running totals they judge against. Pure: plain pod and
node dicts, no client.

- The pod's side: its requests by kube's formula (`pod_requests`: the sum of its containers and restartable init
  containers, at least the largest init container's need, pod-level requests where set, plus the overhead), its
  host ports (`host_ports`), its node selector terms (`check_term`, `term_matches`), Kubernetes quantities.
- The nodes' side: `NodeUsage`, the running totals kube-scheduler's NodeInfo keeps (pods, requested resources,
  host ports taken per node), kept by the controller from its watches, and each node's allocatable (`capacity`).

The rules themselves (NodeResourcesFit, NodePorts, NodeAffinity, ...) are plugins, one file each
(scheduler.plugins); the differential test in features/fit compares them with kube-scheduler's on a real cluster."""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from gpu_scheduling.scheduler import selectors
from gpu_scheduling.scheduler.fields import FitError as FitError  # re-exported: the rules name fit.FitError
from gpu_scheduling.scheduler.fields import obj as obj
from gpu_scheduling.scheduler.fields import requirement_holds
from gpu_scheduling.scheduler.fields import spec_of as spec_of

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"

_SUFFIXES: dict[str, Fraction] = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(1000),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$")
_MAX_EXPONENT = 64
"""Quantities beyond 10^64 are far past what any node has (kube's own limit is 2^63 - 1 units); a larger exponent
is refused instead of being computed (an exponent of 10^11 would never finish)."""


def quantity(value: Any, field: str) -> Fraction:
    """A Kubernetes quantity ("500m", "2Gi", "1e3", 4) as an exact number."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise FitError(f"{field} is not a quantity; expected a string such as 500m or 2Gi")
    text = str(value)
    match = _QUANTITY.match(text) if len(text) <= 64 else None
    if match is None or (match.group(2) and abs(int(match.group(2)[1:])) > _MAX_EXPONENT):
        raise FitError(f"{field} is {text[:64]!r}; expected a quantity such as 500m or 2Gi")
    number, exponent, suffix = match.groups()
    scale = Fraction(10) ** int(exponent[1:]) if exponent else _SUFFIXES[suffix or ""]
    return Fraction(number) * scale


def _units(resource: str, q: Fraction) -> int:
    """An exact quantity in the unit the scheduler counts `resource` in: millicores for cpu, whole units otherwise
    (both rounded up, as resource.Quantity's MilliValue and Value)."""
    return math.ceil(q * 1000) if resource == CPU else math.ceil(q)


def amount(resource: str, value: Any, field: str) -> int:
    """A quantity as the scheduler counts `resource` (see `_units`)."""
    return _units(resource, quantity(value, field))


def _counted(resource: str) -> bool:
    """The resources NodeResourcesFit compares: cpu, memory, ephemeral storage and the scalar ones (extended
    resources such as nvidia.com/gpu, hugepages, kubernetes.io/-prefixed)."""
    return resource in (CPU, MEMORY, EPHEMERAL_STORAGE) or "/" in resource or resource.startswith("hugepages-")


def _requests(resources: Any, field: str) -> dict[str, Fraction]:
    """Exact quantities: kube adds them up exactly and rounds the pod's total once."""
    requests = obj(obj(resources, field).get("requests"), f"{field}.requests")
    return {str(r): quantity(q, f"{field}.requests.{r}") for r, q in requests.items() if _counted(str(r))}


def _pod_level(resource: str) -> bool:
    """What `spec.resources` may set for the whole pod (component-helpers' IsSupportedPodLevelResource)."""
    return resource in (CPU, MEMORY) or resource.startswith("hugepages-")


def _add(into: dict[str, Fraction], more: Mapping[str, Fraction]) -> None:
    for r, q in more.items():
        into[r] = into.get(r, 0) + q


def _containers(spec: Mapping[str, Any], field: str) -> list[Mapping[str, Any]]:
    containers = spec.get(field) or []
    if not isinstance(containers, list) or not all(isinstance(c, Mapping) for c in containers):
        raise FitError(f"spec.{field} is not an array of objects")
    return containers


def _sidecar(container: Mapping[str, Any]) -> bool:
    return container.get("restartPolicy") == "Always"


def pod_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """What the pod asks of its node, by kube's formula (component-helpers' PodRequests)."""
    spec = spec_of(pod)
    total: dict[str, Fraction] = {}
    for i, c in enumerate(_containers(spec, "containers")):
        _add(total, _requests(c.get("resources"), f"spec.containers[{i}].resources"))
    sidecars: dict[str, Fraction] = {}
    init_peak: dict[str, Fraction] = {}
    for i, c in enumerate(_containers(spec, "initContainers")):
        need = _requests(c.get("resources"), f"spec.initContainers[{i}].resources")
        if _sidecar(c):
            _add(total, need)
            _add(sidecars, need)
            need = dict(sidecars)
        else:
            _add(need, sidecars)
        for r, q in need.items():
            init_peak[r] = max(init_peak.get(r, Fraction(0)), q)
    for r, q in init_peak.items():
        total[r] = max(total.get(r, Fraction(0)), q)
    pod_level = _requests(spec.get("resources"), "spec.resources")
    total.update({r: q for r, q in pod_level.items() if _pod_level(r)})
    overhead = spec.get("overhead")
    if overhead:
        _add(total, _requests({"requests": overhead}, "spec.overhead"))
    counted = {r: _units(r, q) for r, q in total.items()}
    return {r: q for r, q in counted.items() if q}


Port = tuple[str, str, int]
"""A host port as (IP, protocol, port): IP "0.0.0.0" when unset, protocol "TCP" when unset."""


def host_ports(pod: Mapping[str, Any]) -> tuple[Port, ...]:
    """The host ports the pod takes: its containers' and its restartable init containers' (as GetHostPorts)."""
    spec = spec_of(pod)
    found: list[Port] = []
    sidecars = [c for c in _containers(spec, "initContainers") if _sidecar(c)]
    for c in [*sidecars, *_containers(spec, "containers")]:
        listed = c.get("ports") or []
        if not isinstance(listed, list):
            raise FitError("a container's ports is not an array")
        for p in listed:
            if not isinstance(p, Mapping):
                raise FitError("a container port is not an object")
            port = p.get("hostPort") or 0
            if not isinstance(port, int) or isinstance(port, bool):
                raise FitError("a container's hostPort is not an integer")
            if port > 0:
                found.append((str(p.get("hostIP") or "0.0.0.0"), str(p.get("protocol") or "TCP"), port))
    return tuple(found)


def ports_conflict(want: Iterable[Port], taken: Mapping[Port, int]) -> Port | None:
    """The first wanted port already taken on the node (HostPortInfo.CheckConflict), or None."""
    if not taken:
        return None
    for ip, protocol, port in want:
        if ip == "0.0.0.0":
            if any(t[1] == protocol and t[2] == port for t in taken):
                return (ip, protocol, port)
        elif (ip, protocol, port) in taken or ("0.0.0.0", protocol, port) in taken:
            return (ip, protocol, port)
    return None


# ---- the pod's volume claims ------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class PodClaim:
    """One PersistentVolumeClaim a pod's volume names."""

    name: str
    ephemeral: bool
    """Made for the pod by the ephemeral volume controller (`<pod>-<volume>`), from `spec.volumes[].ephemeral`."""


def pod_claims(pod: Mapping[str, Any]) -> list[PodClaim]:
    """The claims of the pod's volumes, in its order. Raises FitError naming a field of the wrong shape."""
    spec = spec_of(pod)
    listed = spec.get("volumes") or []
    if not isinstance(listed, list):
        raise FitError("spec.volumes is not an array")
    pod_name = str(obj(pod.get("metadata"), "metadata").get("name") or "")
    claims = []
    for i, volume in enumerate(listed):
        if not isinstance(volume, Mapping):
            raise FitError(f"spec.volumes[{i}] is not an object")
        source = volume.get("persistentVolumeClaim")
        if source is not None:
            name = source.get("claimName") if isinstance(source, Mapping) else None
            if not isinstance(name, str) or not name:
                raise FitError(f"spec.volumes[{i}].persistentVolumeClaim.claimName is not a name")
            claims.append(PodClaim(name, ephemeral=False))
        elif volume.get("ephemeral") is not None:
            claims.append(PodClaim(f"{pod_name}-{volume.get('name')}", ephemeral=True))
    return claims


def claim_volumes(listed: list[Any]) -> list[Any]:
    """Of a pod's `spec.volumes`, what pod_claims reads (a PersistentVolumeClaim's name, an ephemeral volume's
    name) and no more: a config map or a host path asks nothing of a node. A volume of another shape is kept as it
    is, so that the readers refuse the view as they refuse the pod."""
    kept = []
    for volume in listed:
        if not isinstance(volume, dict):
            kept.append(volume)
        elif volume.get("persistentVolumeClaim") is not None:  # pod_claims' own order of reading
            kept.append({k: volume[k] for k in ("name", "persistentVolumeClaim") if k in volume})
        elif volume.get("ephemeral") is not None:
            kept.append({"name": volume.get("name"), "ephemeral": {}})
    return kept


# ---- what the pods on a node take -----------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Footprint:
    """What one pod takes from the node it is bound to."""

    node: str
    requests: tuple[tuple[str, int], ...]
    ports: tuple[Port, ...]
    claims: tuple[str, ...] = ()
    """The PersistentVolumeClaims of its volumes, as "<namespace>/<name>" (NodeVolumeLimits counts their volumes)."""
    namespace: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    """Its labels (InterPodAffinity and PodTopologySpread match them)."""
    anti_affinity: tuple[selectors.Term, ...] = ()
    """Its required pod anti-affinity terms: no pod they match may join it in their topology domains."""
    terminating: bool = False
    """It has a deletion timestamp (PodTopologySpread does not count it)."""
    name: str = ""
    """Its name (preemption deletes it by name and uid)."""
    priority: int = 0
    """Its `spec.priority` (preemption takes only pods of lower priority than the preemptor's)."""
    started: str = ""
    """When it started (`status.startTime`, else its creation): of two equal victims preemption keeps the older."""
    preferences: tuple[tuple[selectors.Term, int], ...] = ()
    """Its pod affinity terms that rank nodes for an incoming pod they match (InterPodAffinity's score), each with its
    signed weight: a preferred affinity term its weight, a required affinity term 1 (kube's hardPodAffinityWeight),
    a preferred anti-affinity term minus its weight."""


def footprint(pod: Mapping[str, Any], node: str | None = None) -> Footprint | None:
    """What `pod` takes from its node (`node`, or the one it is bound to); None when it takes nothing: not bound,
    or finished (Succeeded or Failed: kube-scheduler's cache drops those too). A pod whose resources cannot be read
    (the apiserver never stores one) counts as a pod with no requests."""
    spec = pod.get("spec")
    node = node or (spec.get("nodeName") if isinstance(spec, Mapping) else None)
    status = pod.get("status")
    if not node or (isinstance(status, Mapping) and status.get("phase") in ("Succeeded", "Failed")):
        return None
    try:
        requests, ports = pod_requests(pod), host_ports(pod)
    except FitError:
        requests, ports = {}, ()
    try:
        namespace = str(obj(pod.get("metadata"), "metadata").get("namespace") or "")
        claims = tuple(f"{namespace}/{c.name}" for c in pod_claims(pod))
    except FitError:
        claims = ()
    meta = pod.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    try:
        labels = tuple(sorted(selectors.pod_labels(pod).items()))
        anti = selectors.terms(pod, "podAntiAffinity")
    except FitError:
        labels, anti = (), ()
    try:
        preferences = _preferences(pod)
    except FitError:
        preferences = ()
    return Footprint(
        str(node),
        tuple(sorted(requests.items())),
        ports,
        claims,
        str(meta.get("namespace") or ""),
        labels,
        anti,
        bool(meta.get("deletionTimestamp")),
        str(meta.get("name") or ""),
        _priority(spec),
        _started(meta, status),
        preferences,
    )


def _preferences(pod: Mapping[str, Any]) -> tuple[tuple[selectors.Term, int], ...]:
    """Footprint.preferences of `pod`; FitError naming a field that cannot be read."""
    return (
        *((term, 1) for term in selectors.terms(pod, "podAffinity")),
        *selectors.preferred_terms(pod, "podAffinity"),
        *((term, -weight) for term, weight in selectors.preferred_terms(pod, "podAntiAffinity")),
    )


def _priority(spec: Any) -> int:
    value = spec.get("priority") if isinstance(spec, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _started(meta: Mapping[str, Any], status: Any) -> str:
    started = status.get("startTime") if isinstance(status, Mapping) else None
    return str(started or meta.get("creationTimestamp") or "")


def trimmed(pod: dict[str, Any]) -> dict[str, Any]:
    """What `footprint` reads of a pod, and no more (its requests and host ports, claims, node and phase; its
    namespace, labels, deletion timestamp and required pod anti-affinity; its name, priority and start, which
    preemption reads; its pod affinity and preferred anti-affinity, which rank nodes for others): what the
    scheduler's informer keeps of each of possibly many thousands of other schedulers' pods. Kept beside the readers
    it must serve; tests/unit/scheduler/test_fit.py checks that `footprint(trimmed(pod)) == footprint(pod)`."""

    def container(c: Any) -> Any:
        if not isinstance(c, dict):
            return c  # a shape the readers refuse: kept as it is, so they refuse the view too
        kept = {k: c[k] for k in ("resources", "restartPolicy") if k in c}
        resources = c.get("resources")
        if isinstance(resources, dict):
            kept["resources"] = {"requests": resources["requests"]} if "requests" in resources else {}
        ports = c.get("ports")
        if isinstance(ports, list):
            ports = [p for p in ports if not isinstance(p, dict) or p.get("hostPort")]
        if ports:
            kept["ports"] = ports
        return kept

    def containers(listed: Any) -> Any:
        return [container(c) for c in listed] if isinstance(listed, list) else listed

    meta = pod.get("metadata")
    view_meta = (
        {
            k: meta[k]
            for k in (
                "name",
                "namespace",
                "uid",
                "resourceVersion",
                "labels",
                "deletionTimestamp",
                "creationTimestamp",
            )
            if k in meta
        }
        if isinstance(meta, dict)
        else meta
    )  # a shape the readers refuse: kept, so they refuse the view too
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        view_spec: Any = spec
    else:
        view_spec = {k: spec[k] for k in ("nodeName", "overhead", "resources", "priority") if k in spec}
        affinity = spec.get("affinity")
        if isinstance(affinity, dict):
            kept_affinity = _pod_affinity(affinity)
            if kept_affinity:
                view_spec["affinity"] = kept_affinity
        elif affinity is not None:
            view_spec["affinity"] = affinity  # a shape the readers refuse: kept, so they refuse the view too
        if isinstance(spec.get("volumes"), list):
            view_spec["volumes"] = claim_volumes(spec["volumes"])
        elif "volumes" in spec:
            view_spec["volumes"] = spec["volumes"]
        for field in ("containers", "initContainers"):
            if field in spec:
                view_spec[field] = containers(spec[field])
    status = pod.get("status")
    return {
        "metadata": view_meta,
        "spec": view_spec,
        "status": {k: status[k] for k in ("phase", "startTime") if k in status} if isinstance(status, dict) else status,
    }


def _pod_affinity(affinity: dict[str, Any]) -> dict[str, Any]:
    """Of a pod's `spec.affinity`, its pod affinity and anti-affinity terms (required and preferred), which other pods
    are judged and ranked against; a part of another shape is kept as it is, so that the readers refuse it."""
    kept: dict[str, Any] = {}
    for kind in ("podAffinity", "podAntiAffinity"):
        part = affinity.get(kind)
        if isinstance(part, dict):
            chosen = {
                k: part[k]
                for k in (
                    "requiredDuringSchedulingIgnoredDuringExecution",
                    "preferredDuringSchedulingIgnoredDuringExecution",
                )
                if part.get(k) is not None
            }
            if chosen:
                kept[kind] = chosen
        elif part is not None:
            kept[kind] = part
    return kept


class NodeUsage:
    """The running totals kube-scheduler's NodeInfo keeps, per node: pods, requested resources, host ports taken.
    O(1) per change: `set` replaces what one pod takes. Who decides what a pod takes (the watch's word, or this
    scheduler's assumption before its binding is sent) is scheduler.cache's business, not this class's.

    `fork` gives a copy for trial placements (a gang's domains, preemption's victims) that shares each node's totals
    with this one (copy-on-write: either side copies a node's totals before it first changes them), so a fork costs
    a copy of the top-level indexes and nothing done on either side shows in the other."""

    def __init__(self) -> None:
        self._capacity: dict[str, tuple[str, dict[str, int]]] = {}  # node -> (its resourceVersion, capacity)
        self.full: set[str] = set()
        """Nodes of known capacity whose pod count is reached: no further pod fits them."""
        self._by_uid: dict[str, Footprint] = {}
        self._requested: dict[str, dict[str, int]] = {}
        self._pods: Counter[str] = Counter()
        self._ports: dict[str, Counter[Port]] = {}
        self._claims: dict[str, Counter[str]] = {}
        self._claim_users: Counter[str] = Counter()  # claim -> how many counted pods use it, on any node
        self._on_node: dict[str, set[str]] = {}  # node -> the uids counted on it
        self._anti: set[str] = set()  # the uids whose pods have required pod anti-affinity
        self._preferring: set[str] = set()  # the uids whose pods have Footprint.preferences
        self._priorities: Counter[int] = Counter()  # priority -> how many counted pods have it
        self._shared: set[str] = set()
        """The nodes whose per-node totals are shared with a fork or the usage it was forked from (each side copies
        them before its first change of them)."""
        self._groups: dict[str, dict[tuple[tuple[str, str], ...], Counter[str]]] = {}
        """namespace -> labels -> node -> how many counted pods not terminating, of that namespace and with exactly
        those labels, are on the node: what PodTopologySpread counts, read per distinct set of labels (a workload's
        pods share theirs) instead of per pod."""
        self._shared_groups: set[str] = set()
        """The namespaces whose `_groups` entry is shared with a fork (copied before its first change, as nodes are)."""

    def __len__(self) -> int:
        return len(self._by_uid)

    def fork(self) -> NodeUsage:
        """A copy to try placements on (copy-on-write per node). O(pods + nodes), nothing per node's contents."""
        child = NodeUsage()
        child._capacity = dict(self._capacity)
        child.full = set(self.full)
        child._by_uid = dict(self._by_uid)
        child._requested = dict(self._requested)
        child._pods = Counter(self._pods)
        child._ports = dict(self._ports)
        child._claims = dict(self._claims)
        child._claim_users = Counter(self._claim_users)
        child._on_node = dict(self._on_node)
        child._anti = set(self._anti)
        child._preferring = set(self._preferring)
        child._priorities = Counter(self._priorities)
        nodes = set(self._requested) | set(self._ports) | set(self._claims) | set(self._on_node)
        self._shared |= nodes
        child._shared = nodes
        child._groups = dict(self._groups)
        self._shared_groups |= self._groups.keys()
        child._shared_groups = set(self._groups)
        return child

    def footprint(self, uid: str) -> Footprint | None:
        """What pod `uid` is counted as taking, or None."""
        return self._by_uid.get(uid)

    def set(self, uid: str, taken: Footprint | None) -> str | None:
        """What pod `uid` takes now (None: nothing). Returns the node that has more room now, if any (the pod left
        it, or asks less of it), so that pods waiting for that node can be tried again."""
        before = self._by_uid.get(uid)
        if before == taken:
            return None
        if self._shared:  # only after a fork
            for node in {before.node if before else None, taken.node if taken else None} - {None}:
                self._own(str(node))
        if before is not None:
            _discount(self._claim_users, before.claims)
            if not before.terminating:
                self._grouped(before, -1)
        if taken is not None and taken.claims:
            self._claim_users.update(taken.claims)
        if taken is not None and not taken.terminating:
            self._grouped(taken, 1)
        if before is not None:
            here = self._on_node.get(before.node)
            if here is not None:
                here.discard(uid)
                if not here:
                    del self._on_node[before.node]
            self._anti.discard(uid)
            self._preferring.discard(uid)
            _discount(self._priorities, (before.priority,))
        if taken is not None:
            self._priorities[taken.priority] += 1
            self._on_node.setdefault(taken.node, set()).add(uid)
            if taken.anti_affinity:
                self._anti.add(uid)
            if taken.preferences:
                self._preferring.add(uid)
        if before is not None:
            self._pods[before.node] -= 1
            if not self._pods[before.node]:
                del self._pods[before.node]
                self._requested.pop(before.node, None)
                self._ports.pop(before.node, None)
                self._claims.pop(before.node, None)
            else:
                requested = self._requested[before.node]
                for r, q in before.requests:
                    requested[r] -= q
                _discount(self._ports.get(before.node), before.ports)
                _discount(self._claims.get(before.node), before.claims)
        if taken is None:
            del self._by_uid[uid]
        else:
            self._by_uid[uid] = taken
            self._pods[taken.node] += 1
            requested = self._requested.setdefault(taken.node, {})
            for r, q in taken.requests:
                requested[r] = requested.get(r, 0) + q
            if taken.ports:
                self._ports.setdefault(taken.node, Counter()).update(taken.ports)
            if taken.claims:
                self._claims.setdefault(taken.node, Counter()).update(taken.claims)
            self._check_full(taken.node)
        if before is not None and (taken is None or taken.node != before.node):
            self._check_full(before.node)
        if before is None or (taken is not None and taken.node == before.node and _not_less(taken, before)):
            return None
        return before.node

    def _grouped(self, taken: Footprint, change: int) -> None:
        """Count one pod more (`change` 1) or less (-1) in its namespace's group of its labels on its node."""
        namespace = taken.namespace
        if namespace in self._shared_groups:
            self._shared_groups.discard(namespace)
            self._groups[namespace] = {k: Counter(v) for k, v in self._groups[namespace].items()}
        groups = self._groups.setdefault(namespace, {})
        on = groups.setdefault(taken.labels, Counter())
        on[taken.node] += change
        if on[taken.node] <= 0:
            del on[taken.node]
            if not on:
                del groups[taken.labels]
                if not groups:
                    del self._groups[namespace]

    def _own(self, node: str) -> None:
        """About to change `node`'s totals: copy them first if a fork shares them."""
        if node not in self._shared:
            return
        self._shared.discard(node)
        if node in self._requested:
            self._requested[node] = dict(self._requested[node])
        if node in self._ports:
            self._ports[node] = Counter(self._ports[node])
        if node in self._claims:
            self._claims[node] = Counter(self._claims[node])
        if node in self._on_node:
            self._on_node[node] = set(self._on_node[node])

    def capacity(self, node: Mapping[str, Any]) -> Mapping[str, int]:
        """`capacity(node)`, read again only when the node's resourceVersion changes (a node object without one, as
        in unit tests, is read every time)."""
        name = node["metadata"]["name"]
        version = node["metadata"].get("resourceVersion")
        cached = self._capacity.get(name)
        if cached is not None and version and cached[0] == version:
            return cached[1]
        counted = capacity(node)
        if version:
            self._capacity[name] = (version, counted)
            self._check_full(name)
        return counted

    def known(self, name: str) -> bool:
        """Whether the node's capacity is cached (so `full` tells whether it is full)."""
        return name in self._capacity

    def _check_full(self, name: str) -> None:
        cached = self._capacity.get(name)
        if cached is not None and self._pods.get(name, 0) >= cached[1].get(PODS, 0):
            self.full.add(name)
        else:
            self.full.discard(name)

    def node_gone(self, name: str) -> None:
        """The node was deleted: forget its capacity (its pods go with their own events)."""
        self._capacity.pop(name, None)
        self.full.discard(name)

    def pods(self, node: str) -> int:
        return self._pods.get(node, 0)

    def requested(self, node: str, resource: str) -> int:
        return self._requested.get(node, {}).get(resource, 0)

    def ports(self, node: str) -> Mapping[Port, int]:
        return self._ports.get(node) or {}

    def claim_users(self, claim: str, besides: str | None = None) -> int:
        """How many counted pods (bound, or assumed bound) use the PersistentVolumeClaim `claim`, on any node; the
        pod of uid `besides` not counted."""
        users = self._claim_users.get(claim, 0)
        own = self._by_uid.get(besides) if besides is not None else None
        return users - (1 if own is not None and claim in own.claims else 0)

    def everyone(self) -> Iterable[tuple[str, Footprint]]:
        """Every counted pod (uid, what it takes), on any node."""
        return self._by_uid.items()

    def pods_on(self, node: str) -> Iterable[tuple[str, Footprint]]:
        """The pods counted on `node`."""
        return ((uid, self._by_uid[uid]) for uid in self._on_node.get(node, ()))

    def label_groups(self, namespace: str) -> Iterable[tuple[tuple[tuple[str, str], ...], Mapping[str, int]]]:
        """The counted pods of `namespace` that are not terminating, grouped by their labels: (labels, node -> how
        many such pods are on it). O(1); iterating it is O(distinct label sets + the nodes they are on)."""
        return (self._groups.get(namespace) or {}).items()

    def lowest_priority(self) -> int | None:
        """The lowest priority of any counted pod (None: no pod): preemption has nothing to do for a pod of that
        priority or lower. O(distinct priorities)."""
        return min(self._priorities, default=None)

    def with_anti_affinity(self) -> Iterable[tuple[str, Footprint]]:
        """The counted pods with required pod anti-affinity (few, usually none: what every pod is judged against)."""
        return ((uid, self._by_uid[uid]) for uid in self._anti)

    def with_preferences(self) -> Iterable[tuple[str, Footprint]]:
        """The counted pods with Footprint.preferences (few, usually none: what every pod's InterPodAffinity score
        reads when it has no preferred terms of its own)."""
        return ((uid, self._by_uid[uid]) for uid in self._preferring)

    def claims(self, node: str) -> Mapping[str, int]:
        """The PersistentVolumeClaims the node's pods use ("<namespace>/<name>" -> how many of its pods)."""
        return self._claims.get(node) or {}


def _discount(counts: Counter[Any] | None, items: Iterable[Any]) -> None:
    """Take `items` out of `counts` (if any), dropping what reaches zero."""
    if counts is None:
        return
    for item in items:
        counts[item] -= 1
        if counts[item] <= 0:
            del counts[item]


def _not_less(now: Footprint, before: Footprint) -> bool:
    has = dict(now.requests)
    return (
        all(has.get(r, 0) >= q for r, q in before.requests)
        and set(before.ports) <= set(now.ports)
        and set(before.claims) <= set(now.claims)
    )


# ---- reading the pod's node selector terms ---------------------------------------------------------------
def check_term(term: Mapping[str, Any], field: str) -> None:
    """A node selector term of the API's shape: arrays of {key: string, operator: string, values: [string]}."""
    for part in ("matchExpressions", "matchFields"):
        exprs = term.get(part) or []
        if not isinstance(exprs, list):
            raise FitError(f"{field}.{part} is not an array")
        for j, e in enumerate(exprs):
            where = f"{field}.{part}[{j}]"
            if not isinstance(e, Mapping) or not isinstance(e.get("key"), str):
                raise FitError(f"{where} is not an object with a string key")
            values = e.get("values") or []
            if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
                raise FitError(f"{where}.values is not an array of strings")


# ---- judging a node -------------------------------------------------------------------------------------------
def show(resource: str, value: int) -> str:
    if resource == CPU:
        return f"{value / 1000:g}"
    return str(value)


def _allocatable(node: Mapping[str, Any]) -> Mapping[str, Any]:
    return (node.get("status") or {}).get("allocatable") or {}


def capacity(node: Mapping[str, Any]) -> dict[str, int]:
    """The node's allocatable as the rules count it (a value that cannot be read counts as none)."""
    counted = {}
    for resource, value in _allocatable(node).items():
        if _counted(str(resource)) or resource == PODS:
            try:
                counted[str(resource)] = amount(str(resource), value, f"status.allocatable.{resource}")
            except FitError:
                counted[str(resource)] = 0
    return counted


def _expression_matches(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op = expr.get("key"), expr.get("operator")
    values = expr.get("values") or []
    if not isinstance(key, str) or not isinstance(values, list):
        return False
    return requirement_holds(key, op, values, labels)


def expressions_match(expressions: Any, labels: Mapping[str, str]) -> bool:
    """Every label selector expression (In, NotIn, Exists, DoesNotExist) matches `labels`."""
    return isinstance(expressions, list) and all(
        isinstance(e, Mapping) and _expression_matches(e, labels) for e in expressions
    )


def term_matches(term: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """One node selector term: every expression and field matches; a term with neither matches no node."""
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    labels = node["metadata"].get("labels") or {}
    if not all(isinstance(e, Mapping) and _expression_matches(e, labels) for e in expressions):
        return False
    # The only field a node selector can name is metadata.name (API validation).
    named = {"metadata.name": node["metadata"]["name"]}
    return all(isinstance(f, Mapping) and f.get("key") in named and _expression_matches(f, named) for f in fields)
