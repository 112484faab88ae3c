"""The gpu-scheduler: places pods on the node their index maps to in the `gpu-scheduling-map` annotation, and claim
pods on the GPUs the allocator chooses for their GpuClaim."""
