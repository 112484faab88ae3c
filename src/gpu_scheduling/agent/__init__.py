"""gpu-inventory-agent: keeps its node's GpuNodeStatus current (NVML where a driver is present, else simulated)."""
