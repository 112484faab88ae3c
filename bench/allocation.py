"""What choosing GPUs for one claim costs as the cluster grows, the allocator alone (claims.allocator.allocate over
the GPU ledger, as scheduler.claims calls it), in one process: every node read for each claim, against the
FreeIndex kept up to date by the ledger's changes. No apiserver, no scheduler: the step that grows with the nodes,
measured apart from the rest of a claim pod's cost (the full benchmark's W2 measures that).

    python -m bench.allocation                   # 250, 1000 and 4000 nodes
    python -m bench.allocation --nodes 250,8000

Each size: nodes of 8 GPUs in two NVLink islands (one shared devices tuple, as the scheduler shares equal ones), and
W2's claims (bench.workload.w2_sizes: 90 % of the GPUs, largest first) decided in turn, each holding its GPUs in a
Ledger. The pod's other rules admit every node (`admits`), as for W2's pods. Printed: CPU milliseconds per claim
(process time, so another load on the machine counts less than in wall time), the claims decided and a check that
both ways decided the same.
"""

from __future__ import annotations

import argparse
import time

from bench import workload
from gpu_scheduling.claims import allocator
from gpu_scheduling.claims.ledger import Hold, Ledger

DEVICES = tuple(allocator.Device(i, "nvlink-0" if i < 4 else "nvlink-1", 600) for i in range(8))


def decide(nodes: int, indexed: bool) -> tuple[float, list[str]]:
    """CPU seconds per claim, and each claim's decision (`node:ids`, or the NoFit's phase)."""
    inventory = [allocator.Node(f"node-{i:05d}", DEVICES) for i in range(nodes)]
    ledger = Ledger()
    index: allocator.FreeIndex | None = None
    mark = 0
    decisions = []
    sizes = workload.w2_sizes(nodes * 5, nodes)
    started = time.process_time()
    for k, size in enumerate(sizes):
        request = allocator.Request(size)
        if indexed:
            changed = ledger.changed_since(mark) if index is not None else None
            if index is None or changed is None:
                index = allocator.FreeIndex(inventory, ledger.holdings, allocator.FreeIndex.kind_of(request))
            else:
                index.update(changed)
            mark = ledger.position()
        decision = allocator.allocate(request, inventory, held=ledger.holdings, admits=lambda _: True, index=index)
        if isinstance(decision, allocator.Allocation):
            ledger.assume(Hold(f"uid-{k}", f"bench/claim-{k}", decision.node, decision.gpu_ids))
            decisions.append(decision.allocated)
        else:
            decisions.append(decision.phase)
    return (time.process_time() - started) / len(sizes), decisions


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.allocation", description=__doc__)
    p.add_argument("--nodes", default="250,1000,4000", help="comma-separated cluster sizes")
    args = p.parse_args(argv)
    print("| nodes | claims | every node read, ms per claim | FreeIndex, ms per claim | same decisions |")
    print("|---|---|---|---|---|")
    for nodes in (int(n) for n in args.nodes.split(",")):
        scan, read = decide(nodes, indexed=False)
        fast, kept = decide(nodes, indexed=True)
        print(f"| {nodes} | {len(read)} | {1000 * scan:.3f} | {1000 * fast:.3f} | {read == kept} |", flush=True)


if __name__ == "__main__":
    main()
