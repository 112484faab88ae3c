@kind @exclusive
Feature: The chart's release on the KinD test-bed: an upgrade rolls the programs without losing a GPU or an admission, an uninstall leaves only the CRDs

  The test-bed installs the chart as the release "gpu-scheduler" in kube-system (roles/deploy). Each scenario leaves
  the release as it found it, the same chart package with exactly the same values, so that the next
  `ansible-playbook site.yml` changes nothing.

  Scenario: An upgrade that changes the log level rolls the programs; the GPU Leases, the bound pods and the webhook's admissions live through it
    Given the deployed release "gpu-scheduler" in namespace "kube-system"
    And the GpuClaim "keep" asking for 2 GPUs with policy "contiguous" on node "node3" is created
    And the pod "keep-0" naming the GpuClaim "keep" is created
    And the pod "keep-0" runs on node3 and holds the Leases of the GPUs of its claim
    And the programs' pods, the GPU Leases and the bound pods are recorded
    When the release is upgraded with "logLevel=DEBUG" while a pod with the take-home map is created every 0.3 s
    Then the scheduler, the webhook and the agent run only new pods, all Ready, with "--log-level=DEBUG"
    And one of the new scheduler pods holds the leader Lease
    And every GPU Lease is the same object with the same holders
    And every bound pod is the same pod on the same node
    And every pod created during the upgrade was admitted with CUDA_VISIBLE_DEVICES from the map
    When the release is upgraded back to its original values
    Then the release has its original chart and values, deployed
    And the scheduler, the webhook and the agent run only new pods, all Ready, with their original arguments

  @disruptive
  Scenario: Uninstalling the release removes everything it made but the CRDs; installed again, the scheduler puts the GPU Leases back
    Given the deployed release "gpu-scheduler" in namespace "kube-system"
    And the GpuClaim "keep" asking for 2 GPUs with policy "contiguous" on node "node4" is created
    And the pod "keep-0" naming the GpuClaim "keep" is created
    And the pod "keep-0" runs on node4 and holds the Leases of the GPUs of its claim
    And the programs' pods, the GPU Leases and the bound pods are recorded
    When the release is uninstalled
    Then no object of the release's manifest is left, the namespace "gpu-scheduling" with the GPU Leases included
    And no pod of the scheduler, the webhook or the agent is left, and no record of the release
    And the CRDs "gpuclaims.gpu.scheduling" and "gpunodestatuses.gpu.scheduling" remain, with the GpuClaim "keep" and a GpuNodeStatus of every worker
    And every bound pod is the same pod on the same node
    When the release is installed again from the same package with the same values
    Then the release has its original chart and values, deployed
    And every GPU Lease is back, re-created with the same holders
    When the pod "after-0" is created with the map "0=node1:0,1"
    Then the pod "after-0" runs on node1 with CUDA_VISIBLE_DEVICES "0,1"
    And every bound pod is the same pod on the same node
