@board
Feature: gpu-board: who holds which GPU, live in a real headless Chromium, with a create form that is same-origin only

  On the control-plane tier each scenario starts the real gpu-board console script against the session's apiserver
  (TLS with a certificate of its own, creation allowed in the scenario's namespace only) beside the real
  gpu-scheduler and gpu-webhook, and opens its page in Debian's headless Chromium driven by Selenium, which trusts
  exactly the board's key. The page is read through its DOM hooks: GPU cells [data-node][data-gpu] with their
  data-holders and data-flags, one [data-pod] block per holder, #board[data-version]. Whatever the page logs to
  its console as an error fails the scenario. On the KinD tier the deployed board is read through the apiserver's
  service proxy.

  Scenario: The take-home's five pods appear on node1..node4 with their GPU ids, on the page and in /api/state
    Given the take-home map
    And the StatefulSet "gpu-scheduler-check" with 5 replicas is created with that map
    And all 5 pods run on their mapped nodes
    And every kwok node's GpuNodeStatus lists 8 GPUs and the pods using them, as the inventory agent writes it
    And gpu-board runs with creation allowed in the scenario's namespace
    When the board is opened in Chromium
    Then the page and /api/state show pod 0 on node1 with GPUs "0,1"
    And the page and /api/state show pod 1 on node2 with GPUs "2"
    And the page and /api/state show pod 2 on node3 with GPUs "0,1,2"
    And the page and /api/state show pod 3 on node4 with GPUs "3"
    And the page and /api/state show pod 4 on node4 with GPUs "3"
    And node4's GPU 3 is split into the two blocks of pods 3 and 4
    And no GPU holding a pod of the StatefulSet is flagged
    And a screenshot of the board is saved
    And the page logged no error

  Scenario: A claim pod created by another client appears without a reload
    Given every kwok node has the simulated inventory of 8 GPUs in two NVLink islands
    And gpu-board runs with creation allowed in the scenario's namespace
    And the board is opened in Chromium
    And the page is marked and its board version noted
    And the GpuClaim "train" asking for 2 GPUs with policy "contiguous" on node "node2" is created
    When the pod "train-0" naming the GpuClaim "train" is created
    Then the pod "train-0" is bound to the GPUs its GpuClaim "train" was allocated
    And the page shows the pod "train-0" on the GPUs of its GpuClaim "train"
    And the page was not reloaded and its board version increased
    And the page logged no error

  Scenario: A claim submitted through the form is previewed, lands, shows its block and is deleted from the page
    Given every kwok node has the simulated inventory of 8 GPUs in two NVLink islands
    And gpu-board runs with creation allowed in the scenario's namespace
    And the board is opened in Chromium
    When the form is filled with a claim "demo" of 2 GPUs with policy "contiguous"
    And the preview button is clicked
    Then the preview shows the dry-run GpuClaim "demo" and Pod "demo"
    And there is no GpuClaim "demo" and no pod "demo"
    When the create button is clicked
    Then the pod "demo" is bound to the GPUs its GpuClaim "demo" was allocated
    And the page shows the pod "demo" on the GPUs of its GpuClaim "demo"
    And the page lists the created workload "demo"
    When the workload "demo" is deleted with its button in the created list
    Then there is no GpuClaim "demo" and no pod "demo"
    And the page no longer shows the pod "demo"
    And the page logged no error

  Scenario: Creation is refused across origins, and off on a board started without --allow-create
    Given gpu-board runs with creation allowed in the scenario's namespace
    When a claim "forged" is posted to /api/create with the Origin "https://evil.example"
    Then the board answers 403 with a JSON error
    When a claim "forged" is posted to /api/create without an Origin
    Then the board answers 403 with a JSON error
    When a claim "forged" is posted to /api/preview with the board's own Origin
    Then the board answers 200
    And there is no GpuClaim "forged" and no pod "forged"
    Given a second gpu-board runs without --allow-create
    When a claim "forged" is posted to /api/create with the board's own Origin
    Then the board answers 403 with a JSON error saying "creation is off"
    And /api/config says creation is off
    When the board is opened in Chromium
    Then the page shows that creation is off
    And there is no GpuClaim "forged" and no pod "forged"
    And the page logged no error

  Scenario: A GPU Lease naming no pod is flagged as a lease without an allocation
    Given every kwok node has the simulated inventory of 8 GPUs in two NVLink islands
    And gpu-board runs with creation allowed in the scenario's namespace
    And the board is opened in Chromium
    When the scheduler is stopped
    And a GPU Lease for node3 GPU 6 naming a pod uid that no pod has is created by hand
    Then the page flags node3 GPU 6 with "lease-without-allocation"
    And /api/state flags node3 GPU 6 with "lease-without-allocation"
    And the page logged no error

  Scenario: A GPU the kubelet gave to a pod that gpu-scheduler did not give it is flagged
    Given every kwok node has the simulated inventory of 8 GPUs in two NVLink islands
    And gpu-board runs with creation allowed in the scenario's namespace
    And the board is opened in Chromium
    When node2's GpuNodeStatus says the kubelet gave a device of GPU 5 to the pod "stranger"
    Then the page flags node2 GPU 5 with "kubelet-disagrees"
    And /api/state flags node2 GPU 5 "kubelet-disagrees", naming the pod "stranger"
    And the page logged no error

  @kind
  Scenario: The deployed board, read through the apiserver's service proxy, shows the take-home's five pods
    Given the deployed take-home StatefulSet "gpu-scheduler-check" in namespace "default"
    When the deployed board's /api/state is read through the apiserver's service proxy
    Then /api/state shows pod 0 on node1 with GPUs "0,1"
    And /api/state shows pod 1 on node2 with GPUs "2"
    And /api/state shows pod 2 on node3 with GPUs "0,1,2"
    And /api/state shows pod 3 on node4 with GPUs "3"
    And /api/state shows pod 4 on node4 with GPUs "3"
    And /api/state shows that the kubelet gave node4's GPU 3 to pods 3 and 4, and flags none of the five pods' GPUs
