@kind
Feature: The deployed take-home on the KinD test-bed: real kubelets, real containers, real logs

  Scenario: Each check pod of the deployed StatefulSet logs its node and its GPU ids
    Given the deployed StatefulSet "gpu-scheduler-check" in namespace "default"
    Then pod 0 logs its node node1 and CUDA_VISIBLE_DEVICES "0,1" at least twice
    And pod 1 logs its node node2 and CUDA_VISIBLE_DEVICES "2" at least twice
    And pod 2 logs its node node3 and CUDA_VISIBLE_DEVICES "0,1,2" at least twice
    And pod 3 logs its node node4 and CUDA_VISIBLE_DEVICES "3" at least twice
    And pod 4 logs its node node4 and CUDA_VISIBLE_DEVICES "3" at least twice

  Scenario: A claim pod on KinD is given GPUs from the agent's inventory and its check container logs them
    Given the GpuClaim "train" asking for 2 GPUs with policy "contiguous" on node "node2" is created
    When the pod "train-0" naming the GpuClaim "train" is created
    Then the GpuClaim "train" is Bound with GPUs "0,1" on node2
    And the pod "train-0" logs its node node2 and CUDA_VISIBLE_DEVICES "0,1" at least twice
