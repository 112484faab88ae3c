@faults
Feature: API faults, killed schedulers and a second scheduler never lose a GPU or bind a pod twice

  The scheduler talks to the apiserver through the test's fault proxy; the proof comes from the apiserver's
  audit log and from the Leases and pods as the apiserver has them.

  Background:
    Given every kwok node has the simulated inventory of 8 GPUs in two NVLink islands

  Scenario: A failed Lease delete is retried and its GPUs reused
    Given the GpuClaim "whole" asking for 8 GPUs with policy "contiguous" on node "node2" is created
    And the GpuClaim "next" asking for 8 GPUs with policy "contiguous" on node "node2" is created
    When the pod "whole-0" naming the GpuClaim "whole" is created
    Then the GpuClaim "whole" is Bound with GPUs "0,1,2,3,4,5,6,7" on node2
    When the next 2 deletes of GPU Leases are answered 503 by the API
    And the pod "whole-0" is deleted
    And the pod "next-0" naming the GpuClaim "next" is created
    Then the GpuClaim "next" is Bound with GPUs "0,1,2,3,4,5,6,7" on node2
    And the pod "next-0" holds the leases "gpu-node2-0,gpu-node2-1,gpu-node2-2,gpu-node2-3,gpu-node2-4,gpu-node2-5,gpu-node2-6,gpu-node2-7"
    And exactly 2 deletes of GPU Leases were answered 503, and each of those Leases was deleted later
    And no GPU lease is held by the pod "whole-0"

  Scenario: A map pod whose binding failed is bound on the retry: the room its first attempt assumed is not held against it
    When the next 1 bindings are answered 503 by the API
    And the pod "wide-0" requesting cpu "20" is created with the map "0=node1:2"
    Then the pod "wide-0" runs on node1 with CUDA_VISIBLE_DEVICES "2"
    And exactly 1 bindings were answered 503

  Scenario: The scheduler SIGKILLed three times during a rollout of 120 claim pods
    Given 32 extra kwok nodes "fault-node-NN" labelled "faults.test/pool=rollout", each with 8 simulated GPUs
    When 120 pods each naming its own GpuClaim of "1,2,1,4,1,1,2,1,1,1" Exclusive GPUs on the "faults.test/pool=rollout" nodes start being created, 3 a second
    And the scheduler is SIGKILLed in the middle of a bind once "20,50,80" pods are created, and restarted each time
    Then all 120 pods of the rollout are bound
    And every pod was bound exactly once
    And no GPU is in two pods' allocation annotations, and each pod's annotation names its node
    And the pool's GPU Leases are exactly the allocated GPUs, each held by the pod whose annotation names it

  Scenario: Pods deleted while every scheduler is down lose their Leases when one comes back
    Given a second scheduler "scheduler-b" is running
    And the pods "down-0,down-1,down-2,down-3,down-4,down-5" each naming its own GpuClaim of "1,2,1,2,1,1" GPUs on node4 are bound
    When every scheduler is SIGKILLed
    And the pods "down-0,down-1,down-3,down-4" are deleted
    And the scheduler is started again
    Then no GPU Lease is held by any of the deleted pods
    And every remaining pod holds exactly the Leases of its allocation annotation
    And every pod was bound exactly once

  Scenario: Two schedulers against one apiserver: only the leader binds, and killing it hands over within the lease duration with nothing bound twice
    Given a second scheduler "scheduler-b" is running
    Then exactly one scheduler holds the leader Lease, and keeps it for 3 seconds
    When 8 map pods and 2 claim pods of batch "early" are created
    Then every pod of batch "early" is bound, each by the leader
    When the leader is SIGKILLed
    And 8 map pods and 2 claim pods of batch "late" are created
    Then the other scheduler takes the leader Lease within the lease duration plus the retry period
    And the new leader binds every pod of batch "late", the first within the lease duration plus the retry period
    And every pod was bound exactly once
