@errors
Feature: A map the webhook cannot honour is refused at admission with a message that names the problem

  Scenario: A malformed map is refused at creation with the line in the message
    When the pod "bad-0" is created with the map
      """
      0=node1:0,1
      1=node2
      2=Node_3:0
      """
    Then the creation is refused with a message containing "line 2 '1=node2': missing `:`"
    And the message also contains "line 3 '2=Node_3:0': node 'Node_3' is not a valid Kubernetes node name"
    And there is no pod "bad-0"

  Scenario: A pod whose index cannot be resolved is refused
    When a pod with generateName "worker-" is created with the take-home map
    Then the creation is refused with a message containing "cannot resolve the pod index"

  Scenario: Scaling past the map: the StatefulSet reports the webhook's message and nothing else changes
    Given the take-home map
    And the StatefulSet "gpu-scheduler-check" with 5 replicas is created with that map
    And all its pods run on their mapped nodes
    When the StatefulSet is scaled to 6 replicas
    Then the StatefulSet has a FailedCreate event containing "pod index 5 is not in the gpu-scheduling-map annotation"
    And there is no pod "gpu-scheduler-check-5"
    And pods 0 to 4 are the same pods on the same nodes as before
