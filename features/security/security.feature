@kind
Feature: Least privilege on the KinD test-bed: what each service account may do, and what no one may change

  RBAC gives every service account the test-bed deploys the verbs its program calls and nothing more (the board's
  create form: only in the namespaces it is given, only what it makes); two ValidatingAdmissionPolicies hold what
  RBAC cannot express: the map, the claim and the allocation annotations of a pod are fixed at its creation, and
  the inventory agent writes only the GpuNodeStatus of the node its token is bound to. (docs/security.md;
  charts/gpu-scheduler/templates/admission-policies.yaml, templates/board/rbac.yaml.)

  Scenario Outline: <account> <answer> <verb> <resource> in <namespace>
    Then "kubectl auth can-i <verb> <resource>" as the service account "<account>" in <namespace> answers <answer>

    Examples: the scheduler binds, reports, binds volumes and keeps its Leases in its own namespace; it never rewrites a pod
      | account                   | verb   | resource               | namespace      | answer |
      | kube-system:gpu-scheduler | watch  | pods                   | all namespaces | yes    |
      | kube-system:gpu-scheduler | get    | pods                   | all namespaces | yes    |
      | kube-system:gpu-scheduler | watch  | nodes                  | the cluster    | yes    |
      | kube-system:gpu-scheduler | create | pods/binding           | all namespaces | yes    |
      | kube-system:gpu-scheduler | patch  | pods/status            | all namespaces | yes    |
      | kube-system:gpu-scheduler | create | events                 | all namespaces | yes    |
      | kube-system:gpu-scheduler | watch  | gpuclaims              | all namespaces | yes    |
      | kube-system:gpu-scheduler | patch  | gpuclaims/status       | all namespaces | yes    |
      | kube-system:gpu-scheduler | watch  | gpunodestatuses        | the cluster    | yes    |
      | kube-system:gpu-scheduler | watch  | gpuschedulingpolicies  | the cluster    | yes    |
      | kube-system:gpu-scheduler | create | leases                 | gpu-scheduling | yes    |
      | kube-system:gpu-scheduler | update | leases                 | gpu-scheduling | yes    |
      | kube-system:gpu-scheduler | delete | leases                 | gpu-scheduling | yes    |
      | kube-system:gpu-scheduler | patch  | pods                   | all namespaces | no     |
      | kube-system:gpu-scheduler | patch  | pods                   | kube-system    | no     |
      | kube-system:gpu-scheduler | update | pods                   | default        | no     |
      | kube-system:gpu-scheduler | create | pods                   | default        | no     |
      | kube-system:gpu-scheduler | delete | pods                   | all namespaces | yes    |
      | kube-system:gpu-scheduler | watch  | poddisruptionbudgets   | all namespaces | yes    |
      | kube-system:gpu-scheduler | create | poddisruptionbudgets   | default        | no     |
      | kube-system:gpu-scheduler | delete | poddisruptionbudgets   | all namespaces | no     |
      | kube-system:gpu-scheduler | get    | priorityclasses        | the cluster    | no     |
      | kube-system:gpu-scheduler | create | pods/eviction          | all namespaces | no     |
      | kube-system:gpu-scheduler | update | leases                 | kube-system    | no     |
      | kube-system:gpu-scheduler | create | leases                 | kube-system    | no     |
      | kube-system:gpu-scheduler | delete | leases                 | kube-system    | no     |
      | kube-system:gpu-scheduler | update | leases                 | default        | no     |
      | kube-system:gpu-scheduler | delete | nodes                  | the cluster    | no     |
      | kube-system:gpu-scheduler | patch  | nodes                  | the cluster    | no     |
      | kube-system:gpu-scheduler | patch  | events                 | all namespaces | yes    |
      | kube-system:gpu-scheduler | update | events                 | all namespaces | no     |
      | kube-system:gpu-scheduler | delete | events                 | all namespaces | no     |
      | kube-system:gpu-scheduler | update | gpuclaims              | all namespaces | no     |
      | kube-system:gpu-scheduler | create | gpunodestatuses        | the cluster    | no     |
      | kube-system:gpu-scheduler | patch  | gpunodestatuses/status | the cluster    | no     |
      | kube-system:gpu-scheduler | patch  | gpuschedulingpolicies  | the cluster    | no     |
      | kube-system:gpu-scheduler | create | gpuschedulingpolicies  | the cluster    | no     |
      | kube-system:gpu-scheduler | watch  | persistentvolumeclaims | all namespaces | yes    |
      | kube-system:gpu-scheduler | patch  | persistentvolumeclaims | all namespaces | yes    |
      | kube-system:gpu-scheduler | update | persistentvolumeclaims | all namespaces | no     |
      | kube-system:gpu-scheduler | create | persistentvolumeclaims | default        | no     |
      | kube-system:gpu-scheduler | delete | persistentvolumeclaims | all namespaces | no     |
      | kube-system:gpu-scheduler | watch  | persistentvolumes      | the cluster    | yes    |
      | kube-system:gpu-scheduler | patch  | persistentvolumes      | the cluster    | yes    |
      | kube-system:gpu-scheduler | create | persistentvolumes      | the cluster    | no     |
      | kube-system:gpu-scheduler | delete | persistentvolumes      | the cluster    | no     |
      | kube-system:gpu-scheduler | watch  | storageclasses         | the cluster    | yes    |
      | kube-system:gpu-scheduler | patch  | storageclasses         | the cluster    | no     |
      | kube-system:gpu-scheduler | watch  | csinodes               | the cluster    | yes    |
      | kube-system:gpu-scheduler | patch  | csinodes               | the cluster    | no     |
      | kube-system:gpu-scheduler | watch  | namespaces             | the cluster    | yes    |
      | kube-system:gpu-scheduler | patch  | namespaces             | the cluster    | no     |
      | kube-system:gpu-scheduler | delete | namespaces             | the cluster    | no     |
      | kube-system:gpu-scheduler | get    | secrets                | kube-system    | no     |
      | kube-system:gpu-scheduler | list   | configmaps             | all namespaces | no     |

    Examples: the inventory agent reads its node and writes its GpuNodeStatus, nothing else
      | account                         | verb   | resource               | namespace      | answer |
      | kube-system:gpu-inventory-agent | get    | nodes                  | the cluster    | yes    |
      | kube-system:gpu-inventory-agent | list   | pods                   | all namespaces | yes    |
      | kube-system:gpu-inventory-agent | list   | leases                 | gpu-scheduling | yes    |
      | kube-system:gpu-inventory-agent | create | gpunodestatuses        | the cluster    | yes    |
      | kube-system:gpu-inventory-agent | patch  | gpunodestatuses/status | the cluster    | yes    |
      | kube-system:gpu-inventory-agent | patch  | pods                   | all namespaces | no     |
      | kube-system:gpu-inventory-agent | watch  | pods                   | all namespaces | yes    |
      | kube-system:gpu-inventory-agent | get    | pods                   | all namespaces | no     |
      | kube-system:gpu-inventory-agent | create | pods/binding           | all namespaces | no     |
      | kube-system:gpu-inventory-agent | list   | nodes                  | the cluster    | no     |
      | kube-system:gpu-inventory-agent | patch  | nodes                  | the cluster    | no     |
      | kube-system:gpu-inventory-agent | update | gpunodestatuses        | the cluster    | no     |
      | kube-system:gpu-inventory-agent | patch  | gpunodestatuses        | the cluster    | no     |
      | kube-system:gpu-inventory-agent | delete | gpunodestatuses        | the cluster    | no     |
      | kube-system:gpu-inventory-agent | list   | leases                 | kube-system    | no     |
      | kube-system:gpu-inventory-agent | create | leases                 | gpu-scheduling | no     |
      | kube-system:gpu-inventory-agent | update | leases                 | gpu-scheduling | no     |
      | kube-system:gpu-inventory-agent | watch  | gpuclaims              | all namespaces | no     |
      | kube-system:gpu-inventory-agent | get    | secrets                | kube-system    | no     |

    Examples: the board reads what it shows everywhere, and writes only what its create form makes, only in default (the test-bed's board.namespaces)
      | account               | verb   | resource               | namespace      | answer |
      | kube-system:gpu-board | watch  | pods                   | all namespaces | yes    |
      | kube-system:gpu-board | get    | pods                   | all namespaces | yes    |
      | kube-system:gpu-board | watch  | nodes                  | the cluster    | yes    |
      | kube-system:gpu-board | watch  | gpuclaims              | all namespaces | yes    |
      | kube-system:gpu-board | watch  | gpunodestatuses        | the cluster    | yes    |
      | kube-system:gpu-board | watch  | gpuschedulingpolicies  | the cluster    | yes    |
      | kube-system:gpu-board | watch  | leases                 | gpu-scheduling | yes    |
      | kube-system:gpu-board | create | pods                   | default        | yes    |
      | kube-system:gpu-board | delete | pods                   | default        | yes    |
      | kube-system:gpu-board | create | gpuclaims              | default        | yes    |
      | kube-system:gpu-board | delete | gpuclaims              | default        | yes    |
      | kube-system:gpu-board | create | statefulsets           | default        | yes    |
      | kube-system:gpu-board | delete | statefulsets           | default        | yes    |
      | kube-system:gpu-board | create | pods                   | kube-system    | no     |
      | kube-system:gpu-board | create | pods                   | all namespaces | no     |
      | kube-system:gpu-board | delete | pods                   | kube-system    | no     |
      | kube-system:gpu-board | create | gpuclaims              | kube-system    | no     |
      | kube-system:gpu-board | create | statefulsets           | kube-system    | no     |
      | kube-system:gpu-board | update | pods                   | default        | no     |
      | kube-system:gpu-board | patch  | pods                   | default        | no     |
      | kube-system:gpu-board | patch  | gpuclaims              | default        | no     |
      | kube-system:gpu-board | patch  | statefulsets           | default        | no     |
      | kube-system:gpu-board | create | pods/binding           | default        | no     |
      | kube-system:gpu-board | create | pods/eviction          | default        | no     |
      | kube-system:gpu-board | create | pods/exec              | default        | no     |
      | kube-system:gpu-board | patch  | gpuclaims/status       | all namespaces | no     |
      | kube-system:gpu-board | create | deployments            | default        | no     |
      | kube-system:gpu-board | create | leases                 | gpu-scheduling | no     |
      | kube-system:gpu-board | update | leases                 | gpu-scheduling | no     |
      | kube-system:gpu-board | list   | leases                 | kube-system    | no     |
      | kube-system:gpu-board | patch  | gpunodestatuses/status | the cluster    | no     |
      | kube-system:gpu-board | patch  | gpuschedulingpolicies  | the cluster    | no     |
      | kube-system:gpu-board | patch  | nodes                  | the cluster    | no     |
      | kube-system:gpu-board | create | events                 | all namespaces | no     |
      | kube-system:gpu-board | get    | secrets                | default        | no     |
      | kube-system:gpu-board | get    | secrets                | kube-system    | no     |

    Examples: the webhook (kube-system's default account, its token not even mounted) and the check pods (default's) may do nothing of ours
      | account             | verb   | resource        | namespace      | answer |
      | kube-system:default | get    | pods            | kube-system    | no     |
      | kube-system:default | create | pods/binding    | all namespaces | no     |
      | kube-system:default | get    | secrets         | kube-system    | no     |
      | kube-system:default | list   | gpunodestatuses | the cluster    | no     |
      | kube-system:default | update | leases          | gpu-scheduling | no     |
      | default:default     | get    | pods            | default        | no     |
      | default:default     | create | pods            | default        | no     |
      | default:default     | list   | gpuclaims       | all namespaces | no     |
      | default:default     | get    | secrets         | default        | no     |

  Scenario Outline: <account> <answer> <verb> <resource> of <group> in <namespace>, whether or not the apiserver serves them
    Then a SubjectAccessReview of "<verb> <resource>" in the API group "<group>" as the service account "<account>" in <namespace> answers <answer>

    Examples: the scheduler reads Kubernetes' PodGroups (its gang API, docs/gangs.md) and writes none; others may not read them through us
      | account                   | verb   | resource         | group             | namespace      | answer |
      | kube-system:gpu-scheduler | get    | podgroups        | scheduling.k8s.io | all namespaces | yes    |
      | kube-system:gpu-scheduler | list   | podgroups        | scheduling.k8s.io | all namespaces | yes    |
      | kube-system:gpu-scheduler | watch  | podgroups        | scheduling.k8s.io | all namespaces | yes    |
      | kube-system:gpu-scheduler | create | podgroups        | scheduling.k8s.io | default        | no     |
      | kube-system:gpu-scheduler | update | podgroups        | scheduling.k8s.io | all namespaces | no     |
      | kube-system:gpu-scheduler | patch  | podgroups        | scheduling.k8s.io | all namespaces | no     |
      | kube-system:gpu-scheduler | delete | podgroups        | scheduling.k8s.io | all namespaces | no     |
      | kube-system:gpu-scheduler | patch  | podgroups/status | scheduling.k8s.io | all namespaces | no     |
      | kube-system:gpu-scheduler | get    | workloads        | scheduling.k8s.io | all namespaces | no     |
      | kube-system:gpu-scheduler | get    | podgroups        | gpu.scheduling    | all namespaces | no     |
      | kube-system:gpu-board     | list   | podgroups        | scheduling.k8s.io | all namespaces | no     |
      | default:default           | list   | podgroups        | scheduling.k8s.io | all namespaces | no     |

  Scenario: The board runs locked down like every program of the chart
    Then every pod of the Deployment "gpu-board" in kube-system is ready, runs as uid 1000 and non-root with the RuntimeDefault seccomp profile, a read-only root filesystem, no privilege escalation and no capabilities
    And the Service "gpu-board" in kube-system serves HTTPS only, on its port named "https"

  Scenario: The map of a pod cannot be added, changed or removed once the pod exists; its other metadata can
    When the pod "fixed-0" is created with the map "0=node1:0"
    Then the pod "fixed-0" runs on node1 with CUDA_VISIBLE_DEVICES "0"
    When the annotation "gpu-scheduling-map" of the pod "fixed-0" is set to "0=node2:1"
    Then the change is refused with a message containing "the annotation gpu-scheduling-map is fixed at creation (this request changes it): the gpu-webhook sets CUDA_VISIBLE_DEVICES from it only when the pod is created"
    And the message also contains "delete and recreate the pod"
    When the annotation "gpu-scheduling-map" of the pod "fixed-0" is removed
    Then the change is refused with a message containing "the annotation gpu-scheduling-map is fixed at creation (this request removes it)"
    When the annotation "gpu-scheduling-map" of the pod "fixed-0" is set to "0=node2:1" through the status subresource
    Then the change is refused with a message containing "the annotation gpu-scheduling-map is fixed at creation (this request changes it)"
    When the label "team" of the pod "fixed-0" is set to "vision"
    Then the change is accepted
    When the condition "example.com/Checked" of the pod "fixed-0" is set through the status subresource
    Then the change is accepted
    And the pod "fixed-0" runs on node1 with CUDA_VISIBLE_DEVICES "0"

  Scenario: A pod created without the map cannot be given one, nor an allocation
    When the pod "plain-0" for scheduler "nobody" is created without a map
    And the annotation "gpu-scheduling-map" of the pod "plain-0" is set to "0=node1:0"
    Then the change is refused with a message containing "the annotation gpu-scheduling-map is fixed at creation (this request adds it)"
    When the annotation "gpu.scheduling/allocated" of the pod "plain-0" is set to "node1:0"
    Then the change is refused with a message containing "the annotation gpu.scheduling/allocated is fixed at creation (this request adds it): only the gpu-scheduler's Binding sets it"
    When the annotation "gpu.scheduling/claim" of the pod "plain-0" is set to "train"
    Then the change is refused with a message containing "the annotation gpu.scheduling/claim is fixed at creation (this request adds it)"

  Scenario: No pod is created with an allocation: only the scheduler's Binding sets one
    When the pod "forged-0" for scheduler "gpu-scheduler" is created with the annotation "gpu.scheduling/allocated" set to "node1:0"
    Then the creation is refused with a message containing "a pod may not be created with the annotation gpu.scheduling/allocated: only the gpu-scheduler's Binding sets it"
    When the pod "forged-0" for scheduler "gpu-scheduler" is created with the annotation "gpu.scheduling/gpu-ids" set to "0"
    Then the creation is refused with a message containing "a pod may not be created with the annotation gpu.scheduling/gpu-ids"
    And there is no pod "forged-0"

  Scenario: Only the scheduler's Binding carries an allocation; a Binding cannot carry the map; a plain Binding still binds
    When the pod "manual-0" for scheduler "nobody" is created without a map
    And the administrator binds the pod "manual-0" to node1 with the annotation "gpu.scheduling/allocated" set to "node1:0"
    Then the change is refused with a message containing "only system:serviceaccount:kube-system:gpu-scheduler may put the allocation annotations"
    When the administrator binds the pod "manual-0" to node1 with the annotation "gpu-scheduling-map" set to "0=node1:0"
    Then the change is refused with a message containing "a Binding may not carry the annotation gpu-scheduling-map"
    When the administrator binds the pod "manual-0" to node1
    Then the change is accepted
    And the pod "manual-0" is bound to node1

  @exclusive
  Scenario: A claim pod is bound with its allocation, which then stays as the scheduler wrote it
    Given the GpuClaim "fixed" asking for 1 GPUs with policy "contiguous" on node "node3" is created
    When the pod "fixed-claim-0" naming the GpuClaim "fixed" is created
    Then the pod "fixed-claim-0" is bound to node3 with its allocation annotations
    When the annotation "gpu.scheduling/claim" of the pod "fixed-claim-0" is set to "other"
    Then the change is refused with a message containing "the annotation gpu.scheduling/claim is fixed at creation (this request changes it)"
    When the annotation "gpu.scheduling/gpu-ids" of the pod "fixed-claim-0" is set to "0,1,2,3"
    Then the change is refused with a message containing "the annotation gpu.scheduling/gpu-ids is fixed at creation (this request changes it)"
    When the annotation "gpu.scheduling/allocated" of the pod "fixed-claim-0" is removed
    Then the change is refused with a message containing "the annotation gpu.scheduling/allocated is fixed at creation (this request removes it)"
    When the annotation "gpu.scheduling/exclusivity" of the pod "fixed-claim-0" is set to "Shared"
    Then the change is refused with a message containing "the annotation gpu.scheduling/exclusivity is fixed at creation (this request changes it)"
    And the pod "fixed-claim-0" keeps the allocation annotations it was bound with

  Scenario: The agent's token writes the GpuNodeStatus of its own node and no other
    Given a token of the service account "gpu-inventory-agent" bound to its pod on node1, as the kubelet gives it
    Then the apiserver authenticates that token with the node name node1
    When that token writes the status of the GpuNodeStatus "node1"
    Then the change is accepted
    When that token writes the status of the GpuNodeStatus "node2"
    Then the change is refused with a message containing "may write only the GpuNodeStatus of its own node: its token is bound to node node1, and this request writes the GpuNodeStatus node2"
    When that token creates the GpuNodeStatus "node2" for node "node2"
    Then the change is refused with a message containing "its token is bound to node node1, and this request writes the GpuNodeStatus node2"
    When that token creates the GpuNodeStatus "node1" for node "node2"
    Then the change is refused with a message containing "its token is bound to node node1, and this request sets spec.nodeName to node2"

  Scenario: An agent token bound to no node writes no GpuNodeStatus
    Given a token of the service account "gpu-inventory-agent" bound to no pod
    When that token writes the status of the GpuNodeStatus "node1"
    Then the change is refused with a message containing "this token names no node"

  @exclusive
  Scenario: The webhook runs two replicas on different nodes at system-cluster-critical, and a drain keeps one
    Then the webhook Deployment has 2 ready replicas on different nodes with priority class "system-cluster-critical"
    When one webhook pod is evicted
    Then evicting the other webhook pod at once is refused by the PodDisruptionBudget
    And the webhook Deployment has 2 ready replicas on different nodes with priority class "system-cluster-critical"
    And every pod of the deployed StatefulSet "gpu-scheduler-check" in namespace "default" runs on the node its map names
