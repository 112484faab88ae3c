@placement
Feature: A map pod's index comes from its workload controller's labels, read alike by the webhook and the scheduler

  Scenario: An Indexed Job placed by the map
    Given the map
      """
      0=node1:4
      1=node2:5
      2=node3:6
      3=node4:7
      """
    When the Indexed Job "train" of 4 parallel pods is created with that map
    Then the Job controller's 4 pods of "train" ran, each on the node of its completion index with its GPU ids
    And the Job's pod of completion index 2 is named "train-2-<random>" and ran on node3 with CUDA_VISIBLE_DEVICES "6"

  Scenario: A LeaderWorkerSet's pods are numbered group × size + worker, not by their StatefulSet label or name
    Given the map
      """
      0=node1:0
      1=node2:1
      2=node3:2
      3=node4:3
      """
    When the pods of the LeaderWorkerSet "lws" of 2 groups of 2, labelled as its controller labels them, are created with that map
    Then the pod "lws-0" runs on node1 with CUDA_VISIBLE_DEVICES "0"
    And the pod "lws-0-1" runs on node2 with CUDA_VISIBLE_DEVICES "1"
    And the pod "lws-1" runs on node3 with CUDA_VISIBLE_DEVICES "2"
    And the pod "lws-1-1" runs on node4 with CUDA_VISIBLE_DEVICES "3"

  Scenario: A JobSet of one-pod Jobs is numbered by the global Job index; several pods per Job are refused
    Given the map
      """
      0=node2:4
      1=node3:5
      2=node4:6
      """
    When the pods of the JobSet "js" of 3 one-pod Jobs, labelled as its controller labels them, are created with that map
    Then the pod "js-workers-0-0-x7k4p" runs on node2 with CUDA_VISIBLE_DEVICES "4"
    And the pod "js-workers-1-0-x7k4p" runs on node3 with CUDA_VISIBLE_DEVICES "5"
    And the pod "js-workers-2-0-x7k4p" runs on node4 with CUDA_VISIBLE_DEVICES "6"
    When the pod "js-workers-1-1-x7k4p" of a JobSet whose Jobs run 2 pods each is created with that map
    Then the creation is refused with a message containing "cannot be indexed unambiguously"
    And there is no pod "js-workers-1-1-x7k4p"

  Scenario: A training operator's workers are numbered by their replica index
    Given the map
      """
      0=node4:0,1
      1=node3:2,3
      """
    When the worker pods of the PyTorchJob "pt" of 2 workers, labelled as the training operator labels them, are created with that map
    Then the pod "pt-worker-0" runs on node4 with CUDA_VISIBLE_DEVICES "0,1"
    And the pod "pt-worker-1" runs on node3 with CUDA_VISIBLE_DEVICES "2,3"
