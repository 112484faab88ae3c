"""Where the scheduler binds and why it waits (placement.feature, control-plane tier): missing, cordoned and
tainted nodes, and the pods it must leave alone."""

from __future__ import annotations

from pytest_bdd import given, scenarios, then, when

from features.support import World, assert_cuda, bind_counts, cuda_values, get_pod, pod_body, step
from gpu_scheduling.kube import paths

scenarios("placement.feature")


@given(step('the node "{node:q}" is cordoned'))
def cordon(world: World, node: str) -> None:
    world.api.patch(paths.node(node), {"spec": {"unschedulable": True}})
    world.node_undo.append((node, {"spec": {"unschedulable": None}}))


@given(step('the node "{node:q}" has the taint "{key}={value}:{effect}"'))
def taint(world: World, node: str, key: str, value: str, effect: str) -> None:
    current = world.api.get(paths.node(node))["spec"].get("taints") or []
    world.api.patch(
        paths.node(node), {"spec": {"taints": [*current, {"key": key, "value": value, "effect": effect}]}}, kind="merge"
    )
    world.node_undo.append((node, {"spec": {"taints": current or None}}))


@when(step('the pod "{name:q}" tolerating "{key:q}" is created with the map "{gpu_map:q}"'))
def create_tolerating_pod(world: World, name: str, key: str, gpu_map: str) -> None:
    body = pod_body(name, gpu_map=gpu_map, tolerations=[{"key": key, "operator": "Exists"}])
    world.attempt(lambda: world.api.create(paths.pods(world.namespace), body))


@when(step('the pod "{name:q}" for scheduler "{scheduler:q}" is created with the map "{gpu_map:q}"'))
def create_pod_for_scheduler(world: World, name: str, scheduler: str, gpu_map: str) -> None:
    world.api.create(paths.pods(world.namespace), pod_body(name, gpu_map=gpu_map, scheduler=scheduler))
    world.error = None


@when(step('the node "{node:q}" joins the cluster'))
def node_joins(world: World, node: str) -> None:
    assert world.cluster.cp is not None
    world.cluster.cp.add_node(node)
    world.added_nodes.append(node)


@when(step('the node "{node:q}" is uncordoned'))
def uncordon(world: World, node: str) -> None:
    world.api.patch(paths.node(node), {"spec": {"unschedulable": None}})


@then(step('the pod "{name:q}" is not bound and has CUDA_VISIBLE_DEVICES "{devices:q}"'))
def not_bound_with_cuda(world: World, name: str, devices: str) -> None:
    pod = get_pod(world, name)
    assert not pod["spec"].get("nodeName"), pod["spec"].get("nodeName")
    assert_cuda(pod, devices)
    assert bind_counts(world, range(1000))[name] == 0, "gpu-scheduler tried to bind it"


@then(step('the pod "{name:q}" is not bound, has no CUDA_VISIBLE_DEVICES and no events'))
def untouched(world: World, name: str) -> None:
    pod = get_pod(world, name)
    assert not pod["spec"].get("nodeName")
    assert all(v == [] for v in cuda_values(pod)), cuda_values(pod)
    assert not pod["status"].get("conditions"), pod["status"].get("conditions")
    assert [e for e in world.api.events(world.namespace) if e["involvedObject"]["name"] == name] == []
    assert bind_counts(world, range(1000))[name] == 0, "gpu-scheduler tried to bind it"
