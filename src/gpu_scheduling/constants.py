"""Every annotation, label, environment variable, API group and version, resource and name the components agree
on. Constants only, no logic beyond composing constants; the API paths built from them are in `kube.paths`.

The Jinja templates of the test-bed take the same keys from inventory variables; tests/unit/testbed/test_constants.py
compares the two so they cannot drift apart.
"""

from typing import Final, Literal, get_args

#: Pod annotation holding the map `<index>=<node>:<gpu ids>`, one entry per line (the take-home's contract).
MAP_ANNOTATION: Final = "gpu-scheduling-map"

#: Label the StatefulSet controller puts on its pods (Kubernetes >= 1.28); preferred over parsing the name.
POD_INDEX_LABEL: Final = "apps.kubernetes.io/pod-index"

# The index labels (and annotations) of the other workload controllers, read by gpumap.pod_index in the order its
# docstring gives. None is set by this project: each is the controller's own.
#: Indexed Job: the pod's completion index; a label since Kubernetes 1.28, an annotation of the same key before.
JOB_COMPLETION_INDEX_KEY: Final = "batch.kubernetes.io/job-completion-index"
#: JobSet: the child Job's index across all the JobSet's replicated Jobs.
JOBSET_GLOBAL_INDEX_LABEL: Final = "jobset.sigs.k8s.io/job-global-index"
#: JobSet: how many child Jobs the JobSet has in all.
JOBSET_GLOBAL_REPLICAS_LABEL: Final = "jobset.sigs.k8s.io/global-replicas"
#: LeaderWorkerSet: the pod's index in its group (0 is the leader).
LWS_WORKER_INDEX_LABEL: Final = "leaderworkerset.sigs.k8s.io/worker-index"
#: LeaderWorkerSet: the group's index.
LWS_GROUP_INDEX_LABEL: Final = "leaderworkerset.sigs.k8s.io/group-index"
#: LeaderWorkerSet: the number of pods in a group, leader included (an annotation).
LWS_SIZE_ANNOTATION: Final = "leaderworkerset.sigs.k8s.io/size"
#: Kubeflow training operator: the pod's index among the replicas of its type (Master, Worker, ...).
TRAINING_REPLICA_INDEX_LABEL: Final = "training.kubeflow.org/replica-index"

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

#: Environment variables that set the default `--log-level` and `--log-format` of every program.
LOG_LEVEL_ENV: Final = "LOG_LEVEL"
LOG_FORMAT_ENV: Final = "LOG_FORMAT"

#: Reason of the PodScheduled=False condition and the Event when a pod cannot be placed (as kube-scheduler).
REASON_UNSCHEDULABLE: Final = "Unschedulable"
EVENT_FAILED_SCHEDULING: Final = "FailedScheduling"
EVENT_SCHEDULED: Final = "Scheduled"
EVENT_PREEMPTED: Final = "Preempted"
"""The event a preempted pod gets (kube-scheduler's reason)."""
CONDITION_DISRUPTION_TARGET: Final = "DisruptionTarget"
"""The condition a pod about to be deleted for a disruption gets (status True), before the deletion."""
REASON_PREEMPTION_BY_SCHEDULER: Final = "PreemptionByScheduler"
"""Its reason when a scheduler preempts it."""

# ---- GpuClaim (see docs/claims.md) ------------------------------------------------------------------------------

#: API group and version of GpuClaim and GpuNodeStatus, and their `apiVersion`.
CLAIM_GROUP: Final = "gpu.scheduling"
CLAIM_VERSION: Final = "v1"
API_VERSION: Final = f"{CLAIM_GROUP}/{CLAIM_VERSION}"

#: Kinds and resource names (plurals) of the two CRDs (charts/gpu-scheduler/crds/).
GPU_CLAIM_KIND: Final = "GpuClaim"
GPU_CLAIM_PLURAL: Final = "gpuclaims"
GPU_NODE_STATUS_KIND: Final = "GpuNodeStatus"
GPU_NODE_STATUS_PLURAL: Final = "gpunodestatuses"

#: The cluster-scoped GpuSchedulingPolicy: the strategy and queue order the scheduler applies from its next decision.
#: Only the one named POLICY_NAME is read (its CRD refuses any other name).
GPU_SCHEDULING_POLICY_KIND: Final = "GpuSchedulingPolicy"
GPU_SCHEDULING_POLICY_PLURAL: Final = "gpuschedulingpolicies"
POLICY_NAME: Final = "default"

# The GpuClaim's enums, each spelled once (as the CRDs spell them, charts/gpu-scheduler/crds; a unit test compares):
# the type the pure code reads and the tuple of its values the programs validate with.

#: Node strategies for GpuClaims (`spec.strategy`, the policy's `defaultStrategy`, `--strategy`): BestFit packs
#: (the default), LeastUtilized spreads, RoundRobin takes the next feasible node after the last one it chose.
Strategy = Literal["BestFit", "LeastUtilized", "RoundRobin"]
STRATEGIES: Final[tuple[Strategy, ...]] = get_args(Strategy)
#: How a claim's GPUs are chosen within a node (`spec.devices.policy`).
Policy = Literal["contiguous", "spread", "preferIds"]
POLICIES: Final[tuple[Policy, ...]] = get_args(Policy)
#: Whether a claim's GPUs may be shared (`spec.devices.exclusivity`); the scheduler refuses MIG.
Exclusivity = Literal["Exclusive", "Shared", "MIG"]
EXCLUSIVITIES: Final[tuple[Exclusivity, ...]] = get_args(Exclusivity)
#: Whether a claim's GPUs must share an NVLink island (`spec.topology.mode`).
TopologyMode = Literal["Required", "Preferred", "Ignore"]
TOPOLOGY_MODES: Final[tuple[TopologyMode, ...]] = get_args(TopologyMode)
#: A GpuClaim's `status.phase`.
ClaimPhase = Literal["Pending", "Reserved", "Bound", "Failed"]
CLAIM_PHASES: Final[tuple[ClaimPhase, ...]] = get_args(ClaimPhase)
DEFAULT_STRATEGY: Final = "BestFit"
#: Environment variable that sets the scheduler's `--strategy` (the reference's name).
STRATEGY_ENV: Final = "SCHEDULING_STRATEGY"

#: Order pending claim pods are served in (the policy's `queueOrder`): Priority (pod priority, then age) or FIFO
#: (age alone).
QueueOrder = Literal["Priority", "FIFO"]
QUEUE_ORDERS: Final[tuple[QueueOrder, ...]] = get_args(QueueOrder)
DEFAULT_QUEUE_ORDER: Final = "Priority"

#: Pod annotation naming the pod's GpuClaim (same namespace), set by the user.
CLAIM_ANNOTATION: Final = "gpu.scheduling/claim"

#: Gangs (docs/gangs.md): pod annotations naming the group a pod belongs to (a GpuClaim's `spec.gangRef` names it for
#: the claim's pods), the least number of members placed at once, and the node label whose one value (zone, rack,
#: block) the whole gang must share (Required) or should share (Preferred). Shaped after KAI's and the Workload API's
#: PodGroup: gang = the PodGroup's name, min-members = `minMember` / `gang.minCount`, topology = the required or
#: preferred topology level.
GANG_ANNOTATION: Final = "gpu.scheduling/gang"
GANG_MIN_MEMBERS_ANNOTATION: Final = "gpu.scheduling/gang-min-members"
GANG_TOPOLOGY_ANNOTATION: Final = "gpu.scheduling/gang-topology"
GANG_TOPOLOGY_MODE_ANNOTATION: Final = "gpu.scheduling/gang-topology-mode"
GangTopologyMode = Literal["Required", "Preferred"]
GANG_TOPOLOGY_MODES: Final[tuple[GangTopologyMode, ...]] = get_args(GangTopologyMode)

#: Kubernetes' own gang API (KEP-4671; docs/gangs.md): a pod joins the PodGroup its `spec.schedulingGroup.podGroupName`
#: names (same namespace), whose `spec.schedulingPolicy.gang.minCount` is the gang's minimum and whose
#: `spec.schedulingConstraints.topology[0].key` its Required topology. Served as beta from 1.37 (feature gate
#: GenericWorkload, off by default, and the runtime-config of this version); the scheduler reads it only where
#: discovery finds it served.
SCHEDULING_API_GROUP: Final = "scheduling.k8s.io"
POD_GROUP_VERSION: Final = "v1beta1"
POD_GROUP_API_VERSION: Final = f"{SCHEDULING_API_GROUP}/{POD_GROUP_VERSION}"
POD_GROUP_KIND: Final = "PodGroup"
POD_GROUP_PLURAL: Final = "podgroups"
#: Pod annotation where gpu-webhook records `spec.schedulingGroup.podGroupName` at creation: an apiserver whose
#: GenericWorkload gate is off drops the field after mutating admission (PrepareForCreate), and the record keeps such a
#: pod from being placed alone. The scheduler reads the field, else this annotation; both, disagreeing, make it wait.
POD_GROUP_ANNOTATION: Final = "gpu.scheduling/pod-group"

#: Events of gangs: one that waits too long for its members, and one that dropped below its size after starting.
EVENT_GANG_INCOMPLETE: Final = "GangIncomplete"
EVENT_GANG_BROKEN: Final = "GangBelowMinimum"

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

#: Labels on every GPU Lease, so the scheduler can watch them with one selector (`GPU_LEASE_SELECTOR`). The node
#: label is the node name when it fits a label value (63 characters), else a shortened form with a hash; the full
#: name is the annotation LEASE_NODE_ANNOTATION.
LEASE_LABEL: Final = "gpu.scheduling/lease"
LEASE_LABEL_VALUE: Final = "gpu"
GPU_LEASE_SELECTOR: Final = f"{LEASE_LABEL}={LEASE_LABEL_VALUE}"
LEASE_NODE_LABEL: Final = "gpu.scheduling/node"
LEASE_GPU_LABEL: Final = "gpu.scheduling/gpu"
LEASE_EXCLUSIVITY_LABEL: Final = "gpu.scheduling/exclusivity"
LEASE_NODE_ANNOTATION: Final = "gpu.scheduling/node"

#: Pod UIDs sharing a Shared GPU, comma-separated (holderIdentity holds one identity only), and the same pods'
#: "<namespace>/<name>" in the same order, so that whether a holder is alive can be asked of the API by name.
LEASE_HOLDERS_ANNOTATION: Final = "gpu.scheduling/holders"
LEASE_HOLDER_PODS_ANNOTATION: Final = "gpu.scheduling/holder-pods"

#: Node annotation declaring a simulated inventory such as `count=8,islands=2,bandwidth=600/64,unhealthy=7`
#: (read by gpu-inventory-agent where NVML does not answer; see agent.inventory).
SIMULATED_ANNOTATION: Final = "gpu.scheduling/simulated-inventory"

# ---- Kubernetes APIs the programs call --------------------------------------------------------------------------

#: Version of the core API (`/api/v1`): Pod, Node, Binding, Event, DeleteOptions.
CORE_API_VERSION: Final = "v1"

#: Group and version of Lease (the GPU locks and the leader election), and its `apiVersion`.
COORDINATION_GROUP: Final = "coordination.k8s.io"
COORDINATION_VERSION: Final = "v1"
LEASE_API_VERSION: Final = f"{COORDINATION_GROUP}/{COORDINATION_VERSION}"

#: `apiVersion` of the AdmissionReview the webhook reads and answers.
ADMISSION_API_VERSION: Final = "admission.k8s.io/v1"

# ---- gpu-board ---------------------------------------------------------------------------------------------------

#: The board's program name, and the default name of its image, Deployment, Service and ServiceAccount.
BOARD_NAME: Final = "gpu-board"

#: Every object the board's create form makes carries `BOARD_CREATED_LABEL: BOARD_NAME` and
#: `BOARD_WORKLOAD_LABEL: <the workload's name>`; the board deletes only objects carrying both.
BOARD_CREATED_LABEL: Final = "gpu.scheduling/created-by"
BOARD_WORKLOAD_LABEL: Final = "gpu.scheduling/board-workload"

#: Topology levels above the node that the board groups by, from node labels (the NVLink island always follows).
DEFAULT_TOPOLOGY_LABELS: Final = ("topology.kubernetes.io/zone",)

#: `apiVersion` of the board's state document and of every payload of its event stream.
BOARD_API_VERSION: Final = "board.gpu.scheduling/v1"

# ---- The node side: the kubelet device plugin (gpu-device-plugin; see docs/gpu-device-plugin.md) ----------------

#: The extended resource gpu-device-plugin registers with each node's kubelet. One unit is one container's use of
#: one GPU (a slot: DEVICE_SLOTS_DEFAULT of them per GPU, so a Shared GPU can be given to several containers). Only
#: pods of this scheduler may request it (the chart's admission policy), so no other scheduler counts its units.
GPU_RESOURCE: Final = "gpu.scheduling/gpu"

#: Slots a GPU is advertised as (the chart's devicePlugin.slotsPerGpu): how many containers may be given one GPU at
#: once. An Exclusive allocation leaves the other slots unused: only this scheduler's pods can take them, and it
#: never gives an Exclusive GPU to a second pod.
DEVICE_SLOTS_DEFAULT: Final = 8

#: Environment variables the device plugin sets in every container it is asked for: the node's GPU ids the kubelet
#: gave it (comma-separated, as the map writes them), and their UUIDs for NVIDIA's container runtime.
DEVICE_GPUS_ENV: Final = "GPU_SCHEDULING_GPUS"
NVIDIA_DEVICES_ENV: Final = "NVIDIA_VISIBLE_DEVICES"

#: Where a simulated GPU's file (its id, UUID and node) is mounted in a container, one read-only file per GPU
#: named gpu<id>.
DEVICE_FILES_DIR: Final = "/run/gpu-scheduling/gpus"

#: The node label NVIDIA's GPU Operator reads to keep its own device plugin off a node (set to "false").
NVIDIA_DEVICE_PLUGIN_LABEL: Final = "nvidia.com/gpu.deploy.device-plugin"
#: NVIDIA's device plugin's resource: a node that advertises it hands the same GPUs out a second time.
NVIDIA_GPU_RESOURCE: Final = "nvidia.com/gpu"
