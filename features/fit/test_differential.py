"""A differential test of gpu-scheduler's own decision (decision.decide, the call Scheduler._reserve_map makes)
against the real kube-scheduler v1.34 with its default profile: random nodes, random pods already on them, random
probe pods, and for every (probe, node) both verdicts: does the pod fit that node now?

It runs on its own control plane (etcd, kube-apiserver, kube-controller-manager, kwok) with a real kube-scheduler
(features/fit/plane.py, shared with the preemption differential test), not on the session's `cluster` (that one runs
gpu-scheduler, and its scenarios expect default-scheduler pods to stay unbound). Deterministic: one fixed seed.

Per batch: K fresh kwok nodes (allocatable, labels, taints, cordons drawn at random), then pods bound straight to
them with spec.nodeName (another scheduler's name; kwok runs them). Per round: one random probe spec, one copy per
node, each pinned to its node the way the DaemonSet controller pins (a matchFields metadata.name In [node] ANDed into
every required node selector term), so that kube-scheduler judges exactly that node. Its verdict: bound, or
PodScheduled False with reason Unschedulable (its message kept) or SchedulingGated. Every copy is also a map pod as
the gpu-webhook leaves one: the round's map puts copy i (the index its name ends in) on node i, and each container
has that entry's CUDA_VISIBLE_DEVICES. gpu-scheduler's verdict is what the scheduler would do with the copy as the
apiserver stored it (defaults and admission applied), its pinning taken out again and its schedulerName gpu-scheduler:
its pods informer's view of it (decision.pod_view), queued only if decision.is_schedulable_pod, then decision.decide
over the scheduler's node cache (every Node the API lists, as decision.node_view) and the snapshot of a
scheduler.cache.Cache built as the scheduler builds its own (plane.scheduler_cache): that node cache, every Namespace
(their labels), a VolumeCache of every claim, volume, StorageClass and CSINode the API lists at the probe's time, and
every bound pod of another scheduler observed as its other-pods informer has it (the same field selector, fit.trimmed,
Cache.observe of fit.footprint: requests, ports, claims, namespace, labels, required anti-affinity, deletion). Bound to
the copy's node: it fits; the Unschedulable message is the reason.

Then the volume batches (VOLUME_BATCHES of VOLUME_ROUNDS_PER_BATCH rounds): fresh kwok nodes with their hostname
label, most with a zone label (topology.kubernetes.io/zone), room for any probe, no taint. Four StorageClasses, made
once: Immediate; WaitForFirstConsumer with a provisioner (one that never runs) and no topology limit; the same with
allowedTopologies (zone a, or zone c on some hosts); WaitForFirstConsumer with kubernetes.io/no-provisioner. In a
round every copy (one per node, pinned as above, asking nothing but its volumes) has claims of its own, made for it
and never shared: the first of each kind in turn, more at random. Bound: pre-bound by the test (the claim's
volumeName, the volume's claimRef), the binding completed by the plane's PersistentVolume controller. Immediate:
bound by that controller to the one volume its selector picks, if that one fits it, else left unbound. Unbound of a
WaitForFirstConsumer class: its selector picks only the static volumes made for its copy, so that no two copies
compete for a volume. Unbound with a selected-node (its copy's node, or another), as a scheduler leaves a claim it
had provisioned (with another claim beside it, whose write shows kube-scheduler's choice). The static volumes are
drawn at random: node affinity (none, a hostname, zones, two terms, a node name as matchFields), zone labels (none,
the node's zone or another, two zones, the beta label), size and access modes that fit the claim or not; some
ReadWriteOncePod claims are used by a pod bound to the sync node. Before the copies come, the test waits until the
controller has every volume Available and has bound the claims it is to bind (a claim still unbound after half a
second gets a new annotation: the controller's two workers race on a volume's status, and the loser would wait for its
15 s resync).

kube-scheduler's verdict on a copy with claims: bound; or, as no provisioner runs, it may choose the node and wait
in PreBind, and its choice is read where it is written: the selected-node of a claim that had none (dynamic
provisioning), the claimRef of a volume that had none naming one of the copy's claims (static binding); else
PodScheduled False, Unschedulable. The copies are deleted with their round (kube-scheduler gives up a PreBind wait
within a second of its pod's deletion; what it still holds then is nothing a later copy asks for).

Last the CSI batch (NodeVolumeLimits, CSI_ROUNDS rounds): the nodes of one more volume batch, each with the CSINode
CSI_NODES names (none; no drivers; CSI_DRIVER listed with no count; a count of 0 to 3 for CSI_DRIVER or OTHER_DRIVER),
made by the test (no kubelet runs here). In a round, each node first gets one or two pods bound to it (another
scheduler's) with claims of their own, using at most its count of each driver: claims bound to CSI volumes of either
driver or to a host path, unbound claims of a WaitForFirstConsumer class that CSI_DRIVER provisions; then its copy,
whose claims are new volumes of CSI_DRIVER (0 to 2), maybe one of the node's pods' claims, maybe an OTHER_DRIVER or
host path volume, and in the last round maybe a claim to provision (kube-scheduler then waits in PreBind). Before
the first round, kube-scheduler is shown every CSINode: the sync node's, made last, allows no volume of CSI_DRIVER,
and a pod pinned there with such a volume is made (again) until kube-scheduler refuses it for the count ("node(s)
exceed max volume count").

Last the topology batches (InterPodAffinity and PodTopologySpread; TOPOLOGY_BATCHES of TOPOLOGY_ROUNDS_PER_BATCH
rounds, drawn from a seed of their own): fresh kwok nodes with their hostname label, most with a zone label (a, b,
c), most with a disk label, some with a dedicated taint (NoSchedule, NoExecute or PreferNoSchedule), room for every
pod. Pods are placed on them (bound by nodeName, another scheduler's) in two labelled namespaces (NAMESPACE_LABELS),
each with role=placed, an app and maybe a tier label; some with a required anti-affinity term of their own (towards
an app, every probe, or placed pods; by hostname or zone; of their namespace, a list, a namespaceSelector); some
terminating (a finalizer of the test's and an annotation kwok leaves alone, then deleted). A round's probe
(`topology_probe`) asks for required pod affinity and anti-affinity terms (hostname or zone; namespaces lists,
namespaceSelector empty or by label; matchLabelKeys, mismatchLabelKeys; a term about the copy alone, the first of its
group) or DoNotSchedule constraints (maxSkew 1 or 2, minDomains, nodeAffinityPolicy and nodeTaintsPolicy Honor or
Ignore, matchLabelKeys, a selector the copy matches itself, an empty selector), maybe a nodeSelector and a
toleration of the taints. The copies must not change each other's counts, whatever kube-scheduler has bound of them
already: every copy has labels of its own (OWN_LABEL), and every selector a probe has matches placed pods only
(role=placed), or the copy alone, or the copy and placed pods but none of the round's other copies (OWN_LABEL NotIn
them). A node affinity pin would be the only domain a Honor policy counts, so copy i is pinned to node i by a host
port instead: one pod per node, in a namespace of its own and matched by no selector, holds every copy's port but its
node's (the sync node's holds all). kube-scheduler then judges every node; every other node is refused at the latest
by NodePorts, before both topology plugins, and what its message says of the copy's node is what is left when each
other node's first broken rule is taken off its counts (`node_reasons`).

A difference is allowed only where gpu-scheduler refuses the pod as asking for a rule it does not support (Dynamic
Resource Allocation claims, which no probe asks for); anything else fails with a table of the cases (a topology
case's batch, its nodes and placed pods, in build/fit-differential-topology.json). Where both refuse, the reasons
are compared too: both judge the node's own state first (cordon, taints), then node affinity, then host ports, then
resources, then topology spread, then pod affinity, stopping at the first rule the node breaks (resources: every
shortage listed; InterPodAffinity and PodTopologySpread by kube-scheduler's reasons, which gpu-scheduler's give in
parentheses: the pod's affinity, its anti-affinity, existing pods' anti-affinity; a skew, a missing topology
label). One exception kube has: NodeAffinity's PreFilter, before every filter, refuses a node that no term's
metadata.name matchFields admits ("pod affinity terms conflict"); there the node must break the affinity for
gpu-scheduler too, whatever rule it names first. Where both refuse a copy with claims, the test asks no more:
kube-scheduler's message counts nodes per reason ("node(s) didn't find available persistent volumes to bind" stands
for a missing static volume, a class without a provisioner, allowedTopologies and a selected node alike), and its
volume plugins refuse in an order of their own (a ReadWriteOncePod claim in use in Filter, after an unbound
Immediate claim in VolumeBinding's PreFilter; gpu-scheduler in PreFilter).

Agreement means something only where the cases put every rule to the test both ways: for each rule (each resource,
the pod count, host ports, nodeSelector, required node affinity, taints, cordons, InterPodAffinity,
PodTopologySpread; VOLUME_RULES: a bound claim's volume's node affinity, a static volume for a WaitForFirstConsumer
claim, allowedTopologies, a class without a provisioner, an Immediate claim bound, a selected node, VolumeZone,
ReadWriteOncePod, NodeVolumeLimits) at least MIN_EACH_WAY cases where both refuse for it and MIN_EACH_WAY where both
let the pod on a node although the rule was in play (rules_in_play, volume_rules_in_play say when: NodeVolumeLimits
where the node's CSINode has a count for the driver of one of the copy's claims). A volume rule counts as refused
where gpu-scheduler's reason names it and kube-scheduler's message says the same; the summary counts the refusals
where kube-scheduler names another. Of InterPodAffinity and PodTopologySpread, each refusal (the pod's affinity, its
anti-affinity, existing pods' anti-affinity; a skew, a missing topology label) is asked for at least MIN_EACH_WAY
times too, and the summary counts the topology cases whose verdict hangs on the terminating pods not being counted.

Before a batch's first probe, kube-scheduler is shown to have every node and pod write of the batch: a label is put on a
sync node and a marker pod bound to it, last, and a pod that needs both is bound (node events reach it in
resourceVersion order, and so do pod events its cache's handler gets; features.fit.plane.sync_node_cache). Likewise
before a volume round's copies, for its claims and volumes: a volume of the no-provisioner class is made last and a
claim only it can take, used by a pod pinned to the sync node; kube-scheduler reserves that volume only once it sees
both, and its claim and volume informers deliver in resourceVersion order (the StorageClasses are shown once, the same
way: a claim's selected-node is written only once its class is seen). The suite takes about 90 s on a busy 2-core
machine (about 35 s of it the volume batches, about 12 s the CSI batch), and the topology batches about 25 s more; its
summary goes to build/fit-differential.json.
"""

from __future__ import annotations

import collections
import concurrent.futures
import copy
import dataclasses
import functools
import json
import pathlib
import random
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pytest

from features.fit.plane import (
    CORDON_KEY,
    GPU_SCHEDULER,
    HOSTNAME,
    KUBE_SCHEDULER,
    NAMESPACE,
    PROBE_LABEL,
    ROUND_TIMEOUT,
    SYNC_NODE,
    Plane,
    bound_spec,
    container,
    create_nodes,
    delete_labelled,
    labelled,
    labelled_in,
    node_cache,
    pinned,
    running_plane,
    scheduler_cache,
    sync_node_cache,
)
from gpu_scheduling import constants, gpumap
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.informer import key_of
from gpu_scheduling.kube.sync import SyncClient
from gpu_scheduling.scheduler import decision, fit, framework, volumes
from gpu_scheduling.scheduler.plugins import node_affinity, unsupported
from hack import toolchain
from harness.controlplane import KWOK_LEAVE_ALONE, create_namespace, node_body
from harness.wait import wait_for

ROOT = pathlib.Path(__file__).resolve().parents[2]
SUMMARY = ROOT / "build" / "fit-differential.json"
SEED = 20250934
BATCHES = 8
NODES_PER_BATCH = 12
ROUNDS_PER_BATCH = 12
BATCH_LABEL = "fit-differential/batch"
WIDGET = "example.com/widget"
MIN_EACH_WAY = 5
MAP_GPUS = "0"
"""The GPU ids of every map entry (the nodes have no GPUs: the fit rules do not read them)."""

VOLUME_BATCHES = 2
VOLUME_ROUNDS_PER_BATCH = 8
ZONE = "topology.kubernetes.io/zone"
BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
ROUND_LABEL = "fit-differential/round"
COPY_LABEL = "fit-differential/copy"
"""On a static volume of a WaitForFirstConsumer class: the probe copy whose claims' selector picks it."""
CLAIM_LABEL = "fit-differential/claim"
"""On a static volume of the Immediate class: the one claim whose selector picks it."""
USER_LABEL = "fit-differential/user"
NUDGE_ANNOTATION = "fit-differential/nudge"
PROVISIONER = "example.com/fit-differential"
"""A provisioner that never runs: kube-scheduler's verdict on a claim to provision is its selected-node."""
IMMEDIATE, WFFC, TOPOLOGY, LOCAL = "fd-immediate", "fd-wffc", "fd-topology", "fd-local"
CSI_DRIVER = "csi.fit-differential.example.com"
OTHER_DRIVER = "other.fit-differential.example.com"
"""The CSI drivers of the CSI batch's volumes (no driver runs: the volumes are the test's, bound by the PersistentVolume
controller)."""
CSI_CLASS = "fd-csi"
"""WaitForFirstConsumer, provisioned by CSI_DRIVER: an unbound claim of it counts as a volume of that driver."""
CSI_ROUNDS = 4
CSI_NODES: tuple[dict[str, int | None] | None, ...] = (
    None,
    {},
    {CSI_DRIVER: 0},
    {CSI_DRIVER: 1},
    {CSI_DRIVER: 1},
    {CSI_DRIVER: 1},
    {CSI_DRIVER: 2},
    {CSI_DRIVER: 2},
    {CSI_DRIVER: 3},
    {CSI_DRIVER: None, OTHER_DRIVER: 1},
    {OTHER_DRIVER: 0},
    {CSI_DRIVER: 2, OTHER_DRIVER: 1},
)
"""The CSINode of each node of the CSI batch, in order: none (None), or its drivers, each with the volumes it may
attach (`allocatable.count`; None: the driver listed with no count, so no limit)."""
RWO, RWOP, RWX, ROX = "ReadWriteOnce", "ReadWriteOncePod", "ReadWriteMany", "ReadOnlyMany"

FITS, REFUSED, GATED = "fits", "does not fit", "gated"


# ---- the plane and kube-scheduler ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    with running_plane(tmp_path_factory.mktemp("fit-differential")) as running:
        yield running


# ---- random nodes and the pods already on them -----------------------------------------------------------------

TAINTS = (("dedicated", "gpu"), ("dedicated", "infra"), ("team", "x"), ("team", "y"))
TAINT_EFFECTS = ("NoSchedule", "NoExecute", "PreferNoSchedule")
PORTS = ((8080, "TCP"), (8080, "UDP"), (9090, "TCP"), (9090, "UDP"))
HOST_IPS = (None, None, "127.0.0.1", "10.0.0.1")


def _cpu(rng: random.Random, low: int, high: int) -> str:
    """A cpu quantity of `low`..`high` millicores, written in one of the forms the API takes."""
    milli = rng.randrange(low, high + 1, 100)
    if milli % 1000 == 0 and rng.random() < 0.7:
        return str(milli // 1000)
    if milli % 500 == 0 and rng.random() < 0.3:
        return f"{milli / 1000:g}"
    return f"{milli}m"


def _memory(rng: random.Random, low_mi: int, high_mi: int) -> str:
    mi = rng.randrange(low_mi, high_mi + 1, 128)
    if mi % 1024 == 0 and rng.random() < 0.6:
        return f"{mi // 1024}Gi"
    if rng.random() < 0.15:
        return str(mi * 2**20)
    return f"{mi}Mi"


def node_spec(rng: random.Random, name: str, batch: int) -> dict[str, Any]:
    labels = {BATCH_LABEL: str(batch)}
    if rng.random() < 0.8:
        labels["zone"] = rng.choice("abc")
    roll = rng.random()
    if roll < 0.7:
        labels["tier"] = str(rng.randint(1, 9))
    elif roll < 0.85:
        labels["tier"] = rng.choice(("gold", "x7"))
    if rng.random() < 0.7:
        labels["disk"] = rng.choice(("ssd", "hdd"))
    body = node_body(name, labels=labels)
    resources = {
        "cpu": rng.choice(("1", "2", "4", "8", "8", "16", "1500m", "3")),
        "memory": rng.choice(("1Gi", "2Gi", "4Gi", "8Gi", "16Gi", "16Gi", "32Gi", "3G")),
        "pods": str(rng.randint(2, 8)),
    }
    if rng.random() < 0.85:
        resources["ephemeral-storage"] = rng.choice(("5Gi", "10Gi", "20Gi"))
    if rng.random() < 0.6:
        resources[WIDGET] = str(rng.randint(0, 4))
    body["status"] = {"allocatable": dict(resources), "capacity": dict(resources)}
    spec: dict[str, Any] = {}
    if rng.random() < 0.15:
        keys = rng.sample(sorted({k for k, _ in TAINTS}), rng.randint(1, 2))  # unique by key and effect
        chosen = [rng.choice([t for t in TAINTS if t[0] == k]) for k in keys]
        spec["taints"] = [{"key": k, "value": v, "effect": rng.choice(TAINT_EFFECTS)} for k, v in chosen]
    if rng.random() < 0.06:
        spec["unschedulable"] = True
    body["spec"] = spec
    return body


def _requests(rng: random.Random, cpu_max: int, memory_max_mi: int, widget: float) -> dict[str, Any]:
    """Random requests of one container (and the matching limits for the extended resource, asked with chance
    `widget`)."""
    requests: dict[str, str] = {}
    if rng.random() < 0.85:
        requests["cpu"] = _cpu(rng, 100, cpu_max)
    if rng.random() < 0.8:
        requests["memory"] = _memory(rng, 128, memory_max_mi)
    if rng.random() < 0.2:
        requests["ephemeral-storage"] = rng.choice(("1Gi", "2Gi", "4Gi", "12Gi"))
    resources: dict[str, Any] = {"requests": requests}
    if rng.random() < widget:
        count = str(rng.randint(1, 3))
        requests[WIDGET] = count
        resources["limits"] = {WIDGET: count}
    return resources


def _ports(rng: random.Random, taken: set[tuple[int, str]], chance: float) -> list[dict[str, Any]]:
    """Host ports for one container; (port, protocol) unique within the pod (API validation)."""
    ports = []
    if rng.random() < chance:
        free = [p for p in PORTS if p not in taken]
        for port, protocol in rng.sample(free, min(len(free), rng.randint(1, 2))):
            taken.add((port, protocol))
            entry: dict[str, Any] = {"containerPort": port, "hostPort": port, "protocol": protocol}
            ip = rng.choice(HOST_IPS)
            if ip:
                entry["hostIP"] = ip
            ports.append(entry)
    return ports


def existing_pod(rng: random.Random, name: str, node: str) -> dict[str, Any]:
    taken: set[tuple[int, str]] = set()
    spec = bound_spec(node, _requests(rng, 1200, 2048, 0.3), _ports(rng, taken, 0.5))
    if rng.random() < 0.2:
        sidecar = container("sidecar", _requests(rng, 500, 1024, 0), _ports(rng, taken, 0.3))
        spec["initContainers"] = [dict(sidecar, restartPolicy="Always")]
    labels = {"app": rng.choice(("web", "db", "batch"))}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": spec}


# ---- random probes ---------------------------------------------------------------------------------------------


def _expression(rng: random.Random) -> dict[str, Any]:
    key = rng.choice(("zone", "tier", "disk", "zone", "tier"))
    values = {"zone": ["a", "b", "c"], "tier": [str(i) for i in range(1, 10)] + ["gold"], "disk": ["ssd", "hdd"]}[key]
    op = rng.choice(
        ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
        if key == "tier"
        else ("In", "NotIn", "Exists", "DoesNotExist")
    )
    if op in ("Exists", "DoesNotExist"):
        return {"key": key, "operator": op}
    if op in ("Gt", "Lt"):
        return {"key": key, "operator": op, "values": [str(rng.randint(0, 9))]}
    return {"key": key, "operator": op, "values": rng.sample(values, rng.randint(1, 2))}


def _term(rng: random.Random, nodes: list[str]) -> dict[str, Any]:
    term: dict[str, Any] = {}
    if rng.random() < 0.85:
        term["matchExpressions"] = [_expression(rng) for _ in range(rng.randint(1, 2))]
    if rng.random() < 0.2 or not term:
        term["matchFields"] = [
            {"key": "metadata.name", "operator": rng.choice(("In", "NotIn")), "values": [rng.choice(nodes)]}
        ]
    return term


def _tolerations(rng: random.Random) -> list[dict[str, Any]]:
    tolerations: list[dict[str, Any]] = []
    roll = rng.random()
    if roll < 0.1:
        tolerations.append({"operator": "Exists"})
    elif roll < 0.6:
        for key, value in rng.sample(TAINTS, rng.randint(1, 3)):
            kind = rng.random()
            t: dict[str, Any]
            if kind < 0.4:
                t = {"key": key, "operator": "Equal", "value": value}
            elif kind < 0.6:
                t = {"key": key, "operator": "Exists"}
            elif kind < 0.8:
                t = {"key": key, "value": value}  # operator defaults to Equal
            else:
                t = {"key": key, "operator": "Equal", "value": value + "-not"}
            if rng.random() < 0.4:
                t["effect"] = rng.choice(TAINT_EFFECTS)
            tolerations.append(t)
    if rng.random() < 0.35:
        tolerations.append({"key": CORDON_KEY, "operator": "Exists", "effect": "NoSchedule"})
    return tolerations


def probe_spec(rng: random.Random, nodes: dict[str, dict[str, str]]) -> dict[str, Any]:
    """One random probe pod spec (unpinned) for the batch's `nodes` (name -> labels). A plain one (about 1 in 2) asks
    for modest resources and of the other rules at most tolerations, a host port and a nodeSelector, so that enough
    cases fit, some of them with each rule in play."""
    taken: set[tuple[int, str]] = set()
    rich = 1.0 if rng.random() < 0.5 else 0.0
    heavy = rng.random() < 0.2 * rich
    cpu_max, memory_max = (4000, 8192) if heavy else (1000, 1024)
    spec: dict[str, Any] = {
        "schedulerName": KUBE_SCHEDULER,
        "containers": [
            container(f"c{i}", _requests(rng, cpu_max, memory_max, 0.06), _ports(rng, taken, 0.25 if rich else 0.1))
            for i in range(rng.randint(1, 2))
        ],
    }
    inits = []
    if rng.random() < 0.3:
        # A plain init container runs alone: it may ask for more than the others together.
        inits.append(
            container("init", _requests(rng, 2 * cpu_max, 2 * memory_max, 0.06), _ports(rng, taken, 0.1 * rich))
        )
    if rng.random() < 0.25:
        sidecar = container("sidecar", _requests(rng, 500, 1024, 0.06), _ports(rng, taken, 0.3 * rich))
        inits.insert(rng.randint(0, len(inits)), dict(sidecar, restartPolicy="Always"))
    if inits:
        spec["initContainers"] = inits
    if rng.random() < 0.08:
        # Pod-level requests (PodLevelResources, beta and on in v1.34): at least what the containers ask.
        asked = fit.pod_requests({"spec": spec})
        level = {}
        if rng.random() < 0.7:
            level["cpu"] = f"{asked.get('cpu', 0) + rng.randrange(0, 1500, 100)}m"
        if rng.random() < 0.7 or not level:
            level["memory"] = f"{asked.get('memory', 0) // 2**20 + rng.randrange(0, 2048, 128)}Mi"
        spec["resources"] = {"requests": level}
    if rng.random() < 0.12:
        # The labels of one node of the batch, so that some nodes match.
        like = nodes[rng.choice(list(nodes))]
        choices = {k: like[k] for k in ("zone", "disk", "tier") if k in like} or {"zone": rng.choice("abc")}
        keys = rng.sample(sorted(choices), 1 if rng.random() < 0.7 or len(choices) == 1 else 2)
        spec["nodeSelector"] = {k: choices[k] for k in keys}
    affinity: dict[str, Any] = {}
    if rng.random() < 0.3 * rich:
        terms = [_term(rng, list(nodes)) for _ in range(rng.randint(1, 2))]
        affinity["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
    if rng.random() < 0.06 * rich:
        affinity["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    elif rng.random() < 0.06 * rich:
        # Ignore: the copies are pinned by a node affinity term (which Honor, the default, would make the only
        # eligible domain); the topology batches judge Honor, with copies pinned another way.
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": "zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "web"}},
                "nodeAffinityPolicy": "Ignore",
            }
        ]
    if affinity:
        spec["affinity"] = affinity
    tolerations = _tolerations(rng)
    if tolerations:
        spec["tolerations"] = tolerations
    if rng.random() < 0.05 * rich:
        spec["schedulingGates"] = [{"name": "example.com/hold"}]
    return spec


def round_map(names: list[str]) -> str:
    """The round's map: entry i on node i, so that probe copy i (its name ends in -i) is placed on the node it is
    pinned to."""
    return "\n".join(f"{i}={name}:{MAP_GPUS}" for i, name in enumerate(names))


def seeing_gpus(spec: dict[str, Any]) -> dict[str, Any]:
    """`spec` as the gpu-webhook leaves a map pod: every container and init container has its entry's
    CUDA_VISIBLE_DEVICES (decision.decide refuses a map pod without it)."""
    spec = copy.deepcopy(spec)
    for c in [*spec.get("initContainers", []), *spec["containers"]]:
        c["env"] = [{"name": constants.CUDA_ENV, "value": MAP_GPUS}]
    return spec


def summarize(spec: dict[str, Any]) -> str:
    """A short line of what a probe asks for."""
    parts = [",".join(f"{r}={v}" for r, v in sorted(fit.pod_requests({"spec": spec}).items())) or "no requests"]
    ports = fit.host_ports({"spec": spec})
    if ports:
        parts.append("ports " + ",".join(f"{ip}:{port}/{proto}" for ip, proto, port in ports))
    if spec.get("nodeSelector"):
        parts.append("selector " + ",".join(f"{k}={v}" for k, v in spec["nodeSelector"].items()))
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required:
        parts.append("affinity " + json.dumps(required["nodeSelectorTerms"], separators=(",", ":")))
    if spec.get("tolerations"):
        parts.append(
            "tolerates "
            + ",".join(
                f"{t.get('key', '*')}{'=' + t['value'] if t.get('value') else ''}:{t.get('effect', '*')}"
                for t in spec["tolerations"]
            )
        )
    if spec.get("schedulingGates"):
        parts.append("gated")
    if (spec.get("affinity") or {}).get("podAntiAffinity"):
        parts.append("pod anti-affinity")
    if spec.get("topologySpreadConstraints"):
        parts.append("topology spread")
    return "; ".join(parts)


# ---- random volumes --------------------------------------------------------------------------------------------


def storage_classes() -> list[dict[str, Any]]:
    """The StorageClasses of the volume batches, made once: Immediate; WaitForFirstConsumer with
    `kubernetes.io/no-provisioner`; with a provisioner and allowedTopologies (zone a, or zone c on some hosts); with
    CSI_DRIVER as its provisioner (the CSI batch's); with a provisioner and no topology limit, last (the class sync
    waits for it)."""

    def storage_class(name: str, mode: str, provisioner: str, topologies: list[Any] | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": name},
            "provisioner": provisioner,
            "volumeBindingMode": mode,
            "reclaimPolicy": "Retain",
        }
        if topologies:
            body["allowedTopologies"] = topologies
        return body

    hosts = [f"v{b}-n{i}" for b in range(VOLUME_BATCHES) for i in range(0, NODES_PER_BATCH, 3)]
    return [
        storage_class(IMMEDIATE, "Immediate", PROVISIONER),
        storage_class(LOCAL, volumes.WAIT_FOR_FIRST_CONSUMER, volumes.NO_PROVISIONER),
        storage_class(
            TOPOLOGY,
            volumes.WAIT_FOR_FIRST_CONSUMER,
            PROVISIONER,
            [
                {"matchLabelExpressions": [{"key": ZONE, "values": ["a"]}]},
                {"matchLabelExpressions": [{"key": ZONE, "values": ["c"]}, {"key": HOSTNAME, "values": hosts}]},
            ],
        ),
        storage_class(CSI_CLASS, volumes.WAIT_FOR_FIRST_CONSUMER, CSI_DRIVER),
        storage_class(WFFC, volumes.WAIT_FOR_FIRST_CONSUMER, PROVISIONER),
    ]


def volume_node_spec(rng: random.Random, name: str, batch: int) -> dict[str, Any]:
    """A node of a volume batch: its hostname label, most with a zone label, room for every probe (the node rules
    are the node batches' part)."""
    labels = {BATCH_LABEL: f"v{batch}"}
    if rng.random() < 0.85:
        labels[ZONE] = rng.choice("abc")
    body = node_body(name, labels=labels)
    resources = {"cpu": "16", "memory": "32Gi", "pods": "110"}
    body["status"] = {"allocatable": dict(resources), "capacity": dict(resources)}
    body["spec"] = {}
    return body


CLAIM_KINDS = ("bound", IMMEDIATE, WFFC, TOPOLOGY, LOCAL, "selected")


def volume_recipe(rng: random.Random, first: str) -> list[dict[str, Any]]:
    """What claims a probe copy has: the first of kind `first`, maybe more of any kind; of each, how it is to be had
    (bound to a volume made for it, or unbound of a class), its size and access modes."""
    kinds = [first, *rng.choices(CLAIM_KINDS[:-1], weights=(3, 2, 2, 2, 2), k=rng.choice((0, 0, 0, 1, 1, 2)))]
    if first == "selected" and WFFC not in kinds:
        kinds.append(WFFC)  # kube-scheduler writes nothing for a claim already annotated: this one shows its choice
    return [
        {
            "kind": kind,
            "mi": 1024 * rng.choice((1, 2, 5, 10)),
            "modes": rng.choices(([RWO], [RWOP], [RWX], [RWO, ROX]), weights=(5, 3, 1, 1))[0],
        }
        for kind in kinds
    ]


def pv_body(
    name: str,
    batch: int,
    round_id: str,
    mi: int,
    modes: list[str],
    storage_class: str,
    labels: dict[str, str] | None = None,
    affinity: list[dict[str, Any]] | None = None,
    claim: str | None = None,
    driver: str | None = None,
    handle: str | None = None,
) -> dict[str, Any]:
    """A PersistentVolume: a host path, or (`driver`) a CSI volume of that driver whose handle is `handle` (by default
    its name)."""
    spec: dict[str, Any] = {
        "capacity": {"storage": f"{mi}Mi"},
        "accessModes": modes,
        "storageClassName": storage_class,
        "persistentVolumeReclaimPolicy": "Retain",
    }
    if driver:
        spec["csi"] = {"driver": driver, "volumeHandle": handle or name}
    else:
        spec["hostPath"] = {"path": f"/tmp/fit-differential/{name}"}
    if affinity:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": affinity}}
    if claim:
        spec["claimRef"] = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": NAMESPACE, "name": claim}
    meta = {"name": name, "labels": {BATCH_LABEL: f"v{batch}", ROUND_LABEL: round_id, **(labels or {})}}
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": meta, "spec": spec}


def claim_body(
    name: str,
    batch: int,
    round_id: str,
    mi: int,
    modes: list[str],
    storage_class: str,
    selector: dict[str, str] | None = None,
    volume: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": modes,
        "resources": {"requests": {"storage": f"{mi}Mi"}},
        "storageClassName": storage_class,
    }
    if selector:
        spec["selector"] = {"matchLabels": selector}
    if volume:
        spec["volumeName"] = volume
    meta = {"name": name, "labels": {BATCH_LABEL: f"v{batch}", ROUND_LABEL: round_id}}
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec}


def pv_affinity(
    rng: random.Random, node: str, zone: str | None, names: list[str], anywhere: float = 0.2
) -> list[dict[str, Any]] | None:
    """A static volume's required node affinity for a copy on `node`: none (with chance `anywhere`), its hostname
    or another's, a node's name as matchFields, its zone or another, or either of two terms."""

    def term(key: str, values: list[str]) -> dict[str, Any]:
        return {"matchExpressions": [{"key": key, "operator": "In", "values": values}]}

    other = rng.choice([n for n in names if n != node])
    if rng.random() < anywhere:
        return None
    roll = rng.uniform(0.2, 1)
    if roll < 0.32:
        return [term(HOSTNAME, [node])]
    if roll < 0.44:  # a node's name as a field (kube-scheduler matches a volume's terms to the node's labels only)
        return [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [rng.choice((node, other))]}]}]
    if roll < 0.55:
        return [term(HOSTNAME, [other])]
    if roll < 0.75:
        return [term(ZONE, sorted({zone or rng.choice("abc"), rng.choice("abc")}))]
    if roll < 0.9:
        return [term(ZONE, [rng.choice([z for z in "abc" if z != zone])])]
    return [term(HOSTNAME, [other]), term(ZONE, [rng.choice("abc")])]


def pv_zone_labels(rng: random.Random, zone: str | None, unzoned: float = 0.45) -> dict[str, str]:
    """A static volume's zone label (VolumeZone): none (with chance `unzoned`), the copy's node's zone or another,
    two zones ("__"), or the beta label."""
    here = zone or rng.choice("abc")
    if rng.random() < unzoned:
        return {}
    roll = rng.uniform(0.45, 1)
    if roll < 0.7:
        return {ZONE: here}
    if roll < 0.85:
        return {ZONE: rng.choice([z for z in "abc" if z != here])}
    if roll < 0.93:
        return {ZONE: "__".join(sorted(rng.sample("abc", 2)))}
    return {BETA_ZONE: rng.choice("abc")}


def _pv_modes(rng: random.Random, modes: list[str], fitting: bool) -> list[str]:
    """A static volume's access modes: every mode the claim asks (maybe one more; ReadWriteOncePod goes alone), or
    not."""
    if fitting:
        return modes + ([RWX] if not {RWX, RWOP} & set(modes) and rng.random() < 0.3 else [])
    return [ROX] if modes != [ROX] else [RWO]


def _pv_size(rng: random.Random, mi: int, fitting: bool) -> int:
    """A static volume's size (Mi) for a claim of `mi`: room for it, or not."""
    return mi + 1024 * rng.choice((0, 0, 1, 5)) if fitting else mi // 2


@dataclasses.dataclass
class CopyVolumes:
    """The volume objects of one probe copy (its own claims, and the static volumes made for them)."""

    claims: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    volumes: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    used: list[str] = dataclasses.field(default_factory=list)
    """Its ReadWriteOncePod claims that another pod, bound to the sync node, uses."""
    bound: list[str] = dataclasses.field(default_factory=list)
    """Its claims the PersistentVolume controller binds before the probe (pre-bound, or Immediate with a match)."""
    residents: list[list[str]] = dataclasses.field(default_factory=list)
    """Pods bound to the copy's node before it comes (another scheduler's), each by the claims it uses: what the node
    has attached (NodeVolumeLimits). Their claims are in `claims` too."""
    own: list[str] | None = None
    """The claims the copy uses, where not every one of `claims` (some are only its node's pods')."""

    def probe_claims(self) -> list[str]:
        return self.own if self.own is not None else [pvc["metadata"]["name"] for pvc in self.claims]


def copy_volumes(
    rng: random.Random,
    batch: int,
    round_id: str,
    i: int,
    node: str,
    zone: str | None,
    names: list[str],
    recipe: list[dict[str, Any]],
) -> CopyVolumes:
    """Copy i's own claims after `recipe`, for a copy pinned to `node` (in `zone`), with static volumes that fit them
    or not at random (node affinity, zone labels, size, access modes). A claim to be bound is pre-bound (its
    volumeName, the volume's claimRef); an Immediate claim's selector picks only its own volume, an unbound
    WaitForFirstConsumer claim's only the volumes of its copy, so that no two copies can take the same volume."""
    out = CopyVolumes()
    copy_id = f"{round_id}-{i}"
    for j, want in enumerate(recipe):
        claim, kind, mi, modes = f"c{round_id}-{i}-{j}", want["kind"], want["mi"], want["modes"]
        pv_modes = functools.partial(_pv_modes, rng, modes)
        pv_size = functools.partial(_pv_size, rng, mi)

        if kind == "bound":
            pv = f"pv{round_id}-{i}-{j}"
            storage_class = rng.choice(("", LOCAL, WFFC, IMMEDIATE))
            labels, affinity = pv_zone_labels(rng, zone, 0.3), pv_affinity(rng, node, zone, names, 0.35)
            out.volumes.append(
                pv_body(pv, batch, round_id, pv_size(True), pv_modes(True), storage_class, labels, affinity, claim)
            )
            out.claims.append(claim_body(claim, batch, round_id, mi, modes, storage_class, volume=pv))
            out.bound.append(claim)
        elif kind == IMMEDIATE:
            if rng.random() < 0.7:
                size_fits, modes_fit = rng.random() < 0.9, rng.random() < 0.9
                labels = {CLAIM_LABEL: claim, **pv_zone_labels(rng, zone)}
                out.volumes.append(
                    pv_body(
                        f"pv{round_id}-{i}-{j}",
                        batch,
                        round_id,
                        pv_size(size_fits),
                        pv_modes(modes_fit),
                        IMMEDIATE,
                        labels,
                        pv_affinity(rng, node, zone, names, 0.35),
                    )
                )
                if size_fits and modes_fit:
                    out.bound.append(claim)
            selector = {CLAIM_LABEL: claim}
            out.claims.append(claim_body(claim, batch, round_id, mi, modes, IMMEDIATE, selector))
        elif kind == "selected":
            # Unbound, annotated as a scheduler leaves a claim it chose a node for (this copy's node, or another);
            # its selector picks no volume, so that the PersistentVolume controller binds it to none.
            storage_class = rng.choice((LOCAL, TOPOLOGY, WFFC, WFFC))
            body = claim_body(claim, batch, round_id, mi, modes, storage_class, {COPY_LABEL: "none"})
            selected = node if rng.random() < 0.8 else rng.choice([n for n in names if n != node])
            body["metadata"]["annotations"] = {volumes.SELECTED_NODE: selected}
            out.claims.append(body)
        else:
            for k in range(rng.choice({WFFC: (0, 1, 1, 2), TOPOLOGY: (0, 1, 1), LOCAL: (0, 1, 2, 2)}[kind])):
                fitting = rng.random() < 0.9
                out.volumes.append(
                    pv_body(
                        f"pv{round_id}-{i}-{j}-{k}",
                        batch,
                        round_id,
                        pv_size(fitting),
                        pv_modes(fitting or rng.random() < 0.5),
                        kind,
                        {COPY_LABEL: copy_id, **pv_zone_labels(rng, zone)},
                        pv_affinity(rng, node, zone, names),
                    )
                )
            out.claims.append(claim_body(claim, batch, round_id, mi, modes, kind, {COPY_LABEL: copy_id}))
        if RWOP in modes and rng.random() < 0.3:
            out.used.append(claim)
    return out


def csi_node_body(node: str, batch: int, drivers: Mapping[str, int | None]) -> dict[str, Any]:
    """The CSINode of `node` (what its kubelet would write; none runs here): each driver, with `allocatable.count`
    where it has one."""
    listed = [
        {"name": d, "nodeID": node, **({"allocatable": {"count": count}} if count is not None else {})}
        for d, count in drivers.items()
    ]
    meta = {"name": node, "labels": {BATCH_LABEL: f"v{batch}"}}
    return {"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": meta, "spec": {"drivers": listed}}


def csi_limits(cache: volumes.VolumeCache, node: str) -> dict[str, int]:
    """The counts of the node's CSINode (driver -> how many volumes it may attach), as the API had it."""
    drivers = ((cache.csi_node(node) or {}).get("spec") or {}).get("drivers") or []
    return {d["name"]: d["allocatable"]["count"] for d in drivers if "count" in (d.get("allocatable") or {})}


def claim_driver(pvc: Mapping[str, Any], cache: volumes.VolumeCache) -> str | None:
    """The CSI driver a claim's volume counts against (kube-scheduler's CSILimits): a bound claim's volume's driver
    (none for a host path); an unbound claim's class's provisioner."""
    spec = pvc.get("spec") or {}
    if spec.get("volumeName"):
        pv = cache.volume(str(spec["volumeName"])) or {}
        return ((pv.get("spec") or {}).get("csi") or {}).get("driver")
    return (cache.storage_class(str(spec.get("storageClassName") or "")) or {}).get("provisioner")


def csi_copy_volumes(
    rng: random.Random,
    batch: int,
    round_id: str,
    i: int,
    node: str,
    drivers: Mapping[str, int | None],
    provision: bool,
) -> CopyVolumes:
    """Copy i of a CSI round, pinned to `node` whose CSINode lists `drivers` (driver -> count): the pods already on
    the node with their claims, and the copy's claims. Each claim is of one kind: "csi" (bound to a volume of
    CSI_DRIVER), "other" (of OTHER_DRIVER), "host" (a host path: no CSI driver), "provisioned" (unbound, of the class
    CSI_DRIVER provisions). The node's pods use at most as many volumes of a driver as its count allows, in one or
    two pods, the second maybe sharing a claim of the first (a volume counts once); the copy brings 0 to 2 new
    volumes of CSI_DRIVER (one maybe to provision, where `provision`: kube-scheduler then waits in PreBind, holding
    the copy on its node until it is deleted), maybe one of the node's pods' claims (counted once), maybe an
    OTHER_DRIVER or host path volume, maybe ("twin") a volume of its own with the handle of one the node's pods use
    (one volume: kube-scheduler counts by driver and handle).

    Sometimes the node's pods use one volume more than its count (pods bound by nodeName, or a count lowered since):
    a copy that brings no new volume of the driver still fits (CSILimits judges a driver only where the pod brings
    a volume not yet attached). Both were differences found by this test (gpu-scheduler refused them) and fixed."""
    out = CopyVolumes(own=[])
    count = drivers.get(CSI_DRIVER)
    attached = rng.randint(0, count if count is not None else 2) + (1 if rng.random() < 0.2 else 0)
    other = drivers.get(OTHER_DRIVER, 1)
    resident_kinds = ["csi" if rng.random() < 0.75 else "provisioned" for _ in range(attached)]
    if (other is None or other >= 1) and rng.random() < 0.4:
        resident_kinds.append("other")
    if rng.random() < 0.3:
        resident_kinds.append("host")
    rng.shuffle(resident_kinds)
    kinds = ["csi"] * rng.choices((0, 1, 2), weights=(1, 4, 1))[0]
    if provision and kinds and rng.random() < 0.5:
        kinds[0] = "provisioned"
    if rng.random() < 0.3:
        kinds.append("other")
    if rng.random() < 0.2:
        kinds.append("host")

    def claim(name: str, kind: str, handle: str | None = None) -> str:
        if kind == "provisioned":
            body = claim_body(name, batch, round_id, 1024, [RWO], CSI_CLASS, {COPY_LABEL: "none"})
        else:
            pv = f"pv{name[1:]}"
            driver = {"csi": CSI_DRIVER, "other": OTHER_DRIVER, "host": None}[kind]
            out.volumes.append(pv_body(pv, batch, round_id, 1024, [RWO], "", claim=name, driver=driver, handle=handle))
            body = claim_body(name, batch, round_id, 1024, [RWO], "", volume=pv)
            out.bound.append(name)
        out.claims.append(body)
        return name

    attached_claims = [claim(f"c{round_id}-{i}-a{j}", kind) for j, kind in enumerate(resident_kinds)]
    if attached_claims:
        cut = rng.randint(1, len(attached_claims))
        out.residents = [r for r in (attached_claims[:cut], attached_claims[cut:]) if r]
        if len(out.residents) == 2 and rng.random() < 0.5:
            out.residents[1].append(rng.choice(out.residents[0]))
    out.own = [claim(f"c{round_id}-{i}-{j}", kind) for j, kind in enumerate(kinds)]
    shareable = [c for c, kind in zip(attached_claims, resident_kinds, strict=True) if kind == "csi"]
    if shareable and rng.random() < 0.35:
        out.own.append(rng.choice(shareable))
    if shareable and rng.random() < 0.25:  # a twin: another PersistentVolume of the same driver and handle
        out.own.append(claim(f"c{round_id}-{i}-t", "csi", handle=f"pv{rng.choice(shareable)[1:]}"))
    if not out.own:
        out.own.append(claim(f"c{round_id}-{i}-h", "host"))
    return out


def user_pod(name: str, claims: list[str], round_id: str, node: str = SYNC_NODE) -> dict[str, Any]:
    """A pod bound to `node` (another scheduler's) that uses `claims`."""
    spec = bound_spec(node)
    spec["volumes"] = [{"name": f"v{j}", "persistentVolumeClaim": {"claimName": c}} for j, c in enumerate(claims)]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {USER_LABEL: round_id}},
        "spec": spec,
    }


def volume_probe(claims: list[str]) -> dict[str, Any]:
    """A probe copy's spec (unpinned): nothing but its claims."""
    return {
        "schedulerName": KUBE_SCHEDULER,
        "containers": [container("main", {})],
        "volumes": [{"name": f"v{j}", "persistentVolumeClaim": {"claimName": c}} for j, c in enumerate(claims)],
    }


def summarize_claims(claims: list[str], cache: volumes.VolumeCache, used: set[str]) -> str:
    """A short line of a copy's claims as the API had them: class, access modes, size; bound: the volume's node
    affinity and zone labels; unbound: how many static volumes its selector picks."""
    parts = []
    for name in claims:
        pvc = cache.claim(NAMESPACE, name) or {}
        spec = pvc.get("spec") or {}
        text = (
            f"{spec.get('storageClassName') or '-'}/{'+'.join(spec.get('accessModes') or [])}/"
            f"{volumes.requested_storage(pvc) // 2**20}Mi"
        )
        if volumes.is_bound(pvc):
            pv = cache.volume(str(spec["volumeName"])) or {}
            required = ((pv.get("spec") or {}).get("nodeAffinity") or {}).get("required") or {}
            affinity = [
                ",".join(
                    f"{e['key'].split('/')[-1]}={'|'.join(e['values'])}"
                    for e in [*t.get("matchExpressions", []), *t.get("matchFields", [])]
                )
                for t in required.get("nodeSelectorTerms") or []
            ]
            zones = [
                f"{k.split('/')[-1]}={v}"
                for k, v in (pv["metadata"].get("labels") or {}).items()
                if k in volumes.ZONE_LABELS
            ]
            text += f" bound[{' or '.join(affinity) or 'any node'}{' ' + ','.join(zones) if zones else ''}]"
            driver = ((pv.get("spec") or {}).get("csi") or {}).get("driver")
            if driver:
                text += f" csi {driver}"
        elif volumes.SELECTED_NODE in (pvc["metadata"].get("annotations") or {}):
            text += f" unbound, selected-node {pvc['metadata']['annotations'][volumes.SELECTED_NODE]}"
        else:
            text += f" unbound, {sum(_candidate(pv, pvc) for pv in cache.volumes.values())} static"
        if name in used:
            text += " in use"
        parts.append(text)
    return "claims " + "; ".join(parts)


def describe_csi(node: str, cache: volumes.VolumeCache, usage: fit.NodeUsage) -> str:
    """A short line of the node's CSINode (each driver's count) and the CSI volumes its pods use, per driver (each
    counted once); "" where the node has no CSINode."""
    csi_node = cache.csi_node(node)
    if csi_node is None:
        return ""
    counts = ",".join(
        f"{d['name']}={(d.get('allocatable') or {}).get('count', '-')}"
        for d in (csi_node.get("spec") or {}).get("drivers") or []
    )
    attached: dict[str, set[str]] = collections.defaultdict(set)
    for key in usage.claims(node):
        pvc = cache.claims.get(key)
        driver = claim_driver(pvc, cache) if pvc is not None else None
        if pvc is not None and driver:
            attached[driver].add(pvc["spec"].get("volumeName") or key)
    used = ",".join(f"{d}={len(v)}" for d, v in sorted(attached.items()))
    return f"CSINode {counts or 'no drivers'}, attached {used or 'none'}; "


def _candidate(pv: Mapping[str, Any], pvc: Mapping[str, Any]) -> bool:
    """`pv` is an Available volume the unbound claim `pvc` could be bound to on some node: of its class, with its
    selector's labels, room for it and its access modes."""
    spec, pv_spec = pvc.get("spec") or {}, pv.get("spec") or {}
    labels = (pv.get("metadata") or {}).get("labels") or {}
    wanted = ((spec.get("selector") or {}).get("matchLabels")) or {}
    return (
        (pv.get("status") or {}).get("phase") == "Available"
        and not pv_spec.get("claimRef")
        and (pv_spec.get("storageClassName") or "") == (spec.get("storageClassName") or "")
        and all(labels.get(k) == v for k, v in wanted.items())
        and volumes.requested_storage(pvc)
        <= fit.amount(fit.MEMORY, (pv_spec.get("capacity") or {})["storage"], "storage")
        and set(spec.get("accessModes") or []) <= set(pv_spec.get("accessModes") or [])
    )


# ---- the two verdicts ------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Case:
    batch: int | str
    round: int
    node: str
    probe: str
    kube: str
    kube_message: str
    gpu: str
    gpu_reason: str
    unsupported: bool = False
    affinity_refused: bool = False
    """The node breaks the pod's nodeSelector or required node affinity (whatever rule gpu-scheduler names first)."""
    rules: frozenset[str] = frozenset()
    """The rules the case puts to the test (`rules_in_play`, `volume_rules_in_play`)."""
    claim_rules: Mapping[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    """Of a volume case: the volume rules in play for each of the copy's claims."""
    volume: bool = False
    """A case of a volume batch: where both refuse, which rule each names is not compared."""
    kube_reasons: frozenset[str] | None = None
    """Of a copy of a topology batch that kube-scheduler refused: what its message says of the copy's node alone
    (`node_reasons`: kube-scheduler judged every node, and its message counts the reasons of all)."""
    terminating_decisive: bool = False
    """Of a copy of a topology batch: gpu-scheduler's verdict would be another, were the terminating pods counted."""

    @property
    def differs(self) -> bool:
        return self.kube != self.gpu

    @property
    def kube_categories(self) -> set[str]:
        """What kube-scheduler's message says the copy's node breaks."""
        return set(self.kube_reasons) if self.kube_reasons is not None else kube_categories(self.kube_message)

    @property
    def reasons_differ(self) -> bool:
        if self.kube != REFUSED or self.gpu != REFUSED or self.unsupported or self.volume:
            return False
        ours, theirs = gpu_categories(self.gpu_reason), self.kube_categories
        if theirs == {"affinity conflict"}:
            # NodeAffinity's PreFilter, which runs before every Filter (taints included), found that no term's
            # metadata.name matchFields can hold on this node.
            return not self.affinity_refused
        # Within NodeResourcesFit both list every shortage (too many pods included).
        return ours != theirs


def kube_verdict(pod: dict[str, Any]) -> tuple[str, str] | None:
    if (pod.get("spec") or {}).get("nodeName"):
        return FITS, ""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            if condition.get("reason") == "Unschedulable":
                return REFUSED, condition.get("message", "")
            if condition.get("reason") == "SchedulingGated":
                return GATED, condition.get("message", "")
    return None


def kube_volume_verdict(
    pod: dict[str, Any],
    node: str,
    copy_claims: list[str],
    claims: Mapping[str, dict[str, Any]],
    pvs: list[dict[str, Any]],
    claimed: set[str],
    selected: set[str],
) -> tuple[str, str] | None:
    """kube-scheduler's verdict on a probe copy with claims, pinned to `node`, where it is decided: bound; or, for a
    copy that waits in PreBind for its claims (no provisioner runs), the write that shows the node was chosen: the
    selected-node of a claim that had none at the probe's time (`selected` had one: dynamic provisioning), or the
    claimRef of a volume that had none before (`claimed` had one) naming one of its claims (static binding); else
    its PodScheduled condition."""
    if (pod.get("spec") or {}).get("nodeName"):
        return FITS, ""
    for name in copy_claims:
        if name in selected:
            continue
        annotations = ((claims.get(name) or {}).get("metadata") or {}).get("annotations") or {}
        if annotations.get(volumes.SELECTED_NODE) == node:
            return FITS, f"PreBind: selected-node on {name}"
    for pv in pvs:
        ref = (pv.get("spec") or {}).get("claimRef") or {}
        if pv["metadata"]["name"] not in claimed and ref.get("name") in copy_claims:
            return FITS, f"PreBind: {pv['metadata']['name']} reserved for {ref['name']}"
    return kube_verdict(pod)


_KUBE_REASONS = {
    "pod affinity terms conflict": "affinity conflict",
    "were unschedulable": "cordon",
    "had untolerated taint": "taint",
    "didn't match Pod's node affinity/selector": "affinity",
    "didn't have free ports": "ports",
    "Too many pods": "pods",
}


POD_AFFINITY = "pod affinity"
POD_ANTI_AFFINITY = "pod anti-affinity"
EXISTING_ANTI_AFFINITY = "existing pods' anti-affinity"
SPREAD = "topology spread"
SPREAD_LABEL = "topology spread: missing label"
TOPOLOGY_CATEGORIES = {
    POD_AFFINITY: "InterPodAffinity",
    POD_ANTI_AFFINITY: "InterPodAffinity",
    EXISTING_ANTI_AFFINITY: "InterPodAffinity",
    SPREAD: "PodTopologySpread",
    SPREAD_LABEL: "PodTopologySpread",
}
"""The refusals of InterPodAffinity and PodTopologySpread, each with its plugin: kube-scheduler's reasons, which
gpu-scheduler's messages give in parentheses."""
_TOPOLOGY_REASONS = (
    ("node(s) didn't match pod affinity rules", POD_AFFINITY),
    ("node(s) didn't match pod anti-affinity rules", POD_ANTI_AFFINITY),
    ("node(s) didn't satisfy existing pods anti-affinity rules", EXISTING_ANTI_AFFINITY),
    ("node(s) didn't match pod topology spread constraints (missing required label)", SPREAD_LABEL),
)
_SPREAD_REASON = re.compile(r"node\(s\) didn't match pod topology spread constraints(?! \(missing required label\))")


def topology_categories(text: str) -> set[str]:
    """The refusals of InterPodAffinity and PodTopologySpread that `text` (kube-scheduler's message, or
    gpu-scheduler's reason) names."""
    found = {category for phrase, category in _TOPOLOGY_REASONS if phrase in text}
    if _SPREAD_REASON.search(text):
        found.add(SPREAD)
    return found


def kube_categories(message: str) -> set[str]:
    """What kube-scheduler's message says the one node it judged breaks (the text before "preemption:")."""
    message = message.split("preemption:")[0]
    found = {category for text, category in _KUBE_REASONS.items() if text in message}
    found |= {f"insufficient {r}" for r in re.findall(r"Insufficient ([\w./-]+)", message)}
    found |= topology_categories(message)
    return found or {"other"}


def kube_node_counts(message: str) -> collections.Counter[str] | None:
    """kube-scheduler's message on a pod it judged on every node ("0/13 nodes are available: 1 node(s) didn't match
    pod affinity rules, 12 node(s) didn't have free ports for the requested pod ports. preemption: ..."): how many
    nodes each category of reason refused (a node short of two resources counts for each). None when it has not
    that shape."""
    head = re.match(r"0/\d+ nodes are available: (.*)", message.split("preemption:")[0].strip())
    if head is None:
        return None
    listed = head.group(1).split(". ", 1)[0].rstrip(".")
    counts: collections.Counter[str] = collections.Counter()
    for number, text in re.findall(r"(\d+) (.+?)(?=, \d+ |$)", listed):
        for category in kube_categories(text):
            counts[category] += int(number)
    return counts


def gpu_categories(reason: str) -> set[str]:
    found = topology_categories(reason)
    if found:
        return found
    if "is cordoned" in reason:
        found.add("cordon")
    elif "has taint" in reason:
        found.add("taint")
    elif "does not match the pod's" in reason:
        found.add("affinity")
    elif "host port" in reason:
        found.add("ports")
    elif "Too many pods" in reason:
        found.add("pods")
    found |= {f"insufficient {r}" for r in re.findall(r"Insufficient ([\w./-]+)", reason)}
    return found or {"other"}


RULES = (
    "cpu",
    "memory",
    "ephemeral-storage",
    WIDGET,
    "pods",
    "host port",
    "nodeSelector",
    "node affinity",
    "taint",
    "cordon",
    "InterPodAffinity",
    "PodTopologySpread",
)
"""Every node rule of the fit the cases must put to the test both ways (InterPodAffinity: the pod's required pod
affinity and anti-affinity, and placed pods' required anti-affinity; PodTopologySpread: DoNotSchedule constraints)."""

PV_AFFINITY = "bound volume's node affinity"
WFFC_STATIC = "WaitForFirstConsumer static volume"
WFFC_TOPOLOGY = "provisioning allowedTopologies"
NO_PROVISIONER = "no-provisioner class"
IMMEDIATE_UNBOUND = "Immediate claim bound"
VOLUME_ZONE = "volume zone"
RWOP_IN_USE = "ReadWriteOncePod"
SELECTED = "selected-node"
VOLUME_LIMIT = "NodeVolumeLimits"
VOLUME_RULES = (
    PV_AFFINITY,
    WFFC_STATIC,
    WFFC_TOPOLOGY,
    NO_PROVISIONER,
    IMMEDIATE_UNBOUND,
    SELECTED,
    VOLUME_ZONE,
    RWOP_IN_USE,
    VOLUME_LIMIT,
)
"""Every volume rule the volume cases must put to the test both ways: VolumeBinding (a bound claim's volume's node
affinity; an unbound WaitForFirstConsumer claim's static volume, its class's allowedTopologies, a class with no
provisioner; an Immediate claim must be bound; a claim being provisioned on a selected node), VolumeZone,
VolumeRestrictions (ReadWriteOncePod), NodeVolumeLimits (the count of a CSI driver's volumes on the node)."""
KUBE_VOLUME_REASONS = {
    PV_AFFINITY: "node(s) didn't match PersistentVolume's node affinity",
    WFFC_STATIC: "node(s) didn't find available persistent volumes to bind",
    WFFC_TOPOLOGY: "node(s) didn't find available persistent volumes to bind",
    NO_PROVISIONER: "node(s) didn't find available persistent volumes to bind",
    IMMEDIATE_UNBOUND: "pod has unbound immediate PersistentVolumeClaims",
    SELECTED: "node(s) didn't find available persistent volumes to bind",
    VOLUME_ZONE: "node(s) had no available volume zone",
    RWOP_IN_USE: "ReadWriteOncePod access mode already in-use by another pod",
    VOLUME_LIMIT: "node(s) exceed max volume count",
}
"""What kube-scheduler's message says of a node refused for each volume rule."""


POD_TERMS = ("podAffinity", "podAntiAffinity")


def rules_in_play(spec: dict[str, Any], node: dict[str, Any], usage: fit.NodeUsage) -> frozenset[str]:
    """The rules a fit of the probe (as its owner wrote `spec`) on `node` (as the API has it) has to pass: each
    resource it asks for, the pod count where it would take the node's last pod slot, its host ports where pods on
    the node already hold some, its nodeSelector and required node affinity, the node's NoSchedule and NoExecute
    taints and its cordon; InterPodAffinity where it has required pod affinity or anti-affinity terms (or, the
    caller's to add, a placed pod's required anti-affinity is about it); PodTopologySpread where it has a
    DoNotSchedule constraint."""
    name = node["metadata"]["name"]
    rules = {r for r in fit.pod_requests({"spec": spec}) if r in RULES}
    if usage.pods(name) + 1 == int(node["status"]["allocatable"]["pods"]):
        rules.add("pods")
    if fit.host_ports({"spec": spec}) and usage.ports(name):
        rules.add("host port")
    if spec.get("nodeSelector"):
        rules.add("nodeSelector")
    if ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution"):
        rules.add("node affinity")
    if any(t["effect"] in ("NoSchedule", "NoExecute") for t in node["spec"].get("taints") or []):
        rules.add("taint")
    if node["spec"].get("unschedulable"):
        rules.add("cordon")
    affinity = spec.get("affinity") or {}
    if any((affinity.get(kind) or {}).get("requiredDuringSchedulingIgnoredDuringExecution") for kind in POD_TERMS):
        rules.add("InterPodAffinity")
    if any(c.get("whenUnsatisfiable") == "DoNotSchedule" for c in spec.get("topologySpreadConstraints") or []):
        rules.add("PodTopologySpread")
    return frozenset(rules)


def volume_rules_in_play(
    claims: list[str], node: Mapping[str, Any], cache: volumes.VolumeCache
) -> dict[str, frozenset[str]]:
    """The volume rules a fit of a copy with `claims` on `node` has to pass, per claim, from the objects as the API
    had them at the probe's time: a ReadWriteOncePod claim's; an Immediate class's claim must be bound; a bound
    claim's volume's node affinity, and its zone labels where the node has a zone; an unbound WaitForFirstConsumer
    claim's static volumes (where some volume could take it on some node), its class's allowedTopologies, its
    class's lack of a provisioner; the count of the claim's CSI driver where the node's CSINode has one."""
    zoned = any(k in (node["metadata"].get("labels") or {}) for k in volumes.ZONE_LABELS)
    limits = csi_limits(cache, node["metadata"]["name"])
    found = {}
    for name in claims:
        pvc = cache.claim(NAMESPACE, name) or {}
        spec = pvc.get("spec") or {}
        class_name = spec.get("storageClassName") or ""
        storage_class = cache.storage_class(class_name) if class_name else None
        rules = {RWOP_IN_USE} if RWOP in (spec.get("accessModes") or []) else set()
        if claim_driver(pvc, cache) in limits:
            rules.add(VOLUME_LIMIT)
        wffc = (storage_class or {}).get("volumeBindingMode") == volumes.WAIT_FOR_FIRST_CONSUMER
        if storage_class is not None and not wffc:
            rules.add(IMMEDIATE_UNBOUND)
        if volumes.is_bound(pvc):
            pv = cache.volume(str(spec["volumeName"])) or {}
            if ((pv.get("spec") or {}).get("nodeAffinity") or {}).get("required"):
                rules.add(PV_AFFINITY)
            if zoned and any(k in (pv["metadata"].get("labels") or {}) for k in volumes.ZONE_LABELS):
                rules.add(VOLUME_ZONE)
        elif volumes.SELECTED_NODE in (pvc["metadata"].get("annotations") or {}):
            rules.add(SELECTED)
        elif storage_class is not None and wffc:
            if any(_candidate(pv, pvc) for pv in cache.volumes.values()):
                rules.add(WFFC_STATIC)
            if storage_class.get("allowedTopologies"):
                rules.add(WFFC_TOPOLOGY)
            if storage_class.get("provisioner") in ("", volumes.NO_PROVISIONER):
                rules.add(NO_PROVISIONER)
        found[name] = frozenset(rules)
    return found


def volume_refused_for(reason: str, claim_rules: Mapping[str, frozenset[str]]) -> set[str]:
    """The volume rules a refusal gpu-scheduler explains with `reason` names (an unbound claim with no volume on
    the node: its class's reason, and the static volume where the claim had some elsewhere)."""
    claim = re.search(r'persistentvolumeclaim "([^"]+)"', reason)
    in_play = claim_rules.get(claim.group(1), frozenset()) if claim else frozenset()
    for text, rule in (
        ("the node affinity of persistentvolume", PV_AFFINITY),
        ("is not in the zone of persistentvolume", VOLUME_ZONE),
        ("pod has unbound immediate PersistentVolumeClaims", IMMEDIATE_UNBOUND),
        ("is ReadWriteOncePod and another pod uses it", RWOP_IN_USE),
        ("is being provisioned on node", SELECTED),
        ("(node(s) exceed max volume count)", VOLUME_LIMIT),
    ):
        if text in reason:
            return {rule}
    if "has no available persistentvolume" in reason:
        found = (
            {NO_PROVISIONER}
            if "provisions none" in reason
            else {WFFC_TOPOLOGY}
            if "allowedTopologies" in reason
            else set()
        )
        return found | ({WFFC_STATIC} & in_play)
    return set()


def refused_for(reason: str) -> set[str]:
    """The rules (of RULES) a refusal gpu-scheduler explains with `reason` names: the nodeSelector told apart from
    required terms; within resources, every shortage; InterPodAffinity and PodTopologySpread by their reasons."""
    topology = {TOPOLOGY_CATEGORIES[c] for c in topology_categories(reason)}
    if topology:
        return topology
    for text, rule in (
        ("nodeSelector", "nodeSelector"),
        ("required node affinity", "node affinity"),
        ("is cordoned", "cordon"),
        ("has taint", "taint"),
        ("host port", "host port"),
    ):
        if text in reason:
            return {rule}
    found = {"pods"} if "Too many pods" in reason else set()
    return found | {c.split(" ", 1)[1] for c in gpu_categories(reason) if c.startswith("insufficient ")}


def gpu_verdict(
    pod: dict[str, Any],
    node: str,
    nodes: dict[str, dict[str, Any]],
    snap: framework.Snapshot,
    maps: gpumap.ParseCache,
) -> tuple[str, str, bool]:
    """gpu-scheduler's verdict on map pod `pod` (as its pods informer keeps it) for `node`, its entry's node, and the
    reason, as the scheduler reaches them: its pod watch queues the pod only if it is schedulable, and an attempt
    is decision.decide over the node cache and the snapshot (the NodeUsage, the volume objects). Also whether the
    refusal is for a rule it does not support."""
    if not decision.is_schedulable_pod(pod, GPU_SCHEDULER):
        return (GATED, "scheduling gates", False) if decision.is_gated(pod) else ("never tried", "", False)
    verdict = decision.decide(pod, nodes, False, snap, maps)
    if isinstance(verdict, decision.Bind):
        return (FITS, "", False) if verdict.node == node else (f"bound to {verdict.node}", "", False)
    reason = re.sub(r" \(map entry \d+\)$", "", verdict.message)
    why = unsupported.unsupported(pod)
    return REFUSED, reason, why is not None and reason == why


def breaks_affinity(pod: dict[str, Any], node: dict[str, Any]) -> bool:
    """The node breaks the pod's nodeSelector or required node affinity."""
    try:
        wanted = node_affinity.read(pod)
    except fit.FitError:
        return False
    return node_affinity.refusal(wanted, node) is not None


# ---- the run ---------------------------------------------------------------------------------------------------


def _kube_verdicts(api: SyncClient, round_id: str, copies: int) -> dict[str, tuple[str, str]]:
    """kube-scheduler's verdict on each of the round's `copies` probe copies (kube_verdict), once it has one on all."""

    def decided() -> dict[str, tuple[str, str]] | None:
        verdicts = {}
        for pod in labelled(api, PROBE_LABEL, round_id):
            verdict = kube_verdict(pod)
            if verdict is None:
                return None
            verdicts[pod["metadata"]["name"]] = verdict
        return verdicts if len(verdicts) == copies else None

    found: dict[str, tuple[str, str]] = wait_for(
        f"kube-scheduler's verdicts on round {round_id}", decided, timeout=ROUND_TIMEOUT, interval=0.1
    )
    return found


def _create_batch(api: SyncClient, rng: random.Random, batch: int) -> list[str]:
    names = [f"d{batch}-n{i}" for i in range(NODES_PER_BATCH)]
    bodies = [node_spec(rng, name, batch) for name in names]
    create_nodes(api, bodies)
    for name, body in zip(names, bodies, strict=True):
        pods = int(body["status"]["allocatable"]["pods"])
        count = rng.choice((0, 0, 0, 1, 1, 1, 2, 2, pods)) if rng.random() < 0.85 else rng.choice((0, 1, pods + 1))
        for i in range(max(0, min(count, 5))):
            api.create(paths.pods(NAMESPACE), existing_pod(rng, f"{name}-e{i}", name))
    sync_node_cache(api, batch)
    return names


def _create_volume_batch(api: SyncClient, rng: random.Random, batch: int) -> dict[str, str | None]:
    """The batch's nodes (name -> zone)."""
    bodies = [volume_node_spec(rng, f"v{batch}-n{i}", batch) for i in range(NODES_PER_BATCH)]
    create_nodes(api, bodies)
    sync_node_cache(api, f"v{batch}")
    return {b["metadata"]["name"]: b["metadata"]["labels"].get(ZONE) for b in bodies}


def _create_csi_batch(
    api: SyncClient, rng: random.Random, batch: int
) -> tuple[dict[str, str | None], dict[str, dict[str, int | None]]]:
    """The CSI batch: a volume batch's nodes, their CSINodes made before them (CSI_NODES, in order), and
    kube-scheduler shown every CSINode. The nodes (name -> zone), and each CSINode's drivers (name -> drivers)."""
    names = [f"v{batch}-n{i}" for i in range(NODES_PER_BATCH)]
    drivers = {name: d for name, d in zip(names, CSI_NODES, strict=True) if d is not None}
    _create_all(api, paths.CSI_NODE.collection(), [csi_node_body(name, batch, d) for name, d in drivers.items()])
    zones = _create_volume_batch(api, rng, batch)
    assert list(zones) == names
    _sync_csi_nodes(api, batch)
    return zones, drivers


def _sync_csi_nodes(api: SyncClient, batch: int) -> None:
    """Make sure kube-scheduler's CSINode informer has every CSINode write so far (it delivers them in
    resourceVersion order): the sync node's CSINode, made last, lets it attach no volume of CSI_DRIVER, and a pod
    pinned there with a claim bound to such a volume must be refused for the count. kube-scheduler may bind it
    before it sees that CSINode: then it is made again."""
    name = f"sync-csi-{batch}"
    api.create(paths.PERSISTENT_VOLUMES, pv_body(name, batch, name, 1024, [RWO], "", claim=name, driver=CSI_DRIVER))
    api.create(paths.persistent_volume_claims(NAMESPACE), claim_body(name, batch, name, 1024, [RWO], "", volume=name))
    _settle_volumes(api, name, {name})
    api.create(paths.CSI_NODE.collection(), csi_node_body(SYNC_NODE, batch, {CSI_DRIVER: 0}))
    body = {"metadata": {"name": name, "labels": {PROBE_LABEL: name}}, "spec": pinned(volume_probe([name]), SYNC_NODE)}
    api.create(paths.pods(NAMESPACE), body)

    def refused() -> bool | None:
        verdict = kube_verdict(api.get(paths.pod(NAMESPACE, name)))
        if verdict is not None and verdict[0] == FITS:
            delete_labelled(api, PROBE_LABEL, name)
            api.create(paths.pods(NAMESPACE), body)
            return None
        if verdict is None or KUBE_VOLUME_REASONS[VOLUME_LIMIT] not in verdict[1]:
            return None  # not yet tried, or refused for a claim or volume it has not seen yet: tried again
        return True

    wait_for("kube-scheduler to see the CSINodes", refused, timeout=ROUND_TIMEOUT, interval=0.1)
    delete_labelled(api, PROBE_LABEL, name)
    _delete_volumes(api, f"{ROUND_LABEL}={name}")


def _delete_volume_batch(api: SyncClient, batch: int, names: Iterable[str]) -> None:
    """Leave room on the 2-core machine: a volume batch's pods, claims, volumes, CSINodes and nodes go before the
    next batch comes."""
    api.delete(paths.pods(NAMESPACE), gracePeriodSeconds="0")
    _delete_volumes(api, f"{BATCH_LABEL}=v{batch}")
    api.delete(paths.CSI_NODE.collection(), labelSelector=f"{BATCH_LABEL}=v{batch}")
    for name in names:
        api.delete(paths.node(name))


def _delete_volumes(api: SyncClient, selector: str) -> None:
    """Delete the claims, then the volumes, that `selector` picks (the protection controllers let them go once no
    pod uses them)."""
    api.delete(paths.persistent_volume_claims(NAMESPACE), labelSelector=selector)
    api.delete(paths.PERSISTENT_VOLUMES, labelSelector=selector)


def _sync_storage_classes(api: SyncClient) -> None:
    """Make sure kube-scheduler has every StorageClass: one WaitForFirstConsumer claim of the class made last, and a
    pod that uses it; kube-scheduler writes the claim's selected-node only once it sees the class (else the claim
    is an unbound Immediate one to it), and its class informer delivers them in order. The claim's selector picks
    no volume (the PersistentVolume controller binds a claim with a selected-node to any volume it matches)."""
    name = "sync-classes"
    body = claim_body(name, -1, name, 1024, [RWO], WFFC, {COPY_LABEL: "none"})
    api.create(paths.persistent_volume_claims(NAMESPACE), body)
    spec = pinned(volume_probe([name]), SYNC_NODE)
    api.create(paths.pods(NAMESPACE), {"metadata": {"name": name, "labels": {PROBE_LABEL: name}}, "spec": spec})
    path = paths.persistent_volume_claim(NAMESPACE, name)
    wait_for(
        "kube-scheduler to see the StorageClasses",
        lambda: (api.get(path)["metadata"].get("annotations") or {}).get(volumes.SELECTED_NODE) == SYNC_NODE,
        timeout=ROUND_TIMEOUT,
    )
    delete_labelled(api, PROBE_LABEL, name)
    _delete_volumes(api, f"{ROUND_LABEL}={name}")


def _create_all(api: SyncClient, path: str, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Create `bodies` in collection `path`, a few at a time (each request is a connection of its own): the objects
    as the apiserver stored them, in order."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        stored = list(pool.map(lambda body: api.create(path, body), bodies))
    return [obj for obj in stored if obj is not None]


def _round_claims(api: SyncClient, round_id: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = api.get(
        paths.persistent_volume_claims(NAMESPACE), labelSelector=f"{ROUND_LABEL}={round_id}"
    )["items"]
    return items


def _round_volumes(api: SyncClient, round_id: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = api.get(paths.PERSISTENT_VOLUMES, labelSelector=f"{ROUND_LABEL}={round_id}")["items"]
    return items


def _settle_volumes(api: SyncClient, round_id: str, bound: set[str] | None = None) -> None:
    """Wait until the PersistentVolume controller has every static volume of the round (each Available, or Bound),
    and (`bound`) has bound those claims. A volume made before its claim is bound at once; but the controller's two
    workers race on the volume's status, and the loser waits for the next resync (15 s): a claim still unbound after
    half a second gets a new annotation (again every half second), an update that has the controller take it
    again."""
    started = time.monotonic()
    nudged = [0]

    def settled() -> bool:
        if bound:
            claims = _round_claims(api, round_id)
            waiting = [c for c in claims if c["metadata"]["name"] in bound and c["status"].get("phase") != "Bound"]
            if waiting and time.monotonic() - started > 0.5 * (nudged[0] + 1):
                nudged[0] += 1
                for pvc in waiting:
                    nudge = {"metadata": {"annotations": {NUDGE_ANNOTATION: str(nudged[0])}}}
                    api.patch(paths.persistent_volume_claim(NAMESPACE, pvc["metadata"]["name"]), nudge)
            if waiting:
                return False
        phases = [(pv.get("status") or {}).get("phase") for pv in _round_volumes(api, round_id)]
        return all(phase in ("Available", "Bound") for phase in phases)

    wait_for(f"the claims and volumes of round {round_id} settled", settled, timeout=ROUND_TIMEOUT, interval=0.1)


def _sync_volume_cache(api: SyncClient, batch: int, round_id: str) -> None:
    """Make sure kube-scheduler's claim and volume informers have every write of the round so far (each delivers in
    resourceVersion order): an Available static volume of a WaitForFirstConsumer class with no provisioner is made
    last, then a claim whose selector picks only it, and a pod that uses the claim; kube-scheduler reserves the
    volume for the claim (its claimRef) only once it sees the claim and the volume Available (else: the claim "not
    found", no volume "to bind", and a retry on their event)."""
    name = f"sync-{round_id}"
    labels = {COPY_LABEL: name}
    api.create(paths.PERSISTENT_VOLUMES, pv_body(name, batch, name, 1024, [RWO], LOCAL, labels))
    _settle_volumes(api, name)
    body = claim_body(name, batch, name, 1024, [RWO], LOCAL, labels)
    api.create(paths.persistent_volume_claims(NAMESPACE), body)
    spec = pinned(volume_probe([name]), SYNC_NODE)
    api.create(paths.pods(NAMESPACE), {"metadata": {"name": name, "labels": {PROBE_LABEL: name}}, "spec": spec})
    wait_for(
        "kube-scheduler to see the round's claims and volumes",
        lambda: (api.get(paths.persistent_volume(name))["spec"].get("claimRef") or {}).get("name") == name,
        timeout=ROUND_TIMEOUT,
        interval=0.1,
    )
    delete_labelled(api, PROBE_LABEL, name)


def _volume_cache(api: SyncClient) -> volumes.VolumeCache:
    """The scheduler's volume informers' caches: every claim, volume, StorageClass and CSINode the API lists."""

    def listed(path: str) -> dict[str, dict[str, Any]]:
        return {key_of(item): item for item in api.get(path)["items"]}

    return volumes.VolumeCache(
        listed(paths.PERSISTENT_VOLUME_CLAIM.collection()),
        listed(paths.PERSISTENT_VOLUMES),
        listed(paths.STORAGE_CLASSES),
        listed(paths.CSI_NODE.collection()),
    )


def _run_round(api: SyncClient, rng: random.Random, batch: int, rnd: int, names: list[str]) -> list[Case]:
    round_id = f"r{batch}-{rnd}"
    nodes = node_cache(api)
    spec = probe_spec(rng, {name: nodes[name]["metadata"].get("labels") or {} for name in names})
    cache = scheduler_cache(api, nodes)  # no volume objects in a node batch
    usage, snap = cache.usage, cache.snapshot
    maps = gpumap.ParseCache()
    mapped = seeing_gpus(spec)
    created: dict[str, tuple[str, dict[str, Any]]] = {}
    for i, name in enumerate(names):
        body = {
            "metadata": {
                "name": f"p{batch}-{rnd}-{i}",
                "labels": {PROBE_LABEL: round_id, "app": "probe"},
                "annotations": {constants.MAP_ANNOTATION: round_map(names)},
            },
            "spec": pinned(mapped, name),
        }
        stored = api.create(paths.pods(NAMESPACE), body)
        assert stored is not None
        created[stored["metadata"]["name"]] = (name, stored)

    verdicts = _kube_verdicts(api, round_id, len(created))
    cases = []
    summary = summarize(spec)
    for pod_name, (node_name, stored) in created.items():
        judged = copy.deepcopy(stored)
        # gpu-scheduler judges the pod as its owner wrote it for gpu-scheduler: the pinning taken out again.
        if "affinity" in spec:
            judged["spec"]["affinity"] = copy.deepcopy(spec["affinity"])
        else:
            judged["spec"].pop("affinity", None)
        judged["spec"]["schedulerName"] = GPU_SCHEDULER
        judged = decision.pod_view(judged)
        kube, message = verdicts[pod_name]
        gpu, reason, unsupported = gpu_verdict(judged, node_name, nodes, snap, maps)
        node = nodes[node_name]
        affinity, rules = breaks_affinity(judged, node), rules_in_play(spec, node, usage)
        cases.append(Case(batch, rnd, node_name, summary, kube, message, gpu, reason, unsupported, affinity, rules))
    # Ordering: kube-scheduler's one pod informer delivers events in resourceVersion order, so when it pops a probe
    # of the next round its cache already has every earlier pod creation and deletion (these copies gone).
    delete_labelled(api, PROBE_LABEL, round_id)
    return cases


def _run_volume_round(
    api: SyncClient, rng: random.Random, batch: int, rnd: int, zones: dict[str, str | None]
) -> list[Case]:
    """One probe copy per node of a volume batch, each with claims of its own (the first of each kind in turn, more
    at random), the static volumes made for them, and a pod that uses some of its ReadWriteOncePod claims."""
    round_id = f"v{batch}-{rnd}"
    names = list(zones)
    plans = [
        copy_volumes(
            rng,
            batch,
            round_id,
            i,
            name,
            zones[name],
            names,
            volume_recipe(rng, CLAIM_KINDS[(i + rnd) % len(CLAIM_KINDS)]),
        )
        for i, name in enumerate(names)
    ]
    return _judge_volume_copies(api, batch, rnd, round_id, zones, plans)


def _run_csi_round(
    api: SyncClient,
    rng: random.Random,
    batch: int,
    rnd: int,
    zones: dict[str, str | None],
    drivers: Mapping[str, Mapping[str, int | None]],
) -> list[Case]:
    """One probe copy per node of the CSI batch (`drivers`: the drivers of each node's CSINode), with the pods
    already on its node and their claims (csi_copy_volumes). Claims to provision only in the batch's last round:
    a copy waiting for them in PreBind would still be on its node, to kube-scheduler, when the next round's copy
    there is judged."""
    round_id = f"v{batch}-{rnd}"
    last = rnd == CSI_ROUNDS - 1
    plans = [
        csi_copy_volumes(rng, batch, round_id, i, name, drivers.get(name) or {}, last) for i, name in enumerate(zones)
    ]
    return _judge_volume_copies(api, batch, rnd, round_id, zones, plans)


def _judge_volume_copies(
    api: SyncClient, batch: int, rnd: int, round_id: str, zones: dict[str, str | None], plans: list[CopyVolumes]
) -> list[Case]:
    """A volume round after its plans (one per node of `zones`, in order): their volumes, claims and pods made and
    settled, kube-scheduler shown them, then one probe copy per node with its plan's claims, both verdicts on each
    and the copies gone."""
    names = list(zones)
    _create_all(api, paths.PERSISTENT_VOLUMES, [pv for plan in plans for pv in plan.volumes])
    _settle_volumes(api, round_id)
    # The claims to be bound first: the PersistentVolume controller takes claims one at a time, and writes for the
    # others too (events, provisioning annotations) that no scheduler reads.
    claims = [pvc for plan in plans for pvc in plan.claims]
    bound = {claim for plan in plans for claim in plan.bound}
    claims.sort(key=lambda pvc: pvc["metadata"]["name"] not in bound)
    _create_all(api, paths.persistent_volume_claims(NAMESPACE), claims)
    users = [
        user_pod(f"u{round_id}-{i}-{j}", [c], round_id) for i, plan in enumerate(plans) for j, c in enumerate(plan.used)
    ]
    users += [
        user_pod(f"u{round_id}-{i}-r{k}", claims, round_id, name)
        for i, (name, plan) in enumerate(zip(names, plans, strict=True))
        for k, claims in enumerate(plan.residents)
    ]
    _create_all(api, paths.pods(NAMESPACE), users)
    _settle_volumes(api, round_id, bound)
    _sync_volume_cache(api, batch, round_id)

    nodes = node_cache(api)
    cache = _volume_cache(api)
    ours = scheduler_cache(api, nodes, cache)
    usage, snap = ours.usage, ours.snapshot
    claimed = {name for name, pv in cache.volumes.items() if (pv.get("spec") or {}).get("claimRef")}
    selected = {
        pvc["metadata"]["name"]
        for pvc in cache.claims.values()
        if volumes.SELECTED_NODE in (pvc["metadata"].get("annotations") or {})
    }
    maps = gpumap.ParseCache()
    bodies = [
        {
            "metadata": {
                "name": f"q{batch}-{rnd}-{i}",
                "labels": {PROBE_LABEL: round_id, "app": "probe"},
                "annotations": {constants.MAP_ANNOTATION: round_map(names)},
            },
            "spec": pinned(seeing_gpus(volume_probe(plan.probe_claims())), name),
        }
        for i, (name, plan) in enumerate(zip(names, plans, strict=True))
    ]
    created: dict[str, tuple[str, dict[str, Any], list[str], set[str]]] = {}
    stored_copies = _create_all(api, paths.pods(NAMESPACE), bodies)
    for name, plan, stored in zip(names, plans, stored_copies, strict=True):
        in_use = set(plan.used).union(*plan.residents)  # another pod uses them
        created[stored["metadata"]["name"]] = (name, stored, plan.probe_claims(), in_use)

    def decided() -> dict[str, tuple[str, str]] | None:
        pods = {p["metadata"]["name"]: p for p in labelled(api, PROBE_LABEL, round_id)}
        claims = {c["metadata"]["name"]: c for c in _round_claims(api, round_id)}
        pvs = _round_volumes(api, round_id)
        verdicts = {}
        for pod_name, (node_name, _, copy_claims, _) in created.items():
            pod = pods.get(pod_name)
            verdict = (
                None
                if pod is None
                else kube_volume_verdict(pod, node_name, copy_claims, claims, pvs, claimed, selected)
            )
            if verdict is None:
                return None
            verdicts[pod_name] = verdict
        return verdicts

    verdicts = wait_for(f"kube-scheduler's verdicts on round {round_id}", decided, timeout=ROUND_TIMEOUT, interval=0.1)
    cases = []
    for pod_name, (node_name, stored, copy_claims, used) in created.items():
        judged = copy.deepcopy(stored)
        judged["spec"].pop("affinity", None)  # the pinning taken out again
        judged["spec"]["schedulerName"] = GPU_SCHEDULER
        judged = decision.pod_view(judged)
        kube, message = verdicts[pod_name]
        gpu, reason, unsupported = gpu_verdict(judged, node_name, nodes, snap, maps)
        node = nodes[node_name]
        claim_rules = volume_rules_in_play(copy_claims, node, cache)
        rules = rules_in_play(judged["spec"], node, usage).union(*claim_rules.values())
        probe = f"zone {zones[node_name] or '-'}; {describe_csi(node_name, cache, usage)}" + summarize_claims(
            copy_claims, cache, used
        )
        case = Case(f"v{batch}", rnd, node_name, probe, kube, message, gpu, reason, unsupported, False, rules)
        cases.append(dataclasses.replace(case, claim_rules=claim_rules, volume=True))
    # The copies that wait in PreBind give up once they are gone (kube-scheduler polls their claims every second);
    # they hold nothing a later copy asks for (their claims are their own, the nodes have room for every probe).
    delete_labelled(api, PROBE_LABEL, round_id)
    delete_labelled(api, USER_LABEL, round_id)
    return cases


# ---- the topology batches: InterPodAffinity and PodTopologySpread -----------------------------------------------

TOPOLOGY_BATCHES = 4
TOPOLOGY_ROUNDS_PER_BATCH = 12
OTHER_NAMESPACE = "fd-other"
BLOCKER_NAMESPACE = "fd-blockers"
NAMESPACE_LABELS = {NAMESPACE: {"env": "test", "team": "x"}, OTHER_NAMESPACE: {"env": "prod", "team": "y"}}
"""The labels of the namespaces of the placed pods (pod affinity terms' namespaceSelectors read them)."""
ROLE_LABEL = "role"
"""placed (the pods of a topology batch that the probes' terms are about) or probe (a probe copy)."""
OWN_LABEL = "fit-differential/own"
"""On a probe copy of a topology batch: a value of its own (its round and index), no other pod has."""
PLACED_LABEL = "fit-differential/placed"
BLOCKER_LABEL = "fit-differential/blocker"
APPS = ("web", "db", "cache")
HOLD_FINALIZER = "example.com/fit-differential-hold"
KWOK_STATUS = KWOK_LEAVE_ALONE
"""kwok leaves a pod with this annotation alone (harness.controlplane): deleted with a finalizer, it stays
terminating (kwok would take the finalizer off)."""
PIN_PORT = 30100
"""Copy i of a topology round asks for host port PIN_PORT + i, which a blocker pod holds on every node but node i."""
OTHERS = "<the round's other copies>"
"""In a probe's template: the values of a NotIn on OWN_LABEL, every other copy of the round (`_for_copy`)."""
TOPOLOGY_WORLDS = ROOT / "build" / "fit-differential-topology.json"


def topology_node_spec(rng: random.Random, name: str, batch: int) -> dict[str, Any]:
    """A node of a topology batch: its hostname label, most with a zone label (ZONE: a, b or c) and a disk label,
    some with a taint (NoSchedule, NoExecute or PreferNoSchedule), room for every pod."""
    labels = {BATCH_LABEL: f"t{batch}"}
    if rng.random() < 0.85:
        labels[ZONE] = rng.choice("abc")
    if rng.random() < 0.8:
        labels["disk"] = rng.choice(("ssd", "ssd", "hdd"))
    body = node_body(name, labels=labels)
    resources = {"cpu": "16", "memory": "32Gi", "pods": "110"}
    body["status"] = {"allocatable": dict(resources), "capacity": dict(resources)}
    body["spec"] = {}
    if rng.random() < 0.25:
        effect = rng.choices(("NoSchedule", "NoExecute", "PreferNoSchedule"), weights=(3, 1, 1))[0]
        body["spec"]["taints"] = [{"key": "dedicated", "value": rng.choice(("gpu", "infra")), "effect": effect}]
    return body


def _namespaces_term(rng: random.Random, term: dict[str, Any]) -> None:
    """Which namespaces' pods a pod affinity term is about: its own pod's (none given), a list, a namespaceSelector
    (empty: all; by label), or a list and a selector."""
    roll = rng.random()
    if roll < 0.4:
        return
    if roll < 0.52:
        term["namespaces"] = [OTHER_NAMESPACE]
    elif roll < 0.62:
        term["namespaces"] = [NAMESPACE, OTHER_NAMESPACE]
    elif roll < 0.74:
        term["namespaceSelector"] = {}
    elif roll < 0.84:
        term["namespaceSelector"] = {"matchLabels": {"env": rng.choice(("prod", "test"))}}
    elif roll < 0.92:
        term["namespaceSelector"] = {"matchExpressions": [{"key": "team", "operator": "In", "values": ["x", "y"]}]}
    else:
        term["namespaces"] = [NAMESPACE]
        term["namespaceSelector"] = {"matchLabels": {"env": "prod"}}


def placed_anti_affinity(rng: random.Random) -> dict[str, Any]:
    """A placed pod's required anti-affinity: one term about pods of an app (the probes have one too), about every
    probe (by hostname only), or about placed pods only."""
    roll = rng.random()
    key = rng.choice((HOSTNAME, ZONE))
    if roll < 0.4:
        selector: dict[str, Any] = {"matchLabels": {"app": rng.choice(APPS)}}
    elif roll < 0.65:
        selector = {"matchExpressions": [{"key": "app", "operator": "In", "values": sorted(rng.sample(APPS, 2))}]}
    elif roll < 0.85:
        selector, key = {"matchLabels": {ROLE_LABEL: "probe"}}, HOSTNAME
    else:
        selector = {"matchLabels": {ROLE_LABEL: "placed"}}
    term = {"labelSelector": selector, "topologyKey": key}
    roll = rng.random()
    if roll < 0.2:
        term["namespaces"] = [NAMESPACE]
    elif roll < 0.35:
        term["namespaceSelector"] = {}
    elif roll < 0.5:
        term["namespaceSelector"] = {"matchLabels": {"env": rng.choice(("test", "prod"))}}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def placed_pod(rng: random.Random, name: str, node: str, batch: int) -> dict[str, Any]:
    """A pod of a topology batch bound to `node` (another scheduler's), in NAMESPACE or OTHER_NAMESPACE, with an app
    label and maybe a tier; some with required anti-affinity of their own; some to be terminating (a finalizer of
    the test's, and KWOK_STATUS)."""
    namespace = NAMESPACE if rng.random() < 0.6 else OTHER_NAMESPACE
    labels = {ROLE_LABEL: "placed", PLACED_LABEL: f"t{batch}", "app": rng.choice(APPS)}
    if rng.random() < 0.5:
        labels["tier"] = rng.choice("12")
    spec = bound_spec(node)
    if rng.random() < 0.2:
        spec["affinity"] = placed_anti_affinity(rng)
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels}
    if rng.random() < 0.12:
        meta["finalizers"] = [HOLD_FINALIZER]
        meta["annotations"] = dict(KWOK_STATUS)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def blocker_pod(name: str, node: str, batch: int, ports: Iterable[int]) -> dict[str, Any]:
    """A pod bound to `node` (another scheduler's, in BLOCKER_NAMESPACE, matched by no probe's term) holding
    `ports` on the host: the copies that ask for one of them cannot go there."""
    taken = [{"containerPort": p, "hostPort": p, "protocol": "TCP"} for p in ports]
    spec = bound_spec(node, ports=taken)
    meta = {"name": name, "namespace": BLOCKER_NAMESPACE, "labels": {BLOCKER_LABEL: f"t{batch}"}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _probe_selector(rng: random.Random) -> tuple[dict[str, Any], list[str]]:
    """A label selector of a probe's term or constraint that only placed pods can match (role=placed: never another
    probe copy, so that no copy's placement changes another's counts), and its matchLabelKeys: the placed pods of
    an app, of two apps, with or without a tier, of the probe's own app (matchLabelKeys), or all."""
    selector: dict[str, Any] = {"matchLabels": {ROLE_LABEL: "placed"}}
    roll = rng.random()
    if roll < 0.3:
        selector["matchLabels"]["app"] = rng.choice(APPS)
    elif roll < 0.48:
        selector["matchExpressions"] = [{"key": "app", "operator": "In", "values": sorted(rng.sample(APPS, 2))}]
    elif roll < 0.7:
        return selector, ["app"]
    elif roll < 0.82:
        selector["matchExpressions"] = [{"key": "tier", "operator": rng.choice(("Exists", "DoesNotExist"))}]
    return selector, []


def _pod_term(rng: random.Random, app: str, anti: bool) -> dict[str, Any]:
    """A required pod affinity (or anti-affinity) term of a probe: about placed pods (`_probe_selector`, maybe
    mismatchLabelKeys on the tier), by hostname or zone, of some namespaces; or (affinity, 1 in 8) about the copy
    itself alone (its app and matchLabelKeys on OWN_LABEL: the first pod of its group)."""
    key = rng.choice((HOSTNAME, ZONE, ZONE))
    if not anti and rng.random() < 0.12:
        own_app = app if rng.random() < 0.8 else rng.choice(APPS)
        return {"labelSelector": {"matchLabels": {"app": own_app}}, "topologyKey": key, "matchLabelKeys": [OWN_LABEL]}
    selector, keys = _probe_selector(rng)
    term: dict[str, Any] = {"labelSelector": selector, "topologyKey": key}
    if keys:
        term["matchLabelKeys"] = keys
    if rng.random() < 0.2 and "matchExpressions" not in selector:
        term["mismatchLabelKeys"] = ["tier"]
    _namespaces_term(rng, term)
    return term


def _spread_constraint(rng: random.Random, app: str) -> dict[str, Any]:
    """A DoNotSchedule constraint of a probe: maxSkew 1 or 2, by zone or hostname, maybe minDomains, the node
    inclusion policies (absent, Honor or Ignore), a selector of placed pods (`_probe_selector`); or one the copy
    matches itself but no other copy (its app, and OWN_LABEL NotIn the round's other copies); or (1 in 8) an empty
    selector."""
    c: dict[str, Any] = {
        "maxSkew": rng.choice((1, 1, 2)),
        "topologyKey": rng.choice((ZONE, ZONE, HOSTNAME)),
        "whenUnsatisfiable": "DoNotSchedule",
    }
    roll = rng.random()
    if roll < 0.12:
        # kube-scheduler v1.34 counts no placed pod for an empty selector (countPodsMatchSelector: selector.Empty()),
        # though the copy matches it itself.
        c["labelSelector"] = {}
    elif roll < 0.22:
        c["labelSelector"] = {
            "matchLabels": {"app": app},
            "matchExpressions": [{"key": OWN_LABEL, "operator": "NotIn", "values": [OTHERS]}],
        }
    else:
        selector, keys = _probe_selector(rng)
        c["labelSelector"] = selector
        if keys:
            c["matchLabelKeys"] = keys
    if rng.random() < 0.3:
        c["minDomains"] = rng.randint(2, 4)
    for field in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
        policy = rng.choice((None, None, "Honor", "Ignore"))
        if policy:
            c[field] = policy
    return c


def topology_probe(rng: random.Random, rnd: int) -> tuple[dict[str, str], dict[str, Any]]:
    """A probe of a topology round: its labels (role=probe, an app, maybe a tier) and its spec's template (see
    `_for_copy`). Rounds take turns: required pod affinity and anti-affinity terms, or DoNotSchedule constraints;
    one in four has both. Maybe a nodeSelector on the disk label (what the node affinity policy honours or
    ignores), maybe a toleration of the dedicated taints."""
    app = rng.choice(APPS)
    labels = {ROLE_LABEL: "probe", "app": app}
    if rng.random() < 0.5:
        labels["tier"] = rng.choice("12")
    spec: dict[str, Any] = {"schedulerName": KUBE_SCHEDULER, "containers": [container("main", {})]}
    both = rng.random() < 0.25
    spreading = rnd % 2 == 1
    if not spreading or both:
        kinds = rng.choice((("podAffinity",), ("podAffinity",), ("podAntiAffinity",), POD_TERMS))
        affinity: dict[str, Any] = {}
        for kind in kinds:
            terms = [_pod_term(rng, app, kind == "podAntiAffinity") for _ in range(rng.choice((1, 1, 2)))]
            affinity[kind] = {"requiredDuringSchedulingIgnoredDuringExecution": terms}
        spec["affinity"] = affinity
    if spreading or both:
        constraints = [_spread_constraint(rng, app) for _ in range(rng.choice((1, 1, 1, 2)))]
        if len(constraints) == 2:  # one per topology key (the API refuses two of a key)
            constraints[0]["topologyKey"], constraints[1]["topologyKey"] = ZONE, HOSTNAME
        spec["topologySpreadConstraints"] = constraints
    if rng.random() < (0.35 if spreading else 0.1):
        spec["nodeSelector"] = {"disk": rng.choice(("ssd", "hdd"))}
    roll = rng.random()
    if roll < 0.35:
        spec["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
    elif roll < 0.5:
        spec["tolerations"] = [{"key": "dedicated", "operator": "Equal", "value": "gpu"}]
    return labels, spec


def _for_copy(value: Any, others: list[str]) -> Any:
    """`value` (a probe's template) for one copy: the OTHERS placeholder replaced by the other copies' OWN_LABEL
    values."""
    if isinstance(value, dict):
        return {k: _for_copy(v, others) for k, v in value.items()}
    if isinstance(value, list):
        return list(others) if value == [OTHERS] else [_for_copy(v, others) for v in value]
    return value


def node_reasons(
    message: str, pod: dict[str, Any], node: str, nodes: Mapping[str, dict[str, Any]], snap: framework.Snapshot
) -> frozenset[str]:
    """What kube-scheduler's `message` on a copy pinned to `node` by its host port says of that node alone. It
    judged every node; each other node is refused by the first rule it breaks, at the latest its blocker's port
    (NodePorts, before both topology plugins): those are taken off the message's counts. Where what is left is not
    one node's reasons, a category saying so (a wrong reason)."""
    counts = kube_node_counts(message)
    if counts is None:
        return frozenset({f"unexplained: {message}"})
    attempt = decision.cycle(pod, snap)
    if isinstance(attempt, str):
        return frozenset(kube_categories(message))
    for name, other in nodes.items():
        if name == node:
            continue
        refused = attempt.refusal(other)
        if refused is None:
            return frozenset({f"unexplained: gpu-scheduler would let the copy on {name}"})
        for category in gpu_categories(refused[1]()):
            counts[category] -= 1
    left = {category: n for category, n in counts.items() if n}
    if not left or any(n != 1 for n in left.values()):
        return frozenset({f"unexplained: {left}"})
    return frozenset(left)


def describe_node(node: Mapping[str, Any]) -> str:
    labels = node["metadata"].get("labels") or {}
    parts = [f"zone={labels.get(ZONE, '-')}", f"disk={labels.get('disk', '-')}"]
    parts += [f"taint {t['key']}={t.get('value', '')}:{t['effect']}" for t in node["spec"].get("taints") or []]
    return " ".join(parts)


def summarize_topology(pod: Mapping[str, Any]) -> str:
    """A line of what a stored copy asks of its topology (the apiserver merged its matchLabelKeys into its
    selectors): its labels but the test's, its pod affinity terms and spread constraints, nodeSelector, the
    tolerations it asked for."""
    spec = pod["spec"]
    labels = {k: v for k, v in pod["metadata"]["labels"].items() if k not in (PROBE_LABEL, OWN_LABEL)}
    shown: dict[str, Any] = {"labels": labels}
    for kind in POD_TERMS:
        terms = ((spec.get("affinity") or {}).get(kind) or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        if terms:
            shown[kind] = terms
    for field in ("topologySpreadConstraints", "nodeSelector"):
        if spec.get(field):
            shown[field] = spec[field]
    # The tolerations the probe asked for (admission adds the not-ready and unreachable ones to every pod).
    tolerations = [t for t in spec.get("tolerations") or [] if "tolerationSeconds" not in t]
    if tolerations:
        shown["tolerations"] = tolerations
    return json.dumps(shown, separators=(",", ":"))


def _create_topology_batch(api: SyncClient, rng: random.Random, batch: int) -> tuple[list[str], dict[str, Any]]:
    """The batch's nodes, the pods placed on them (some terminating), a blocker pod on every node (the sync node
    too, holding every copy's port), and kube-scheduler shown them all (`sync_node_cache`: its cache has the marker
    pod, so the earlier pods too). The node names, and the batch as the API has it (nodes, placed pods) for the
    report."""
    names = [f"t{batch}-n{i}" for i in range(NODES_PER_BATCH)]
    create_nodes(api, [topology_node_spec(rng, name, batch) for name in names])
    placed = [
        placed_pod(rng, f"t{batch}-n{i}-e{k}", name, batch)
        for i, name in enumerate(names)
        for k in range(rng.choice((0, 1, 1, 2, 2, 3)))
    ]
    for namespace in NAMESPACE_LABELS:
        _create_all(api, paths.pods(namespace), [p for p in placed if p["metadata"]["namespace"] == namespace])
    for pod in placed:
        if pod["metadata"].get("finalizers"):
            api.delete(paths.pod(pod["metadata"]["namespace"], pod["metadata"]["name"]), gracePeriodSeconds="0")
    ports = [PIN_PORT + i for i in range(len(names))]
    blockers = [
        blocker_pod(f"b{batch}-{i}", name, batch, [p for j, p in enumerate(ports) if j != i])
        for i, name in enumerate(names)
    ]
    blockers.append(blocker_pod(f"b{batch}-sync", SYNC_NODE, batch, ports))
    _create_all(api, paths.pods(BLOCKER_NAMESPACE), blockers)
    sync_node_cache(api, f"t{batch}")
    listed = [pod for namespace in NAMESPACE_LABELS for pod in labelled_in(api, namespace, f"{PLACED_LABEL}=t{batch}")]
    world = {
        "nodes": {
            n["metadata"]["name"]: {
                "labels": {k: v for k, v in (n["metadata"].get("labels") or {}).items() if k in (ZONE, "disk")},
                "taints": n["spec"].get("taints") or [],
            }
            for n in api.get(paths.NODES)["items"]
            if n["metadata"]["name"] in names
        },
        "namespaces": NAMESPACE_LABELS,
        "placed": [
            {
                "name": p["metadata"]["name"],
                "namespace": p["metadata"]["namespace"],
                "node": p["spec"]["nodeName"],
                "labels": {k: v for k, v in p["metadata"]["labels"].items() if k != PLACED_LABEL},
                **({"affinity": p["spec"]["affinity"]} if p["spec"].get("affinity") else {}),
                **({"terminating": True} if p["metadata"].get("deletionTimestamp") else {}),
            }
            for p in listed
        ],
    }
    terminating = sum(bool(p["metadata"].get("finalizers")) for p in placed)
    assert sum("terminating" in p for p in world["placed"]) == terminating, world["placed"]
    return names, world


def _delete_topology_batch(api: SyncClient, batch: int, names: Iterable[str]) -> None:
    """The batch's pods (the terminating ones let go of: their finalizer taken off) and nodes."""
    for namespace in NAMESPACE_LABELS:
        for pod in labelled_in(api, namespace, f"{PLACED_LABEL}=t{batch}"):
            if pod["metadata"].get("finalizers"):
                api.patch(paths.pod(namespace, pod["metadata"]["name"]), {"metadata": {"finalizers": None}})
        api.delete(paths.pods(namespace), labelSelector=f"{PLACED_LABEL}=t{batch}", gracePeriodSeconds="0")
    api.delete(paths.pods(BLOCKER_NAMESPACE), gracePeriodSeconds="0")

    def gone() -> bool:
        placed = any(labelled_in(api, ns, f"{PLACED_LABEL}=t{batch}") for ns in NAMESPACE_LABELS)
        return not placed and not labelled_in(api, BLOCKER_NAMESPACE, f"{BLOCKER_LABEL}=t{batch}")

    wait_for(f"the pods of topology batch {batch} deleted", gone, timeout=30)
    for name in names:
        api.delete(paths.node(name))


def _run_topology_round(api: SyncClient, rng: random.Random, batch: int, rnd: int, names: list[str]) -> list[Case]:
    """One probe spec, one copy per node of the batch, copy i pinned to node i by its host port (PIN_PORT + i: the
    blockers hold it on every other node; a node affinity pin would be the only domain a Honor policy counts), with
    labels of its own (OWN_LABEL); both verdicts on each, then the copies gone."""
    round_id = f"t{batch}-{rnd}"
    labels, template = topology_probe(rng, rnd)
    nodes = node_cache(api)
    cache = scheduler_cache(api, nodes)
    usage, snap = cache.usage, cache.snapshot
    running = scheduler_cache(api, nodes, as_if_running=True).snapshot
    maps = gpumap.ParseCache()
    owns = [f"{round_id}-{i}" for i in range(len(names))]
    bodies = []
    for i in range(len(names)):
        spec = seeing_gpus(_for_copy(template, [own for own in owns if own != owns[i]]))
        spec["containers"][0]["ports"] = [{"containerPort": PIN_PORT + i, "hostPort": PIN_PORT + i, "protocol": "TCP"}]
        meta = {
            "name": f"t{batch}-{rnd}-{i}",
            "labels": {**labels, PROBE_LABEL: round_id, OWN_LABEL: owns[i]},
            "annotations": {constants.MAP_ANNOTATION: round_map(names)},
        }
        bodies.append({"metadata": meta, "spec": spec})
    stored_copies = _create_all(api, paths.pods(NAMESPACE), bodies)
    created = {s["metadata"]["name"]: (name, s) for name, s in zip(names, stored_copies, strict=True)}

    verdicts = _kube_verdicts(api, round_id, len(created))
    # A placed pod's required anti-affinity is about the probe (its labels but OWN_LABEL, which no term names).
    towards = any(
        term.matches(NAMESPACE, labels, snap.namespace_labels(NAMESPACE))
        for _, taken in usage.with_anti_affinity()
        for term in taken.anti_affinity
    )
    cases = []
    for pod_name, (node_name, stored) in created.items():
        judged = copy.deepcopy(stored)
        judged["spec"]["schedulerName"] = GPU_SCHEDULER
        judged = decision.pod_view(judged)
        kube, message = verdicts[pod_name]
        gpu, reason, unsupported = gpu_verdict(judged, node_name, nodes, snap, maps)
        node = nodes[node_name]
        reasons = node_reasons(message, judged, node_name, nodes, snap) if kube == REFUSED else None
        # Every copy asks for a host port, free on its node: not a case of the host port rule.
        rules = rules_in_play(judged["spec"], node, usage) - {"host port"}
        if towards:
            rules |= {"InterPodAffinity"}
        probe = f"{describe_node(node)}; {summarize_topology(stored)}"
        case = Case(f"t{batch}", rnd, node_name, probe, kube, message, gpu, reason, unsupported, False, rules)
        decisive = gpu_verdict(judged, node_name, nodes, running, maps)[0] != gpu
        cases.append(dataclasses.replace(case, kube_reasons=reasons, terminating_decisive=decisive))
    delete_labelled(api, PROBE_LABEL, round_id)
    return cases


def _prepare_topology_namespaces(api: SyncClient) -> None:
    """Label the probes' namespace, make the other namespace of placed pods (labelled) and the blockers' one."""
    api.patch(paths.namespace(NAMESPACE), {"metadata": {"labels": NAMESPACE_LABELS[NAMESPACE]}})
    create_namespace(api, OTHER_NAMESPACE, labels=NAMESPACE_LABELS[OTHER_NAMESPACE])
    create_namespace(api, BLOCKER_NAMESPACE)


def _table(cases: list[Case], limit: int = 40) -> str:
    lines = ["batch round node   | probe | kube-scheduler | gpu-scheduler"]
    lines += [
        f"{c.batch:5} {c.round:5} {c.node:6} | {c.probe} | {c.kube}: {c.kube_message or '-'} | "
        f"{c.gpu}: {c.gpu_reason or '-'}"
        for c in cases[:limit]
    ]
    if len(cases) > limit:
        lines.append(f"... and {len(cases) - limit} more")
    return "\n".join(lines)


def _unsupported_rule(reason: str) -> str:
    return "resource claims" if "resourceClaims" in reason else reason


def _topology_report(cases: list[Case], worlds: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The topology cases of `cases`, each with what it was judged on: its batch's nodes and placed pods (`worlds`),
    the copy's node, what it asks, both verdicts."""
    return [
        {
            "batch": c.batch,
            "round": c.round,
            "node": c.node,
            "world": str(c.batch),
            "probe": c.probe,
            "kube_scheduler": [c.kube, c.kube_message, sorted(c.kube_categories) if c.kube == REFUSED else []],
            "gpu_scheduler": [c.gpu, c.gpu_reason],
        }
        for c in cases
        if str(c.batch) in worlds
    ]


def _refusals(cases: list[Case]) -> tuple[collections.Counter[str], collections.Counter[str]]:
    """Per rule, the cases where both refuse for it: a node rule when both name the same (`refused_for`); a volume
    rule when gpu-scheduler names it (`volume_refused_for`) and kube-scheduler's message says it. Also, per volume
    rule, the cases where both refuse, gpu-scheduler for that rule, kube-scheduler for another (not a difference:
    where both refuse, a volume case needs no more)."""
    refused: collections.Counter[str] = collections.Counter()
    otherwise: collections.Counter[str] = collections.Counter()
    for c in cases:
        if c.kube != REFUSED or c.gpu != REFUSED or c.unsupported:
            continue
        if c.volume:
            for rule in volume_refused_for(c.gpu_reason, c.claim_rules):
                (refused if KUBE_VOLUME_REASONS[rule] in c.kube_message else otherwise)[rule] += 1
        elif gpu_categories(c.gpu_reason) == c.kube_categories:
            refused.update(refused_for(c.gpu_reason))
    return refused, otherwise


def test_fit_agrees_with_kube_scheduler(plane: Plane) -> None:
    api = plane.api
    rng = random.Random(SEED)
    started = time.monotonic()
    cases: list[Case] = []
    for batch in range(BATCHES):
        names = _create_batch(api, rng, batch)
        for rnd in range(ROUNDS_PER_BATCH):
            cases += _run_round(api, rng, batch, rnd, names)
        assert plane.scheduler.running, plane.scheduler.tail()
        # Leave room on the 2-core machine: this batch's pods and nodes go before the next batch comes.
        api.delete(paths.pods(NAMESPACE), gracePeriodSeconds="0")
        for name in names:
            api.delete(paths.node(name))
    node_seconds = time.monotonic() - started
    for body in storage_classes():
        api.create(paths.STORAGE_CLASSES, body)
    _sync_storage_classes(api)
    for batch in range(VOLUME_BATCHES):
        zones = _create_volume_batch(api, rng, batch)
        for rnd in range(VOLUME_ROUNDS_PER_BATCH):
            cases += _run_volume_round(api, rng, batch, rnd, zones)
        assert plane.scheduler.running, plane.scheduler.tail()
        _delete_volume_batch(api, batch, zones)
    volume_seconds = time.monotonic() - started - node_seconds
    # The CSI batch (NodeVolumeLimits): one more volume batch, its nodes with CSINodes (csi_copy_volumes).
    csi_from = len(cases)
    zones, drivers = _create_csi_batch(api, rng, VOLUME_BATCHES)
    for rnd in range(CSI_ROUNDS):
        cases += _run_csi_round(api, rng, VOLUME_BATCHES, rnd, zones, drivers)
    assert plane.scheduler.running, plane.scheduler.tail()
    _delete_volume_batch(api, VOLUME_BATCHES, zones)
    csi_seconds = time.monotonic() - started - node_seconds - volume_seconds
    # The topology batches (InterPodAffinity, PodTopologySpread), drawn from a seed of their own.
    topology_from = len(cases)
    topology_rng = random.Random(SEED + 1)
    worlds: dict[str, Any] = {}
    _prepare_topology_namespaces(api)
    for batch in range(TOPOLOGY_BATCHES):
        names, worlds[f"t{batch}"] = _create_topology_batch(api, topology_rng, batch)
        for rnd in range(TOPOLOGY_ROUNDS_PER_BATCH):
            cases += _run_topology_round(api, topology_rng, batch, rnd, names)
        assert plane.scheduler.running, plane.scheduler.tail()
        _delete_topology_batch(api, batch, names)
    elapsed = time.monotonic() - started
    topology_seconds = elapsed - node_seconds - volume_seconds - csi_seconds

    differing = [c for c in cases if c.differs]
    wrong = [c for c in differing if not (c.unsupported and c.gpu == REFUSED)]
    wrong_reasons = [c for c in cases if c.reasons_differ]
    # Each rule both ways: cases where both refuse for it, and cases where both let the pod on although the rule was
    # in play.
    refused, otherwise = _refusals(cases)
    passed = collections.Counter(rule for c in cases if c.kube == FITS and c.gpu == FITS for rule in c.rules)
    by_rule = {rule: {"fits": passed[rule], "refused": refused[rule]} for rule in (*RULES, *VOLUME_RULES)}
    fits = sum(c.kube == FITS for c in cases)
    gated = sum(c.kube == GATED for c in cases)
    volume_cases = [c for c in cases if c.volume]
    csi_cases = cases[csi_from:topology_from]
    topology_cases = cases[topology_from:]
    # Per refusal of InterPodAffinity and PodTopologySpread (affinity, anti-affinity, existing pods' anti-affinity;
    # spread, a missing topology label): the cases where both refuse for it.
    topology_refused = collections.Counter(
        category
        for c in cases
        if c.kube == REFUSED and c.gpu == REFUSED and gpu_categories(c.gpu_reason) == c.kube_categories
        for category in gpu_categories(c.gpu_reason)
        if category in TOPOLOGY_CATEGORIES
    )
    by_reason = collections.Counter(
        f"unsupported: {_unsupported_rule(c.gpu_reason)}" if c.unsupported else "wrong" for c in differing
    )
    summary = {
        "kube_scheduler": toolchain.binary("kube-scheduler").parent.name,
        "seed": SEED,
        "batches": BATCHES,
        "rounds_per_batch": ROUNDS_PER_BATCH,
        "volume_batches": VOLUME_BATCHES,
        "volume_rounds_per_batch": VOLUME_ROUNDS_PER_BATCH,
        "csi_rounds": CSI_ROUNDS,
        "topology_batches": TOPOLOGY_BATCHES,
        "topology_rounds_per_batch": TOPOLOGY_ROUNDS_PER_BATCH,
        "nodes_per_batch": NODES_PER_BATCH,
        "cases": len(cases),
        "volume_cases": len(volume_cases),
        "csi_cases": len(csi_cases),
        "topology_cases": len(topology_cases),
        "agreements": len(cases) - len(differing),
        "differences": len(differing),
        "differences_by_reason": dict(by_reason),
        "wrong_verdicts": len(wrong),
        "wrong_reasons": len(wrong_reasons),
        "fits": fits,
        "volume_fits": sum(c.kube == FITS for c in volume_cases),
        "volume_fits_decided_in_prebind": sum(c.kube_message.startswith("PreBind") for c in volume_cases),
        "csi_fits": sum(c.kube == FITS for c in csi_cases),
        "topology_fits": sum(c.kube == FITS for c in topology_cases),
        "topology_terminating_decisive": sum(c.terminating_decisive for c in topology_cases),
        "gated": gated,
        "unsupported": sum(c.unsupported for c in cases),
        "rules": by_rule,
        "volume_refusals_kube_names_otherwise": dict(otherwise),
        "topology_refusals": {category: topology_refused[category] for category in TOPOLOGY_CATEGORIES},
        "seconds": round(elapsed, 1),
        "volume_seconds": round(volume_seconds, 1),
        "csi_seconds": round(csi_seconds, 1),
        "topology_seconds": round(topology_seconds, 1),
    }
    SUMMARY.parent.mkdir(parents=True, exist_ok=True)
    SUMMARY.write_text(json.dumps(summary, indent=2) + "\n")
    # What a topology case that went wrong was judged on (its batch's nodes and placed pods), for the report.
    report = {
        "worlds": worlds,
        "wrong": _topology_report(wrong, worlds),
        "wrong_reasons": _topology_report(wrong_reasons, worlds),
    }
    TOPOLOGY_WORLDS.write_text(json.dumps(report, indent=2) + "\n")
    shown = ", ".join(f"{rule} {n['fits']}/{n['refused']}" for rule, n in by_rule.items())
    print(
        f"\nfit differential: {len(cases)} cases ({len(volume_cases)} with volumes, {len(csi_cases)} of them with "
        f"CSINodes; {len(topology_cases)} of the topology batches), {summary['agreements']} agree, {len(differing)} "
        f"differ ({dict(by_reason)}), {len(wrong_reasons)} with other reasons; {fits} fit, {gated} gated; by rule "
        f"(fits/refused) {shown}; topology refusals {dict(summary['topology_refusals'])}; {elapsed:.0f}s "
        f"({volume_seconds:.0f}s volumes, {csi_seconds:.0f}s CSINodes, {topology_seconds:.0f}s topology)"
    )

    where = f"(a topology case's nodes and placed pods: {TOPOLOGY_WORLDS.relative_to(ROOT)})"
    problems = (
        [f"{len(wrong)} case(s) where gpu-scheduler and kube-scheduler disagree:\n{_table(wrong)}"] if wrong else []
    )
    if wrong_reasons:
        problems.append(
            f"{len(wrong_reasons)} case(s) where both refuse for different reasons:\n{_table(wrong_reasons)}"
        )
    assert not problems, f"{where}\n" + "\n\n".join(problems)
    # The cases must have put every rule to the test both ways, so that agreement means something.
    untested: dict[str, Any] = {r: n for r, n in by_rule.items() if min(n.values()) < MIN_EACH_WAY}
    # And every refusal of InterPodAffinity and PodTopologySpread, each at least MIN_EACH_WAY times.
    untested |= {r: {"refused": n} for r, n in summary["topology_refusals"].items() if n < MIN_EACH_WAY}
    assert not untested, (
        f"rules not put to the test both ways at least {MIN_EACH_WAY} times (both fit / both refuse for it): "
        f"{untested}; all: {by_rule}"
    )
    assert gated >= 1, "no probe was gated"
    assert fits >= 0.3 * len(cases), f"only {fits} of {len(cases)} cases fit"
