@kind
Feature: The deployed take-home on the KinD test-bed: real kubelets, real containers, real logs

  Scenario: Each check pod of the deployed StatefulSet logs its node and its GPU ids
    Given the deployed StatefulSet "gpu-scheduler-check" in namespace "default"
    Then pod 0 logs its node node1 and CUDA_VISIBLE_DEVICES "0,1" at least twice
    And pod 1 logs its node node2 and CUDA_VISIBLE_DEVICES "2" at least twice
    And pod 2 logs its node node3 and CUDA_VISIBLE_DEVICES "0,1,2" at least twice
    And pod 3 logs its node node4 and CUDA_VISIBLE_DEVICES "3" at least twice
    And pod 4 logs its node node4 and CUDA_VISIBLE_DEVICES "3" at least twice

  @exclusive
  Scenario: A claim pod on KinD is given GPUs from the agent's inventory and its check container logs them
    Given the GpuClaim "train" asking for 2 GPUs with policy "contiguous" on node "node2" is created
    When the pod "train-0" naming the GpuClaim "train" is created
    Then the GpuClaim "train" is Bound with GPUs "0,1" on node2
    And the pod "train-0" logs its node node2 and CUDA_VISIBLE_DEVICES "0,1" at least twice

  Scenario: A claim pod asking for more memory than any worker has left stays Pending with the reason, never bound to fail
    Given the GpuClaim "huge" asking for 1 GPUs on any node is created
    When the pod "huge-0" requesting memory "100Ti" naming the GpuClaim "huge" is created
    Then the pod "huge-0" is Pending with reason Unschedulable and a message containing "Insufficient memory (the pod requests 109951162777600"
    And the GpuClaim "huge" is Pending with a message containing "fits none of the 4 nodes with a GPU inventory"
    And for 5 seconds the pod "huge-0" stays unbound

  @exclusive
  Scenario: Deleting the leader's scheduler pod while a StatefulSet is placed hands the work to another replica
    Given two scheduler replicas are running
    And a StatefulSet "handover" of 20 parallel replicas mapped round-robin onto node1..node4
    When the leader's scheduler pod is deleted after at least 5 of its pods are bound
    Then another replica holds the leader Lease
    When the StatefulSet is scaled to 24 replicas once the deleted leader is gone
    Then all 24 pods run on their mapped nodes
    And every pod was bound exactly once and has a Scheduled event from gpu-scheduler
    And the scheduler Deployment has 2 ready replicas again
