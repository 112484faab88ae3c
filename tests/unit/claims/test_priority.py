"""The order claim pods are served in and the nodes kept for waiters: tables, a model check of Reservations, and a
simulated scheduler showing that a high-priority claim is not starved by a stream of small low-priority ones (and
that, without the reservations, the same stream does starve it)."""

from __future__ import annotations

import dataclasses
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from gpu_scheduling.claims.allocator import Allocation, Device, Holding, Node, Request, allocate
from gpu_scheduling.claims.priority import Reservations, Waiter, order_key, pod_priority, usable_nodes


def pod(name: str, priority: int | None = None, created: str = "2025-01-01T00:00:00Z", ns: str = "ns") -> dict:
    spec = {} if priority is None else {"priority": priority}
    return {"metadata": {"namespace": ns, "name": name, "creationTimestamp": created}, "spec": spec}


PODS = [
    pod("young-high", 1000, "2025-01-01T00:00:09Z"),
    pod("old-low", None, "2025-01-01T00:00:01Z"),
    pod("b-mid", 10, "2025-01-01T00:00:05Z"),
    pod("a-mid", 10, "2025-01-01T00:00:05Z"),
    pod("negative", -5, "2025-01-01T00:00:00Z"),
    pod("old-mid", 10, "2024-12-31T23:59:59Z"),
]


@pytest.mark.parametrize(
    ("queue_order", "expected"),
    [
        ("Priority", ["young-high", "old-mid", "a-mid", "b-mid", "old-low", "negative"]),
        ("FIFO", ["old-mid", "negative", "old-low", "a-mid", "b-mid", "young-high"]),
    ],
)
def test_serving_order(queue_order, expected):
    assert [p["metadata"]["name"] for p in sorted(PODS, key=lambda p: order_key(p, queue_order))] == expected


def test_pod_priority_defaults_to_zero():
    assert pod_priority(pod("x")) == 0
    assert pod_priority({"metadata": {}, "spec": {"priority": None}}) == 0
    assert pod_priority({"metadata": {}}) == 0
    assert pod_priority(pod("x", 2000001000)) == 2000001000
    assert order_key({"metadata": {"namespace": "ns", "name": "gone"}}, "Priority") == (0, "", "ns/gone")


def test_usable_nodes_are_those_the_selector_matches_and_that_are_big_enough():
    nodes = [
        Node("a", tuple(Device(i) for i in range(8)), {"t": "x"}),
        Node("b", tuple(Device(i) for i in range(2)), {"t": "x"}),
        Node("c", tuple(Device(i) for i in range(8)), {"t": "y"}),
    ]
    assert usable_nodes(Request(4, match_labels={"t": "x"}), nodes) == {"a"}
    assert usable_nodes(Request(2), nodes) == {"a", "b", "c"}
    assert usable_nodes(Request(1, min_memory_mib=1), nodes) == frozenset()  # no GPU reports its memory


def waiter(key: str, priority: int, nodes: str, created: str = "2025-01-01T00:00:00Z") -> Waiter:
    return Waiter(f"ns/{key}", priority, created, frozenset(nodes))


def test_a_waiter_keeps_its_nodes_from_lower_priorities_only():
    r = Reservations()
    assert r.reserved_for(0, "Priority") == {} and len(r) == 0
    r.wait(waiter("big", 1000, "ab"))
    kept = "ns/big (priority 1000)"
    assert r.reserved_for(0, "Priority") == {"a": kept, "b": kept}
    assert r.reserved_for(999, "Priority") == {"a": kept, "b": kept}
    assert r.reserved_for(1000, "Priority") == {}  # equal priority does not reserve
    assert r.reserved_for(5000, "Priority") == {}
    assert r.reserved_for(0, "FIFO") == {}  # FIFO reserves nothing
    assert len(r) == 1


def test_rewaiting_updates_the_nodes_and_done_releases_them():
    r = Reservations()
    r.wait(waiter("big", 1000, "ab"))
    r.wait(waiter("big", 1000, "c"))
    assert r.reserved_for(0, "Priority") == {"c": "ns/big (priority 1000)"} and len(r) == 1
    r.wait(waiter("big", 3, "c"))  # a new priority moves it
    assert r.reserved_for(2, "Priority") == {"c": "ns/big (priority 3)"} and r.reserved_for(3, "Priority") == {}
    r.wait(waiter("small", 0, "c"))  # kept out of c by big
    assert r.done("ns/big") is True, "small, of lower priority, waits: it is tried again"
    assert r.reserved_for(0, "Priority") == {} and len(r) == 1
    assert r.done("ns/big") is False  # unknown: nothing to do
    r.wait(waiter("peer", 0, "c"))
    assert r.done("ns/small") is False, "equals keep nothing from each other: nobody to wake"


def test_a_node_kept_by_several_names_the_highest_priority_then_the_oldest():
    r = Reservations()
    r.wait(waiter("mid", 500, "ab"))
    r.wait(waiter("high-young", 1000, "bc", "2025-01-01T00:00:09Z"))
    r.wait(waiter("high-old", 1000, "c", "2025-01-01T00:00:01Z"))
    assert r.reserved_for(0, "Priority") == {
        "a": "ns/mid (priority 500)",
        "b": "ns/high-young (priority 1000)",
        "c": "ns/high-old (priority 1000)",
    }
    assert r.reserved_for(500, "Priority") == {"b": "ns/high-young (priority 1000)", "c": "ns/high-old (priority 1000)"}
    r.done("ns/high-young")
    assert r.reserved_for(0, "Priority") == {
        "a": "ns/mid (priority 500)",
        "b": "ns/mid (priority 500)",
        "c": "ns/high-old (priority 1000)",
    }


ops = st.lists(
    st.tuples(
        st.sampled_from(["wait", "done", "ask"]),
        st.sampled_from(["p", "q", "r", "s"]),
        st.sampled_from([-1, 0, 0, 5, 1000]),
        st.sampled_from(["t1", "t2", "t3"]),
        st.frozensets(st.sampled_from(["a", "b", "c", "d"])),
    ),
    max_size=40,
)


@settings(max_examples=200)
@given(ops)
def test_reservations_agree_with_a_plain_model(steps):
    r = Reservations()
    model: dict[str, Waiter] = {}
    for op, key, priority, created, nodes in steps:
        if op == "wait":
            w = Waiter(key, priority, created, nodes)
            r.wait(w)
            model[key] = w
        elif op == "done":
            gone = model.pop(key, None)
            kept_some = gone is not None and any(w.priority < gone.priority for w in model.values())
            assert r.done(key) == kept_some
        else:
            expected: dict[str, str] = {}
            for w in sorted(model.values(), key=lambda w: (-w.priority, w.created, w.key)):
                if w.priority > priority:
                    for node in w.nodes:
                        expected.setdefault(node, f"{w.key} (priority {w.priority})")
            assert r.reserved_for(priority, "Priority") == expected
            assert r.reserved_for(priority, "FIFO") == {}
        assert len(r) == len(model)


# ---- a simulated scheduler -----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Claim:
    name: str
    priority: int
    arrives: int
    request: Request
    duration: int

    @property
    def key(self) -> str:
        return f"ns/{self.name}"

    @property
    def pod(self) -> dict[str, Any]:
        created = f"2025-01-01T00:{self.arrives // 60:02d}:{self.arrives % 60:02d}Z"
        return pod(self.name, self.priority, created)


def simulate(nodes: list[Node], claims: list[Claim], steps: int, reserve: bool = True) -> dict[str, int]:
    """Each step: running claims whose time is up finish, new claims arrive, and the pending claims are tried in
    the order they are served, as the scheduler does. Returns the step each claim was placed at."""
    pending: list[Claim] = []
    running: list[tuple[int, Holding]] = []  # (the step it finishes at, what it holds)
    reservations = Reservations()
    placed: dict[str, int] = {}
    cursor: str | None = None
    for step in range(steps):
        running = [(end, h) for end, h in running if end > step]
        pending += [c for c in claims if c.arrives == step]
        pending.sort(key=lambda c: order_key(c.pod, "Priority"))
        waiting = []
        for c in pending:
            reserved = reservations.reserved_for(c.priority, "Priority") if reserve else {}
            d = allocate(c.request, nodes, [h for _, h in running], cursor=cursor, reserved=reserved)
            if isinstance(d, Allocation):
                running.append((step + c.duration, Holding(d.node, d.gpu_ids, c.request.exclusivity)))
                reservations.done(c.key)
                placed[c.name] = step
                cursor = d.node
            elif d.phase == "Pending":
                waiting.append(c)
                reservations.wait(
                    Waiter(c.key, c.priority, c.pod["metadata"]["creationTimestamp"], usable_nodes(c.request, nodes))
                )
            else:
                reservations.done(c.key)
        pending = waiting
    return placed


def gpus(name: str, count: int) -> Node:
    return Node(name, tuple(Device(i, f"g{i // 4}", 600) for i in range(count)))


def stream(steps: int, duration: int) -> list[Claim]:
    """One one-GPU low-priority claim per step, each running `duration` steps."""
    return [Claim(f"low-{s:03d}", 0, s, Request(1), duration) for s in range(steps)]


def test_without_reservations_a_stream_of_small_claims_starves_a_large_one():
    """The GPU freed each step goes to the small claim tried after the large one: a GPU is always busy."""
    nodes = [gpus("n1", 2)]
    big = Claim("big", 1000, 1, Request(2), 1)
    assert "big" not in simulate(nodes, [*stream(40, 2), big], 40, reserve=False)
    assert simulate(nodes, [*stream(40, 2), big], 40)["big"] == 2


@st.composite
def scenarios(draw):
    """A small cluster kept busy by one-GPU claims of priority 0 or 10, each running 1 to `longest` steps, and one
    claim of priority 1000 for up to a node's GPUs (most often a whole node, the hard case) arriving among them."""
    longest = draw(st.integers(1, 5))
    sizes = draw(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=3))
    nodes = [gpus(f"n{i}", size) for i, size in enumerate(sizes)]
    arrives = draw(st.integers(0, 8))
    steps = arrives + longest + 1
    strategy = draw(st.sampled_from(["BestFit", "LeastUtilized", "RoundRobin"]))
    load = draw(st.integers(0, sum(sizes)))  # at most as many arrivals per step as there are GPUs
    claims = [
        Claim(f"low-{step:02d}-{i}", draw(st.sampled_from([0, 0, 10])), step, Request(1, strategy=strategy), duration)
        for step in range(steps)
        for i, duration in enumerate(draw(st.lists(st.integers(1, longest), max_size=load)))
    ]
    size = draw(st.sampled_from([max(sizes), max(sizes), draw(st.integers(1, max(sizes)))]))
    big = Claim("big", 1000, arrives, Request(size, strategy=strategy), draw(st.integers(1, longest)))
    return nodes, [*claims, big], steps, big, longest


@settings(max_examples=150)
@given(scenarios())
def test_no_starvation_in_a_generated_stream(scenario):
    nodes, claims, steps, big, longest = scenario
    placed = simulate(nodes, claims, steps)
    assert "big" in placed and placed["big"] <= big.arrives + longest, placed
