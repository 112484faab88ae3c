"""The GpuClaim allocator: every policy, exclusivity mixes, islands and bandwidth, health, fallback, packing."""

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_scheduling.claims.allocator import (
    Allocation,
    Device,
    FreeIndex,
    Holding,
    IndexKind,
    Node,
    NoFit,
    Request,
    allocate,
)


def dgx(name: str, unhealthy=(), labels=None, bandwidth=600) -> Node:
    """8 GPUs in two NVLink islands of four, like the reference's example node."""
    return Node(
        name, tuple(Device(i, f"nvlink-group-{i // 4}", bandwidth, i not in unhealthy) for i in range(8)), labels or {}
    )


def ids(decision) -> tuple[int, ...]:
    assert isinstance(decision, Allocation), decision
    return decision.gpu_ids


def test_contiguous_takes_the_lowest_adjacent_run():
    assert ids(allocate(Request(2), [dgx("a")])) == (0, 1)


def test_contiguous_skips_held_gpus():
    held = [Holding("a", (1,))]
    assert ids(allocate(Request(2), [dgx("a")], held)) == (2, 3)


def test_spread_alternates_islands():
    assert ids(allocate(Request(4, policy="spread"), [dgx("a")])) == (0, 4, 1, 5)


def test_prefer_ids_when_free():
    assert ids(allocate(Request(2, policy="preferIds", prefer_ids=(5, 6)), [dgx("a")])) == (5, 6)


def test_prefer_ids_falls_back_when_taken():
    d = allocate(Request(2, policy="preferIds", prefer_ids=(5, 6)), [dgx("a")], [Holding("a", (6,))])
    assert ids(d) == (0, 5) and "preferred ids [6] were taken; fell back" in d.message


def test_unhealthy_gpus_are_never_allocated():
    assert ids(allocate(Request(2), [dgx("a", unhealthy=(0,))])) == (1, 2)
    assert ids(allocate(Request(1, policy="preferIds", prefer_ids=(3,)), [dgx("a", unhealthy=(3,))])) == (0,)


def test_exclusive_never_shares():
    held = [Holding("a", tuple(range(8)), "Shared")]
    d = allocate(Request(1), [dgx("a")], held)
    assert isinstance(d, NoFit) and d.phase == "Pending"


def test_shared_shares_only_with_shared():
    assert ids(allocate(Request(1, exclusivity="Shared"), [dgx("a")], [Holding("a", (0,), "Shared")])) == (0,)
    assert ids(allocate(Request(1, exclusivity="Shared"), [dgx("a")], [Holding("a", (0,), "Exclusive")])) == (1,)


def test_mig_is_refused():
    d = allocate(Request(1, exclusivity="MIG"), [dgx("a")])
    assert d == NoFit("Failed", "MIG is not supported: use Exclusive or Shared")


def test_selector_filters_nodes():
    nodes = [dgx("a", labels={"gpu-type": "v100"}), dgx("b", labels={"gpu-type": "a100"})]
    assert allocate(Request(1, match_labels={"gpu-type": "a100"}), nodes).node == "b"
    d = allocate(Request(1, match_labels={"gpu-type": "h100"}), nodes)
    assert isinstance(d, NoFit) and d.phase == "Pending" and "nodes with a GPU inventory matches selector" in d.message


def test_required_topology_stays_in_one_island():
    held = [Holding("a", (0, 5))]
    d = allocate(Request(3, topology="Required", min_bandwidth_gbps=600), [dgx("a")], held)
    assert ids(d) == (1, 2, 3)


def test_required_topology_pending_when_islands_are_busy_now():
    held = [Holding("a", (0, 4))]
    d = allocate(Request(4, topology="Required", min_bandwidth_gbps=600), [dgx("a")], held)
    assert isinstance(d, NoFit) and d.phase == "Pending"


def test_required_topology_failed_when_never_possible():
    d = allocate(Request(5, topology="Required", min_bandwidth_gbps=600), [dgx("a")])
    assert isinstance(d, NoFit) and d.phase == "Failed" and "one NVLink island" in d.message
    d = allocate(Request(2, topology="Required", min_bandwidth_gbps=900), [dgx("a")])
    assert isinstance(d, NoFit) and d.phase == "Failed"


def test_preferred_topology_falls_back_across_islands():
    held = [Holding("a", (0, 4))]
    d = allocate(Request(4, topology="Preferred", min_bandwidth_gbps=600), [dgx("a")], held)
    assert ids(d) == (1, 2, 3, 5)


def test_preferred_topology_takes_one_slower_island_before_crossing_islands():
    node = Node("a", tuple(Device(i, f"g{i // 4}", 600 if i < 4 else 64) for i in range(8)))
    d = allocate(Request(4, topology="Preferred", min_bandwidth_gbps=600), [node], [Holding("a", (0,))])
    assert ids(d) == (4, 5, 6, 7) and "below 600 GB/s" in d.message


def test_preferred_topology_picks_the_node_that_satisfies_it():
    nodes = [dgx("a"), dgx("b")]
    held = [Holding("a", (0, 4))]  # a cannot give 4 in one island, b can
    assert allocate(Request(4, topology="Preferred", min_bandwidth_gbps=600), nodes, held).node == "b"


def test_pack_prefers_the_fuller_node_then_name():
    nodes = [dgx("a"), dgx("b"), dgx("c")]
    held = [Holding("b", (0, 1, 2))]
    assert allocate(Request(1), nodes, held).node == "b"
    assert allocate(Request(1), [dgx("b"), dgx("a")]).node == "a"


def test_pack_prefers_the_fuller_island():
    held = [Holding("a", (0, 1, 2))]
    assert ids(allocate(Request(1, topology="Preferred"), [dgx("a")], held)) == (3,)


def test_too_large_everywhere_is_failed():
    d = allocate(Request(9), [dgx("a"), dgx("b", unhealthy=(1,))])
    assert isinstance(d, NoFit) and d.phase == "Failed" and "largest node has 8 healthy GPUs" in d.message


requests = st.builds(
    Request,
    count=st.integers(1, 8),
    policy=st.sampled_from(["contiguous", "spread", "preferIds"]),
    prefer_ids=st.lists(st.integers(0, 7), max_size=4, unique=True).map(tuple),
    exclusivity=st.sampled_from(["Exclusive", "Shared"]),
    topology=st.sampled_from(["Required", "Preferred", "Ignore"]),
    min_bandwidth_gbps=st.sampled_from([0, 300, 600]),
)


@settings(max_examples=200)
@given(st.lists(requests, min_size=1, max_size=25), st.sets(st.integers(0, 7), max_size=3))
def test_invariants_over_a_sequence_of_claims(reqs, unhealthy):
    nodes = [dgx("a", unhealthy=unhealthy), dgx("b"), Node("c", tuple(Device(i, "pcie", 0) for i in range(4)))]
    by_name = {n.name: n for n in nodes}
    held: list[Holding] = []
    for req in reqs:
        d = allocate(req, nodes, held)
        if isinstance(d, NoFit):
            continue
        node = by_name[d.node]
        devices = {dev.id: dev for dev in node.devices}
        assert len(d.gpu_ids) == req.count and len(set(d.gpu_ids)) == req.count
        assert all(devices[i].healthy for i in d.gpu_ids)
        if req.topology == "Required":
            assert len({devices[i].island for i in d.gpu_ids}) == 1
            assert all(devices[i].bandwidth_gbps >= req.min_bandwidth_gbps for i in d.gpu_ids)
        for h in held:
            if h.node == d.node and set(h.gpu_ids) & set(d.gpu_ids):
                assert h.exclusivity == "Shared" and req.exclusivity == "Shared", (h, req, d)
        held.append(Holding(d.node, d.gpu_ids, req.exclusivity))


@settings(max_examples=100)
@given(st.lists(requests, min_size=1, max_size=30))
def test_nodes_sharing_one_devices_tuple_get_the_same_decisions(reqs):
    """The allocator merges nodes whose devices tuple is the same object; merging must not change any answer."""
    shared = dgx("x").devices
    merged = [Node(f"n{i}", shared, {}) for i in range(6)]
    separate = [dgx(f"n{i}") for i in range(6)]
    held_merged: list[Holding] = []
    held_separate: list[Holding] = []
    for req in reqs:
        a, b = allocate(req, merged, held_merged), allocate(req, separate, held_separate)
        assert a == b
        if isinstance(a, Allocation):
            held_merged.append(Holding(a.node, a.gpu_ids, req.exclusivity))
            held_separate.append(Holding(b.node, b.gpu_ids, req.exclusivity))


@settings(max_examples=200)
@given(
    st.lists(
        st.tuples(
            requests,
            st.sampled_from(["BestFit", "LeastUtilized", "RoundRobin"]),
            st.sets(st.integers(0, 7)),  # the nodes the pod's other rules admit
            st.sets(st.integers(0, 7), max_size=2),  # nodes kept for a higher priority
            st.one_of(st.none(), st.dictionaries(st.integers(0, 7), st.integers(0, 3), max_size=4)),
        ),
        min_size=1,
        max_size=25,
    ),
    st.sampled_from([None, "n3", "n9"]),
)
def test_admits_asked_lazily_chooses_as_the_admitted_nodes_would(steps, cursor):
    """`admits` is asked only of the node that stands for a state (the strategy's first so far): whatever it admits,
    an Allocation is the one the admitted nodes alone give, and there is one exactly when they give one; the same
    with a FreeIndex per kind of request, told of each decision's node. Nodes share devices tuples (few states, so
    most nodes are never asked), and the decisions' holdings pile up."""
    shared = dgx("x").devices
    nodes = [Node(f"n{i}", shared if i % 3 else dgx(f"n{i}").devices, {}) for i in range(8)]
    held: list[Holding] = []
    indexes: dict[IndexKind, FreeIndex] = {}  # built once per kind, then told of each decision's node (as the ledger's)

    def on_node(name: str) -> list[Holding]:
        return [h for h in held if h.node == name]

    for request, strategy, admitted, kept, scores in steps:
        request = dataclasses.replace(request, strategy=strategy)
        names = {f"n{i}" for i in admitted}
        asked: list[str] = []

        def admits(name: str, names=names, asked=asked) -> bool:
            asked.append(name)
            return name in names

        reserved = {f"n{i}": "other/pod" for i in kept}
        preference = {f"n{i}": s for i, s in scores.items()} if scores is not None else None
        options = {"cursor": cursor, "reserved": reserved, "preference": preference}
        lazy = allocate(request, nodes, held, admits=admits, **options)
        eager = allocate(request, [n for n in nodes if n.name in names], held, **options)
        assert isinstance(lazy, Allocation) == isinstance(eager, Allocation), (lazy, eager)
        assert len(asked) == len(set(asked)) <= len(nodes)
        kind = FreeIndex.kind_of(request)
        if kind not in indexes:
            indexes[kind] = FreeIndex(nodes, on_node, kind)
        index = indexes[kind]
        indexed = allocate(request, nodes, held=on_node, admits=names.__contains__, index=index, **options)
        assert isinstance(indexed, Allocation) == isinstance(eager, Allocation), (indexed, eager)
        if isinstance(eager, Allocation):
            assert lazy == eager == indexed
            held.append(Holding(eager.node, eager.gpu_ids, request.exclusivity))
            for index in indexes.values():
                index.update([eager.node])


def test_admits_is_asked_of_a_few_nodes_of_many_alike():
    """A thousand nodes of one kind, all free: one state, so the pod's other rules are asked of the first node by
    the strategy's order only (BestFit: the lowest name), not of each node."""
    shared = dgx("x").devices
    nodes = [Node(f"n{i:04d}", shared, {}) for i in range(1000)]
    asked: list[str] = []
    d = allocate(Request(2), nodes, (), admits=lambda name: asked.append(name) is None)
    assert isinstance(d, Allocation) and d.node == "n0000"
    assert asked == ["n0000"]
