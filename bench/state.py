"""What the scheduler keeps in memory, per object: a replica of gpu-scheduler's watch side (the same `Scheduler`,
its informers, transforms and ledger; it never leads, so it writes nothing) is started in this process against a
benchmark plane, its caches synced, and each part measured in bytes, shared strings counted once. The report's
"state bytes per pod and per node" come from here.

    measure(kubeconfig) -> {"parts": {name: {"objects": n, "bytes": b}}, "total_bytes": ...}
"""

from __future__ import annotations

import asyncio
import pathlib
import sys
from collections.abc import Iterable
from typing import Any

from gpu_scheduling.kube import config as kubeconfig
from gpu_scheduling.kube.client import Client
from gpu_scheduling.scheduler.controller import Scheduler, SchedulerConfig


def deep_size(roots: Iterable[Any], seen: set[int]) -> int:
    """Bytes of `roots` and everything they hold (dicts, lists, tuples, sets, dataclass-like objects with
    __dict__ or __slots__), each object counted once across calls sharing `seen`."""
    total = 0
    stack = list(roots)
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        elif hasattr(obj, "__dict__") and not isinstance(obj, type):
            stack.append(vars(obj))
        elif hasattr(obj, "__slots__"):
            stack.extend(getattr(obj, s) for s in obj.__slots__ if hasattr(obj, s))
    return total


def _parts(s: Scheduler) -> dict[str, tuple[int, list[Any]]]:
    """Each part of the state: (how many objects it holds, its roots)."""
    claims = s.claim_path
    return {
        "pods (this scheduler's)": (len(s.pods.cache), [s.pods.cache, s.uids]),
        "pods (other schedulers', trimmed)": (len(s.others.cache), [s.others.cache]),
        "nodes": (len(s.nodes.cache), [s.nodes.cache]),
        "node usage": (len(s.nodes.cache), [s.cache.usage]),
        "namespaces": (len(s.namespaces.cache), [s.namespaces.cache]),
        "GPU Leases": (len(s.leases.informer.cache), [s.leases.informer.cache]),
        "GpuClaims": (len(claims.claims.cache), [claims.claims.cache]),
        "GpuNodeStatuses": (len(claims.statuses.cache), [claims.statuses.cache]),
        "ledger": (sum(1 for _ in s.ledger.holds()), [s.ledger]),
        "map parse cache": (0, [s.maps]),
        "scheduling queue": (0, [s.queue]),
    }


async def _measure(path: pathlib.Path) -> dict[str, Any]:
    cfg = kubeconfig.load(str(path))
    async with Client(cfg) as client:
        s = Scheduler(client, SchedulerConfig())
        tasks = await s.watch()
        try:
            seen: set[int] = set()
            parts = {}
            for name, (count, roots) in _parts(s).items():
                parts[name] = {"objects": count, "bytes": deep_size(roots, seen)}
            return {"parts": parts, "total_bytes": sum(p["bytes"] for p in parts.values())}
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


def measure(path: pathlib.Path) -> dict[str, Any]:
    """Sync a watching replica from the cluster of kubeconfig `path` and measure its state."""
    return asyncio.run(_measure(path))
