"""The benchmark's pure parts: the workloads every contender gets, and the figures read from the audit log."""

import json

import pytest

from bench import measure, workload
from gpu_scheduling import constants, gpumap


def test_w1_spreads_pods_evenly_and_never_gives_a_gpu_twice():
    groups = workload.w1_placements(pods=250, nodes=50, group_size=100)
    assert [len(g) for g in groups] == [100, 100, 50]
    placements = [pl for g in groups for pl in g]
    per_node: dict[str, list[int]] = {}
    for pl in placements:
        per_node.setdefault(pl.node, []).extend(pl.gpus)
    assert len(per_node) == 50 and all(len(gpus) == 5 for gpus in per_node.values())
    assert all(len(set(gpus)) == len(gpus) for gpus in per_node.values())


def test_w1_pins_every_contender_to_the_same_node():
    mapped = workload.w1_pods("gpu-scheduler", "ns", pods=30, nodes=7, group_size=10)
    native = workload.w1_pods(workload.KUBE_SCHEDULER, "ns", pods=30, nodes=7, group_size=10)
    assert [p["metadata"]["name"] for p in mapped] == [p["metadata"]["name"] for p in native]
    for m, n in zip(mapped, native):
        entry = gpumap.entry_for_pod(m["metadata"])
        terms = n["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [entry.node]
        assert constants.MAP_ANNOTATION not in n["metadata"]["annotations"]
        for pod in (m, n):
            assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_w2_sizes_are_largest_first_and_fit_the_cluster():
    sizes = workload.w2_sizes(claims=5000, nodes=1000)
    assert sizes == sorted(sizes, reverse=True)
    assert sum(sizes) <= 1000 * workload.GPUS_PER_NODE * 0.9
    assert set(sizes) == {1, 2, 4, 8} and len(sizes) <= 5000
    # Largest-first powers of two on 8-GPU nodes: first fit never strands a claim while capacity lasts.
    free = [workload.GPUS_PER_NODE] * 1000
    for size in sizes:
        node = next(i for i, f in enumerate(free) if f >= size)
        free[node] -= size


def test_w2_gives_the_gpu_scheduler_one_claim_per_pod_and_kube_scheduler_requests():
    claims, pods = workload.w2_objects("gpu-scheduler", "ns", [4, 1])
    assert [c["spec"]["devices"]["count"] for c in claims] == [4, 1]
    assert [p["metadata"]["annotations"][constants.CLAIM_ANNOTATION] for p in pods] == \
        [c["metadata"]["name"] for c in claims]
    claims, pods = workload.w2_objects(workload.KUBE_SCHEDULER, "ns", [4, 1])
    assert claims == []
    assert [p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] for p in pods] == ["4", "1"]


def audit(stage_ts: str, received: str, name: str, code: int, subresource: str | None = None,
          namespace: str = "bench") -> str:
    ref = {"resource": "pods", "namespace": namespace, "name": name}
    if subresource:
        ref["subresource"] = subresource
    return json.dumps({"stage": "ResponseComplete", "objectRef": ref, "responseStatus": {"code": code},
                       "requestReceivedTimestamp": received, "stageTimestamp": stage_ts})


def test_audit_tail_reads_creates_and_binds_incrementally(tmp_path):
    log = tmp_path / "audit.jsonl"
    lines = [
        audit("2026-01-01T00:00:00.100000Z", "2026-01-01T00:00:00.000000Z", "a-0", 201),
        audit("2026-01-01T00:00:00.200000Z", "2026-01-01T00:00:00.050000Z", "a-1", 201),
        audit("2026-01-01T00:00:00.150000Z", "2026-01-01T00:00:00.000000Z", "other", 201, namespace="x"),
        audit("2026-01-01T00:00:00.600000Z", "2026-01-01T00:00:00.500000Z", "a-0", 409, "binding"),
        audit("2026-01-01T00:00:01.100000Z", "2026-01-01T00:00:01.000000Z", "a-0", 201, "binding"),
    ]
    tail = measure.AuditTail(log, "bench")
    assert tail.poll() == 0  # no log yet
    text = "\n".join(lines) + "\n"
    cut = len(text) - 20  # the last line arrives in two pieces
    log.write_text(text[:cut])
    assert tail.poll() == 0
    with log.open("a") as f:
        f.write(text[cut:])
        f.write(audit("2026-01-01T00:00:02.200000Z", "2026-01-01T00:00:02.000000Z", "a-1", 201, "binding") + "\n")
    assert tail.poll() == 2
    figs = measure.figures(tail.pods, tail.failed_binds)
    assert (figs.pods, figs.bound, figs.failed_binds) == (2, 2, 1)
    assert figs.seconds == pytest.approx(2.2)
    assert figs.throughput == pytest.approx(2 / 2.2)
    assert figs.latency_p50_ms == pytest.approx(1000.0)  # a-0: created 0.1, bound 1.1
    assert figs.latency_p99_ms == pytest.approx(2000.0)  # a-1: created 0.2, bound 2.2
    assert [n for _, n in figs.curve] == [1, 2]


@pytest.mark.parametrize(("q", "expected"), [(50, 5), (90, 9), (99, 10), (100, 10), (1, 1)])
def test_percentile_is_nearest_rank(q, expected):
    assert measure.percentile(list(range(10, 0, -1)), q) == expected
