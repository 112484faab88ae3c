@kind @exclusive
Feature: Storage on the KinD test-bed: kind's default StorageClass, served by rancher's local-path provisioner

  Scenario: A pod writes to a claim on the default StorageClass, a second pod reads it back, and deleting the claim removes the volume
    Given the default StorageClass is "standard" of the provisioner "rancher.io/local-path"
    And the PersistentVolumeClaim "data" of 16Mi that names no StorageClass is created
    When the pod "writer" writes its uid to "note.txt" on the claim "data"
    Then the PersistentVolumeClaim "data" is Bound to a volume of "standard" under "/var/local-path-provisioner" on the node of "writer"
    When the pod "reader" prints "note.txt" from the claim "data"
    Then the pod "reader" printed the uid of the pod "writer", on the same node
    When the pods "writer" and "reader" and the PersistentVolumeClaim "data" are deleted
    Then the volume of "data" is deleted after the provisioner removed it from its node

  Scenario: A gpu-scheduler StatefulSet with a volumeClaimTemplate runs on its mapped node and writes to its volume
    Given the default StorageClass is "standard" of the provisioner "rancher.io/local-path"
    When the gpu-scheduler StatefulSet "vol" mapped "0=node2:5" with a volume "data" of 16Mi, its pod writing its uid to "note.txt", is created
    Then the pod "vol-0" runs on node2 with its claim "data-vol-0" Bound to a volume of "standard" pinned to node2
    When the pod "reader" prints "note.txt" from the claim "data-vol-0"
    Then the pod "reader" printed the uid of the pod "vol-0", on the same node

  Scenario: A claim pod with a PersistentVolumeClaim runs where its GPUs are, and created again it goes back to its volume's node
    Given the default StorageClass is "standard" of the provisioner "rancher.io/local-path"
    And the GpuClaim "train" asking for 1 GPUs on any node is created
    And the PersistentVolumeClaim "ckpt" of 16Mi that names no StorageClass is created
    When the pod "trainer" naming the GpuClaim "train" with the claim "ckpt" writing its uid to "note.txt" is created
    Then the pod "trainer" runs with its claim "ckpt" Bound to a volume of "standard" pinned to its node
    When the pod "trainer" is deleted and created again
    Then the pod "trainer" runs again on the node of its first run
    When the pod "reader" prints "note.txt" from the claim "ckpt"
    Then the pod "reader" printed the uid of the pod "trainer" of its first run
