"""A map pod's index from its workload controller (workloads.feature, control-plane tier): an Indexed Job run by the
real Job controller, and pods labelled as the LeaderWorkerSet, JobSet and training-operator controllers label them
(those controllers are not run: the pods are created with their labels). The index rules are gpumap.pod_index's."""

from __future__ import annotations

import re
from typing import Any

from pytest_bdd import given, scenarios, then, when

from features.support import JOB_NAME_LABEL, World, assert_cuda, indexed_job_body, pod_body, step
from gpu_scheduling import constants, gpumap
from gpu_scheduling.kube import paths
from harness.wait import wait_for

RAN = ("Running", "Succeeded")  # kwok completes the pods a Job owns as soon as they run

scenarios("workloads.feature")


@given("the map", target_fixture="gpu_map")
def docstring_map(docstring: str) -> str:
    return docstring


# ---- an Indexed Job, run by the Job controller ------------------------------------------------------------------


@when(step('the Indexed Job "{name:q}" of {pods:d} parallel pods is created with that map'))
def create_indexed_job(world: World, gpu_map: str, name: str, pods: int) -> None:
    world.api.create(paths.jobs(world.namespace), indexed_job_body(name, pods, {constants.MAP_ANNOTATION: gpu_map}))


def job_pods_ran(world: World, job: str, pods: int) -> dict[int, dict[str, Any]]:
    """The Job's pods by completion index (read from the label the Job controller set), once all `pods` have run
    (kwok completes a Job's pods at once: Running, then Succeeded)."""

    def all_ran() -> dict[int, dict[str, Any]] | None:
        found = [
            p
            for p in world.api.pods(world.namespace, labelSelector=f"{JOB_NAME_LABEL}={job}")
            if not p["metadata"].get("deletionTimestamp")
        ]
        if len(found) != pods or any(p["status"].get("phase") not in RAN for p in found):
            return None
        return {int(p["metadata"]["labels"][constants.JOB_COMPLETION_INDEX_KEY]): p for p in found}

    return wait_for(f"the {pods} pods of Job {job} Running or Succeeded", all_ran, timeout=90)


@then(
    step(
        'the Job controller\'s {pods:d} pods of "{name:q}" ran, each on the node of its completion index with its '
        "GPU ids"
    )
)
def job_pods_on_mapped_nodes(world: World, gpu_map: str, name: str, pods: int) -> None:
    by_index = job_pods_ran(world, name, pods)
    assert sorted(by_index) == list(range(pods)), sorted(by_index)
    entries = gpumap.parse(gpu_map)
    for index, pod in by_index.items():
        entry = entries.entry_for(index)
        assert pod["spec"]["nodeName"] == entry.node, (pod["metadata"]["name"], pod["spec"]["nodeName"], entry)
        assert_cuda(pod, entry.cuda_visible_devices)


@then(
    step(
        'the Job\'s pod of completion index {index:d} is named "{name}-{named:d}-<random>" and ran on {node} '
        'with CUDA_VISIBLE_DEVICES "{devices:q}"'
    )
)
def job_pod(world: World, name: str, index: int, named: int, node: str, devices: str) -> None:
    pods = [
        p
        for p in world.api.pods(world.namespace, labelSelector=f"{JOB_NAME_LABEL}={name}")
        if p["metadata"]["labels"].get(constants.JOB_COMPLETION_INDEX_KEY) == str(index)
    ]
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    (pod,) = pods
    # The name ends in a random suffix, not the index: the index must have come from the label.
    pod_name = pod["metadata"]["name"]
    assert named == index and re.fullmatch(rf"{re.escape(name)}-{index}-[a-z0-9]{{5}}", pod_name), pod_name
    assert pod["spec"]["nodeName"] == node and pod["status"].get("phase") in RAN, (
        pod["spec"].get("nodeName"),
        pod["status"].get("phase"),
    )
    assert_cuda(pod, devices)


# ---- pods labelled as other controllers label them ---------------------------------------------------------------


def labelled_pod(name: str, gpu_map: str, labels: dict[str, str], annotations: dict[str, str] | None = None) -> dict:
    body = pod_body(name, gpu_map=gpu_map)
    body["metadata"]["labels"] = labels
    body["metadata"]["annotations"].update(annotations or {})
    return body


def leaderworkerset_pods(name: str, groups: int, size: int, gpu_map: str) -> list[dict[str, Any]]:
    """As the LeaderWorkerSet controller makes them: the leader of group g is pod g of the leader StatefulSet
    `<name>` (`<name>-<g>`), its workers pods 1..size-1 of the StatefulSet `<name>-<g>`; every pod carries its
    StatefulSet's pod-index label too, which is *not* its place in the set."""
    pods = []
    for group in range(groups):
        for worker in range(size):
            pod_name = f"{name}-{group}" if worker == 0 else f"{name}-{group}-{worker}"
            labels = {
                "leaderworkerset.sigs.k8s.io/name": name,
                constants.LWS_GROUP_INDEX_LABEL: str(group),
                constants.LWS_WORKER_INDEX_LABEL: str(worker),
                constants.POD_INDEX_LABEL: str(group if worker == 0 else worker),
                "statefulset.kubernetes.io/pod-name": pod_name,
            }
            pods.append(labelled_pod(pod_name, gpu_map, labels, {constants.LWS_SIZE_ANNOTATION: str(size)}))
    return pods


def jobset_pod(name: str, job: int, jobs: int, completion: int, gpu_map: str) -> dict[str, Any]:
    """A pod of child Job `job` (replicated Job `workers`) of a JobSet of `jobs` child Jobs, as the JobSet and Job
    controllers label it: `<jobset>-workers-<job>-<completion index>-<random>`."""
    labels = {
        "jobset.sigs.k8s.io/jobset-name": name,
        "jobset.sigs.k8s.io/replicatedjob-name": "workers",
        "jobset.sigs.k8s.io/job-index": str(job),
        constants.JOBSET_GLOBAL_INDEX_LABEL: str(job),
        constants.JOBSET_GLOBAL_REPLICAS_LABEL: str(jobs),
        JOB_NAME_LABEL: f"{name}-workers-{job}",
        constants.JOB_COMPLETION_INDEX_KEY: str(completion),
    }
    pod_name = f"{name}-workers-{job}-{completion}-x7k4p"
    return labelled_pod(pod_name, gpu_map, labels, {constants.JOB_COMPLETION_INDEX_KEY: str(completion)})


def pytorchjob_worker(name: str, index: int, gpu_map: str) -> dict[str, Any]:
    labels = {
        "training.kubeflow.org/job-name": name,
        "training.kubeflow.org/operator-name": "pytorchjob-controller",
        "training.kubeflow.org/replica-type": "worker",
        constants.TRAINING_REPLICA_INDEX_LABEL: str(index),
    }
    return labelled_pod(f"{name}-worker-{index}", gpu_map, labels)


def create_all(world: World, bodies: list[dict[str, Any]]) -> None:
    for body in bodies:
        world.api.create(paths.pods(world.namespace), body)


@when(
    step(
        'the pods of the LeaderWorkerSet "{name:q}" of {groups:d} groups of {size:d}, labelled as its controller '
        "labels them, are created with that map"
    )
)
def create_leaderworkerset_pods(world: World, gpu_map: str, name: str, groups: int, size: int) -> None:
    create_all(world, leaderworkerset_pods(name, groups, size, gpu_map))


@when(
    step(
        'the pods of the JobSet "{name:q}" of {jobs:d} one-pod Jobs, labelled as its controller labels them, are '
        "created with that map"
    )
)
def create_jobset_pods(world: World, gpu_map: str, name: str, jobs: int) -> None:
    create_all(world, [jobset_pod(name, job, jobs, 0, gpu_map) for job in range(jobs)])


@when(
    step(
        'the pod "{name}-workers-{job:d}-{completion:d}-x7k4p" of a JobSet whose Jobs run {pods:d} pods each is '
        "created with that map"
    )
)
def create_ambiguous_jobset_pod(world: World, gpu_map: str, name: str, job: int, completion: int, pods: int) -> None:
    assert completion < pods
    body = jobset_pod(name, job, len(gpumap.parse(gpu_map)), completion, gpu_map)
    world.attempt(lambda: world.api.create(paths.pods(world.namespace), body))


@when(
    step(
        'the worker pods of the PyTorchJob "{name:q}" of {workers:d} workers, labelled as the training operator '
        "labels them, are created with that map"
    )
)
def create_pytorchjob_workers(world: World, gpu_map: str, name: str, workers: int) -> None:
    create_all(world, [pytorchjob_worker(name, index, gpu_map) for index in range(workers)])
