"""What GPUs a node has: read through NVML, or from a simulated declaration. Pure except `from_nvml`.

A simulated inventory is declared as `count=8,islands=2,bandwidth=600/64,unhealthy=7`: `count` GPUs split into
`islands` equal NVLink islands (ids in order), the islands' bandwidths in GB/s separated by `/` (the last one
repeats), and the ids that report Unhealthy. The reference's example node is exactly that declaration.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpu_scheduling.claims import objects

DEFAULT_SIMULATED = "count=8,islands=2,bandwidth=600/64,unhealthy="
SIMULATED_ANNOTATION = "gpu.scheduling/simulated-inventory"

# GB/s of one NVLink link (both directions) by NVLink version, for the island bandwidth NVML does not report.
NVLINK_GBPS_PER_LINK = {1: 40, 2: 50, 3: 50, 4: 50, 5: 100}


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
        devices.append({
            "id": gpu,
            "health": "Unhealthy" if gpu in unhealthy else "Healthy",
            "island": f"nvlink-group-{island}",
            "bandwidthGBps": 0 if gpu in unhealthy else bandwidths[min(island, len(bandwidths) - 1)],
        })
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


def from_nvml() -> list[dict[str, Any]]:
    """Read the GPUs through NVML (nvidia-ml-py). Raises ImportError or pynvml.NVMLError without a driver."""
    import pynvml

    pynvml.nvmlInit()
    try:
        count = pynvml.nvmlDeviceGetCount()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        bus = {pynvml.nvmlDeviceGetPciInfo(h).busId: i for i, h in enumerate(handles)}
        links: list[tuple[int, int]] = []
        link_gbps = [0] * count
        health = ["Healthy"] * count
        for i, h in enumerate(handles):
            try:
                pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
                if pynvml.nvmlDeviceGetRetiredPagesPendingStatus(h):
                    health[i] = "Unhealthy"
            except pynvml.NVMLError_NotSupported:
                pass
            except pynvml.NVMLError:
                health[i] = "Unhealthy"
            for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
                try:
                    if pynvml.nvmlDeviceGetNvLinkState(h, link) != pynvml.NVML_FEATURE_ENABLED:
                        continue
                    version = pynvml.nvmlDeviceGetNvLinkVersion(h, link)
                    peer = bus.get(pynvml.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId)
                except pynvml.NVMLError:
                    continue  # no such link on this GPU
                link_gbps[i] += NVLINK_GBPS_PER_LINK.get(version, 50)
                if peer is not None:
                    links.append((i, peer))
        islands = islands_from_links(count, links)
        return [{"id": i, "health": health[i], "island": f"nvlink-group-{islands[i]}", "bandwidthGBps": link_gbps[i]}
                for i in range(count)]
    finally:
        pynvml.nvmlShutdown()


def node_status(devices: list[dict[str, Any]], leases: Iterable[Mapping[str, Any]],
                pods: Iterable[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The GpuNodeStatus status: devices with inUseBy (the pods holding each GPU, "<namespace>/<name>" where
    known) from the node's GPU Leases and the map pods bound to it, and the counts."""
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

