@gangs
Feature: Gangs: a group of GPU pods is placed whole or not at all, inside one topology domain

  Background:
    Given every kwok node has the simulated inventory of 8 GPUs in two NVLink islands
    And node1 and node2 are in zone "a", node3 and node4 in zone "b"

  Scenario: A gang that fits binds all its members, none before the whole gang was decided
    Given the GpuClaim "train" asking for 8 GPUs for the gang "train" is created
    When 4 pods "train-0".."train-3" naming the GpuClaim "train" with gang size 4 are created
    Then every pod of "train" is bound, each on its own node
    And every GPU Lease of the gang "train" was created before its first member was bound
    And the GpuClaim "train" lists the GPUs of all 4 pods

  Scenario: Members with required anti-affinity for each other are placed on different nodes, counted as they are placed
    Given the GpuClaim "pair" asking for 2 GPUs for the gang "pair" is created
    When 2 pods "pair-0".."pair-1" naming the GpuClaim "pair" with gang size 2 and hostname anti-affinity are created
    Then every pod of "pair" is bound, each on its own node

  Scenario: A gang that does not fit holds no GPU and no Lease, and says which member fits nowhere
    Given the GpuClaim "huge" asking for 8 GPUs for the gang "huge" is created
    When 5 pods "huge-0".."huge-4" naming the GpuClaim "huge" with gang size 5 are created
    Then the pod "huge-4" is Pending with reason Unschedulable and a message containing "does not fit whole"
    And for 10 seconds no pod of "huge" is bound and none holds a GPU Lease
    And the GpuClaim "huge" is Pending with a message containing "does not fit whole"

  Scenario: A gang short of its members waits, holding nothing
    Given the GpuClaim "short" asking for 2 GPUs for the gang "short" is created
    When 2 pods "short-0".."short-1" naming the GpuClaim "short" with gang size 3 are created
    Then the pod "short-1" is Pending with reason Unschedulable and a message containing "waits for its members: fewer than 3 present"
    And for 5 seconds no pod of "short" is bound and none holds a GPU Lease
    When 1 pods "short-2".."short-2" naming the GpuClaim "short" with gang size 3 are created
    Then every pod of "short" is bound

  Scenario: Two gangs competing for the same GPUs end with one whole gang and one waiting, never two halves
    Given the GpuClaim "red" asking for 8 GPUs for the gang "red" is created
    And the GpuClaim "blue" asking for 8 GPUs for the gang "blue" is created
    When the pods of the gangs "red" and "blue", 3 members each, are created interleaved
    Then one of the gangs "red" and "blue" is bound whole and the other has no member bound and no GPU Lease
    When the pods of the bound gang are deleted
    Then every pod of the waiting gang is bound

  Scenario: Required topology keeps a gang in one zone; Preferred falls back across zones
    Given the GpuClaim "hold" asking for 8 GPUs with policy "contiguous" on node "node1" is created
    And the pod "hold-0" naming the GpuClaim "hold" is created
    And the GpuClaim "zonal" asking for 4 GPUs for the gang "zonal" is created
    And the GpuClaim "loose" asking for 4 GPUs for the gang "loose" is created
    When 3 pods "zonal-0".."zonal-2" naming the GpuClaim "zonal" with gang size 3 in one zone "Required" are created
    Then every pod of "zonal" is bound, all in zone "b"
    When 3 pods "loose-0".."loose-2" naming the GpuClaim "loose" with gang size 3 in one zone "Required" are created
    Then the gang "loose" waits with a message containing "zone=a member loose-2 does not fit"
    And for 5 seconds no pod of "loose" is bound and none holds a GPU Lease
    When the pods of "loose" are deleted
    And 3 pods "loose-0".."loose-2" naming the GpuClaim "loose" with gang size 3 in one zone "Preferred" are created
    Then every pod of "loose" is bound, in both zones

  Scenario: A member of a running gang that is deleted is reported on the others, which keep running
    Given the GpuClaim "pair" asking for 1 GPUs for the gang "pair" is created
    When 2 pods "pair-0".."pair-1" naming the GpuClaim "pair" with gang size 2 are created
    Then every pod of "pair" is bound
    When the pod "pair-0" is deleted
    Then the pod "pair-1" has a GangBelowMinimum event containing "dropped below its minimum: 1 of 2"
    And the pod "pair-1" is still bound

  Scenario: An Indexed Job's pods are one gang, placed whole by the Job controller's pods
    Given the GpuClaim "job" asking for 8 GPUs for the gang "job" is created
    When the Indexed Job "job" of 4 pods naming the GpuClaim "job" in a gang of 4 is created
    Then the Job's 4 pods of "job" were bound, each on its own node, with 8 GPUs each
    And every GPU Lease of the Job "job" was created before its first pod was bound

  Scenario: A pod whose gang cannot be read is not placed alone
    When the pod "odd-0" naming the GpuClaim "odd" in the gang "Not_A_Name" is created
    Then the pod "odd-0" is Pending with reason Unschedulable and a message containing "annotation gpu.scheduling/gang='Not_A_Name' is not a valid gang name"
    And for 3 seconds no pod of "odd" is bound and none holds a GPU Lease
