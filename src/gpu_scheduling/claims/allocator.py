"""Choose a node and GPU ids for one GpuClaim. Pure: plain data in, a decision out, no Kubernetes client.

Inputs are the claim's request, every node's inventory (GPU ids, health, NVLink island, bandwidth) and the GPUs
already held by other claims. The output is an :class:`Allocation`, or a :class:`NoFit` whose phase says whether
waiting can help (`Pending`: GPUs are busy now) or not (`Failed`: no node could ever satisfy the request).

Rules
  * Unhealthy GPUs are never allocated; `selector.matchLabels` filters the nodes.
  * Exclusive GPUs are never shared; Shared GPUs are shared only with other Shared claims; MIG is refused.
  * Topology `Required`: all GPUs in one island whose bandwidth meets `minBandwidthGBps`. `Preferred`: such an
    allocation wins over any other; failing that, one island below the bandwidth; failing that, any GPUs.
    `Ignore`: islands play no part.
  * Within a node, `contiguous` takes the lowest run of adjacent ids (inside one island when it can),
    `spread` takes GPUs round-robin across islands, `preferIds` takes the preferred ids that are free and fills
    up like `contiguous` (the message says so).
  * Among feasible nodes the allocator packs, to keep whole nodes and whole islands free for large claims:
    it picks the node that satisfies the topology preference, then the one left with the fewest free GPUs, then
    the one whose chosen island is left with the fewest free GPUs, then the node name (deterministic).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Literal

Policy = Literal["contiguous", "spread", "preferIds"]
Exclusivity = Literal["Exclusive", "Shared", "MIG"]
TopologyMode = Literal["Required", "Preferred", "Ignore"]
Strategy = Literal["BestFit", "LeastUtilized", "RoundRobin"]


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

    @property
    def allocated(self) -> str:
        return f"{self.node}:{','.join(map(str, self.gpu_ids))}"


@dataclasses.dataclass(frozen=True)
class NoFit:
    phase: Literal["Pending", "Failed"]
    message: str


Decision = Allocation | NoFit


def _usable(node: Node, request: Request, holdings: Iterable[Holding]) -> list[Device]:
    """Healthy GPUs of `node` this request may take now, given the holdings on that node."""
    exclusive: set[int] = set()
    shared: set[int] = set()
    for h in holdings:
        (exclusive if h.exclusivity == "Exclusive" else shared).update(h.gpu_ids)
    blocked = exclusive | (shared if request.exclusivity == "Exclusive" else set())
    return [d for d in node.devices if d.healthy and d.id not in blocked]


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


def _lowest_run(devices: Sequence[Device], count: int) -> list[Device] | None:
    """The lowest `count` devices with adjacent ids, if any."""
    ordered = sorted(devices, key=lambda d: d.id)
    for start in range(len(ordered) - count + 1):
        window = ordered[start : start + count]
        if window[-1].id - window[0].id == count - 1:
            return window
    return None


def _contiguous(
    free: Sequence[Device], request: Request, within_island: bool, qualifying_only: bool = True
) -> list[Device] | None:
    count = request.count
    if within_island:
        # Prefer the island left fullest afterwards (packing), then the lowest ids.
        candidates = []
        for devs in _islands(free, request, qualifying_only=qualifying_only).values():
            if len(devs) >= count:
                chosen = _lowest_run(devs, count) or devs[:count]
                candidates.append((len(devs) - count, chosen[0].id, chosen))
        if candidates:
            return min(candidates, key=lambda c: (c[0], c[1]))[2]
        return None
    if len(free) < count:
        return None
    return _lowest_run(free, count) or sorted(free, key=lambda d: d.id)[:count]


def _spread(free: Sequence[Device], request: Request) -> list[Device] | None:
    if len(free) < request.count:
        return None
    islands = sorted(_islands(free, request, qualifying_only=False).values(), key=lambda ds: (-len(ds), ds[0].id))
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
    if request.policy == "spread" and request.topology != "Required":
        chosen = _spread(free, request)
        return (chosen, "spread across islands") if chosen else None
    if request.policy == "preferIds" and request.prefer_ids:
        by_id = {d.id: d for d in free}
        preferred = [by_id[i] for i in request.prefer_ids if i in by_id][: request.count]
        if len(preferred) == request.count and (request.topology != "Required" or _topology_ok(preferred, request)):
            return preferred, "preferred ids"
        rest = [d for d in free if d not in preferred]
        fill = (
            _contiguous(rest, dataclasses.replace(request, count=request.count - len(preferred)), within_island=False)
            if len(preferred) < request.count
            else []
        )
        if fill is not None and len(preferred) + len(fill) == request.count:
            chosen = sorted(preferred + fill, key=lambda d: d.id)
            if request.topology != "Required" or _topology_ok(chosen, request):
                taken = [i for i in request.prefer_ids if i not in {d.id for d in preferred}]
                return chosen, f"preferred ids {taken} were taken; fell back"
    if want_island:
        chosen = _contiguous(free, request, within_island=True)
        if chosen:
            return chosen, "within one island"
        if request.topology == "Required":
            return None
        # Preferred: one slower island still beats crossing islands over PCIe.
        chosen = _contiguous(free, request, within_island=True, qualifying_only=False)
        if chosen:
            return chosen, f"within one island below {request.min_bandwidth_gbps} GB/s (preferred, not required)"
    chosen = _contiguous(free, request, within_island=False)
    return (
        (chosen, "contiguous ids" if chosen and chosen[-1].id - chosen[0].id == len(chosen) - 1 else "lowest free ids")
        if chosen
        else None
    )


def _ever_fits(node: Node, request: Request) -> bool:
    """Could this node serve the request if nothing else held a GPU?"""
    healthy = [d for d in node.devices if d.healthy]
    if request.topology == "Required":
        return any(len(ds) >= request.count for ds in _islands(healthy, request, qualifying_only=True).values())
    return len(healthy) >= request.count


def allocate(
    request: Request,
    nodes: Iterable[Node],
    holdings: Iterable[Holding] = (),
    held: Callable[[str], Sequence[Holding]] | None = None,
) -> Decision:
    """`holdings`: every GPU held anywhere; or `held(node)`: what is held on one node (the GPU ledger's view,
    so a claim costs O(nodes) whatever the number of holdings)."""
    if request.exclusivity == "MIG":
        return NoFit("Failed", "MIG is not supported: use Exclusive or Shared")
    if request.count < 1:
        return NoFit("Failed", f"devices.count must be at least 1, got {request.count}")
    if held is None:
        by_node: dict[str, list[Holding]] = {}
        for h in holdings:
            by_node.setdefault(h.node, []).append(h)
        held = lambda node: by_node.get(node, ())  # noqa: E731
    nodes = list(nodes)
    if not nodes:
        return NoFit("Pending", "no node with a GPU inventory can take the pod")
    candidates = [n for n in nodes if all(n.labels.get(k) == v for k, v in request.match_labels.items())]
    if not candidates:
        return NoFit(
            "Pending",
            f"none of the {len(nodes)} nodes with a GPU inventory matches selector {dict(request.match_labels)}",
        )
    what = f"{request.count} {request.exclusivity} GPU(s)"
    if request.topology == "Required":
        what += f" in one NVLink island with >= {request.min_bandwidth_gbps} GB/s"
    if not any(_ever_fits(n, request) for n in candidates):
        largest = max(len([d for d in n.devices if d.healthy]) for n in candidates)
        return NoFit("Failed", f"no node can ever provide {what} (largest node has {largest} healthy GPUs)")

    # Nodes with the same devices and the same free ids are alike except for their names, and the name is the
    # last tie-break: so pick once per distinct state, for its lowest-named node. In a cluster of identical
    # nodes only a handful of states exist, which keeps a claim at a few microseconds per node.
    # (States are told apart by the identity of the devices tuple; callers that share one tuple between nodes
    # with equal devices get the most from this, and different tuples with equal devices are merely not merged.)
    states: dict[tuple[int, tuple[int, ...]], tuple[str, list[Device]]] = {}
    healthy: dict[int, list[Device]] = {}
    for node in candidates:
        on_node = held(node.name)
        if on_node:
            free = _usable(node, request, on_node)
        else:
            cached = healthy.get(id(node.devices))
            if cached is None:
                cached = healthy[id(node.devices)] = [d for d in node.devices if d.healthy]
            free = cached
        if len(free) < request.count:
            continue
        state = (id(node.devices), tuple(d.id for d in free))
        seen = states.get(state)
        if seen is None or node.name < seen[0]:
            states[state] = (node.name, free)
    best: tuple[tuple[int, int, int, str], Allocation] | None = None
    for name, free in states.values():
        picked = _pick(free, request)
        if picked is None:
            continue
        chosen, note = picked
        topology_miss = 0 if request.topology == "Ignore" or _topology_ok(chosen, request) else 1
        island = chosen[0].island
        island_left = sum(1 for d in free if d.island == island) - sum(1 for d in chosen if d.island == island)
        key = (topology_miss, len(free) - len(chosen), island_left, name)
        if best is None or key < best[0]:
            best = (key, Allocation(name, tuple(d.id for d in chosen), f"allocated {what} on {name}: {note}"))
    if best is None:
        return NoFit("Pending", f"waiting for {what}: every matching node is busy")
    return best[1]
