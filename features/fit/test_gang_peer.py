"""kube-scheduler of the pinned version gangs: the benchmark's W3 compares gpu-scheduler with it as a gang scheduler,
so this proves, on a control plane of its own (features/fit/plane.py: kube-scheduler with the plane's feature gates,
its default profile), what every W3 run of the benchmark proves again after its timed window (bench/gangproof.py):
a PodGroup of gang minCount 4 with 3 members created stays unbound while a pod of no gang created with them is
bound, and all 4 are bound once the fourth member is created.

Why the default profile gangs at 1.37 (k8s.io/kubernetes v1.37.2): no GangScheduling feature gate exists there;
GenericWorkload (beta, off by default) adds the GangScheduling plugin to the default profile
(pkg/scheduler/apis/config/v1/default_plugins.go, applyFeatureGates) and queues a pod with spec.schedulingGroup as
part of its pod group; TopologyAwareWorkloadScheduling (alpha, needs GenericWorkload) adds the placement generator
and PodGroupPodsCount. The plane passes both to the apiserver, the controller manager and kube-scheduler
(harness.controlplane.workload_api_flags), on 1.37 on only: the test is marked workload_api, left out on an older
minor.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from bench import gangproof, workload
from features.fit.plane import KUBE_SCHEDULER, Plane, running_plane
from gpu_scheduling.kube import paths


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    with running_plane(pathlib.Path(tmp_path_factory.mktemp("gang-peer"))) as running:
        yield running


@pytest.mark.workload_api
def test_kube_scheduler_holds_a_podgroup_short_of_one_member_and_binds_it_whole(plane: Plane) -> None:
    proof = gangproof.prove(plane.api, workload.EXTENDED, KUBE_SCHEDULER, hold=3.0, timeout=30.0)
    assert proof.problems == []
    assert proof.short_bound == 0 and proof.alone_bound_ms is not None and proof.completed_bound_ms is not None
    # the gang really was Kubernetes' own: its PodGroup says kube-scheduler placed it
    (group,) = plane.api.get(paths.pod_groups(gangproof.NAMESPACE))["items"]
    conditions = {c["type"]: c["status"] for c in group.get("status", {}).get("conditions") or []}
    assert conditions.get(workload.POD_GROUP_SCHEDULED) == "True", group.get("status")
    # and its framework found the plugin (pkg/scheduler/framework/runtime/framework.go logs this error otherwise)
    assert "GangScheduling plugin is not set" not in plane.scheduler.log_path.read_text()
