@placement
Feature: The scheduler binds only where a kubelet would accept the pod, and waits, saying why, until it can

  Scenario: A map naming a missing node leaves the pod Pending until the node appears
    When the pod "late-0" is created with the map "0=node9:1"
    Then the pod "late-0" is Pending with reason Unschedulable and a message containing "node node9 from map entry 0=node9:1 does not exist"
    And the pod "late-0" has a FailedScheduling event containing "node node9"
    When the node "node9" joins the cluster
    Then the pod "late-0" runs on node9 with CUDA_VISIBLE_DEVICES "1"

  Scenario: A cordoned node holds the pod until it is uncordoned
    Given the node "node3" is cordoned
    When the pod "cordon-0" is created with the map "0=node3:0,1"
    Then the pod "cordon-0" is Pending with reason Unschedulable and a message containing "node node3 is cordoned"
    When the node "node3" is uncordoned
    Then the pod "cordon-0" runs on node3 with CUDA_VISIBLE_DEVICES "0,1"

  Scenario: An untolerated NoSchedule taint holds the pod; a tolerating pod is bound
    Given the node "node2" has the taint "gpu=maintenance:NoSchedule"
    When the pod "taint-0" is created with the map "0=node2:5"
    And the pod "tolerant-0" tolerating "gpu" is created with the map "0=node2:6"
    Then the pod "taint-0" is Pending with reason Unschedulable and a message containing "taint gpu=maintenance:NoSchedule"
    And the pod "tolerant-0" runs on node2 with CUDA_VISIBLE_DEVICES "6"

  Scenario: Pods of another scheduler and pods without the map are left alone
    When the pod "other-0" for scheduler "other-scheduler" is created with the map "0=node1:0"
    And the pod "plain-0" for scheduler "gpu-scheduler" is created without a map
    And the pod "unrelated-0" for scheduler "other-scheduler" is created without a map
    And the pod "marker-0" is created with the map "0=node1:7"
    Then the pod "marker-0" runs on node1 with CUDA_VISIBLE_DEVICES "7"
    And the pod "other-0" is not bound and has CUDA_VISIBLE_DEVICES "0"
    And the pod "unrelated-0" is not bound, has no CUDA_VISIBLE_DEVICES and no events
    And the pod "plain-0" is Pending with reason Unschedulable and a message containing "no gpu-scheduling-map annotation"

  Scenario: A map pod held by a scheduling gate is not tried until the gate is removed, then is bound at once
    When the pod "gated-0" held by the scheduling gate "example.com/queue" is created with the map "0=node1:3"
    Then for 3 seconds the pod "gated-0" is not bound, gpu-scheduler never tries it and its PodScheduled condition says SchedulingGated
    When the scheduling gates of the pod "gated-0" are removed
    Then the pod "gated-0" runs on node1 with CUDA_VISIBLE_DEVICES "3"

  Scenario: A map pod pinned to a node without room for it waits with the reason, and is bound once room is made
    Given the pod "hog-2" of another scheduler requesting cpu "30" runs on node "node2"
    When the pod "big-0" requesting cpu "4" is created with the map "0=node2:1"
    Then the pod "big-0" is Pending with reason Unschedulable and a message containing "Insufficient cpu (the pod requests 4; node node2 has 2 of 32 left)"
    And the pod "big-0" is not bound and has CUDA_VISIBLE_DEVICES "1"
    When the pod "hog-2" is deleted
    Then the pod "big-0" runs on node2 with CUDA_VISIBLE_DEVICES "1"
