"""Every annotation, label, environment and name the components agree on. Constants only, no logic.

The Jinja templates of the test-bed take the same keys from inventory variables; tests/unit/test_constants.py
compares the two so they cannot drift apart.
"""

from typing import Final

#: Pod annotation holding the map `<index>=<node>:<gpu ids>`, one entry per line (the take-home's contract).
MAP_ANNOTATION: Final = "gpu-scheduling-map"

#: Label the StatefulSet controller puts on its pods (Kubernetes >= 1.28); preferred over parsing the name.
POD_INDEX_LABEL: Final = "apps.kubernetes.io/pod-index"

#: Environment variable set in every container from the pod's map entry.
CUDA_ENV: Final = "CUDA_VISIBLE_DEVICES"

#: Default `spec.schedulerName` this scheduler answers to (overridable by flag or SCHEDULER_NAME env).
DEFAULT_SCHEDULER_NAME: Final = "gpu-scheduler"

#: Environment variable that overrides the scheduler name (as in the reference implementation).
SCHEDULER_NAME_ENV: Final = "SCHEDULER_NAME"

#: Environment variable the check service reads for its node (filled from the downward API `spec.nodeName`).
NODE_NAME_ENV: Final = "NODE_NAME"

#: Name of the webhook inside the MutatingWebhookConfiguration (must be a qualified DNS-like name).
WEBHOOK_NAME: Final = "cuda-env.gpu-scheduling.io"

#: Secret holding the webhook's serving certificate (kube-system), as in the take-home.
WEBHOOK_TLS_SECRET: Final = "cuda-env-webhook-tls"

#: Reason of the PodScheduled=False condition and the Event when a pod cannot be placed (as kube-scheduler).
REASON_UNSCHEDULABLE: Final = "Unschedulable"
EVENT_FAILED_SCHEDULING: Final = "FailedScheduling"
EVENT_SCHEDULED: Final = "Scheduled"

# ---- GpuClaim (see README "GpuClaim") --------------------------------------------------------------------------

#: API group and version of GpuClaim and GpuNodeStatus.
CLAIM_GROUP: Final = "gpu.scheduling"
CLAIM_VERSION: Final = "v1"

#: Pod annotation naming the pod's GpuClaim (same namespace), set by the user.
CLAIM_ANNOTATION: Final = "gpu.scheduling/claim"

#: Pod annotation `<node>:<gpu ids>` of a claim pod. The scheduler puts it on the Binding, and the apiserver copies a
#: Binding's annotations onto the pod in the same write that sets spec.nodeName.
ALLOCATED_ANNOTATION: Final = "gpu.scheduling/allocated"

#: Pod annotation holding only the GPU ids; the webhook points CUDA_VISIBLE_DEVICES at it through the downward
#: API, because a container's env is fixed at creation while the allocation happens later, before binding.
GPU_IDS_ANNOTATION: Final = "gpu.scheduling/gpu-ids"

#: Pod annotation with the exclusivity of the allocation (Exclusive or Shared), so a bound pod says what it holds.
EXCLUSIVITY_ANNOTATION: Final = "gpu.scheduling/exclusivity"

#: The project's own namespace: the per-GPU Leases `gpu-<node>-<id>` (one place, so a GPU is locked cluster-wide)
#: and the scheduler's leader-election Lease. Not kube-system: the scheduler may write Leases here and nowhere else.
LEASE_NAMESPACE: Final = "gpu-scheduling"
