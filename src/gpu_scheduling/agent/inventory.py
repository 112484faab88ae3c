"""What GPUs a node has, from a simulated declaration, and the GpuNodeStatus status the agent writes. Pure (NVML
is read in `agent.nvml`).

A simulated inventory is declared as `count=8,islands=2,bandwidth=600/64,unhealthy=7`: `count` GPUs split into
`islands` equal NVLink islands (ids in order), the islands' bandwidths in GB/s separated by `/` (the last one
repeats), and the ids that report Unhealthy. The reference's example node is exactly that declaration.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpu_scheduling.claims import objects

#: The agent's default declaration (nodes without the annotation constants.SIMULATED_ANNOTATION): 8 GPUs, 0-3 in
#: one NVLink island at 600 GB/s, 4-7 in another at 64 GB/s, all healthy.
DEFAULT_SIMULATED = "count=8,islands=2,bandwidth=600/64,unhealthy="


class InventoryError(ValueError):
    """A simulated declaration that cannot be read; the message names the part and what was expected."""


def parse_simulated(text: str) -> list[dict[str, Any]]:
    fields: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep or key.strip() not in ("count", "islands", "bandwidth", "unhealthy"):
            raise InventoryError(f"{part!r}: expected count=N, islands=N, bandwidth=A/B or unhealthy=I/J")
        fields[key.strip()] = value.strip()
    try:
        count = int(fields.get("count", "0"))
        islands = max(1, int(fields.get("islands", "1")))
        bandwidths = [int(b) for b in fields.get("bandwidth", "0").split("/") if b]
        unhealthy = {int(i) for i in fields.get("unhealthy", "").replace(";", "/").split("/") if i}
    except ValueError as exc:
        raise InventoryError(f"{text!r}: {exc}; expected integers as in {DEFAULT_SIMULATED!r}") from None
    if count < 0 or not bandwidths:
        raise InventoryError(f"{text!r}: count must be >= 0 and at least one bandwidth given")
    per_island = max(1, -(-count // islands))
    devices = []
    for gpu in range(count):
        island = gpu // per_island
        devices.append(
            {
                "id": gpu,
                "health": "Unhealthy" if gpu in unhealthy else "Healthy",
                "island": f"nvlink-group-{island}",
                "bandwidthGBps": 0 if gpu in unhealthy else bandwidths[min(island, len(bandwidths) - 1)],
            }
        )
    return devices


def islands_from_links(count: int, links: Iterable[tuple[int, int]]) -> dict[int, int]:
    """Connected components of the NVLink graph: GPU id -> island number (smallest id of its component first)."""
    parent = list(range(count))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in links:
        if 0 <= a < count and 0 <= b < count:
            parent[max(find(a), find(b))] = min(find(a), find(b))
    roots = sorted({find(i) for i in range(count)})
    return {i: roots.index(find(i)) for i in range(count)}


def simulated_status(spec: str = DEFAULT_SIMULATED) -> dict[str, Any]:
    """The GpuNodeStatus status of a node with the simulated inventory `spec`, none of its GPUs in use (what the
    agent writes for such a node, and what the tests and the benchmark write where no agent runs)."""
    return node_status(parse_simulated(spec), ())


def node_status(
    devices: list[dict[str, Any]], leases: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    """The GpuNodeStatus status: devices with inUseBy (the pods holding each GPU, "<namespace>/<name>" where
    known, replacing any inUseBy the devices had) from the node's GPU Leases and the map pods bound to it, and the
    counts."""
    users: dict[int, set[str]] = {}
    for lease in leases:
        record = objects.lease_record(lease)
        if record is not None:
            users.setdefault(record.gpu, set()).update(record.pods.get(h, h) for h in record.holders)
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        hold = objects.hold_from_pod(pod)
        if hold is not None and hold.source == "map":
            for gpu in hold.gpu_ids:
                users.setdefault(gpu, set()).add(hold.pod)
    out = [dict(d, inUseBy=sorted(users.get(d["id"], ()))) for d in devices]
    unhealthy = sum(1 for d in out if d["health"] != "Healthy")
    free = sum(1 for d in out if d["health"] == "Healthy" and not d["inUseBy"])
    return {"total": len(out), "free": free, "unhealthy": unhealthy, "devices": out}
