"""GpuClaim allocation, leases and release (claims_scheduling.feature, control-plane tier): the simulated
inventory is written by the tests (features/conftest.py), not by the agent."""

from __future__ import annotations

import subprocess
from typing import Any

from pytest_bdd import given, scenarios, then

from features.support import World, claim_status, on_node, running_on, step
from gpu_scheduling import constants
from gpu_scheduling.agent.inventory import simulated_status
from gpu_scheduling.claims import objects
from gpu_scheduling.kube import paths
from harness.components import SCRIPTS
from harness.inventory import publish
from harness.wait import wait_for

scenarios("claims_scheduling.feature")


def _create_claim(world: World, name: str, spec: dict[str, Any]) -> None:
    world.api.create(paths.gpu_claims(world.namespace), objects.claim_body(name, spec))


@given(step('the GpuClaim "{name:q}" asking for {count:d} GPUs with exclusivity "{exclusivity:q}" is created'))
def claim_with_exclusivity(world: World, name: str, count: int, exclusivity: str) -> None:
    _create_claim(world, name, {"devices": {"count": count, "exclusivity": exclusivity}})


@given(step('the GpuClaim "{name:q}" asking for {count:d} GPUs preferring ids "{ids:q}" on node "{node:q}" is created'))
def claim_prefer_ids(world: World, name: str, count: int, ids: str, node: str) -> None:
    _create_claim(
        world,
        name,
        {
            "devices": {"count": count, "policy": "preferIds", "preferIds": [int(i) for i in ids.split(",")]},
            "selector": on_node(node),
        },
    )


@given(
    step(
        'the GpuClaim "{name:q}" asking for {count:d} GPUs with topology "{mode:q}" at {gbps:d} GB/s '
        'on node "{node:q}" is created'
    )
)
def claim_topology(world: World, name: str, count: int, mode: str, gbps: int, node: str) -> None:
    _create_claim(world, name, {"devices": {"count": count}, "selector": on_node(node)})
    world.api.patch(
        paths.gpu_claim(world.namespace, name), {"spec": {"topology": {"mode": mode, "minBandwidthGBps": gbps}}}
    )


@given(step("GPU {gpu:d} of {node} is Unhealthy"))
def unhealthy_gpu(world: World, gpu: int, node: str) -> None:
    status = simulated_status()
    status["devices"][gpu]["health"] = "Unhealthy"
    status["unhealthy"], status["free"] = 1, status["free"] - 1
    publish(world.cluster.kubeconfig, {node: status})


@then(step('the GpuClaim "{name:q}" says "{fragment:q}"'))
def claim_says(world: World, name: str, fragment: str) -> None:
    assert fragment in claim_status(world, name).get("message", ""), claim_status(world, name)


@then(step('the pod "{name:q}" runs on {node} with its allocation annotations "{allocated:q}" and "{ids:q}"'))
def claim_pod_runs(world: World, name: str, node: str, allocated: str, ids: str) -> None:
    pod = wait_for(f"pod {name} Running on {node}", lambda: running_on(world, name, node), timeout=60)
    annotations = pod["metadata"]["annotations"]
    assert annotations[constants.ALLOCATED_ANNOTATION] == allocated
    assert annotations[constants.GPU_IDS_ANNOTATION] == ids


@then(step('the GpuNodeStatus of {node} shows GPUs "{gpus:q}" in use by the pod "{name:q}"'))
def node_status_in_use(world: World, node: str, gpus: str, name: str) -> None:
    """What the inventory agent writes; on the control-plane tier the agent runs once here, as on a node."""
    if world.cluster.cp is not None:  # no DaemonSet here: run the real agent program once for that node
        subprocess.run(
            [
                str(SCRIPTS / "gpu-inventory-agent"),
                f"--kubeconfig={world.cluster.cp.kubeconfig}",
                f"--node-name={node}",
                "--source=simulated",
                "--once",
            ],
            check=True,
            timeout=60,
        )
    ref = f"{world.namespace}/{name}"

    def shown() -> dict[str, Any] | None:
        status = world.api.get(paths.gpu_node_status(node))
        devices = (status.get("status") or {}).get("devices") or []
        users = {str(d["id"]) for d in devices if ref in (d.get("inUseBy") or [])}
        return status if users == set(gpus.split(",")) else None

    wait_for(f"GpuNodeStatus {node} showing {ref} on GPUs {gpus}", shown, timeout=30)
