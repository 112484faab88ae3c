"""The scheduler's decision for one pod against plain node dicts."""

import pytest

from gpu_scheduling.scheduler import decision

TAKE_HOME = "0=node1:0,1\n1=node2:2\n2=node3:0,1,2\n3=node4:3\n4=node4:3\n"


def node(name, ready=True, unschedulable=False, taints=None):
    return {
        "metadata": {"name": name},
        "spec": {"unschedulable": unschedulable, "taints": taints or []},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                   "reason": "KubeletReady" if ready else "KubeletNotReady"}]},
    }


def pod(name="check-3", annotation=TAKE_HOME, tolerations=None, **spec):
    meta = {"name": name, "namespace": "default", "uid": "u"}
    if annotation is not None:
        meta["annotations"] = {"gpu-scheduling-map": annotation}
    return {"metadata": meta, "spec": {"schedulerName": "gpu-scheduler", "tolerations": tolerations or [], **spec}}


NODES = {f"node{i}": node(f"node{i}") for i in range(1, 5)}


@pytest.mark.parametrize("index, target", [(0, "node1"), (1, "node2"), (2, "node3"), (3, "node4"), (4, "node4")])
def test_take_home_placement(index, target):
    verdict = decision.decide(pod(f"gpu-scheduler-check-{index}"), NODES)
    assert verdict == decision.Bind(target, verdict.entry) and verdict.entry.node == target


@pytest.mark.parametrize(
    "nodes, fragment",
    [
        ({}, "node node4 from map entry 3=node4:3 does not exist"),
        ({"node4": node("node4", ready=False)}, "node node4 is not Ready (KubeletNotReady) (map entry 3)"),
        ({"node4": node("node4", unschedulable=True)}, "node node4 is cordoned"),
        ({"node4": node("node4", taints=[{"key": "gpu", "value": "broken", "effect": "NoSchedule"}])},
         "node node4 has taint gpu=broken:NoSchedule that the pod does not tolerate"),
        ({"node4": node("node4", taints=[{"key": "down", "effect": "NoExecute"}])}, "taint down:NoExecute"),
    ],
)
def test_unschedulable_waits_for_the_node(nodes, fragment):
    verdict = decision.decide(pod(), nodes)
    assert isinstance(verdict, decision.Unschedulable)
    assert fragment in verdict.message and verdict.node == "node4"


def test_prefer_no_schedule_taint_does_not_block():
    nodes = {"node4": node("node4", taints=[{"key": "soft", "effect": "PreferNoSchedule"}])}
    assert isinstance(decision.decide(pod(), nodes), decision.Bind)


@pytest.mark.parametrize(
    "toleration",
    [
        {"key": "gpu", "operator": "Equal", "value": "broken", "effect": "NoSchedule"},
        {"key": "gpu", "operator": "Exists"},
        {"operator": "Exists"},
        {"key": "gpu", "value": "broken"},
    ],
)
def test_tolerated_taints_allow_binding(toleration):
    nodes = {"node4": node("node4", taints=[{"key": "gpu", "value": "broken", "effect": "NoSchedule"}])}
    assert isinstance(decision.decide(pod(tolerations=[toleration]), nodes), decision.Bind)


@pytest.mark.parametrize(
    "toleration",
    [
        {"key": "gpu", "operator": "Equal", "value": "ok", "effect": "NoSchedule"},
        {"key": "gpu", "operator": "Exists", "effect": "NoExecute"},
        {"key": "other", "operator": "Exists"},
        {"operator": "Equal"},
    ],
)
def test_non_matching_tolerations(toleration):
    nodes = {"node4": node("node4", taints=[{"key": "gpu", "value": "broken", "effect": "NoSchedule"}])}
    assert isinstance(decision.decide(pod(tolerations=[toleration]), nodes), decision.Unschedulable)


def test_bad_map_is_unschedulable_without_a_node_to_wait_for():
    verdict = decision.decide(pod(annotation="3=node4"), NODES)
    assert isinstance(verdict, decision.Unschedulable) and verdict.node is None and "line 1" in verdict.message


def test_missing_annotation_is_unschedulable():
    verdict = decision.decide(pod(annotation=None), NODES)
    assert isinstance(verdict, decision.Unschedulable) and "no gpu-scheduling-map annotation" in verdict.message


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({}, True),
        ({"spec": {"schedulerName": "default-scheduler"}}, False),
        ({"spec": {"schedulerName": "gpu-scheduler", "nodeName": "node1"}}, False),
        ({"metadata": {"name": "p-0", "deletionTimestamp": "2026-01-01T00:00:00Z"}}, False),
        ({"status": {"phase": "Succeeded"}}, False),
        ({"status": {"phase": "Failed"}}, False),
    ],
)
def test_is_schedulable_pod(changes, expected):
    p = {"metadata": {"name": "p-0"}, "spec": {"schedulerName": "gpu-scheduler"}, "status": {"phase": "Pending"}}
    p.update(changes)
    assert decision.is_schedulable_pod(p, "gpu-scheduler") is expected
