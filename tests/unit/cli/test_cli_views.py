"""What kubectl-gpu computes from plain objects: GPUs held and free per node, the node and claim rows, pending pods,
the policy and leader, and whether the GPU Leases agree with the pods' allocations."""

import datetime
from typing import Any

from gpu_scheduling import constants
from gpu_scheduling.claims import objects, occupancy
from gpu_scheduling.cli import health, views

NOW = datetime.datetime(2024, 5, 1, 12, 0, 0, tzinfo=datetime.UTC)


def inventory(node: str, devices: list[dict], spec_node: str | None = None) -> dict:
    return {
        "metadata": {"name": node, "creationTimestamp": "2024-05-01T10:00:00Z"},
        "spec": {"nodeName": spec_node or node},
        "status": {"devices": devices},
    }


def device(i: int, island: str = "a", health: str = "Healthy", **extra) -> dict:
    return {"id": i, "island": island, "health": health, **extra}


def node(name: str, created: str = "2024-04-29T12:00:00Z") -> dict:
    return {"metadata": {"name": name, "creationTimestamp": created}}


def claim_pod(name: str, uid: str, allocated: str | None, *, phase: str = "Running", claim: str = "c") -> dict:
    annotations = {constants.CLAIM_ANNOTATION: claim}
    if allocated:
        annotations[constants.ALLOCATED_ANNOTATION] = allocated
    spec = {"schedulerName": "gpu-scheduler"}
    if allocated:
        spec["nodeName"] = allocated.split(":")[0]
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": uid, "annotations": annotations},
        "spec": spec,
        "status": {"phase": phase},
    }


def map_pod(name: str, uid: str, gpu_map: str, node_name: str | None) -> dict:
    spec = {"schedulerName": "gpu-scheduler", **({"nodeName": node_name} if node_name else {})}
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": uid, "annotations": {constants.MAP_ANNOTATION: gpu_map}},
        "spec": spec,
        "status": {"phase": "Running" if node_name else "Pending"},
    }


def lease(node_name: str, gpu: int, holders: dict[str, str]) -> dict:
    return objects.lease_body(node_name, gpu, "Exclusive", holders)


def test_holders_come_from_leases_claim_pods_and_bound_map_pods():
    pods = [
        claim_pod("train", "u1", "node1:0,1"),
        map_pod("check-2", "u2", "2=node1:2,3", "node1"),
        map_pod("check-3", "u3", "3=node1:4", None),  # not bound: holds nothing
        claim_pod("done", "u4", "node1:5", phase="Succeeded"),  # finished: holds nothing
    ]
    model = occupancy.cluster((), pods, [lease("node1", 0, {"u1": "ns/train"}), lease("node1", 7, {"u9": "ns/gone"})])
    held = {gpu.id: sorted(h.pod for h in gpu.holders) for gpu in model.nodes["node1"].gpus if gpu.holders}
    assert held == {
        0: ["ns/train"],
        1: ["ns/train"],
        2: ["ns/check-2"],
        3: ["ns/check-2"],
        7: ["ns/gone"],
    }


def test_node_view_counts_free_allocated_unhealthy_islands_utilization_memory():
    devices = [
        device(0, "a", utilizationPercent=40, memoryTotalMiB=81920, memoryUsedMiB=40960),
        device(1, "a", utilizationPercent=60, memoryTotalMiB=81920, memoryUsedMiB=0),
        device(2, "b", health="Unhealthy", utilizationPercent=100, memoryTotalMiB=81920, memoryUsedMiB=0),
        device(3, "b"),
    ]
    leases = [lease("node1", 0, {"u1": "ns/train"}), lease("node1", 2, {"u1": "ns/train"})]
    pods = [claim_pod("train", "u1", "node1:0,2")]
    [view] = views.node_views([inventory("node1", devices)], [node("node1")], leases, pods)
    assert (view.total, view.free, view.allocated, view.unhealthy) == (4, 2, 2, 1)
    assert view.islands == {"a": (1, 2), "b": (1, 2)}
    assert view.utilization == 50  # healthy GPUs only
    assert (view.memory_used_mib, view.memory_total_mib) == (40960, 245760)
    assert view.unhealthy_ids == (2,) and view.exists
    assert views.node_row(view, NOW, wide=False) == ["node1", "4", "2", "1", "2", "50%", "2d"]
    assert views.node_row(view, NOW, wide=True)[7:] == ["40/240GiB", "a=1,b=1"]


def test_node_view_without_utilization_or_memory_or_node():
    [view] = views.node_views([inventory("node9", [device(0)])], [])
    assert views.node_row(view, NOW, wide=True) == ["node9", "1", "1", "0", "1", "-", "<no node>", "-", "a=1"]
    assert not view.exists


def test_inventories_naming_another_node_are_left_out_and_views_are_sorted():
    found = views.node_views(
        [inventory("node2", [device(0)]), inventory("node1", [device(0)]), inventory("evil", [device(0)], "node3")],
        [node("node1"), node("node2")],
    )
    assert [v.name for v in found] == ["node1", "node2"]


def test_claim_rows_and_headers():
    bound = {
        "metadata": {"name": "train", "namespace": "ml", "creationTimestamp": "2024-05-01T11:59:15Z"},
        "spec": {"devices": {"count": 2}},
        "status": {
            "phase": "Bound",
            "nodeName": "node2",
            "gpuIds": [0, 1],
            "strategy": "BestFit",
            "message": "allocated\n 2 GPUs",
        },
    }
    waiting = {
        "metadata": {"name": "big", "namespace": "ml", "creationTimestamp": "2024-05-01T11:00:00Z"},
        "spec": {"devices": {"count": 8}, "strategy": "RoundRobin"},
    }
    pods = views.pods_by_claim(
        [claim_pod("train-1", "a", None, claim="train"), claim_pod("train-0", "b", None, claim="train")]
    )
    assert pods == {("ns", "train"): ["train-0", "train-1"]}
    pods = {("ml", "train"): ["train-0", "train-1"]}
    row = views.claim_row(bound, NOW, all_namespaces=False, wide=False, pods=pods)
    assert row == ["train", "Bound", "node2", "0,1", "BestFit", "45s"]
    row = views.claim_row(waiting, NOW, all_namespaces=True, wide=True, pods=pods)
    assert row == ["ml", "big", "<none>", "<none>", "(8)", "RoundRobin", "60m", "<none>", "<none>"]
    row = views.claim_row(bound, NOW, all_namespaces=True, wide=True, pods=pods)
    assert row[-2:] == ["train-0,train-1", "allocated 2 GPUs"]
    assert views.claim_headers(True, True) == [
        "NAMESPACE", "NAME", "PHASE", "NODE", "GPUS", "STRATEGY", "AGE", "PODS", "MESSAGE"
    ]  # fmt: skip
    assert views.claim_strategy({"spec": {}}) == "<default>"
    assert views.phase_counts([bound, waiting]) == {"Pending": 0, "Reserved": 0, "Bound": 1, "Failed": 0, "<none>": 1}


def test_pending_pods_and_why():
    unschedulable = map_pod("check-3", "u3", "3=node4:3", None)
    unschedulable["metadata"]["creationTimestamp"] = "2024-05-01T11:00:00Z"
    unschedulable["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "GPU 3 is\nheld"}
    ]
    fresh = claim_pod("new-0", "u5", None, claim="new")
    fresh["metadata"]["creationTimestamp"] = "2024-05-01T11:30:00Z"
    fresh["metadata"]["namespace"] = "other"
    deleting = claim_pod("bye", "u6", None)
    deleting["metadata"]["deletionTimestamp"] = "2024-05-01T11:59:00Z"
    pods = [fresh, claim_pod("bound", "u1", "node1:0"), unschedulable, deleting]
    assert [p["metadata"]["name"] for p in views.pending_pods(pods, None)] == ["check-3", "new-0"]
    assert [p["metadata"]["name"] for p in views.pending_pods(pods, "other")] == ["new-0"]
    assert views.why_pending(unschedulable) == "GPU 3 is held"
    assert views.why_pending(fresh) == "<none>"
    assert (views.gpu_source(unschedulable), views.gpu_source(fresh)) == ("map", "claim/new")


def test_policy_view():
    assert not views.policy_view(None).exists
    policy = {
        "metadata": {"name": "default", "generation": 3},
        "spec": {"defaultStrategy": "LeastUtilized", "queueOrder": "FIFO"},
        "status": {"observedGeneration": 2, "strategy": "BestFit", "queueOrder": "Priority"},
    }
    view = views.policy_view(policy)
    assert (view.generation, view.observed, view.up_to_date) == (3, 2, False)
    assert view.observed_text() == "generation 3, scheduler still applies generation 2"
    policy["status"]["observedGeneration"] = 3
    assert views.policy_view(policy).up_to_date
    del policy["status"]
    assert views.policy_view(policy).observed_text() == "generation 3, not observed by a scheduler yet"


def test_leader_view():
    lease_obj = {"spec": {"holderIdentity": "a", "renewTime": "2024-05-01T11:59:57.000000Z", "leaseDurationSeconds": 8}}
    view = views.leader_view(lease_obj, NOW)
    assert view is not None and view.current and view.text() == "a (renewed 3s ago, lease 8s)"
    lease_obj["spec"]["renewTime"] = "2024-05-01T11:59:50.000000Z"
    assert not views.leader_view(lease_obj, NOW).current
    lease_obj["spec"]["holderIdentity"] = ""
    assert views.leader_view(lease_obj, NOW).text() == "none (the leader Lease is released)"
    assert views.leader_view(None, NOW) is None


def lease_checks(leases: list[dict[str, Any]], pods: list[dict[str, Any]]) -> list[str]:
    """What `kubectl gpu health` says under gpu-leases: the Lease and allocation findings, in its words."""
    return [c.detail for c in health.occupancy_checks([], leases, pods) if c.name == "gpu-leases"]


def test_leases_that_agree_with_allocations_have_no_findings():
    pods = [claim_pod("train", "u1", "node1:0,1"), map_pod("check-2", "u2", "2=node1:2", "node1")]
    leases = [lease("node1", 0, {"u1": "ns/train"}), lease("node1", 1, {"u1": "ns/train"})]
    assert lease_checks(leases, pods) == []


def test_lease_findings():
    pods = [
        claim_pod("train", "u1", "node1:0,1"),  # GPU 1 has no Lease
        claim_pod("done", "u4", "node2:0", phase="Failed"),
        claim_pod("moved", "u5", "node3:1"),
    ]
    leases = [
        lease("node1", 0, {"u1": "ns/train"}),
        lease("node1", 5, {"u9": "ns/gone"}),  # its pod is gone
        lease("node2", 0, {"u4": "ns/done"}),  # its pod finished
        lease("node3", 2, {"u5": "ns/moved"}),  # its pod holds GPU 1, not 2
        lease("node3", 1, {"u5": "ns/moved"}),
    ]
    broken = {"metadata": {"name": "gpu-x", "labels": {constants.LEASE_LABEL: "gpu"}}, "spec": {}}
    assert lease_checks([*leases, broken], pods) == [
        "Lease gpu-node1-5 (node1 GPU 5) names pod ns/gone, which is gone or finished",
        "Lease gpu-node2-0 (node2 GPU 0) names pod ns/done, which is gone or finished",
        "Lease gpu-node3-2 (node3 GPU 2) names pod ns/moved, whose allocation is node3:1",
        "Lease gpu-x carries the GPU Lease label but no node or GPU label",
        "pod ns/train holds GPU 1 of node1 (gpu.scheduling/allocated), but no Lease names it",
    ]
