"""Scheduling throughput and latency of gpu-scheduler side by side with kube-scheduler and a bare binder (the
apiserver's ceiling), on the tests' real control plane with many kwok nodes. See docs/benchmarks.md."""
