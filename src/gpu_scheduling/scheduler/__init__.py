"""The gpu-scheduler: places pods on the node their index maps to in the `gpu-scheduling-map` annotation."""
