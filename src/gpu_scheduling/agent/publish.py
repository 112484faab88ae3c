"""Write a node's GpuNodeStatus: the one writer, used by the agent (and by whatever writes a simulated inventory
where no agent runs)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from gpu_scheduling.claims import objects
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import AlreadyExists

if TYPE_CHECKING:
    from gpu_scheduling.kube.client import Client


async def write_node_status(client: Client, node: str, status: dict[str, Any]) -> None:
    """Create the GpuNodeStatus of `node` (one that exists already is fine), then write `status` through the
    status subresource (the only way a status reaches a CRD with that subresource)."""
    with contextlib.suppress(AlreadyExists):
        await client.post(paths.NODE_STATUSES, objects.node_status_body(node))
    await client.patch(paths.gpu_node_status_status(node), {"status": status})
