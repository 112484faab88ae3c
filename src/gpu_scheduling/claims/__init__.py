"""GpuClaim: declarative GPU requests (docs/claims.md), the pure part. `allocator` chooses a node and GPU ids,
`ledger` knows which pod holds which GPU, `priority` orders the pending claim pods and keeps nodes for waiting
higher priorities, `objects` translates GpuClaim, GpuNodeStatus and Lease objects to and from their data. The
scheduler's claim path (scheduler.claims) and the inventory agent (agent) do the I/O."""
