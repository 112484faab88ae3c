"""What every benchmark run must have got right, whatever its timings: each check takes the objects the run left
on its cluster (listed before it is stopped) and returns one line per problem, empty when the run is correct.
`python -m bench` fails on any problem, the smoke included. Pure: no client, no I/O.

- W1: every pod bound to the node its map entry (or its affinity) names.
- W2: no GPU held by two pods: the GPU ids gpu-scheduler wrote on its pods, the devices of the ResourceClaims
  kube-scheduler allocated, and for the extended resource (no ids) no node given more than its GPUs.
- W3: no gang partly bound (each gang has none or all of its members bound), every bound member holds a whole
  node's GPUs, all distinct, and no GPU is held twice (as in W2).
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


def misplaced(pods: Iterable[Mapping[str, Any]], mapped: Mapping[str, str]) -> list[str]:
    """W1: the bound pods not on the node `mapped` gives them (pod name -> node); an unbound pod is the run's
    count of bound pods to report."""
    wrong = {
        p["metadata"]["name"]: p["spec"]["nodeName"]
        for p in pods
        if p["spec"].get("nodeName") and p["spec"]["nodeName"] != mapped.get(p["metadata"]["name"])
    }
    if not wrong:
        return []
    shown = _some(f"{name} on {node}, mapped to {mapped.get(name, 'nothing')}" for name, node in wrong.items())
    return [f"{len(wrong)} W1 pods not on their mapped node: {shown}"]


def w1_mapped(pods: int, nodes: int, group_size: int) -> dict[str, str]:
    """Pod name -> the node its map entry names, for the run's W1 pods (workload.w1_placements)."""
    return {pl.pod: pl.node for group in workload.w1_placements(pods, nodes, group_size) for pl in group}


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


def gangs_whole(pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """W3: the gangs (workload.gang_of) with some but not all of their listed members bound."""
    members: dict[str, list[bool]] = {}
    for p in pods:
        gang = workload.gang_of(p["metadata"]["name"])
        if gang is not None:
            members.setdefault(gang, []).append(bool(p["spec"].get("nodeName")))
    partial = {gang: sum(bound) for gang, bound in members.items() if 0 < sum(bound) < len(bound)}
    if not partial:
        return []
    shown = _some(f"{gang} ({n}/{len(members[gang])})" for gang, n in partial.items())
    return [f"{len(partial)} W3 gangs partly bound: {shown}"]


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
