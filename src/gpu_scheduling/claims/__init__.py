"""GpuClaim: declarative GPU requests (see docs in README "GpuClaim"). Work in progress: the pure allocator is
here; the CRDs, the scheduler path, leases and the inventory agent come next."""
