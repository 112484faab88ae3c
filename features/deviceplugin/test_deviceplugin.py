"""gpu-device-plugin through the real kubelets of the KinD test-bed (deviceplugin.feature, KinD tier only): what each
worker advertises, what every container sees (its GPUs' files and variables, read with `kubectl exec`), what the
kubelet recorded (the plugin's `--show-kubelet`, the PodResources API), a kubelet restarted inside its node
container, and a GPU turning unhealthy."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from pytest_bdd import given, parsers, scenarios, then, when

from features.support import (
    JOB_NAME_LABEL,
    SYSTEM_NAMESPACE,
    WORKER_NODES,
    StatefulSet,
    World,
    events_for,
    get_pod,
    indexed_job_body,
    on_node,
    pod_body,
    started_on,
    statefulset_body,
    step,
)
from gpu_scheduling import constants, devices, gpumap
from gpu_scheduling.claims import objects
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import NotFound
from gpu_scheduling.scheduler import fit
from hack import toolchain
from harness.wait import wait_for
from harness.watch import container_restarts

scenarios("deviceplugin.feature")

#: The StatefulSets a scenario created, by name: (the StatefulSet, its replicas).
Created = dict[str, tuple[StatefulSet, int]]


@pytest.fixture
def created() -> Created:
    return {}


WORKERS = ("node1", "node2", "node3", "node4")
AGENT_COMPONENT = {"app.kubernetes.io/component": "agent"}
PLUGIN_CONTAINER = "device-plugin"


# ---- reading the node side -------------------------------------------------------------------------------------


def kubectl(world: World, *args: str, timeout: float = 60) -> str:
    done = subprocess.run(
        [str(toolchain.bindir() / "kubectl"), "--kubeconfig", world.cluster.kubeconfig, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr.strip()}"
    return done.stdout


def agent_pod(world: World, node: str) -> dict[str, Any]:
    selector = ",".join(f"{k}={v}" for k, v in AGENT_COMPONENT.items())
    pods = world.api.get(paths.pods(SYSTEM_NAMESPACE), labelSelector=selector, fieldSelector=f"spec.nodeName={node}")
    (pod,) = pods["items"]
    return pod


def slots(world: World) -> int:
    pod = agent_pod(world, "node1")
    (plugin,) = [c for c in pod["spec"]["containers"] if c["name"] == PLUGIN_CONTAINER]
    (value,) = [a.removeprefix("--slots=") for a in plugin["args"] if a.startswith("--slots=")]
    return int(value)


def kubelet_view(world: World, node: str) -> dict[str, Any]:
    """The kubelet's PodResources view of the resource on `node`, as the plugin on that node prints it."""
    name = agent_pod(world, node)["metadata"]["name"]
    text = kubectl(
        world, "-n", SYSTEM_NAMESPACE, "exec", name, "-c", PLUGIN_CONTAINER, "--", "gpu-device-plugin", "--show-kubelet"
    )
    return json.loads(text)


def allocatable(world: World, node: str) -> int:
    status = world.api.get(paths.node(node))["status"]
    return int((status.get("allocatable") or {}).get(constants.GPU_RESOURCE, "0"))


def healthy_gpus(world: World, node: str) -> int:
    status = world.api.get(paths.gpu_node_status(node))["status"]
    return sum(1 for d in status["devices"] if d["health"] == "Healthy")


def sees(world: World, namespace: str, pod: str, container: str) -> tuple[list[int], str]:
    """The GPU ids of the files the container was given (each file's own id line), and its GPU_SCHEDULING_GPUS.
    A simulated GPU is never a device node: a container that has any /dev/nvidia* fails the check."""
    script = (
        f'cat {constants.DEVICE_FILES_DIR}/gpu* 2>/dev/null; echo "env=${constants.DEVICE_GPUS_ENV}"; '
        'for d in /dev/nvidia*; do [ -e "$d" ] && echo "dev=$d"; done; true'
    )
    text = kubectl(world, "-n", namespace, "exec", pod, "-c", container, "--", "sh", "-c", script)
    ids = sorted(int(m) for m in re.findall(r"^id=(\d+)$", text, flags=re.MULTILINE))
    (env,) = re.findall(r"^env=(.*)$", text, flags=re.MULTILINE)
    nodes = re.findall(r"^dev=(.*)$", text, flags=re.MULTILINE)
    assert not nodes, f"{namespace}/{pod}/{container} has NVIDIA device nodes {nodes}"
    return ids, env


def recorded(view: dict[str, Any], namespace: str, pod: str) -> dict[str, list[int]]:
    """container -> the GPUs of the devices the kubelet recorded for it."""
    containers = view["pods"].get(f"{namespace}/{pod}", {})
    return {c: sorted(-1 if (g := devices.gpu_of(i)) is None else g for i in ids) for c, ids in containers.items()}


def check_pod_gpus(world: World, namespace: str, pod: str, node: str, gpus: list[int]) -> None:
    running = f"pod {pod} on {node} with every container running"
    body = wait_for(running, lambda: started_on(world, pod, node, namespace), timeout=180)
    view = kubelet_view(world, node)
    for c in body["spec"]["containers"]:
        ids, env = sees(world, namespace, pod, c["name"])
        assert ids == sorted(gpus), f"{pod}/{c['name']} sees GPU files {ids}, expected {gpus}"
        assert env == ",".join(map(str, gpus)), f"{pod}/{c['name']} has {constants.DEVICE_GPUS_ENV}={env!r}"
        assert recorded(view, namespace, pod).get(c["name"], []) == sorted(gpus), (pod, c["name"], view["pods"])
    counts = container_restarts([get_pod(world, pod, namespace)])
    assert not any(counts.values()), f"{pod}: containers restarted {counts}"


def _docker(*args: str) -> list[str]:
    """The words docker prints for `args` (it runs beside the KinD cluster on the test machine)."""
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=True, timeout=30).stdout.split()


def node_container(world: World, node: str) -> str:
    """The docker container of the KinD node whose InternalIP is `node`'s."""
    addresses = world.api.get(paths.node(node))["status"]["addresses"]
    (ip,) = [a["address"] for a in addresses if a["type"] == "InternalIP"]
    for name in _docker("ps", "--filter", "label=io.x-k8s.kind.role", "--format", "{{.Names}}"):
        if ip in _docker("inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", name):
            return name
    raise AssertionError(f"no KinD node container has {node}'s address {ip}")


# ---- steps -----------------------------------------------------------------------------------------------------


@then("every worker's allocatable gpu.scheduling/gpu is its healthy GPUs times the plugin's slots")
def every_worker(world: World) -> None:
    per_gpu = slots(world)
    for node in WORKERS:
        expected = healthy_gpus(world, node) * per_gpu
        assert expected > 0
        wait_for(f"{node} allocatable {expected}", lambda n=node, e=expected: allocatable(world, n) == e or None)


@then("each of its pods sees exactly the GPUs of its map entry, and the kubelet recorded them")
def take_home_pods(world: World, statefulset: StatefulSet) -> None:
    for index in range(5):
        name = statefulset.pod(index)
        meta = get_pod(world, name, statefulset.namespace)["metadata"]
        entry = gpumap.entry_for_pod(meta)
        assert entry is not None
        check_pod_gpus(world, statefulset.namespace, name, entry.node, list(entry.gpu_ids))


@then("pods 3 and 4 both see GPU 3 of node4")
def shared_gpu(world: World, statefulset: StatefulSet) -> None:
    view = kubelet_view(world, "node4")
    held = [recorded(view, statefulset.namespace, statefulset.pod(i)).get("check") for i in (3, 4)]
    assert held == [[3], [3]], held
    slots_held = [view["pods"][f"{statefulset.namespace}/{statefulset.pod(i)}"]["check"][0] for i in (3, 4)]
    assert slots_held[0] != slots_held[1]  # two slots of one GPU


@given(
    parsers.re(
        r'a StatefulSet "(?P<name>[a-z0-9-]+)" of (?P<replicas>\d+) parallel replicas, replica i mapped to GPU '
        r"i(\+(?P<offset>\d+))? of (?P<node>node\d)"
    ),
    target_fixture="statefulset",
)
def parallel_statefulset(
    world: World, created: Created, name: str, replicas: str, offset: str | None, node: str
) -> StatefulSet:
    shift = int(offset or 0)
    gpu_map = "\n".join(f"{i}={node}:{i + shift}" for i in range(int(replicas)))
    world.api.create(paths.statefulsets(world.namespace), statefulset_body(name, int(replicas), gpu_map, parallel=True))
    created[name] = (StatefulSet(name, world.namespace, gpu_map), int(replicas))
    return StatefulSet(name, world.namespace, gpu_map)


@given(step('every container of every pod of "{name:q}" sees exactly its GPU, and the kubelet recorded them'))
@then(step('every container of every pod of "{name:q}" sees exactly its GPU, and the kubelet recorded them'))
def every_container(world: World, created: Created, name: str) -> None:
    for sts, index, entry in entries(created, name):
        check_pod_gpus(world, sts.namespace, sts.pod(index), entry.node, list(entry.gpu_ids))


def entries(created: Created, name: str) -> Iterator[tuple[StatefulSet, int, gpumap.Entry]]:
    """Each pod of the StatefulSet `name` the scenario created, with its map entry."""
    sts, replicas = created[name]
    parsed = gpumap.parse(sts.gpu_map)
    for index in range(replicas):
        yield sts, index, parsed.entry_for(index)


@when(step('a pod "{name:q}" of the default scheduler asking for 1 {resource} is created'))
def foreign_pod(world: World, name: str, resource: str) -> None:
    body = pod_body(name, gpu_map=None, scheduler="default-scheduler")
    for c in body["spec"]["containers"]:
        c["resources"] = {"limits": {resource: "1"}}
    world.attempt(lambda: world.api.create(paths.pods(world.namespace), body))


@when(step("the kubelet of {node} is restarted"), target_fixture="restarted_at")
def restart_kubelet(world: World, node: str) -> float:
    container = node_container(world, node)
    started = time.time()
    subprocess.run(["docker", "exec", container, "systemctl", "restart", "kubelet"], check=True, timeout=120)
    return started


@then(step("{node}'s allocatable gpu.scheduling/gpu comes back"))
def allocatable_back(world: World, node: str, restarted_at: float) -> None:
    name = agent_pod(world, node)["metadata"]["name"]

    def registered_again() -> str | None:
        log = world.api.text(
            paths.pod_log(SYSTEM_NAMESPACE, name), container=PLUGIN_CONTAINER, sinceTime=_rfc3339(restarted_at)
        )
        lines = [line for line in log.splitlines() if "with the kubelet again" in line]
        return lines[-1] if lines else None

    line = wait_for(f"the plugin on {node} registers again", registered_again, timeout=120, interval=1)
    registered = time.mktime(time.strptime(line[:19], "%Y-%m-%d %H:%M:%S")) - time.timezone + int(line[20:23]) / 1000
    expected = healthy_gpus(world, node) * slots(world)
    wait_for(f"{node} allocatable {expected}", lambda: allocatable(world, node) == expected or None, timeout=120)
    print(
        f"\n{node}: kubelet restarted; the plugin registered again {registered - restarted_at:.1f} s after the "
        f"restart began, allocatable back {time.time() - restarted_at:.1f} s after it"
    )


def _rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t - 1))


@then(step('the kubelet still records the GPUs of every pod of "{name:q}"'))
def still_recorded(world: World, created: Created, name: str) -> None:
    for sts, index, entry in entries(created, name):
        view = kubelet_view(world, entry.node)
        assert recorded(view, sts.namespace, sts.pod(index)).get("check") == list(entry.gpu_ids), view["pods"]
        body = get_pod(world, sts.pod(index), sts.namespace)
        counts = container_restarts([body])
        assert counts and not any(counts.values()), f"{sts.pod(index)} restarted: {counts}"


@when(step("{node} declares GPU {gpu:d} unhealthy"), target_fixture="allocatable_before")
def declare_unhealthy(world: World, node: str, gpu: int) -> int:
    before = allocatable(world, node)
    key = constants.SIMULATED_ANNOTATION
    old = (world.api.get(paths.node(node))["metadata"].get("annotations") or {}).get(key)
    world.node_undo.append((node, {"metadata": {"annotations": {key: old}}}))
    declaration = f"count=8,islands=2,bandwidth=600/64,unhealthy={gpu}"
    world.api.patch(paths.node(node), {"metadata": {"annotations": {key: declaration}}}, kind="strategic")
    return before


@then(step("{node}'s allocatable gpu.scheduling/gpu drops by the plugin's slots"))
def allocatable_drops(world: World, node: str, allocatable_before: int) -> None:
    expected = allocatable_before - slots(world)
    wait_for(f"{node} allocatable {expected}", lambda: allocatable(world, node) == expected or None, timeout=90)


@when(step('the pod "{name:q}" naming the GpuClaim "{claim:q}" and asking for {count:d} gpu.scheduling/gpu is created'))
def claim_pod_asking(world: World, name: str, claim: str, count: int) -> None:
    body = pod_body(name, gpu_map=None, claim=claim)
    for c in [*body["spec"]["containers"], *body["spec"]["initContainers"]]:
        c["resources"] = {"limits": {constants.GPU_RESOURCE: str(count)}}
    world.api.create(paths.pods(world.namespace), body)


@then(
    step('every container of the pod "{name:q}" sees exactly the GPUs of its allocation, and the kubelet recorded them')
)
def claim_pod_sees(world: World, name: str) -> None:
    def allocated() -> str | None:
        return (get_pod(world, name)["metadata"].get("annotations") or {}).get(constants.ALLOCATED_ANNOTATION)

    node, _, ids = wait_for(f"{name} allocated", allocated).rpartition(":")
    check_pod_gpus(world, world.namespace, name, node, [int(i) for i in ids.split(",")])


# ---- pods given no GPU, a kubelet refusal, a killed plugin ------------------------------------------------------


@when(step('the pod "{name:q}" asking for no GPU is bound to {node}'))
def no_gpu_pod(world: World, name: str, node: str) -> None:
    world.api.create(paths.pods(world.namespace), pod_body(name, gpu_map=None, node=node))


@when(step('the pod "{name:q}" asking for no GPU and setting {variable}=all is bound to {node}'))
def no_gpu_pod_all(world: World, name: str, variable: str, node: str) -> None:
    assert variable == constants.NVIDIA_DEVICES_ENV, variable
    body = pod_body(name, gpu_map=None, node=node)
    for c in [*body["spec"]["containers"], *body["spec"]["initContainers"]]:
        c["env"].append({"name": variable, "value": "all"})
    world.api.create(paths.pods(world.namespace), body)


@then(
    step(
        'no container of the pods "{first:q}" and "{second:q}" sees a GPU, and the kubelet recorded no device for them'
    )
)
def sees_no_gpu(world: World, first: str, second: str) -> None:
    for name in (first, second):
        node = get_pod(world, name)["spec"]["nodeName"]
        check_pod_gpus(world, world.namespace, name, node, [])
        # its init container too: the kubelet recorded no device for any container of it
        view = kubelet_view(world, node)
        assert not any(recorded(view, world.namespace, name).values()), (name, view["pods"])


def free_units(world: World, node: str) -> int:
    """The node's allocatable units less those of the pods on it that have not ended, each counted by kube's formula
    (fit.pod_requests: its containers' sum, or its largest init container's when that is more)."""
    pods = world.api.get(paths.POD.collection(), fieldSelector=f"spec.nodeName={node}")["items"]
    live = [p for p in pods if p["status"].get("phase") not in ("Succeeded", "Failed")]
    held = sum(fit.pod_requests(p).get(constants.GPU_RESOURCE, 0) for p in live)
    return allocatable(world, node) - held


@when(
    step('the pod "{name:q}" bound to {node} asks for 1 more gpu.scheduling/gpu than {again} has free'),
    target_fixture="free_before",
)
def greedy_pod(world: World, name: str, node: str, again: str) -> int:
    assert again == node, (node, again)
    free = free_units(world, node)
    body = pod_body(name, gpu_map=None, node=node)
    body["spec"]["containers"][0]["resources"] = {"limits": {constants.GPU_RESOURCE: str(free + 1)}}
    world.api.create(paths.pods(world.namespace), body)
    return free


@then(
    step(
        'the kubelet refused the pod "{name:q}" at admission, naming what it asked for and the free slots, and no '
        "container of it ran"
    )
)
def kubelet_refused(world: World, name: str, free_before: int) -> None:
    def failed() -> dict[str, Any] | None:
        pod = get_pod(world, name)
        return pod if pod["status"].get("phase") == "Failed" else None

    status = wait_for(f"pod {name} refused by the kubelet", failed, timeout=120)["status"]
    # Within the node's allocatable, so the device manager (which admits before the resource predicate) refuses it.
    assert status.get("reason") == "UnexpectedAdmissionError", status
    message = status.get("message", "")
    assert constants.GPU_RESOURCE in message, status
    assert f"Requested: {free_before + 1}, Available: {free_before}" in message, status
    started = [s["name"] for s in status.get("containerStatuses") or [] if "waiting" not in (s.get("state") or {})]
    assert not started, f"{name}: containers {started} ran"


@when(
    step(
        'a StatefulSet "{name:q}" of {replicas:d} parallel replicas, replica i mapped to GPU i+{offset:d} of {node}, '
        "is created as the device plugin on {again} is killed with SIGKILL"
    ),
    target_fixture="restarted_at",
)
def kill_plugin_meanwhile(
    world: World, created: Created, name: str, replicas: int, offset: int, node: str, again: str
) -> float:
    assert again == node, (node, again)
    parallel_statefulset(world, created, name, str(replicas), str(offset), node)
    killed_at = time.time()
    # The plugin runs in a container of the node's pod sandbox: from the KinD node's own PID namespace it is an
    # ordinary process (inside the container it is PID 1, which SIGKILL from there cannot reach).
    subprocess.run(
        ["docker", "exec", node_container(world, node), "pkill", "-KILL", "-f", "bin/gpu-device-plugin"],
        check=True,
        timeout=30,
    )
    return killed_at


@then(
    step(
        "the device plugin on {node} registers with the kubelet again, and every slot of {again}'s healthy GPUs is "
        "allocatable"
    )
)
def plugin_registers_again(world: World, node: str, again: str, restarted_at: float) -> None:
    assert again == node, (node, again)

    def registered() -> str | None:
        pod = agent_pod(world, node)
        (status,) = [s for s in pod["status"].get("containerStatuses") or [] if s["name"] == PLUGIN_CONTAINER]
        if not status.get("restartCount") or "running" not in (status.get("state") or {}):
            return None
        log = world.api.text(
            paths.pod_log(SYSTEM_NAMESPACE, pod["metadata"]["name"]),
            container=PLUGIN_CONTAINER,
            sinceTime=_rfc3339(restarted_at),
        )
        return next((line for line in log.splitlines() if f"registered {constants.GPU_RESOURCE}" in line), None)

    wait_for(f"the plugin on {node} restarted and registered", registered, timeout=120, interval=1)
    expected = healthy_gpus(world, node) * slots(world)
    wait_for(f"{node} allocatable {expected}", lambda: allocatable(world, node) == expected or None, timeout=120)
    print(f"\n{node}: plugin SIGKILLed; registered and allocatable back {time.time() - restarted_at:.1f} s after")


# ---- preemption on a real node ----------------------------------------------------------------------------------


@pytest.fixture
def priority_classes() -> Iterator[list[tuple[World, str]]]:
    """PriorityClasses a scenario made (cluster-scoped): deleted again whatever happens."""
    made: list[tuple[World, str]] = []
    yield made
    for world, name in made:
        world.api.delete(paths.priority_class(name))


@given(step('the PriorityClasses "{low:q}" of value {low_value:d} and "{high:q}" of value {high_value:d}'))
def make_priority_classes(
    world: World, priority_classes: list[tuple[World, str]], low: str, low_value: int, high: str, high_value: int
) -> None:
    for name, value in ((low, low_value), (high, high_value)):
        body = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
        }
        world.api.create(paths.PRIORITY_CLASSES, body, exist_ok=True)
        priority_classes.append((world, name))


def _claim_pod(name: str, claim: str, count: int, priority_class: str) -> dict[str, Any]:
    body = pod_body(name, gpu_map=None, claim=claim)
    body["spec"]["priorityClassName"] = priority_class
    for c in [*body["spec"]["containers"], *body["spec"]["initContainers"]]:
        c["resources"] = {"limits": {constants.GPU_RESOURCE: str(count)}}
    return body


def _allocation(world: World, name: str) -> tuple[str, list[int]] | None:
    value = (get_pod(world, name)["metadata"].get("annotations") or {}).get(constants.ALLOCATED_ANNOTATION)
    if not value:
        return None
    node, _, ids = value.rpartition(":")
    return node, [int(i) for i in ids.split(",")]


@given(
    step(
        "{node}'s free GPUs are taken one each by pods "
        '"{prefix:q}" of priority class "{pc:q}" naming the GpuClaim "{claim:q}" of 1 GPU on it'
    ),
    target_fixture="fillers",
)
def fill_free_gpus(world: World, node: str, prefix: str, pc: str, claim: str) -> dict[str, list[int]]:
    """One pod after another until one waits for a busy GPU: that one goes, the others hold every free GPU."""
    world.api.create(
        paths.gpu_claims(world.namespace),
        objects.claim_body(claim, {"devices": {"count": 1}, "selector": on_node(node)}),
    )
    held: dict[str, list[int]] = {}
    for i in range(64):
        name = f"{prefix}-{i}"
        world.api.create(paths.pods(world.namespace), _claim_pod(name, claim, 1, pc))

        def decided(name: str = name) -> str | None:
            pod = get_pod(world, name)
            if pod["spec"].get("nodeName"):
                return "bound"
            waiting = [c for c in pod["status"].get("conditions") or [] if c["type"] == "PodScheduled"]
            if waiting and waiting[0]["status"] == "False":
                assert "busy" in waiting[0]["message"], waiting[0]["message"]
                return "waits"
            return None

        if wait_for(f"{name} bound or waiting", decided, timeout=60) == "waits":
            world.api.delete(paths.pod(world.namespace, name), gracePeriodSeconds="0")
            break
        allocation = wait_for(f"{name} allocated", lambda name=name: _allocation(world, name))
        assert allocation[0] == node, allocation
        held[name] = allocation[1]
    assert len(held) >= 2, f"{node} has {len(held)} free GPU(s); the scenario needs at least 2"
    for name, gpus in held.items():
        check_pod_gpus(world, world.namespace, name, node, gpus)
    return held


@when(
    step(
        'the pod "{name:q}" of priority class "{pc:q}" naming the GpuClaim "{claim:q}" of {count:d} GPUs on {node} '
        "and asking for {asks:d} gpu.scheduling/gpu is created"
    )
)
def create_preemptor(world: World, name: str, pc: str, claim: str, count: int, node: str, asks: int) -> None:
    world.api.create(
        paths.gpu_claims(world.namespace),
        objects.claim_body(claim, {"devices": {"count": count}, "selector": on_node(node)}),
    )
    world.api.create(paths.pods(world.namespace), _claim_pod(name, claim, asks, pc))


def _gone(world: World, names: Iterator[str] | list[str]) -> list[str]:
    gone = []
    for name in names:
        try:
            get_pod(world, name)
        except NotFound:
            gone.append(name)
    return gone


@then(
    step(
        'exactly {count:d} pods "{prefix:q}" were preempted, each with a Preempted event, and the pod "{name:q}" '
        "holds GPUs they held"
    )
)
def preempted_fewest(world: World, fillers: dict[str, list[int]], count: int, prefix: str, name: str) -> None:
    gone = _gone(world, list(fillers))
    assert len(gone) == count, f"gone: {gone}"
    for victim in gone:
        assert events_for(world, "Pod", victim, constants.EVENT_PREEMPTED), f"no Preempted event for {victim}"
    allocation = _allocation(world, name)
    assert allocation is not None
    freed = {g for victim in gone for g in fillers[victim]}
    assert set(allocation[1]) <= freed, (allocation, freed)


@then(step('every container of every other pod "{prefix:q}" still sees exactly its GPU'))
def others_keep_theirs(world: World, fillers: dict[str, list[int]], prefix: str) -> None:
    kept = [n for n in fillers if n not in _gone(world, list(fillers))]
    assert kept, "no pod of the fillers is left"
    for name in kept:
        node, gpus = _allocation(world, name) or ("", [])
        assert gpus == fillers[name], (name, gpus, fillers[name])
        check_pod_gpus(world, world.namespace, name, node, gpus)


# ---- NVIDIA's device plugin on the same node -------------------------------------------------------------------


@pytest.fixture
def advertised() -> Iterator[list[tuple[World, str]]]:
    """Nodes a scenario made advertise NVIDIA's resource: it is taken off them again whatever happens."""
    nodes: list[tuple[World, str]] = []
    yield nodes
    for world, node in nodes:
        _advertise(world, node, None)


def _advertise(world: World, node: str, count: str | None) -> None:
    """Set (or, with None, remove) an extended resource in the node's capacity, as NVIDIA's device plugin's kubelet
    would report it: the status subresource, which the kubelet leaves alone for resources it does not serve."""
    body = {"status": {"capacity": {constants.NVIDIA_GPU_RESOURCE: count}}}
    world.api.patch(f"{paths.node(node)}/status", body)


def _plugin_ready(world: World, node: str) -> bool:
    statuses = agent_pod(world, node)["status"].get("containerStatuses") or []
    return any(s["name"] == PLUGIN_CONTAINER and s.get("ready") for s in statuses)


@when(step("{node} also advertises {count:d} nvidia.com/gpu"))
def nvidia_too(world: World, advertised: list[tuple[World, str]], node: str, count: int) -> None:
    advertised.append((world, node))
    _advertise(world, node, str(count))


@when(step("{node} no longer advertises nvidia.com/gpu"))
def nvidia_gone(world: World, node: str) -> None:
    _advertise(world, node, None)


@then(step('the device plugin on {node} is not ready, and its log says to label the node "{label:q}"'))
def plugin_not_ready(world: World, node: str, label: str) -> None:
    wait_for(f"the plugin on {node} not ready", lambda: not _plugin_ready(world, node) or None, timeout=60)
    name = agent_pod(world, node)["metadata"]["name"]
    log = world.api.text(paths.pod_log(SYSTEM_NAMESPACE, name), container=PLUGIN_CONTAINER, tailLines="50")
    lines = [line for line in log.splitlines() if "ERROR" in line and label in line]
    assert lines and constants.NVIDIA_GPU_RESOURCE in lines[-1], log[-2000:]


@then(step("the device plugin on {node} is ready again"))
def plugin_ready_again(world: World, node: str) -> None:
    wait_for(f"the plugin on {node} ready", lambda: _plugin_ready(world, node) or None, timeout=60)


# ---- a gang ---------------------------------------------------------------------------------------------------------


@when(
    step(
        'the Indexed Job "{name:q}" of {pods:d} pods naming the GpuClaim "{claim:q}" in a gang of {size:d}, '
        "each asking for {count:d} gpu.scheduling/gpu, is created"
    )
)
def gang_job(world: World, name: str, pods: int, claim: str, size: int, count: int) -> None:
    annotations = {constants.CLAIM_ANNOTATION: claim, constants.GANG_MIN_MEMBERS_ANNOTATION: str(size)}
    body = indexed_job_body(name, pods, annotations)
    spec = body["spec"]["template"]["spec"]
    for c in [*spec["containers"], *spec["initContainers"]]:
        c["resources"] = {"limits": {constants.GPU_RESOURCE: str(count)}}
    world.api.create(paths.jobs(world.namespace), body)


@then(
    step(
        'the {n:d} pods of the Job "{job:q}" run one per worker, and every container sees exactly the GPUs of its '
        "pod's allocation, and the kubelet recorded them"
    )
)
def gang_job_sees(world: World, n: int, job: str) -> None:
    def allocated() -> dict[str, str] | None:
        pods = world.api.pods(world.namespace, labelSelector=f"{JOB_NAME_LABEL}={job}")
        found = {
            p["metadata"]["name"]: (p["metadata"].get("annotations") or {}).get(constants.ALLOCATED_ANNOTATION, "")
            for p in pods
        }
        return found if len(found) == n and all(found.values()) else None

    pods = wait_for(f"the {n} pods of Job {job} allocated", allocated, timeout=180)
    nodes = sorted(a.rpartition(":")[0] for a in pods.values())
    assert nodes == sorted(WORKER_NODES), pods
    for name, allocation in pods.items():
        node, _, ids = allocation.rpartition(":")
        check_pod_gpus(world, world.namespace, name, node, [int(i) for i in ids.split(",")])
