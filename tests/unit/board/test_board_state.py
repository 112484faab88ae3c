"""The board's state from plain objects: the take-home's map pods, claim pods with their Leases, shared GPUs, every
kind of disagreement flag, pending work, topology groups, created workloads; patches that carry only what changed;
and two properties: applying any sequence of events gives the board a fresh one builds from the final objects (and
patches replayed on a snapshot give the same), and no object of any shape makes the board raise or emit non-JSON."""

from __future__ import annotations

import copy
import json
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from gpu_scheduling import constants, gpumap
from gpu_scheduling.board import state
from gpu_scheduling.board.state import Board, Changes
from gpu_scheduling.claims import objects

TAKE_HOME = "0=node1:0,1\n1=node2:2\n2=node3:0,1,2\n3=node4:3\n4=node4:3\n"
ZONE = "topology.kubernetes.io/zone"
STS = "gpu-scheduler-check"
T0 = "2024-05-01T10:00:00Z"

FUZZ = settings.get_profile("fuzz")  # tests/conftest.py


# ---- objects -----------------------------------------------------------------------------------------------------


def node(name: str, zone: str | None = None, ready: bool = True) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {ZONE: zone} if zone else {}},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def device(gpu: int, health: str = "Healthy", in_use: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    out = {"id": gpu, "island": f"nvl{gpu // 4}", "bandwidthGBps": 600, "health": health, **extra}
    if in_use is not None:
        out["inUseBy"] = in_use
    return out


def inventory(
    name: str,
    count: int = 8,
    *,
    unhealthy: tuple[int, ...] = (),
    in_use: dict[int, list[str]] | None = None,
    spec_node: str | None = None,
    kubelet: dict[int, list[str]] | None = None,
) -> dict[str, Any]:
    in_use = in_use or {}
    devices = [device(g, "Unhealthy" if g in unhealthy else "Healthy", in_use.get(g, [])) for g in range(count)]
    if kubelet is not None:  # the kubelet's view, as the agent publishes it beside gpu-device-plugin
        for d in devices:
            d["kubeletPods"] = kubelet.get(d["id"], [])
    return {
        "metadata": {"name": name},
        "spec": {"nodeName": spec_node or name},
        "status": {"devices": devices},
    }


def map_pod(
    index: int, *, bound: bool = True, phase: str = "Running", gpu_map: str = TAKE_HOME, node_name: str = ""
) -> dict[str, Any]:
    """Pod `index` of the StatefulSet, bound to its map entry's node (or `node_name`)."""
    node_name = node_name or gpumap.parse(gpu_map).entries[index].node
    return {
        "metadata": {
            "name": f"{STS}-{index}",
            "namespace": "default",
            "uid": f"map-{index}",
            "creationTimestamp": T0,
            "annotations": {constants.MAP_ANNOTATION: gpu_map},
            "labels": {constants.POD_INDEX_LABEL: str(index)},
            "ownerReferences": [{"kind": "StatefulSet", "name": STS, "controller": True, "uid": "sts"}],
        },
        "spec": {"schedulerName": "gpu-scheduler", **({"nodeName": node_name} if bound else {})},
        "status": {"phase": phase if bound else "Pending"},
    }


def claim_pod(
    name: str,
    uid: str,
    allocated: str | None,
    *,
    claim: str = "train",
    phase: str | None = None,
    exclusivity: str = "Exclusive",
    labels: dict[str, str] | None = None,
    created: str = T0,
    reason: str | None = None,
) -> dict[str, Any]:
    annotations = {constants.CLAIM_ANNOTATION: claim}
    spec: dict[str, Any] = {"schedulerName": "gpu-scheduler"}
    if allocated:
        annotations[constants.ALLOCATED_ANNOTATION] = allocated
        annotations[constants.EXCLUSIVITY_ANNOTATION] = exclusivity
        spec["nodeName"] = allocated.split(":")[0]
    status: dict[str, Any] = {"phase": phase or ("Running" if allocated else "Pending")}
    if reason is not None:
        status["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": reason}
        ]
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": uid,
            "creationTimestamp": created,
            "annotations": annotations,
            "labels": labels or {},
        },
        "spec": spec,
        "status": status,
    }


def lease(node_name: str, gpu: int, holders: dict[str, str], exclusivity: str = "Exclusive") -> dict[str, Any]:
    return objects.lease_body(node_name, gpu, exclusivity, holders)


def gpu_claim(name: str, phase: str | None = None, message: str = "", labels: dict[str, str] | None = None) -> dict:
    status = {k: v for k, v in {"phase": phase, "message": message}.items() if v}
    return {
        "metadata": {"name": name, "namespace": "default", "creationTimestamp": T0, "labels": labels or {}},
        "spec": {"devices": {"count": 1}},
        "status": status,
    }


def board_of(*events: tuple[str, dict[str, Any]], **kwargs: Any) -> Board:
    board = Board(**kwargs)
    for resource, obj in events:
        board.apply(resource, "ADDED", obj, None)
    return board


def take_home_board() -> Board:
    in_use = {
        "node1": {0: ["default/gpu-scheduler-check-0"], 1: ["default/gpu-scheduler-check-0"]},
        "node2": {2: ["default/gpu-scheduler-check-1"]},
        "node3": {g: ["default/gpu-scheduler-check-2"] for g in (0, 1, 2)},
        "node4": {3: ["default/gpu-scheduler-check-3", "default/gpu-scheduler-check-4"]},
    }
    events = [("nodes", node(n, "zone-a" if n in ("node1", "node2") else None)) for n in in_use]
    events += [("gpunodestatuses", inventory(n, in_use=in_use[n])) for n in in_use]
    events += [("pods", map_pod(i)) for i in range(5)]
    return board_of(*events)


def gpu(doc: dict[str, Any], node_name: str, gpu_id: int) -> dict[str, Any]:
    (found,) = [g for g in doc["nodes"][node_name]["gpus"] if g["id"] == gpu_id]
    return found


def held(doc: dict[str, Any]) -> dict[str, dict[int, list[str]]]:
    """node -> GPU -> the holder pods, for the GPUs that have holders."""
    return {
        name: {g["id"]: [h["pod"] for h in g["holders"]] for g in n["gpus"] if g["holders"]}
        for name, n in doc["nodes"].items()
    }


def flags(doc: dict[str, Any]) -> set[tuple[str, int | None, str]]:
    """(node, GPU or None for a node-level flag, kind) of every flag."""
    out = set()
    for name, n in doc["nodes"].items():
        out |= {(name, None, f["kind"]) for f in n["flags"]}
        for g in n["gpus"]:
            out |= {(name, g["id"], f["kind"]) for f in g["flags"]}
    return out


# ---- holders -------------------------------------------------------------------------------------------------------


def test_the_take_home_map_pods_land_on_node1_to_node4_with_their_gpu_ids():
    doc = take_home_board().document()
    assert held(doc) == {
        "node1": {0: ["default/gpu-scheduler-check-0"], 1: ["default/gpu-scheduler-check-0"]},
        "node2": {2: ["default/gpu-scheduler-check-1"]},
        "node3": {g: ["default/gpu-scheduler-check-2"] for g in (0, 1, 2)},
        "node4": {3: ["default/gpu-scheduler-check-3", "default/gpu-scheduler-check-4"]},
    }
    shared = gpu(doc, "node4", 3)
    assert shared["exclusivity"] == "Shared"
    assert [(h["name"], h["uid"], h["sources"], h["workload"], h["phase"], h["claim"]) for h in shared["holders"]] == [
        (f"{STS}-3", "map-3", ["map"], f"default/StatefulSet/{STS}", "Running", None),
        (f"{STS}-4", "map-4", ["map"], f"default/StatefulSet/{STS}", "Running", None),
    ]
    assert flags(doc) == set()
    assert doc["summary"] == {
        "nodes": 4,
        "gpus": 32,
        "allocated": 7,
        "free": 25,
        "unhealthy": 0,
        "pending": 0,
        "flags": 0,
    }
    node1 = doc["nodes"]["node1"]
    assert node1["islands"] == [{"name": "nvl0", "gpus": [0, 1, 2, 3]}, {"name": "nvl1", "gpus": [4, 5, 6, 7]}]
    assert (node1["total"], node1["allocated"], node1["unhealthy"], node1["ready"], node1["inventory"]) == (
        8,
        2,
        0,
        True,
        True,
    )
    assert gpu(doc, "node1", 0)["inUseBy"] == ["default/gpu-scheduler-check-0"]
    assert doc["apiVersion"] == constants.BOARD_API_VERSION and doc["kind"] == "Board"
    assert doc["topology"] == {"levels": [ZONE, "node", "island"]}
    json.dumps(doc, allow_nan=False)


def test_a_claim_pod_with_its_lease_is_one_holder_of_two_sources():
    board = board_of(
        ("gpunodestatuses", inventory("node1")),
        ("pods", claim_pod("train-0", "u1", "node1:0,1")),
        ("leases", lease("node1", 0, {"u1": "default/train-0"})),
        ("leases", lease("node1", 1, {"u1": "default/train-0"})),
    )
    doc = board.document()
    for gpu_id in (0, 1):
        g = gpu(doc, "node1", gpu_id)
        assert g["exclusivity"] == "Exclusive"
        assert g["holders"] == [
            {
                "pod": "default/train-0",
                "namespace": "default",
                "name": "train-0",
                "uid": "u1",
                "sources": ["claim", "lease"],
                "claim": "train",
                "workload": "default/GpuClaim/train",
                "phase": "Running",
            }
        ]
    assert flags(doc) == {("node1", 0, "in-use-by-out-of-step"), ("node1", 1, "in-use-by-out-of-step")}


def test_finished_pods_hold_nothing_and_unbound_map_pods_hold_nothing():
    doc = board_of(
        ("gpunodestatuses", inventory("node1")),
        ("pods", map_pod(0, phase="Succeeded")),
        ("pods", map_pod(1, bound=False)),
        ("pods", claim_pod("done", "u9", "node1:5", phase="Failed")),
    ).document()
    assert held(doc) == {"node1": {}}
    assert list(doc["nodes"]) == ["node1"]


# ---- flags -------------------------------------------------------------------------------------------------------

AGREEING_USE = {0: ["default/train-0"], 3: ["default/gpu-scheduler-check-0"]}
AGREEING = [
    ("gpunodestatuses", inventory("node1", in_use=AGREEING_USE, kubelet=AGREEING_USE)),
    ("pods", claim_pod("train-0", "u1", "node1:0")),
    ("leases", lease("node1", 0, {"u1": "default/train-0"})),
    ("pods", map_pod(0, gpu_map="0=node1:3")),
]

FLAG_CASES = {
    "lease-without-allocation (gone)": (
        [("leases", lease("node1", 5, {"u9": "default/gone"}))],
        {("node1", 5, "lease-without-allocation"), ("node1", 5, "in-use-by-out-of-step")},
    ),
    "lease-without-allocation (finished)": (
        [
            ("pods", claim_pod("old", "u8", "node1:6", phase="Succeeded")),
            ("leases", lease("node1", 6, {"u8": "default/old"})),
        ],
        {("node1", 6, "lease-without-allocation"), ("node1", 6, "in-use-by-out-of-step")},
    ),
    "lease-without-allocation (another GPU)": (
        [("leases", lease("node1", 7, {"u1": "default/train-0"}))],
        {("node1", 7, "lease-without-allocation"), ("node1", 7, "in-use-by-out-of-step")},
    ),
    "allocation-without-lease": (
        [("pods", claim_pod("train-1", "u2", "node1:1", claim="other"))],
        {("node1", 1, "allocation-without-lease"), ("node1", 1, "in-use-by-out-of-step")},
    ),
    "exclusive-shared": (
        [
            ("pods", claim_pod("train-1", "u2", "node1:0", claim="other")),
            ("leases", lease("node1", 0, {"u1": "default/train-0", "u2": "default/train-1"})),
        ],
        {("node1", 0, "exclusive-shared"), ("node1", 0, "in-use-by-out-of-step")},
    ),
    "unknown-gpu": (
        [("pods", map_pod(1, gpu_map="1=node1:9"))],
        {("node1", 9, "unknown-gpu")},
    ),
    "in-use-by-out-of-step": (
        [("pods", map_pod(2, gpu_map="2=node1:4"))],
        {("node1", 4, "in-use-by-out-of-step")},
    ),
    "lease-unreadable": (
        [
            (
                "leases",
                {
                    "metadata": {
                        "name": "gpu-node1-x",
                        "namespace": constants.LEASE_NAMESPACE,
                        "labels": {
                            constants.LEASE_LABEL: constants.LEASE_LABEL_VALUE,
                            constants.LEASE_NODE_LABEL: "node1",
                        },
                    },
                    "spec": {"holderIdentity": "u1"},
                },
            )
        ],
        {("node1", None, "lease-unreadable")},
    ),
    "foreign-inventory": (
        [("gpunodestatuses", inventory("node2", spec_node="node1"))],
        {("node2", None, "foreign-inventory")},
    ),
    "kubelet-disagrees": (
        [
            (
                "gpunodestatuses",
                inventory("node1", in_use=AGREEING_USE, kubelet={**AGREEING_USE, 3: [*AGREEING_USE[3], "default/x"]}),
            )
        ],
        {("node1", 3, "kubelet-disagrees")},
    ),
}


def test_the_agreeing_case_has_no_flag():
    doc = board_of(*AGREEING).document()
    assert flags(doc) == set()
    assert doc["summary"]["flags"] == 0


@pytest.mark.parametrize("case", FLAG_CASES)
def test_each_disagreement_is_flagged(case):
    extra, expected = FLAG_CASES[case]
    doc = board_of(*AGREEING, *extra).document()
    assert flags(doc) == expected
    assert doc["summary"]["flags"] == len(expected)
    kinds = {kind for _, _, kind in expected}
    for n in doc["nodes"].values():
        for f in [*n["flags"], *(f for g in n["gpus"] for f in g["flags"])]:
            assert f["severity"] == state.FLAG_SEVERITY[f["kind"]]
            assert f["kind"] in kinds and f["message"]


def test_flag_messages_name_the_lease_and_the_pod():
    doc = board_of(*AGREEING, ("leases", lease("node1", 5, {"u9": "default/gone"}))).document()
    (message,) = [f["message"] for f in gpu(doc, "node1", 5)["flags"] if f["kind"] == "lease-without-allocation"]
    assert message == "Lease gpu-node1-5 names pod default/gone, which is gone"
    holder = gpu(doc, "node1", 5)["holders"][0]
    assert (holder["pod"], holder["sources"], holder["workload"]) == ("default/gone", ["lease"], "default/Pod/gone")


def test_a_pending_pod_named_by_a_lease_is_flagged_as_unbound_not_as_without_allocation():
    """The scheduler takes the Lease just before the bind: for that moment (or for good, when the bind failed and the
    Lease stayed) the board says so as `kubectl gpu health` does, and not as a Lease without an allocation."""
    doc = board_of(
        ("gpunodestatuses", inventory("node1", in_use={0: ["default/train-0"]})),
        ("pods", claim_pod("train-0", "u1", None)),
        ("leases", lease("node1", 0, {"u1": "default/train-0"})),
    ).document()
    assert flags(doc) == {("node1", 0, "lease-names-unbound-pod")}
    assert gpu(doc, "node1", 0)["holders"][0]["sources"] == ["lease"]
    assert gpu(doc, "node1", 0)["holders"][0]["phase"] == "Pending"


def test_a_lease_holder_without_a_name_is_shown_by_uid():
    body = lease("node1", 0, {"u7": ""})
    del body["metadata"]["annotations"][constants.LEASE_HOLDER_PODS_ANNOTATION]
    doc = board_of(("nodes", node("node1")), ("leases", body)).document()
    (holder,) = gpu(doc, "node1", 0)["holders"]
    assert (holder["pod"], holder["namespace"], holder["uid"]) == ("uid:u7", None, "u7")
    # No inventory: the GPU is listed as unknown, without an unknown-gpu flag (nothing to compare with).
    assert gpu(doc, "node1", 0)["known"] is False
    assert flags(doc) == {("node1", 0, "lease-without-allocation")}


def test_unhealthy_gpus():
    doc = board_of(("gpunodestatuses", inventory("node1", 4, unhealthy=(3,)))).document()
    assert [g["health"] for g in doc["nodes"]["node1"]["gpus"]] == ["Healthy"] * 3 + ["Unhealthy"]
    assert doc["nodes"]["node1"]["unhealthy"] == 1
    assert doc["nodes"]["node1"]["ready"] is None  # no Node object
    assert doc["summary"] == {
        "nodes": 1,
        "gpus": 4,
        "allocated": 0,
        "free": 3,
        "unhealthy": 1,
        "pending": 0,
        "flags": 0,
    }


def test_gpu_fields_are_copied_from_the_inventory():
    inv = inventory("node1", 1)
    inv["status"]["devices"][0] |= {"memoryTotalMiB": 81920, "memoryUsedMiB": 100, "utilizationPercent": 12}
    g = gpu(board_of(("gpunodestatuses", inv)).document(), "node1", 0)
    assert {k: g[k] for k in ("known", "island", "bandwidthGBps", "memoryTotalMiB", "memoryUsedMiB")} == {
        "known": True,
        "island": "nvl0",
        "bandwidthGBps": 600,
        "memoryTotalMiB": 81920,
        "memoryUsedMiB": 100,
    }
    assert (g["utilizationPercent"], g["exclusivity"], g["holders"], g["inUseBy"]) == (12, None, [], [])


# ---- pending, groups, created, strategy -------------------------------------------------------------------------


def test_pending_pods_and_claims_with_their_reasons_oldest_first():
    other = claim_pod("elsewhere", "u5", None)
    other["spec"]["schedulerName"] = "default-scheduler"
    deleting = claim_pod("deleting", "u6", None)
    deleting["metadata"]["deletionTimestamp"] = T0
    waiting_map = map_pod(3, bound=False)
    waiting_map["metadata"]["creationTimestamp"] = "2024-05-01T09:00:00Z"
    waiting_map["spec"]["priority"] = 7
    doc = board_of(
        ("pods", claim_pod("wait", "u1", None, reason="0/4 nodes have\n2 free GPUs", created="2024-05-01T11:00:00Z")),
        ("pods", waiting_map),
        ("pods", claim_pod("running", "u2", "node1:0")),
        ("pods", claim_pod("done", "u3", None, phase="Succeeded")),
        ("pods", other),
        ("pods", deleting),
        ("gpuclaims", gpu_claim("train", "Pending", "no node has 9 GPUs")),
        ("gpuclaims", gpu_claim("new")),
        ("gpuclaims", gpu_claim("failed", "Failed", "MIG is refused")),
        ("gpuclaims", gpu_claim("bound", "Bound")),
    ).document()
    assert [(p["kind"], p["name"], p["source"], p["claim"], p["reason"], p["priority"]) for p in doc["pending"]] == [
        ("Pod", f"{STS}-3", "map", None, "", 7),
        ("GpuClaim", "failed", "claim", "failed", "MIG is refused", 0),
        ("GpuClaim", "new", "claim", "new", "", 0),
        ("GpuClaim", "train", "claim", "train", "no node has 9 GPUs", 0),
        ("Pod", "wait", "claim", "train", "0/4 nodes have 2 free GPUs", 0),
    ]
    assert doc["pending"][0]["since"] == "2024-05-01T09:00:00Z" and doc["pending"][0]["namespace"] == "default"
    assert doc["summary"]["pending"] == 5


def test_pending_is_capped_and_the_summary_has_the_true_count():
    pods = [("pods", claim_pod(f"p{i:04d}", f"u{i}", None)) for i in range(state.MAX_PENDING + 20)]
    doc = board_of(*pods).document()
    assert len(doc["pending"]) == state.MAX_PENDING
    assert doc["summary"]["pending"] == state.MAX_PENDING + 20
    assert doc["pending"][0]["name"] == "p0000"


def test_pending_reason_is_one_bounded_line():
    doc = board_of(("pods", claim_pod("wait", "u1", None, reason="x\n" * 5000))).document()
    reason = doc["pending"][0]["reason"]
    assert len(reason) == state.MAX_MESSAGE and "\n" not in reason


def test_groups_by_zone_label_and_the_empty_group():
    doc = board_of(
        ("nodes", node("node2", "zone-a")),
        ("nodes", node("node1", "zone-a")),
        ("nodes", node("node3")),
        ("nodes", node("node4", "zone-b")),
        ("gpunodestatuses", inventory("node5")),  # no Node object: no labels
    ).document()
    assert doc["groups"] == [
        {"path": [""], "nodes": ["node3", "node5"]},
        {"path": ["zone-a"], "nodes": ["node1", "node2"]},
        {"path": ["zone-b"], "nodes": ["node4"]},
    ]
    assert doc["nodes"]["node1"]["path"] == ["zone-a"] and doc["nodes"]["node1"]["labels"] == {ZONE: "zone-a"}
    assert doc["nodes"]["node3"]["labels"] == {} and doc["nodes"]["node3"]["path"] == [""]


def test_groups_follow_the_configured_levels():
    rack = "example.com/rack"
    n1 = node("node1", "zone-a")
    n1["metadata"]["labels"][rack] = "r1"
    doc = board_of(("nodes", n1), ("nodes", node("node2", "zone-a")), topology_labels=(ZONE, rack)).document()
    assert doc["topology"]["levels"] == [ZONE, rack, "node", "island"]
    assert doc["groups"] == [
        {"path": ["zone-a", ""], "nodes": ["node2"]},
        {"path": ["zone-a", "r1"], "nodes": ["node1"]},
    ]


def test_node_ready_comes_from_the_ready_condition():
    doc = board_of(("nodes", node("node1", ready=False)), ("nodes", {"metadata": {"name": "node2"}})).document()
    assert (doc["nodes"]["node1"]["ready"], doc["nodes"]["node2"]["ready"]) == (False, False)


def test_created_workloads():
    made = {constants.BOARD_CREATED_LABEL: constants.BOARD_NAME}
    sts_pods = []
    for i in range(2):
        pod = map_pod(i)
        pod["metadata"]["labels"] |= made | {constants.BOARD_WORKLOAD_LABEL: STS}
        sts_pods.append(("pods", pod))
    doc = board_of(
        ("gpuclaims", gpu_claim("demo", "Bound", labels=made | {constants.BOARD_WORKLOAD_LABEL: "demo"})),
        (
            "pods",
            claim_pod("demo", "u1", "node1:0", claim="demo", labels=made | {constants.BOARD_WORKLOAD_LABEL: "demo"}),
        ),
        ("pods", claim_pod("mine", "u2", "node1:1")),  # not the board's
        *sts_pods,
    ).document()
    assert doc["created"] == [
        {
            "workload": "demo",
            "namespace": "default",
            "objects": [{"kind": "GpuClaim", "name": "demo"}, {"kind": "Pod", "name": "demo"}],
        },
        {
            "workload": STS,
            "namespace": "default",
            "objects": [
                {"kind": "Pod", "name": f"{STS}-0"},
                {"kind": "Pod", "name": f"{STS}-1"},
                {"kind": "StatefulSet", "name": STS},
            ],
        },
    ]


def test_strategy_from_the_policy_else_the_scheduler():
    assert Board(default_strategy="RoundRobin").document()["strategy"] == {
        "defaultStrategy": "RoundRobin",
        "queueOrder": constants.DEFAULT_QUEUE_ORDER,
        "source": "scheduler",
        "generation": None,
        "observedGeneration": None,
    }
    policy = {
        "metadata": {"name": "default", "generation": 2},
        "spec": {"defaultStrategy": "LeastUtilized", "queueOrder": "FIFO"},
    }
    board = board_of(("policies", policy), default_strategy="RoundRobin")
    assert board.document()["strategy"] == {
        "defaultStrategy": "LeastUtilized",
        "queueOrder": "FIFO",
        "source": "policy",
        "generation": 2,
        "observedGeneration": None,
    }
    observed = copy.deepcopy(policy) | {
        "status": {"observedGeneration": 1, "strategy": "BestFit", "queueOrder": "Priority"}
    }
    board.apply("policies", "MODIFIED", observed, policy)
    assert board.document()["strategy"] == {
        "defaultStrategy": "BestFit",
        "queueOrder": "Priority",
        "source": "policy",
        "generation": 2,
        "observedGeneration": 1,
    }
    assert board.take_changes() == Changes(strategy=True)
    board.apply("policies", "DELETED", observed, observed)
    assert board.document()["strategy"]["source"] == "scheduler"
    board.apply("policies", "ADDED", {"metadata": {"name": "other"}, "spec": {"defaultStrategy": "BestFit"}}, None)
    assert board.document()["strategy"]["defaultStrategy"] == "RoundRobin"


# ---- changes and patches -----------------------------------------------------------------------------------------


def test_a_pod_bound_on_node2_changes_node2_only():
    board = take_home_board()
    assert board.take_changes() is not None and board.version == 1
    assert board.take_changes() is None and board.version == 1
    pod = claim_pod("late", "u1", None)
    board.apply("pods", "ADDED", pod, None)
    assert board.take_changes() == Changes(pending=True)
    bound = claim_pod("late", "u1", "node2:5")
    board.apply("pods", "MODIFIED", bound, pod)
    changes = board.take_changes()
    assert changes == Changes(nodes={"node2"}, pending=True)
    assert board.version == 3
    patch = board.patch(changes)
    assert set(patch) == {"apiVersion", "kind", "version", "summary", "nodes", "pending"}
    assert patch["kind"] == "BoardPatch" and patch["version"] == 3 and patch["pending"] == []
    assert list(patch["nodes"]) == ["node2"]
    assert [h["pod"] for h in gpu(patch, "node2", 5)["holders"]] == ["default/late"]
    assert patch["summary"]["allocated"] == 8


def test_an_unchanged_or_irrelevant_update_changes_nothing():
    board = take_home_board()
    board.take_changes()
    pod = map_pod(1)
    noisy = copy.deepcopy(pod)
    noisy["metadata"]["resourceVersion"] = "99"
    noisy["status"]["podIP"] = "10.0.0.9"
    board.apply("pods", "MODIFIED", noisy, pod)
    board.apply("nodes", "MODIFIED", node("node1", "zone-a") | {"spec": {"podCIDR": "x"}}, None)
    renewed = lease("node9", 0, {})
    board.apply("leases", "ADDED", renewed, None)
    board.take_changes()
    renewed["metadata"]["resourceVersion"] = "7"
    board.apply("leases", "MODIFIED", renewed, None)
    assert board.take_changes() is None


def test_a_label_change_on_a_node_changes_the_groups():
    board = take_home_board()
    board.take_changes()
    board.apply("nodes", "MODIFIED", node("node3", "zone-b"), node("node3"))
    changes = board.take_changes()
    assert changes == Changes(nodes={"node3"}, groups=True)
    patch = board.patch(changes)
    assert patch["groups"] == [
        {"path": [""], "nodes": ["node4"]},
        {"path": ["zone-a"], "nodes": ["node1", "node2"]},
        {"path": ["zone-b"], "nodes": ["node3"]},
    ]
    assert patch["nodes"]["node3"]["path"] == ["zone-b"]


def test_a_lease_change_reaches_the_node_of_its_pod_and_a_pod_change_the_nodes_of_its_leases():
    board = board_of(("gpunodestatuses", inventory("node1")), ("gpunodestatuses", inventory("node2")))
    board.take_changes()
    board.apply("leases", "ADDED", lease("node2", 0, {"u1": "default/train-0"}), None)
    assert board.take_changes() == Changes(nodes={"node2"})
    board.apply("pods", "ADDED", claim_pod("train-0", "u1", "node1:0"), None)
    assert board.take_changes() == Changes(nodes={"node1", "node2"})  # node2's Lease now names a known pod


def test_deleting_objects_removes_holders_and_nodes_nothing_names():
    board = take_home_board()
    board.apply("leases", "ADDED", lease("node9", 0, {"u1": "default/x"}), None)
    board.apply("pods", "ADDED", claim_pod("x", "u1", "node8:1"), None)
    assert {"node8", "node9"} <= set(board.document()["nodes"])
    board.take_changes()
    board.apply("pods", "DELETED", map_pod(3), map_pod(3))
    board.apply("pods", "DELETED", claim_pod("x", "u1", "node8:1"), None)
    board.apply("leases", "DELETED", lease("node9", 0, {"u1": "default/x"}), None)
    changes = board.take_changes()
    assert changes == Changes(nodes={"node4", "node8", "node9"}, groups=True)
    patch = board.patch(changes)
    assert patch["nodes"]["node8"] is None and patch["nodes"]["node9"] is None
    assert [h["pod"] for h in gpu(patch, "node4", 3)["holders"]] == [f"default/{STS}-4"]
    board.apply("nodes", "DELETED", node("node1", "zone-a"), None)
    board.apply("gpunodestatuses", "DELETED", inventory("node1"), None)
    assert held(board.document())["node1"] == {0: [f"default/{STS}-0"], 1: [f"default/{STS}-0"]}  # still held
    board.apply("pods", "DELETED", map_pod(0), None)
    doc = board.document()
    assert "node1" not in doc["nodes"] and all("node1" not in g["nodes"] for g in doc["groups"])
    assert doc["summary"]["nodes"] == 3 and doc["summary"]["gpus"] == 24


def test_changes_merge():
    a = Changes(nodes={"n1"}, pending=True)
    b = Changes(nodes={"n2"}, groups=True)
    assert a.merge(b) == Changes(nodes={"n1", "n2"}, groups=True, pending=True)
    assert a == Changes(nodes={"n1"}, pending=True) and not Changes() and a


def test_the_document_reuses_unchanged_node_documents():
    board = take_home_board()
    before = board.document()
    board.apply("pods", "DELETED", map_pod(1), None)
    after = board.document()
    assert after["nodes"]["node1"] is before["nodes"]["node1"]
    assert after["nodes"]["node2"] is not before["nodes"]["node2"]


# ---- hostile objects ---------------------------------------------------------------------------------------------


def test_hostile_annotations_and_labels_hold_nothing_and_raise_nothing():
    huge = map_pod(0, gpu_map="0=node1:0\n" + "x" * 300_000, node_name="node1")
    bad_alloc = claim_pod("bad", "u1", "node1:a,b")
    many = claim_pod("many", "u2", "node1:" + ",".join(str(i) for i in range(900)))
    unicode_gpu = lease("node1", 0, {"u3": "default/x"})
    unicode_gpu["metadata"]["labels"][constants.LEASE_GPU_LABEL] = "²"
    garbage = lease("node1", 1, {"u4": "default/y"})
    garbage["metadata"]["labels"] = {constants.LEASE_LABEL: constants.LEASE_LABEL_VALUE, "x": 5, 7: "y"}
    garbage["metadata"]["annotations"] = ["not", "a", "map"]
    garbage["metadata"]["name"] = "weird"
    not_ours = lease("node1", 2, {"u5": "default/z"})
    not_ours["metadata"]["labels"].pop(constants.LEASE_LABEL)
    board = board_of(
        ("gpunodestatuses", inventory("node1")),
        ("pods", huge),
        ("pods", bad_alloc),
        ("pods", many),
        ("leases", unicode_gpu),
        ("leases", garbage),
        ("leases", not_ours),
    )
    doc = board.document()
    json.dumps(doc, allow_nan=False)
    node1 = held(doc)["node1"]
    assert len(node1) == state.MAX_GPUS_PER_HOLD and all(who == ["default/many"] for who in node1.values())
    assert ("node1", None, "lease-unreadable") in flags(doc)  # the unreadable GPU label, shown on its node
    # The Lease with no node at all is counted, though no node can show it.
    assert doc["summary"]["flags"] == len(flags(doc)) + 1


def test_objects_of_the_wrong_shape_are_ignored():
    board = Board()
    for resource in (*state.RESOURCES, "unknown"):
        for obj in ({}, {"metadata": None}, {"metadata": {"name": 5}}, [], "x", None):
            board.apply(resource, "ADDED", obj, None)  # type: ignore[arg-type]
            board.apply(resource, "DELETED", obj, None)  # type: ignore[arg-type]
    assert board.document()["nodes"] == {}


# ---- properties --------------------------------------------------------------------------------------------------

NODES = ("n1", "n2", "n3")
UIDS = ("u0", "u1", "u2", "u3")
MAPS = ("0=n1:0,1\n1=n2:2\n2=n3:0\n3=n1:1\n4=n1:9", "0=n2:0\n1=n2:0", "oops")


@st.composite
def a_node(draw: st.DrawFn, name: str) -> dict[str, Any]:
    return node(name, draw(st.sampled_from([None, "a", "b"])), draw(st.booleans()))


@st.composite
def a_status(draw: st.DrawFn, name: str) -> dict[str, Any]:
    count = draw(st.integers(0, 4))
    holders = st.lists(st.sampled_from(["ns/p0", "ns/p1", "ns/p2", "u3"]), max_size=2, unique=True)
    in_use = {g: draw(holders) for g in range(count)}
    return inventory(
        name,
        count,
        unhealthy=tuple(draw(st.lists(st.integers(0, 3), max_size=2))),
        in_use=in_use,
        spec_node=draw(st.sampled_from([None, None, "n1"])),
    )


@st.composite
def a_pod(draw: st.DrawFn, name: str) -> dict[str, Any]:
    uid = draw(st.sampled_from(UIDS))
    annotations: dict[str, str] = {}
    if draw(st.booleans()):
        annotations[constants.MAP_ANNOTATION] = draw(st.sampled_from(MAPS))
    else:
        annotations[constants.CLAIM_ANNOTATION] = draw(st.sampled_from(["c0", "c1"]))
    node_name = draw(st.sampled_from([None, *NODES]))
    if node_name and constants.CLAIM_ANNOTATION in annotations:
        ids = draw(st.lists(st.integers(0, 4), min_size=1, max_size=2, unique=True))
        annotations[constants.ALLOCATED_ANNOTATION] = f"{node_name}:{','.join(map(str, ids))}"
        annotations[constants.EXCLUSIVITY_ANNOTATION] = draw(st.sampled_from(["Exclusive", "Shared"]))
    if draw(st.booleans()):
        annotations[constants.GANG_ANNOTATION] = draw(st.sampled_from(["g", "h", "Bad_Name"]))
    if draw(st.booleans()):
        annotations[constants.GANG_MIN_MEMBERS_ANNOTATION] = draw(st.sampled_from(["1", "2", "3", "x"]))
    labels = {}
    if draw(st.booleans()):
        labels = {constants.BOARD_CREATED_LABEL: constants.BOARD_NAME, constants.BOARD_WORKLOAD_LABEL: "w"}
    pod: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": uid,
            "annotations": annotations,
            "labels": labels,
            "creationTimestamp": draw(st.sampled_from([T0, "2024-05-01T09:00:00Z"])),
        },
        "spec": {"schedulerName": draw(st.sampled_from(["gpu-scheduler", "other"]))},
        "status": {"phase": draw(st.sampled_from(["Pending", "Running", "Succeeded"]))},
    }
    if node_name:
        pod["spec"]["nodeName"] = node_name
    elif draw(st.booleans()):
        message = draw(st.sampled_from(["waits", "does not fit"]))
        pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "message": message}]
    if draw(st.booleans()):
        pod["metadata"]["ownerReferences"] = [{"kind": "StatefulSet", "name": "s", "controller": True}]
    return pod


@st.composite
def a_lease(draw: st.DrawFn, name: str) -> dict[str, Any]:
    node_name, gpu_id = name.split("-")[1], int(name.split("-")[2])
    holders = draw(st.lists(st.sampled_from(UIDS), max_size=2, unique=True))
    body = lease(node_name, gpu_id, {u: f"ns/p{u[1]}" for u in holders}, draw(st.sampled_from(["Exclusive", "Shared"])))
    if draw(st.integers(0, 5)) == 0:
        body["metadata"]["labels"].pop(constants.LEASE_GPU_LABEL)
    return body


@st.composite
def a_claim(draw: st.DrawFn, name: str) -> dict[str, Any]:
    labels = {constants.BOARD_CREATED_LABEL: constants.BOARD_NAME} if draw(st.booleans()) else {}
    claim = gpu_claim(
        name, draw(st.sampled_from([None, "Pending", "Bound", "Failed"])), draw(st.sampled_from(["", "no"])), labels
    )
    claim["metadata"]["namespace"] = "ns"
    gang_ref = draw(st.sampled_from([None, None, "g", "h", 7]))
    if gang_ref is not None:
        claim["spec"]["gangRef"] = gang_ref
    return claim


@st.composite
def a_policy(draw: st.DrawFn, name: str) -> dict[str, Any]:
    policy: dict[str, Any] = {
        "metadata": {"name": name, "generation": 1},
        "spec": {"defaultStrategy": draw(st.sampled_from(constants.STRATEGIES))},
    }
    if draw(st.booleans()):
        policy["status"] = {"observedGeneration": 1, "strategy": "RoundRobin"}
    return policy


UNIVERSE: dict[str, tuple[Any, tuple[str, ...]]] = {
    "nodes": (a_node, NODES),
    "gpunodestatuses": (a_status, NODES),
    "pods": (a_pod, ("p0", "p1", "p2", "p3", "p4")),
    "leases": (a_lease, ("gpu-n1-0", "gpu-n1-1", "gpu-n2-0", "gpu-n3-9")),
    "gpuclaims": (a_claim, ("c0", "c1")),
    "policies": (a_policy, ("default",)),
}


@st.composite
def events(draw: st.DrawFn) -> list[tuple[str, str, dict[str, Any], bool]]:
    """(resource, event, object, take changes after it)."""
    out = []
    for _ in range(draw(st.integers(1, 40))):
        resource = draw(st.sampled_from(sorted(UNIVERSE)))
        make, names = UNIVERSE[resource]
        obj = draw(make(draw(st.sampled_from(names))))
        event = draw(st.sampled_from(["ADDED", "MODIFIED", "MODIFIED", "DELETED"]))
        out.append((resource, event, obj, draw(st.integers(0, 3)) == 0))
    return out


def _key(resource: str, obj: dict[str, Any]) -> tuple[str, str]:
    return (resource, f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}")


def _apply_patch(client: dict[str, Any], patch: dict[str, Any]) -> None:
    for name, doc in patch["nodes"].items():
        if doc is None:
            client["nodes"].pop(name, None)
        else:
            client["nodes"][name] = doc
    for part in ("summary", "groups", "pending", "strategy", "created", "gangs", "version"):
        if part in patch:
            client[part] = patch[part]


def _without_version(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != "version"}


@settings(FUZZ, max_examples=200)
@given(events())
def test_incremental_events_give_the_board_of_the_final_objects(sequence):
    board = Board()
    client = copy.deepcopy(board.document())
    final: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
    for resource, event, obj, take in sequence:
        key = _key(resource, obj)
        if event == "DELETED":
            gone = final.pop(key, None)
            board.apply(resource, event, gone[1] if gone else obj, gone[1] if gone else None)
        else:
            board.apply(resource, event, obj, final.get(key, (None, None))[1])
            final[key] = (resource, obj)
        if take:
            changes = board.take_changes()
            if changes is not None:
                _apply_patch(client, copy.deepcopy(board.patch(changes)))
    fresh = Board()
    for resource, obj in final.values():
        fresh.apply(resource, "ADDED", obj, None)
    assert _without_version(board.document()) == _without_version(fresh.document())
    changes = board.take_changes()
    if changes is not None:
        _apply_patch(client, board.patch(changes))
    assert client == board.document()
    assert board.take_changes() is None


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)

FIELDS = [
    (),
    ("metadata",),
    ("metadata", "name"),
    ("metadata", "namespace"),
    ("metadata", "uid"),
    ("metadata", "labels"),
    ("metadata", "labels", ZONE),
    ("metadata", "labels", constants.LEASE_GPU_LABEL),
    ("metadata", "labels", constants.LEASE_NODE_LABEL),
    ("metadata", "labels", constants.BOARD_CREATED_LABEL),
    ("metadata", "annotations"),
    ("metadata", "annotations", constants.MAP_ANNOTATION),
    ("metadata", "annotations", constants.ALLOCATED_ANNOTATION),
    ("metadata", "annotations", constants.LEASE_HOLDERS_ANNOTATION),
    ("metadata", "annotations", constants.LEASE_HOLDER_PODS_ANNOTATION),
    ("metadata", "ownerReferences"),
    ("metadata", "creationTimestamp"),
    ("metadata", "generation"),
    ("spec",),
    ("spec", "nodeName"),
    ("spec", "priority"),
    ("spec", "holderIdentity"),
    ("spec", "defaultStrategy"),
    ("spec", "gangRef"),
    ("metadata", "annotations", constants.GANG_ANNOTATION),
    ("metadata", "annotations", constants.GANG_MIN_MEMBERS_ANNOTATION),
    ("status",),
    ("status", "phase"),
    ("status", "message"),
    ("status", "conditions"),
    ("status", "devices"),
    ("status", "observedGeneration"),
    ("status", "strategy"),
]


def _set(obj: Any, path: tuple[str, ...], value: Any) -> Any:
    if not path:
        return value
    if isinstance(obj, dict):
        obj[path[0]] = _set(obj.get(path[0], {}), path[1:], value)
    return obj


@st.composite
def hostile(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    resource = draw(st.sampled_from(sorted(UNIVERSE)))
    make, names = UNIVERSE[resource]
    obj: Any = draw(make(draw(st.sampled_from(names))))
    if resource == "gpunodestatuses" and obj["status"]["devices"] and draw(st.booleans()):
        field = draw(st.sampled_from(["id", "health", "island", "bandwidthGBps", "memoryTotalMiB", "inUseBy"]))
        obj["status"]["devices"][0][field] = draw(JSON_VALUES)
    for _ in range(draw(st.integers(1, 3))):
        obj = _set(obj, draw(st.sampled_from(FIELDS)), draw(JSON_VALUES))
    return resource, obj


@settings(FUZZ, max_examples=200)
@given(st.lists(hostile(), min_size=1, max_size=12), st.data())
def test_objects_with_wrong_typed_fields_never_raise_and_give_json(objs, data):
    board = Board()
    for resource, obj in objs:
        board.apply(resource, data.draw(st.sampled_from(["ADDED", "MODIFIED", "DELETED"])), obj, None)
        changes = board.take_changes()
        if changes is not None:
            json.dumps(board.patch(changes), allow_nan=False)
    json.dumps(board.document(), allow_nan=False)
