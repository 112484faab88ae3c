@backlog
Feature: A backlog of waiting pods costs its first pass and then nothing, and the leader keeps its Lease

  GPU clusters hold thousands of waiting pods as a matter of course. The leader reports each waiting pod once (its
  PodScheduled condition, a FailedScheduling event, its claim's status), at its own client rate (--qps, --burst);
  its leader election runs on a client and thread of its own, and the chart's FlowSchemas put it at the
  leader-election priority level, so the reports never starve its renewals. Once every pod has been tried, nothing
  is written again until something changes that could help one of them, not even by the periodic retry of waiting
  pods (every 5 s here: the quiet window spans six). The writes are read from the apiserver's audit log; the
  Lease's renewals too.

  Scenario: 2000 claim pods wait for GPUs that are all taken, with two scheduler replicas
    Given every kwok node has the simulated inventory of 8 GPUs in two NVLink islands
    And a second gpu-scheduler replica is running
    And every GPU of every kwok node is taken by a bound claim pod
    When 2000 claim pods of one GPU each, each with its own GpuClaim, are created
    Then every one of the 2000 pods was reported once: its condition, one FailedScheduling event and its claim's status
    And after 30 more seconds the schedulers have written nothing else for the waiting pods, and no GPU Lease
    And the leader Lease kept its holder throughout, renewed by it within every lease duration

  Scenario: The chart's FlowSchemas give the scheduler's leader election kube-scheduler's priority level
    Given the chart's FlowSchemas and the scheduler's service account for a release in the namespace "gpu-system"
    Then a Lease read by the scheduler's service account is classified by the FlowSchema "gpu-scheduler-leader-election" at the priority level "leader-election"
    And a pod list by the scheduler's service account is classified by the FlowSchema "gpu-scheduler" at the priority level "workload-high"
    And a Lease read by another service account of that namespace is classified by the FlowSchema "service-accounts" at the priority level "workload-low"
