"""What the steps of several subjects share besides the steps themselves: the scenario's `World`, the objects the
steps create and how they read the cluster back. Plain code, no steps or fixtures (those are in
features/conftest.py, and each subject's own in its `test_<subject>.py`)."""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

import parse
from pytest_bdd import parsers

from gpu_scheduling import constants, gpumap
from gpu_scheduling.claims import objects
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import ApiError
from gpu_scheduling.kube.sync import SyncClient
from harness import manifests
from harness.components import Components
from harness.controlplane import ControlPlane
from harness.wait import wait_for

TESTBED = manifests.values()  # the inventory's values: the test-bed and the scenarios share them
TAKE_HOME_MAP: str = TESTBED["testbed_check_map"]
WORKER_NODES: tuple[str, ...] = tuple(TESTBED["testbed_worker_nodes"])
CHECK_IMAGE = os.environ.get("GPU_TEST_CHECK_IMAGE", "gpu-scheduler-check:dev")  # kwok never pulls it
# Where the KinD test-bed puts its components (inventory/localhost/group_vars/all.yml: testbed_system_namespace,
# testbed_webhook_service; roles/deploy: deploy_agent_name, deploy_scheduler_name); each carries `app: <name>`.
SYSTEM_NAMESPACE: str = TESTBED["testbed_system_namespace"]
WEBHOOK_DEPLOYMENT: str = TESTBED["testbed_webhook_service"]
AGENT_DAEMONSET: str = TESTBED["deploy_agent_name"]
SCHEDULER_DEPLOYMENT: str = TESTBED["deploy_scheduler_name"]
APP_LABEL = "app"
#: The well-known label of a node's name, which a claim's selector matches to pin it to one node.
HOSTNAME_LABEL = "kubernetes.io/hostname"


@parse.with_pattern(r'[^"]*')
def _quoted(text: str) -> str:
    return text


def step(text: str) -> parsers.StepParser:
    """A step pattern whose `{x:q}` fields match a quoted value that holds no quote of its own."""
    return parsers.parse(text, extra_types={"q": _quoted})


def path_pattern(path_of: Callable[..., str]) -> re.Pattern[str]:
    """A regular expression matching every path that `path_of` (a function of kube.paths) builds, whatever names
    it is given: `path_pattern(paths.pod_binding)` matches the binding of any pod in any namespace."""
    names = [f"NAME{i}X" for i in range(len(inspect.signature(path_of).parameters))]
    pattern = re.escape(path_of(*names))
    for name in names:
        pattern = pattern.replace(name, "[^/]+")
    return re.compile(f"^{pattern}$")


# ---- the session's cluster and the scenario's world ------------------------------------------------------------


@dataclasses.dataclass
class Cluster:
    api: SyncClient
    cp: ControlPlane | None = None  # None on an external cluster (the KinD tier)
    components: Components | None = None

    @property
    def real_kubelets(self) -> bool:
        return self.cp is None

    @property
    def kubeconfig(self) -> str:
        return self.api.kubeconfig


@dataclasses.dataclass
class World:
    """What one scenario has done so far that many steps read or undo: its namespace, the refusal of its last
    request, and what it changed on shared things. State that one Given or When hands to later steps is a
    fixture of its own (`target_fixture`: the map, the StatefulSet, the restart time)."""

    api: SyncClient
    cluster: Cluster
    namespace: str
    error: ApiError | None = None
    deleted: dict[str, str] = dataclasses.field(default_factory=dict)  # pod name -> uid, for its Leases
    held_at_deletion: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # pod name -> its GPU Leases
    added_nodes: list[str] = dataclasses.field(default_factory=list)
    node_undo: list[tuple[str, Any]] = dataclasses.field(default_factory=list)

    def attempt(self, write: Callable[[], Any]) -> Any:
        """Call `write()`; a refusal by the API is kept in `error` for a later Then instead of raised."""
        try:
            result = write()
        except ApiError as exc:
            self.error = exc
            return None
        self.error = None
        return result


@dataclasses.dataclass(frozen=True)
class StatefulSet:
    """A StatefulSet a Given or When created (or found deployed), as the later steps read it."""

    name: str
    namespace: str
    gpu_map: str = ""

    def pod(self, index: int) -> str:
        return f"{self.name}-{index}"

    @property
    def path(self) -> str:
        return paths.statefulset(self.namespace, self.name)


# ---- objects ---------------------------------------------------------------------------------------------------


def containers(image: str = CHECK_IMAGE) -> dict[str, Any]:
    """Two containers and an init container, so 'every container' is really checked."""
    common = {
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "env": [{"name": constants.NODE_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    return {
        "initContainers": [dict(common, name="init", command=["true"])],
        "containers": [dict(common, name="check"), dict(common, name="sidecar")],
    }


def pod_body(
    name: str,
    *,
    gpu_map: str | None,
    scheduler: str = constants.DEFAULT_SCHEDULER_NAME,
    generate_name: bool = False,
    tolerations: list[dict[str, Any]] | None = None,
    claim: str | None = None,
    gates: list[str] | None = None,
    requests: dict[str, str] | None = None,
    affinity_nodes: list[str] | None = None,
    node: str | None = None,
) -> dict[str, Any]:
    """A pod of the check image. `requests` go on its first container; `affinity_nodes` is a required node affinity
    naming those nodes by hostname; `node` binds it at creation (spec.nodeName: no scheduler involved)."""
    meta: dict[str, Any] = {"generateName": name} if generate_name else {"name": name}
    annotations = {}
    if gpu_map is not None:
        annotations[constants.MAP_ANNOTATION] = gpu_map
    if claim is not None:
        annotations[constants.CLAIM_ANNOTATION] = claim
    if annotations:
        meta["annotations"] = annotations
    spec = {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0, **containers()}
    if tolerations:
        spec["tolerations"] = tolerations
    if gates:
        spec["schedulingGates"] = [{"name": gate} for gate in gates]
    if requests:
        spec["containers"][0]["resources"] = {"requests": dict(requests)}
    if affinity_nodes:
        term = {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": list(affinity_nodes)}]}
        required = {"nodeSelectorTerms": [term]}
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


JOB_NAME_LABEL = "batch.kubernetes.io/job-name"  # set by the Job controller on every pod of the Job


def indexed_job_body(name: str, pods: int, annotations: dict[str, str]) -> dict[str, Any]:
    """An Indexed Job of `pods` parallel pods of the check image for this scheduler, its pod template carrying
    `annotations` (a map, or a claim and a gang)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completionMode": "Indexed",
            "completions": pods,
            "parallelism": pods,
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": dict(annotations)},
                "spec": {
                    "schedulerName": constants.DEFAULT_SCHEDULER_NAME,
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                    **containers(),
                },
            },
        },
    }


def gang_member_body(
    name: str, claim: str, size: int, topology: str | None = None, mode: str | None = None
) -> dict[str, Any]:
    """A pod naming the GpuClaim `claim` that is a member of a gang of `size` (its gang named by the claim's
    gangRef), kept inside one value of the node label `topology` (`mode`: Required or Preferred) when given."""
    body = pod_body(name, gpu_map=None, claim=claim)
    annotations = body["metadata"]["annotations"]
    annotations[constants.GANG_MIN_MEMBERS_ANNOTATION] = str(size)
    if topology is not None:
        annotations[constants.GANG_TOPOLOGY_ANNOTATION] = topology
        annotations[constants.GANG_TOPOLOGY_MODE_ANNOTATION] = mode or "Required"
    return body


def statefulset_body(name: str, replicas: int, gpu_map: str, parallel: bool = False) -> dict[str, Any]:
    labels = {APP_LABEL: name}
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
                "spec": {
                    "schedulerName": constants.DEFAULT_SCHEDULER_NAME,
                    "terminationGracePeriodSeconds": 0,
                    **containers(),
                },
            },
        },
    }


ZONE_LABEL = "testbed.gpu.scheduling/zone"
ZONES = {"node1": "a", "node2": "a", "node3": "b", "node4": "b"}
"""The zones the step 'node1 and node2 are in zone "a", ...' (conftest) gives the kwok nodes."""


def on_node(node: str) -> dict[str, Any]:
    """A claim's selector of the one node `node`."""
    return {"matchLabels": {HOSTNAME_LABEL: node}}


# ---- reading state ---------------------------------------------------------------------------------------------


def get_pod(w: World, name: str, namespace: str | None = None) -> dict[str, Any]:
    return w.api.get(paths.pod(namespace or w.namespace, name))


def running_on(w: World, name: str, node: str, namespace: str | None = None) -> dict[str, Any] | None:
    pod = get_pod(w, name, namespace)
    if pod["spec"].get("nodeName") == node and pod["status"].get("phase") == "Running":
        return pod
    return None


def started_on(w: World, name: str, node: str, namespace: str | None = None) -> dict[str, Any] | None:
    """The pod, once it runs on `node` with every one of its containers running. Phase Running needs only one: the
    kubelet starts a pod's containers one after another, so under load the others can still be starting, and
    `kubectl exec` into one of them answers "container not found"."""
    pod = running_on(w, name, node, namespace)
    if pod is None:
        return None
    statuses = {s["name"]: s for s in pod["status"].get("containerStatuses") or []}
    for c in pod["spec"]["containers"]:
        if "running" not in (statuses.get(c["name"], {}).get("state") or {}):
            return None
    return pod


def pod_ready(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def live_pods(w: World, namespace: str, app: str) -> list[dict[str, Any]]:
    """The pods labelled `app: <app>` in `namespace` that are not being deleted."""
    return [
        p
        for p in w.api.pods(namespace, labelSelector=f"{APP_LABEL}={app}")
        if not p["metadata"].get("deletionTimestamp")
    ]


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
        "in every one"
    )


def events_for(w: World, kind: str, name: str, reason: str) -> list[dict[str, Any]]:
    return [
        e
        for e in w.api.events(w.namespace)
        if e["involvedObject"].get("kind") == kind
        and e["involvedObject"].get("name") == name
        and e.get("reason") == reason
    ]


def assert_scheduled_event(w: World, pod: dict[str, Any], events: list[dict[str, Any]]) -> None:
    """`events` is the one Scheduled event gpu-scheduler records after it bound `pod`."""
    name = pod["metadata"]["name"]
    assert len(events) == 1, f"{name} has {len(events)} Scheduled events: {events}"
    assert events[0]["source"]["component"] == constants.DEFAULT_SCHEDULER_NAME, events[0]["source"]
    assert events[0]["message"] == f"Successfully assigned {w.namespace}/{name} to {pod['spec']['nodeName']}"


def assert_refused(w: World, fragment: str) -> None:
    """The last create was refused with a message containing `fragment`."""
    assert w.error is not None, "the pod was created, expected a refusal"
    assert fragment in w.error.message, w.error.message


def bindings(w: World, codes: range = range(200, 300)) -> list[dict[str, Any]]:
    """The binding requests for pods of this scenario's namespace whose response code is in `codes`, as the
    apiserver's audit log recorded them (harness.controlplane.ControlPlane.bindings)."""
    assert w.cluster.cp is not None, "bindings come from the test control plane's audit log"
    return [b for b in w.cluster.cp.bindings() if b["namespace"] == w.namespace and b["code"] in codes]


def bind_counts(w: World, codes: range = range(200, 300)) -> Counter[str]:
    """How many binding requests per pod `bindings` has."""
    return Counter(b["name"] for b in bindings(w, codes))


def leases_of(api: SyncClient, uid: str) -> list[str]:
    """The GPU Leases the pod with `uid` holds."""
    return sorted(
        lease["metadata"]["name"] for lease in api.get(paths.GPU_LEASES)["items"] if uid in objects.lease_holders(lease)
    )


def claim_status(w: World, name: str) -> dict[str, Any]:
    return w.api.get(paths.gpu_claim(w.namespace, name)).get("status") or {}


def pods_on_mapped_nodes(w: World, sts: StatefulSet, replicas: int) -> None:
    """`replicas` pods of `sts` Running, each on the node of its map entry with that entry's GPU ids."""
    gpu_map = gpumap.parse(sts.gpu_map)

    def all_running() -> list[dict[str, Any]] | None:
        pods = [p for p in w.api.pods(sts.namespace) if p["metadata"]["name"].startswith(sts.name)]
        if len(pods) == replicas and all(p["status"].get("phase") == "Running" for p in pods):
            return pods
        return None

    pods = wait_for(f"{replicas} pods Running", all_running, timeout=120)
    for pod in pods:
        entry = gpu_map.entry_for(gpumap.pod_index(pod["metadata"]))
        assert pod["spec"]["nodeName"] == entry.node, (pod["metadata"]["name"], pod["spec"]["nodeName"], entry)
        assert_cuda(pod, entry.cuda_visible_devices)


def logs_show(w: World, namespace: str, name: str, node: str, devices: str, iterations: int = 2) -> None:
    """The check container's log holds `iterations` complete reports naming this node and these GPUs."""
    report = f"Node Name: {node}\n{constants.CUDA_ENV}: {devices}\n---\n"

    def enough() -> str | None:
        text = w.api.text(paths.pod_log(namespace, name), container="check")
        return text if text.count(report) >= iterations else None

    text = wait_for(f"{iterations} reports in the log of {name}", enough, timeout=60, interval=1)
    foreign = [
        line for line in text.splitlines() if line.startswith(("Node Name:", constants.CUDA_ENV)) and line not in report
    ]
    assert not foreign, f"{name} logged other values: {foreign[:4]}"


def scale(w: World, sts: StatefulSet, replicas: int) -> dict[str, tuple[str, str]]:
    """Scale `sts` to `replicas`; returns its pods as they were before: name -> (uid, node)."""
    before = {
        p["metadata"]["name"]: (p["metadata"]["uid"], p["spec"].get("nodeName", "")) for p in w.api.pods(sts.namespace)
    }
    w.api.patch(sts.path, {"spec": {"replicas": replicas}})
    return before
