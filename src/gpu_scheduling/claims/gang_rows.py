"""The gangs as `kubectl gpu gangs` and the board show them: one row per gang, built from the scheduler's pods and
the GpuClaims they name. Pure: plain data in, rows out; no client, no clock. The one source of both views.

Membership and the gang's spec are read as the scheduler reads them (claims.gangs: `gang_name`, `read`,
`agreed`): a pod belongs to the gang its annotation names, or, for a claim pod without it, its GpuClaim's
`spec.gangRef`. Members are the pods the scheduler counts: not finished, and not being deleted unless bound. Given
the PodGroups (`PodGroups`: `kubectl gpu gangs` lists them where the apiserver serves them), a pod naming one
(Kubernetes' own gang API) belongs to its gang too, with the PodGroup's minimum and topology; without them (the
board, which does not read PodGroups) such a reference is not looked at.

A row's status:

* Running: at least its minimum of members are bound (extra members may still wait);
* Waiting: enough members are present but fewer than the minimum are bound (the scheduler is deciding, or the gang
  does not fit whole: the members' message says where);
* Incomplete: fewer members than its minimum are present and none is bound (it waits for its members);
* BelowMinimum: fewer members than its minimum are present, some bound: it ran and a member left (the scheduler
  reports GangBelowMinimum and keeps the others running);
* Invalid: a member's gang annotations cannot be read, or the members disagree; the row's `why` says which.

Nothing here raises on a malformed object: a field of the wrong type is read as absent, and a malformed gang
annotation becomes an Invalid row.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal

from gpu_scheduling import constants, gpumap, podrequest
from gpu_scheduling.claims import gangs
from gpu_scheduling.claims.occupancy import FINISHED, MAX_MESSAGE, items, mapping, string, strings
from gpu_scheduling.text import show

Status = Literal["Running", "Waiting", "Incomplete", "BelowMinimum", "Invalid"]
STATUSES: Final[tuple[Status, ...]] = ("Running", "Waiting", "Incomplete", "BelowMinimum", "Invalid")

#: The annotations a member's gang is read from (the others are not kept).
GANG_ANNOTATIONS: Final = (
    constants.GANG_ANNOTATION,
    constants.GANG_MIN_MEMBERS_ANNOTATION,
    constants.GANG_TOPOLOGY_ANNOTATION,
    constants.GANG_TOPOLOGY_MODE_ANNOTATION,
)

#: Member names a row's document lists at most (the counts are always whole).
MAX_LISTED: Final = 100


@dataclasses.dataclass(frozen=True, slots=True)
class Member:
    """What a gang row reads of one of the scheduler's pods."""

    namespace: str
    name: str
    annotations: tuple[tuple[str, str], ...]  # the GANG_ANNOTATIONS it carries, in that order
    claim: str | None  # the GpuClaim it names (valid name), whose gangRef applies without a gang annotation
    bound: bool
    message: str  # its PodScheduled=False message (one line, bounded), "" when none
    pod_group: str | None = None  # the PodGroup it names (claims.gangs.pod_group_ref), or its value as shown
    pod_group_error: str = ""  # why that reference cannot be read; "" when it can (or there is none)


@dataclasses.dataclass(frozen=True)
class PodGroups:
    """Kubernetes' PodGroups the rows read native gangs from: (namespace, name) -> PodGroup, and whether the
    apiserver serves them at all (not served: a pod naming one waits, and its row says why)."""

    served: bool
    groups: Mapping[tuple[str, str], Mapping[str, Any]]

    @classmethod
    def of(cls, listed: Iterable[object] | None) -> PodGroups:
        """From the PodGroups listed (None: the apiserver serves none)."""
        groups: dict[tuple[str, str], Mapping[str, Any]] = {}
        for obj in listed or ():
            group = mapping(obj)
            meta = mapping(group.get("metadata"))
            name = string(meta.get("name"))
            if name is not None:
                groups[(string(meta.get("namespace")) or "", name)] = group
        return cls(listed is not None, groups)

    def native(self, m: Member) -> gangs.Native | None:
        """The PodGroup `m` names as claims.gangs reads it; None when it names none."""
        if m.pod_group is None or m.pod_group_error:
            return None
        return gangs.Native(m.pod_group, self.groups.get((m.namespace, m.pod_group)), self.served)


@dataclasses.dataclass(frozen=True, slots=True)
class Membership:
    """The gang a member belongs to: its name, or, when the name cannot be read, the value as shown and why."""

    namespace: str
    gang: str
    error: str = ""


def _one_line(value: object) -> str:
    if not isinstance(value, str):
        return ""
    return " ".join(value[: MAX_MESSAGE * 4].split())[:MAX_MESSAGE]


def _waiting_message(status: Mapping[str, Any]) -> str:
    for cond in items(status.get("conditions")):
        cond = mapping(cond)
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return _one_line(cond.get("message")) or _one_line(cond.get("reason"))
    return ""


def member(pod: object) -> Member | None:
    """`pod` as a possible gang member, or None when it cannot be one: no gang annotation and no claim, finished,
    or being deleted before it was bound. Never raises."""
    obj = mapping(pod)
    meta = mapping(obj.get("metadata"))
    name = string(meta.get("name"))
    if name is None:
        return None
    annotations = strings(meta.get("annotations"))
    claim = None
    if constants.CLAIM_ANNOTATION in annotations:
        try:
            claim = podrequest.claim_name({"annotations": annotations})
        except gpumap.PodMapError:
            claim = None  # as the scheduler: a claim it cannot name gives no gangRef
    spec, status = mapping(obj.get("spec")), mapping(obj.get("status"))
    pod_group, pod_group_error = _pod_group(spec, annotations)
    if constants.GANG_ANNOTATION not in annotations and claim is None and pod_group is None:
        return None
    bound = string(spec.get("nodeName")) is not None
    if status.get("phase") in FINISHED or (meta.get("deletionTimestamp") and not bound):
        return None
    return Member(
        namespace=string(meta.get("namespace")) or "",
        name=name,
        annotations=tuple((k, annotations[k]) for k in GANG_ANNOTATIONS if k in annotations),
        claim=claim,
        bound=bound,
        message="" if bound else _waiting_message(status),
        pod_group=pod_group,
        pod_group_error=pod_group_error,
    )


def _pod_group(spec: Mapping[str, Any], annotations: Mapping[str, str]) -> tuple[str | None, str]:
    """The PodGroup a pod names and "", or its reference as shown and why it cannot be read, or (None, "")."""
    try:
        return gangs.pod_group_ref(spec, annotations), ""
    except gangs.GangError as exc:
        group = mapping(spec.get("schedulingGroup")).get("podGroupName")
        raw = annotations.get(constants.POD_GROUP_ANNOTATION, group)
        return (raw if isinstance(raw, str) and raw else show(raw)), str(exc)


def membership(m: Member, gang_ref: Any = None, pod_groups: PodGroups | None = None) -> Membership | None:
    """The gang of `m` (None: it belongs to none); `gang_ref` is the `spec.gangRef` of the GpuClaim it names. With
    `pod_groups`, the PodGroup it names counts as the scheduler counts it; without, it is not looked at."""
    annotations = dict(m.annotations)
    ref = gang_ref if m.claim is not None else None
    if pod_groups is not None and m.pod_group_error:
        return Membership(m.namespace, m.pod_group or "", m.pod_group_error)
    native = pod_groups.native(m) if pod_groups is not None else None
    try:
        name = gangs.gang_name(annotations, ref, native)
    except gangs.GangError as exc:
        raw = annotations.get(constants.GANG_ANNOTATION, ref)
        return Membership(m.namespace, raw if isinstance(raw, str) and raw else show(raw), str(exc))
    return Membership(m.namespace, name) if name else None


@dataclasses.dataclass(frozen=True)
class GangRow:
    namespace: str
    gang: str
    min_members: int | None  # None: its spec cannot be read (Invalid)
    bound: int
    waiting: int
    topology: str  # the node label its members share; "" when any nodes
    mode: str  # Required or Preferred; "" without a topology
    status: Status
    why: str  # the waiting members' common PodScheduled message, or what the row says of the gang; "" = nothing
    members: tuple[str, ...]  # pod names, in order

    def topology_text(self) -> str:
        """`Required zone`, or `-` when the gang takes any nodes."""
        return f"{self.mode} {self.topology}" if self.topology else "-"

    def document(self) -> dict[str, Any]:
        """The row as JSON (`kubectl gpu gangs -o json`, the board's `gangs`)."""
        return {
            "namespace": self.namespace,
            "gang": self.gang,
            "minMembers": self.min_members,
            "bound": self.bound,
            "waiting": self.waiting,
            "topology": self.topology or None,
            "topologyMode": self.mode or None,
            "status": self.status,
            "why": self.why,
            "members": list(self.members[:MAX_LISTED]),
            "memberCount": len(self.members),
        }


def _common(messages: Iterable[str]) -> str:
    """The message most of the waiting members carry (the first in member order on a tie); "" when none has one."""
    counts = Counter(m for m in messages if m)
    return max(counts, key=counts.__getitem__) if counts else ""  # max keeps the first of equal counts


def row(
    namespace: str, gang: str, members: Iterable[Member], error: str = "", pod_groups: PodGroups | None = None
) -> GangRow:
    """The row of one gang, from its members (and, when its name cannot be read, why); `pod_groups` as for
    `membership`."""
    ordered = sorted(members, key=lambda m: m.name)
    bound = sum(1 for m in ordered if m.bound)
    waiting = len(ordered) - bound
    common = _common(m.message for m in ordered if not m.bound)
    names = tuple(m.name for m in ordered)
    spec: gangs.Spec | None = None
    if not error:
        try:
            natives = {m.name: pod_groups.native(m) if pod_groups is not None else None for m in ordered}
            spec = gangs.agreed({m.name: gangs.read(dict(m.annotations), gang, natives[m.name]) for m in ordered})
        except gangs.GangError as exc:
            error = str(exc)
        except StopIteration:  # no member: nothing to read (a caller's mistake, not a crash)
            error = f"gang {gang} has no member"
    if spec is None:
        return GangRow(namespace, gang, None, bound, waiting, "", "", "Invalid", error, names)
    status: Status
    why = common
    if bound >= spec.min_members:
        status = "Running"
    elif len(ordered) >= spec.min_members:
        status = "Waiting"
    elif bound:
        status = "BelowMinimum"
        why = why or (
            f"{spec.describe()} is below its minimum: {bound} of {spec.min_members} members bound; the others keep "
            "running (no eviction)"
        )
    else:
        status = "Incomplete"
        why = why or gangs.incomplete(spec)
    mode = spec.mode if spec.topology else ""
    return GangRow(namespace, gang, spec.min_members, bound, waiting, spec.topology, mode, status, why, names)


def gang_refs(claims: Iterable[object]) -> dict[tuple[str, str], Any]:
    """(namespace, name) -> `spec.gangRef` of each GpuClaim that has one."""
    out: dict[tuple[str, str], Any] = {}
    for claim in claims:
        obj = mapping(claim)
        meta = mapping(obj.get("metadata"))
        name = string(meta.get("name"))
        ref = mapping(obj.get("spec")).get("gangRef")
        if name is not None and ref is not None:
            out[(string(meta.get("namespace")) or "", name)] = ref
    return out


def rows(pods: Iterable[object], claims: Iterable[object], pod_groups: PodGroups | None = None) -> list[GangRow]:
    """One row per gang of `pods` (the scheduler's pods), whose claim members' gangs `claims` say, and with
    `pod_groups` the gangs of Kubernetes' PodGroups they name; by namespace, then gang."""
    refs = gang_refs(claims)
    groups: dict[Membership, list[Member]] = defaultdict(list)
    for pod in pods:
        m = member(pod)
        if m is None:
            continue
        of = membership(m, refs.get((m.namespace, m.claim)) if m.claim else None, pod_groups)
        if of is not None:
            groups[of].append(m)
    found = [row(of.namespace, of.gang, ms, of.error, pod_groups) for of, ms in groups.items()]
    return sorted(found, key=lambda r: (r.namespace, r.gang))
