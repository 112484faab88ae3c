"""GPU inventories written for tests and the benchmark as the inventory agent writes them: one GpuNodeStatus per
node through `gpu_scheduling.agent.publish.write_node_status`, the agent's own writer (no agent runs on kwok
nodes). Callers take the status from the one simulator, `gpu_scheduling.agent.inventory.simulated_status`."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping
from typing import Any

from gpu_scheduling.agent.publish import write_node_status
from gpu_scheduling.kube import config
from gpu_scheduling.kube.client import Client
from gpu_scheduling.kube.errors import NotFound

CONCURRENCY = 16
"""GpuNodeStatus writes in flight (the benchmark publishes a thousand nodes)."""


def publish(kubeconfig: str | os.PathLike[str], statuses: Mapping[str, dict[str, Any]], *, timeout: float = 30) -> None:
    """Write the GpuNodeStatus of every node in `statuses` (node -> status) over one client, CONCURRENCY at a
    time. A NotFound is retried until `timeout` seconds have passed: right after its CRD is Established the
    apiserver may answer 404 for a moment. Raises the first write's error (an ApiError) when one fails."""
    try:
        asyncio.run(_publish(config.from_kubeconfig(kubeconfig), dict(statuses), time.monotonic() + timeout))
    except ExceptionGroup as failed:  # from the TaskGroup: one failed write cancelled the others
        raise failed.exceptions[0] from None


async def _publish(cluster: config.ClusterConfig, statuses: dict[str, dict[str, Any]], deadline: float) -> None:
    gate = asyncio.Semaphore(CONCURRENCY)

    async def write(client: Client, node: str, status: dict[str, Any]) -> None:
        async with gate:
            while True:
                try:
                    await write_node_status(client, node, status)
                    return
                except NotFound:
                    if time.monotonic() >= deadline:
                        raise
                    await asyncio.sleep(0.25)

    # The first failure cancels the other writes.
    async with Client(cluster, connections=CONCURRENCY) as client, asyncio.TaskGroup() as tasks:
        for node, status in statuses.items():
            tasks.create_task(write(client, node, status))
