@kind @deviceplugin @exclusive
Feature: The node gives every container exactly the GPUs gpu-scheduler chose, through the real kubelet

  gpu-device-plugin serves gpu.scheduling/gpu on every worker of the KinD test-bed (simulated GPUs: one read-only
  file per GPU in the containers given it); gpu-webhook makes every container of a map pod ask for one unit per GPU
  of its map entry; the kubelet admits the pod and records which devices each container got (PodResources).

  Scenario: Every worker tells its kubelet of its GPUs
    Then every worker's allocatable gpu.scheduling/gpu is its healthy GPUs times the plugin's slots

  Scenario: The take-home's pods see exactly their GPUs, pods 3 and 4 both node4's GPU 3
    Given the deployed StatefulSet "gpu-scheduler-check" in namespace "default"
    Then each of its pods sees exactly the GPUs of its map entry, and the kubelet recorded them
    And pods 3 and 4 both see GPU 3 of node4

  Scenario: Eight pods bound to one node at once each see only their own GPU
    Given a StatefulSet "eight" of 8 parallel replicas, replica i mapped to GPU i of node2
    Then every container of every pod of "eight" sees exactly its GPU, and the kubelet recorded them

  Scenario: A pod given no GPU sees none, even when it sets NVIDIA_VISIBLE_DEVICES=all as CUDA images do
    When the pod "plain" asking for no GPU is bound to node1
    And the pod "cuda-image" asking for no GPU and setting NVIDIA_VISIBLE_DEVICES=all is bound to node1
    Then no container of the pods "plain" and "cuda-image" sees a GPU, and the kubelet recorded no device for them

  Scenario: A pod bound by its nodeName asking for more GPU slots than are free is refused by the kubelet
    When the pod "greedy" bound to node1 asks for 1 more gpu.scheduling/gpu than node1 has free
    Then the kubelet refused the pod "greedy" at admission, naming what it asked for and the free slots, and no container of it ran

  @expect_restart
  Scenario: The device plugin SIGKILLed while pods are admitted: it registers again, every pod gets its own GPUs
    Given a StatefulSet "steady" of 2 parallel replicas, replica i mapped to GPU i+2 of node1
    And every container of every pod of "steady" sees exactly its GPU, and the kubelet recorded them
    When a StatefulSet "during" of 2 parallel replicas, replica i mapped to GPU i+4 of node1, is created as the device plugin on node1 is killed with SIGKILL
    Then the device plugin on node1 registers with the kubelet again, and every slot of node1's healthy GPUs is allocatable
    And the kubelet still records the GPUs of every pod of "steady"
    And every container of every pod of "during" sees exactly its GPU, and the kubelet recorded them
    Given a StatefulSet "next" of 2 parallel replicas, replica i mapped to GPU i+6 of node1
    Then every container of every pod of "next" sees exactly its GPU, and the kubelet recorded them

  Scenario: A pod of another scheduler cannot ask for these GPUs, and NVIDIA's resource is not on these nodes
    When a pod "foreign" of the default scheduler asking for 1 gpu.scheduling/gpu is created
    Then the creation is refused with a message containing "only pods of gpu-scheduler may ask for gpu.scheduling/gpu"
    When a pod "nvidia" of the default scheduler asking for 1 nvidia.com/gpu is created
    Then the pod "nvidia" is Pending with reason Unschedulable and a message containing "Insufficient nvidia.com/gpu"

  Scenario: A kubelet restart: the plugin registers again, running pods keep their GPUs, new pods get theirs
    Given a StatefulSet "before" of 2 parallel replicas, replica i mapped to GPU i of node3
    And every container of every pod of "before" sees exactly its GPU, and the kubelet recorded them
    When the kubelet of node3 is restarted
    Then node3's allocatable gpu.scheduling/gpu comes back
    And the kubelet still records the GPUs of every pod of "before"
    Given a StatefulSet "after" of 2 parallel replicas, replica i mapped to GPU i+4 of node3
    Then every container of every pod of "after" sees exactly its GPU, and the kubelet recorded them

  Scenario: An unhealthy GPU leaves the kubelet's allocatable
    When node1 declares GPU 7 unhealthy
    Then node1's allocatable gpu.scheduling/gpu drops by the plugin's slots

  Scenario: A claim pod that asks for its claim's count sees its allocation; another count waits with the reason
    Given the GpuClaim "train" asking for 2 GPUs with policy "contiguous" on node "node2" is created
    When the pod "train-0" naming the GpuClaim "train" and asking for 2 gpu.scheduling/gpu is created
    Then the GpuClaim "train" is Bound with GPUs "0,1" on node2
    And every container of the pod "train-0" sees exactly the GPUs of its allocation, and the kubelet recorded them
    When the pod "train-9" naming the GpuClaim "train" and asking for 1 gpu.scheduling/gpu is created
    Then the pod "train-9" is Pending with reason Unschedulable and a message containing "asks for 1 gpu.scheduling/gpu but its GpuClaim gives 2"

  Scenario: A high-priority claim pod preempts the fewest low-priority ones on node2 and sees exactly the GPUs they freed
    Given the PriorityClasses "dp-low" of value -10 and "dp-high" of value 100000
    And node2's free GPUs are taken one each by pods "low" of priority class "dp-low" naming the GpuClaim "low" of 1 GPU on it
    When the pod "urgent" of priority class "dp-high" naming the GpuClaim "urgent" of 2 GPUs on node2 and asking for 2 gpu.scheduling/gpu is created
    Then every container of the pod "urgent" sees exactly the GPUs of its allocation, and the kubelet recorded them
    And exactly 2 pods "low" were preempted, each with a Preempted event, and the pod "urgent" holds GPUs they held
    And every container of every other pod "low" still sees exactly its GPU

  Scenario: An Indexed Job gang across the four workers: every container sees exactly its member's GPUs
    Given the GpuClaim "gang" asking for 4 GPUs for the gang "gang" is created
    When the Indexed Job "gang" of 4 pods naming the GpuClaim "gang" in a gang of 4, each asking for 4 gpu.scheduling/gpu, is created
    Then the 4 pods of the Job "gang" run one per worker, and every container sees exactly the GPUs of its pod's allocation, and the kubelet recorded them

  @expect_traceback
  Scenario: A node that also advertises NVIDIA's resource is reported, and the plugin on it is not ready
    When node1 also advertises 4 nvidia.com/gpu
    Then the device plugin on node1 is not ready, and its log says to label the node "nvidia.com/gpu.deploy.device-plugin=false"
    When node1 no longer advertises nvidia.com/gpu
    Then the device plugin on node1 is ready again
