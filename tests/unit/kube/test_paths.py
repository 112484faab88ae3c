"""The API paths, written out once: what the programs, the steps and the benchmark call."""

from gpu_scheduling import constants
from gpu_scheduling.kube import paths


def test_gpu_api_paths():
    assert paths.GPU_API == "/apis/gpu.scheduling/v1"
    assert constants.API_VERSION == "gpu.scheduling/v1"
    assert paths.NODE_STATUSES == "/apis/gpu.scheduling/v1/gpunodestatuses"
    assert paths.ALL_GPU_CLAIMS == "/apis/gpu.scheduling/v1/gpuclaims"
    assert paths.gpu_claims("ns") == "/apis/gpu.scheduling/v1/namespaces/ns/gpuclaims"
    assert paths.gpu_claim("ns", "c") == "/apis/gpu.scheduling/v1/namespaces/ns/gpuclaims/c"
    assert paths.gpu_claim_status("ns", "c") == "/apis/gpu.scheduling/v1/namespaces/ns/gpuclaims/c/status"
    assert paths.gpu_node_status("n") == "/apis/gpu.scheduling/v1/gpunodestatuses/n"
    assert paths.gpu_node_status_status("n") == "/apis/gpu.scheduling/v1/gpunodestatuses/n/status"


def test_core_api_paths():
    assert paths.CORE_API == "/api/v1"
    assert paths.NODES == "/api/v1/nodes"
    assert paths.node("n") == "/api/v1/nodes/n"
    assert paths.ALL_PODS == "/api/v1/pods"
    assert paths.pods("ns") == "/api/v1/namespaces/ns/pods"
    assert paths.pod("ns", "p") == "/api/v1/namespaces/ns/pods/p"
    assert paths.pod_binding("ns", "p") == "/api/v1/namespaces/ns/pods/p/binding"
    assert paths.pod_status("ns", "p") == "/api/v1/namespaces/ns/pods/p/status"
    assert paths.events("ns") == "/api/v1/namespaces/ns/events"


def test_lease_paths():
    assert paths.COORDINATION_API == "/apis/coordination.k8s.io/v1"
    assert paths.leases("ns") == "/apis/coordination.k8s.io/v1/namespaces/ns/leases"
    assert paths.lease("ns", "l") == "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l"
    assert paths.GPU_LEASES == "/apis/coordination.k8s.io/v1/namespaces/gpu-scheduling/leases"


def test_one_resource_model_gives_every_path():
    """The path functions and `kubectl gpu`'s resources are one model: a Resource's base, collection and item."""
    assert paths.POD.base == paths.CORE_API and paths.GPU_CLAIM.base == paths.GPU_API
    assert paths.DAEMONSET.base == "/apis/apps/v1"
    assert paths.POD.collection(None) == "/api/v1/pods" and paths.POD.collection("") == "/api/v1/pods"
    assert paths.NODE.collection("ignored") == "/api/v1/nodes"  # cluster-scoped: no namespace in its path
    assert paths.STATEFULSET.item("s", "ns") == "/apis/apps/v1/namespaces/ns/statefulsets/s"
    assert paths.EVENT.collection("ns") == "/api/v1/namespaces/ns/events"
    assert (paths.GPU_SCHEDULING_POLICY.group, paths.NODE.group) == ("gpu.scheduling", "")
    assert paths.GPU_NODE_STATUS.full == "gpunodestatuses.gpu.scheduling"
    assert paths.statefulset("ns", "s") == paths.STATEFULSET.item("s", "ns")
    assert paths.deployment("ns", "d") == "/apis/apps/v1/namespaces/ns/deployments/d"
