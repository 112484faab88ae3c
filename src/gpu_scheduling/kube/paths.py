"""The API paths the programs, the tests and the benchmark call, derived from `constants` in one place. Pure: plain
functions of names, no I/O. Names are used as given (Kubernetes names need no escaping in a path).

The first part is what the programs call; the last part holds Kubernetes' own resources that only the test harness,
the scenarios and the benchmark call, so that nothing outside this module writes a path by hand."""

from __future__ import annotations

from typing import Final

from gpu_scheduling import constants

#: The core API (Pod, Node, Binding, Event).
CORE_API: Final = f"/api/{constants.CORE_API_VERSION}"
#: The API of GpuClaim and GpuNodeStatus: "/apis/gpu.scheduling/v1".
GPU_API: Final = f"/apis/{constants.API_VERSION}"
#: The API of Lease: "/apis/coordination.k8s.io/v1".
COORDINATION_API: Final = f"/apis/{constants.LEASE_API_VERSION}"

#: Every node.
NODES: Final = f"{CORE_API}/nodes"
#: The pods of every namespace (a cluster-wide list or watch).
ALL_PODS: Final = f"{CORE_API}/pods"
#: The GpuClaims of every namespace (a cluster-wide list or watch).
ALL_GPU_CLAIMS: Final = f"{GPU_API}/{constants.GPU_CLAIM_PLURAL}"
#: Every GpuNodeStatus (cluster-scoped, one per node, named after it).
NODE_STATUSES: Final = f"{GPU_API}/{constants.GPU_NODE_STATUS_PLURAL}"
#: Every GpuSchedulingPolicy (cluster-scoped; only constants.POLICY_NAME is read).
SCHEDULING_POLICIES: Final = f"{GPU_API}/{constants.GPU_SCHEDULING_POLICY_PLURAL}"


def scheduling_policy(name: str = constants.POLICY_NAME) -> str:
    return f"{SCHEDULING_POLICIES}/{name}"


def scheduling_policy_status(name: str = constants.POLICY_NAME) -> str:
    return f"{scheduling_policy(name)}/status"


def node(name: str) -> str:
    return f"{NODES}/{name}"


def pods(namespace: str) -> str:
    return f"{CORE_API}/namespaces/{namespace}/pods"


def pod(namespace: str, name: str) -> str:
    return f"{pods(namespace)}/{name}"


def pod_binding(namespace: str, name: str) -> str:
    """The `pods/binding` subresource (POST a Binding to schedule the pod)."""
    return f"{pod(namespace, name)}/binding"


def pod_status(namespace: str, name: str) -> str:
    """The `pods/status` subresource."""
    return f"{pod(namespace, name)}/status"


def events(namespace: str) -> str:
    return f"{CORE_API}/namespaces/{namespace}/events"


def leases(namespace: str) -> str:
    return f"{COORDINATION_API}/namespaces/{namespace}/leases"


def lease(namespace: str, name: str) -> str:
    return f"{leases(namespace)}/{name}"


#: Where the GPU Leases live (one namespace, so a GPU is locked cluster-wide).
GPU_LEASES: Final = leases(constants.LEASE_NAMESPACE)


def gpu_claims(namespace: str) -> str:
    return f"{GPU_API}/namespaces/{namespace}/{constants.GPU_CLAIM_PLURAL}"


def gpu_claim(namespace: str, name: str) -> str:
    return f"{gpu_claims(namespace)}/{name}"


def gpu_claim_status(namespace: str, name: str) -> str:
    """The GpuClaim's `status` subresource."""
    return f"{gpu_claim(namespace, name)}/status"


def gpu_node_status(name: str) -> str:
    return f"{NODE_STATUSES}/{name}"


def gpu_node_status_status(name: str) -> str:
    """The GpuNodeStatus's `status` subresource."""
    return f"{gpu_node_status(name)}/status"


# ---- Kubernetes' own resources that the harness, the scenarios and the benchmark call ------------------------

APPS_API: Final = "/apis/apps/v1"
POLICY_API: Final = "/apis/policy/v1"
NAMESPACES: Final = f"{CORE_API}/namespaces"
SELF_SUBJECT_REVIEWS: Final = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
CRDS: Final = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
MUTATING_WEBHOOK_CONFIGURATIONS: Final = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
STORAGE_CLASSES: Final = "/apis/storage.k8s.io/v1/storageclasses"
PERSISTENT_VOLUMES: Final = f"{CORE_API}/persistentvolumes"


def namespace(name: str) -> str:
    return f"{NAMESPACES}/{name}"


def config_map(namespace_: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace_}/configmaps/{name}"


def service_account(namespace_: str, name: str) -> str:
    return f"{namespace(namespace_)}/serviceaccounts/{name}"


def service_account_token(namespace_: str, name: str) -> str:
    """The `serviceaccounts/token` subresource (POST a TokenRequest)."""
    return f"{service_account(namespace_, name)}/token"


def pod_log(namespace_: str, name: str) -> str:
    return f"{pod(namespace_, name)}/log"


def pod_eviction(namespace_: str, name: str) -> str:
    """The `pods/eviction` subresource (POST an Eviction)."""
    return f"{pod(namespace_, name)}/eviction"


def statefulsets(namespace_: str) -> str:
    return f"{APPS_API}/namespaces/{namespace_}/statefulsets"


def statefulset(namespace_: str, name: str) -> str:
    return f"{statefulsets(namespace_)}/{name}"


def deployment(namespace_: str, name: str) -> str:
    return f"{APPS_API}/namespaces/{namespace_}/deployments/{name}"


def pod_disruption_budget(namespace_: str, name: str) -> str:
    return f"{POLICY_API}/namespaces/{namespace_}/poddisruptionbudgets/{name}"


def persistent_volume(name: str) -> str:
    return f"{PERSISTENT_VOLUMES}/{name}"


def persistent_volume_claims(namespace_: str) -> str:
    return f"{namespace(namespace_)}/persistentvolumeclaims"


def persistent_volume_claim(namespace_: str, name: str) -> str:
    return f"{persistent_volume_claims(namespace_)}/{name}"


PRIORITY_CLASSES: Final = "/apis/scheduling.k8s.io/v1/priorityclasses"


def priority_class(name: str) -> str:
    return f"{PRIORITY_CLASSES}/{name}"
