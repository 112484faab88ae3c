"""On the control-plane tier: the clean-up the KinD tier runs first removes the scenario namespaces an interrupted
session left behind (their pods would still hold GPUs), and nothing else."""

from __future__ import annotations

import uuid

from features.conftest import SCENARIO_LABEL, drop_stale_scenario_namespaces
from features.support import Cluster
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import NotFound


def _namespace(cluster: Cluster, labels: dict[str, str]) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    cluster.api.create(
        paths.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
    )
    return name


def test_stale_scenario_namespaces_are_dropped_and_others_kept(cluster: Cluster) -> None:
    stale = _namespace(cluster, {SCENARIO_LABEL: "true"})
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "left-0"},
        "spec": {"schedulerName": "nobody", "containers": [{"name": "c", "image": "x"}]},
    }
    cluster.api.create(paths.pods(stale), pod)
    other = _namespace(cluster, {"app": "kept"})
    try:
        drop_stale_scenario_namespaces(cluster.api, timeout=90)
        try:
            cluster.api.get(paths.namespace(stale))
        except NotFound:
            pass
        else:
            raise AssertionError(f"namespace {stale} is still there")
        assert cluster.api.get(paths.namespace(other))["metadata"]["name"] == other
    finally:
        cluster.api.delete(paths.namespace(other))
