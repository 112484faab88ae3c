@gangs
Feature: Gangs: a group of GPU pods is placed whole or not at all, inside one topology domain

  A gang is declared by the project's annotations (its GpuClaim's gangRef and gpu.scheduling/gang-min-members, the
  topology in gpu.scheduling/gang-topology) or, where the apiserver serves it (Kubernetes 1.37 with the gate
  GenericWorkload), by Kubernetes' own PodGroup that its pods name in spec.schedulingGroup: the outlines run once for
  each, and the second way's examples are tagged @workload_api (left out on a minor that does not serve the API).

  Background:
    Given every kwok node has the simulated inventory of 8 GPUs in two NVLink islands
    And node1 and node2 are in zone "a", node3 and node4 in zone "b"

  Scenario Outline: A gang that fits binds all its members, none before the whole gang was decided (declared by <declared>)
    Given the gang "train" of 4 members, each with 8 GPUs of the GpuClaim "train", is declared by <declared>
    When 4 pods "train-0".."train-3" of the gang "train" are created
    Then every pod of "train" is bound, each on its own node
    And every GPU Lease of the gang "train" was created before its first member was bound
    And the GpuClaim "train" lists the GPUs of all 4 pods

    Examples:
      | declared    |
      | annotations |

    @workload_api
    Examples:
      | declared   |
      | a PodGroup |

  Scenario: Members with required anti-affinity for each other are placed on different nodes, counted as they are placed
    Given the GpuClaim "pair" asking for 2 GPUs for the gang "pair" is created
    When 2 pods "pair-0".."pair-1" naming the GpuClaim "pair" with gang size 2 and hostname anti-affinity are created
    Then every pod of "pair" is bound, each on its own node

  Scenario Outline: A gang that does not fit holds no GPU and no Lease, and says which member fits nowhere (declared by <declared>)
    Given the gang "huge" of 5 members, each with 8 GPUs of the GpuClaim "huge", is declared by <declared>
    When 5 pods "huge-0".."huge-4" of the gang "huge" are created
    Then the pod "huge-4" is Pending with reason Unschedulable and a message containing "does not fit whole"
    And for 10 seconds no pod of "huge" is bound and none holds a GPU Lease
    And the GpuClaim "huge" is Pending with a message containing "does not fit whole"

    Examples:
      | declared    |
      | annotations |

    @workload_api
    Examples:
      | declared   |
      | a PodGroup |

  Scenario Outline: A gang short of its members waits, holding nothing (declared by <declared>)
    Given the gang "short" of 3 members, each with 2 GPUs of the GpuClaim "short", is declared by <declared>
    When 2 pods "short-0".."short-1" of the gang "short" are created
    Then the pod "short-1" is Pending with reason Unschedulable and a message containing "waits for its members: fewer than 3 present"
    And the pod "short-1" has a FailedScheduling event containing "waits for its members: fewer than 3 present"
    And for 5 seconds no pod of "short" is bound and none holds a GPU Lease
    When 1 pods "short-2".."short-2" of the gang "short" are created
    Then every pod of "short" is bound

    Examples:
      | declared    |
      | annotations |

    @workload_api
    Examples:
      | declared   |
      | a PodGroup |

  Scenario: Two gangs competing for the same GPUs end with one whole gang and one waiting, never two halves
    Given the GpuClaim "red" asking for 8 GPUs for the gang "red" is created
    And the GpuClaim "blue" asking for 8 GPUs for the gang "blue" is created
    When the pods of the gangs "red" and "blue", 3 members each, are created interleaved
    Then one of the gangs "red" and "blue" is bound whole and the other has no member bound and no GPU Lease
    When the pods of the bound gang are deleted
    Then every pod of the waiting gang is bound

  Scenario Outline: A gang kept in one zone is placed in a zone that takes it whole, or waits (declared by <declared>)
    Given the GpuClaim "hold" asking for 8 GPUs with policy "contiguous" on node "node1" is created
    And the pod "hold-0" naming the GpuClaim "hold" is created
    And the gang "zonal" of 3 members, each with 4 GPUs of the GpuClaim "zonal", kept in one zone, is declared by <declared>
    And the gang "loose" of 3 members, each with 4 GPUs of the GpuClaim "loose", kept in one zone, is declared by <declared>
    When 3 pods "zonal-0".."zonal-2" of the gang "zonal" are created
    Then every pod of "zonal" is bound, all in zone "b"
    When 3 pods "loose-0".."loose-2" of the gang "loose" are created
    Then the gang "loose" waits with a message containing "zone=a member loose-2 does not fit"
    And for 5 seconds no pod of "loose" is bound and none holds a GPU Lease

    Examples:
      | declared    |
      | annotations |

    @workload_api
    Examples:
      | declared   |
      | a PodGroup |

  Scenario: Preferred topology falls back across zones when no zone takes the gang whole
    Given the GpuClaim "hold" asking for 8 GPUs with policy "contiguous" on node "node1" is created
    And the pod "hold-0" naming the GpuClaim "hold" is created
    And the GpuClaim "zonal" asking for 4 GPUs for the gang "zonal" is created
    And the GpuClaim "loose" asking for 4 GPUs for the gang "loose" is created
    When 3 pods "zonal-0".."zonal-2" naming the GpuClaim "zonal" with gang size 3 in one zone "Required" are created
    Then every pod of "zonal" is bound, all in zone "b"
    When 3 pods "loose-0".."loose-2" naming the GpuClaim "loose" with gang size 3 in one zone "Preferred" are created
    Then every pod of "loose" is bound, in both zones

  Scenario: A member of a running gang that is deleted is reported on the others, which keep running
    Given the GpuClaim "pair" asking for 1 GPUs for the gang "pair" is created
    When 2 pods "pair-0".."pair-1" naming the GpuClaim "pair" with gang size 2 are created
    Then every pod of "pair" is bound
    When the pod "pair-0" is deleted
    Then the pod "pair-1" has a GangBelowMinimum event containing "dropped below its minimum: 1 of 2"
    And the pod "pair-1" is still bound

  Scenario Outline: An Indexed Job's pods are one gang, placed whole by the Job controller's pods (declared by <declared>)
    Given the gang "job" of 4 members, each with 8 GPUs of the GpuClaim "job", is declared by <declared>
    When the Indexed Job "job" of 4 pods of the gang "job" is created
    Then the Job's 4 pods of "job" were bound, each on its own node, with 8 GPUs each
    And every GPU Lease of the Job "job" was created before its first pod was bound

    Examples:
      | declared    |
      | annotations |

    @workload_api
    Examples:
      | declared   |
      | a PodGroup |

  Scenario: A pod whose gang cannot be read is not placed alone
    When the pod "odd-0" naming the GpuClaim "odd" in the gang "Not_A_Name" is created
    Then the pod "odd-0" is Pending with reason Unschedulable and a message containing "annotation gpu.scheduling/gang='Not_A_Name' is not a valid gang name"
    And for 3 seconds no pod of "odd" is bound and none holds a GPU Lease

  # ---- Kubernetes' own gang API only ------------------------------------------------------------------------------

  @workload_api
  Scenario: Members whose PodGroup does not exist wait, holding nothing, and are placed whole once it is created
    Given the GpuClaim "late" asking for 8 GPUs on any node is created
    When 2 pods "late-0".."late-1" naming the GpuClaim "late" and the PodGroup "late" are created
    Then the pod "late-1" is Pending with reason Unschedulable and a message containing "its PodGroup late does not exist"
    And the pod "late-1" has a FailedScheduling event containing "its PodGroup late does not exist"
    And for 5 seconds no pod of "late" is bound and none holds a GPU Lease
    When the PodGroup "late" of 2 members is created
    Then every pod of "late" is bound, each on its own node

  @workload_api
  Scenario: A PodGroup of the basic policy makes no gang: its pods are placed one by one, as many as fit
    Given the GpuClaim "solo" asking for 8 GPUs on any node is created
    And the PodGroup "solo" of the basic policy is created
    When 5 pods "solo-0".."solo-4" naming the GpuClaim "solo" and the PodGroup "solo" are created
    Then 4 pods of "solo" are bound, each on its own node, and the fifth waits

  @workload_api
  Scenario: A member whose annotations disagree with its PodGroup waits with both named
    Given the GpuClaim "mixed" asking for 1 GPUs on any node is created
    And the PodGroup "mixed" of 2 members is created
    When 2 pods "mixed-0".."mixed-1" naming the GpuClaim "mixed" and the PodGroup "mixed" with gang size 3 are created
    Then the pod "mixed-1" is Pending with reason Unschedulable and a message containing "annotation gpu.scheduling/gang-min-members='3' disagrees with its PodGroup's spec.schedulingPolicy.gang.minCount ('2')"
    And for 3 seconds no pod of "mixed" is bound and none holds a GPU Lease

  @workload_api
  Scenario: Where the apiserver's GenericWorkload gate is off it drops spec.schedulingGroup after the webhook recorded it, and the pod waits instead of being placed alone
    Given a second control plane whose kube-apiserver runs with the feature gate GenericWorkload off, with gpu-webhook and gpu-scheduler
    When the map pod "dropped-0" naming the PodGroup "dropped" is created on the second control plane
    Then on the second control plane the pod "dropped-0" has no spec.schedulingGroup and carries the annotation "gpu.scheduling/pod-group" set to "dropped"
    And on the second control plane the pod "dropped-0" is Pending with a message containing "the apiserver serves no scheduling.k8s.io/v1beta1 PodGroups"
    And on the second control plane for 5 seconds the pod "dropped-0" is not bound
