@takehome
Feature: The take-home: each pod lands on the node its index maps to, with its GPU ids in CUDA_VISIBLE_DEVICES

  Scenario: The take-home StatefulSet is placed on node1..node4 with its GPU ids
    Given the take-home map
    When the StatefulSet "gpu-scheduler-check" with 5 replicas is created with that map
    Then pod 0 runs on node1 with CUDA_VISIBLE_DEVICES "0,1"
    And pod 1 runs on node2 with CUDA_VISIBLE_DEVICES "2"
    And pod 2 runs on node3 with CUDA_VISIBLE_DEVICES "0,1,2"
    And pod 3 runs on node4 with CUDA_VISIBLE_DEVICES "3"
    And pod 4 runs on node4 with CUDA_VISIBLE_DEVICES "3"
    And every pod was bound exactly once and has a Scheduled event from gpu-scheduler
