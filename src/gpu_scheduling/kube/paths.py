"""The API paths the programs, the tests and the benchmark call, derived from `constants` in one place. Pure: plain
functions of names, no I/O. Names are used as given (Kubernetes names need no escaping in a path).

One model: a :class:`Resource` (kind, plural, apiVersion, namespaced) gives its collection and item paths, and the
functions below are those paths for the resources the programs call; `kubectl gpu` passes the `Resource` itself
(its requests name the resource as kubectl and RBAC do, `gpuclaims.gpu.scheduling`).

The first part is what the programs call; the last part holds Kubernetes' own resources that only the test harness,
the scenarios and the benchmark call, so that nothing outside this module writes a path by hand."""

from __future__ import annotations

import dataclasses
from typing import Final

from gpu_scheduling import constants


@dataclasses.dataclass(frozen=True)
class Resource:
    """A kind of object the API serves: `/api/v1` for the core group, else `/apis/<group>/<version>`."""

    kind: str
    plural: str
    api_version: str
    namespaced: bool

    @property
    def base(self) -> str:
        """The API's path: "/api/v1", "/apis/gpu.scheduling/v1"."""
        return f"/apis/{self.api_version}" if self.group else f"/api/{self.api_version}"

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def full(self) -> str:
        """`plural.group` as kubectl and RBAC name it (`pods` for the core group)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def collection(self, namespace: str | None = None) -> str:
        """The objects in `namespace`, or in every namespace (and those of a cluster-scoped resource)."""
        if self.namespaced and namespace:
            return f"{self.base}/namespaces/{namespace}/{self.plural}"
        return f"{self.base}/{self.plural}"

    def item(self, name: str, namespace: str | None = None) -> str:
        return f"{self.collection(namespace)}/{name}"


GPU_CLAIM: Final = Resource(constants.GPU_CLAIM_KIND, constants.GPU_CLAIM_PLURAL, constants.API_VERSION, True)
GPU_NODE_STATUS: Final = Resource(
    constants.GPU_NODE_STATUS_KIND, constants.GPU_NODE_STATUS_PLURAL, constants.API_VERSION, False
)
GPU_SCHEDULING_POLICY: Final = Resource(
    constants.GPU_SCHEDULING_POLICY_KIND, constants.GPU_SCHEDULING_POLICY_PLURAL, constants.API_VERSION, False
)
POD: Final = Resource("Pod", "pods", constants.CORE_API_VERSION, True)
POD_GROUP: Final = Resource(constants.POD_GROUP_KIND, constants.POD_GROUP_PLURAL, constants.POD_GROUP_API_VERSION, True)
NODE: Final = Resource("Node", "nodes", constants.CORE_API_VERSION, False)
EVENT: Final = Resource("Event", "events", constants.CORE_API_VERSION, True)
LEASE: Final = Resource("Lease", "leases", constants.LEASE_API_VERSION, True)
STATEFULSET: Final = Resource("StatefulSet", "statefulsets", "apps/v1", True)
JOB: Final = Resource("Job", "jobs", "batch/v1", True)
DEPLOYMENT: Final = Resource("Deployment", "deployments", "apps/v1", True)
DAEMONSET: Final = Resource("DaemonSet", "daemonsets", "apps/v1", True)
FLOW_SCHEMA: Final = Resource("FlowSchema", "flowschemas", "flowcontrol.apiserver.k8s.io/v1", False)
PRIORITY_LEVEL: Final = Resource(
    "PriorityLevelConfiguration", "prioritylevelconfigurations", "flowcontrol.apiserver.k8s.io/v1", False
)

#: The core API (Pod, Node, Binding, Event).
CORE_API: Final = POD.base
#: The API of GpuClaim and GpuNodeStatus: "/apis/gpu.scheduling/v1".
GPU_API: Final = GPU_CLAIM.base
#: The API of Kubernetes' PodGroup, asked at start whether it is served: "/apis/scheduling.k8s.io/v1beta1".
POD_GROUP_API: Final = POD_GROUP.base
#: The API of Lease: "/apis/coordination.k8s.io/v1".
COORDINATION_API: Final = LEASE.base

#: Every node.
NODES: Final = NODE.collection()
#: The pods of every namespace (a cluster-wide list or watch).
ALL_PODS: Final = POD.collection()
#: The GpuClaims of every namespace (a cluster-wide list or watch).
ALL_GPU_CLAIMS: Final = GPU_CLAIM.collection()
#: Every GpuNodeStatus (cluster-scoped, one per node, named after it).
NODE_STATUSES: Final = GPU_NODE_STATUS.collection()
#: Every GpuSchedulingPolicy (cluster-scoped; only constants.POLICY_NAME is read).
SCHEDULING_POLICIES: Final = GPU_SCHEDULING_POLICY.collection()
#: The PodGroups of every namespace (a cluster-wide list or watch).
ALL_POD_GROUPS: Final = POD_GROUP.collection()


def scheduling_policy(name: str = constants.POLICY_NAME) -> str:
    return GPU_SCHEDULING_POLICY.item(name)


def scheduling_policy_status(name: str = constants.POLICY_NAME) -> str:
    return f"{scheduling_policy(name)}/status"


def node(name: str) -> str:
    return NODE.item(name)


def pods(namespace: str) -> str:
    return POD.collection(namespace)


def pod(namespace: str, name: str) -> str:
    return POD.item(name, namespace)


def pod_binding(namespace: str, name: str) -> str:
    """The `pods/binding` subresource (POST a Binding to schedule the pod)."""
    return f"{pod(namespace, name)}/binding"


def pod_status(namespace: str, name: str) -> str:
    """The `pods/status` subresource."""
    return f"{pod(namespace, name)}/status"


def events(namespace: str) -> str:
    return EVENT.collection(namespace)


def event(namespace: str, name: str) -> str:
    return EVENT.item(name, namespace)


def leases(namespace: str) -> str:
    return LEASE.collection(namespace)


def lease(namespace: str, name: str) -> str:
    return LEASE.item(name, namespace)


#: Where the GPU Leases live (one namespace, so a GPU is locked cluster-wide).
GPU_LEASES: Final = leases(constants.LEASE_NAMESPACE)


def gpu_claims(namespace: str) -> str:
    return GPU_CLAIM.collection(namespace)


def gpu_claim(namespace: str, name: str) -> str:
    return GPU_CLAIM.item(name, namespace)


def gpu_claim_status(namespace: str, name: str) -> str:
    """The GpuClaim's `status` subresource."""
    return f"{gpu_claim(namespace, name)}/status"


def pod_groups(namespace: str) -> str:
    return POD_GROUP.collection(namespace)


def pod_group(namespace: str, name: str) -> str:
    return POD_GROUP.item(name, namespace)


def gpu_node_status(name: str) -> str:
    return GPU_NODE_STATUS.item(name)


def gpu_node_status_status(name: str) -> str:
    """The GpuNodeStatus's `status` subresource."""
    return f"{gpu_node_status(name)}/status"


# ---- Kubernetes' own resources that the harness, the scenarios and the benchmark call ------------------------

NAMESPACE: Final = Resource("Namespace", "namespaces", constants.CORE_API_VERSION, False)
CONFIG_MAP: Final = Resource("ConfigMap", "configmaps", constants.CORE_API_VERSION, True)
SERVICE_ACCOUNT: Final = Resource("ServiceAccount", "serviceaccounts", constants.CORE_API_VERSION, True)
PERSISTENT_VOLUME: Final = Resource("PersistentVolume", "persistentvolumes", constants.CORE_API_VERSION, False)
PERSISTENT_VOLUME_CLAIM: Final = Resource(
    "PersistentVolumeClaim", "persistentvolumeclaims", constants.CORE_API_VERSION, True
)
POD_DISRUPTION_BUDGET: Final = Resource("PodDisruptionBudget", "poddisruptionbudgets", "policy/v1", True)
PRIORITY_CLASS: Final = Resource("PriorityClass", "priorityclasses", "scheduling.k8s.io/v1", False)
STORAGE_CLASS: Final = Resource("StorageClass", "storageclasses", "storage.k8s.io/v1", False)
CSI_NODE: Final = Resource("CSINode", "csinodes", "storage.k8s.io/v1", False)
CRD: Final = Resource("CustomResourceDefinition", "customresourcedefinitions", "apiextensions.k8s.io/v1", False)
MUTATING_WEBHOOK_CONFIGURATION: Final = Resource(
    "MutatingWebhookConfiguration", "mutatingwebhookconfigurations", "admissionregistration.k8s.io/v1", False
)
SELF_SUBJECT_REVIEW: Final = Resource("SelfSubjectReview", "selfsubjectreviews", "authentication.k8s.io/v1", False)
SUBJECT_ACCESS_REVIEW: Final = Resource("SubjectAccessReview", "subjectaccessreviews", "authorization.k8s.io/v1", False)

APPS_API: Final = STATEFULSET.base
POLICY_API: Final = POD_DISRUPTION_BUDGET.base
NAMESPACES: Final = NAMESPACE.collection()
SELF_SUBJECT_REVIEWS: Final = SELF_SUBJECT_REVIEW.collection()
SUBJECT_ACCESS_REVIEWS: Final = SUBJECT_ACCESS_REVIEW.collection()
CRDS: Final = CRD.collection()
MUTATING_WEBHOOK_CONFIGURATIONS: Final = MUTATING_WEBHOOK_CONFIGURATION.collection()
STORAGE_CLASSES: Final = STORAGE_CLASS.collection()
PERSISTENT_VOLUMES: Final = PERSISTENT_VOLUME.collection()
PRIORITY_CLASSES: Final = PRIORITY_CLASS.collection()


def namespace(name: str) -> str:
    return NAMESPACE.item(name)


def config_map(namespace_: str, name: str) -> str:
    return CONFIG_MAP.item(name, namespace_)


def service_account(namespace_: str, name: str) -> str:
    return SERVICE_ACCOUNT.item(name, namespace_)


def service_account_token(namespace_: str, name: str) -> str:
    """The `serviceaccounts/token` subresource (POST a TokenRequest)."""
    return f"{service_account(namespace_, name)}/token"


def pod_log(namespace_: str, name: str) -> str:
    return f"{pod(namespace_, name)}/log"


def pod_eviction(namespace_: str, name: str) -> str:
    """The `pods/eviction` subresource (POST an Eviction)."""
    return f"{pod(namespace_, name)}/eviction"


def statefulsets(namespace_: str) -> str:
    return STATEFULSET.collection(namespace_)


def statefulset(namespace_: str, name: str) -> str:
    return STATEFULSET.item(name, namespace_)


def jobs(namespace_: str) -> str:
    return JOB.collection(namespace_)


def deployment(namespace_: str, name: str) -> str:
    return DEPLOYMENT.item(name, namespace_)


def pod_disruption_budget(namespace_: str, name: str) -> str:
    return POD_DISRUPTION_BUDGET.item(name, namespace_)


def persistent_volume(name: str) -> str:
    return PERSISTENT_VOLUME.item(name)


def persistent_volume_claims(namespace_: str) -> str:
    return PERSISTENT_VOLUME_CLAIM.collection(namespace_)


def persistent_volume_claim(namespace_: str, name: str) -> str:
    return PERSISTENT_VOLUME_CLAIM.item(name, namespace_)


def priority_class(name: str) -> str:
    return PRIORITY_CLASS.item(name)
