@cli
Feature: kubectl gpu: the GPU scheduler's nodes, claims, policy and health from the command line

  Each command runs the real kubectl-gpu console script as a subprocess. Its KUBECONFIG lists a file of the
  scenario's own first (a context whose namespace is the scenario's namespace, and the current context) and then
  the cluster's kubeconfig, so that the context's namespace and the merge of several kubeconfig files are used as
  kubectl uses them. Claims and map pods are bound by the real gpu-scheduler. A table step lists the header and the
  rows expected ("*" matches anything, {ns} is the scenario's namespace); a table or lines step runs the command
  again until it prints them or 30 seconds have passed, since the cluster is shared with the other scenarios. The
  control-plane scenarios write the simulated inventories themselves; on KinD the inventory agents write them.

  Scenario: nodes, claims and status show what the scheduler bound and what waits, in every output format
    Given every kwok node has the simulated inventory of 8 GPUs in two NVLink islands
    And node2 reports utilization "10,20,30,40,50,60,70,80" percent and 8 GiB used of 80 GiB per GPU
    And the GpuClaim "train" asking for 2 GPUs with policy "contiguous" on node "node2" is created
    And the pod "train-0" naming the GpuClaim "train" is created
    When the pod "check-1" is created with the map "1=node2:7"
    Then the GpuClaim "train" is Bound with GPUs "0,1" on node2
    And the pod "check-1" runs on node2 with CUDA_VISIBLE_DEVICES "7"
    Given the GpuClaim "big" asking for 8 GPUs with policy "contiguous" on node "node2" is created
    And the pod "big-0" naming the GpuClaim "big" is created
    Then the GpuClaim "big" waits with a message containing "every matching node is busy"
    And "kubectl gpu nodes" prints a table with the rows
      | NAME  | GPUS | FREE | UNHEALTHY | ISLANDS | UTIL | AGE |
      | node2 | 8    | 5    | 0         | 2       | 45%  | *   |
    And "kubectl gpu nodes node2 -o wide" prints the table
      | NAME  | GPUS | FREE | UNHEALTHY | ISLANDS | UTIL | AGE | MEMORY   | FREE-BY-ISLAND                    |
      | node2 | 8    | 5    | 0         | 2       | 45%  | *   | 64/640GiB | nvlink-group-0=2,nvlink-group-1=3 |
    And "kubectl gpu nodes node2 -o json" prints the json GpuNodeStatus "node2"
    And "kubectl gpu nodes -o yaml" prints a yaml List including "GpuNodeStatus/node1,GpuNodeStatus/node2"
    And "kubectl gpu nodes -o name" prints lines matching
      """
      gpunodestatus.gpu.scheduling/node1
      gpunodestatus.gpu.scheduling/node2
      gpunodestatus.gpu.scheduling/node3
      gpunodestatus.gpu.scheduling/node4
      """
    And "kubectl gpu claims" prints the table
      | NAME  | PHASE   | NODE   | GPUS | STRATEGY  | AGE |
      | big   | Pending | <none> | (8)  | <default> | *   |
      | train | Bound   | node2  | 0,1  | BestFit   | *   |
    And "kubectl gpu workloads -o wide" prints the table
      | NAME  | PHASE   | NODE   | GPUS | STRATEGY  | AGE | PODS    | MESSAGE                                           |
      | big   | Pending | <none> | (8)  | <default> | *   | big-0   | * every matching node is busy                     |
      | train | Bound   | node2  | 0,1  | BestFit   | *   | train-0 | allocated 2 Exclusive GPU(s) on node2*            |
    And "kubectl gpu claims -A -o wide" prints a table with the rows
      | NAMESPACE | NAME  | PHASE   | NODE   | GPUS | STRATEGY  | AGE | PODS    | MESSAGE                        |
      | {ns}      | big   | Pending | <none> | (8)  | <default> | *   | big-0   | * every matching node is busy  |
      | {ns}      | train | Bound   | node2  | 0,1  | BestFit   | *   | train-0 | allocated 2 Exclusive GPU(s)*  |
    And "kubectl gpu claims -o json" prints a json List of "GpuClaim/big,GpuClaim/train"
    And "kubectl gpu claims train -o yaml" prints the yaml GpuClaim "train"
    And "kubectl gpu claims -o name" prints exactly
      """
      gpuclaim.gpu.scheduling/big
      gpuclaim.gpu.scheduling/train
      """
    And "kubectl gpu status" prints lines matching
      """
      SCHEDULER
        leader        * (renewed *s ago, lease 15s)
        policy        none (GpuSchedulingPolicy default not found): the scheduler's flags
        strategy      (scheduler default)
        queue order   (scheduler default)
      GPUS   * nodes   * total   * free   * allocated   * unhealthy
        NAME    GPUS   FREE   UNHEALTHY   ISLANDS   UTIL   AGE
        node2   8      5      0           2         45%    *
      CLAIMS (namespace {ns})   Pending 1   Reserved 0   Bound 1   Failed 0
      PENDING PODS (namespace {ns}, scheduler gpu-scheduler)   1
        NAME    GPUS        AGE   WHY
        big-0   claim/big   *     GpuClaim big: * every matching node is busy
      """
    And "kubectl gpu status -o wide" prints lines matching
      """
        NAME    GPUS   FREE   UNHEALTHY   ISLANDS   UTIL   AGE   MEMORY      FREE-BY-ISLAND
        node2   8      5      0           2         45%    *     64/640GiB   nvlink-group-0=2,nvlink-group-1=3
      """
    And "kubectl gpu status -o json" reports 1 Bound and 1 Pending claim, the pending pod "big-0" and node2 with 5 free GPUs
    And "kubectl gpu status -o yaml" reports 1 Bound and 1 Pending claim, the pending pod "big-0" and node2 with 5 free GPUs

  Scenario: An empty namespace, an unknown node, a refused user, a bad flag and a bad context are reported as kubectl does
    Given every kwok node has the simulated inventory of 8 GPUs in two NVLink islands
    When I run "kubectl gpu claims"
    Then it exits with status 0, prints nothing and says on stderr
      """
      No resources found in {ns} namespace.
      """
    When I run "kubectl gpu claims -o name"
    Then it exits with status 0, prints nothing and says on stderr
      """
      No resources found in {ns} namespace.
      """
    When I run "kubectl gpu nodes node1 node9"
    Then it exits with status 1 and says on stderr
      """
      error: from server (NotFound): gpunodestatuses.gpu.scheduling "node9" not found
      """
    And its output has the row "node1"
    Given a user "bob" whom RBAC grants nothing
    When I run "kubectl gpu claims" as "bob"
    Then it exits with status 1, prints nothing and says on stderr
      """
      error: cannot list gpuclaims.gpu.scheduling in namespace "{ns}": gpuclaims.gpu.scheduling is forbidden: User "bob" cannot list resource "gpuclaims" in API group "gpu.scheduling" in the namespace "{ns}"
      """
    When I run "kubectl gpu strategy fifo --no-wait" as "bob"
    Then it exits with status 1, prints nothing and says on stderr
      """
      error: cannot get gpuschedulingpolicies.gpu.scheduling 'default': gpuschedulingpolicies.gpu.scheduling "default" is forbidden: User "bob" cannot get resource "gpuschedulingpolicies" in API group "gpu.scheduling" at the cluster scope
      """
    When I run "kubectl gpu nodes --no-such-flag"
    Then it exits with status 2
    When I run "kubectl gpu nodes --context nowhere"
    Then it exits with status 1, prints nothing and says on stderr
      """
      error: kubeconfig *: context 'nowhere' not found (have: scenario, test)
      """

  Scenario: generate-template writes a claim and a pod that submit applies as written, claims first
    Given every kwok node has the simulated inventory of 8 GPUs in two NVLink islands
    When I run "kubectl gpu generate-template {tmp}/train.yaml --name train --gpus 2 --strategy least_utilized"
    Then it prints exactly
      """
      wrote {tmp}/train.yaml: GpuClaim train and Pod train (kubectl gpu submit {tmp}/train.yaml)
      """
    When I run "kubectl gpu generate-template {tmp}/train.yaml"
    Then it exits with status 1, prints nothing and says on stderr
      """
      error: {tmp}/train.yaml exists: pass --force to overwrite it
      """
    When I run "kubectl gpu submit {tmp}/train.yaml --dry-run server"
    Then it prints exactly
      """
      gpuclaim.gpu.scheduling/train serverside-applied (server dry run)
      pod/train serverside-applied (server dry run)
      """
    And there is no pod "train"
    When I run "kubectl gpu submit {tmp}/train.yaml"
    Then it prints exactly
      """
      gpuclaim.gpu.scheduling/train serverside-applied
      pod/train serverside-applied
      """
    And the GpuClaim "train" is Bound with 2 GPUs by strategy "LeastUtilized"
    And the GpuClaim "train" and the pod "train" were applied by the field manager "kubectl-gpu"
    When I run "kubectl gpu submit -" with the input
      """
      apiVersion: v1
      kind: Pod
      metadata: {name: train-1, annotations: {gpu.scheduling/claim: train}}
      spec: {schedulerName: gpu-scheduler, containers: [{name: main, image: cuda}]}
      """
    Then it prints exactly
      """
      pod/train-1 serverside-applied
      """
    When I run "kubectl gpu submit {tmp}/train.yaml -o name"
    Then it prints exactly
      """
      gpuclaim.gpu.scheduling/train
      pod/train
      """
    When I run "kubectl gpu submit {tmp}/train.yaml -o json"
    Then it prints a json List of "GpuClaim/train,Pod/train"
    When I run "kubectl gpu submit {tmp}/train.yaml -o yaml"
    Then it prints a yaml List of "GpuClaim/train,Pod/train"
    When I run "kubectl gpu submit -" with the input
      """
      apiVersion: v1
      kind: Pod
      metadata: {name: lost-0, annotations: {gpu.scheduling/claim: nowhere}}
      spec: {schedulerName: gpu-scheduler, containers: [{name: main, image: cuda}]}
      ---
      apiVersion: apps/v1
      kind: Deployment
      metadata: {name: web}
      """
    Then it exits with status 1, prints nothing and says on stderr
      """
      error: document 2: kind Deployment is not accepted: submit takes GpuClaim and Pod documents
      """
    When I run "kubectl gpu submit -" with the input
      """
      apiVersion: v1
      kind: Pod
      metadata: {name: lost-0, annotations: {gpu.scheduling/claim: nowhere}}
      spec: {schedulerName: gpu-scheduler, containers: [{name: main, image: cuda}]}
      """
    Then it exits with status 1, prints nothing and says on stderr
      """
      error: document 1 (Pod {ns}/lost-0): metadata.annotations[gpu.scheduling/claim] names the GpuClaim 'nowhere', which is neither in the input nor in namespace {ns}
      """
    When I run "kubectl gpu submit -" with the input
      """
      apiVersion: gpu.scheduling/v1
      kind: GpuClaim
      metadata: {name: half}
      spec: {devices: {count: 1}}
      ---
      apiVersion: v1
      kind: Pod
      metadata: {name: half-0, annotations: {gpu.scheduling/claim: half}}
      spec: {schedulerName: gpu-scheduler, containers: [{name: main}]}
      """
    Then it exits with status 1, prints nothing and says on stderr
      """
      error: document 2 (Pod {ns}/half-0): from server (Invalid): Pod "half-0" is invalid: spec.containers[0].image: Required value
      """
    And there is no GpuClaim "half" and no pod "half-0"
    When I run "kubectl gpu submit -" with the input
      """
      kind: Pod
      metadata: [
      """
    Then it exits with status 1, prints nothing and says on stderr
      """
      error: <stdin>: malformed YAML at line 3*
      """

  Scenario: strategy shows the policy, sets it under each accepted spelling and waits for the scheduler to apply it
    Given there is no GpuSchedulingPolicy
    When I run "kubectl gpu strategy"
    Then it prints lines matching
      """
      policy        none (GpuSchedulingPolicy default not found)
      strategy      (scheduler default)
      queue order   (scheduler default)
      """
    When I run "kubectl gpu strategy least_utilized"
    Then it prints exactly
      """
      gpuschedulingpolicy.gpu.scheduling/default serverside-applied
      strategy LeastUtilized applied (generation 1)
      """
    And the GpuSchedulingPolicy says defaultStrategy "LeastUtilized" and the scheduler applies "LeastUtilized"
    When I run "kubectl gpu strategy FIFO"
    Then it prints exactly
      """
      gpuschedulingpolicy.gpu.scheduling/default serverside-applied
      queue order FIFO applied (generation 2)
      """
    And the GpuSchedulingPolicy says defaultStrategy "LeastUtilized" and queueOrder "FIFO", both applied by "kubectl-gpu"
    When I run "kubectl gpu strategy Round-Robin --no-wait -o name"
    Then it prints exactly
      """
      gpuschedulingpolicy.gpu.scheduling/default
      """
    And "kubectl gpu strategy" prints lines matching
      """
      policy        default (generation 3)
      strategy      RoundRobin
      queue order   FIFO
      observed      generation 3 = generation 3 (up to date)
      applied       strategy RoundRobin, queue order FIFO
      """
    And "kubectl gpu strategy -o json" prints the json GpuSchedulingPolicy "default"
    And "kubectl gpu strategy -o yaml" prints the yaml GpuSchedulingPolicy "default"
    And "kubectl gpu status" prints lines matching
      """
        policy        default: generation 3, observed (up to date)
        strategy      RoundRobin (applied)
        queue order   FIFO (applied)
      """
    When I run "kubectl gpu strategy priority"
    Then it prints lines matching
      """
      queue order Priority applied (generation 4)
      """
    When I run "kubectl gpu strategy fastest"
    Then it exits with status 2, prints nothing and says on stderr
      """
      error: unknown strategy 'fastest'; accepted: BestFit (best-fit, best_fit), LeastUtilized (least-utilized, least_utilized), RoundRobin (round-robin, round_robin), priority (queue order Priority), fifo (queue order FIFO)
      """
    When the scheduler is stopped
    And I run "kubectl gpu strategy best-fit --timeout 3s"
    Then it exits with status 1 and says on stderr
      """
      error: timed out after 3s waiting for the scheduler to apply generation 5 of GpuSchedulingPolicy default (status.observedGeneration: 4); is gpu-scheduler running? `kubectl gpu status` shows its leader
      """
    When the scheduler is started again
    Then "kubectl gpu strategy" prints lines matching
      """
      observed      generation 5 = generation 5 (up to date)
      applied       strategy BestFit, queue order Priority
      """

  Scenario: watch prints a snapshot, then one line per change, from watches
    Given every kwok node has the simulated inventory of 8 GPUs in two NVLink islands
    And the GpuClaim "before" asking for 1 GPUs with policy "contiguous" on node "node1" is created
    And the pod "before-0" naming the GpuClaim "before" is created
    Then the GpuClaim "before" is Bound with GPUs "0" on node1
    When "kubectl gpu watch" runs in the background
    # Once an object's snapshot line is out, its informer has listed and watches from there on.
    Then the watch prints within 30 seconds lines matching
      """
      *  gpunodestatus/node3  free 8/8
      *  gpunodestatus/node4  free 8/8
      *  gpuclaim/{ns}/before  Bound  node1:0
      *  pod/{ns}/before-0  *  node1:0
      """
    Given the GpuClaim "w" asking for 1 GPUs with policy "contiguous" on node "node3" is created
    When the pod "w-0" naming the GpuClaim "w" is created
    And GPU 0 of node4 is reported Unhealthy
    Then the watch prints within 30 seconds lines matching
      """
      *  gpuclaim/{ns}/w  new -> <none>
      *  gpuclaim/{ns}/w  <none> -> Bound  node3:*
      *  pod/{ns}/w-0  new -> Pending  claim/w
      *  pod/{ns}/w-0  * -> Running  node3:*
      *  gpunodestatus/node4  free 8/8 -> free 7/8  1 unhealthy
      """
    When the pod "w-0" is deleted
    Then the watch prints within 30 seconds lines matching
      """
      *  pod/{ns}/w-0  * -> deleted
      """
    When the watch is interrupted
    Then it exits with status 130 without a traceback
    When I run "kubectl gpu watch --no-snapshot --timeout 2s"
    Then it exits with status 0 after about 2 seconds and prints nothing
    When I run "kubectl gpu watch --timeout 5 -o json"
    Then every line it prints is a JSON change, among them the snapshot of "gpunodestatus" "node1"

  Scenario: health checks the leader, the webhook, the inventories, the chart's workloads and the GPU Leases
    Given every kwok node has the simulated inventory of 8 GPUs in two NVLink islands
    Given the GpuClaim "train" asking for 2 GPUs with policy "contiguous" on node "node2" is created
    And the pod "train-0" naming the GpuClaim "train" is created
    Then the GpuClaim "train" is Bound with GPUs "0,1" on node2
    And "kubectl gpu health" prints lines matching
      """
      OK   scheduler-leader   Lease gpu-scheduling/gpu-scheduler held by * (renewed *s ago, lease 15s)
      OK   webhook            a dry-run map pod in namespace {ns} got CUDA_VISIBLE_DEVICES=0
      OK   inventories        * nodes, * GPUs, all healthy, every node exists
      OK   chart-workloads    not deployed by the chart here (no Deployment or DaemonSet app.kubernetes.io/part-of=gpu-scheduling)
      OK   gpu-leases         * GPU Leases agree with the allocations of * bound claim pods
      """
    And "kubectl gpu health -o json" reports every check OK
    And "kubectl gpu health -o yaml" reports every check OK
    When GPU 0 of node4 is reported Unhealthy
    And a GpuNodeStatus is written for "ghost", a node that does not exist
    And the webhook is stopped
    And the scheduler is stopped
    And the Lease of GPU 1 of node2 is deleted
    And I run "kubectl gpu health --settle 2s"
    Then it exits with status 1 and prints lines matching
      """
      FAIL   scheduler-leader   Lease gpu-scheduling/gpu-scheduler is released: no leader
      FAIL   webhook            a dry-run map pod in namespace {ns} was refused: *failed calling webhook*
      FAIL   inventory/ghost    node ghost does not exist (a stale GpuNodeStatus)
      WARN   inventory/node4    1 of 8 GPUs unhealthy: 0
      FAIL   gpu-leases         pod {ns}/train-0 holds GPU 1 of node2 (gpu.scheduling/allocated), but no Lease names it
      """

  Scenario: An exec credential plugin that prints the administrator's client certificate reaches the API server
    Given every kwok node has the simulated inventory of 8 GPUs in two NVLink islands
    Given a kubeconfig whose user is an exec plugin printing the administrator's client certificate
    When I run "kubectl gpu nodes" with that kubeconfig
    Then it prints a table with the rows
      | NAME  | GPUS | FREE | UNHEALTHY | ISLANDS | UTIL | AGE |
      | node1 | 8    | *    | 0         | 2       | *    | *   |
    And the plugin ran once, was told the cluster's server and CA and that it is not interactive
    When I run "kubectl gpu claims -o name" with that kubeconfig
    Then it exits with status 0, prints nothing and says on stderr
      """
      No resources found in {ns} namespace.
      """
    When I run "kubectl gpu version" with that kubeconfig
    Then it prints lines matching
      """
      Client Version: kubectl-gpu * (Python *)
      Server Version: v*
      """

  Scenario: kubectl runs kubectl-gpu as its plugin "gpu"
    When I run kubectl "gpu version" with the console scripts on its PATH
    Then it prints lines matching
      """
      Client Version: kubectl-gpu * (Python *)
      Server Version: v*
      """
    When I run kubectl "plugin list" with the console scripts on its PATH
    Then it prints lines matching
      """
      */kubectl-gpu
      """
    When I run "kubectl gpu version -o json"
    Then it prints the server's own version as serverVersion

  Scenario: gangs shows a claim gang short of its members as Incomplete, then Running once all of it is bound
    Given every kwok node has the simulated inventory of 8 GPUs in two NVLink islands
    And the GpuClaim "team" asking for 1 GPUs for the gang "team" is created
    When the pods "team-0,team-1" naming the GpuClaim "team" with gang size 3 are created
    Then "kubectl gpu gangs" prints the table
      | GANG | MIN | BOUND | WAITING | TOPOLOGY | STATUS     | WHY                                   |
      | team | 3   | 0     | 2       | -        | Incomplete | waits for its members: fewer than 3 present |
    And "kubectl gpu gangs -A -o json" shows the gang "team" Incomplete with the message "gang team (min 3) waits for its members: fewer than 3 present"
    When the pods "team-2" naming the GpuClaim "team" with gang size 3 are created
    Then "kubectl gpu gangs -o wide" prints the table
      | GANG | MIN | BOUND | WAITING | TOPOLOGY | STATUS  | MEMBERS              | WHY |
      | team | 3   | 3     | 0       | -        | Running | team-0,team-1,team-2 | -   |

  @kind
  Scenario: On the deployed test-bed, nodes, claims and health see the chart's scheduler, webhook and agents
    Given the GpuClaim "train" asking for 2 GPUs with policy "contiguous" on node "node2" is created
    When the pod "train-0" naming the GpuClaim "train" is created
    Then the GpuClaim "train" is Bound with GPUs "0,1" on node2
    And "kubectl gpu nodes" prints a table with the rows
      | NAME  | GPUS | FREE | UNHEALTHY | ISLANDS | UTIL | AGE |
      | node1 | 8    | *    | 0         | 2       | *    | *   |
      | node2 | 8    | *    | 0         | 2       | *    | *   |
      | node3 | 8    | *    | 0         | 2       | *    | *   |
      | node4 | 8    | *    | 0         | 2       | *    | *   |
    And "kubectl gpu claims -A" prints a table with the rows
      | NAMESPACE | NAME  | PHASE | NODE  | GPUS | STRATEGY | AGE |
      | {ns}      | train | Bound | node2 | 0,1  | *        | *   |
    And "kubectl gpu health" prints lines matching
      """
      OK   scheduler-leader   Lease gpu-scheduling/gpu-scheduler held by *
      OK   webhook            a dry-run map pod in namespace {ns} got CUDA_VISIBLE_DEVICES=0
      OK   inventories        * nodes, * GPUs, all healthy, every node exists
      OK   deployment/{system}/{webhook}     2/2 ready
      OK   deployment/{system}/{scheduler}   2/2 ready
      OK   daemonset/{system}/{agent}        * ready
      OK   gpu-leases         * GPU Leases agree with the allocations of * bound claim pods
      """
    And "kubectl gpu health" reports only OK checks and exits with status 0
