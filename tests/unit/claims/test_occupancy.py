"""The occupancy model (claims.occupancy) read by two of its readers: the board's state builder and `kubectl gpu`
(nodes and health) are fed the same generated objects, well-formed or not, and must show the same findings, the same
verdict and the same counts, without raising."""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings

from gpu_scheduling import constants
from gpu_scheduling.agent import inventory as agent
from gpu_scheduling.board.state import Board
from gpu_scheduling.claims import objects, occupancy
from gpu_scheduling.cli import health, views

NODES = ("node1", "node2", "node3")
PODS = ("a-0", "b-1", "c-2", "d-3")
FUZZ = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

junk = st.one_of(st.none(), st.integers(-2, 3), st.text(max_size=4), st.lists(st.integers(), max_size=2), st.just({}))
gpu_ids = st.integers(0, 5)
names = st.lists(st.sampled_from([f"ns/{p}" for p in PODS] + ["ns/stranger", "u1"]), max_size=3)


@st.composite
def devices(draw: st.DrawFn) -> list[Any]:
    out: list[Any] = []
    for gpu in draw(st.lists(gpu_ids, max_size=5, unique=True)):
        device: dict[str, Any] = {"id": gpu, "island": draw(st.sampled_from(["a", "b"]))}
        device["health"] = draw(st.sampled_from(["Healthy", "Healthy", "Unhealthy", "Unknown"]))
        if draw(st.booleans()):
            device["inUseBy"] = draw(names)
        if draw(st.booleans()):
            device["kubeletPods"] = draw(names)
        if draw(st.booleans()):
            device["utilizationPercent"] = draw(st.integers(0, 100))
        out.append(device)
    if draw(st.booleans()):
        out.append(draw(st.one_of(junk, st.fixed_dictionaries({"id": junk}))))  # a device no reader can use
    return out


@st.composite
def inventory(draw: st.DrawFn, node: str) -> dict[str, Any]:
    spec_node = draw(st.sampled_from([node, node, None, "node9"]))
    status = draw(st.one_of(st.builds(lambda d: {"devices": d}, devices()), junk))
    return {"metadata": {"name": node}, "spec": {"nodeName": spec_node}, "status": status}


@st.composite
def pod(draw: st.DrawFn, index: int) -> dict[str, Any]:
    name = PODS[index]
    node = draw(st.sampled_from([*NODES, None]))
    annotations: dict[str, Any] = {}
    kind = draw(st.sampled_from(["claim", "map", "none", "garbage"]))
    if kind == "claim":
        ids = draw(st.lists(gpu_ids, min_size=1, max_size=3, unique=True))
        where = draw(st.sampled_from([node or "node1", "node2"]))
        annotations[constants.CLAIM_ANNOTATION] = "c"
        annotations[constants.ALLOCATED_ANNOTATION] = f"{where}:{','.join(map(str, ids))}"
        annotations[constants.EXCLUSIVITY_ANNOTATION] = draw(st.sampled_from(["Exclusive", "Shared"]))
    elif kind == "map":
        annotations[constants.MAP_ANNOTATION] = f"{index}={node or 'node1'}:{draw(gpu_ids)}"
    elif kind == "garbage":
        annotations[constants.ALLOCATED_ANNOTATION] = draw(st.sampled_from(["node1:x", ":", "", "node1:1,,"]))
        annotations[constants.MAP_ANNOTATION] = draw(st.sampled_from(["0=", "garbage", "9=node1:0"]))
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"u{index}", "annotations": annotations}
    if draw(st.booleans()):
        meta["annotations"] = draw(junk)
    spec = {"nodeName": node} if node else {}
    phase = draw(st.sampled_from(["Running", "Pending", "Succeeded", "Failed"]))
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


@st.composite
def lease(draw: st.DrawFn) -> dict[str, Any]:
    node, gpu = draw(st.sampled_from(NODES)), draw(gpu_ids)
    uids = draw(st.lists(st.sampled_from(["u0", "u1", "u2", "u3", "u9"]), max_size=2, unique=True))
    who = {f"u{i}": f"ns/{name}" for i, name in enumerate(PODS)} | {"u9": "ns/gone"}
    body = objects.lease_body(node, gpu, draw(st.sampled_from(["Exclusive", "Shared"])), {u: who[u] for u in uids})
    broken = draw(st.sampled_from(["", "", "gpu-label", "node", "annotations"]))
    if broken == "gpu-label":
        body["metadata"]["labels"][constants.LEASE_GPU_LABEL] = draw(st.sampled_from(["x", "-1", "1234567"]))
    elif broken == "node":
        del body["metadata"]["labels"][constants.LEASE_NODE_LABEL]
        del body["metadata"]["annotations"][constants.LEASE_NODE_ANNOTATION]
        body["metadata"]["name"] = draw(st.sampled_from(["gpu-x", body["metadata"]["name"]]))
    elif broken == "annotations":
        body["metadata"]["annotations"] = draw(junk)
    return body


@st.composite
def cluster(draw: st.DrawFn) -> tuple[list[Any], list[Any], list[Any]]:
    nodes = draw(st.lists(st.sampled_from(NODES), unique=True))
    inventories = [draw(inventory(n)) for n in nodes]
    pods = [draw(pod(i)) for i in draw(st.lists(st.integers(0, len(PODS) - 1), unique=True))]
    leases = draw(st.lists(lease(), max_size=5))
    # One Lease per name, as the API keeps them.
    leases = list({lease_["metadata"]["name"]: lease_ for lease_ in leases}.values())
    return inventories, pods, leases


def board_of(inventories: list[Any], pods: list[Any], leases: list[Any]) -> dict[str, Any]:
    board = Board()
    for res, objs in (("gpunodestatuses", inventories), ("pods", pods), ("leases", leases)):
        for obj in objs:
            board.apply(res, "ADDED", obj)
    return board.document()


def board_findings(doc: dict[str, Any]) -> set[tuple[str, int | None, str, str]]:
    out = set()
    for name, node in doc["nodes"].items():
        out |= {(name, None, f["kind"], f["message"]) for f in node["flags"]}
        out |= {(name, g["id"], f["kind"], f["message"]) for g in node["gpus"] for f in g["flags"]}
    return out


@FUZZ
@given(cluster())
def test_the_board_and_kubectl_gpu_agree(objs: tuple[list[Any], list[Any], list[Any]]) -> None:
    inventories, pods, leases = objs
    doc = board_of(inventories, pods, leases)
    found = views.findings(inventories, leases, pods)
    # The same findings: the board's flags on its nodes, and those about no node in its summary's count.
    assert board_findings(doc) == {(f.node, f.gpu, f.kind, f.message) for f in found if f.node is not None}
    assert doc["summary"]["flags"] == len(found)
    # The same verdict: kubectl gpu health fails exactly when the board shows an error.
    nodes = [{"metadata": {"name": n}} for n in NODES]
    checks = [*health.inventories(inventories, nodes), *health.occupancy_checks(inventories, leases, pods)]
    flags = [
        f for node in doc["nodes"].values() for f in [*node["flags"], *(f for g in node["gpus"] for f in g["flags"])]
    ]
    orphans = doc["summary"]["flags"] - len(flags)  # Leases of no node: errors the board counts, shows on no node
    board_errors = sum(1 for f in flags if f["severity"] == "error") + orphans
    # One FAIL per error (foreign inventories under `inventories`, the others under gpu-leases or inventory/<node>).
    assert sum(1 for c in checks if c.status == health.FAIL) == board_errors
    # The same counts per node (kubectl gpu nodes shows the nodes with a usable inventory).
    node_views = views.node_views(inventories, nodes, leases, pods)
    for view in node_views:
        shown = doc["nodes"][view.name]
        assert (view.total, view.allocated, view.unhealthy) == (shown["total"], shown["allocated"], shown["unhealthy"])
    assert sum(v.free for v in node_views) == doc["summary"]["free"]
    assert sum(v.total for v in node_views) == doc["summary"]["gpus"]


def test_the_model_reads_every_source_and_flags_each_disagreement() -> None:
    """A table of the findings, one cluster each (the property above checks that the readers agree)."""
    inv = {"metadata": {"name": "node1"}, "spec": {"nodeName": "node1"}, "status": {"devices": [{"id": 0}, {"id": 1}]}}
    claim = {
        "metadata": {
            "name": "train",
            "namespace": "ns",
            "uid": "u1",
            "annotations": {constants.CLAIM_ANNOTATION: "c", constants.ALLOCATED_ANNOTATION: "node1:0"},
        },
        "spec": {"nodeName": "node1"},
    }
    unbound = {"metadata": {"name": "wait", "namespace": "ns", "uid": "u2"}, "spec": {}}
    cases = [
        ([inv], [claim], [objects.lease_body("node1", 0, "Exclusive", {"u1": "ns/train"})], set()),
        ([inv], [claim], [], {("allocation-without-lease", 0)}),
        ([inv], [], [objects.lease_body("node1", 1, "Exclusive", {})], {("lease-without-holder", 1)}),
        (
            [inv],
            [unbound],
            [objects.lease_body("node1", 1, "Exclusive", {"u2": "ns/wait"})],
            {("lease-names-unbound-pod", 1)},
        ),
        (
            [inv],
            [],
            [objects.lease_body("node1", 1, "Exclusive", {"u9": "ns/gone"})],
            {("lease-without-allocation", 1)},
        ),
        (
            [inv],
            [],
            [objects.lease_body("node1", 7, "Exclusive", {"u9": "ns/gone"})],
            {("lease-without-allocation", 7), ("unknown-gpu", 7)},
        ),
        ([{**inv, "spec": {"nodeName": "node2"}}], [], [], {("foreign-inventory", None)}),
    ]
    for inventories, pods, leases, expected in cases:
        model = occupancy.cluster(inventories, pods, leases)
        assert {(f.kind, f.gpu) for f in model.all_findings()} == expected, (pods, leases)


@FUZZ
@given(cluster())
def test_the_agent_writes_in_use_by_as_the_board_counts_holders(objs: tuple[list[Any], list[Any], list[Any]]) -> None:
    """Each node's agent reads the GPU Leases of its node and the pods bound to it; what it writes as inUseBy is
    never out of step with the board's holders of the same objects. (A pod whose allocation names another node than
    the one it is bound to is left out: no agent sees it.)"""
    _, pods, leases = objs
    pods = [
        p for p in pods if (read := occupancy.read_pod(p)) is None or read.hold is None or read.hold.node == read.node
    ]
    written = []
    for name in NODES:
        bound = [p for p in pods if occupancy.mapping(p.get("spec")).get("nodeName") == name]
        own = [obj for obj in leases if (lease := occupancy.read_lease(obj)) is not None and lease.node == name]
        status = agent.node_status([{"id": gpu, "health": "Healthy"} for gpu in range(6)], own, bound)
        written.append({"metadata": {"name": name}, "spec": {"nodeName": name}, "status": status})
    doc = board_of(written, pods, leases)
    assert not [f for f in board_findings(doc) if f[2] == "in-use-by-out-of-step"]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-1, 10) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)
keys = st.sampled_from(
    [
        "metadata",
        "spec",
        "status",
        "name",
        "namespace",
        "uid",
        "labels",
        "annotations",
        "nodeName",
        "phase",
        "devices",
        "id",
        "health",
        "inUseBy",
        "kubeletPods",
        "holderIdentity",
        constants.LEASE_LABEL,
        constants.LEASE_GPU_LABEL,
        constants.LEASE_NODE_LABEL,
        constants.ALLOCATED_ANNOTATION,
        constants.MAP_ANNOTATION,
    ]
)
shaped = st.recursive(
    json_values,
    lambda inner: st.dictionaries(keys, inner | st.sampled_from(["node1", "0", "gpu", "0=node1:0"]), max_size=5),
)


@FUZZ
@given(st.lists(shaped, max_size=4), st.lists(shaped, max_size=4), st.lists(shaped, max_size=4))
def test_no_object_of_any_shape_makes_a_reader_raise(
    inventories: list[Any], pods: list[Any], leases: list[Any]
) -> None:
    occupancy.cluster(inventories, pods, leases)
    views.findings(inventories, leases, pods)
    views.node_views(inventories, [], leases, pods)
    health.occupancy_checks(inventories, leases, pods)
    health.inventories(inventories, [])
