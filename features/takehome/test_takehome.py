"""The take-home's own scenario (takehome.feature): the assignment's StatefulSet placed by its map, on both tiers
(on KinD each check pod's log is read too)."""

from __future__ import annotations

from pytest_bdd import scenarios, then

from features.support import StatefulSet, World, assert_cuda, logs_show, running_on, step
from harness.wait import wait_for

scenarios("takehome.feature")


@then(step('pod {index:d} runs on {node} with CUDA_VISIBLE_DEVICES "{devices:q}"'))
def statefulset_pod_runs(world: World, statefulset: StatefulSet, index: int, node: str, devices: str) -> None:
    name = statefulset.pod(index)
    pod = wait_for(f"pod {name} Running on {node}", lambda: running_on(world, name, node), timeout=180)
    assert_cuda(pod, devices)
    if world.cluster.real_kubelets:
        logs_show(world, statefulset.namespace, name, node, devices)
