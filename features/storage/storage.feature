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
