"""Shared fixtures and steps of the Gherkin scenarios.

One control plane per test session (real etcd, kube-apiserver, kube-controller-manager, kwok with Ready fake
nodes node1..node4) with gpu-webhook and gpu-scheduler running as real processes; every scenario works in its
own namespace and undoes what it changed on shared nodes.

With GPU_TEST_KUBECONFIG set, the scenarios run instead against that cluster (the KinD test-bed, where the
scheduler and the webhook are deployed and kubelets run real containers); select the scenarios that apply
there with `-m "takehome or errors or kind"`. Pod logs are then checked too.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import pathlib
import time
import uuid
from collections import Counter
from typing import Any

import parse
import pytest
from pytest_bdd import given, parsers, then, when

from gpu_scheduling import constants, gpumap
from gpu_scheduling.claims import objects
from tests.harness.api import Api, ApiError, wait_for
from tests.harness.components import SCRIPTS, Components
from tests.harness.controlplane import ControlPlane
from features.steps_faults import *  # noqa: F401,F403
from features.steps_leader import *  # noqa: F401,F403
from features.steps_security import *  # noqa: F401,F403

@parse.with_pattern(r'[^"]*')
def _quoted(text: str) -> str:
    return text


def step(text: str) -> parsers.StepParser:
    """A step pattern whose `{x:q}` fields match a quoted value that holds no quote of its own."""
    return parsers.parse(text, extra_types={"q": _quoted})


TAKE_HOME_MAP = "0=node1:0,1\n1=node2:2\n2=node3:0,1,2\n3=node4:3\n4=node4:3\n"
WORKER_NODES = ("node1", "node2", "node3", "node4")
CHECK_IMAGE = os.environ.get("GPU_TEST_CHECK_IMAGE", "gpu-scheduler-check:dev")
EXTERNAL_KUBECONFIG = os.environ.get("GPU_TEST_KUBECONFIG")


@dataclasses.dataclass
class Cluster:
    api: Api
    cp: ControlPlane | None = None  # None on an external cluster
    components: Components | None = None

    @property
    def real_kubelets(self) -> bool:
        return self.cp is None


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Cluster:
    if EXTERNAL_KUBECONFIG:
        yield Cluster(Api(EXTERNAL_KUBECONFIG))
        return
    workdir = pathlib.Path(os.environ.get("GPU_TEST_WORKDIR") or tmp_path_factory.mktemp("controlplane"))
    cp = ControlPlane(workdir).start()
    print(f"\ncontrol plane up in {cp.elapsed:.1f}s at {cp.server}; logs in {cp.logs}")
    components = None
    try:
        for name in WORKER_NODES:
            cp.add_node(name)
        components = Components(cp, fault_proxy=True, restart_on_failure=True).start()
        assert cp.api is not None
        yield Cluster(cp.api, cp, components)
    finally:
        if components is not None:
            components.stop()
        cp.stop()


@dataclasses.dataclass
class World:
    """What one scenario has done so far, handed from step to step."""

    api: Api
    cluster: Cluster
    namespace: str
    gpu_map: str = ""
    statefulset: str = ""
    error: ApiError | None = None
    snapshot: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)
    restarted_at: float = 0.0
    added_nodes: list[str] = dataclasses.field(default_factory=list)
    keep_namespace: bool = False  # the scenario looked at a namespace it does not own
    node_undo: list[tuple[str, Any]] = dataclasses.field(default_factory=list)


@pytest.fixture
def world(cluster: Cluster) -> World:
    api = cluster.api
    namespace = f"s-{uuid.uuid4().hex[:8]}"
    api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    wait_for("the namespace's default ServiceAccount",
             lambda: api.get(f"/api/v1/namespaces/{namespace}/serviceaccounts/default"), timeout=30)
    w = World(api, cluster, namespace)
    yield w
    if w.keep_namespace:
        w.namespace = namespace
    # Undo what this scenario changed on shared things, then drop its namespace.
    comps = cluster.components
    if comps is not None and not comps.webhook.running:
        comps.start_webhook()
    if comps is not None and not comps.scheduler.running:
        comps.start_scheduler()
    for node, patch in reversed(w.node_undo):
        api.patch(f"/api/v1/nodes/{node}", patch, kind="strategic")
    api.delete(f"/apis/apps/v1/namespaces/{namespace}/statefulsets")
    api.delete(f"/api/v1/namespaces/{namespace}/pods", gracePeriodSeconds="0")
    for node in w.added_nodes:
        api.delete(f"/api/v1/nodes/{node}")
    api.delete(f"/api/v1/namespaces/{namespace}")
    if cluster.cp is not None:
        cluster.cp.check_alive()


# ---- objects ---------------------------------------------------------------------------------------------------

def containers(image: str = CHECK_IMAGE) -> dict[str, Any]:
    """Two containers and an init container, so 'every container' is really checked."""
    common = {
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "env": [{"name": constants.NODE_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "readOnlyRootFilesystem": True,
                            "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    return {
        "initContainers": [dict(common, name="init", command=["true"])],
        "containers": [dict(common, name="check"), dict(common, name="sidecar")],
    }


def pod_body(name: str, *, gpu_map: str | None, scheduler: str = constants.DEFAULT_SCHEDULER_NAME,
             generate_name: bool = False, tolerations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"generateName": name} if generate_name else {"name": name}
    if gpu_map is not None:
        meta["annotations"] = {constants.MAP_ANNOTATION: gpu_map}
    spec = {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0, **containers()}
    if tolerations:
        spec["tolerations"] = tolerations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def statefulset_body(name: str, replicas: int, gpu_map: str, parallel: bool = False) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "serviceName": name,
            "replicas": replicas,
            "podManagementPolicy": "Parallel" if parallel else "OrderedReady",
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels, "annotations": {constants.MAP_ANNOTATION: gpu_map}},
                "spec": {"schedulerName": constants.DEFAULT_SCHEDULER_NAME, "terminationGracePeriodSeconds": 0,
                         **containers()},
            },
        },
    }


# ---- reading state ---------------------------------------------------------------------------------------------

def get_pod(w: World, name: str) -> dict[str, Any]:
    return w.api.get(f"/api/v1/namespaces/{w.namespace}/pods/{name}")


def running_on(w: World, name: str, node: str) -> dict[str, Any] | None:
    pod = get_pod(w, name)
    if pod["spec"].get("nodeName") == node and pod["status"].get("phase") == "Running":
        return pod
    return None


def cuda_values(pod: dict[str, Any]) -> list[list[str | None]]:
    """CUDA_VISIBLE_DEVICES entries of every init container and container, in order."""
    spec = pod["spec"]
    return [
        [e.get("value") for e in c.get("env") or [] if e["name"] == constants.CUDA_ENV]
        for c in (spec.get("initContainers") or []) + spec["containers"]
    ]


def assert_cuda(pod: dict[str, Any], expected: str) -> None:
    values = cuda_values(pod)
    assert values and all(v == [expected] for v in values), (
        f"pod {pod['metadata']['name']}: CUDA_VISIBLE_DEVICES per container is {values}, expected [{expected!r}] "
        "in every one")


def events_for(w: World, kind: str, name: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in w.api.events(w.namespace)
            if e["involvedObject"].get("kind") == kind and e["involvedObject"].get("name") == name
            and e.get("reason") == reason]


# ---- Given -----------------------------------------------------------------------------------------------------

@given("the take-home map")
def take_home_map(world: World) -> None:
    world.gpu_map = TAKE_HOME_MAP


@given(step('the StatefulSet "{name:q}" with {replicas:d} replicas is created with that map'))
@when(step('the StatefulSet "{name:q}" with {replicas:d} replicas is created with that map'))
def create_statefulset(world: World, name: str, replicas: int) -> None:
    world.api.create(f"/apis/apps/v1/namespaces/{world.namespace}/statefulsets",
                     statefulset_body(name, replicas, world.gpu_map))
    world.statefulset = name


@given(step('a StatefulSet "{name:q}" of {replicas:d} parallel replicas mapped round-robin onto node1..node4'))
def create_round_robin_statefulset(world: World, name: str, replicas: int) -> None:
    # Map more indices than replicas, so that the later scale-up is covered by the same map.
    entries = {i: gpumap.Entry(i, WORKER_NODES[i % 4], (i % 8,)) for i in range(100)}
    world.gpu_map = gpumap.encode(entries)
    world.api.create(f"/apis/apps/v1/namespaces/{world.namespace}/statefulsets",
                     statefulset_body(name, replicas, world.gpu_map, parallel=True))
    world.statefulset = name


@given("all its pods run on their mapped nodes")
def all_pods_on_mapped_nodes(world: World) -> None:
    sts = world.api.get(f"/apis/apps/v1/namespaces/{world.namespace}/statefulsets/{world.statefulset}")
    check_all_pods_on_mapped_nodes(world, sts["spec"]["replicas"])


@given(step('the node "{node:q}" is cordoned'))
def cordon(world: World, node: str) -> None:
    world.api.patch(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": True}})
    world.node_undo.append((node, {"spec": {"unschedulable": None}}))


@given(step('the node "{node:q}" has the taint "{key}={value}:{effect}"'))
def taint(world: World, node: str, key: str, value: str, effect: str) -> None:
    current = world.api.get(f"/api/v1/nodes/{node}")["spec"].get("taints") or []
    world.api.patch(f"/api/v1/nodes/{node}",
                    {"spec": {"taints": current + [{"key": key, "value": value, "effect": effect}]}}, kind="merge")
    world.node_undo.append((node, {"spec": {"taints": current or None}}))


@given("the webhook is down")
def webhook_down(world: World) -> None:
    world.cluster.components.webhook.stop()


# ---- When ------------------------------------------------------------------------------------------------------

def try_create_pod(world: World, body: dict[str, Any]) -> None:
    try:
        world.api.create(f"/api/v1/namespaces/{world.namespace}/pods", body)
        world.error = None
    except ApiError as exc:
        world.error = exc


@when(step('the pod "{name:q}" is created with the map'))
def create_pod_with_docstring_map(world: World, name: str, docstring: str) -> None:
    try_create_pod(world, pod_body(name, gpu_map=docstring))


@when(step('the pod "{name:q}" is created with the map "{gpu_map:q}"'))
def create_pod_with_map(world: World, name: str, gpu_map: str) -> None:
    try_create_pod(world, pod_body(name, gpu_map=gpu_map))


@when(step('the pod "{name:q}" tolerating "{key:q}" is created with the map "{gpu_map:q}"'))
def create_tolerating_pod(world: World, name: str, key: str, gpu_map: str) -> None:
    try_create_pod(world, pod_body(name, gpu_map=gpu_map, tolerations=[{"key": key, "operator": "Exists"}]))


@when(step('the pod "{name:q}" for scheduler "{scheduler:q}" is created with the map "{gpu_map:q}"'))
def create_pod_for_scheduler(world: World, name: str, scheduler: str, gpu_map: str) -> None:
    try_create_pod(world, pod_body(name, gpu_map=gpu_map, scheduler=scheduler))
    assert world.error is None, world.error


@when(step('the pod "{name:q}" for scheduler "{scheduler:q}" is created without a map'))
def create_pod_without_map(world: World, name: str, scheduler: str) -> None:
    try_create_pod(world, pod_body(name, gpu_map=None, scheduler=scheduler))
    assert world.error is None, world.error


@when(step('a pod with generateName "{prefix:q}" is created with the take-home map'))
def create_generate_name_pod(world: World, prefix: str) -> None:
    try_create_pod(world, pod_body(prefix, gpu_map=TAKE_HOME_MAP, generate_name=True))


@when(step("the StatefulSet is scaled to {replicas:d} replicas"))
def scale(world: World, replicas: int) -> None:
    world.snapshot = {p["metadata"]["name"]: (p["metadata"]["uid"], p["spec"].get("nodeName", ""))
                      for p in world.api.pods(world.namespace)}
    world.api.patch(f"/apis/apps/v1/namespaces/{world.namespace}/statefulsets/{world.statefulset}",
                    {"spec": {"replicas": replicas}})


@when(step("the StatefulSet is scaled to {replicas:d} replicas while the scheduler is down"))
def scale_while_down(world: World, replicas: int) -> None:
    assert not world.cluster.components.scheduler.running
    scale(world, replicas)
    wait_for(f"{replicas} pods to exist", lambda: len(world.api.pods(world.namespace)) >= replicas, timeout=60)


@when(step('the node "{node:q}" joins the cluster'))
def node_joins(world: World, node: str) -> None:
    assert world.cluster.cp is not None
    world.cluster.cp.add_node(node)
    world.added_nodes.append(node)


@when(step('the node "{node:q}" is uncordoned'))
def uncordon(world: World, node: str) -> None:
    world.api.patch(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": None}})


@when(step("the scheduler is killed after at least {count:d} of its pods are bound"))
def kill_scheduler(world: World, count: int) -> None:
    wait_for(f"{count} bound pods",
             lambda: sum(1 for p in world.api.pods(world.namespace) if p["spec"].get("nodeName")) >= count,
             timeout=60, interval=0.05)
    world.cluster.components.scheduler.kill()


@when("the scheduler is started again")
def restart_scheduler(world: World) -> None:
    world.restarted_at = time.time()
    world.cluster.components.start_scheduler()


# ---- Then ------------------------------------------------------------------------------------------------------

@then(step('pod {index:d} runs on {node} with CUDA_VISIBLE_DEVICES "{devices:q}"'))
def statefulset_pod_runs(world: World, index: int, node: str, devices: str) -> None:
    name = f"{world.statefulset}-{index}"
    pod = wait_for(f"pod {name} Running on {node}", lambda: running_on(world, name, node), timeout=180)
    assert_cuda(pod, devices)
    if world.cluster.real_kubelets:
        logs_show(world, name, node, devices)


def logs_show(world: World, name: str, node: str, devices: str, iterations: int = 2) -> None:
    """The check container's log holds `iterations` complete reports naming this node and these GPUs."""
    report = f"Node Name: {node}\n{constants.CUDA_ENV}: {devices}\n---\n"

    def enough() -> str | None:
        text = world.api.text(f"/api/v1/namespaces/{world.namespace}/pods/{name}/log", container="check")
        return text if text.count(report) >= iterations else None

    text = wait_for(f"{iterations} reports in the log of {name}", enough, timeout=60, interval=1)
    foreign = [line for line in text.splitlines() if line.startswith(("Node Name:", constants.CUDA_ENV))
               and line not in report]
    assert not foreign, f"{name} logged other values: {foreign[:4]}"


@given(step('the deployed StatefulSet "{name:q}" in namespace "{namespace:q}"'))
def deployed_statefulset(world: World, name: str, namespace: str) -> None:
    world.namespace, world.statefulset = namespace, name
    world.keep_namespace = True


@then(step("pod {index:d} logs its node {node} and CUDA_VISIBLE_DEVICES \"{devices:q}\" at least twice"))
def pod_logs(world: World, index: int, node: str, devices: str) -> None:
    named_pod_logs(world, f"{world.statefulset}-{index}", node, devices)


@then(step('the pod "{name:q}" logs its node {node} and CUDA_VISIBLE_DEVICES "{devices:q}" at least twice'))
def named_pod_logs(world: World, name: str, node: str, devices: str) -> None:
    wait_for(f"pod {name} Running on {node}", lambda: running_on(world, name, node), timeout=180)
    logs_show(world, name, node, devices)


@then(step('the pod "{name:q}" runs on {node} with CUDA_VISIBLE_DEVICES "{devices:q}"'))
def pod_runs(world: World, name: str, node: str, devices: str) -> None:
    pod = wait_for(f"pod {name} Running on {node}", lambda: running_on(world, name, node), timeout=60)
    assert_cuda(pod, devices)


def check_all_pods_on_mapped_nodes(world: World, replicas: int) -> None:
    gpu_map = gpumap.parse(world.gpu_map)

    def all_running() -> list[dict[str, Any]] | None:
        pods = [p for p in world.api.pods(world.namespace) if p["metadata"]["name"].startswith(world.statefulset)]
        if len(pods) == replicas and all(p["status"].get("phase") == "Running" for p in pods):
            return pods
        return None

    pods = wait_for(f"{replicas} pods Running", all_running, timeout=120)
    for pod in pods:
        entry = gpu_map.entry_for(gpumap.pod_index(pod["metadata"]))
        assert pod["spec"]["nodeName"] == entry.node, (pod["metadata"]["name"], pod["spec"]["nodeName"], entry)
        assert_cuda(pod, entry.cuda_visible_devices)


@then(step("all {replicas:d} pods run on their mapped nodes"))
def all_n_pods_on_mapped_nodes(world: World, replicas: int) -> None:
    check_all_pods_on_mapped_nodes(world, replicas)


def bind_counts(world: World, codes: range = range(200, 300)) -> Counter[str]:
    """Binding requests per pod of this scenario's namespace whose response code is in `codes`, as the
    apiserver's audit log recorded them."""
    assert world.cluster.cp is not None, "binding counts come from the test control plane's audit log"
    return Counter(b["name"] for b in world.cluster.cp.bindings()
                   if b["namespace"] == world.namespace and b["code"] in codes)


@then("every pod was bound exactly once")
def bound_exactly_once(world: World) -> None:
    # A pod bound twice would show as a second successful binding, or as an attempt the apiserver refused with
    # 409 because the pod was already bound. A bind cut off by the killed scheduler is answered 504 whether or
    # not it reached etcd, so such a pod may have no successful binding in the log, but never two.
    pods = [p["metadata"]["name"] for p in world.api.pods(world.namespace)]
    successes = bind_counts(world)
    cut_off = bind_counts(world, range(504, 505))
    assert pods
    for name in pods:
        assert successes[name] == 1 or (successes[name] == 0 and cut_off[name] >= 1), (
            f"{name}: {successes[name]} successful bindings, {cut_off[name]} cut off")
    conflicts = bind_counts(world, range(409, 410))
    assert not conflicts, f"binding attempts on already-bound pods: {dict(conflicts)}"


@then("every pod was bound exactly once and has a Scheduled event from gpu-scheduler")
def bound_once_with_event(world: World) -> None:
    # The test control plane's audit log is the proof of "exactly once"; on an external cluster (KinD) the one
    # Scheduled event per pod, which the scheduler records after each successful bind, stands in for it.
    if world.cluster.cp is not None:
        bound_exactly_once(world)
    for pod in world.api.pods(world.namespace):
        name = pod["metadata"]["name"]
        events = wait_for(f"a Scheduled event for {name}", lambda: events_for(world, "Pod", name, "Scheduled"))
        assert len(events) == 1, events
        assert events[0]["source"]["component"] == constants.DEFAULT_SCHEDULER_NAME
        assert events[0]["message"] == f"Successfully assigned {world.namespace}/{name} to {pod['spec']['nodeName']}"


@then("every pod bound after the restart has a Scheduled event from gpu-scheduler")
def events_after_restart(world: World) -> None:
    for pod in world.api.pods(world.namespace):
        name = pod["metadata"]["name"]
        events = events_for(world, "Pod", name, "Scheduled")
        assert len(events) <= 1, f"{name} has {len(events)} Scheduled events"
        created = time.mktime(time.strptime(pod["metadata"]["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ"))
        if created - time.timezone > world.restarted_at:
            assert len(events) == 1, f"{name} was created after the restart but has no Scheduled event"


@then(step('the creation is refused with a message containing "{fragment:q}"'))
def refused(world: World, fragment: str) -> None:
    assert world.error is not None, "the pod was created, expected a refusal"
    assert fragment in world.error.message, world.error.message


@then(step('the creation is refused because the webhook "{name:q}" could not be called'))
def refused_webhook_down(world: World, name: str) -> None:
    refused(world, f'failed calling webhook "{name}"')


@then(step('the message also contains "{fragment:q}"'))
def refused_also(world: World, fragment: str) -> None:
    refused(world, fragment)


@then(step('there is no pod "{name:q}"'))
def no_pod(world: World, name: str) -> None:
    try:
        get_pod(world, name)
    except ApiError as exc:
        assert exc.status == 404
    else:
        raise AssertionError(f"pod {name} exists")


@then(step('the pod "{name:q}" exists'))
def pod_exists(world: World, name: str) -> None:
    assert world.error is None, world.error
    assert get_pod(world, name)["metadata"]["name"] == name


@then(step('the StatefulSet has a FailedCreate event containing "{fragment:q}"'))
def statefulset_event(world: World, fragment: str) -> None:
    events = wait_for("a FailedCreate event on the StatefulSet",
                      lambda: [e for e in events_for(world, "StatefulSet", world.statefulset, "FailedCreate")
                               if fragment in e["message"]], timeout=60)
    assert constants.WEBHOOK_NAME in events[0]["message"], events[0]["message"]


@then("pods 0 to 4 are the same pods on the same nodes as before")
def same_pods(world: World) -> None:
    now = {p["metadata"]["name"]: (p["metadata"]["uid"], p["spec"].get("nodeName", ""))
           for p in world.api.pods(world.namespace)}
    before = {f"{world.statefulset}-{i}" for i in range(5)}
    assert {k: v for k, v in now.items() if k in before} == {k: world.snapshot[k] for k in before}
    sts = world.api.get(f"/apis/apps/v1/namespaces/{world.namespace}/statefulsets/{world.statefulset}")
    assert sts["status"].get("replicas") == 5, sts["status"]


@then(step('the pod "{name:q}" is Pending with reason Unschedulable and a message containing "{fragment:q}"'))
def pending_unschedulable(world: World, name: str, fragment: str) -> None:
    def condition() -> dict[str, Any] | None:
        pod = get_pod(world, name)
        for c in pod["status"].get("conditions") or []:
            if c["type"] == "PodScheduled" and c["status"] == "False" and fragment in (c.get("message") or ""):
                return c
        return None

    cond = wait_for(f"PodScheduled=False on {name} mentioning {fragment!r}", condition, timeout=30)
    assert cond["reason"] == constants.REASON_UNSCHEDULABLE
    pod = get_pod(world, name)
    assert pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName")


@then(step('the pod "{name:q}" has a FailedScheduling event containing "{fragment:q}"'))
def failed_scheduling_event(world: World, name: str, fragment: str) -> None:
    events = wait_for(f"FailedScheduling event for {name}",
                      lambda: [e for e in events_for(world, "Pod", name, constants.EVENT_FAILED_SCHEDULING)
                               if fragment in e["message"]])
    assert events[0]["type"] == "Warning" and events[0]["source"]["component"] == constants.DEFAULT_SCHEDULER_NAME


@then(step('the pod "{name:q}" is not bound and has CUDA_VISIBLE_DEVICES "{devices:q}"'))
def not_bound_with_cuda(world: World, name: str, devices: str) -> None:
    pod = get_pod(world, name)
    assert not pod["spec"].get("nodeName"), pod["spec"].get("nodeName")
    assert_cuda(pod, devices)
    assert bind_counts(world, range(0, 1000))[name] == 0, "gpu-scheduler tried to bind it"


@then(step('the pod "{name:q}" is not bound, has no CUDA_VISIBLE_DEVICES and no events'))
def untouched(world: World, name: str) -> None:
    pod = get_pod(world, name)
    assert not pod["spec"].get("nodeName")
    assert all(v == [] for v in cuda_values(pod)), cuda_values(pod)
    assert not pod["status"].get("conditions"), pod["status"].get("conditions")
    assert [e for e in world.api.events(world.namespace) if e["involvedObject"]["name"] == name] == []
    assert bind_counts(world, range(0, 1000))[name] == 0, "gpu-scheduler tried to bind it"


# ---- GpuClaim --------------------------------------------------------------------------------------------------

def claims_path(world: World) -> str:
    return f"/apis/{constants.CLAIM_GROUP}/{constants.CLAIM_VERSION}/namespaces/{world.namespace}/gpuclaims"


@when(step('the GpuClaim "{name:q}" asking for {count:d} GPUs with policy "{policy:q}" is created'))
def create_claim(world: World, name: str, count: int, policy: str) -> None:
    body = {"apiVersion": f"{constants.CLAIM_GROUP}/{constants.CLAIM_VERSION}", "kind": "GpuClaim",
            "metadata": {"name": name}, "spec": {"devices": {"count": count, "policy": policy}}}
    try:
        world.api.create(claims_path(world), body)
        world.error = None
    except ApiError as exc:
        world.error = exc


@then(step('the GpuClaim "{name:q}" exists with exclusivity "{exclusivity:q}" and topology mode "{mode:q}"'))
def claim_defaults(world: World, name: str, exclusivity: str, mode: str) -> None:
    assert world.error is None, world.error
    claim = world.api.get(f"{claims_path(world)}/{name}")
    # Defaults come from the CRD's schema, applied by the apiserver.
    assert claim["spec"]["devices"]["exclusivity"] == exclusivity
    assert claim["spec"].get("topology", {}).get("mode", "Ignore") == mode


def claim_pod_body(name: str, claim: str, gpu_map: str | None = None) -> dict[str, Any]:
    body = pod_body(name, gpu_map=gpu_map)
    body["metadata"].setdefault("annotations", {})[constants.CLAIM_ANNOTATION] = claim
    return body


@when(step('the pod "{name:q}" naming the GpuClaim "{claim:q}" is created with the map "{gpu_map:q}"'))
def create_claim_and_map_pod(world: World, name: str, claim: str, gpu_map: str) -> None:
    try_create_pod(world, claim_pod_body(name, claim, gpu_map))


@when(step('the pod "{name:q}" naming the GpuClaim "{claim:q}" is created'))
def create_claim_pod(world: World, name: str, claim: str) -> None:
    try_create_pod(world, claim_pod_body(name, claim))
    assert world.error is None, world.error


@then(step('every container of "{name:q}" reads CUDA_VISIBLE_DEVICES from the annotation "{annotation:q}"'))
def cuda_from_annotation(world: World, name: str, annotation: str) -> None:
    spec = get_pod(world, name)["spec"]
    refs = [[e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in c.get("env") or []
             if e["name"] == constants.CUDA_ENV] for c in (spec.get("initContainers") or []) + spec["containers"]]
    assert refs and all(r == [f"metadata.annotations['{annotation}']"] for r in refs), refs


# ---- GpuClaim scheduling (control-plane tier: the simulated inventory is written here, not by the agent) -------

def simulated_inventory(node: str) -> dict[str, Any]:
    """The reference's example: GPUs 0-3 in an island at 600 GB/s, 4-7 in another at 64 GB/s."""
    devices = [{"id": i, "health": "Healthy", "island": f"nvlink-group-{i // 4}",
                "bandwidthGBps": 600 if i < 4 else 64, "inUseBy": []} for i in range(8)]
    return {"total": 8, "free": 8, "unhealthy": 0, "devices": devices}


@given("every kwok node has the simulated inventory of 8 GPUs in two NVLink islands")
def inventory(world: World) -> None:
    path = f"/apis/{constants.CLAIM_GROUP}/{constants.CLAIM_VERSION}/gpunodestatuses"
    for node in WORKER_NODES:
        body = {"apiVersion": f"{constants.CLAIM_GROUP}/{constants.CLAIM_VERSION}", "kind": "GpuNodeStatus",
                "metadata": {"name": node}, "spec": {"nodeName": node}}

        def write(body: dict[str, Any] = body, node: str = node) -> bool:
            try:
                world.api.create(path, body)
            except ApiError as exc:
                if exc.status != 409:
                    raise
            world.api.patch(f"{path}/{node}/status", {"status": simulated_inventory(node)})
            return True

        # Right after the CRD is Established the apiserver may still answer 404 for a moment.
        wait_for(f"the GpuNodeStatus of {node} written", write, timeout=30)


def create_claim_body(world: World, name: str, devices: dict[str, Any], node: str | None = None) -> None:
    spec: dict[str, Any] = {"devices": devices}
    if node:
        spec["selector"] = {"matchLabels": {"kubernetes.io/hostname": node}}
    world.api.create(claims_path(world), {"apiVersion": f"{constants.CLAIM_GROUP}/{constants.CLAIM_VERSION}",
                                          "kind": "GpuClaim", "metadata": {"name": name}, "spec": spec})


@given(step('the GpuClaim "{name:q}" asking for {count:d} GPUs with policy "{policy:q}" on node "{node:q}" is created'))
def claim_on_node(world: World, name: str, count: int, policy: str, node: str) -> None:
    create_claim_body(world, name, {"count": count, "policy": policy}, node)


@given(step('the GpuClaim "{name:q}" asking for {count:d} GPUs with exclusivity "{exclusivity:q}" is created'))
def claim_with_exclusivity(world: World, name: str, count: int, exclusivity: str) -> None:
    create_claim_body(world, name, {"count": count, "exclusivity": exclusivity})


def claim_status(world: World, name: str) -> dict[str, Any]:
    return world.api.get(f"{claims_path(world)}/{name}").get("status") or {}


@then(step('the GpuClaim "{name:q}" is Bound with GPUs "{gpus:q}" on {node}'))
def claim_bound(world: World, name: str, gpus: str, node: str) -> None:
    status = wait_for(f"GpuClaim {name} Bound", lambda: (s := claim_status(world, name)).get("phase") == "Bound"
                      and s, timeout=60)
    assert status["nodeName"] == node and status["allocated"] == f"{node}:{gpus}", status
    assert status["gpuIds"] == [int(g) for g in gpus.split(",")], status


@then(step('the GpuClaim "{name:q}" is {phase} with a message containing "{fragment:q}"'))
def claim_phase(world: World, name: str, phase: str, fragment: str) -> None:
    wait_for(f"GpuClaim {name} {phase} mentioning {fragment!r}",
             lambda: (s := claim_status(world, name)).get("phase") == phase and fragment in s.get("message", ""),
             timeout=60)


@then(step('the pod "{name:q}" runs on {node} with its allocation annotations "{allocated:q}" and "{ids:q}"'))
def claim_pod_runs(world: World, name: str, node: str, allocated: str, ids: str) -> None:
    pod = wait_for(f"pod {name} Running on {node}", lambda: running_on(world, name, node), timeout=60)
    annotations = pod["metadata"]["annotations"]
    assert annotations[constants.ALLOCATED_ANNOTATION] == allocated
    assert annotations[constants.GPU_IDS_ANNOTATION] == ids


def leases_of(world: World, uid: str) -> list[str]:
    leases = world.api.get(objects.LEASES_PATH)["items"]
    return sorted(lease["metadata"]["name"] for lease in leases if uid in objects.lease_holders(lease))


@then(step('the pod "{name:q}" holds the leases "{names:q}"'))
def holds_leases(world: World, name: str, names: str) -> None:
    assert leases_of(world, get_pod(world, name)["metadata"]["uid"]) == sorted(names.split(","))


@when(step('the pod "{name:q}" is deleted'))
def delete_pod(world: World, name: str) -> None:
    world.snapshot[name] = (get_pod(world, name)["metadata"]["uid"], "")
    world.api.delete(f"/api/v1/namespaces/{world.namespace}/pods/{name}", gracePeriodSeconds="0")


@when("the scheduler is stopped")
def stop_scheduler(world: World) -> None:
    assert world.cluster.components is not None
    world.cluster.components.scheduler.stop()


@then(step('no GPU lease is held by the pod "{name:q}"'))
def no_leases(world: World, name: str) -> None:
    uid = world.snapshot[name][0]
    wait_for(f"the leases of {name} released", lambda: not leases_of(world, uid), timeout=30)


@given(step('the GpuClaim "{name:q}" asking for {count:d} GPUs preferring ids "{ids:q}" on node "{node:q}" is created'))
def claim_prefer_ids(world: World, name: str, count: int, ids: str, node: str) -> None:
    create_claim_body(world, name, {"count": count, "policy": "preferIds",
                                    "preferIds": [int(i) for i in ids.split(",")]}, node)


@given(step('the GpuClaim "{name:q}" asking for {count:d} GPUs with topology "{mode:q}" at {gbps:d} GB/s '
            'on node "{node:q}" is created'))
def claim_topology(world: World, name: str, count: int, mode: str, gbps: int, node: str) -> None:
    create_claim_body(world, name, {"count": count}, node)
    world.api.patch(f"{claims_path(world)}/{name}", {"spec": {"topology": {"mode": mode, "minBandwidthGBps": gbps}}})


@given(step("GPU {gpu:d} of {node} is Unhealthy"))
def unhealthy_gpu(world: World, gpu: int, node: str) -> None:
    status = simulated_inventory(node)
    status["devices"][gpu]["health"] = "Unhealthy"
    status["unhealthy"], status["free"] = 1, status["free"] - 1
    world.api.patch(f"/apis/{constants.CLAIM_GROUP}/{constants.CLAIM_VERSION}/gpunodestatuses/{node}/status",
                    {"status": status})


@then(step('the GpuClaim "{name:q}" says "{fragment:q}"'))
def claim_says(world: World, name: str, fragment: str) -> None:
    assert fragment in claim_status(world, name).get("message", ""), claim_status(world, name)


@then(step('the GpuNodeStatus of {node} shows GPUs "{gpus:q}" in use by the pod "{name:q}"'))
def node_status_in_use(world: World, node: str, gpus: str, name: str) -> None:
    """What the inventory agent writes; on the control-plane tier the agent runs once here, as on a node."""
    if world.cluster.cp is not None:  # no DaemonSet here: run the real agent program once for that node
        subprocess.run([str(SCRIPTS / "gpu-inventory-agent"), f"--kubeconfig={world.cluster.cp.kubeconfig}",
                        f"--node-name={node}", "--source=simulated", "--once"], check=True, timeout=60)
    ref = f"{world.namespace}/{name}"

    def shown() -> dict[str, Any] | None:
        status = world.api.get(f"/apis/{constants.CLAIM_GROUP}/{constants.CLAIM_VERSION}/gpunodestatuses/{node}")
        devices = (status.get("status") or {}).get("devices") or []
        users = {str(d["id"]) for d in devices if ref in (d.get("inUseBy") or [])}
        return status if users == set(gpus.split(",")) else None

    wait_for(f"GpuNodeStatus {node} showing {ref} on GPUs {gpus}", shown, timeout=30)
