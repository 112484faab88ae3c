"""What every benchmark run must have got right, whatever its timings: each check takes the objects the run left
on its cluster (listed before it is stopped) and returns one line per problem, empty when the run is correct.
`python -m bench` fails on any problem, the smoke included. Pure: no client, no I/O.

- W1: every pod bound to the node its map entry (or its affinity) names.
- W2: no GPU held by two pods: the GPU ids gpu-scheduler wrote on its pods, the devices of the ResourceClaims
  kube-scheduler allocated, and for the extended resource (no ids) no node given more than its GPUs.
- W3: no gang ends with some members bound and others not, whichever scheduler; gpu-scheduler never has one partly
  bound on the way either: from the audit log, every GPU Lease of a gang's members was created before the gang's
  first bind. Every bound member holds a whole node's GPUs, all distinct, and no GPU is held twice (as in W2). And
  the scheduler gangs at all (`gang_proof`, after the timed window, bench/gangproof.py): a gang short of one member
  stays unbound while a pod of no gang is placed, and binds once its last member comes.
- W4: every pod bound to its mapped node (as W1), and the bound pods' count of every zone within the spread
  constraint's maxSkew of the emptiest zone's.
- Storm: no waiting pod bound (every GPU was taken by the fill).
- The board: no flag on any node or GPU once the agents have caught up.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from bench import workload
from gpu_scheduling import constants

#: How many offending pods or GPUs a problem line names.
EXAMPLES = 5


def _some(names: Iterable[str]) -> str:
    names = sorted(names)
    return ", ".join(names[:EXAMPLES]) + (f" (+{len(names) - EXAMPLES})" if len(names) > EXAMPLES else "")


def misplaced(pods: Iterable[Mapping[str, Any]], mapped: Mapping[str, str], what: str = "W1") -> list[str]:
    """W1 (and W4, `what`): the bound pods not on the node `mapped` gives them (pod name -> node); an unbound pod is
    the run's count of bound pods to report."""
    wrong = {
        p["metadata"]["name"]: p["spec"]["nodeName"]
        for p in pods
        if p["spec"].get("nodeName") and p["spec"]["nodeName"] != mapped.get(p["metadata"]["name"])
    }
    if not wrong:
        return []
    shown = _some(f"{name} on {node}, mapped to {mapped.get(name, 'nothing')}" for name, node in wrong.items())
    return [f"{len(wrong)} {what} pods not on their mapped node: {shown}"]


def w1_mapped(pods: int, nodes: int, group_size: int, prefix: str = "w1") -> dict[str, str]:
    """Pod name -> the node its map entry names, for the run's W1 (or W4, `prefix`) pods (workload.w1_placements)."""
    return {pl.pod: pl.node for group in workload.w1_placements(pods, nodes, group_size, prefix) for pl in group}


def spread(pods: Iterable[Mapping[str, Any]], zone_of: Mapping[str, str], max_skew: int) -> list[str]:
    """W4: the bound pods its spread constraint selects (workload.W4_LABEL) skewed across the zones (`zone_of`: node
    -> zone, every node of the run, so an empty zone counts) by more than `max_skew`: the most in one zone minus the
    fewest in any. Each scheduler admits a pod only where that stays within maxSkew, so at the end it must hold."""
    counts: Counter[str] = Counter(
        zone_of.get(p["spec"]["nodeName"], "no zone")
        for p in pods
        if p["spec"].get("nodeName") and workload.W4_LABEL.items() <= (p["metadata"].get("labels") or {}).items()
    )
    zones = sorted({*zone_of.values(), *counts})
    skew = workload.zone_skew(counts, zones)
    if skew <= max_skew:
        return []
    shown = ", ".join(f"{z} {counts.get(z, 0)}" for z in zones)
    return [f"W4 pods skewed by {skew} across the zones, more than maxSkew {max_skew}: {shown}"]


def held_twice(
    pods: Iterable[Mapping[str, Any]],
    api: workload.ClaimApi,
    resource_claims: Iterable[Mapping[str, Any]] = (),
    gpus_per_node: int = workload.GPUS_PER_NODE,
    what: str = "W2",
) -> list[str]:
    """W2 (and W3, `what`): the GPUs given to more than one pod, in the form the contender's API records them."""
    bound = [p for p in pods if p["spec"].get("nodeName")]
    if api == workload.GPUCLAIM:
        held = Counter(
            f"{p['spec']['nodeName']}:{gpu.strip()}"
            for p in bound
            for gpu in (p["metadata"].get("annotations") or {}).get(constants.GPU_IDS_ANNOTATION, "").split(",")
            if gpu.strip()
        )
        missing = [
            p["metadata"]["name"]
            for p in bound
            if constants.GPU_IDS_ANNOTATION not in p["metadata"].get("annotations", {})
        ]
        problems = [f"{len(missing)} bound {what} pods without their GPU ids: {_some(missing)}"] if missing else []
    elif api == workload.DRA:
        held = Counter(
            f"{result['pool']}:{result['device']}"
            for claim in resource_claims
            for result in (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")
            or []
        )
        problems = []
    else:  # the extended resource has no ids: a node given more GPUs than it has is a GPU given twice
        per_node: Counter[str] = Counter()
        for p in bound:
            per_node[p["spec"]["nodeName"]] += workload.pod_gpus(dict(p))
        over = {node: n for node, n in per_node.items() if n > gpus_per_node}
        return (
            [f"nodes given more than {gpus_per_node} GPUs: {_some(f'{n} ({c})' for n, c in over.items())}"]
            if over
            else []
        )
    twice = [gpu for gpu, n in held.items() if n > 1]
    if twice:
        problems.append(f"{len(twice)} GPUs held by more than one {what} pod: {_some(twice)}")
    return problems


def _gangs(pods: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """The W3 members by gang (workload.gang_of), in gang order."""
    gangs: dict[str, list[Mapping[str, Any]]] = {}
    for p in pods:
        gang = workload.gang_of(p["metadata"]["name"])
        if gang is not None:
            gangs.setdefault(gang, []).append(p)
    return dict(sorted(gangs.items()))


def partly_bound(pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """W3, every contender: the gangs that end with some members bound and others not."""
    partial = []
    for gang, members in _gangs(pods).items():
        bound = sum(bool(p["spec"].get("nodeName")) for p in members)
        if 0 < bound < len(members):
            partial.append(f"{gang} ({bound}/{len(members)})")
    return [f"{len(partial)} W3 gangs partly bound: {_some(partial)}"] if partial else []


def gangs_whole(
    pods: Iterable[Mapping[str, Any]], leases: Mapping[str, float], binds: Mapping[str, float]
) -> list[str]:
    """W3, gpu-scheduler's rows: the gangs (workload.gang_of) ever partly bound, by the apiserver's own account (the
    audit log). gpu-scheduler decides a whole gang and creates every member's GPU Leases before it binds any member
    (scheduler/gangs.py), so a gang's Lease created after its first bind is a member decided or locked while
    another was bound already; and a gang with some members bound but not all at the end stayed partly bound
    (`partly_bound`). `leases`: Lease name -> when its last create was received (the one that holds the GPU now: W3
    deletes no pod); `binds`: pod name -> when its binding was received. A bound member's Leases are named by its
    node and GPU ids (`member_gpus` checks those); one missing from the log, or a missing binding, is a problem,
    never a pass.

    kube-scheduler writes nothing before its bindings (it decides a PodGroup in memory, then binds each member), so
    for it only the end state (`partly_bound`) and the proof that it gangs (`gang_proof`) are checked."""
    pods = list(pods)
    late, unlogged = [], []
    for gang, members in _gangs(pods).items():
        bound = {p["metadata"]["name"]: p for p in members if p["spec"].get("nodeName")}
        locked: list[tuple[float, str, str]] = []  # (created, member, Lease) of every GPU of a bound member
        for name, p in bound.items():
            if name not in binds:
                unlogged.append(f"{name}'s binding")
            for lease in workload.member_leases(p):
                if lease in leases:
                    locked.append((leases[lease], name, lease))
                else:
                    unlogged.append(f"{name}'s Lease {lease}")
        first = min(((binds[name], name) for name in bound if name in binds), default=None)
        if first is not None and locked and max(locked)[0] > first[0]:
            created, member, lease = max(locked)
            early = (created - first[0]) * 1000
            late.append(f"{gang} ({first[1]} bound {early:.1f} ms before {member}'s Lease {lease} was created)")
    problems = partly_bound(pods)
    if late:
        problems.append(f"{len(late)} W3 gangs with a member bound before every GPU Lease was created: {_some(late)}")
    if unlogged:
        problems.append(f"{len(unlogged)} writes of bound W3 members missing from the audit log: {_some(unlogged)}")
    return problems


def gang_proof(
    alone_bound: bool, short: Mapping[str, bool], completed: Mapping[str, bool], hold: float, timeout: float
) -> list[str]:
    """W3, every contender: does its scheduler gang at all (bench/gangproof.py)? A gang of minimum N is created with
    N - 1 members beside a pod of no gang asking the same; once the lone pod is bound (`alone_bound`, within
    `timeout` s) and `hold` s more have passed, no member of the short gang may be bound (`short`: member -> bound
    then); then its last member is created and every member must be bound within `timeout` s (`completed`: member
    -> bound). A scheduler that placed pods one by one would bind the short members with the lone pod; one that
    placed nothing would leave the lone pod unbound, so the held gang would prove nothing."""
    problems = []
    if not alone_bound:
        problems.append(f"gang proof: the pod of no gang was not bound within {timeout:g} s, so nothing was proved")
    if bound := sorted(name for name, b in short.items() if b):
        problems.append(
            f"gang proof: {len(bound)} of the {len(short)} members of a gang short of one were bound by {hold:g} s "
            f"after the pod of no gang (not held as a gang): {_some(bound)}"
        )
    if unbound := sorted(name for name, b in completed.items() if not b):
        problems.append(
            f"gang proof: {len(unbound)} of the {len(completed)} members still unbound {timeout:g} s after the "
            f"gang was completed: {_some(unbound)}"
        )
    return problems


def member_gpus(
    pods: Iterable[Mapping[str, Any]], api: workload.ClaimApi, gpus_per_node: int = workload.GPUS_PER_NODE
) -> list[str]:
    """W3: the bound members that do not hold `gpus_per_node` distinct GPUs (gpu-scheduler's GPU ids; the extended
    resource has none: `held_twice` checks its nodes) and the GPUs held twice."""
    pods = list(pods)
    problems = held_twice(pods, api, gpus_per_node=gpus_per_node, what="W3")
    if api != workload.GPUCLAIM:
        return problems
    short = []
    for p in pods:
        if not p["spec"].get("nodeName"):
            continue
        text = (p["metadata"].get("annotations") or {}).get(constants.GPU_IDS_ANNOTATION, "")
        ids = [g.strip() for g in text.split(",") if g.strip()]
        if len(ids) != gpus_per_node or len(set(ids)) != len(ids):
            short.append(f"{p['metadata']['name']} ({text or 'none'})")
    if short:
        problems.append(f"{len(short)} bound W3 members without {gpus_per_node} distinct GPUs: {_some(short)}")
    return problems


def storm_bound(pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """Storm: the waiting pods that were bound, though the fill had taken every GPU."""
    bound = [p["metadata"]["name"] for p in pods if p["spec"].get("nodeName")]
    return [f"{len(bound)} storm pods bound while every GPU was taken: {_some(bound)}"] if bound else []


def board_flags(flags: Mapping[str, int], flags_left: int) -> list[str]:
    """The board: the flags it still shows (by kind) once the agents caught up, and those left at that moment."""
    problems = []
    if flags_left:
        problems.append(f"the board still flagged {flags_left} GPUs once the agents had written their inUseBy")
    if any(flags.values()):
        problems.append(f"the board flags {', '.join(f'{k} {n}' for k, n in sorted(flags.items()) if n)}")
    return problems
