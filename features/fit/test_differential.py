"""A differential test of gpu-scheduler's own decision (decision.decide, the call Scheduler._schedule_map_pod makes)
against the real kube-scheduler v1.34 with its default profile: random nodes, random pods already on them, random
probe pods, and for every (probe, node) both verdicts: does the pod fit that node now?

It runs on its own control plane (etcd, kube-apiserver, kube-controller-manager, kwok) with a real kube-scheduler,
not on the session's `cluster` (that one runs gpu-scheduler, and its scenarios expect default-scheduler pods to stay
unbound). Deterministic: one fixed seed.

Per batch: K fresh kwok nodes (allocatable, labels, taints, cordons drawn at random), then pods bound straight to
them with spec.nodeName (another scheduler's name; kwok runs them). Per round: one random probe spec, one copy per
node, each pinned to its node the way the DaemonSet controller pins (a matchFields metadata.name In [node] ANDed into
every required node selector term), so that kube-scheduler judges exactly that node. Its verdict: bound, or
PodScheduled False with reason Unschedulable (its message kept) or SchedulingGated. Every copy is also a map pod as
the gpu-webhook leaves one: the round's map puts copy i (the index its name ends in) on node i, and each container
has that entry's CUDA_VISIBLE_DEVICES. gpu-scheduler's verdict is what the scheduler would do with the copy as the
apiserver stored it (defaults and admission applied), its pinning taken out again and its schedulerName gpu-scheduler:
its pods informer's view of it (decision.pod_view), queued only if decision.is_schedulable_pod, then decision.decide
over the scheduler's node cache (every Node the API lists, as decision.node_view) and the NodeUsage its other-pods
informer builds (the same field selector, fit.trimmed, fit.footprint). Bound to the copy's node: it fits; the
Unschedulable message is the reason.

A difference is allowed only where gpu-scheduler refuses the pod as asking for a rule it does not support
(required pod anti-affinity, DoNotSchedule topology spread); anything else fails with a table of the cases. Where
both refuse, the reasons are compared too: both judge the node's own state first (cordon, taints), then node
affinity, then host ports, then resources, stopping at the first rule the node breaks (resources: every shortage
listed). One exception kube has: NodeAffinity's PreFilter, before every filter, refuses a node that no term's
metadata.name matchFields admits ("pod affinity terms conflict"); there the node must break the affinity for
gpu-scheduler too, whatever rule it names first.

Agreement means something only where the cases put every rule to the test both ways: for each rule (each resource,
the pod count, host ports, nodeSelector, required node affinity, taints, cordons) at least MIN_EACH_WAY cases where
both refuse for it and MIN_EACH_WAY where both let the pod on a node although the rule was in play (rules_in_play
says when).

Before a batch's first probe, kube-scheduler is shown to have every node write of the batch: a label is put on a
sync node last and a pod that needs it is bound (node events reach it in resourceVersion order). The suite takes
about 50 s on 2 cores; its summary goes to build/fit-differential.json.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import functools
import json
import pathlib
import random
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gpu_scheduling import constants, gpumap
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.sync import SyncClient
from gpu_scheduling.scheduler import decision, fit
from harness.components import start_kube_scheduler
from harness.controlplane import ControlPlane, create_namespace, node_body, node_ready
from harness.processes import Process
from harness.wait import wait_for

ROOT = pathlib.Path(__file__).resolve().parents[2]
SUMMARY = ROOT / "build" / "fit-differential.json"
SEED = 20250934
BATCHES = 8
NODES_PER_BATCH = 12
ROUNDS_PER_BATCH = 12
NAMESPACE = "fit-differential"
KUBE_SCHEDULER = "default-scheduler"
GPU_SCHEDULER = constants.DEFAULT_SCHEDULER_NAME
OTHER_SCHEDULER = "someone-else"
PROBE_LABEL = "fit-differential/probe"
BATCH_LABEL = "fit-differential/batch"
SYNC_NODE = "d-sync"
SYNC_LABEL = "fit-differential/sync"
WIDGET = "example.com/widget"
CORDON_KEY = "node.kubernetes.io/unschedulable"
ROUND_TIMEOUT = 30.0
MIN_EACH_WAY = 5
MAP_GPUS = "0"
"""The GPU ids of every map entry (the nodes have no GPUs: the fit rules do not read them)."""
OTHER_PODS = f"spec.schedulerName!={GPU_SCHEDULER},spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
"""The field selector of the scheduler's other-pods informer (scheduler.controller): what its NodeUsage counts."""

FITS, REFUSED, GATED = "fits", "does not fit", "gated"


# ---- the plane and kube-scheduler ------------------------------------------------------------------------------


@dataclasses.dataclass
class Plane:
    cp: ControlPlane
    api: SyncClient
    scheduler: Process


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    cp = ControlPlane(tmp_path_factory.mktemp("fit-differential")).start()
    scheduler = None
    try:
        if not (cp.bin / "kube-scheduler").exists():
            raise RuntimeError(f"no kube-scheduler in {cp.bin}; run `make scenario-toolchain`")
        assert cp.api is not None
        create_namespace(cp.api, NAMESPACE)
        # Alone (no leader election), with a limiter high enough never to hold the probes back.
        scheduler = start_kube_scheduler(
            cp,
            cp.dir,
            kubeconfig=cp.kubeconfig,
            scheduler_name=KUBE_SCHEDULER,
            qps=1000,
            burst=1000,
            leader_election=None,
        )
        cp.add_node(SYNC_NODE)
        yield Plane(cp, cp.api, scheduler)
    finally:
        if scheduler is not None:
            scheduler.stop()
        cp.stop()


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


def container(name: str, resources: dict[str, Any], ports: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "busybox", "resources": resources}
    if ports:
        c["ports"] = ports
    return c


def existing_pod(rng: random.Random, name: str, node: str) -> dict[str, Any]:
    taken: set[tuple[int, str]] = set()
    spec: dict[str, Any] = {
        "nodeName": node,
        "schedulerName": OTHER_SCHEDULER,
        "tolerations": [{"operator": "Exists"}],
        "containers": [container("main", _requests(rng, 1200, 2048, 0.3), _ports(rng, taken, 0.5))],
    }
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
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": "zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "web"}},
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


# ---- the two verdicts ------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Case:
    batch: int
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
    """The rules the case puts to the test (`rules_in_play`)."""

    @property
    def differs(self) -> bool:
        return self.kube != self.gpu

    @property
    def reasons_differ(self) -> bool:
        if self.kube != REFUSED or self.gpu != REFUSED or self.unsupported:
            return False
        ours, theirs = gpu_categories(self.gpu_reason), kube_categories(self.kube_message)
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


_KUBE_REASONS = {
    "pod affinity terms conflict": "affinity conflict",
    "were unschedulable": "cordon",
    "had untolerated taint": "taint",
    "didn't match Pod's node affinity/selector": "affinity",
    "didn't have free ports": "ports",
    "Too many pods": "pods",
}


def kube_categories(message: str) -> set[str]:
    """What kube-scheduler's message says the one node it judged breaks (the text before "preemption:")."""
    message = message.split("preemption:")[0]
    found = {category for text, category in _KUBE_REASONS.items() if text in message}
    found |= {f"insufficient {r}" for r in re.findall(r"Insufficient ([\w./-]+)", message)}
    return found or {"other"}


def gpu_categories(reason: str) -> set[str]:
    found = set()
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
)
"""Every rule of the fit the cases must put to the test both ways."""


def rules_in_play(spec: dict[str, Any], node: dict[str, Any], usage: fit.NodeUsage) -> frozenset[str]:
    """The rules a fit of the probe (as its owner wrote `spec`) on `node` (as the API has it) has to pass: each
    resource it asks for, the pod count where it would take the node's last pod slot, its host ports where pods on
    the node already hold some, its nodeSelector and required node affinity, the node's NoSchedule and NoExecute
    taints and its cordon."""
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
    return frozenset(rules)


def refused_for(reason: str) -> set[str]:
    """The rules (of RULES) a refusal gpu-scheduler explains with `reason` names: the nodeSelector told apart from
    required terms; within resources, every shortage."""
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
    usage: fit.NodeUsage,
    maps: gpumap.ParseCache,
) -> tuple[str, str, bool]:
    """gpu-scheduler's verdict on map pod `pod` (as its pods informer keeps it) for `node`, its entry's node, and the
    reason, as the scheduler reaches them: its pod watch queues the pod only if it is schedulable, and an attempt
    is decision.decide over the node cache and the NodeUsage. Also whether the refusal is for a rule it does not
    support."""
    if not decision.is_schedulable_pod(pod, GPU_SCHEDULER):
        return (GATED, "scheduling gates", False) if decision.is_gated(pod) else ("never tried", "", False)
    verdict = decision.decide(pod, nodes, False, usage, maps)
    if isinstance(verdict, decision.Bind):
        return (FITS, "", False) if verdict.node == node else (f"bound to {verdict.node}", "", False)
    reason = re.sub(r" \(map entry \d+\)$", "", verdict.message)
    unsupported = fit.unsupported(pod)
    return REFUSED, reason, unsupported is not None and reason == unsupported


def breaks_affinity(pod: dict[str, Any], node: dict[str, Any]) -> bool:
    """The node breaks the pod's nodeSelector or required node affinity."""
    wanted = decision.pod_fit(pod)
    return not isinstance(wanted, str) and fit.affinity_problem(wanted, node) is not None


# ---- the run ---------------------------------------------------------------------------------------------------


def _labelled(api: SyncClient, label: str, value: str) -> list[dict[str, Any]]:
    return list(api.pods(NAMESPACE, labelSelector=f"{label}={value}"))


def _delete_labelled(api: SyncClient, label: str, value: str) -> None:
    api.delete(paths.pods(NAMESPACE), labelSelector=f"{label}={value}", gracePeriodSeconds="0")
    wait_for(f"pods {label}={value} deleted", lambda: not _labelled(api, label, value) or None, timeout=30)


def _sync_node_cache(api: SyncClient, batch: int) -> None:
    """Make sure kube-scheduler's node cache has every node write of the batch so far: label the sync node last and
    wait until kube-scheduler binds a pod that needs that label (its node informer delivers node events in
    resourceVersion order, so the label's arrival means every earlier node write has arrived)."""
    api.patch(paths.node(SYNC_NODE), {"metadata": {"labels": {SYNC_LABEL: str(batch)}}})
    name = f"sync-{batch}"
    spec = pinned({"schedulerName": KUBE_SCHEDULER, "nodeSelector": {SYNC_LABEL: str(batch)}}, SYNC_NODE)
    spec["containers"] = [container("main", {})]
    body = {"metadata": {"name": name, "labels": {PROBE_LABEL: name}}, "spec": spec}
    api.create(paths.pods(NAMESPACE), body)
    wait_for(
        "kube-scheduler to see the batch's nodes",
        lambda: api.get(paths.pod(NAMESPACE, name))["spec"].get("nodeName"),
        timeout=ROUND_TIMEOUT,
    )
    _delete_labelled(api, PROBE_LABEL, name)


def _create_batch(api: SyncClient, rng: random.Random, batch: int) -> list[str]:
    names = [f"d{batch}-n{i}" for i in range(NODES_PER_BATCH)]
    bodies = [node_spec(rng, name, batch) for name in names]
    for body in bodies:
        api.create(paths.NODES, body)

    def settled(body: dict[str, Any]) -> bool:
        node = api.get(paths.node(body["metadata"]["name"]))
        taints = {t["key"] for t in node["spec"].get("taints") or []}
        return node_ready(node) and (not body["spec"].get("unschedulable") or CORDON_KEY in taints)

    for body in bodies:
        wait_for(f"node {body['metadata']['name']} Ready", functools.partial(settled, body), timeout=90)
    for name, body in zip(names, bodies, strict=True):
        pods = int(body["status"]["allocatable"]["pods"])
        count = rng.choice((0, 0, 0, 1, 1, 1, 2, 2, pods)) if rng.random() < 0.85 else rng.choice((0, 1, pods + 1))
        for i in range(max(0, min(count, 5))):
            api.create(paths.pods(NAMESPACE), existing_pod(rng, f"{name}-e{i}", name))
    _sync_node_cache(api, batch)
    return names


def _node_cache(api: SyncClient) -> dict[str, dict[str, Any]]:
    """The scheduler's nodes informer's cache: every Node, as decision.node_view keeps it."""
    return {n["metadata"]["name"]: decision.node_view(n) for n in api.get(paths.NODES)["items"]}


def _usage(api: SyncClient) -> fit.NodeUsage:
    """The NodeUsage the scheduler builds from its other-pods informer (no pod here is gpu-scheduler's): what the
    bound pods of other schedulers take, each kept as fit.trimmed keeps it (the probes are not there at that
    moment)."""
    usage = fit.NodeUsage()
    for pod in api.get(paths.ALL_PODS, fieldSelector=OTHER_PODS)["items"]:
        if PROBE_LABEL in (pod["metadata"].get("labels") or {}):
            continue
        view = fit.trimmed(pod)
        usage.set(view["metadata"]["uid"], fit.footprint(view))
    return usage


def _run_round(api: SyncClient, rng: random.Random, batch: int, rnd: int, names: list[str]) -> list[Case]:
    round_id = f"r{batch}-{rnd}"
    nodes = _node_cache(api)
    spec = probe_spec(rng, {name: nodes[name]["metadata"].get("labels") or {} for name in names})
    usage = _usage(api)
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

    def decided() -> dict[str, tuple[str, str]] | None:
        verdicts = {}
        for pod in _labelled(api, PROBE_LABEL, round_id):
            verdict = kube_verdict(pod)
            if verdict is None:
                return None
            verdicts[pod["metadata"]["name"]] = verdict
        return verdicts if len(verdicts) == len(created) else None

    verdicts = wait_for(f"kube-scheduler's verdicts on round {round_id}", decided, timeout=ROUND_TIMEOUT, interval=0.1)
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
        gpu, reason, unsupported = gpu_verdict(judged, node_name, nodes, usage, maps)
        node = nodes[node_name]
        affinity, rules = breaks_affinity(judged, node), rules_in_play(spec, node, usage)
        cases.append(Case(batch, rnd, node_name, summary, kube, message, gpu, reason, unsupported, affinity, rules))
    # Ordering: kube-scheduler's one pod informer delivers events in resourceVersion order, so when it pops a probe
    # of the next round its cache already has every earlier pod creation and deletion (these copies gone).
    _delete_labelled(api, PROBE_LABEL, round_id)
    return cases


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
    return "pod anti-affinity" if "podAntiAffinity" in reason else "topology spread" if "topology" in reason else reason


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
    elapsed = time.monotonic() - started

    differing = [c for c in cases if c.differs]
    wrong = [c for c in differing if not (c.unsupported and c.gpu == REFUSED)]
    wrong_reasons = [c for c in cases if c.reasons_differ]
    # Each rule both ways: cases where both refuse for it (the same reasons), and cases where both let the pod on
    # although the rule was in play.
    refused = collections.Counter(
        rule
        for c in cases
        if c.kube == REFUSED
        and c.gpu == REFUSED
        and not c.unsupported
        and gpu_categories(c.gpu_reason) == kube_categories(c.kube_message)
        for rule in refused_for(c.gpu_reason)
    )
    passed = collections.Counter(rule for c in cases if c.kube == FITS and c.gpu == FITS for rule in c.rules)
    by_rule = {rule: {"fits": passed[rule], "refused": refused[rule]} for rule in RULES}
    fits = sum(c.kube == FITS for c in cases)
    gated = sum(c.kube == GATED for c in cases)
    by_reason = collections.Counter(
        f"unsupported: {_unsupported_rule(c.gpu_reason)}" if c.unsupported else "wrong" for c in differing
    )
    summary = {
        "kube_scheduler": (plane.cp.bin / "kube-scheduler").resolve().parent.name,
        "seed": SEED,
        "batches": BATCHES,
        "rounds_per_batch": ROUNDS_PER_BATCH,
        "nodes_per_batch": NODES_PER_BATCH,
        "cases": len(cases),
        "agreements": len(cases) - len(differing),
        "differences": len(differing),
        "differences_by_reason": dict(by_reason),
        "wrong_verdicts": len(wrong),
        "wrong_reasons": len(wrong_reasons),
        "fits": fits,
        "gated": gated,
        "unsupported": sum(c.unsupported for c in cases),
        "rules": by_rule,
        "seconds": round(elapsed, 1),
    }
    SUMMARY.parent.mkdir(parents=True, exist_ok=True)
    SUMMARY.write_text(json.dumps(summary, indent=2) + "\n")
    shown = ", ".join(f"{rule} {n['fits']}/{n['refused']}" for rule, n in by_rule.items())
    print(
        f"\nfit differential: {len(cases)} cases, {summary['agreements']} agree, {len(differing)} differ "
        f"({dict(by_reason)}), {len(wrong_reasons)} with other reasons; {fits} fit, {gated} "
        f"gated; by rule (fits/refused) {shown}; {elapsed:.0f}s"
    )

    assert not wrong, f"{len(wrong)} case(s) where gpu-scheduler and kube-scheduler disagree:\n" + _table(wrong)
    assert not wrong_reasons, f"{len(wrong_reasons)} case(s) where both refuse for different reasons:\n" + _table(
        wrong_reasons
    )
    # The cases must have put every rule to the test both ways, so that agreement means something.
    untested = {r: n for r, n in by_rule.items() if min(n.values()) < MIN_EACH_WAY}
    assert not untested, (
        f"rules not put to the test both ways at least {MIN_EACH_WAY} times (both fit / both refuse for it): "
        f"{untested}; all: {by_rule}"
    )
    assert gated >= 1, "no probe was gated"
    assert any(c.unsupported for c in cases), "no probe asked for an unsupported rule"
    assert fits >= 0.3 * len(cases), f"only {fits} of {len(cases)} cases fit"
