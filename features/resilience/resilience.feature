@resilience
Feature: Restarts and outages lose nothing and never bind a pod twice

  Scenario: The scheduler is killed mid-rollout and restarted
    Given a StatefulSet "rollout" of 30 parallel replicas mapped round-robin onto node1..node4
    When the scheduler is killed after at least 5 of its pods are bound
    And the StatefulSet is scaled to 50 replicas while the scheduler is down
    And the scheduler is started again
    Then all 50 pods run on their mapped nodes
    And every pod was bound exactly once
    And every pod bound after the restart has a Scheduled event from gpu-scheduler

  Scenario: While the webhook is down, annotated pods are refused and other pods are created normally
    Given the webhook is down
    When the pod "needs-gpu-0" is created with the map "0=node1:0"
    Then the creation is refused because the webhook "cuda-env.gpu-scheduling.io" could not be called
    When the pod "plain-0" for scheduler "other-scheduler" is created without a map
    Then the pod "plain-0" exists
