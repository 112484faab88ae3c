"""Choose a node and GPU ids for one GpuClaim. Pure: plain data in, a decision out, no Kubernetes client.

Inputs are the claim's request, every node's inventory (GPU ids, health, NVLink island, bandwidth, memory,
utilization), the GPUs already held by other claims and the nodes kept for higher-priority waiters. The output is
an :class:`Allocation`, or a :class:`NoFit` whose phase says whether waiting can help (`Pending`: GPUs are busy
now) or not (`Failed`: no node could ever satisfy the request).

Rules
  * Unhealthy GPUs are never allocated; `selector.matchLabels` filters the nodes.
  * Exclusive GPUs are never shared; Shared GPUs are shared only with other Shared claims; MIG is refused.
  * `minMemoryMiB`: only GPUs that report their memory and have at least that much free now are offered. A node
    whose GPUs are all too small in total (or report no memory) can never serve the request, so it fails rather
    than waits.
  * Topology `Required`: all GPUs in one island whose bandwidth meets `minBandwidthGBps`. `Preferred`: such an
    allocation wins over any other; failing that, one island below the bandwidth; failing that, any GPUs.
    `Ignore`: islands play no part.
  * Within a node, `contiguous` takes the lowest run of adjacent ids (inside one island when it can),
    `spread` takes GPUs round-robin across islands, `preferIds` takes the preferred ids that are free and fills
    up like `contiguous` (the message says so).
  * Among feasible nodes, one that satisfies the topology preference always wins; then, where the caller gives one,
    the pod's preference (the weighted score of its preferred rules, scheduler.framework.Scoring: the highest
    wins); then the strategy decides:
    - `BestFit` (the default) packs, to keep whole nodes and whole islands free for large claims: the node left
      with the fewest free GPUs, then the one whose chosen island is left with the fewest free GPUs, then (with
      `minMemoryMiB`) the GPUs with the least free memory beyond it, then the node name. With `minMemoryMiB` the
      same "just enough" choice is made among the GPUs a policy could take within the node, so large GPUs stay
      free for large models.
    - `LeastUtilized` spreads: the node with the smallest share of its healthy GPUs already held, then the lowest
      mean measured utilization (unreported counts as idle), then the node name.
    - `RoundRobin` rotates: the first node whose name sorts after `cursor` (the last node it chose), wrapping
      around to the lowest name.
  * `reserved` nodes are kept for a waiting pod of higher priority (claims.priority): they are never chosen, but
    they still count as able to serve the request some day, so it waits (`Pending`, naming the waiter) rather
    than fails.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Literal

from gpu_scheduling.constants import Exclusivity as Exclusivity
from gpu_scheduling.constants import Policy as Policy
from gpu_scheduling.constants import Strategy as Strategy
from gpu_scheduling.constants import TopologyMode as TopologyMode


@dataclasses.dataclass(frozen=True)
class Device:
    id: int
    island: str = "default"
    bandwidth_gbps: int = 0
    healthy: bool = True
    memory_total_mib: int = 0
    """0: not reported."""
    memory_used_mib: int = 0
    utilization_percent: int | None = None
    """None: not reported."""

    @property
    def memory_free_mib(self) -> int:
        return max(0, self.memory_total_mib - self.memory_used_mib)


@dataclasses.dataclass(frozen=True)
class Node:
    name: str
    devices: tuple[Device, ...]
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Holding:
    """GPUs of `node` held by one claim (or pod) with the given exclusivity."""

    node: str
    gpu_ids: tuple[int, ...]
    exclusivity: Exclusivity = "Exclusive"


@dataclasses.dataclass(frozen=True)
class Request:
    count: int
    policy: Policy = "contiguous"
    prefer_ids: tuple[int, ...] = ()
    exclusivity: Exclusivity = "Exclusive"
    match_labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    topology: TopologyMode = "Ignore"
    min_bandwidth_gbps: int = 0
    strategy: Strategy = "BestFit"
    min_memory_mib: int = 0


@dataclasses.dataclass(frozen=True)
class Allocation:
    node: str
    gpu_ids: tuple[int, ...]
    message: str = "allocated"
    strategy: Strategy = "BestFit"
    """The strategy that chose the node."""

    @property
    def allocated(self) -> str:
        return f"{self.node}:{','.join(map(str, self.gpu_ids))}"


@dataclasses.dataclass(frozen=True)
class NoFit:
    phase: Literal["Pending", "Failed"]
    message: str


Decision = Allocation | NoFit

Preference = Mapping[str, int] | Callable[[Sequence[str]], Mapping[str, int]]
"""The pod's preference for nodes (`allocate`'s `preference`): node -> score, or a function that gives the scores of
the nodes it is given."""


def _has_memory(d: Device, request: Request) -> bool:
    """Does `d` report its memory and have `request.min_memory_mib` free now? (Only asked when that is set.)"""
    return d.memory_total_mib > 0 and d.memory_free_mib >= request.min_memory_mib


def _capable(node: Node, request: Request) -> list[Device]:
    """Healthy GPUs of `node` large enough for the request if their memory were all free."""
    if request.min_memory_mib > 0:
        return [d for d in node.devices if d.healthy and d.memory_total_mib >= request.min_memory_mib]
    return [d for d in node.devices if d.healthy]


def _usable(node: Node, request: Request, holdings: Iterable[Holding]) -> list[Device]:
    """Healthy GPUs of `node` this request may take now, given the holdings on that node and free memory."""
    exclusive: set[int] = set()
    shared: set[int] = set()
    for h in holdings:
        (exclusive if h.exclusivity == "Exclusive" else shared).update(h.gpu_ids)
    blocked = exclusive | (shared if request.exclusivity == "Exclusive" else set())
    if request.min_memory_mib > 0:
        return [d for d in node.devices if d.healthy and d.id not in blocked and _has_memory(d, request)]
    return [d for d in node.devices if d.healthy and d.id not in blocked]


def _slack(request: Request) -> Callable[[Device], int] | None:
    """BestFit with `minMemoryMiB` takes the GPUs with the least free memory beyond it (so the large ones stay free
    for the requests that need them); None otherwise, and the policies take the lowest ids as they always did."""
    if request.strategy != "BestFit" or request.min_memory_mib <= 0:
        return None
    need = request.min_memory_mib
    return lambda d: d.memory_free_mib - need


def _topology_ok(devices: Sequence[Device], request: Request) -> bool:
    return len({d.island for d in devices}) == 1 and all(
        d.bandwidth_gbps >= request.min_bandwidth_gbps for d in devices
    )


def _islands(devices: Iterable[Device], request: Request, qualifying_only: bool) -> dict[str, list[Device]]:
    out: dict[str, list[Device]] = {}
    for d in sorted(devices, key=lambda d: d.id):
        if qualifying_only and d.bandwidth_gbps < request.min_bandwidth_gbps:
            continue
        out.setdefault(d.island, []).append(d)
    return out


def _lowest_run(
    devices: Sequence[Device], count: int, slack: Callable[[Device], int] | None = None
) -> list[Device] | None:
    """The lowest `count` devices with adjacent ids, if any; with `slack`, the run with the least total slack (the
    lowest of those)."""
    ordered = sorted(devices, key=lambda d: d.id)
    best: tuple[int, list[Device]] | None = None
    for start in range(len(ordered) - count + 1):
        window = ordered[start : start + count]
        if window[-1].id - window[0].id == count - 1:
            if slack is None:
                return window
            total = sum(map(slack, window))
            if best is None or total < best[0]:
                best = (total, window)
    return best[1] if best else None


def _lowest(devices: Sequence[Device], count: int, slack: Callable[[Device], int] | None) -> list[Device]:
    """The `count` lowest ids, or with `slack` the `count` devices with the least slack; in id order."""
    if slack is None:
        return sorted(devices, key=lambda d: d.id)[:count]
    return sorted(sorted(devices, key=lambda d: (slack(d), d.id))[:count], key=lambda d: d.id)


def _contiguous(
    free: Sequence[Device],
    request: Request,
    within_island: bool,
    qualifying_only: bool = True,
    slack: Callable[[Device], int] | None = None,
) -> list[Device] | None:
    count = request.count
    if within_island:
        # Prefer the island left fullest afterwards (packing), then the least memory slack, then the lowest ids.
        candidates = []
        for devs in _islands(free, request, qualifying_only=qualifying_only).values():
            if len(devs) >= count:
                chosen = _lowest_run(devs, count, slack) or _lowest(devs, count, slack)
                spare = sum(map(slack, chosen)) if slack is not None else 0
                candidates.append((len(devs) - count, spare, chosen[0].id, chosen))
        if candidates:
            return min(candidates, key=lambda c: c[:3])[3]
        return None
    if len(free) < count:
        return None
    return _lowest_run(free, count, slack) or _lowest(free, count, slack)


def _spread(free: Sequence[Device], request: Request, slack: Callable[[Device], int] | None) -> list[Device] | None:
    if len(free) < request.count:
        return None
    islands = sorted(_islands(free, request, qualifying_only=False).values(), key=lambda ds: (-len(ds), ds[0].id))
    if slack is not None:  # the same islands in the same order; within each, the GPUs with the least slack first
        islands = [sorted(ds, key=lambda d: (slack(d), d.id)) for ds in islands]
    chosen: list[Device] = []
    depth = 0
    while len(chosen) < request.count:
        for devs in islands:
            if depth < len(devs) and len(chosen) < request.count:
                chosen.append(devs[depth])
        depth += 1
    return chosen


def _pick(free: Sequence[Device], request: Request) -> tuple[list[Device], str] | None:
    """GPUs of one node for the request, with a note, or None when the node cannot serve it now."""
    want_island = request.topology != "Ignore"
    slack = _slack(request)
    if request.policy == "spread" and request.topology != "Required":
        chosen = _spread(free, request, slack)
        return (chosen, "spread across islands") if chosen else None
    if request.policy == "preferIds" and request.prefer_ids:
        by_id = {d.id: d for d in free}
        preferred = [by_id[i] for i in request.prefer_ids if i in by_id][: request.count]
        if len(preferred) == request.count and (request.topology != "Required" or _topology_ok(preferred, request)):
            return preferred, "preferred ids"
        rest = [d for d in free if d not in preferred]
        fill = (
            _contiguous(
                rest,
                dataclasses.replace(request, count=request.count - len(preferred)),
                within_island=False,
                slack=slack,
            )
            if len(preferred) < request.count
            else []
        )
        if fill is not None and len(preferred) + len(fill) == request.count:
            chosen = sorted(preferred + fill, key=lambda d: d.id)
            if request.topology != "Required" or _topology_ok(chosen, request):
                taken = [i for i in request.prefer_ids if i not in {d.id for d in preferred}]
                return chosen, f"preferred ids {taken} were taken; fell back"
    if want_island:
        chosen = _contiguous(free, request, within_island=True, slack=slack)
        if chosen:
            return chosen, "within one island"
        if request.topology == "Required":
            return None
        # Preferred: one slower island still beats crossing islands over PCIe.
        chosen = _contiguous(free, request, within_island=True, qualifying_only=False, slack=slack)
        if chosen:
            return chosen, f"within one island below {request.min_bandwidth_gbps} GB/s (preferred, not required)"
    chosen = _contiguous(free, request, within_island=False, slack=slack)
    if not chosen:
        return None
    if chosen[-1].id - chosen[0].id == len(chosen) - 1:
        return chosen, "contiguous ids"
    return chosen, "lowest free ids" if slack is None else "free ids with the least memory to spare"


def ever_fits(node: Node, request: Request) -> bool:
    """Could this node serve the request if nothing else held a GPU and all GPU memory were free?"""
    capable = _capable(node, request)
    if request.topology == "Required":
        return any(len(ds) >= request.count for ds in _islands(capable, request, qualifying_only=True).values())
    return len(capable) >= request.count


def _after(name: str, cursor: str | None) -> tuple[bool, str]:
    """RoundRobin's order: the names after `cursor` first, then the rest (wrapping around), each by name."""
    return (cursor is not None and name <= cursor, name)


# ---- the strategies: each one's score of a candidate node and how its message names the node --------------------


@dataclasses.dataclass(frozen=True)
class _Candidate:
    """A node that can serve the request now: its free GPUs, the GPUs the policy chose among them, and how many of
    its healthy GPUs are held (counted only where the strategy reads it)."""

    node: Node
    free: list[Device]
    chosen: list[Device]
    note: str
    allocated: int
    rank: int = 0
    """The pod's preference for the node (0 without one)."""


class _Scorer:
    """How one strategy ranks the candidate nodes: the lowest `score` wins (after the topology preference, which
    comes first for every strategy). `first` says which of several nodes alike but for their names stands for them
    (the one the strategy would choose); `reads_held` whether the number of held GPUs is part of a node's state."""

    reads_held = False

    def __init__(self, request: Request, cursor: str | None):
        self.request, self.cursor = request, cursor

    def first(self, name: str, other: str) -> bool:
        return name < other

    def score(self, c: _Candidate) -> tuple[object, ...]:
        raise NotImplementedError

    def where(self, c: _Candidate) -> str:
        return c.node.name


class _BestFit(_Scorer):
    """Packs: the node left with the fewest free GPUs, then the island left fullest, then (with `minMemoryMiB`)
    the least memory to spare, then the name."""

    def score(self, c: _Candidate) -> tuple[object, ...]:
        need = self.request.min_memory_mib
        island = c.chosen[0].island
        island_left = sum(1 for d in c.free if d.island == island) - sum(1 for d in c.chosen if d.island == island)
        spare = sum(d.memory_free_mib - need for d in c.chosen) if need > 0 else 0
        return (len(c.free) - len(c.chosen), island_left, spare, c.node.name)


class _LeastUtilized(_Scorer):
    """Spreads: the smallest share of healthy GPUs held, then the lowest mean utilization, then the name."""

    reads_held = True

    def score(self, c: _Candidate) -> tuple[object, ...]:
        size, utilization, _ = _load(c.node)
        return (c.allocated / size, utilization, c.node.name)

    def where(self, c: _Candidate) -> str:
        size, utilization, reported = _load(c.node)
        where = f"{c.node.name} (LeastUtilized: {c.allocated} of {size} GPUs allocated"
        return where + (f", {utilization:.0f}% mean utilization)" if reported else ")")


class _RoundRobin(_Scorer):
    """Rotates: the first node whose name sorts after the cursor, wrapping around to the lowest name."""

    def first(self, name: str, other: str) -> bool:
        return _after(name, self.cursor) < _after(other, self.cursor)

    def score(self, c: _Candidate) -> tuple[object, ...]:
        return _after(c.node.name, self.cursor)

    def where(self, c: _Candidate) -> str:
        cursor, name = self.cursor, c.node.name
        if cursor is None:
            return f"{name} (RoundRobin: first by name)"
        if name > cursor:
            return f"{name} (RoundRobin: next after {cursor})"
        return f"{name} (RoundRobin: wrapped around after {cursor})"


_SCORERS: dict[str, type[_Scorer]] = {"BestFit": _BestFit, "LeastUtilized": _LeastUtilized, "RoundRobin": _RoundRobin}


# ---- the steps --------------------------------------------------------------------------------------------------


def _describe(request: Request) -> str:
    """What the request asks for, as the messages say it."""
    what = f"{request.count} {request.exclusivity} GPU(s)"
    if request.min_memory_mib > 0:
        what += f" with >= {request.min_memory_mib} MiB free"
    if request.topology == "Required":
        what += f" in one NVLink island with >= {request.min_bandwidth_gbps} GB/s"
    return what


def _refused(request: Request, nodes: list[Node]) -> NoFit | None:
    """Filter: a request no node could serve (MIG, no GPUs), or no node at all. A NoFit ends the decision."""
    if request.exclusivity == "MIG":
        return NoFit("Failed", "MIG is not supported: use Exclusive or Shared")
    if request.count < 1:
        return NoFit("Failed", f"devices.count must be at least 1, got {request.count}")
    if not nodes:
        return NoFit("Pending", "no node with a GPU inventory can take the pod")
    return None


def _never(request: Request, candidates: list[Node], what: str) -> NoFit | None:
    """Filter: no candidate could ever serve the request, even with every GPU free: it fails rather than waits."""
    if any(ever_fits(n, request) for n in candidates):
        return None
    need = request.min_memory_mib
    largest = max(len(_capable(n, request)) for n in candidates)
    if need <= 0:
        return NoFit("Failed", f"no node can ever provide {what} (largest node has {largest} healthy GPUs)")
    unreported = any(d.healthy and d.memory_total_mib <= 0 for n in candidates for d in n.devices)
    return NoFit(
        "Failed",
        f"no node can ever provide {what} (largest node has {largest} healthy GPUs with >= {need} MiB of memory"
        + ("; GPUs that report no memory are never offered" if unreported else "")
        + ")",
    )


def _free_now(
    request: Request,
    candidates: list[Node],
    held: Callable[[str], Sequence[Holding]],
    scorer: _Scorer,
    kept: Mapping[str, str] | None,
    preference: Preference | None = None,
    admits: Callable[[str], bool] | None = None,
) -> tuple[list[tuple[Node, list[Device], int, int]], list[tuple[str, Node]]]:
    """Filter: the candidates with enough free GPUs now (and that `admits`, asked last), one per distinct state; and
    the reserved nodes with their waiters, asked only when no other node can serve.

    Nodes with the same devices and the same free ids are alike except for their names, and the name is the last
    tie-break: so the policy picks once per distinct state, for the node the strategy would name first. In a
    cluster of identical nodes only a handful of states exist, which keeps a claim at a few microseconds per node.
    A strategy that reads how many GPUs are held has that in its state; utilization and memory are in the devices.
    So has the pod's `preference` for the node (0 without one; a function is asked once, naming the nodes found
    free, and the states are made after). (States are told apart by the identity of the devices tuple; callers that
    share one tuple between nodes with equal devices get the most from this, and different tuples with equal
    devices are merely not merged.)

    `admits` (the pod's other rules: scheduler.claims) is asked only of a node that would stand for its state, the
    first by the strategy's order so far: in a cluster of few states that is a few nodes per pod, not every node, and
    the outcome is the one the candidates that it admits would give."""
    need, count = request.min_memory_mib, request.count
    waiting: list[tuple[str, Node]] = []
    states: dict[tuple[int, tuple[int, ...], int, int], tuple[Node, list[Device], int, int]] = {}
    ranks = preference if isinstance(preference, Mapping) else None
    found: list[tuple[Node, list[Device], int, tuple[int, tuple[int, ...], int]]] | None = (
        [] if callable(preference) else None
    )
    healthy: dict[int, tuple[list[Device], tuple[int, ...]]] = {}
    for node in candidates:
        name = node.name
        if kept is not None and name in kept:
            waiting.append((kept[name], node))
            continue
        on_node = held(name)
        if on_node:
            free = _usable(node, request, on_node)
            if len(free) < count:
                continue
            ids = tuple(d.id for d in free)
        else:
            cached = healthy.get(id(node.devices))
            if cached is None:
                devs = (
                    [d for d in node.devices if d.healthy and _has_memory(d, request)]
                    if need > 0
                    else [d for d in node.devices if d.healthy]
                )
                cached = healthy[id(node.devices)] = (devs, tuple(d.id for d in devs))
            free, ids = cached
            if len(free) < count:
                continue
        allocated = _held_count(node, on_node) if scorer.reads_held and on_node else 0
        if found is not None:
            if admits is None or admits(name):
                found.append((node, free, allocated, (id(node.devices), ids, allocated)))
            continue
        rank = ranks.get(name, 0) if ranks else 0
        state = (id(node.devices), ids, allocated, rank)
        seen = states.get(state)
        if (seen is None or scorer.first(name, seen[0].name)) and (admits is None or admits(name)):
            states[state] = (node, free, allocated, rank)
    if found and callable(preference):
        ranks = preference([node.name for node, *_ in found])
        for node, free, allocated, alike in found:
            rank = ranks.get(node.name, 0)
            seen = states.get((*alike, rank))
            if seen is None or scorer.first(node.name, seen[0].name):
                states[(*alike, rank)] = (node, free, allocated, rank)
    return list(states.values()), waiting


IndexKind = tuple[Exclusivity, int, bool]
"""What of a request a FreeIndex's groups depend on: the exclusivity, the minimum free memory, and whether the
strategy reads how many GPUs are held."""


class FreeIndex:
    """`_free_now` kept up to date instead of worked out for each claim: the nodes of one inventory grouped by their
    state of free GPUs for requests of one kind (`kind`: the exclusivity, the minimum free memory, whether the
    strategy reads how many GPUs are held), each group's names sorted. `update` re-reads only the nodes it is told
    changed (Ledger.changed_since), so that a claim costs O(states + changes) instead of O(nodes).

    `allocate` reads it for a claim of its kind with no selector and no preference: the states and the reserved
    nodes are those `_free_now` gives for the same nodes and `held`, the first node of each group by the strategy's
    order standing for it (past the reserved ones and those `admits` refuses)."""

    def __init__(self, nodes: Sequence[Node], held: Callable[[str], Sequence[Holding]], kind: IndexKind):
        self.nodes = nodes
        """The inventory it was built for (a caller keeps one index per inventory list)."""
        self.kind = kind
        exclusivity, need, self._reads_held = kind
        self._request = Request(1, exclusivity=exclusivity, min_memory_mib=need)
        self._held = held
        self._by_name = {n.name: n for n in nodes}
        self.usable = len(self._by_name) == len(nodes)
        """False when two nodes share a name: `_free_now` would weigh both, so the index is not used."""
        self._state: dict[str, tuple[int, tuple[int, ...], int]] = {}
        self._groups: dict[tuple[int, tuple[int, ...], int], tuple[list[Device], list[str]]] = {}
        for node in nodes:
            self._place(node, sort=False)
        for _, names in self._groups.values():
            names.sort()

    @staticmethod
    def kind_of(request: Request) -> IndexKind:
        """What of a request the groups depend on."""
        reads_held = _SCORERS.get(request.strategy, _BestFit).reads_held
        return (request.exclusivity, request.min_memory_mib, reads_held)

    def update(self, changed: Iterable[str]) -> None:
        """Re-read the nodes named in `changed` (others are ignored)."""
        for name in set(changed):
            node = self._by_name.get(name)
            if node is not None:
                self._place(node, sort=True)

    def _place(self, node: Node, *, sort: bool) -> None:
        name = node.name
        on_node = self._held(name)
        free = _usable(node, self._request, on_node)
        allocated = _held_count(node, on_node) if self._reads_held and on_node else 0
        state = (id(node.devices), tuple(d.id for d in free), allocated)
        old = self._state.get(name)
        if old == state:
            return
        if old is not None:
            names = self._groups[old][1]
            del names[bisect.bisect_left(names, name)]
            if not names:
                del self._groups[old]
        self._state[name] = state
        group = self._groups.get(state)
        if group is None:
            self._groups[state] = (free, [name])
        elif sort:
            bisect.insort(group[1], name)
        else:
            group[1].append(name)

    def states(
        self,
        count: int,
        cursor: str | None,
        kept: Mapping[str, str] | None,
        admits: Callable[[str], bool] | None,
    ) -> tuple[list[tuple[Node, list[Device], int, int]], list[tuple[str, Node]]]:
        """`_free_now`'s answer for a request of `count` GPUs: per group with enough free GPUs, its first node by
        the strategy's order (names after `cursor` first, wrapping around, where one is given: RoundRobin) that is
        not kept and that `admits`; and the kept nodes with their waiters."""
        states = []
        for (_, ids, allocated), (free, names) in self._groups.items():
            if len(ids) < count:
                continue
            start = bisect.bisect_right(names, cursor) if cursor is not None else 0
            for i in range(start, start + len(names)):
                name = names[i % len(names)]
                if kept is not None and name in kept:
                    continue
                if admits is None or admits(name):
                    states.append((self._by_name[name], free, allocated, 0))
                    break
        waiting = [(waiter, self._by_name[name]) for name, waiter in (kept or {}).items() if name in self._by_name]
        return states, waiting


def _best(request: Request, states: list[tuple[Node, list[Device], int, int]], scorer: _Scorer) -> _Candidate | None:
    """Score: the policy picks GPUs on each state's node; a node that satisfies the topology preference wins, then
    the pod's preference for the node, then the strategy's score."""
    best: tuple[tuple[object, ...], _Candidate] | None = None
    for node, free, allocated, rank in states:
        picked = _pick(free, request)
        if picked is None:
            continue
        candidate = _Candidate(node, free, *picked, allocated, rank)
        topology_miss = 0 if request.topology == "Ignore" or _topology_ok(candidate.chosen, request) else 1
        key = (topology_miss, -rank, *scorer.score(candidate))
        if best is None or key < best[0]:
            best = (key, candidate)
    return best[1] if best else None


def _busy(
    request: Request, waiting: list[tuple[str, Node]], held: Callable[[str], Sequence[Holding]], what: str
) -> NoFit:
    """No node can serve the request now: it waits, naming the lowest-named reserved node that could serve it and
    its waiter, if any."""
    named: tuple[str, str] | None = None
    for waiter, node in waiting:
        if named is not None and node.name >= named[0]:
            continue
        free = _usable(node, request, held(node.name))
        if len(free) >= request.count and _pick(free, request) is not None:
            named = (node.name, waiter)
    if named is not None:
        return NoFit("Pending", f"waiting for {what}: {named[0]} is kept for {named[1]}, which waits for it")
    return NoFit("Pending", f"waiting for {what}: every matching node is busy")


def allocate(
    request: Request,
    nodes: Iterable[Node],
    holdings: Iterable[Holding] = (),
    held: Callable[[str], Sequence[Holding]] | None = None,
    *,
    cursor: str | None = None,
    reserved: Mapping[str, str] | None = None,
    preference: Preference | None = None,
    admits: Callable[[str], bool] | None = None,
    index: FreeIndex | None = None,
) -> Decision:
    """`holdings`: every GPU held anywhere; or `held(node)`: what is held on one node (the GPU ledger's view,
    so a claim costs O(nodes) whatever the number of holdings). `cursor`: the node RoundRobin chose last (it need
    not exist any more). `reserved`: node -> the higher-priority pod it is kept for (priority.Reservations).
    `preference`: the pod's preference for nodes (the higher the better; a node it does not name: 0), which ranks
    them after the topology preference and before the strategy: node -> score, or a function of the names of the
    nodes that can take the request now (asked once: kube-scheduler scores only the nodes that pass every filter)
    that gives them. None, or the same score for every node, leaves the choice to the strategy. `admits`: whether
    the pod may go to a node by rules the allocator does not know (None: it may go to any), asked lazily (`_free_now`):
    an Allocation is the one that `nodes` filtered by it would give. A NoFit is not: its reasons count every node,
    so a caller that wants them says them from the filtered nodes. `index`: a FreeIndex of `nodes` (the same list)
    up to date with `held`, read instead of every node where it serves the claim (of its kind, no selector, no
    preference); the decision is the same.

    Filter steps (the request, the selector, ever fits, free now), then score steps (the policy's GPUs on each
    node, the topology preference, the pod's preference, the strategy's score)."""
    if held is None:
        by_node: dict[str, list[Holding]] = {}
        for h in holdings:
            by_node.setdefault(h.node, []).append(h)
        held = lambda node: by_node.get(node, ())  # noqa: E731
    nodes = nodes if isinstance(nodes, list) else list(nodes)
    what = _describe(request)
    refused = _refused(request, nodes)
    if refused is not None:
        return refused
    selector = request.match_labels.items()
    candidates = [n for n in nodes if all(n.labels.get(k) == v for k, v in selector)] if selector else nodes
    if not candidates:
        return NoFit(
            "Pending",
            f"none of the {len(nodes)} nodes with a GPU inventory matches selector {dict(request.match_labels)}",
        )
    never = _never(request, candidates, what)
    if never is not None:
        return never
    scorer = _SCORERS.get(request.strategy, _BestFit)(request, cursor or None)
    if (
        index is not None
        and index.usable
        and index.nodes is nodes
        and index.kind == FreeIndex.kind_of(request)
        and not request.match_labels
        and preference is None
    ):
        cursor_order = cursor or None if request.strategy == "RoundRobin" else None
        states, waiting = index.states(request.count, cursor_order, reserved or None, admits)
    else:
        states, waiting = _free_now(request, candidates, held, scorer, reserved or None, preference, admits)
    best = _best(request, states, scorer)
    if best is None:
        return _busy(request, waiting, held, what)
    ranked = f"; the pod's preferred rules score it {best.rank}" if len({s[3] for s in states}) > 1 else ""
    return Allocation(
        best.node.name,
        tuple(d.id for d in best.chosen),
        f"allocated {what} on {scorer.where(best)}: {best.note}{ranked}",
        request.strategy,
    )


def _held_count(node: Node, holdings: Iterable[Holding]) -> int:
    """How many healthy GPUs of `node` someone holds (Exclusive or Shared)."""
    held = {i for h in holdings for i in h.gpu_ids}
    return sum(1 for d in node.devices if d.healthy and d.id in held)


def _load(node: Node) -> tuple[int, float, bool]:
    """LeastUtilized's reading of a node: its healthy GPUs, their mean utilization (unreported counts as idle) and
    whether any reports one."""
    healthy = [d for d in node.devices if d.healthy]
    reported = [d.utilization_percent for d in healthy if d.utilization_percent is not None]
    return len(healthy), sum(reported) / len(healthy) if healthy else 0.0, bool(reported)
