"""What the differential tests of features/fit share: their own control plane with the upstream kube-scheduler, kwok
nodes made and shown to it, and gpu-scheduler's view of that cluster built as the scheduler builds its own.

The plane (`running_plane`): etcd, kube-apiserver, kube-controller-manager and kwok (harness.controlplane) with a
real kube-scheduler of the pinned version, alone (no leader election), for the default profile, in front of the
namespace NAMESPACE and the node SYNC_NODE. Not the session's `cluster`: that one runs gpu-scheduler, and its
scenarios expect default-scheduler pods to stay unbound.

gpu-scheduler's view (`scheduler_cache`): a scheduler.cache.Cache over the node cache (`node_cache`: every Node, as
decision.node_view keeps it), every Namespace, the volume objects, and every bound pod of another scheduler as its
other-pods informer has it (the same field selector, fit.trimmed, Cache.observe of fit.footprint).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import pathlib
from collections.abc import Iterator, Sequence
from typing import Any

from gpu_scheduling import constants
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.informer import key_of
from gpu_scheduling.kube.sync import SyncClient
from gpu_scheduling.scheduler import decision, fit, volumes
from gpu_scheduling.scheduler.cache import Cache
from gpu_scheduling.scheduler.plugins.pod_topology_spread import HOSTNAME
from harness.components import start_kube_scheduler
from harness.controlplane import KWOK_LEAVE_ALONE, ControlPlane, create_namespace, node_ready
from harness.processes import Process
from harness.wait import wait_for

NAMESPACE = "fit-differential"
SYNC_NAMESPACE = "fit-sync"
"""Where the sync pod (`sync_node_cache`) lives: a namespace of its own, so that no selector of a round (a
PodDisruptionBudget's, an affinity term's) ever counts it."""
KUBE_SCHEDULER = "default-scheduler"
GPU_SCHEDULER = constants.DEFAULT_SCHEDULER_NAME
OTHER_SCHEDULER = "someone-else"
PROBE_LABEL = "fit-differential/probe"
SYNC_NODE = "d-sync"
SYNC_LABEL = "fit-differential/sync"
CORDON_KEY = "node.kubernetes.io/unschedulable"
ROUND_TIMEOUT = 30.0
OTHER_PODS = f"spec.schedulerName!={GPU_SCHEDULER},spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
"""The field selector of the scheduler's other-pods informer (scheduler.controller): what its NodeUsage counts."""


# ---- the plane and kube-scheduler ------------------------------------------------------------------------------


@dataclasses.dataclass
class Plane:
    cp: ControlPlane
    api: SyncClient
    scheduler: Process


@contextlib.contextmanager
def running_plane(workdir: pathlib.Path, controller_manager: Sequence[str] = ()) -> Iterator[Plane]:
    """The plane, up until the block ends. `controller_manager`: more flags of kube-controller-manager (a
    `--controllers` list replaces the plane's)."""
    # The PersistentVolume controller binds a claim with four writes: its client's default limit (20 a second) would
    # make a round wait seconds for its claims.
    limits = ["--kube-api-qps=500", "--kube-api-burst=1000", *controller_manager]
    cp = ControlPlane(workdir, extra_args={"kube-controller-manager": limits})
    cp.start()
    scheduler = None
    try:
        assert cp.api is not None
        create_namespace(cp.api, NAMESPACE)
        create_namespace(cp.api, SYNC_NAMESPACE)
        # Alone (no leader election), with a limiter high enough never to hold the probes back.
        scheduler = start_kube_scheduler(
            cp,
            cp.dir,
            kubeconfig=cp.kubeconfig,
            scheduler_name=KUBE_SCHEDULER,
            qps=1000,
            burst=1000,
            leader_election=None,
            # 2: its word that an asynchronous preemption is over (the preemption differential waits for it).
            verbosity=2,
        )
        cp.add_node(SYNC_NODE)
        yield Plane(cp, cp.api, scheduler)
    finally:
        if scheduler is not None:
            scheduler.stop()
        cp.stop()


# ---- pods and nodes on it ----------------------------------------------------------------------------------------


def container(name: str, resources: dict[str, Any], ports: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "busybox", "resources": resources}
    if ports:
        c["ports"] = ports
    return c


def bound_spec(
    node: str, resources: dict[str, Any] | None = None, ports: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The spec of a pod another scheduler bound to `node` by name, tolerating every taint: both schedulers count
    what it takes, neither places it. One container, `main`, with `resources` and `ports`."""
    return {
        "nodeName": node,
        "schedulerName": OTHER_SCHEDULER,
        "tolerations": [{"operator": "Exists"}],
        "containers": [container("main", resources or {}, ports)],
    }


def pinned(spec: dict[str, Any], node: str) -> dict[str, Any]:
    """`spec` bound to judge only `node`, as the DaemonSet controller pins its pods: the matchField ANDed into every
    required term (or one term with only it)."""
    spec = copy.deepcopy(spec)
    pin = {"key": "metadata.name", "operator": "In", "values": [node]}
    node_affinity = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {"nodeSelectorTerms": [{}]})
    for term in required["nodeSelectorTerms"]:
        term["matchFields"] = [*term.get("matchFields", []), pin]
    return spec


def labelled_in(api: SyncClient, namespace: str, selector: str) -> list[dict[str, Any]]:
    return list(api.pods(namespace, labelSelector=selector))


def labelled(api: SyncClient, label: str, value: str) -> list[dict[str, Any]]:
    return labelled_in(api, NAMESPACE, f"{label}={value}")


def delete_labelled(api: SyncClient, label: str, value: str, namespace: str = NAMESPACE) -> None:
    api.delete(paths.pods(namespace), labelSelector=f"{label}={value}", gracePeriodSeconds="0")
    wait_for(
        f"pods {label}={value} deleted",
        lambda: not labelled_in(api, namespace, f"{label}={value}") or None,
        timeout=30,
    )


def sync_node_cache(api: SyncClient, batch: int | str) -> None:
    """Make sure kube-scheduler's cache has every node and pod write of the batch so far: label the sync node and bind
    a marker pod to it, last, and wait until kube-scheduler binds a pod that needs both, the label (node affinity) and
    the marker (required pod affinity). Its node informer delivers node events in resourceVersion order, so the
    label's arrival means every earlier node write has arrived. Its one pod informer delivers pod events in order too;
    up to 1.34 to two handlers that run apart, the queue's (where the sync pod arrives) and the cache's (which places
    the bound pods), from 1.35 to one: either way the marker in the cache means the cache has every earlier pod write.
    The pods are in SYNC_NAMESPACE, and gone when this returns."""
    api.patch(paths.node(SYNC_NODE), {"metadata": {"labels": {SYNC_LABEL: str(batch)}}})
    name = f"sync-{batch}"
    marker_spec = bound_spec(SYNC_NODE)
    marker_labels = {PROBE_LABEL: name, SYNC_LABEL: str(batch)}
    marker_meta = {"name": f"{name}-marker", "labels": marker_labels, "annotations": dict(KWOK_LEAVE_ALONE)}
    api.create(paths.pods(SYNC_NAMESPACE), {"metadata": marker_meta, "spec": marker_spec})
    term = {"labelSelector": {"matchLabels": {SYNC_LABEL: str(batch)}}, "topologyKey": HOSTNAME}
    spec = {
        "schedulerName": KUBE_SCHEDULER,
        "nodeSelector": {SYNC_LABEL: str(batch)},
        "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}},
    }
    spec = pinned(spec, SYNC_NODE)
    spec["containers"] = [container("main", {})]
    body = {"metadata": {"name": name, "labels": {PROBE_LABEL: name}}, "spec": spec}
    api.create(paths.pods(SYNC_NAMESPACE), body)
    wait_for(
        "kube-scheduler to see the batch's nodes and pods",
        lambda: api.get(paths.pod(SYNC_NAMESPACE, name))["spec"].get("nodeName"),
        timeout=ROUND_TIMEOUT,
    )
    delete_labelled(api, PROBE_LABEL, name, SYNC_NAMESPACE)


def create_nodes(api: SyncClient, bodies: list[dict[str, Any]]) -> None:
    for body in bodies:
        api.create(paths.NODES, body)

    def settled(body: dict[str, Any]) -> bool:
        node = api.get(paths.node(body["metadata"]["name"]))
        taints = {t["key"] for t in node["spec"].get("taints") or []}
        return node_ready(node) and (not body["spec"].get("unschedulable") or CORDON_KEY in taints)

    for body in bodies:
        wait_for(f"node {body['metadata']['name']} Ready", functools.partial(settled, body), timeout=90)


# ---- gpu-scheduler's view ----------------------------------------------------------------------------------------


def node_cache(api: SyncClient) -> dict[str, dict[str, Any]]:
    """The scheduler's nodes informer's cache: every Node, as decision.node_view keeps it."""
    return {n["metadata"]["name"]: decision.node_view(n) for n in api.get(paths.NODES)["items"]}


def namespace_cache(api: SyncClient) -> dict[str, dict[str, Any]]:
    """The scheduler's namespaces informer's cache: every Namespace (their labels are what the rules read)."""
    return {key_of(ns): ns for ns in api.get(paths.NAMESPACES)["items"]}


def scheduler_cache(
    api: SyncClient,
    nodes: dict[str, dict[str, Any]],
    volume_cache: volumes.VolumeCache | None = None,
    as_if_running: bool = False,
) -> Cache:
    """The scheduler's cache as its informers build it (no pod here is gpu-scheduler's): the node cache `nodes`,
    the namespaces, the volume objects, and what every bound pod of another scheduler takes, its labels,
    namespace, required anti-affinity and deletion included: each pod its other-pods informer lists (the same field
    selector) kept as that informer's transform keeps it (fit.trimmed) and observed as its handler does
    (Cache.observe of fit.footprint). The probes are not there at that moment. `as_if_running`: the terminating
    pods as if they were not (to tell the cases their not being counted decides)."""
    cache = Cache(volumes=volume_cache or volumes.VolumeCache(), nodes=nodes, namespaces=namespace_cache(api))
    for pod in api.get(paths.ALL_PODS, fieldSelector=OTHER_PODS)["items"]:
        if PROBE_LABEL in (pod["metadata"].get("labels") or {}):
            continue
        view = fit.trimmed(pod)
        taken = fit.footprint(view)
        if as_if_running and taken is not None:
            taken = dataclasses.replace(taken, terminating=False)
        cache.observe(view["metadata"]["uid"], taken)
    return cache
