"""Node strategies, memory and reservations in the allocator: tables where BestFit, LeastUtilized and RoundRobin
choose differently on the same cluster, and properties checked against a brute force over random clusters."""

from __future__ import annotations

import dataclasses

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from gpu_scheduling.claims.allocator import Allocation, Device, Holding, Node, NoFit, Request, allocate

GIB = 1024


def dgx(name: str, utilization: int | None = None, memory_gib: int = 0, used_gib=(0,) * 8, labels=None) -> Node:
    """8 GPUs in two NVLink islands of four."""
    return Node(
        name,
        tuple(
            Device(i, f"nvlink-group-{i // 4}", 600, True, memory_gib * GIB, used_gib[i] * GIB, utilization)
            for i in range(8)
        ),
        labels or {},
    )


def held(node: str, *ids: int, exclusivity: str = "Exclusive") -> Holding:
    return Holding(node, ids, exclusivity)


# a: 6 of 8 held; b, c: 2 held, b busier than c; d: nothing held but the busiest.
CLUSTER = [dgx("a", 70), dgx("b", 50), dgx("c", 10), dgx("d", 90)]
HOLDINGS = [held("a", 0, 1, 2, 3, 4, 5), held("b", 0, 1), held("c", 0, 1)]


@pytest.mark.parametrize(
    ("strategy", "cursor", "nodes", "expected"),
    [
        ("BestFit", None, "abcd", "a"),  # the fullest
        ("LeastUtilized", None, "abcd", "d"),  # the emptiest, though the busiest
        ("LeastUtilized", None, "abc", "c"),  # b and c are as full: the less utilized
        ("RoundRobin", None, "abcd", "a"),
        ("RoundRobin", "a", "abcd", "b"),
        ("RoundRobin", "c", "abcd", "d"),
        ("RoundRobin", "d", "abcd", "a"),  # wraps around
        ("RoundRobin", "bb", "abcd", "c"),  # the cursor's node is gone: the next name after it
        ("RoundRobin", "zz", "abcd", "a"),
        ("RoundRobin", "", "abcd", "a"),
    ],
)
def test_the_strategies_choose_differently(strategy, cursor, nodes, expected):
    cluster = [n for n in CLUSTER if n.name in nodes]
    d = allocate(Request(1, strategy=strategy), cluster, HOLDINGS, cursor=cursor)
    assert isinstance(d, Allocation) and d.node == expected and d.strategy == strategy


def test_the_messages_name_the_strategy():
    best = allocate(Request(1), CLUSTER, HOLDINGS)
    assert best.message == "allocated 1 Exclusive GPU(s) on a: contiguous ids"
    spread = allocate(Request(1, strategy="LeastUtilized"), CLUSTER, HOLDINGS)
    assert spread.message == (
        "allocated 1 Exclusive GPU(s) on d (LeastUtilized: 0 of 8 GPUs allocated, 90% mean utilization): contiguous ids"
    )
    unmeasured = allocate(Request(1, strategy="LeastUtilized"), [dgx("e")])
    assert (
        unmeasured.message == "allocated 1 Exclusive GPU(s) on e (LeastUtilized: 0 of 8 GPUs allocated): contiguous ids"
    )
    messages = [
        allocate(Request(1, strategy="RoundRobin"), CLUSTER, HOLDINGS, cursor=c).message for c in (None, "a", "d")
    ]
    assert messages == [
        "allocated 1 Exclusive GPU(s) on a (RoundRobin: first by name): contiguous ids",
        "allocated 1 Exclusive GPU(s) on b (RoundRobin: next after a): contiguous ids",
        "allocated 1 Exclusive GPU(s) on a (RoundRobin: wrapped around after d): contiguous ids",
    ]


def test_round_robin_skips_the_nodes_that_cannot_serve_now():
    d = allocate(Request(4, strategy="RoundRobin"), CLUSTER, HOLDINGS, cursor="d")
    assert d.node == "b"  # a has only 2 free


def test_least_utilized_counts_shared_holders_and_only_healthy_gpus():
    sick = Node("a", tuple(Device(i, healthy=i < 4) for i in range(8)))  # 1 of 4 healthy held: 25%
    whole = Node("b", tuple(Device(i) for i in range(8)))  # 3 of 8 held (shared): 37.5%
    holdings = [held("a", 0), held("a", 5), held("b", 0, 1, 2, exclusivity="Shared")]
    d = allocate(Request(1, exclusivity="Shared", strategy="LeastUtilized"), [sick, whole], holdings)
    assert d.node == "a" and "1 of 4 GPUs allocated" in d.message


@pytest.mark.parametrize("strategy", ["BestFit", "LeastUtilized", "RoundRobin"])
def test_a_node_that_meets_the_topology_preference_wins_under_every_strategy(strategy):
    holdings = [held("x", 0, 4), held("y", 4, 5, 6)]  # x cannot give 4 in one island; y can, and is fuller
    request = Request(4, topology="Preferred", min_bandwidth_gbps=600, strategy=strategy)
    d = allocate(request, [dgx("x"), dgx("y")], holdings, cursor="w")
    assert d.node == "y" and d.gpu_ids == (0, 1, 2, 3)


# ---- memory ----------------------------------------------------------------------------------------------------


def test_min_memory_offers_only_gpus_with_enough_free():
    node = dgx("a", memory_gib=80, used_gib=(60, 60, 60, 60, 60, 60, 0, 0))
    assert allocate(Request(2, min_memory_mib=40 * GIB), [node]).gpu_ids == (6, 7)
    d = allocate(Request(3, min_memory_mib=40 * GIB), [node])
    assert d == NoFit("Pending", "waiting for 3 Exclusive GPU(s) with >= 40960 MiB free: every matching node is busy")


def test_best_fit_takes_the_gpus_with_just_enough_memory():
    # free: 80 80 80 80 | 41 41 80 45 GiB
    node = dgx("a", memory_gib=80, used_gib=(0, 0, 0, 0, 39, 39, 0, 35))
    assert allocate(Request(1, min_memory_mib=40 * GIB), [node]).gpu_ids == (4,)
    assert allocate(Request(2, min_memory_mib=40 * GIB), [node]).gpu_ids == (4, 5)
    assert allocate(Request(3, min_memory_mib=40 * GIB), [node]).gpu_ids == (3, 4, 5)  # the run with least slack
    spread = allocate(Request(2, policy="spread", min_memory_mib=40 * GIB), [node])
    assert spread.gpu_ids == (0, 4)  # still one per island; in each, the tightest
    prefer = allocate(Request(2, policy="preferIds", prefer_ids=(0,), min_memory_mib=40 * GIB), [node])
    assert prefer.gpu_ids == (0, 4)  # the preferred id is kept, the rest is the tightest
    # LeastUtilized and RoundRobin leave the ids to the policy, as without memory.
    assert allocate(Request(1, min_memory_mib=40 * GIB, strategy="LeastUtilized"), [node]).gpu_ids == (0,)
    # Without minMemoryMiB nothing changes.
    assert allocate(Request(2), [node]).gpu_ids == (0, 1)


def test_best_fit_prefers_the_node_with_the_smaller_gpus_after_packing():
    small, large = dgx("b", memory_gib=48), dgx("a", memory_gib=80)
    assert allocate(Request(1, min_memory_mib=40 * GIB), [large, small]).node == "b"
    # Packing still comes first: a fuller node wins even with larger GPUs.
    assert allocate(Request(1, min_memory_mib=40 * GIB), [large, small], [held("a", 0)]).node == "a"


def test_no_gpu_large_enough_is_failed_and_says_what_was_asked():
    d = allocate(Request(1, min_memory_mib=40 * GIB), [dgx("a", memory_gib=24), dgx("b", memory_gib=16)])
    assert d == NoFit(
        "Failed",
        "no node can ever provide 1 Exclusive GPU(s) with >= 40960 MiB free "
        "(largest node has 0 healthy GPUs with >= 40960 MiB of memory)",
    )
    mixed = Node("c", tuple(Device(i, memory_total_mib=(80 if i < 2 else 24) * GIB) for i in range(8)))
    d = allocate(Request(3, min_memory_mib=40 * GIB), [mixed])
    assert isinstance(d, NoFit) and d.phase == "Failed" and "largest node has 2 healthy GPUs" in d.message


def test_gpus_that_report_no_memory_are_never_offered():
    d = allocate(Request(1, min_memory_mib=1), [dgx("a")])
    assert isinstance(d, NoFit) and d.phase == "Failed"
    assert "GPUs that report no memory are never offered" in d.message
    partly = Node("a", tuple(Device(i, memory_total_mib=80 * GIB if i == 5 else 0) for i in range(8)))
    assert allocate(Request(1, min_memory_mib=1), [partly]).gpu_ids == (5,)
    assert allocate(Request(1), [partly]).gpu_ids == (0,)  # without minMemoryMiB memory plays no part


# ---- reservations --------------------------------------------------------------------------------------------------

KEPT = {"a": "ns/big (priority 1000)"}


@pytest.mark.parametrize("strategy", ["BestFit", "LeastUtilized", "RoundRobin"])
def test_a_reserved_node_is_never_chosen(strategy):
    # BestFit and RoundRobin would take a (the fuller; the first by name), LeastUtilized b anyway.
    d = allocate(Request(1, strategy=strategy), [dgx("a"), dgx("b")], [held("a", 0)], reserved=KEPT)
    assert d.node == "b"
    d = allocate(Request(1, strategy=strategy), [dgx("a"), dgx("b")], [held("b", *range(8))], reserved=KEPT)
    assert d == NoFit(
        "Pending", "waiting for 1 Exclusive GPU(s): a is kept for ns/big (priority 1000), which waits for it"
    )


def test_a_request_only_reserved_nodes_could_serve_waits_rather_than_fails():
    d = allocate(Request(8), [dgx("a"), Node("b", tuple(Device(i) for i in range(4)))], reserved=KEPT)
    assert d.phase == "Pending" and "a is kept for ns/big" in d.message
    busy = allocate(Request(8), [dgx("a")], [held("a", 0)], reserved=KEPT)
    assert busy == NoFit("Pending", "waiting for 8 Exclusive GPU(s): every matching node is busy")
    never = allocate(Request(9), [dgx("a")], reserved=KEPT)
    assert isinstance(never, NoFit) and never.phase == "Failed"


def test_a_reserved_node_the_selector_excludes_is_not_named():
    nodes = [dgx("a", labels={"t": "x"}), dgx("b", labels={"t": "y"})]
    d = allocate(Request(1, match_labels={"t": "y"}), nodes, [held("b", *range(8))], reserved=KEPT)
    assert d == NoFit("Pending", "waiting for 1 Exclusive GPU(s): every matching node is busy")


# ---- properties ----------------------------------------------------------------------------------------------------

NAMES = ["n0", "n1", "n2", "n3", "n4"]


@st.composite
def devices(draw) -> tuple[Device, ...]:
    size = draw(st.sampled_from([1, 2, 4, 8, 8]))
    out = []
    for i in range(size):
        total = draw(st.sampled_from([0, 16 * GIB, 40 * GIB, 80 * GIB, 80 * GIB]))
        out.append(
            Device(
                i,
                draw(st.sampled_from(["g0", "g1"])),
                draw(st.sampled_from([64, 600])),
                draw(st.sampled_from([True, True, True, False])),
                total,
                draw(st.sampled_from([0, 0, total // 4, total // 2, total])),
                draw(st.none() | st.integers(0, 100)),
            )
        )
    return tuple(out)


@st.composite
def clusters(draw) -> list[Node]:
    """1-5 nodes; some share one devices tuple, as the scheduler's inventory does for equal nodes."""
    templates = draw(st.lists(devices(), min_size=1, max_size=3))
    count = draw(st.integers(2, 5))
    return [
        Node(name, draw(st.sampled_from(templates)), {"zone": draw(st.sampled_from(["a", "b"]))})
        for name in draw(st.permutations(NAMES))[:count]
    ]


@st.composite
def holdings_on(draw, nodes: list[Node]) -> list[Holding]:
    out = []
    for node in nodes:
        ids = [d.id for d in node.devices]
        for _ in range(draw(st.integers(0, 2))):
            chosen = draw(st.lists(st.sampled_from(ids), min_size=1, max_size=3, unique=True))
            out.append(Holding(node.name, tuple(chosen), draw(st.sampled_from(["Exclusive", "Shared"]))))
    return out


requests = st.builds(
    Request,
    count=st.sampled_from([1, 1, 1, 2, 2, 3, 4, 8]),
    policy=st.sampled_from(["contiguous", "spread", "preferIds"]),
    prefer_ids=st.lists(st.integers(0, 7), max_size=4, unique=True).map(tuple),
    exclusivity=st.sampled_from(["Exclusive", "Shared"]),
    match_labels=st.sampled_from([{}, {}, {"zone": "a"}]),
    topology=st.sampled_from(["Required", "Preferred", "Ignore", "Ignore"]),
    min_bandwidth_gbps=st.sampled_from([0, 300, 600]),
    strategy=st.sampled_from(["BestFit", "LeastUtilized", "RoundRobin"]),
    min_memory_mib=st.sampled_from([0, 0, 0, 8 * GIB, 40 * GIB]),
)
cursors = st.none() | st.sampled_from([*NAMES, "", "n2a", "zz"])


@st.composite
def situations(draw):
    nodes = draw(clusters())
    holdings = draw(holdings_on(nodes))
    kept = draw(st.sets(st.sampled_from([n.name for n in nodes])))
    reserved = {name: f"ns/w-{name} (priority 9)" for name in kept}
    return nodes, holdings, draw(requests), draw(cursors), reserved


def matches(node: Node, request: Request) -> bool:
    return all(node.labels.get(k) == v for k, v in request.match_labels.items())


def free_now(node: Node, request: Request, holdings: list[Holding]) -> list[Device]:
    """The brute force's reading of what the request may take on `node` now."""
    busy = {
        i
        for h in holdings
        if h.node == node.name and (h.exclusivity == "Exclusive" or request.exclusivity == "Exclusive")
        for i in h.gpu_ids
    }
    return [
        d
        for d in node.devices
        if d.healthy
        and d.id not in busy
        and (request.min_memory_mib == 0 or (d.memory_total_mib > 0 and d.memory_free_mib >= request.min_memory_mib))
    ]


def enough(devs: list[Device], request: Request) -> bool:
    if request.topology != "Required":
        return len(devs) >= request.count
    per_island: dict[str, int] = {}
    for d in devs:
        if d.bandwidth_gbps >= request.min_bandwidth_gbps:
            per_island[d.island] = per_island.get(d.island, 0) + 1
    return any(n >= request.count for n in per_island.values())


def could_ever(node: Node, request: Request) -> bool:
    big = [d for d in node.devices if d.healthy and d.memory_total_mib >= request.min_memory_mib]
    return enough(big if request.min_memory_mib else [d for d in node.devices if d.healthy], request)


def servable(nodes, holdings, request, reserved) -> list[Node]:
    return [
        n
        for n in nodes
        if n.name not in reserved and matches(n, request) and enough(free_now(n, request, holdings), request)
    ]


def topology_miss(node: Node, ids: tuple[int, ...], request: Request) -> int:
    if request.topology == "Ignore":
        return 0
    chosen = [d for d in node.devices if d.id in ids]
    ok = len({d.island for d in chosen}) == 1 and all(d.bandwidth_gbps >= request.min_bandwidth_gbps for d in chosen)
    return 0 if ok else 1


def share(node: Node, holdings: list[Holding]) -> float:
    busy = {i for h in holdings if h.node == node.name for i in h.gpu_ids}
    healthy = [d for d in node.devices if d.healthy]
    return sum(1 for d in healthy if d.id in busy) / len(healthy)


def mean_utilization(node: Node) -> float:
    healthy = [d for d in node.devices if d.healthy]
    return sum(d.utilization_percent or 0 for d in healthy) / len(healthy)


def best_fit_key(node: Node, ids: tuple[int, ...], request: Request, holdings: list[Holding]):
    free = free_now(node, request, holdings)
    by_id = {d.id: d for d in node.devices}
    island = by_id[ids[0]].island
    island_left = sum(1 for d in free if d.island == island and d.id not in ids)
    slack = sum(by_id[i].memory_free_mib - request.min_memory_mib for i in ids) if request.min_memory_mib else 0
    return (topology_miss(node, ids, request), len(free) - len(ids), island_left, slack, node.name)


@settings(max_examples=400)
@given(situations())
def test_an_allocation_is_always_feasible_and_no_fit_means_none_is(situation):
    nodes, holdings, request, cursor, reserved = situation
    d = allocate(request, nodes, holdings, cursor=cursor, reserved=reserved)
    able = servable(nodes, holdings, request, reserved)
    if isinstance(d, NoFit):
        assert not able, (d, [n.name for n in able])
        ever = any(matches(n, request) and could_ever(n, request) for n in nodes)
        assert d.phase == ("Pending" if ever or not any(matches(n, request) for n in nodes) else "Failed"), d
        return
    assert d.strategy == request.strategy
    node = next(n for n in nodes if n.name == d.node)
    assert node in able
    free = {dev.id: dev for dev in free_now(node, request, holdings)}
    assert len(d.gpu_ids) == request.count == len(set(d.gpu_ids))
    assert all(i in free for i in d.gpu_ids)  # healthy, free for the exclusivity, enough memory
    if request.topology == "Required":
        chosen = [free[i] for i in d.gpu_ids]
        assert len({c.island for c in chosen}) == 1
        assert all(c.bandwidth_gbps >= request.min_bandwidth_gbps for c in chosen)


@settings(max_examples=400)
@given(situations())
def test_the_chosen_node_is_the_strategys_best(situation):
    """Against each feasible node's own answer (the allocator on that node alone): the node chosen among all is the
    one the strategy ranks first, and merging equal nodes changed nothing."""
    nodes, holdings, request, cursor, reserved = situation
    d = allocate(request, nodes, holdings, cursor=cursor, reserved=reserved)
    able = servable(nodes, holdings, request, reserved)
    if not able:
        return
    alone = {n.name: allocate(request, [n], holdings) for n in able}
    assert all(isinstance(a, Allocation) for a in alone.values())
    assert isinstance(d, Allocation) and d.gpu_ids == alone[d.node].gpu_ids
    by_name = {n.name: n for n in able}
    miss = {name: topology_miss(by_name[name], a.gpu_ids, request) for name, a in alone.items()}
    assert miss[d.node] == min(miss.values())
    first = [by_name[name] for name in alone if miss[name] == miss[d.node]]
    if request.strategy == "BestFit":
        keys = {n.name: best_fit_key(n, alone[n.name].gpu_ids, request, holdings) for n in first}
        assert keys[d.node] == min(keys.values())
    elif request.strategy == "LeastUtilized":
        chosen = by_name[d.node]
        assert share(chosen, holdings) == min(share(n, holdings) for n in first)
        assert min((share(n, holdings), mean_utilization(n), n.name) for n in first)[2] == d.node
    else:
        after = sorted(n.name for n in first if cursor is None or n.name > cursor)
        assert d.node == (after or sorted(n.name for n in first))[0]


@settings(max_examples=100)
@given(st.integers(1, 12), st.sampled_from([1, 2, 8]), st.none() | st.sampled_from(["", "m05", "zz"]))
def test_round_robin_visits_every_node_before_any_repeats(count, size, cursor):
    shared = tuple(Device(i) for i in range(size))
    nodes = [Node(f"m{i:02d}", shared) for i in range(count)]
    holdings: list[Holding] = []
    visits = []
    for _ in range(2 * count):
        d = allocate(Request(1, exclusivity="Shared", strategy="RoundRobin"), nodes, holdings, cursor=cursor)
        assert isinstance(d, Allocation), d
        visits.append(d.node)
        holdings.append(Holding(d.node, d.gpu_ids, "Shared"))
        cursor = d.node
    assert sorted(visits[:count]) == [n.name for n in nodes]
    assert visits[count:] == visits[:count]


@settings(max_examples=100)
@given(
    st.lists(requests.map(lambda r: dataclasses.replace(r, match_labels={})), min_size=1, max_size=20),
    cursors,
)
def test_nodes_sharing_one_devices_tuple_get_the_same_decisions_under_every_strategy(reqs, cursor):
    """Merging nodes in equal states must not change an answer, whatever the strategy reads (held counts, the
    cursor's position, memory)."""
    template = dgx("x", utilization=30, memory_gib=80, used_gib=(0, 10, 20, 30, 40, 50, 60, 70))
    merged = [Node(f"n{i}", template.devices) for i in range(6)]
    separate = [Node(f"n{i}", tuple(dataclasses.replace(d) for d in template.devices)) for i in range(6)]
    held_merged: list[Holding] = []
    held_separate: list[Holding] = []
    for req in reqs:
        a = allocate(req, merged, held_merged, cursor=cursor)
        b = allocate(req, separate, held_separate, cursor=cursor)
        assert a == b
        if isinstance(a, Allocation):
            held_merged.append(Holding(a.node, a.gpu_ids, req.exclusivity))
            held_separate.append(Holding(b.node, b.gpu_ids, req.exclusivity))
            cursor = a.node
