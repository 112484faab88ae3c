"""Does a contender's scheduler gang at all? W3's figures compare gang schedulers only if both hold a gang until it
is whole, so every W3 run proves it on its own plane, after the timed window, with the scheduler it measured (and
features/fit/test_gang_peer.py proves it for kube-scheduler alone).

In a namespace of its own: one gang of minimum MIN_COUNT in the contender's form (workload.gang_pods: a GpuClaim with
`spec.gangRef` and members saying the gang's size, or a PodGroup with `gang.minCount` and members joining it) with
one GPU per member, and one pod of no gang asking the same GPU in the same form (workload.claim_pods). The gang's
MIN_COUNT - 1 first members and the lone pod are created together; once the lone pod is bound and HOLD_SECONDS more
have passed, no member may be bound; then the last member is created, and every member must be bound within the
timeout. bench/checks.py's `gang_proof` judges what was seen. The times are this process's (polling the pods every
POLL seconds): a proof, not a figure of the benchmark.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable
from typing import Any

from bench import checks, workload
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.sync import SyncClient
from harness.controlplane import create_namespace

NAMESPACE = "bench-gang-proof"
MIN_COUNT = 4
HOLD_SECONDS = 5.0
TIMEOUT_SECONDS = 60.0
POLL = 0.1


@dataclasses.dataclass
class GangProof:
    min_count: int
    hold_seconds: float
    alone_bound_ms: float | None  # the lone pod's create sent -> seen bound
    short_bound: int  # members of the short gang bound once the hold was over
    completed_bound_ms: float | None  # the last member's create sent -> every member seen bound
    problems: list[str]


def _bound(api: SyncClient, namespace: str, names: Iterable[str]) -> dict[str, bool]:
    nodes = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in api.get(paths.pods(namespace))["items"]}
    return {name: bool(nodes.get(name)) for name in names}


def _bound_within(api: SyncClient, namespace: str, names: list[str], timeout: float, since: float) -> float | None:
    """Milliseconds from `since` (time.monotonic) until every pod of `names` is seen bound; None after `timeout`."""
    while True:
        if all(_bound(api, namespace, names).values()):
            return (time.monotonic() - since) * 1000
        if time.monotonic() - since > timeout:
            return None
        time.sleep(POLL)


def _create(api: SyncClient, objs: Iterable[dict[str, Any]]) -> None:
    for obj in objs:
        api.create(workload.collection_path(obj), obj)


def prove(
    api: SyncClient,
    claim_api: workload.ClaimApi,
    scheduler: str,
    namespace: str = NAMESPACE,
    *,
    min_count: int = MIN_COUNT,
    hold: float = HOLD_SECONDS,
    timeout: float = TIMEOUT_SECONDS,
) -> GangProof:
    """Hold a gang short of one member, then complete it (the module's docstring)."""
    create_namespace(api, namespace)
    gang_objs, members = workload.gang_pods(claim_api, scheduler, namespace, [min_count], gpus=1)
    alone_objs, alone = workload.claim_pods(claim_api, scheduler, namespace, [1], prefix="alone")
    _create(api, [*gang_objs, *alone_objs])  # the gang's claim or PodGroup and the lone pod's claim first
    names = [p["metadata"]["name"] for p in members]
    started = time.monotonic()
    _create(api, [*alone, *members[:-1]])
    alone_ms = _bound_within(api, namespace, [alone[0]["metadata"]["name"]], timeout, started)
    if alone_ms is not None:
        time.sleep(hold)
    short = _bound(api, namespace, names[:-1])
    last = time.monotonic()
    _create(api, members[-1:])
    completed_ms = _bound_within(api, namespace, names, timeout, last)
    completed = _bound(api, namespace, names)
    return GangProof(
        min_count=min_count,
        hold_seconds=hold,
        alone_bound_ms=alone_ms,
        short_bound=sum(short.values()),
        completed_bound_ms=completed_ms,
        problems=checks.gang_proof(alone_ms is not None, short, completed, hold, timeout),
    )
