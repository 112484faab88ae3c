@claims
Feature: The GpuClaim API: the apiserver validates claims, the webhook wires CUDA_VISIBLE_DEVICES to the allocation

  Scenario: The API refuses claims that break its schema
    When the GpuClaim "none" asking for 0 GPUs with policy "contiguous" is created
    Then the creation is refused with a message containing "spec.devices.count"
    When the GpuClaim "odd" asking for 1 GPUs with policy "random" is created
    Then the creation is refused with a message containing "spec.devices.policy"
    When the GpuClaim "train" asking for 2 GPUs with policy "spread" and an empty topology is created
    Then the GpuClaim "train" exists with exclusivity "Exclusive" and topology mode "Ignore"

  Scenario: A pod naming both a claim and a map is refused
    When the pod "both-0" naming the GpuClaim "train" is created with the map "0=node1:0"
    Then the creation is refused with a message containing "carries both gpu.scheduling/claim and gpu-scheduling-map"

  @exclusive
  Scenario: A claim pod reads CUDA_VISIBLE_DEVICES from the annotation the scheduler writes before binding
    When the pod "train-0" naming the GpuClaim "train" is created
    Then every container of "train-0" reads CUDA_VISIBLE_DEVICES from the annotation "gpu.scheduling/gpu-ids"
