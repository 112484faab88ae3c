"""The benchmark's pure parts: the workloads every contender gets, the figures and write counts read from the
audit log, and the report made of them."""

import json

import pytest

from bench import allocation, checks, measure, plane, report, run, workload
from gpu_scheduling import constants, gpumap
from gpu_scheduling.agent import inventory
from gpu_scheduling.claims import objects
from harness.controlplane import node_body


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
    ceiling = workload.w1_pods(workload.CEILING_SCHEDULER, "ns", pods=30, nodes=7, group_size=10)
    assert (
        [p["metadata"]["name"] for p in mapped]
        == [p["metadata"]["name"] for p in native]
        == [p["metadata"]["name"] for p in ceiling]
    )
    for m, n, c in zip(mapped, native, ceiling, strict=True):
        entry = gpumap.entry_for_pod(m["metadata"])
        terms = n["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [entry.node]
        assert constants.MAP_ANNOTATION not in n["metadata"]["annotations"]
        # The ceiling binder reads its node from one annotation, the node of the same map entry.
        assert (
            c["metadata"]["annotations"][constants.MAP_ANNOTATION]
            == m["metadata"]["annotations"][constants.MAP_ANNOTATION]
        )
        assert c["metadata"]["annotations"][workload.CEILING_NODE_ANNOTATION] == entry.node
        assert gpumap.entry_for_pod(c["metadata"]) == entry
        assert workload.CEILING_NODE_ANNOTATION not in m["metadata"]["annotations"]
        for pod in (m, n, c):
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


def test_w2_asks_the_same_gpus_in_every_claim_api():
    sizes = [4, 1]
    gpuclaims, gpuclaim_pods = workload.claim_pods(workload.GPUCLAIM, "gpu-scheduler", "ns", sizes)
    assert [c["kind"] for c in gpuclaims] == ["GpuClaim", "GpuClaim"]
    assert [c["spec"]["devices"]["count"] for c in gpuclaims] == [4, 1]
    assert [p["metadata"]["annotations"][constants.CLAIM_ANNOTATION] for p in gpuclaim_pods] == [
        c["metadata"]["name"] for c in gpuclaims
    ]

    none, extended_pods = workload.claim_pods(workload.EXTENDED, workload.KUBE_SCHEDULER, "ns", sizes)
    assert none == []
    assert [p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] for p in extended_pods] == ["4", "1"]

    dra_claims, dra_pods = workload.claim_pods(workload.DRA, workload.KUBE_SCHEDULER, "ns", sizes)
    by_name = {c["metadata"]["name"]: c for c in dra_claims}
    for pod, claim in zip(dra_pods, dra_claims, strict=True):
        assert pod["spec"]["resourceClaims"] == [
            {"name": workload.DRA_REQUEST, "resourceClaimName": claim["metadata"]["name"]}
        ]
        container = pod["spec"]["containers"][0]
        assert container["resources"] == {"claims": [{"name": workload.DRA_REQUEST}]}  # no nvidia.com/gpu as well
        assert claim["metadata"]["namespace"] == pod["metadata"]["namespace"] == "ns"
    # The same pod names, the same GPU counts, whatever the form.
    names = [[p["metadata"]["name"] for p in pods] for pods in (gpuclaim_pods, extended_pods, dra_pods)]
    assert names[0] == names[1] == names[2]
    assert (
        [workload.pod_gpus(p) for p in extended_pods]
        == [workload.pod_gpus(p) for p in gpuclaim_pods]
        == [workload.pod_gpus(p, by_name) for p in dra_pods]
        == sizes
    )


def test_resource_claim_asks_exactly_the_count_and_keeps_required_topology_in_one_island():
    plain = workload.resource_claim("c", "ns", workload.gpuclaim_spec(4))
    assert plain["apiVersion"] == "resource.k8s.io/v1" and plain["kind"] == "ResourceClaim"
    assert plain["spec"]["devices"] == {
        "requests": [
            {
                "name": workload.DRA_REQUEST,
                "exactly": {"deviceClassName": workload.DRA_DEVICE_CLASS, "allocationMode": "ExactCount", "count": 4},
            }
        ]
    }

    preferred = workload.resource_claim("c", "ns", {"devices": {"count": 2}, "topology": {"mode": "Preferred"}})
    assert "constraints" not in preferred["spec"]["devices"]  # DRA has no preferences

    required = workload.resource_claim(
        "c", "ns", {"devices": {"count": 4}, "topology": {"mode": "Required", "minBandwidthGBps": 600}}
    )
    devices = required["spec"]["devices"]
    assert devices["constraints"] == [
        {"requests": [workload.DRA_REQUEST], "matchAttribute": "gpu.bench.example/island"}
    ]
    assert devices["requests"][0]["exactly"]["selectors"] == [
        {"cel": {"expression": 'device.attributes["gpu.bench.example"].bandwidthGBps >= 600'}}
    ]


def test_resource_slice_publishes_the_simulated_inventory():
    rs = workload.resource_slice("node7")
    spec = rs["spec"]
    assert (rs["apiVersion"], rs["kind"]) == ("resource.k8s.io/v1", "ResourceSlice")
    assert spec["driver"] == workload.DRA_DRIVER and spec["nodeName"] == "node7"
    assert spec["pool"] == {"name": "node7", "generation": 1, "resourceSliceCount": 1}
    devices = spec["devices"]
    assert [d["name"] for d in devices] == [f"gpu-{i}" for i in range(8)]
    assert [d["attributes"]["index"] for d in devices] == [{"int": i} for i in range(8)]
    islands = [d["attributes"]["island"]["string"] for d in devices]
    assert islands == ["nvlink-group-0"] * 4 + ["nvlink-group-1"] * 4
    simulated = inventory.simulated_status()["devices"]
    assert [d["attributes"]["bandwidthGBps"]["int"] for d in devices] == [d["bandwidthGBps"] for d in simulated]
    assert islands == [d["island"] for d in simulated]  # the two inventories say the same


def test_dra_inventory_is_one_device_class_then_a_slice_per_node():
    objects = workload.dra_inventory(3)
    assert [o["kind"] for o in objects] == ["DeviceClass"] + ["ResourceSlice"] * 3
    assert objects[0]["metadata"]["name"] == workload.DRA_DEVICE_CLASS
    assert objects[0]["spec"]["selectors"] == [{"cel": {"expression": 'device.driver == "gpu.bench.example"'}}]
    assert [o["spec"]["nodeName"] for o in objects[1:]] == ["node1", "node2", "node3"]
    assert len({o["metadata"]["name"] for o in objects}) == 4


def test_gpu_node_status_is_the_simulated_inventory_of_its_node():
    statuses = workload.gpuclaim_inventory(3)
    assert list(statuses) == ["node1", "node2", "node3"]
    # harness.inventory.publish writes each through the agent's writer, which creates this object first.
    body = objects.node_status_body("node2")
    assert body["kind"] == "GpuNodeStatus" and body["metadata"]["name"] == body["spec"]["nodeName"] == "node2"
    assert statuses["node2"] == inventory.simulated_status()
    assert workload.GPUS_PER_NODE == statuses["node2"]["total"] == len(statuses["node2"]["devices"]) == 8


def test_every_object_is_created_in_its_collection():
    claims, pods = workload.claim_pods(workload.GPUCLAIM, "gpu-scheduler", "ns", [1])
    dra_claims, _ = workload.claim_pods(workload.DRA, workload.KUBE_SCHEDULER, "ns", [1])
    device_class, resource_slice = workload.dra_inventory(1)
    node = node_body("node1")
    group = workload.pod_group("g", "ns", 2)
    assert [
        workload.collection_path(o)
        for o in (pods[0], claims[0], dra_claims[0], device_class, resource_slice, node, group)
    ] == [
        "/api/v1/namespaces/ns/pods",
        "/apis/gpu.scheduling/v1/namespaces/ns/gpuclaims",
        "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims",
        "/apis/resource.k8s.io/v1/deviceclasses",
        "/apis/resource.k8s.io/v1/resourceslices",
        "/api/v1/nodes",
        "/apis/scheduling.k8s.io/v1beta1/namespaces/ns/podgroups",
    ]
    with pytest.raises(ValueError, match="creates no Secret"):
        workload.collection_path({"kind": "Secret", "metadata": {"name": "s"}})


def test_storm_fill_takes_every_gpu_so_no_storm_pod_fits():
    fill, storm = workload.storm_sizes(nodes=10, pods=50)
    assert fill == [8] * 10 and sum(fill) == 10 * workload.GPUS_PER_NODE
    assert storm == [1] * 50
    _, pods = workload.claim_pods(workload.DRA, workload.KUBE_SCHEDULER, "bench", storm, prefix="storm")
    assert pods[0]["metadata"]["name"] == "storm-00000-1gpu"


def test_an_unknown_claim_api_is_refused():
    with pytest.raises(ValueError, match="unknown claim API"):
        workload.claim_pods("maps", "s", "ns", [1])  # type: ignore[arg-type]


def audit(
    stage_ts: str, received: str, name: str, code: int, subresource: str | None = None, namespace: str = "bench"
) -> str:
    ref = {"resource": "pods", "namespace": namespace, "name": name}
    if subresource:
        ref["subresource"] = subresource
    return json.dumps(
        {
            "stage": "ResponseComplete",
            "objectRef": ref,
            "responseStatus": {"code": code},
            "requestReceivedTimestamp": received,
            "stageTimestamp": stage_ts,
        }
    )


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


def test_a_bind_logged_before_its_create_counts_once(tmp_path):
    """kube-scheduler can bind a pod before the apiserver has finished answering its create: the binding's audit
    event comes first. The pod counts as bound once, with no negative wait."""
    log = tmp_path / "audit.jsonl"
    lines = [
        audit("2026-01-01T00:00:00.530000Z", "2026-01-01T00:00:00.520000Z", "a-0", 201, "binding"),
        audit("2026-01-01T00:00:00.600000Z", "2026-01-01T00:00:00.540000Z", "a-0", 409, "binding"),
        audit("2026-01-01T00:00:00.560000Z", "2026-01-01T00:00:00.400000Z", "a-0", 201),
        audit("2026-01-01T00:00:00.700000Z", "2026-01-01T00:00:00.650000Z", "a-1", 201, "binding"),
    ]
    log.write_text("\n".join(lines) + "\n")
    tail = measure.AuditTail(log, "bench")
    assert tail.poll() == 1  # a-1's create is not in the log (yet): not counted
    figs = measure.figures(tail.pods, tail.failed_binds)
    assert (figs.pods, figs.bound, figs.failed_binds) == (1, 1, 1)
    assert figs.latency_p50_ms == pytest.approx(0.0)  # bound at 0.53, before the create's answer at 0.56


@pytest.mark.parametrize(("q", "expected"), [(50, 5), (90, 9), (99, 10), (100, 10), (1, 1)])
def test_percentile_is_nearest_rank(q, expected):
    assert measure.percentile(list(range(10, 0, -1)), q) == expected


def write_event(
    verb: str,
    resource: str,
    received: str,
    user: str = "bench-scheduler",
    subresource: str = "",
    stage: str = "ResponseComplete",
    code: int = 200,
) -> str:
    ref = {"resource": resource, "namespace": "bench", "name": "x"}
    if subresource:
        ref["subresource"] = subresource
    return json.dumps(
        {
            "stage": stage,
            "verb": verb,
            "user": {"username": user},
            "objectRef": ref,
            "responseStatus": {"code": code},
            "requestReceivedTimestamp": received,
            "stageTimestamp": received,
        }
    )


def test_write_tail_counts_writes_by_user_resource_and_window(tmp_path):
    log = tmp_path / "audit.jsonl"
    t = "2026-01-01T00:00:0{}.000000Z"
    log.write_text(
        "\n".join(
            [
                write_event("create", "pods", t.format(0), user="admin"),  # the benchmark's own create
                write_event("create", "leases", t.format(1)),
                write_event("create", "leases", t.format(1), code=409),  # refused writes count too
                write_event("patch", "gpuclaims", t.format(2), subresource="status"),
                write_event("create", "pods", t.format(3), subresource="binding"),
                write_event("get", "pods", t.format(3)),  # not a write
                write_event("create", "events", t.format(3), stage="Panic"),  # never completed
                write_event("update", "resourceclaims", t.format(5), subresource="status"),
            ]
        )
        + "\n"
        + write_event("delete", "leases", t.format(6))[:30]
    )  # a line still being written
    tail = measure.WriteTail(log)
    assert tail.poll() == 6
    start = measure._ts(t.format(1))
    assert tail.counts("bench-scheduler") == {
        "create leases": 2,
        "create pods/binding": 1,
        "patch gpuclaims/status": 1,
        "update resourceclaims/status": 1,
    }
    assert tail.counts(None, until=start) == {"create pods": 1}
    assert tail.counts("bench-scheduler", since=start, until=measure._ts(t.format(3))) == {
        "create leases": 2,
        "patch gpuclaims/status": 1,
    }
    per_pod = measure.per_pod(tail.counts("bench-scheduler"), pods=2)
    assert per_pod["create leases"] == 1.0 and per_pod["total"] == 2.5
    assert measure.per_pod({}, 0) == {"total": 0.0}


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        ({"spec": {}, "status": {}}, False),
        (
            {
                "spec": {},
                "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
            },
            True,
        ),
        ({"spec": {}, "status": {"conditions": [{"type": "Ready", "status": "False"}]}}, False),
        # a bound pod is no waiting pod that was tried: the storm fails on it (checks.storm_bound)
        ({"spec": {"nodeName": "node1"}, "status": {}}, False),
        (
            {
                "spec": {"nodeName": "node1"},
                "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
            },
            False,
        ),
    ],
)
def test_a_waiting_pod_is_tried_once_it_is_unschedulable_and_a_bound_one_never_is(pod, expected):
    assert measure.tried(pod) is expected


def _bound(name: str, node: str | None, annotations: dict[str, str] | None = None, gpus: int = 1) -> dict:
    pod = {
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
    }
    if node:
        pod["spec"]["nodeName"] = node
    return pod


def test_w1_pods_off_their_mapped_node_are_problems():
    mapped = checks.w1_mapped(pods=4, nodes=2, group_size=2)
    assert mapped == {"w1-g000-0": "node1", "w1-g000-1": "node2", "w1-g001-0": "node1", "w1-g001-1": "node2"}
    right = [_bound(name, node) for name, node in mapped.items()]
    assert checks.misplaced(right, mapped) == []
    assert checks.misplaced([*right[:3], _bound("w1-g001-1", None)], mapped) == []  # unbound: the bound count's
    (problem,) = checks.misplaced([*right[:3], _bound("w1-g001-1", "node1")], mapped)
    assert problem == "1 W1 pods not on their mapped node: w1-g001-1 on node1, mapped to node2"


def test_a_gpu_held_by_two_w2_pods_is_a_problem_in_every_claim_api():
    ids = constants.GPU_IDS_ANNOTATION
    apart = [_bound("a", "node1", {ids: "0,1"}), _bound("b", "node1", {ids: "2"}), _bound("c", "node2", {ids: "1"})]
    assert checks.held_twice(apart, workload.GPUCLAIM) == []
    (problem,) = checks.held_twice([*apart, _bound("d", "node1", {ids: "1,3"})], workload.GPUCLAIM)
    assert problem == "1 GPUs held by more than one W2 pod: node1:1"
    (problem,) = checks.held_twice([*apart, _bound("e", "node2")], workload.GPUCLAIM)
    assert problem == "1 bound W2 pods without their GPU ids: e"

    def claim(*devices: tuple[str, str]) -> dict:
        results = [{"pool": pool, "device": device} for pool, device in devices]
        return {"status": {"allocation": {"devices": {"results": results}}}}

    claims = [claim(("node1", "gpu-0"), ("node1", "gpu-1")), claim(("node2", "gpu-1")), {"status": {}}]
    assert checks.held_twice([], workload.DRA, claims) == []
    (problem,) = checks.held_twice([], workload.DRA, [*claims, claim(("node1", "gpu-1"))])
    assert problem == "1 GPUs held by more than one W2 pod: node1:gpu-1"

    full = [_bound("f", "node1", gpus=4), _bound("g", "node1", gpus=4), _bound("h", None, gpus=8)]
    assert checks.held_twice(full, workload.EXTENDED, gpus_per_node=8) == []
    (problem,) = checks.held_twice([*full, _bound("i", "node1")], workload.EXTENDED, gpus_per_node=8)
    assert problem == "nodes given more than 8 GPUs: node1 (9)"


def test_a_bound_storm_pod_and_a_board_flag_are_problems():
    assert checks.storm_bound([_bound("storm-0", None)]) == []
    assert checks.storm_bound([_bound("storm-0", None), _bound("storm-1", "node3")]) == [
        "1 storm pods bound while every GPU was taken: storm-1"
    ]
    assert checks.board_flags({}, 0) == []
    assert checks.board_flags({"lease-without-holder": 0}, 0) == []
    assert checks.board_flags({"in-use-by-out-of-step": 2}, 1) == [
        "the board still flagged 1 GPUs once the agents had written their inUseBy",
        "the board flags in-use-by-out-of-step 2",
    ]


def run_result(contender: str, wl: str, throughput: float, writes: dict[str, float]) -> dict:
    return {
        "workload": wl,
        "contender": contender,
        "rep": 1,
        "nodes": 5,
        "pods": 40,
        "bound": 40,
        "seconds": 1.0,
        "throughput": throughput,
        "create_seconds": 0.5,
        "latency_p50_ms": 10.0,
        "latency_p90_ms": 20.0,
        "latency_p99_ms": 30.0,
        "failed_binds": 0,
        "curve": [(0.5, 20), (1.0, 40)],
        "gpus_requested": 72,
        "cpu_seconds": {"kube-apiserver": 2.0, "etcd": 0.5, "scheduler": 0.4},
        "peak_rss_mib": {"scheduler": 100.0},
        "scheduler_writes": {},
        "writes_per_pod": writes,
    }


def storm_result(contender: str) -> dict:
    window = {
        "seconds": 10.0,
        "cpu_per_second": {"kube-apiserver": 0.08, "etcd": 0.01, "scheduler": 0.02},
        "scheduler_writes_per_minute": 12.0,
        "all_writes_per_minute": 30.0,
        "scheduler_writes": {"patch pods/status": 2},
        "all_writes": {"patch pods/status": 2},
    }
    return {
        "workload": "storm",
        "contender": contender,
        "rep": 1,
        "nodes": 5,
        "pods": 40,
        "fill_bound": 5,
        "fill_pods": 5,
        "first_pass_complete": True,
        "untried_after_timeout": 0,
        "first_pass_seconds": 4.0,
        "bound": 0,
        "peak_rss_mib": {"scheduler": 90.0},
        "baseline": window,
        "storm": window,
    }


def results_of(runs: list[dict], storm: list[dict]) -> dict:
    """What `bench.run` writes for a smoke-sized run of these runs (the report's input)."""
    return {
        "settings": {
            "nodes": 5,
            "pods": 40,
            "reps": 1,
            "group_size": 10,
            "create_concurrency": 64,
            "webhook_seconds": 2,
            "create_latency_pods": 20,
            "storm_seconds": 10,
            "storm_baseline_seconds": 10,
            "writes_settle_seconds": 1,
            "storm_pods": 40,
        },
        "client": {"qps": 1, "burst": 1, "workers": 1},
        "started": 0,
        "seconds": 61,
        "machine": {
            "cpus": 2,
            "cpu_model": "x",
            "memory_gib": 1,
            "kernel": "k",
            "python": "3",
            "go": "go",
            "versions": {"kubernetes_version": "v1.34.4"},
        },
        "runs": runs,
        "storm": storm,
        "webhook": None,
    }


def test_report_compares_gpu_scheduler_with_the_dra_peer_and_shows_writes_and_the_storm():
    results = results_of(
        [
            run_result("gpu-scheduler", "w2", 20.0, {"create leases": 2.0, "total": 6.0}),
            run_result("kube-scheduler-dra", "w2", 40.0, {"update resourceclaims/status": 1.0, "total": 3.0}),
        ],
        [storm_result("gpu-scheduler"), storm_result("kube-scheduler-dra")],
    )
    text = report.render(results, "assets")
    assert "| pods bound per second (higher is better) | 20.0 | 40.0 | 0.50× |" in text
    assert "| scheduler write requests per pod | 6.00 | 3.00 | 2.00× |" in text
    assert "| `create leases` | 2.00 | – |" in text and "| **total** | 6.00 | 3.00 |" in text
    assert "| gpu-scheduler: apiserver < 0.05 CPU-s/s | 0.080 | **no** |" in text
    assert "| gpu-scheduler: scheduler < 0.05 CPU-s/s | 0.020 | yes |" in text
    assert "| `patch pods/status` | 12.0 | 12.0 |" in text


def test_the_smoke_w2_fits_in_any_placement_order():
    """The smoke checks that every pod is bound, so its W2 must fit whatever order a contender places the pods in:
    while a pod of g GPUs waits, the others leave more free GPUs than the nodes could hold with g - 1 free each."""
    nodes, fill = run.SMOKE["nodes"], run.SMOKE["w2_fill"]
    sizes = workload.w2_sizes(run.SMOKE["pods"], nodes, fill)
    assert {1, 2, 4} <= set(sizes)  # the mix is still there
    total = nodes * workload.GPUS_PER_NODE
    for g in set(sizes):
        free_while_waiting = total - (sum(sizes) - g)
        assert free_while_waiting > nodes * (g - 1), (g, free_while_waiting)


def test_the_growth_table_takes_the_median_per_size_and_names_its_run(tmp_path):
    import json

    from bench import growth

    def run(nodes: int, throughput: float, cpu: float, wl: str = "w1") -> dict:
        return {
            "workload": wl,
            "contender": "gpu-scheduler",
            "nodes": nodes,
            "pods": nodes * 5,
            "bound": nodes * 5,
            "throughput": throughput,
            "latency_p99_ms": 10 * throughput,
            "cpu_seconds": {"scheduler": cpu, "kube-apiserver": 2 * cpu},
            "peak_rss_mib": {"scheduler": 100.0},
        }

    small = [run(250, 90, 5), run(250, 110, 7), run(250, 100, 6)]
    for name, runs in (("small", small), ("big", [run(1000, 80, 40), run(1000, 1, 1, wl="w4")])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps({"started": 0, "runs": runs}))
    found = growth.rows([tmp_path / "small" / "results.json", tmp_path / "big" / "results.json"])
    assert [(r["nodes"], r["pods/s"], r["p99 ms"], r["scheduler CPU ms/pod"], r["reps"]) for r in found] == [
        (250, 100, 1000, 6 * 1000 / 1250, 3),
        (1000, 80, 800, 40 * 1000 / 5000, 1),
    ]  # the W4 run is not a workload of the table unless named
    assert found[1]["run"] == "`big`, 1970-01-01 00:00 UTC"
    assert "| w1 | gpu-scheduler | 1000 | 5000 (5000) | 80.0 | 800 | 8.0 | 100.0 | 16.0 |" in growth.table(found)
    assert [r["workload"] for r in growth.rows([tmp_path / "big" / "results.json"], ("w4",))] == ["w4"]


# ---- W3: gangs ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [(14, [2, 4]), (16, [2, 4, 8]), (250, [2, 4, 8] * 16), (1000, [2, 4, 8] * 64 + [2])],
)
def test_w3_cycles_gang_sizes_within_the_fill(nodes, expected):
    sizes = workload.w3_sizes(nodes)
    assert sizes == expected
    assert sum(sizes) <= int(nodes * 0.9) < sum(sizes) + workload.W3_SIZES[len(sizes) % 3]


def test_w3_gangs_ask_a_whole_node_per_member_in_each_contender_form():
    claims, pods = workload.gang_pods(workload.GPUCLAIM, "gpu-scheduler", "ns", [2, 4])
    assert [c["metadata"]["name"] for c in claims] == ["w3-g0000-2x", "w3-g0001-4x"]
    assert claims[1]["spec"] == {
        "devices": {"count": workload.GPUS_PER_NODE, "policy": "contiguous"},
        "gangRef": "w3-g0001-4x",
    }
    assert [p["metadata"]["name"] for p in pods][:3] == ["w3-g0000-2x-0", "w3-g0000-2x-1", "w3-g0001-4x-0"]
    annotations = pods[5]["metadata"]["annotations"]
    assert annotations == {constants.CLAIM_ANNOTATION: "w3-g0001-4x", constants.GANG_MIN_MEMBERS_ANNOTATION: "4"}
    assert all(workload.pod_gpus(p) == workload.GPUS_PER_NODE for p in pods)
    assert "schedulingGroup" not in pods[0]["spec"]
    groups, native = workload.gang_pods(workload.EXTENDED, workload.KUBE_SCHEDULER, "ns", [2, 4])
    # Kubernetes' gang API: one PodGroup per gang, minCount its size, no topology constraint (W3 asks for no domain)
    assert groups[1] == {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "w3-g0001-4x", "namespace": "ns"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 4}}},
    }
    assert [g["metadata"]["name"] for g in groups] == [c["metadata"]["name"] for c in claims]
    assert [p["metadata"]["name"] for p in native] == [p["metadata"]["name"] for p in pods]
    assert all(p["metadata"]["annotations"] == {} and workload.pod_gpus(p) == 8 for p in native)
    assert native[5]["spec"]["schedulingGroup"] == {"podGroupName": "w3-g0001-4x"}
    assert {workload.gang_of(p["metadata"]["name"]) for p in native} == {"w3-g0000-2x", "w3-g0001-4x"}
    _, small = workload.gang_pods(workload.EXTENDED, workload.KUBE_SCHEDULER, "ns", [4], gpus=1)
    assert all(workload.pod_gpus(p) == 1 for p in small)
    assert workload.gang_of("w2-00001-8gpu") is None
    with pytest.raises(ValueError, match="W3 has no 'dra' form"):
        workload.gang_pods(workload.DRA, "s", "ns", [2])


def test_gang_figures_time_each_gang_from_its_last_member_created_to_its_last_bind():
    times = {
        "g0-0": measure.PodTimes(0.0, 0.1, 1.0),
        "g0-1": measure.PodTimes(0.0, 0.5, 0.9),  # last created 0.5, last bound 1.0: 500 ms
        "g1-0": measure.PodTimes(0.2, 0.3, 2.3),  # 2000 ms
        "g2-0": measure.PodTimes(0.2, 0.3, 4.0),
        "g2-1": measure.PodTimes(0.2, 0.3, None),  # not placed
    }
    figs = measure.gang_figures(times, {"g0": ["g0-0", "g0-1"], "g1": ["g1-0"], "g2": ["g2-0", "g2-1"]})
    assert (figs.gangs, figs.placed) == (3, 2)
    assert figs.seconds == pytest.approx(2.3)
    assert figs.gangs_per_second == pytest.approx(2 / 2.3)
    assert figs.gang_p50_ms == pytest.approx(500.0)
    assert figs.gang_p99_ms == pytest.approx(2000.0) == figs.gang_max_ms


def member(name: str, node: str | None, ids: str | None = None) -> dict:
    annotations = {constants.GPU_IDS_ANNOTATION: ids} if ids is not None else {}
    return {"metadata": {"name": name, "annotations": annotations}, "spec": {"nodeName": node}}


def locked_then_bound(pods: list[dict], lease_at: float = 1.0, bind_at: float = 2.0) -> tuple[dict, dict]:
    """(leases, binds) as the audit log gives them: every GPU Lease of the bound pods created at `lease_at`, every
    bound pod bound at `bind_at`."""
    leases = {
        objects.lease_name(p["spec"]["nodeName"], int(g)): lease_at
        for p in pods
        if p["spec"]["nodeName"]
        for g in p["metadata"]["annotations"][constants.GPU_IDS_ANNOTATION].split(",")
    }
    return leases, {p["metadata"]["name"]: bind_at for p in pods if p["spec"]["nodeName"]}


def test_a_partly_bound_gang_or_a_member_short_of_gpus_is_a_problem():
    whole = "0,1,2,3,4,5,6,7"
    pods = [
        member("w3-g0000-2x-0", "node1", whole),
        member("w3-g0000-2x-1", "node2", whole),
        member("w3-g0001-2x-0", None),
        member("w3-g0001-2x-1", None),
    ]
    assert (
        checks.gangs_whole(pods, *locked_then_bound(pods)) == [] and checks.member_gpus(pods, workload.GPUCLAIM) == []
    )
    pods[2] = member("w3-g0001-2x-0", "node3", "0,1,2,3,4,5,6,6")
    assert checks.gangs_whole(pods, *locked_then_bound(pods)) == ["1 W3 gangs partly bound: w3-g0001-2x (1/2)"]
    assert checks.member_gpus(pods, workload.GPUCLAIM) == [
        "1 GPUs held by more than one W3 pod: node3:6",
        "1 bound W3 members without 8 distinct GPUs: w3-g0001-2x-0 (0,1,2,3,4,5,6,6)",
    ]
    pods[3] = member("w3-g0001-2x-1", "node1", whole)
    assert checks.member_gpus(pods, workload.GPUCLAIM)[0].startswith("9 GPUs held by more than one W3 pod")
    plain = [
        {**p, "spec": {**p["spec"], "containers": [{"resources": {"limits": {"nvidia.com/gpu": "8"}}}]}} for p in pods
    ]
    assert checks.member_gpus(plain, workload.EXTENDED) == ["nodes given more than 8 GPUs: node1 (16)"]
    # kube-scheduler's gangs carry no GPU ids: the end state is what is checked
    assert checks.partly_bound([*pods[:2], member("w3-g0001-2x-0", "node3"), member("w3-g0001-2x-1", None)]) == [
        "1 W3 gangs partly bound: w3-g0001-2x (1/2)"
    ]
    assert checks.partly_bound([member("w3-g0001-2x-0", None), member("w3-g0001-2x-1", None)]) == []


def test_a_gang_member_bound_before_every_lease_of_its_gang_was_created_is_a_problem():
    """A binder that decides, locks and binds members one by one leaves every gang whole at the end: only the order
    of the apiserver's own records (a Lease's last create, each binding) shows the gang was partly bound."""
    whole = "0,1,2,3,4,5,6,7"
    pods = [member("w3-g0000-2x-0", "node1", whole), member("w3-g0000-2x-1", "node2", whole)]
    leases, binds = locked_then_bound(pods)
    assert checks.gangs_whole(pods, leases, binds) == []
    one_by_one = {**leases, **{objects.lease_name("node2", g): 2.5 for g in range(8)}}  # node2 locked after node1 bound
    (problem,) = checks.gangs_whole(pods, one_by_one, {**binds, "w3-g0000-2x-1": 3.0})
    assert problem == (
        "1 W3 gangs with a member bound before every GPU Lease was created: "
        "w3-g0000-2x (w3-g0000-2x-0 bound 500.0 ms before w3-g0000-2x-1's Lease gpu-node2-7 was created)"
    )
    # nothing to compare is a problem, never a pass
    (problem,) = checks.gangs_whole(pods, {k: v for k, v in leases.items() if k != "gpu-node2-3"}, {})
    assert problem == (
        "3 writes of bound W3 members missing from the audit log: w3-g0000-2x-0's binding, "
        "w3-g0000-2x-1's Lease gpu-node2-3, w3-g0000-2x-1's binding"
    )


def test_write_tail_keeps_each_objects_last_successful_create(tmp_path):
    log = tmp_path / "audit.jsonl"
    t = "2026-01-01T00:00:0{}.000000Z"
    log.write_text(
        "\n".join(
            [
                write_event("create", "leases", t.format(1)),
                write_event("create", "leases", t.format(2), code=409),  # refused: not a create
                write_event("delete", "leases", t.format(3)),
                write_event("create", "leases", t.format(4), code=201),  # created again: the one that holds it
                write_event("create", "pods", t.format(5), subresource="binding", code=201),
            ]
        )
        + "\n"
    )
    tail = measure.WriteTail(log)
    tail.poll()
    assert tail.created("create leases", "bench") == {"x": measure._ts(t.format(4))}
    assert tail.created("create pods/binding", "bench") == {"x": measure._ts(t.format(5))}
    assert tail.created("create leases", "elsewhere") == {}


def test_gang_phases_split_each_wait_into_deciding_locking_and_binding():
    times = {
        "a-0": measure.PodTimes(0.0, 0.1, 2.0),
        "a-1": measure.PodTimes(0.0, 0.2, 2.1),  # last created at 0.2
        "b-0": measure.PodTimes(0.0, 0.5, 1.5),
        "c-0": measure.PodTimes(0.0, 0.5, None),  # not bound: left out
    }
    gangs = {"a": ["a-0", "a-1"], "b": ["b-0"], "c": ["c-0"]}
    binds = {"a-0": 1.9, "a-1": 2.05, "b-0": 1.4}
    leases = {"a-0": [1.0, 1.2], "a-1": [1.1, 1.5], "b-0": [0.6, 0.7]}
    with_leases = measure.gang_phases(times, gangs, leases, binds)
    # a: 0.2 -> first Lease 1.0 (800 ms), locking to 1.5 (500 ms), last bind 2.05 (550 ms); b: 100, 100, 700
    assert with_leases.gangs == 2
    assert with_leases.to_commit_p50_ms == pytest.approx(100.0)
    assert with_leases.locking_p50_ms == pytest.approx(100.0)
    assert with_leases.binding_p50_ms == pytest.approx(550.0)
    # without Leases the commit is the first binding: a 1700 ms then 150 ms binding, b 900 then 0
    without = measure.gang_phases(times, gangs, {}, binds)
    assert (without.to_commit_p50_ms, without.locking_p50_ms) == (pytest.approx(900.0), 0.0)
    assert without.binding_p50_ms == pytest.approx(0.0)
    missing = {k: v for k, v in binds.items() if k != "b-0"}  # a binding missing from the log: b is left out
    assert measure.gang_phases(times, gangs, leases, missing).gangs == 1
    assert workload.member_leases(member("m", "node2", "0,3")) == ["gpu-node2-0", "gpu-node2-3"]


def test_a_gang_proof_fails_unless_the_short_gang_waits_while_a_lone_pod_binds():
    held = {"g-0": False, "g-1": False, "g-2": False}
    done = dict.fromkeys([*held, "g-3"], True)
    assert checks.gang_proof(True, held, done, hold=5, timeout=60) == []
    (problem,) = checks.gang_proof(True, {**held, "g-1": True}, done, hold=5, timeout=60)
    assert problem == (
        "gang proof: 1 of the 3 members of a gang short of one were bound by 5 s after the pod of no gang "
        "(not held as a gang): g-1"
    )
    assert checks.gang_proof(False, held, {**done, "g-3": False}, hold=5, timeout=60) == [
        "gang proof: the pod of no gang was not bound within 60 s, so nothing was proved",
        "gang proof: 1 of the 4 members still unbound 60 s after the gang was completed: g-3",
    ]


def test_report_shows_w3_against_kube_scheduler_with_podgroups():
    gangs = {
        "gangs": 2,
        "placed": 2,
        "seconds": 1.0,
        "gangs_per_second": 2.0,
        "gang_p50_ms": 100.0,
        "gang_p99_ms": 300.0,
        "gang_max_ms": 300.0,
    }
    phases = {"gangs": 2, "to_commit_p50_ms": 700.0, "locking_p50_ms": 120.0, "binding_p50_ms": 80.0}
    proof = {
        "min_count": 4,
        "hold_seconds": 5.0,
        "alone_bound_ms": 150.0,
        "short_bound": 0,
        "completed_bound_ms": 420.0,
        "problems": [],
    }
    runs = [
        {
            **run_result("gpu-scheduler", "w3", 6.0, {"create leases": 8.0, "total": 10.5}),
            "gangs": gangs,
            "gang_phases": phases,
            "gang_proof": proof,
        },
        {
            **run_result("kube-scheduler", "w3", 60.0, {"create pods/binding": 1.0, "total": 2.25}),
            "gangs": {**gangs, "gangs_per_second": 20.0},
            "gang_phases": {**phases, "locking_p50_ms": 0.0},
            "gang_proof": {**proof, "completed_bound_ms": None},
        },
    ]
    text = report.gangs_section(runs, "assets")
    row = "| gpu-scheduler | 2/2 | 40/40 | 2.00 | 6.0 | 100 | 300 | 300 | 0.4 | 0.4 | 10.0 | 100 | 2.0 | 10.50 |"
    assert row in text
    assert f"| {report.GANG_PEER} | 2/2 | 40/40 | 20.00 |" in text and text.count("2.25 |") == 2
    assert "`spec.schedulingPolicy.gang.minCount`" in text and "no gang semantics" not in text
    assert "| gpu-scheduler | 700 | 120 | 80 |" in text and f"| {report.GANG_PEER} | 700 | 0 | 80 |" in text
    assert (
        "- gpu-scheduler, repetition 1: 0 of the 3 members of a gang of minimum 4 bound 5 s after a pod of no gang "
        "created with them was bound (150 ms); once member 4 was created, all 4 bound in 420 ms." in text
    )
    assert f"- {report.GANG_PEER}, repetition 1: " in text and "not every member was bound." in text
    assert "| `create leases` | 8.00 | – |" in text
    assert report.gangs_section([run_result("gpu-scheduler", "w2", 1.0, {})], "a") == ""


def test_the_runs_csv_carries_each_w3_runs_gang_figures(tmp_path):
    gangs = {"gangs": 2, "placed": 2, "seconds": 1.0, "gangs_per_second": 2.0, "gang_p50_ms": 100.0}
    runs = [
        {**run_result("gpu-scheduler", "w3", 6.0, {"total": 10.5}), "gangs": {**gangs, "gang_p99_ms": 300.0}},
        run_result("gpu-scheduler", "w2", 20.0, {"total": 4.0}),
    ]
    report.write_csv(runs, tmp_path / "runs.csv")
    header, w3, w2 = (tmp_path / "runs.csv").read_text().splitlines()
    assert header.endswith(",scheduler_writes_per_pod,gangs_placed,gangs_per_second,gang_p50_ms,gang_p99_ms")
    assert w3.endswith(",100.0,10.5,2,2.0,100.0,300.0") and w2.endswith(",100.0,4.0,,,,")


# ---- W4: W1 with a zone spread constraint ---------------------------------------------------------------------------


def test_nodes_are_in_zones_by_one_assignment():
    assert workload.node_zones(6) == {
        "node1": "zone-00",
        "node2": "zone-01",
        "node3": "zone-02",
        "node4": "zone-03",
        "node5": "zone-00",
        "node6": "zone-01",
    }
    nodes = plane.node_bodies(6)
    assert [n["metadata"]["labels"][workload.ZONE_LABEL] for n in nodes] == list(workload.node_zones(6).values())
    assert nodes[0]["metadata"]["labels"]["kubernetes.io/hostname"] == "node1"
    assert nodes[0]["status"]["capacity"]["nvidia.com/gpu"] == str(workload.GPUS_PER_NODE)
    # The board's benchmark groups its nodes by the same assignment, in as many zones as it asks.
    board_nodes = plane.node_bodies(3, zones=2, label="example.com/zone")
    assert [n["metadata"]["labels"]["example.com/zone"] for n in board_nodes] == ["zone-00", "zone-01", "zone-00"]


def test_w4_pods_are_the_w1_pods_with_one_zone_spread_constraint():
    for scheduler in ("gpu-scheduler", workload.KUBE_SCHEDULER):
        w1 = workload.w1_pods(scheduler, "ns", pods=30, nodes=7, group_size=10)
        w4 = workload.w4_pods(scheduler, "ns", pods=30, nodes=7, group_size=10, max_skew=17)
        assert [p["metadata"]["name"] for p in w4] == ["w4" + p["metadata"]["name"].removeprefix("w1") for p in w1]
        for one, four in zip(w1, w4, strict=True):
            # The same pinning (map or node affinity) and the same request: only the label and the constraint differ.
            assert four["metadata"]["annotations"] == one["metadata"]["annotations"]
            assert four["metadata"]["labels"] == {**one["metadata"]["labels"], "gpu-bench/spread": "w4"}
            assert {k: v for k, v in four["spec"].items() if k != "topologySpreadConstraints"} == one["spec"]
            assert four["spec"]["topologySpreadConstraints"] == [
                {
                    "maxSkew": 17,
                    "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"gpu-bench/spread": "w4"}},
                    "nodeAffinityPolicy": "Ignore",  # kube-scheduler's pin must not shrink it to one zone
                }
            ]
            assert four["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert checks.w1_mapped(30, 7, 10, workload.W4_PREFIX)["w4-g002-3"] == checks.w1_mapped(30, 7, 10)["w1-g002-3"]


@pytest.mark.parametrize(
    ("pods", "nodes", "order_skew"),
    [(5000, 1000, 1), (1500, 200, 1), (40, 10, 4), (1250, 250, 5), (100, 3, 1), (1, 5, 1)],
)
def test_w4_max_skew_is_the_skew_of_w1s_order_plus_one_zones_creates_in_flight(pods, nodes, order_skew):
    assert workload.w1_order_skew(pods, nodes) == order_skew
    assert workload.w4_max_skew(pods, nodes, in_flight=64) == order_skew + 16
    assert workload.w4_max_skew(pods, nodes, in_flight=10) == order_skew + 3
    # Placed one by one in W1's order, no pod is ever refused: no zone gets more than maxSkew ahead of the emptiest.
    zone_of = workload.node_zones(nodes)
    counts = dict.fromkeys(set(zone_of.values()), 0)
    for p in range(pods):
        counts[zone_of[workload.node_name(p % nodes)]] += 1
        assert max(counts.values()) - min(counts.values()) <= order_skew


def test_the_smoke_w4_ends_within_its_max_skew():
    pods, nodes = run.SMOKE["pods"], run.SMOKE["nodes"]
    settings = run.Settings(**run.SMOKE)
    assert run._max_skew(settings) == workload.w4_max_skew(pods, nodes, settings.create_concurrency) == 20
    placed = [
        {"metadata": {"name": pl.pod, "labels": dict(workload.W4_LABEL)}, "spec": {"nodeName": pl.node}}
        for group in workload.w1_placements(pods, nodes, run.SMOKE["group_size"], workload.W4_PREFIX)
        for pl in group
    ]
    assert checks.spread(placed, workload.node_zones(nodes), run._max_skew(settings)) == []


def _w4_pod(name: str, node: str | None, labelled: bool = True) -> dict:
    labels = {"app": "bench", **(workload.W4_LABEL if labelled else {})}
    return {"metadata": {"name": name, "labels": labels}, "spec": {"nodeName": node}}


def test_zones_skewed_beyond_max_skew_are_a_problem():
    zone_of = workload.node_zones(4)  # node1..node4 in zone-00..zone-03
    even = [_w4_pod(f"p{i}", f"node{i % 4 + 1}") for i in range(8)]
    assert checks.spread(even, zone_of, max_skew=1) == []
    ahead = [*even, _w4_pod("x0", "node1"), _w4_pod("x1", "node1"), _w4_pod("waiting", None)]
    assert checks.spread(ahead, zone_of, max_skew=2) == []
    assert checks.spread(ahead, zone_of, max_skew=1) == [
        "W4 pods skewed by 2 across the zones, more than maxSkew 1: zone-00 4, zone-01 2, zone-02 2, zone-03 2"
    ]
    # A zone with no pod counts (it is the emptiest); a pod the constraint does not select does not.
    one_zone = [_w4_pod("a", "node1"), _w4_pod("b", "node1"), _w4_pod("other", "node2", labelled=False)]
    (problem,) = checks.spread(one_zone, zone_of, max_skew=1)
    assert problem.endswith("zone-00 2, zone-01 0, zone-02 0, zone-03 0")
    assert checks.misplaced([_w4_pod("w4-g000-0", "node2")], {"w4-g000-0": "node1"}, "W4") == [
        "1 W4 pods not on their mapped node: w4-g000-0 on node2, mapped to node1"
    ]


def test_report_shows_w4_against_kube_scheduler_and_against_w1():
    def w4(contender: str, throughput: float, cpu: float, refusals: int) -> dict:
        r = run_result(contender, "w4", throughput, {})
        r["cpu_seconds"] = {**r["cpu_seconds"], "scheduler": cpu}
        r["spread"] = {
            "max_skew": 17,
            "zones": {"zone-00": 10, "zone-01": 10, "zone-02": 10, "zone-03": 10},
            "refusals_written": refusals,
        }
        return r

    runs = [
        run_result("gpu-scheduler", "w1", 50.0, {}),
        run_result("kube-scheduler", "w1", 40.0, {}),
        w4("gpu-scheduler", 40.0, 0.8, 0),
        w4("kube-scheduler", 20.0, 1.2, 3),
    ]
    text = report.spread_section(runs, {"create_concurrency": 64}, "assets")
    assert "## W4: 40 map-pinned pods with a zone spread constraint" in text
    assert "`maxSkew: 17`" in text and "`nodeAffinityPolicy: Ignore`" in text
    assert "per repetition):\ngpu-scheduler 0; kube-scheduler 3." in text
    assert "zone-00 10, zone-01 10, zone-02 10, zone-03 10" in text
    assert "| gpu-scheduler | 40/40 | 40.0 |" in text and "| kube-scheduler | 40/40 | 20.0 |" in text
    assert "| pods bound per second (higher is better) | 40.0 | 20.0 | 2.00× |" in text
    assert "| scheduler CPU ms per pod | 20.0 | 30.0 | 0.67× |" in text
    # W1's scheduler CPU is 0.4 s for 40 pods: 10 ms per pod
    assert "| gpu-scheduler | 50.0 → 40.0 (0.80×) | 30 → 30 | 10.00 → 20.00 (+10.00) |" in text
    assert "| kube-scheduler | 40.0 → 20.0 (0.50×) | 30 → 30 | 10.00 → 30.00 (+20.00) |" in text
    assert "![W4 bound pods over time](assets/w4-bound-over-time.png)" in text
    assert report.spread_section(runs[:2], {}, "assets") == ""
    full = report.render(results_of(runs, []), "assets")
    assert full.index("## W1:") < full.index("## W4:") < full.index("## Reproduce")
    assert "in 4 zones (`topology.kubernetes.io/zone`, node i in zone i mod 4" in full


def test_the_allocation_benchmark_decides_alike_both_ways_and_fills_the_gpus():
    """bench.allocation's two ways (every node read, the FreeIndex) decide every W2 claim of a small cluster alike,
    and the claims (90 % of the GPUs) all find GPUs: its table compares like with like."""
    _, read = allocation.decide(12, indexed=False)
    _, kept = allocation.decide(12, indexed=True)
    assert read == kept
    assert len(read) == len(workload.w2_sizes(60, 12)) and all(":" in d for d in read)


# ---- the report's targets and its source line -------------------------------------------------------------------


def test_the_report_judges_w1_and_w2_against_the_issue_targets_and_names_its_commit():
    from bench import report

    def summary(**rates: float) -> dict:
        return {
            name: {"throughput": (rate, rate, rate), "p99": (1.0, 1.0, 1.0), "rss": (100, 100, 100)}
            for name, rate in rates.items()
        }

    w1 = report._targets(summary(**{"gpu-scheduler": 95.0, "ceiling-webhook": 100.0}), None)
    assert "| throughput ≥ 0.95× the ceiling with the webhook | 0.95× | yes |" in w1
    w1 = report._targets(summary(**{"gpu-scheduler": 94.0, "ceiling-webhook": 100.0}), None)
    assert "| throughput ≥ 0.95× the ceiling with the webhook | 0.94× | **no** |" in w1
    w2 = report._w2_targets(summary(**{"gpu-scheduler": 60.0, "kube-scheduler": 100.0, "kube-scheduler-dra": 21.0}))
    assert "| throughput ≥ 0.6× kube-scheduler | 0.60× | yes |" in w2
    assert "| throughput ≥ 3× kube-scheduler-dra | 2.86× | **no** |" in w2
    assert report._w2_targets(summary(**{"gpu-scheduler": 60.0})) == ""  # no peer, no table
    assert report._source_words({"source": {"commit": "0123456789abcdef", "changed": True}}) == (
        " at commit `0123456789ab` with uncommitted changes"
    )
    assert report._source_words({}) == ""  # a run from before the field
