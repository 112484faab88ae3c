"""Gangs: groups of GPU pods placed whole or not at all. Pure: plain data in and out, no client, no clock.

A pod belongs to the gang its annotation `gpu.scheduling/gang` names, or, for a claim pod without it, the gang its
GpuClaim's `spec.gangRef` names (the reference API's field). The gang's members state its size and topology with
annotations (a Job's pod template carries them, so every member says the same):

* `gpu.scheduling/gang-min-members`: how many members are placed in one decision (KAI's and Volcano's `minMember`,
  the Workload API's `gang.minCount`); nothing is placed until that many are waiting or bound;
* `gpu.scheduling/gang-topology`: a node label (`topology.kubernetes.io/zone`, a rack or block label) whose one
  value the gang's nodes must share; `gpu.scheduling/gang-topology-mode`: Required (default) or Preferred (one
  domain if any fits the whole gang, else any nodes). Inside a node, each claim member keeps its NVLink topology.

Or with Kubernetes' own gang API (KEP-4671, `scheduling.k8s.io/v1beta1`): a pod whose
`spec.schedulingGroup.podGroupName` (or gpu-webhook's record of it, the annotation `gpu.scheduling/pod-group`) names a
PodGroup of its namespace belongs to the gang of that name (`pod_group_ref`, `Native`): the PodGroup's
`gang.minCount` is its minimum, its topology constraint its Required topology (`pod_group_spec`); a PodGroup of the
`basic` policy makes no gang. A member waits, never placed alone, while its PodGroup is missing or not served; gang
annotations it also carries must agree.

The decision is one transaction (`transact`): for each candidate domain in turn, every member is placed with
`place` (which assumes its GPUs and room in the scheduler's ledger, so the next member sees them taken); the first
member that does not fit undoes the members placed before it (`undo`, in reverse) and the next domain is tried.
Either every member has a placement or nothing is held and the refusals say which member did not fit where.
`attempt` says what one decision places and where it may (members assumed by an earlier attempt and bound ones
pin a Required gang's domain).

The commit that follows is the scheduler's API calls (scheduler.gangs); what each answer makes of the members is
decided here, so that the scheduler and the tests that drive it run the same rules: `leases_answered` (one member's
Lease refused and every member is abandoned: a gang holds all its GPUs or none, but for what a bind that got no
answer may have bound) and `binds_answered` (bound, abandoned, or left assumed for the next attempt when the bind
got no answer).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Final, Generic, Literal, TypeVar

from gpu_scheduling import constants, names
from gpu_scheduling.claims.ledger import Hold
from gpu_scheduling.text import json_type, show

MAX_MEMBERS = 10_000
"""Largest `gang-min-members` accepted: a gang is decided in one step, so its size bounds that step's work."""

DOMAINS_SHOWN = 3
"""A waiting gang's message names the refusals of at most this many domains."""


class GangError(ValueError):
    """A gang annotation is malformed, or the gang's members disagree; the message names the annotation (and the
    member) and what was expected."""


@dataclasses.dataclass(frozen=True)
class Spec:
    """What a gang's members say of it."""

    name: str
    min_members: int
    topology: str = ""  # a node label key; "" = any nodes
    mode: constants.GangTopologyMode = "Required"

    def describe(self) -> str:
        where = f", {self.mode} {self.topology}" if self.topology else ""
        return f"gang {self.name} (min {self.min_members}{where})"


def _valid_name(value: Any, source: str) -> str:
    if not isinstance(value, str):
        raise GangError(f"{source} is {json_type(value)}; expected the gang's name (a string)")
    if not names.is_subdomain(value):
        raise GangError(f"{source}={show(value)} is not a valid gang name: expected {names.subdomain_rule()}")
    return value


def gang_name(annotations: Mapping[str, Any], gang_ref: Any = None, native: Native | None = None) -> str | None:
    """The gang a pod with these annotations belongs to (its GpuClaim's `gangRef` when it has no annotation), or
    None. With `native`, the PodGroup the pod names (`pod_group_ref`): its name, unless the PodGroup has the basic
    policy (no gang: None); the pod's own declarations win over its claim's `gangRef`. Raises GangError for a name
    that is not a valid object name, and for a pod whose annotation and PodGroup name two gangs, or whose annotation
    names a gang its basic PodGroup does not make."""
    value = annotations.get(constants.GANG_ANNOTATION)
    source = f"annotation {constants.GANG_ANNOTATION}"
    if native is not None:
        named = _valid_name(value, source) if value is not None and value != "" else None
        if named is not None and named != native.name:
            raise GangError(
                f"{source}={show(named)} and {POD_GROUP_FIELD}={show(native.name)} name two gangs; a pod belongs to "
                "one: leave the annotation out, or make it name the PodGroup"
            )
        if native.group is not None and pod_group_policy(native.group) == "basic":
            if named is not None:
                raise GangError(
                    f"PodGroup {native.name} has the basic policy (no gang), but {source} makes it a gang; leave "
                    "the annotation out, or give the PodGroup a gang policy"
                )
            return None
        return native.name
    if value is None:
        value, source = gang_ref, "its GpuClaim's spec.gangRef"
    if value is None or value == "":
        return None
    return _valid_name(value, source)


def read(annotations: Mapping[str, Any], name: str, native: Native | None = None) -> Spec:
    """The gang `name` as one member's annotations state it, or, with `native`, as its PodGroup does (the
    annotations it also carries must agree). Raises GangError naming the annotation or the PodGroup's field."""
    if native is not None:
        return _read_native(annotations, name, native)
    raw = annotations.get(constants.GANG_MIN_MEMBERS_ANNOTATION)
    if raw is None:
        raise GangError(
            f"gang {name}: annotation {constants.GANG_MIN_MEMBERS_ANNOTATION} is missing; expected how many members "
            "are placed together (the Job's parallelism, say)"
        )
    if not isinstance(raw, str) or not raw.isascii() or not raw.isdigit() or len(raw) > 5:
        raise GangError(
            f"gang {name}: annotation {constants.GANG_MIN_MEMBERS_ANNOTATION}={show(str(raw))} is not a count; "
            f"expected an integer from 1 to {MAX_MEMBERS}"
        )
    count = int(raw)
    if not 1 <= count <= MAX_MEMBERS:
        raise GangError(
            f"gang {name}: annotation {constants.GANG_MIN_MEMBERS_ANNOTATION}={count} is out of range; "
            f"expected 1 to {MAX_MEMBERS}"
        )
    topology = annotations.get(constants.GANG_TOPOLOGY_ANNOTATION) or ""
    if not isinstance(topology, str) or (topology and not names.is_label_key(topology)):
        raise GangError(
            f"gang {name}: annotation {constants.GANG_TOPOLOGY_ANNOTATION}={show(str(topology))} is not a label "
            "key; expected a node label such as topology.kubernetes.io/zone"
        )
    mode = annotations.get(constants.GANG_TOPOLOGY_MODE_ANNOTATION) or "Required"
    if mode not in constants.GANG_TOPOLOGY_MODES:
        raise GangError(
            f"gang {name}: annotation {constants.GANG_TOPOLOGY_MODE_ANNOTATION}={show(str(mode))}; expected one of "
            + ", ".join(constants.GANG_TOPOLOGY_MODES)
        )
    return Spec(name, count, topology, mode)


def agreed(specs: Mapping[str, Spec]) -> Spec:
    """The one spec every member (pod key -> its spec) states; GangError naming two that disagree."""
    first_pod, first = next(iter(specs.items()))
    for pod, spec in specs.items():
        if spec != first:
            raise GangError(
                f"the members of gang {first.name} disagree: {first_pod} says {first.describe()}, "
                f"{pod} says {spec.describe()}; every member must carry the same gang annotations"
            )
    return first


# ---- Kubernetes' own gang API (KEP-4671) --------------------------------------------------------------------------

POD_GROUP_FIELD: Final = "spec.schedulingGroup.podGroupName"
"""The pod's field naming its PodGroup (Kubernetes 1.36 on; 1.35's alpha field was `spec.workloadRef`)."""

PodGroupPolicy = Literal["gang", "basic"]


@dataclasses.dataclass(frozen=True)
class Native:
    """A pod's reference to a Kubernetes PodGroup (`pod_group_ref`) and what the scheduler has of it: the PodGroup
    of that name in the pod's namespace (None: there is none), and whether the apiserver serves PodGroups at all
    (discovery at the scheduler's start; not served, `group` is None)."""

    name: str
    group: Mapping[str, Any] | None
    served: bool = True


def pod_group_ref(spec: Any, annotations: Mapping[str, Any]) -> str | None:
    """The PodGroup a pod names: its `spec.schedulingGroup.podGroupName`, else gpu-webhook's record of it (the
    annotation POD_GROUP_ANNOTATION, kept where the apiserver dropped the field), or None when it names none. Raises
    GangError for a name that is not a valid object name, for the field and the annotation naming two PodGroups, and
    for 1.35's `spec.workloadRef`, which gpu-scheduler does not read (such a pod waits rather than run alone)."""
    spec = spec if isinstance(spec, Mapping) else {}
    if spec.get("workloadRef") is not None:
        raise GangError(
            "spec.workloadRef (Kubernetes 1.35's alpha Workload API) is not read by gpu-scheduler: declare the gang "
            f"with the annotation {constants.GANG_ANNOTATION} (docs/gangs.md), or a PodGroup on Kubernetes 1.37"
        )
    field = None
    group = spec.get("schedulingGroup")
    if group is not None:
        if not isinstance(group, Mapping) or group.get("podGroupName") is None:
            raise GangError(
                "spec.schedulingGroup names no podGroupName; expected the name of a PodGroup in the pod's namespace"
            )
        field = _valid_name(group["podGroupName"], POD_GROUP_FIELD)
    recorded = annotations.get(constants.POD_GROUP_ANNOTATION)
    if recorded is None:
        return field
    recorded = _valid_name(recorded, f"annotation {constants.POD_GROUP_ANNOTATION}")
    if field is not None and recorded != field:
        raise GangError(
            f"{POD_GROUP_FIELD}={show(field)} and annotation {constants.POD_GROUP_ANNOTATION}={show(recorded)} name "
            "two PodGroups; the annotation is gpu-webhook's record of the field: leave it out"
        )
    return field or recorded


def pod_group_policy(group: Mapping[str, Any]) -> PodGroupPolicy | None:
    """A PodGroup's `spec.schedulingPolicy`: gang, basic, or None when it sets neither (or is malformed)."""
    spec = group.get("spec")
    policy = spec.get("schedulingPolicy") if isinstance(spec, Mapping) else None
    if not isinstance(policy, Mapping):
        return None
    if policy.get("gang") is not None:
        return "gang"
    if policy.get("basic") is not None:
        return "basic"
    return None


def pod_group_spec(group: Mapping[str, Any], name: str) -> Spec:
    """The gang a PodGroup of the gang policy makes: `gang.minCount` members at least, in one value of its topology
    constraint's node label (Required: KEP-4671 colocates the whole group in one domain) or anywhere. Raises
    GangError naming the field for a policy that is not gang, a count out of range, or a topology it cannot keep."""
    spec = group.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    policy = pod_group_policy(group)
    if policy != "gang":
        said = "the basic policy (no gang)" if policy == "basic" else "neither a gang nor a basic policy"
        raise GangError(f"PodGroup {name} has {said} in spec.schedulingPolicy; expected gang.minCount")
    gang = spec["schedulingPolicy"]["gang"]
    count = gang.get("minCount") if isinstance(gang, Mapping) else None
    if type(count) is not int:
        raise GangError(
            f"PodGroup {name}: spec.schedulingPolicy.gang.minCount is {json_type(count)}; expected an integer from 1 "
            f"to {MAX_MEMBERS}"
        )
    if not 1 <= count <= MAX_MEMBERS:
        shown = str(count) if count.bit_length() <= 64 else show(count)
        raise GangError(
            f"PodGroup {name}: spec.schedulingPolicy.gang.minCount={shown} is out of range; expected 1 to "
            f"{MAX_MEMBERS} (a gang is decided in one step)"
        )
    constraints = spec.get("schedulingConstraints")
    levels = constraints.get("topology") if isinstance(constraints, Mapping) else None
    if levels is None or levels == []:
        return Spec(name, count)
    if not isinstance(levels, list) or len(levels) != 1:
        shown = f"{len(levels)} entries" if isinstance(levels, list) else json_type(levels)
        raise GangError(
            f"PodGroup {name}: spec.schedulingConstraints.topology is {shown}; gpu-scheduler keeps a gang in one "
            "level: expected one entry"
        )
    key = levels[0].get("key") if isinstance(levels[0], Mapping) else None
    if not isinstance(key, str) or not names.is_label_key(key):
        said = f"={show(key)} is not a label key" if isinstance(key, str) else f" is {json_type(key)}"
        raise GangError(
            f"PodGroup {name}: spec.schedulingConstraints.topology[0].key{said}; expected a node label such as "
            "topology.kubernetes.io/zone"
        )
    return Spec(name, count, key, "Required")


def _read_native(annotations: Mapping[str, Any], name: str, native: Native) -> Spec:
    """A native member's gang (`read` with `native`): its PodGroup's, the gang annotations it carries agreeing."""
    if not native.served:
        raise GangError(
            f"gang {name}: its pod names the PodGroup {name} ({POD_GROUP_FIELD}), but the apiserver serves no "
            f"{constants.POD_GROUP_API_VERSION} PodGroups (feature gate GenericWorkload and its runtime-config, "
            "Kubernetes 1.37 on; the scheduler asks at its start): its members wait rather than be placed alone"
        )
    if native.group is None:
        raise GangError(
            f"gang {name}: its PodGroup {name} does not exist; its members wait for it and are tried again when it "
            "is created"
        )
    spec = pod_group_spec(native.group, name)
    said = {
        constants.GANG_MIN_MEMBERS_ANNOTATION: (str(spec.min_members), "spec.schedulingPolicy.gang.minCount"),
        constants.GANG_TOPOLOGY_ANNOTATION: (spec.topology, "spec.schedulingConstraints.topology[0].key"),
    }
    if spec.topology:
        said[constants.GANG_TOPOLOGY_MODE_ANNOTATION] = (spec.mode, "topology (Required)")
    for key, (value, field) in said.items():
        given = annotations.get(key)
        if given is not None and given != "" and given != value:
            raise GangError(
                f"gang {name}: annotation {key}={show(given)} disagrees with its PodGroup's {field} "
                f"({show(value) if value else 'none'}); leave the annotation out, or make it agree"
            )
    return spec


# ---- domains ------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Domain:
    """Nodes a gang may take in one decision: those whose `key` label is `value` (key "" : any node)."""

    key: str
    value: str
    nodes: frozenset[str]

    def describe(self) -> str:
        return f"{self.key}={self.value}" if self.key else "any nodes"


ANYWHERE = Domain("", "", frozenset())
"""The one domain of a gang without a topology: any node (the nodes are not listed; the key "" says so)."""


def domains(
    spec: Spec, labels: Mapping[str, Mapping[str, str]], fixed: Collection[str], free: Mapping[str, int]
) -> list[Domain] | str:
    """The domains to try, in order, for a gang over nodes with these `labels` (node -> labels), some of whose
    members are on the `fixed` nodes already (bound, or assumed by an earlier attempt), with `free` GPUs per node.

    Without a topology: every node. Required: each value of the label, tightest first (fewest free GPUs, so a
    small gang does not split the emptiest domain), restricted to the fixed members' domain. Preferred: the same,
    then every node. A string says why there is no domain at all."""
    everywhere = Domain("", "", frozenset(labels))
    if not spec.topology:
        return [everywhere]
    by_value: dict[str, set[str]] = {}
    for node, node_labels in labels.items():
        value = node_labels.get(spec.topology)
        if value is not None:
            by_value.setdefault(value, set()).add(node)
    pinned = {labels.get(n, {}).get(spec.topology) for n in fixed}
    if spec.mode == "Required" and pinned:
        if None in pinned or len(pinned) > 1:
            return (
                f"its placed members are on nodes of {len(pinned)} {spec.topology} values "
                f"({', '.join(sorted(str(v) for v in pinned))}); Required keeps a gang in one"
            )
        by_value = {v: n for v, n in by_value.items() if v in pinned}
    ordered = sorted(by_value.items(), key=lambda vn: (sum(free.get(n, 0) for n in vn[1]), vn[0]))
    found = [Domain(spec.topology, value, frozenset(nodes)) for value, nodes in ordered]
    if spec.mode == "Preferred":
        found.append(everywhere)
    if not found:
        return f"no node has the label {spec.topology}"
    return found


# ---- the transaction ----------------------------------------------------------------------------------------------

M = TypeVar("M")
P = TypeVar("P")


@dataclasses.dataclass(frozen=True)
class Refusal:
    domain: str
    member: str
    why: str


@dataclasses.dataclass(frozen=True)
class Placed(Generic[P]):
    domain: Domain
    placements: list[P]


def transact(
    members: Sequence[M],
    candidates: Iterable[Domain],
    place: Callable[[M, Domain], P | str],
    undo: Callable[[P], None],
    name: Callable[[M], str],
) -> Placed[P] | list[Refusal]:
    """Place every member in the first domain that takes them all, or none: see the module's docstring. `place`
    returns a placement or why the member does not fit in that domain; `undo` takes a placement back."""
    refusals: list[Refusal] = []
    for domain in candidates:
        placed: list[P] = []
        for member in members:
            outcome = place(member, domain)
            if isinstance(outcome, str):
                for p in reversed(placed):
                    undo(p)
                refusals.append(Refusal(domain.describe(), name(member), outcome))
                break
            placed.append(outcome)
        else:
            return Placed(domain, placed)
    return refusals


@dataclasses.dataclass(frozen=True)
class Attempt(Generic[M]):
    """What one decision does for a gang whose minimum is present, before its transaction."""

    place: list[M]  # the waiting members that hold nothing: `transact` places them
    retry: dict[str, Hold]  # the waiting members an earlier attempt assumed (key -> hold), bound to the same GPUs
    candidates: list[Domain] | str  # the domains `transact` tries, in order, or why there is none


def attempt(
    spec: Spec,
    waiting: Mapping[str, M],
    assumed: Mapping[str, Hold],
    bound_nodes: Iterable[str],
    labels: Callable[[], Mapping[str, Mapping[str, str]]],
    free: Callable[[], Mapping[str, int]],
) -> Attempt[M]:
    """One decision for a gang: its `waiting` members (key -> member), those of them in `assumed` holding what an
    earlier attempt assumed (their bind got no answer, and may have taken effect: they are never placed anew), its
    bound members on `bound_nodes`. The nodes of the assumed and the bound members pin a Required gang's domain.
    `labels` and `free` (as `domains` takes them) are read only for a gang with a topology."""
    fixed = {h.node for h in assumed.values()} | set(bound_nodes)
    candidates = domains(spec, labels(), fixed, free()) if spec.topology else [ANYWHERE]
    return Attempt([m for k, m in waiting.items() if k not in assumed], dict(assumed), candidates)


def explain(spec: Spec, refusals: Sequence[Refusal]) -> str:
    """Why the gang waits: which member fits nowhere in which domain, for the first few domains tried."""
    shown = "; ".join(f"in {r.domain} member {r.member} does not fit: {r.why}" for r in refusals[:DOMAINS_SHOWN])
    more = len(refusals) - DOMAINS_SHOWN
    tail = f"; and {more} more domain{'s' if more != 1 else ''}" if more > 0 else ""
    return f"{spec.describe()} does not fit whole: {shown}{tail}"


def incomplete(spec: Spec, overdue_seconds: float | None = None) -> str:
    """Why a gang with fewer than its minimum members waits (and, once its timeout passed, that it is overdue). The
    message does not count the members present: it would change with each arrival and rewrite every waiting
    member's condition (quadratic in the gang's size); `kubectl gpu gangs` counts them."""
    late = f"; incomplete for more than {overdue_seconds:.0f} s" if overdue_seconds is not None else ""
    return f"{spec.describe()} waits for its members: fewer than {spec.min_members} present{late}"


# ---- the commit ---------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Settled(Generic[P]):
    """What the API's answers make of a decided gang's members; the caller updates its ledger to match."""

    bound: list[P]  # bound where they were placed: their holds are confirmed
    abandoned: list[P]  # the attempt is over for them without a binding: they hold nothing, their Leases released
    unanswered: list[P]  # their bind got no answer: still assumed, bound to the same GPUs by the next attempt

    @property
    def whole(self) -> bool:
        """Every member is bound: the gang is scheduled."""
        return not self.abandoned and not self.unanswered


def leases_answered(placed: Sequence[P], retried: Sequence[P], locked: Sequence[bool]) -> Settled[P] | None:
    """The GPU Leases of a decided gang's claim members were created (`locked`: whether every Lease of a member names
    it, one per claim member), for the members `placed` by this decision and those `retried` (`Attempt.retry`).
    None: all of them were, and every member is bound next. Otherwise every placed member is abandoned, those whose
    Leases were created and the map members too: the gang holds all its GPUs or none, and is decided again whole. A
    retried member stays as its earlier bind left it, assumed, Leases and all: that bind got no answer and may have
    bound it, and releasing a bound pod's Leases would give its GPUs to another pod before the watch shows it bound.
    No member is bound before this said None."""
    if all(locked):
        return None
    return Settled([], list(placed), list(retried))


def binds_answered(placements: Sequence[P], outcomes: Sequence[bool | None]) -> Settled[P]:
    """The binds of a decided gang's members were answered (`outcomes`, one per placement: True bound, False not
    bound and never by this attempt, None no answer). A member without an answer stays assumed, Leases and all: its
    bind may have taken effect, so its GPUs are not given to anyone else, and the next attempt binds it again to the
    same GPUs (`attempt`'s retry)."""
    bound: list[P] = []
    abandoned: list[P] = []
    unanswered: list[P] = []
    for placement, outcome in zip(placements, outcomes, strict=True):
        if outcome is True:
            bound.append(placement)
        elif outcome is False:
            abandoned.append(placement)
        else:
            unanswered.append(placement)
    return Settled(bound, abandoned, unanswered)


# ---- membership ---------------------------------------------------------------------------------------------------


class Book:
    """Which pods belong to which gang ("<namespace>/<gang>" -> pod keys), for the scheduler's cached pods, and
    which gangs were complete (so a drop below the minimum is reported once)."""

    def __init__(self) -> None:
        self._members: dict[str, set[str]] = {}
        self._gang: dict[str, str] = {}  # pod key -> gang key
        self.complete: set[str] = set()  # gangs that had their minimum bound since they last had fewer

    def set(self, pod: str, gang: str | None) -> None:
        old = self._gang.get(pod)
        if old == gang:
            return
        if old is not None:
            self._drop(pod, old)
        if gang is not None:
            self._gang[pod] = gang
            self._members.setdefault(gang, set()).add(pod)

    def _drop(self, pod: str, gang: str) -> None:
        del self._gang[pod]
        members = self._members.get(gang)
        if members is not None:
            members.discard(pod)
            if not members:
                del self._members[gang]
                self.complete.discard(gang)

    def gang_of(self, pod: str) -> str | None:
        return self._gang.get(pod)

    def members(self, gang: str) -> frozenset[str]:
        return frozenset(self._members.get(gang, ()))

    def gangs(self) -> Iterable[str]:
        return self._members.keys()
