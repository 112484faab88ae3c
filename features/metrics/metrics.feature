@metrics
Feature: A real Prometheus scrapes the scheduler, the webhook and the inventory agent, and the dashboard has data

  The control plane's gpu-scheduler (/metrics on its health port), gpu-webhook (/metrics over HTTPS, verified with
  the webhook's CA) and one gpu-inventory-agent for node4 are scraped every second by a Prometheus built here.

  Background:
    Given Prometheus scrapes the scheduler, the webhook and the inventory agent of node4

  Scenario: Prometheus scrapes the scheduler, the webhook and the inventory agent
    When Prometheus has scraped every target 3 times
    Then every target of Prometheus is healthy
    And "up" is 1 for the job "gpu-scheduler" with series named "gpu_scheduler_pods_seen_total,gpu_scheduler_leader"
    And "up" is 1 for the job "gpu-webhook" with series named "gpu_webhook_requests_total,gpu_webhook_patched_total"
    And "up" is 1 for the job "gpu-inventory-agent" with series named "gpu_inventory_agent_gpus"
    And Prometheus reports its version as the pinned one

  Scenario: Every panel of the dashboard returns data
    Given every kwok node has the simulated inventory of 8 GPUs in two NVLink islands
    And the GpuClaim "metrics" asking for 2 GPUs with policy "contiguous" on node "node4" is created
    When the pod "mapped-0" is created with the map "0=node3:2"
    And the pod "claimed-0" naming the GpuClaim "metrics" is created
    Then the pod "mapped-0" runs on node3 with CUDA_VISIBLE_DEVICES "2"
    And the GpuClaim "metrics" is Bound on node4
    When Prometheus has scraped every target 3 more times
    Then the dashboard has a stable uid and a Prometheus datasource variable
    And every query of every panel of the dashboard returns data
