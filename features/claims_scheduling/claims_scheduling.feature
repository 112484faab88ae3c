@claims_scheduling
Feature: GpuClaims are allocated with leases, reported in the claim, and released when their pod goes away

  Background:
    Given every kwok node has the simulated inventory of 8 GPUs in two NVLink islands

  Scenario: A contiguous claim is bound and its pod gets the claim's GPUs
    Given the GpuClaim "train" asking for 2 GPUs with policy "contiguous" on node "node2" is created
    When the pod "train-0" naming the GpuClaim "train" is created
    Then the GpuClaim "train" is Bound with GPUs "0,1" on node2
    And the pod "train-0" runs on node2 with its allocation annotations "node2:0,1" and "0,1"
    And the pod "train-0" holds the leases "gpu-node2-0,gpu-node2-1"

  Scenario: An exclusive claim waits while its GPUs are taken, then binds when the holder is deleted
    Given the GpuClaim "big" asking for 8 GPUs with policy "contiguous" on node "node3" is created
    And the GpuClaim "small" asking for 1 GPUs with policy "contiguous" on node "node3" is created
    When the pod "big-0" naming the GpuClaim "big" is created
    Then the GpuClaim "big" is Bound with GPUs "0,1,2,3,4,5,6,7" on node3
    When the pod "small-0" naming the GpuClaim "small" is created
    Then the GpuClaim "small" is Pending with a message containing "every matching node is busy"
    And the pod "small-0" is Pending with reason Unschedulable and a message containing "GpuClaim small"
    When the pod "big-0" is deleted
    Then the GpuClaim "small" is Bound with GPUs "0" on node3
    And no GPU lease is held by the pod "big-0"

  Scenario: MIG is refused with a Failed claim
    Given the GpuClaim "mig" asking for 1 GPUs with exclusivity "MIG" is created
    When the pod "mig-0" naming the GpuClaim "mig" is created
    Then the GpuClaim "mig" is Failed with a message containing "MIG is not supported"
    And the pod "mig-0" is Pending with reason Unschedulable and a message containing "MIG is not supported"

  Scenario: A pod naming a missing claim stays Pending with an event naming the claim
    When the pod "lost-0" naming the GpuClaim "nowhere" is created
    Then the pod "lost-0" is Pending with reason Unschedulable and a message containing "GpuClaim 'nowhere' not found"
    And the pod "lost-0" has a FailedScheduling event containing "nowhere"

  Scenario: Leases of a pod deleted while the scheduler is down are released when it comes back
    Given the GpuClaim "gone" asking for 2 GPUs with policy "spread" on node "node4" is created
    When the pod "gone-0" naming the GpuClaim "gone" is created
    Then the GpuClaim "gone" is Bound with GPUs "0,4" on node4
    When the scheduler is stopped
    And the pod "gone-0" is deleted
    And the scheduler is started again
    Then no GPU lease is held by the pod "gone-0"

  Scenario: preferIds takes the preferred GPUs, and falls back when one is taken
    Given the GpuClaim "first" asking for 1 GPUs preferring ids "5" on node "node1" is created
    And the GpuClaim "second" asking for 2 GPUs preferring ids "5,6" on node "node1" is created
    When the pod "first-0" naming the GpuClaim "first" is created
    Then the GpuClaim "first" is Bound with GPUs "5" on node1
    When the pod "second-0" naming the GpuClaim "second" is created
    Then the GpuClaim "second" is Bound with GPUs "0,6" on node1
    And the GpuClaim "second" says "preferred ids [5] were taken; fell back"

  Scenario: Required topology keeps the claim inside one fast island, where Ignore takes adjacent GPUs across islands
    Given the GpuClaim "fast" asking for 3 GPUs with topology "Required" at 600 GB/s on node "node1" is created
    And the GpuClaim "any" asking for 3 GPUs with topology "Ignore" at 600 GB/s on node "node2" is created
    And GPU 2 of node1 is Unhealthy
    And GPU 2 of node2 is Unhealthy
    When the pod "fast-0" naming the GpuClaim "fast" is created
    And the pod "any-0" naming the GpuClaim "any" is created
    Then the GpuClaim "fast" is Bound with GPUs "0,1,3" on node1
    And the GpuClaim "any" is Bound with GPUs "3,4,5" on node2

  Scenario: Required topology fails when no island can ever hold the claim
    Given the GpuClaim "wide" asking for 5 GPUs with topology "Required" at 600 GB/s on node "node1" is created
    When the pod "wide-0" naming the GpuClaim "wide" is created
    Then the GpuClaim "wide" is Failed with a message containing "no node can ever provide 5 Exclusive GPU(s) in one NVLink island"

  Scenario: Preferred topology takes the slower island whole when the fast island is busy
    Given the GpuClaim "hold" asking for 1 GPUs with policy "contiguous" on node "node1" is created
    And the GpuClaim "pref" asking for 4 GPUs with topology "Preferred" at 600 GB/s on node "node1" is created
    When the pod "hold-0" naming the GpuClaim "hold" is created
    Then the GpuClaim "hold" is Bound with GPUs "0" on node1
    When the pod "pref-0" naming the GpuClaim "pref" is created
    Then the GpuClaim "pref" is Bound with GPUs "4,5,6,7" on node1
    And the GpuClaim "pref" says "within one island below 600 GB/s (preferred, not required)"

  Scenario: Preferred topology falls back across islands when no island has room, where Required waits
    Given GPU 4 of node1 is Unhealthy
    And the GpuClaim "hold" asking for 1 GPUs with policy "contiguous" on node "node1" is created
    And the GpuClaim "pref" asking for 4 GPUs with topology "Preferred" at 600 GB/s on node "node1" is created
    And the GpuClaim "req" asking for 4 GPUs with topology "Required" at 0 GB/s on node "node1" is created
    When the pod "hold-0" naming the GpuClaim "hold" is created
    Then the GpuClaim "hold" is Bound with GPUs "0" on node1
    When the pod "req-0" naming the GpuClaim "req" is created
    Then the GpuClaim "req" is Pending with a message containing "every matching node is busy"
    When the pod "req-0" is deleted
    And the pod "pref-0" naming the GpuClaim "pref" is created
    Then the GpuClaim "pref" is Bound with GPUs "1,2,3,5" on node1
    And the GpuClaim "pref" says "lowest free ids"

  Scenario: A map pod's GPUs are never given to an Exclusive claim; the claim binds once the map pod is gone
    Given the GpuClaim "all" asking for 8 GPUs with policy "contiguous" on node "node3" is created
    When the pod "check-2" is created with the map "2=node3:0,1,2"
    Then the pod "check-2" runs on node3 with CUDA_VISIBLE_DEVICES "0,1,2"
    When the pod "all-0" naming the GpuClaim "all" is created
    Then the GpuClaim "all" is Pending with a message containing "every matching node is busy"
    And the GpuNodeStatus of node3 shows GPUs "0,1,2" in use by the pod "check-2"
    When the pod "check-2" is deleted
    Then the GpuClaim "all" is Bound with GPUs "0,1,2,3,4,5,6,7" on node3

  Scenario: A map pod waits while an Exclusive claim holds its GPUs, and the reason names the holder
    Given the GpuClaim "big" asking for 8 GPUs with policy "contiguous" on node "node4" is created
    When the pod "big-0" naming the GpuClaim "big" is created
    Then the GpuClaim "big" is Bound with GPUs "0,1,2,3,4,5,6,7" on node4
    When the pod "check-3" is created with the map "3=node4:3"
    Then the pod "check-3" is Pending with reason Unschedulable and a message containing "GPU 3 of node node4 (map entry 3) is held exclusively by pod"
    And the pod "check-3" is Pending with reason Unschedulable and a message containing "(GpuClaim big)"
    When the pod "big-0" is deleted
    Then the pod "check-3" runs on node4 with CUDA_VISIBLE_DEVICES "3"
    And no GPU lease is held by the pod "big-0"

  Scenario: A claim whose selector matches no node with an inventory says so
    Given the GpuClaim "lonely" asking for 1 GPUs with policy "contiguous" on node "node9" is created
    When the pod "lonely-0" naming the GpuClaim "lonely" is created
    Then the GpuClaim "lonely" is Pending with a message containing "nodes with a GPU inventory matches selector"

  Scenario: A claim pod held by a scheduling gate is bound once a queue removes the gate
    Given the GpuClaim "queued" asking for 2 GPUs with policy "contiguous" on node "node2" is created
    When the pod "queued-0" naming the GpuClaim "queued" and held by the scheduling gate "example.com/queue" is created
    Then for 3 seconds the pod "queued-0" is not bound, gpu-scheduler never tries it and its PodScheduled condition says SchedulingGated
    When the scheduling gates of the pod "queued-0" are removed
    Then the GpuClaim "queued" is Bound with GPUs "0,1" on node2
    And the pod "queued-0" runs on node2 with its allocation annotations "node2:0,1" and "0,1"

  Scenario: A claim pod too big for the free CPU of every GPU node waits with the reason, and binds where a CPU-heavy pod goes away
    Given the GpuClaim "cpu" asking for 1 GPUs on any node is created
    And the pod "hog-1" of another scheduler requesting cpu "30" runs on node "node1"
    And the pod "hog-2" of another scheduler requesting cpu "30" runs on node "node2"
    And the pod "hog-3" of another scheduler requesting cpu "30" runs on node "node3"
    And the pod "hog-4" of another scheduler requesting cpu "30" runs on node "node4"
    When the pod "cpu-0" requesting cpu "4" naming the GpuClaim "cpu" is created
    Then the pod "cpu-0" is Pending with reason Unschedulable and a message containing "fits none of the 4 nodes with a GPU inventory: Insufficient cpu"
    And the GpuClaim "cpu" is Pending with a message containing "node node3 has 2 of 32 left"
    When the pod "hog-3" is deleted
    Then the GpuClaim "cpu" is Bound with GPUs "0" on node3

  Scenario: A claim pod's required node affinity narrows the nodes its claim may use
    Given the GpuClaim "near" asking for 1 GPUs on any node is created
    And the GpuClaim "far" asking for 1 GPUs on any node is created
    When the pod "near-0" naming the GpuClaim "near" with required node affinity to "node3" is created
    Then the GpuClaim "near" is Bound with GPUs "0" on node3
    When the pod "far-0" naming the GpuClaim "far" with required node affinity to "node9" is created
    Then the pod "far-0" is Pending with reason Unschedulable and a message containing "node node1 does not match the pod's required node affinity"
