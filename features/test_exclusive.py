"""On the control-plane tier: the KinD tier's scenarios tagged @exclusive (an uninstall of the release, kubelet
restarts, drains, GPUs they need free) are left out on a cluster the test-bed did not create, with a line saying
why and how to opt in, and run on a cluster carrying the test-bed's marker or with the opt-in.

The session's control plane stands in for "someone's existing cluster": the KinD tier's collection is run against
it in a child pytest (collection only: nothing of the KinD tier runs here), first unmarked, then with the opt-in,
then marked."""

from __future__ import annotations

import contextlib
import os
import pathlib
import subprocess
import sys

from features.conftest import EXCLUSIVE_ENV, MARKER_CONFIGMAP, MARKER_NAMESPACE
from features.support import Cluster
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import NotFound

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: One scenario of each kind the tag covers, and one that runs on any cluster.
EXCLUSIVE = (
    "test_uninstalling_the_release_removes_everything_it_made",  # the chart's uninstall
    "test_a_kubelet_restart_the_plugin_registers_again",  # kubelet restarts
    "test_the_webhook_runs_two_replicas_on_different_nodes",  # a drain
    "test_a_claim_pod_on_kind_is_given_gpus",  # free GPUs on node2
)
SHARED = "test_each_check_pod_of_the_deployed_statefulset_logs_its_node_and_its_gpu_ids"


def _collect_kind_tier(kubeconfig: pathlib.Path, opt_in: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != EXCLUSIVE_ENV}
    env.update(GPU_TEST_KUBECONFIG=str(kubeconfig))
    if opt_in:
        env[EXCLUSIVE_ENV] = opt_in
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "features",
            "--tier",
            "kind",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def _assert_exclusive(output: str, present: bool) -> None:
    for name in EXCLUSIVE:
        assert (name in output) == present, f"{name} {'missing from' if present else 'still in'} the collection"
    assert SHARED in output


def test_exclusive_scenarios_run_only_on_a_marked_cluster_or_when_asked(cluster: Cluster) -> None:
    assert cluster.cp is not None
    kubeconfig = cluster.cp.kubeconfig
    marker = paths.config_map(MARKER_NAMESPACE, MARKER_CONFIGMAP)
    with contextlib.suppress(NotFound):
        cluster.api.delete(marker)

    unmarked = _collect_kind_tier(kubeconfig).stdout
    _assert_exclusive(unmarked, present=False)
    assert (
        f"@exclusive scenario(s) deselected: this cluster has no ConfigMap {MARKER_NAMESPACE}/{MARKER_CONFIGMAP}, "
        f"so the test-bed did not create it; {EXCLUSIVE_ENV}=true (site.yml: -e testbed_exclusive_scenarios=true) "
        "runs them"
    ) in unmarked

    _assert_exclusive(_collect_kind_tier(kubeconfig, opt_in="true").stdout, present=True)
    _assert_exclusive(_collect_kind_tier(kubeconfig, opt_in="false").stdout, present=False)

    cluster.api.create(
        f"/api/v1/namespaces/{MARKER_NAMESPACE}/configmaps",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": MARKER_CONFIGMAP}, "data": {"cluster": "t"}},
    )
    try:
        marked = _collect_kind_tier(kubeconfig).stdout
        _assert_exclusive(marked, present=True)
        assert "@exclusive scenario(s) deselected" not in marked
    finally:
        cluster.api.delete(marker)
