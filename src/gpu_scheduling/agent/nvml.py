"""Read the GPUs of this machine through NVML (nvidia-ml-py, the `nvml` extra): ids, health, NVLink islands and
bandwidth. The only part of the agent that touches the hardware."""

from __future__ import annotations

from typing import Any

from gpu_scheduling.agent.inventory import islands_from_links

# GB/s of one NVLink link (both directions) by NVLink version, for the island bandwidth NVML does not report.
NVLINK_GBPS_PER_LINK = {1: 40, 2: 50, 3: 50, 4: 50, 5: 100}


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
        return [
            {"id": i, "health": health[i], "island": f"nvlink-group-{islands[i]}", "bandwidthGBps": link_gbps[i]}
            for i in range(count)
        ]
    finally:
        pynvml.nvmlShutdown()
