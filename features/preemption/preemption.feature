@preemption
Feature: Preemption: a pod of higher priority that fits nowhere takes the place of pods of lower priority

  gpu-scheduler's PostFilter (scheduler/postfilter.py, judged by scheduler/preemption.py as kube-scheduler's
  DefaultPreemption): the fewest victims of lower priority, PodDisruptionBudgets respected where a choice exists,
  gangs evicted whole, the preemptor nominated to the node and kept its freed GPUs until it binds. The pods it may
  preempt carry a finalizer of the test's, so that a victim stays, terminating, until a step lets it go: its GPUs are
  not free before its pod object is gone.

  Background:
    Given every kwok node has the simulated inventory of 8 GPUs in two NVLink islands
    And the PriorityClasses "preempt-low" of value 100, "preempt-high" of value 100000 and "preempt-never" of value 100000 that never preempts

  Scenario: A high-priority claim pod preempts exactly the one low-priority pod it needs, and binds on its GPUs
    Given 4 pods "low" of priority class "preempt-low" holding 2 GPUs each on node "node2" are running
    When the pod "urgent" of priority class "preempt-high" naming a new GpuClaim of 2 GPUs on node "node2" is created
    Then exactly 1 of the pods "low" is preempted, each with a DisruptionTarget condition and a Preempted event
    And while the preempted pods terminate, the pod "urgent" is nominated to node2 and stays unbound for 3 seconds
    When the preempted pods are gone
    Then the pod "urgent" is bound to node2 on the GPUs the preempted pods held
    And the other pods "low" still run

  Scenario: A pod whose PriorityClass never preempts waits, and nothing is touched
    Given 4 pods "low" of priority class "preempt-low" holding 2 GPUs each on node "node2" are running
    When the pod "polite" of priority class "preempt-never" naming a new GpuClaim of 2 GPUs on node "node2" is created
    Then the pod "polite" is Pending with reason Unschedulable and a message containing "busy"
    And for 8 seconds the pod "polite" stays unbound
    And the other pods "low" still run

  Scenario: A PodDisruptionBudget steers the choice of node
    Given 4 pods "free" of priority class "preempt-low" holding 2 GPUs each on node "node2" are running
    And 4 pods "kept" of priority class "preempt-low" holding 2 GPUs each on node "node1" are running
    And a PodDisruptionBudget allows no disruption of the pods "kept"
    When the pod "urgent" of priority class "preempt-high" naming a new GpuClaim of 2 GPUs on nodes "node1,node2" is created
    Then exactly 1 of the pods "free" is preempted, each with a DisruptionTarget condition and a Preempted event
    When the preempted pods are gone
    Then the pod "urgent" is bound to node2 on the GPUs the preempted pods held
    And the other pods "kept" still run

  Scenario: A running gang is evicted whole for a single pod, never in part
    Given 2 pods "fill" of priority class "preempt-high" holding 8 GPUs each are running
    And the gang "batch" of 2 pods of priority class "preempt-low" holding 8 GPUs each is running
    When the pod "urgent" of priority class "preempt-high" naming a new GpuClaim of 4 GPUs is created
    Then exactly 2 of the pods "batch" are preempted, each with a DisruptionTarget condition and a Preempted event
    When the preempted pods are gone
    Then the pod "urgent" is bound on GPUs the preempted pods held
    And the other pods "fill" still run

  Scenario: A waiting gang preempts for all its members in one zone, and binds whole
    Given node1 and node2 are in zone "a", node3 and node4 in zone "b"
    And 16 pods "low" of priority class "preempt-low" holding 2 GPUs each are running
    When the gang "urgent" of 4 pods of priority class "preempt-high" holding 2 GPUs each in one zone is created
    Then exactly 4 of the pods "low" are preempted, each with a DisruptionTarget condition and a Preempted event
    When the preempted pods are gone
    Then the preempted pods were all in one zone, and every pod of the gang "urgent" is bound in that zone
    And the other pods "low" still run
