"""The scheduler's decision for one pod against plain node dicts."""

import contextlib

import pytest

from gpu_scheduling import gpumap, podrequest
from gpu_scheduling.scheduler import decision, fit, framework, volumes
from gpu_scheduling.scheduler.plugins import node_unschedulable

TAKE_HOME = "0=node1:0,1\n1=node2:2\n2=node3:0,1,2\n3=node4:3\n4=node4:3\n"


def node(name, ready=True, unschedulable=False, taints=None):
    return {
        "metadata": {"name": name},
        "spec": {"unschedulable": unschedulable, "taints": taints or []},
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "KubeletReady" if ready else "KubeletNotReady",
                }
            ],
            "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
        },
    }


def decide(the_pod, nodes, isolated=False, usage=None):
    """decision.decide with nothing else on the nodes unless `usage` says so."""
    return decision.decide(the_pod, nodes, isolated, usage or fit.NodeUsage())


def pod(name="check-3", annotation=TAKE_HOME, tolerations=None, **spec):
    """A map pod as the webhook leaves it: every container has its entry's CUDA_VISIBLE_DEVICES."""
    meta = {"name": name, "namespace": "default", "uid": "u"}
    env = []
    if annotation is not None:
        meta["annotations"] = {"gpu-scheduling-map": annotation}
        with contextlib.suppress(gpumap.PodMapError):
            env = [{"name": "CUDA_VISIBLE_DEVICES", "value": gpumap.entry_for_pod(meta).cuda_visible_devices}]
    spec.setdefault("containers", [{"name": "c", "env": env}])
    return {"metadata": meta, "spec": {"schedulerName": "gpu-scheduler", "tolerations": tolerations or [], **spec}}


NODES = {f"node{i}": node(f"node{i}") for i in range(1, 5)}


@pytest.mark.parametrize("index, target", [(0, "node1"), (1, "node2"), (2, "node3"), (3, "node4"), (4, "node4")])
def test_take_home_placement(index, target):
    verdict = decide(pod(f"gpu-scheduler-check-{index}"), NODES)
    assert verdict == decision.Bind(target, verdict.entry) and verdict.entry.node == target


@pytest.mark.parametrize(
    "nodes, fragment",
    [
        ({}, "node node4 from map entry 3=node4:3 does not exist"),
        ({"node4": node("node4", ready=False)}, "node node4 is not Ready (KubeletNotReady) (map entry 3)"),
        ({"node4": node("node4", unschedulable=True)}, "node node4 is cordoned"),
        (
            {"node4": node("node4", taints=[{"key": "gpu", "value": "broken", "effect": "NoSchedule"}])},
            "node node4 has taint gpu=broken:NoSchedule that the pod does not tolerate",
        ),
        ({"node4": node("node4", taints=[{"key": "down", "effect": "NoExecute"}])}, "taint down:NoExecute"),
    ],
)
def test_unschedulable_waits_for_the_node(nodes, fragment):
    verdict = decide(pod(), nodes)
    assert isinstance(verdict, decision.Unschedulable)
    assert fragment in verdict.message and verdict.node == "node4"


def test_prefer_no_schedule_taint_does_not_block():
    nodes = {"node4": node("node4", taints=[{"key": "soft", "effect": "PreferNoSchedule"}])}
    assert isinstance(decide(pod(), nodes), decision.Bind)


@pytest.mark.parametrize(
    "toleration",
    [
        {"key": "gpu", "operator": "Equal", "value": "broken", "effect": "NoSchedule"},
        {"key": "gpu", "operator": "Exists"},
        {"operator": "Exists"},
        {"key": "gpu", "value": "broken"},
    ],
)
def test_tolerated_taints_allow_binding(toleration):
    nodes = {"node4": node("node4", taints=[{"key": "gpu", "value": "broken", "effect": "NoSchedule"}])}
    assert isinstance(decide(pod(tolerations=[toleration]), nodes), decision.Bind)


@pytest.mark.parametrize(
    "toleration",
    [
        {"key": "gpu", "operator": "Equal", "value": "ok", "effect": "NoSchedule"},
        {"key": "gpu", "operator": "Exists", "effect": "NoExecute"},
        {"key": "other", "operator": "Exists"},
        {"operator": "Equal"},
    ],
)
def test_non_matching_tolerations(toleration):
    nodes = {"node4": node("node4", taints=[{"key": "gpu", "value": "broken", "effect": "NoSchedule"}])}
    assert isinstance(decide(pod(tolerations=[toleration]), nodes), decision.Unschedulable)


def test_bad_map_is_unschedulable_without_a_node_to_wait_for():
    verdict = decide(pod(annotation="3=node4"), NODES)
    assert isinstance(verdict, decision.Unschedulable) and verdict.node is None and "line 1" in verdict.message


def test_missing_annotation_is_unschedulable():
    verdict = decide(pod(annotation=None), NODES)
    assert isinstance(verdict, decision.Unschedulable) and "no gpu-scheduling-map annotation" in verdict.message


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({}, True),
        ({"spec": {"schedulerName": "default-scheduler"}}, False),
        ({"spec": {"schedulerName": "gpu-scheduler", "nodeName": "node1"}}, False),
        ({"metadata": {"name": "p-0", "deletionTimestamp": "2026-01-01T00:00:00Z"}}, False),
        ({"status": {"phase": "Succeeded"}}, False),
        ({"status": {"phase": "Failed"}}, False),
        ({"spec": {"schedulerName": "gpu-scheduler", "schedulingGates": [{"name": "example.com/queue"}]}}, False),
        ({"spec": {"schedulerName": "gpu-scheduler", "schedulingGates": []}}, True),  # the last gate removed
    ],
)
def test_is_schedulable_pod(changes, expected):
    p = {"metadata": {"name": "p-0"}, "spec": {"schedulerName": "gpu-scheduler"}, "status": {"phase": "Pending"}}
    p.update(changes)
    assert decision.is_schedulable_pod(p, "gpu-scheduler") is expected


# ---- defence in depth: a map pod the webhook never saw is not bound -------------------------------------------

WHY = "(the gpu-webhook sets it at creation; was the map annotation added after the pod was created"


@pytest.mark.parametrize(
    "containers, init, fragment",
    [
        ([{"name": "c"}], None, "container c has no CUDA_VISIBLE_DEVICES=3 " + WHY),
        ([{"name": "c", "env": [{"name": "A", "value": "a"}]}], None, "container c has no CUDA_VISIBLE_DEVICES=3"),
        (
            [{"name": "c", "env": [{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}]}],
            None,
            "container c has CUDA_VISIBLE_DEVICES='0', not 3 as its map entry 3 gives",
        ),
        (
            [
                {
                    "name": "c",
                    "env": [
                        {"name": "CUDA_VISIBLE_DEVICES", "value": "3"},
                        {"name": "CUDA_VISIBLE_DEVICES", "value": "0,1"},
                    ],
                }
            ],
            None,
            "CUDA_VISIBLE_DEVICES='0,1', not 3",
        ),
        (
            [{"name": "c", "env": [{"name": "CUDA_VISIBLE_DEVICES", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}]}],
            None,
            "CUDA_VISIBLE_DEVICES=a valueFrom reference, not 3",
        ),
        (
            [{"name": "c", "env": [{"name": "CUDA_VISIBLE_DEVICES", "value": "3"}]}],
            [{"name": "init"}],
            "init container init has no CUDA_VISIBLE_DEVICES=3",
        ),
        ([{"env": []}], None, "container #0 has no CUDA_VISIBLE_DEVICES=3"),
        ([{"name": "c\nforged log line", "env": []}], None, "container 'c\\nforged log line' has no"),
    ],
)
def test_map_pod_without_the_webhooks_env_is_not_bound(containers, init, fragment):
    spec = {"containers": containers}
    if init is not None:
        spec["initContainers"] = init
    verdict = decide(pod(**spec), NODES)
    assert isinstance(verdict, decision.Unschedulable) and verdict.node is None
    assert fragment in verdict.message, verdict.message
    assert "\n" not in verdict.message


def test_map_pod_with_env_everywhere_is_bound():
    env = [{"name": "CUDA_VISIBLE_DEVICES", "value": "3"}]
    spec = {
        "initContainers": [{"name": "i", "env": env}],
        "containers": [{"name": "a", "env": env}, {"name": "b", "env": env}],
    }
    assert isinstance(decide(pod(**spec), NODES), decision.Bind)


# ---- decide never raises: every shape is Unschedulable with the field named ----------------------------------


@pytest.mark.parametrize(
    "the_pod, fragment",
    [
        ({"metadata": []}, "metadata is an array; expected an object"),
        ({"metadata": {"name": "p-0", "annotations": "gpu-scheduling-map"}}, "metadata.annotations is a string"),
        (
            {"metadata": {"name": "p-0", "annotations": {"gpu-scheduling-map": 7}}},
            "annotation gpu-scheduling-map is a number; expected a string",
        ),
        (
            {"metadata": {"name": "p-0", "annotations": {"gpu-scheduling-map": None}}},
            "annotation gpu-scheduling-map is null",
        ),
        (
            {"metadata": {"name": "p-0", "labels": [1], "annotations": {"gpu-scheduling-map": "0=n:0"}}},
            "metadata.labels is an array",
        ),
        (
            {
                "metadata": {
                    "name": "p-0",
                    "labels": {"apps.kubernetes.io/pod-index": 0},
                    "annotations": {"gpu-scheduling-map": "0=n:0"},
                }
            },
            "label apps.kubernetes.io/pod-index is a number; expected a string",
        ),
        ({"metadata": {"name": 5, "annotations": {"gpu-scheduling-map": "0=n:0"}}}, "metadata.name is a number"),
        (
            {"metadata": {"name": "p-" + "9" * 5000, "annotations": {"gpu-scheduling-map": "0=n:0"}}},
            "has 5000 digits; at most 9 are allowed",
        ),
        ({"metadata": {"name": "p-0", "annotations": {"gpu-scheduling-map": "0=n:0"}}, "spec": []}, "spec is an array"),
        (
            {"metadata": {"name": "p-0", "annotations": {"gpu-scheduling-map": "0=n:0"}}, "spec": {"containers": {}}},
            "spec.containers is an object; expected an array of containers",
        ),
        (
            {
                "metadata": {"name": "p-0", "annotations": {"gpu-scheduling-map": "0=n:0"}},
                "spec": {"containers": ["c"]},
            },
            "spec.containers[0] is a string; expected a container object",
        ),
        (
            {
                "metadata": {"name": "p-0", "annotations": {"gpu-scheduling-map": "0=n:0"}},
                "spec": {"containers": [{"name": "c", "env": {}}]},
            },
            "spec.containers[0].env is an object",
        ),
        (
            {
                "metadata": {"name": "p-0", "annotations": {"gpu-scheduling-map": "0=n:0"}},
                "spec": {"containers": [{"name": "c", "env": [None]}]},
            },
            "spec.containers[0].env[0] is null",
        ),
        (
            {
                "metadata": {"name": "p-0", "annotations": {"gpu-scheduling-map": "0=n:0"}},
                "spec": {"containers": [{"name": "c", "env": [{"name": 1}]}]},
            },
            "spec.containers[0].env[0].name is a number; expected a string",
        ),
        (
            {
                "metadata": {"name": "p-0", "annotations": {"gpu-scheduling-map": "0=n:0"}},
                "spec": {"tolerations": "all"},
            },
            "spec.tolerations is a string; expected an array",
        ),
        (
            {
                "metadata": {"name": "p-0", "annotations": {"gpu-scheduling-map": "0=n:0"}},
                "spec": {"tolerations": [{"key": 1}]},
            },
            "spec.tolerations[0].key is a number",
        ),
        (
            {"metadata": {"name": "p-0", "annotations": {"gpu-scheduling-map": "0=n:0", "gpu.scheduling/claim": "c"}}},
            "carries both",
        ),
        ({"metadata": {"name": "p-0", "annotations": {"gpu.scheduling/claim": "c"}}}, "placed by the claim path"),
        ("pod", "the pod is a string"),
    ],
)
def test_decide_never_raises_for_a_pod_of_the_wrong_shape(the_pod, fragment):
    verdict = decide(the_pod, {"n": node("n")})
    assert isinstance(verdict, decision.Unschedulable) and fragment in verdict.message, verdict
    assert len(verdict.message) < 2000


@pytest.mark.parametrize(
    "the_pod",
    [
        {"metadata": []},
        {"metadata": {"annotations": []}},
        {},
        {"metadata": None},
        {"metadata": {"annotations": {"gpu.scheduling/claim": None}}},
    ],
)
def test_is_claim_pod_never_raises(the_pod):
    assert decision.is_claim_pod(the_pod) in (True, False)


# ---- the claim name, read the same way by the webhook and the scheduler --------------------------------------


@pytest.mark.parametrize(
    "value, name", [("train", "train"), ("  train\t", "train"), ("a.b-c", "a.b-c"), ("a" * 253, "a" * 253)]
)
def test_claim_name(value, name):
    assert podrequest.claim_name({"annotations": {"gpu.scheduling/claim": value}}) == name


@pytest.mark.parametrize(
    "meta, fragment",
    [
        ({"annotations": {"gpu.scheduling/claim": None}}, "annotation gpu.scheduling/claim is null; expected the name"),
        ({"annotations": {"gpu.scheduling/claim": 3}}, "is a number"),
        ({"annotations": {"gpu.scheduling/claim": " "}}, "is empty; expected the name of a GpuClaim"),
        ({"annotations": {"gpu.scheduling/claim": "Train"}}, "'Train' is not a valid GpuClaim name"),
        ({"annotations": {"gpu.scheduling/claim": "a\u00a0b"}}, "'a\\xa0b' is not a valid GpuClaim name"),
        ({"annotations": {"gpu.scheduling/claim": "a" * 254}}, "is not a valid GpuClaim name"),
        ({"annotations": {"gpu.scheduling/claim": "a" * 100_000}}, "…"),
        ({"annotations": {}}, "has no gpu.scheduling/claim annotation"),
        ({"annotations": ["gpu.scheduling/claim"]}, "metadata.annotations is an array"),
        ("meta", "metadata is a string"),
    ],
)
def test_bad_claim_names_raise_one_error_type(meta, fragment):
    with pytest.raises(podrequest.PodRequestError) as info:
        podrequest.claim_name(meta)
    assert fragment in str(info.value) and len(str(info.value)) < 1000


@pytest.mark.parametrize(
    "meta",
    [
        {"name": "check-9", "annotations": {"gpu-scheduling-map": TAKE_HOME}},
        {"name": "check-1", "annotations": {"gpu-scheduling-map": "0=node1:0\n1=node2"}},
        {"name": "check-1", "annotations": {"gpu-scheduling-map": "1=node2:0", "gpu.scheduling/claim": "c"}},
        {"name": "check-1", "annotations": {"gpu-scheduling-map": None}},
        {"name": "check-1", "annotations": {"gpu-scheduling-map": "0=n\u00a0:0\n" * 5000}},
        {"name": "loner", "annotations": {"gpu-scheduling-map": TAKE_HOME}},
        {
            "name": "x-1",
            "labels": {"apps.kubernetes.io/pod-index": "1" * 5000},
            "annotations": {"gpu-scheduling-map": TAKE_HOME},
        },
    ],
)
def test_webhook_and_scheduler_give_the_same_reason(meta):
    from gpu_scheduling import admission

    the_pod = {"metadata": {**meta, "namespace": "default"}, "spec": {"containers": [{"name": "c"}]}}
    request = {
        "uid": "u",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "operation": "CREATE",
        "object": the_pod,
    }
    denial = admission.review_pod(request)["response"]
    verdict = decide(the_pod, NODES)
    assert not denial["allowed"] and isinstance(verdict, decision.Unschedulable)
    assert denial["status"]["message"].endswith(": " + verdict.message)


# ---- node_view: what the nodes informer keeps -------------------------------------------------------------------


def _kubelet_node(ready: str = "True", heartbeat: str = "2026-11-27T04:00:00Z") -> dict:
    """A Node as a kubelet reports it (trimmed of nothing)."""
    return {
        "metadata": {
            "name": "node1",
            "uid": "u-1",
            "resourceVersion": "41",
            "labels": {"kubernetes.io/hostname": "node1", "zone": "a"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
            "managedFields": [{"manager": "kubelet"}],
        },
        "spec": {"podCIDR": "10.244.1.0/24", "taints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]},
        "status": {
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "8"},
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "8"},
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "lastHeartbeatTime": heartbeat},
                {"type": "Ready", "status": ready, "reason": "KubeletReady", "lastHeartbeatTime": heartbeat},
            ],
            "images": [{"names": ["registry/image:tag"], "sizeBytes": 123}] * 20,
            "addresses": [{"type": "InternalIP", "address": "172.18.0.3"}],
            "nodeInfo": {"kubeletVersion": "v1.34.4"},
        },
    }


@pytest.mark.parametrize("ready", ["True", "False"])
def test_every_reader_answers_the_same_on_the_node_view(ready):
    whole = _kubelet_node(ready)
    view = decision.node_view(whole)
    for tolerations in ([], [{"key": "gpu", "operator": "Exists"}], [dict(node_unschedulable.CORDON_TAINT)]):
        assert decision.node_problem(view, tolerations) == decision.node_problem(whole, tolerations)
    assert fit.capacity(view) == fit.capacity(whole)
    for term in (
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node1"]}]},
        {"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]},
    ):
        assert fit.term_matches(term, view) == fit.term_matches(term, whole)
    assert "images" not in view["status"] and "managedFields" not in view["metadata"]


def test_a_heartbeat_is_no_change_but_readiness_labels_and_taints_are():
    before = decision.node_view(_kubelet_node())
    beat = _kubelet_node(heartbeat="2026-11-27T04:00:10Z")
    beat["metadata"]["resourceVersion"] = "42"
    assert decision.same_node(before, decision.node_view(beat))
    assert not decision.same_node(None, before)
    relabelled = _kubelet_node()
    relabelled["metadata"]["labels"]["zone"] = "b"
    untainted = _kubelet_node()
    untainted["spec"]["taints"] = []
    for changed in (_kubelet_node(ready="False"), relabelled, untainted):
        assert not decision.same_node(before, decision.node_view(changed))


# ---- pod_view: what the pods informer keeps ---------------------------------------------------------------------


def _admitted(the_pod: dict, bound_to: str | None = None) -> dict:
    """`the_pod` as the apiserver and a kubelet leave it: defaults, a service account volume, probes, a status."""
    whole = {**the_pod, "metadata": {**the_pod["metadata"], "managedFields": [{"manager": "kubectl"}]}}
    spec = dict(whole["spec"])
    spec["volumes"] = [{"name": "kube-api-access-x", "projected": {"sources": [{"serviceAccountToken": {}}] * 3}}]
    spec["securityContext"] = {"runAsNonRoot": True}
    spec["dnsPolicy"] = "ClusterFirst"
    spec["priority"] = 7
    spec["containers"] = [
        {
            **c,
            "image": "gpu-scheduler-check:0.1",
            "command": ["python", "-m", "check"],
            "volumeMounts": [{"name": "kube-api-access-x", "mountPath": "/var/run/secrets"}],
            "livenessProbe": {"exec": {"command": ["true"]}},
            "resources": {"requests": {"cpu": "100m", "nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}},
            "ports": [{"containerPort": 8080, "hostPort": 8080}],
        }
        for c in spec["containers"]
    ]
    if bound_to:
        spec["nodeName"] = bound_to
    whole["spec"] = spec
    whole["status"] = {
        "phase": "Running" if bound_to else "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "True" if bound_to else "False", "reason": "Unschedulable"},
            {"type": "Ready", "status": "True"},
        ],
        "containerStatuses": [{"name": "c", "image": "x", "state": {"running": {}}}] * 2,
        "podIP": "10.0.0.9",
    }
    return whole


def _answer(reader, the_pod):
    """What `reader` says of `the_pod`: its result, or the error it raises (type and words)."""
    try:
        return reader(the_pod)
    except Exception as exc:  # noqa: BLE001 - a refusal is an answer too, compared like one
        return type(exc).__name__, str(exc)


@pytest.mark.parametrize("bound_to", [None, "node4"])
@pytest.mark.parametrize("claim", [False, True])
def test_every_reader_answers_the_same_on_the_pod_view(bound_to, claim):
    from gpu_scheduling import devices
    from gpu_scheduling.claims import objects, priority
    from gpu_scheduling.scheduler.controller import _scheduling_view

    annotation = None if claim else TAKE_HOME
    the_pod = pod("gpu-scheduler-check-3", annotation=annotation, tolerations=[{"key": "gpu", "operator": "Exists"}])
    whole = _admitted(the_pod, bound_to)
    if claim:
        whole["metadata"]["annotations"] = {
            "gpu.scheduling/claim": "train",
            "gpu.scheduling/allocated": "node4:0,1",
            "gpu.scheduling/gpu-ids": "0,1",
        }
    whole["spec"].setdefault("volumes", []).extend(
        [
            {"name": "data", "persistentVolumeClaim": {"claimName": "data", "readOnly": False}},
            {"name": "config", "configMap": {"name": "settings"}},
        ]
    )
    view = decision.pod_view(whole)
    assert decision.pod_view(view) == view
    claims = volumes.VolumeCache(
        claims={"default/data": {"metadata": {"name": "data", "namespace": "default"}, "spec": {}}},
    )

    def prefilters(p):
        attempt = decision.cycle(p, framework.Snapshot(fit.NodeUsage(), claims))
        return attempt if isinstance(attempt, str) else [(plugin.name, state) for plugin, state in attempt.active]

    for reader in (
        lambda p: decision.is_schedulable_pod(p, "gpu-scheduler"),
        decision.is_gated,
        decision.is_finished,
        decision.is_claim_pod,
        prefilters,
        lambda p: decide(p, NODES),
        fit.footprint,
        lambda p: fit.footprint(p, "node2"),
        objects.hold_from_pod,
        lambda p: podrequest.claim_name(p["metadata"]),
        lambda p: priority.order_key(p, "Priority"),
        lambda p: devices.count_mismatch(p, 2),
        lambda p: [c.get("status") for c in p["status"]["conditions"] if c["type"] == "PodScheduled"],
    ):
        assert _answer(reader, view) == _answer(reader, whole)
    assert _scheduling_view(view) == _scheduling_view(decision.pod_view(whole))
    kept = {"name": "data", "persistentVolumeClaim": {"claimName": "data", "readOnly": False}}
    assert view["spec"]["volumes"] == [kept], "of the volumes only the claims are kept"
    assert "image" not in view["spec"]["containers"][0]
    assert "containerStatuses" not in view["status"] and "managedFields" not in view["metadata"]
