Feature: A pod's PersistentVolumeClaims are bound as kube-scheduler's VolumeBinding binds them, and the pod only once they are

  gpu-scheduler judges a pod's claims by their volumes and classes (VolumeBinding, VolumeZone), and before it binds
  the pod it writes what binds an unbound WaitForFirstConsumer claim on the chosen node: a static volume's claimRef,
  or the claim's selected-node annotation for the class's provisioner. The real PersistentVolume controller binds
  the claim; there is no provisioner in this tier, so the scenario plays one, making the volume on the node the
  claim was selected for.

  Background:
    Given every kwok node has the simulated inventory of 8 GPUs in two NVLink islands

  Scenario: A claim pod's claim is provisioned on the one node its class allows, and the pod is bound there only once the claim is
    Given the StorageClass "only-node3" of the provisioner "example.com/provisioner" binding WaitForFirstConsumer, its allowedTopologies admitting only node3
    And the PersistentVolumeClaim "scratch" of 1Gi of the StorageClass "only-node3" is created
    And the GpuClaim "train" asking for 1 GPUs on any node is created
    When the pod "train-0" naming the GpuClaim "train" and mounting the claim "scratch" is created
    Then gpu-scheduler selects node3 for the PersistentVolumeClaim "scratch"
    And for 5 seconds the pod "train-0" stays unbound
    And the PersistentVolumeClaim "scratch" is still unbound
    When the provisioner makes the PersistentVolume "scratch-pv" of 1Gi for the claim "scratch" on the node selected for it
    Then the PersistentVolumeClaim "scratch" is bound to the PersistentVolume "scratch-pv"
    And the pod "train-0" runs on node3 holding the Leases of the GPUs of its GpuClaim "train"
    And every pod was bound exactly once

  Scenario: A map pod's claim is bound to the static volume on its mapped node, not to the one on another node
    Given the StorageClass "local-disks" of the provisioner "kubernetes.io/no-provisioner" binding WaitForFirstConsumer
    And the Available PersistentVolume "disk-node1" of 1Gi of the StorageClass "local-disks" on node1
    And the Available PersistentVolume "disk-node2" of 1Gi of the StorageClass "local-disks" on node2
    And the PersistentVolumeClaim "cache" of 1Gi of the StorageClass "local-disks" is created
    When the pod "cache-2" mounting the claim "cache" is created with the map "2=node2:7"
    Then gpu-scheduler reserves the PersistentVolume "disk-node2" for the PersistentVolumeClaim "cache"
    And the PersistentVolumeClaim "cache" is bound to the PersistentVolume "disk-node2"
    And the pod "cache-2" runs on node2 with CUDA_VISIBLE_DEVICES "7"
    And the PersistentVolume "disk-node1" is still Available and reserved for no claim
    And every pod was bound exactly once

  Scenario: A map pod whose claim is bound to a volume on another node waits, naming the volume
    Given the StorageClass "pinned-disks" of the provisioner "kubernetes.io/no-provisioner" binding WaitForFirstConsumer
    And the PersistentVolumeClaim "pinned" of 1Gi of the StorageClass "pinned-disks" is created
    And the PersistentVolume "pinned-node2" of 1Gi of the StorageClass "pinned-disks" on node2 is made for the claim "pinned"
    And the PersistentVolumeClaim "pinned" is bound to the PersistentVolume "pinned-node2"
    When the pod "pinned-1" mounting the claim "pinned" is created with the map "1=node1:7"
    Then the pod "pinned-1" is Pending with reason Unschedulable and a message containing "node node1 does not match the node affinity of persistentvolume pinned-node2"
    And the pod "pinned-1" has a FailedScheduling event containing "volume node affinity conflict"
    And for 5 seconds the pod "pinned-1" stays unbound

  Scenario: A pod whose claim does not exist waits naming it, and once the claim is made it is provisioned on the pod's node
    Given the StorageClass "anywhere" of the provisioner "example.com/provisioner" binding WaitForFirstConsumer
    When the pod "late-3" mounting the claim "late" is created with the map "3=node4:7"
    Then the pod "late-3" waits, Unschedulable, because the PersistentVolumeClaim "late" is not found
    And the pod "late-3" has a FailedScheduling event containing "late"
    When the PersistentVolumeClaim "late" of 1Gi of the StorageClass "anywhere" is created
    Then gpu-scheduler selects node4 for the PersistentVolumeClaim "late"
    And for 5 seconds the pod "late-3" stays unbound
    When the provisioner makes the PersistentVolume "late-pv" of 1Gi for the claim "late" on the node selected for it
    Then the PersistentVolumeClaim "late" is bound to the PersistentVolume "late-pv"
    And the pod "late-3" runs on node4 with CUDA_VISIBLE_DEVICES "7"

  Scenario: A pod whose claim of an Immediate class is unbound waits for the PersistentVolume controller, then goes where the volume is
    Given the StorageClass "immediate" of the provisioner "example.com/provisioner" binding Immediate
    And the PersistentVolumeClaim "shared" of 1Gi of the StorageClass "immediate" is created
    And the GpuClaim "infer" asking for 1 GPUs on any node is created
    When the pod "infer-0" naming the GpuClaim "infer" and mounting the claim "shared" is created
    Then the pod "infer-0" is Pending with reason Unschedulable and a message containing "pod has unbound immediate PersistentVolumeClaims"
    And the pod "infer-0" has a FailedScheduling event containing "pod has unbound immediate PersistentVolumeClaims"
    And for 5 seconds the pod "infer-0" stays unbound
    And the PersistentVolumeClaim "shared" has no node selected for it
    When the PersistentVolume "shared-pv" of 1Gi of the StorageClass "immediate" on node1 is made for the claim "shared"
    Then the PersistentVolumeClaim "shared" is bound to the PersistentVolume "shared-pv"
    And the pod "infer-0" runs on node1 holding the Leases of the GPUs of its GpuClaim "infer"

  Scenario: A gang's members are bound only once every member's claim is: one member's claim bound is not enough
    Given the StorageClass "gang-node3" of the provisioner "example.com/provisioner" binding WaitForFirstConsumer, its allowedTopologies admitting only node3
    And the PersistentVolumeClaim "g-a" of 1Gi of the StorageClass "gang-node3" is created
    And the PersistentVolumeClaim "g-b" of 1Gi of the StorageClass "gang-node3" is created
    And the GpuClaim "g" asking for 1 GPUs for the gang "g" is created
    When the member "g-0" of a gang of 2 naming the GpuClaim "g" and mounting the claim "g-a" is created
    And the member "g-1" of a gang of 2 naming the GpuClaim "g" and mounting the claim "g-b" is created
    Then gpu-scheduler selects node3 for the PersistentVolumeClaim "g-a"
    And gpu-scheduler selects node3 for the PersistentVolumeClaim "g-b"
    When the provisioner makes the PersistentVolume "g-a-pv" of 1Gi for the claim "g-a" on the node selected for it
    Then the PersistentVolumeClaim "g-a" is bound to the PersistentVolume "g-a-pv"
    And for 5 seconds the pod "g-0" stays unbound
    And for 1 seconds the pod "g-1" stays unbound
    When the provisioner makes the PersistentVolume "g-b-pv" of 1Gi for the claim "g-b" on the node selected for it
    Then the pods "g-0" and "g-1" run on node3, each holding the Leases of the GPUs it was allocated
    And every pod was bound exactly once
