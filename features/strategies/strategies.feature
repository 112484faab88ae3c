@strategies
Feature: GpuClaims are placed by the node strategy of the claim, the runtime policy or the flag, and served by priority

  Each scenario has a pool of fresh kwok nodes of its own (named <namespace>-a, -b, -c), so that what other
  scenarios hold elsewhere cannot change where its claims go.

  Background:
    Given every kwok node has the simulated inventory of 8 GPUs in two NVLink islands

  Scenario Outline: Each strategy places the same claims differently
    Given a pool of 3 nodes with 8 GPUs each
    And the GpuClaim "hold" asking for 4 GPUs on pool node "a" is created
    When the pod "hold-0" naming the GpuClaim "hold" is created
    Then the GpuClaim "hold" is Bound on pool node "a" by strategy "BestFit"
    When the claims "c1,c2,c3" asking for 1 GPU each with strategy "<strategy>" are bound one after another
    Then they are on the pool nodes "<nodes>" by strategy "<strategy>"

    Examples:
      | strategy      | nodes |
      | BestFit       | a,a,a |
      | LeastUtilized | b,c,b |

  Scenario: RoundRobin takes the next node after the last one it chose, and resumes there after a restart
    Given a pool of 3 nodes with 8 GPUs each
    When the claims "r1,r2" asking for 1 GPU each with strategy "RoundRobin" are bound one after another
    Then they are on consecutive pool nodes in name order, wrapping around
    When the scheduler is stopped
    And the scheduler is started again
    And the claims "r3" asking for 1 GPU each with strategy "RoundRobin" are bound one after another
    Then the claims "r1,r2,r3" are on consecutive pool nodes in name order, wrapping around

  Scenario: The claim's strategy wins over the policy's, and the policy's over the scheduler's flag
    Given a pool of 3 nodes with 8 GPUs each
    When the GpuSchedulingPolicy sets the default strategy "LeastUtilized"
    Then the policy's status says strategy "LeastUtilized" is applied from its generation
    And the policy has a PolicyApplied event naming "LeastUtilized"
    When the claims "p1,p2" asking for 1 GPU each with strategy "" are bound one after another
    Then they are on the pool nodes "a,b" by strategy "LeastUtilized"
    When the claims "p3" asking for 1 GPU each with strategy "BestFit" are bound one after another
    Then they are on the pool nodes "a" by strategy "BestFit"
    When the GpuSchedulingPolicy is deleted
    And the claims "p4" asking for 1 GPU each with strategy "" are bound one after another
    Then they are on the pool nodes "a" by strategy "BestFit"

  Scenario: Changing the policy at runtime changes the next placement
    Given a pool of 3 nodes with 8 GPUs each
    When the GpuSchedulingPolicy sets the default strategy "LeastUtilized"
    Then the policy's status says strategy "LeastUtilized" is applied from its generation
    When the claims "u1,u2" asking for 1 GPU each with strategy "" are bound one after another
    Then they are on the pool nodes "a,b" by strategy "LeastUtilized"
    When the GpuSchedulingPolicy sets the default strategy "BestFit"
    Then the policy's status says strategy "BestFit" is applied from its generation
    When the claims "u3" asking for 1 GPU each with strategy "" are bound one after another
    Then they are on the pool nodes "a" by strategy "BestFit"

  Scenario: A high-priority claim overtakes queued low-priority ones, and is never starved by them
    Given a pool of 1 nodes with 8 GPUs each
    And the PriorityClass "gpu-high" of value 1000 that never preempts
    And the claims "hold6,hold1,hold1b" asking for 6,1,1 GPUs in the pool are bound
    When the pod "low-0" naming the GpuClaim "low" of 1 GPUs in the pool is created
    And the pod "high-0" naming the GpuClaim "high" of 2 GPUs in the pool is created with priority class "gpu-high"
    Then the pod "high-0" is Pending with reason Unschedulable and a message containing "every matching node is busy"
    When the pod "hold1-0" is deleted
    Then the pod "low-0" is Pending with reason Unschedulable and a message containing "(priority 1000), which waits for it"
    And for 3 seconds the pod "low-0" stays unbound
    # Two GPUs free and both pods woken: had low-0 taken one, high-0 (2 GPUs) would not fit.
    When the pod "hold1b-0" is deleted
    Then the GpuClaim "high" is Bound on pool node "a" by strategy "BestFit"
    When the pod "hold6-0" is deleted
    Then the GpuClaim "low" is Bound on pool node "a" by strategy "BestFit"

  Scenario: A waiting high-priority gang keeps its nodes from lower-priority claims, and is not starved by them
    Given a pool of 2 nodes with 8 GPUs each
    And the PriorityClass "gpu-high" of value 1000 that never preempts
    And the claims "hold4" asking for 4 GPUs in the pool are bound
    When the gang "big" of 2 pods of 8 GPUs each in the pool is created with priority class "gpu-high"
    Then the pod "big-1" is Pending with reason Unschedulable and a message containing "does not fit whole"
    When the pod "low-0" naming the GpuClaim "low" of 1 GPUs in the pool is created
    Then the pod "low-0" is Pending with reason Unschedulable and a message containing "big (priority 1000), which waits for it"
    And for 3 seconds the pod "low-0" stays unbound
    When the pod "hold4-0" is deleted
    Then the pods "big-0,big-1" are bound, one on each pool node

  Scenario: With queue order FIFO nothing is kept for a higher priority
    Given a pool of 1 nodes with 8 GPUs each
    And the PriorityClass "gpu-high" of value 1000 that never preempts
    And the GpuSchedulingPolicy sets the queue order "FIFO"
    And the claims "hold7,hold1" asking for 7,1 GPUs in the pool are bound
    When the pod "low-0" naming the GpuClaim "low" of 1 GPUs in the pool is created
    And the pod "high-0" naming the GpuClaim "high" of 2 GPUs in the pool is created with priority class "gpu-high"
    And the pod "hold1-0" is deleted
    Then the GpuClaim "low" is Bound on pool node "a" by strategy "BestFit"

  Scenario: BestFit takes the GPU with just enough free memory
    Given a pool of 1 nodes whose GPUs have 81920 MiB with "0,60000,40000,75000,0,0,0,0" MiB used
    When the claims "m1" asking for 1 GPU with at least 20000 MiB free are bound one after another
    Then the GpuClaim "m1" is Bound on pool node "a" with GPU "1"
    When the claims "m2" asking for 1 GPU with at least 90000 MiB free are created
    Then the GpuClaim "m2" is Failed with a message containing "MiB"
