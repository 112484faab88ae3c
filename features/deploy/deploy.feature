Feature: The deploy role undoes what a helm killed mid-way left pending, and never what a live one is doing

  A helm install, upgrade or rollback that is killed leaves its revision pending, and helm then refuses every later
  operation on the release ("another operation (install/upgrade/rollback) is in progress"): the test-bed's next
  run would fail at its install for good. roles/deploy/tasks/recover.yml runs before the install: a pending revision
  older than deploy_pending_stale_after is taken for a dead helm's and undone, a younger one stops the run. Each
  scenario kills a real helm on a real kube-apiserver, with a chart of one StatefulSet whose pods nobody schedules,
  so that helm's --wait never ends by itself, and runs the role's tasks with the toolchain's ansible-playbook.

  Scenario: An upgrade killed mid-way is rolled back to the deployed revision, after a run that found it too young to touch
    Given the release "stuck" of the one-StatefulSet chart with 0 replicas, deployed
    When helm upgrades "stuck" to 1 replica and is killed once revision 2 is "pending-upgrade"
    And the deploy role's recovery runs with deploy_pending_stale_after 300
    Then the run failed saying revision 2 is "pending-upgrade" and another helm operation may still be running
    And the last revision of "stuck" is 2, "pending-upgrade"
    When the deploy role's recovery runs with deploy_pending_stale_after 0
    Then the run succeeded with 1 task changed
    And the last revision of "stuck" is 3, "deployed"
    And the StatefulSet "stuck" asks for 0 replicas
    When the deploy role's recovery runs with deploy_pending_stale_after 0
    Then the run succeeded with 0 tasks changed
    And helm upgrades "stuck" to 0 replicas

  Scenario: An install killed mid-way is uninstalled, with what it made
    When helm installs "stuck" with 1 replica and is killed once revision 1 is "pending-install"
    And the deploy role's recovery runs with deploy_pending_stale_after 0
    Then the run succeeded with 1 task changed
    And the release "stuck" has no revision
    And the StatefulSet "stuck" is gone
