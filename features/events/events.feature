@events
Feature: A reason repeated on every attempt is one Event, created once and patched with a backoff

  A pod that fails the same way on every attempt costs one FailedScheduling Event, not a write per attempt: the
  first occurrence is created at once, the repeats are only counted, and the count (with the time last seen) is
  patched back no sooner than 10 s after the Event was created, then at intervals doubling from 20 s (the series'
  timing of scheduler/events.py, the program's defaults). The attempts are read from the leader's metrics, the
  Event from the apiserver, and its writes from the apiserver's audit log.

  Scenario: A waiting pod woken by changes that do not help it has one Event counting every attempt
    Given gpu-scheduler's attempts on map pods are counted from now, no other pod of it waiting
    When the pod "big-0" requesting cpu "64" is created with the map "0=node1:0"
    Then the pod "big-0" is Pending with reason Unschedulable and a message containing "Insufficient cpu (the pod requests 64; node node1 has 32 of 32 left)"
    When the labels of the pod "big-0" are changed 3 times, each change tried by gpu-scheduler and the pod still waiting
    Then the FailedScheduling Event of "big-0" counts every attempt so far
    When the labels of the pod "big-0" are changed 2 times, each change tried by gpu-scheduler and the pod still waiting
    Then the FailedScheduling Event of "big-0" counts every attempt so far
    And "big-0" has one FailedScheduling Event for its reason, its lastTimestamp later than its firstTimestamp
    And the audit log has that Event created once, then patched: first 10 s or more after its firstTimestamp, each later patch at least twice as long after the one before
