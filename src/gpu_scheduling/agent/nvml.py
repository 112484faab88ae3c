"""Read the GPUs of this machine through NVML (nvidia-ml-py, the `nvml` extra): ids, health, NVLink islands and
bandwidth, memory and utilization. The only part of the agent that touches the hardware."""

from __future__ import annotations

import logging
from typing import Any

from gpu_scheduling.agent.inventory import islands_from_links

log = logging.getLogger("gpu_scheduling.agent")

# GB/s of one NVLink link (both directions) by NVLink version, for the island bandwidth NVML does not report.
NVLINK_GBPS_PER_LINK = {1: 40, 2: 50, 3: 50, 4: 50, 5: 100}

MIB = 1024 * 1024


def _usage(pynvml: Any, index: int, handle: Any) -> dict[str, int]:
    """The GPU's memory (MiB, total and used) and utilization (percent) as far as NVML reports them. A GPU that does
    not support a query (NVMLError_NotSupported) omits its fields, as does one whose query fails otherwise (logged):
    usage is information for placement, never a verdict on health, which `from_nvml` decides as before."""
    usage: dict[str, int] = {}
    try:
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        usage["memoryTotalMiB"] = int(memory.total) // MIB
        usage["memoryUsedMiB"] = int(memory.used) // MIB
    except pynvml.NVMLError_NotSupported:
        pass
    except pynvml.NVMLError as exc:
        log.debug("GPU %d: no memory information (%s)", index, exc)
    try:
        usage["utilizationPercent"] = int(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
    except pynvml.NVMLError_NotSupported:
        pass
    except pynvml.NVMLError as exc:
        log.debug("GPU %d: no utilization (%s)", index, exc)
    return usage


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
        usage = [_usage(pynvml, i, h) for i, h in enumerate(handles)]
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
        return [
            {
                "id": i,
                "health": health[i],
                "island": f"nvlink-group-{islands[i]}",
                "bandwidthGBps": link_gbps[i],
                **usage[i],
            }
            for i in range(count)
        ]
    finally:
        pynvml.nvmlShutdown()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def with_identities() -> tuple[list[dict[str, Any]], dict[int, tuple[str, int | None]]]:
    """The GPUs as `from_nvml` reads them, and each one's UUID and device minor number (its /dev/nvidia<minor>), for
    the device plugin. Raises like `from_nvml`: without a working driver there is no inventory to serve."""
    import pynvml

    gpus = from_nvml()
    pynvml.nvmlInit()
    try:
        ids: dict[int, tuple[str, int | None]] = {}
        for gpu in gpus:
            handle = pynvml.nvmlDeviceGetHandleByIndex(gpu["id"])
            try:
                minor: int | None = int(pynvml.nvmlDeviceGetMinorNumber(handle))
            except pynvml.NVMLError_NotSupported:
                minor = None
            ids[gpu["id"]] = (_text(pynvml.nvmlDeviceGetUUID(handle)), minor)
        return gpus, ids
    finally:
        pynvml.nvmlShutdown()
