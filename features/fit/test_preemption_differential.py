"""A differential test of gpu-scheduler's preemption choice (scheduler.preemption, as PostFilter.choose runs it)
against the real kube-scheduler v1.34 with its default profile (DefaultPreemption): random clusters of pods that ask
for no GPU, a probe pod that fits no node as it is, and both choices: the node, and the pods evicted there.

It runs on a control plane of its own (features/fit/plane.py) whose kube-controller-manager runs the disruption
controller (PDB_CONTROLLERS), so that a PodDisruptionBudget has the status.disruptionsAllowed that both schedulers
read. PriorityClasses of a few values (CLASSES, one negative) are made once; the Priority admission plugin sets each
pod's spec.priority from its priorityClassName (none: 0). Deterministic: one fixed seed.

Per round (ROUNDS, each on a clean cluster: the round's probe, pods, budgets and nodes are deleted before the next):

- 2 to 5 fresh kwok nodes (cpu, memory and pod count allocatable drawn at random, a pool label or not, all with the
  round's label), now and then one more, a twin of the first (`twin`: the same allocatable and copies of its pods),
  so that two candidates tie;
- pods of another scheduler bound to them by spec.nodeName, in NAMESPACE or OTHER_NAMESPACE, created in a random
  order: random priority classes (all of a high one on some nodes), cpu and memory requests (that fit their node),
  maybe a host port, labels (app, tier, or none at all); each with a finalizer of the test's (HOLD) and the
  annotation kwok leaves alone (KWOK_LEAVE_ALONE): the test writes their status as a kubelet would (Running, Ready,
  a startTime of its choosing, distinct on a node so that kube-scheduler's order of the victims (MoreImportantPod,
  an unstable sort) is one order), and a pod kube-scheduler deletes stays, terminating with its DisruptionTarget
  condition, until the round lets it go;
- 0 to 3 PodDisruptionBudgets (minAvailable, so that pods without a controller are counted) over some of them
  (matchLabels, In, Exists, NotIn, DoesNotExist; a NotIn or DoesNotExist selector also covers pods with no labels),
  and in some rounds one that allows no disruption of a pod gpu-scheduler would evict were there no budget
  (`budget_target`); each waited for until the disruption controller counts every pod it covers healthy;
- then kube-scheduler shown the round, after the budgets' last status write: its nodes and pods
  (features.fit.plane.sync_node_cache: a sync pod it binds once its cache has a marker pod and a node label written
  last), and its budgets (`sync_budgets`: a canary whose victim only a budget written last decides). The sync pods are
  in a namespace of their own: once the sync pod was in NAMESPACE, where a NotIn or DoesNotExist budget counted it,
  healthy, while the disruption controller's informer still had it, and a loaded kube-scheduler read that status (one
  disruption more allowed) for the probe;
- one probe (schedulerName default-scheduler, in PROBE_NAMESPACE, where no budget is) of a random class (the highest
  mostly; one that pods of the round have too now and then), selecting the round's nodes (and maybe one pool),
  asking for more cpu or memory than any node has free (maybe a host port too): it fits no node as it is, and may
  fit one after preemption, or none.

kube-scheduler's verdict: the probe's status.nominatedNodeName and the pods it deleted (deletionTimestamp), once the
nomination is there and its log says that the preemption for the probe is over (`_preemption_over`: its deletions
sent, the last victim after all the others), as many as it said it would delete; or PodScheduled False with no
nomination for REFUSAL_GRACE seconds (no candidate), with its message; or the probe bound (a wrong answer:
gpu-scheduler says it fits nowhere as it is). gpu-scheduler's verdict, from the cache built as the scheduler builds
its own before the probe comes (features.fit.plane.scheduler_cache) and the PodDisruptionBudgets the API lists then
(preemption.budget): preemption.candidates over every node (preemption.victims_on of the pods counted there, below
the probe's priority as the apiserver stored it; the probe fits when the framework cycle of the profile, prepared on
the trial, admits the node: decision.cycle, Cycle.problem), then preemption.best.

Known, not settled: kube-scheduler 1.37 (preemption.FilterVictimsWithPDBViolation) charges a victim to the budgets that
cover it, in the order its lister returns them (a map's: random), only up to the first it exhausts; 1.34 and 1.35 charge
every one, and so does gpu-scheduler (preemption.split_by_budgets). Where a victim is covered by an exhausted budget
listed before another, 1.37 may leave the other's disruption unspent, and a later victim on that node breaks no budget:
round 28 of SEED (its budget `app In (batch, db)` before `app NotIn (web)`) then goes to pd28-n0 instead of pd28-n1, in
4 of the 15 runs of 2026-11-29.

They must agree. Where both preempt: the same node and the same victims; kube-scheduler breaks the last tie by the
order of its candidate list (random), so where several candidates share the best `Candidate.rank()` but for the
node's name, kube's choice must be one of them (its node with their victims). Where both find no candidate: the same
reasons, node by node of the round (kube-scheduler's preemption message counts them): preemption cannot help there
(NOT_HELPFUL: kube-scheduler's filters found the node unresolvable before preemption: not selected, or asking for more
than it has at all), no pod of lower priority (NO_VICTIMS), or the rule the node still breaks with every victim gone.

Counted and printed (and written to build/preemption-differential.json): the rounds that preempted, by the criterion
that chose among the candidates (only one; PDB violations, the highest victim priority, the sum of priorities, the
victim count, the latest start; a tie); those with no candidate, by reason (the rounds where a node of the round is
none for it); those where a PodDisruptionBudget covered a potential victim, of those where it changed the choice
(gpu-scheduler's choice without the budgets differs: another node, or other victims on the same node), and where the
choice breaks a budget. Asserted: no wrong answer, and each class both ways at least MIN_EACH_WAY times (preempted /
no candidate; one candidate / several; a budget in play that changed the choice / that did not; each reason for no
candidate).
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import datetime
import json
import pathlib
import random
import re
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from features.fit.plane import (
    KUBE_SCHEDULER,
    NAMESPACE,
    PROBE_LABEL,
    ROUND_TIMEOUT,
    SYNC_NAMESPACE,
    Plane,
    bound_spec,
    container,
    create_nodes,
    delete_labelled,
    node_cache,
    running_plane,
    scheduler_cache,
    sync_node_cache,
)
from features.fit.test_differential import gpu_categories, kube_node_counts
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.sync import SyncClient
from gpu_scheduling.scheduler import decision, preemption, selectors
from gpu_scheduling.scheduler.cache import Cache
from hack import toolchain
from harness.controlplane import KWOK_LEAVE_ALONE, create_namespace, node_body
from harness.wait import wait_for

ROOT = pathlib.Path(__file__).resolve().parents[2]
SUMMARY = ROOT / "build" / "preemption-differential.json"
SEED = 20251034
ROUNDS = 56
MIN_EACH_WAY = 4
OTHER_NAMESPACE = "pd-other"
PROBE_NAMESPACE = "pd-probes"
ROUND_LABEL = "preemption-differential/round"
POOL_LABEL = "preemption-differential/pool"
HOLD = "example.com/preemption-differential-hold"
"""The finalizer that keeps a pod kube-scheduler deleted, terminating, until the round lets it go."""
PDB_CONTROLLERS = (
    # serviceaccount(-token): the plane waits for the default ServiceAccount; nodelifecycle lifts the not-ready taint
    # of a new node; namespace and garbagecollector as in every plane; disruption: the PodDisruptionBudgets' status.
    "--controllers=serviceaccount,serviceaccount-token,namespace,garbagecollector,nodelifecycle,disruption"
)
CLASSES = {"pd-minus": -10, "pd-low": 10, "pd-mid": 100, "pd-high": 1000, "pd-top": 100000}
POD_CLASSES = (None, None, None, "pd-minus", "pd-low", "pd-low", "pd-mid", "pd-high")
"""A bound pod's priority class (None: none, priority 0)."""
PROTECTED_CLASS, PROTECTED_CHANCE = "pd-high", 0.2
"""The chance that all the pods of a node are of PROTECTED_CLASS: a probe of that class or lower has no victim there."""
PROBE_CLASSES = ("pd-top",) * 4 + ("pd-high", "pd-high", "pd-mid", "pd-mid", "pd-low", "pd-low")
APPS = ("web", "db", "batch")
PORT = 8080
TWIN_CHANCE = 0.25
"""The chance that a round has a twin of its first node (`twin`): candidates of one rank, kube-scheduler's pick."""
TARGET_CHANCE = 0.5
"""The chance that a round has a budget over a pod gpu-scheduler would evict were there no budget (`budget_target`)."""
STARTED = "preemption-differential/started"
"""On a bound pod: the startTime its status gets (as a kubelet writes it)."""
COVERED = "preemption-differential/covered"
"""On a PodDisruptionBudget: how many pods it covers (the disruption controller counts them all healthy)."""
PREEMPTION_STARTS = "Start the preemption asynchronously"
PREEMPTION_OVER = "Async Preemption finished completely"
"""kube-scheduler's log lines (-v=2, as features.fit.plane runs it) as its asynchronous preemption
(SchedulerAsyncPreemption, on by default since 1.33) begins, with the number of victims, and once every deletion has
returned. It deletes the victims but the last in parallel, then the last: the verdict waits for its word rather than
for the deleted set to stay the same a while, which a loaded machine could stretch past any fixed quiet time."""
REFUSAL_GRACE = 1.0
"""Seconds the probe must stay refused (PodScheduled False) with no nomination for kube-scheduler's answer to be no
candidate. One status patch writes an attempt's condition and its nomination (schedule_one.go, updatePod), so a
refusal without one is that attempt's answer; the grace is for a retry, which nothing in the round should cause."""
START = datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC)
BUDGET_NODE = "d-budget-sync"
"""The node of the budget barrier (`sync_budgets`): no round's probe selects it."""
BUDGET_SYNC_LABEL = "preemption-differential/budget-sync"
"""On the budget barrier's pods: the attempt they belong to (their PodDisruptionBudget selects its `cover` pod)."""

PREEMPTED, NO_CANDIDATE, BOUND = "preempted", "no candidate", "bound"
CRITERIA = ("PDB violations", "highest victim priority", "sum of priorities", "victim count", "latest start", "tie")
"""What chose among several candidates: the first element of `Candidate.rank()` in which the best and the next
differ (a tie: only the node's name)."""


# ---- the plane ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    with running_plane(tmp_path_factory.mktemp("preemption-differential"), [PDB_CONTROLLERS]) as running:
        for namespace in (OTHER_NAMESPACE, PROBE_NAMESPACE):
            create_namespace(running.api, namespace)
        for name, value in CLASSES.items():
            body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}}
            running.api.create(paths.PRIORITY_CLASSES, {**body, "value": value})
        create_nodes(running.api, [Room(BUDGET_NODE, 1000, 1024, 10, {BUDGET_SYNC_LABEL: "node"}).body()])
        yield running


# ---- kube-scheduler shown the budgets --------------------------------------------------------------------------


def sync_budgets(api: SyncClient, rnd: int) -> int:
    """Make sure kube-scheduler's PodDisruptionBudget lister has every budget write so far: a preemption on
    BUDGET_NODE whose victim only a budget made now decides. Returns the attempts it took.

    sync_node_cache proves kube-scheduler's nodes and pods current, but the budgets come by a watch of their own, and
    its lister is read only when it preempts: nothing else shows that it has the round's budgets as the test read them.

    Each attempt: on BUDGET_NODE (1000m of cpu), `keep` (priority 10) and `cover` (priority 0), 400m each, bound by
    name; a budget that allows no disruption of `cover`, created after every budget of the round was counted; then
    a canary of the highest class asking for 500m on that node only. One victim is enough. kube-scheduler gives the
    pods whose eviction breaks a budget back first, then the others in order of importance: with the budget, `cover`
    stays and `keep` goes; without it, `keep` (more important) stays and `cover` goes; were either pod not in its
    cache yet, the canary would fit as it is. So `keep` deleted means kube-scheduler's lister had this budget, and so
    every earlier budget write (a watch delivers in order), and its pod cache both pods, and so every earlier pod
    write (one handler, in order). Anything else: the attempt is cleared and made again."""
    deadline = time.monotonic() + ROUND_TIMEOUT
    attempt = 0
    while True:
        attempt += 1
        seen = _budget_canary(api, f"{rnd}-{attempt}")
        if seen == "keep":
            return attempt
        assert time.monotonic() < deadline, f"kube-scheduler never preempted as if it had the budgets: last {seen!r}"


def _budget_canary(api: SyncClient, tag: str) -> str:
    """One attempt of `sync_budgets`: its pods, budget and canary, what kube-scheduler did ("keep" or "cover": the
    victim; "bound as it is"), and all of it deleted."""
    for role, priority_class in (("keep", "pd-low"), ("cover", None)):
        spec = bound_spec(BUDGET_NODE, {"requests": {"cpu": "400m"}})
        if priority_class:
            spec["priorityClassName"] = priority_class
        meta = {
            "name": f"budget-sync-{tag}-{role}",
            "labels": {BUDGET_SYNC_LABEL: tag, "role": role},
            "annotations": dict(KWOK_LEAVE_ALONE),
            "finalizers": [HOLD],  # a victim stays, terminating, until it is read
        }
        api.create(paths.pods(SYNC_NAMESPACE), {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": f"budget-sync-{tag}"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {BUDGET_SYNC_LABEL: tag, "role": "cover"}}},
    }
    api.create(paths.POD_DISRUPTION_BUDGET.collection(SYNC_NAMESPACE), budget)
    canary = f"budget-sync-{tag}-canary"
    spec = {
        "schedulerName": KUBE_SCHEDULER,
        "priorityClassName": "pd-top",
        "nodeSelector": {BUDGET_SYNC_LABEL: "node"},
        "containers": [container("main", {"requests": {"cpu": "500m"}})],
    }
    meta = {"name": canary, "labels": {BUDGET_SYNC_LABEL: tag}}
    api.create(paths.pods(SYNC_NAMESPACE), {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
    selector = f"{BUDGET_SYNC_LABEL}={tag}"

    def outcome() -> str | None:
        pods = api.pods(SYNC_NAMESPACE, labelSelector=selector)
        gone = sorted(
            p["metadata"]["labels"].get("role", "canary") for p in pods if p["metadata"].get("deletionTimestamp")
        )
        if gone:
            return ",".join(gone)
        return "bound as it is" if api.get(paths.pod(SYNC_NAMESPACE, canary))["spec"].get("nodeName") else None

    seen = wait_for(f"kube-scheduler to preempt for {canary}", outcome, timeout=ROUND_TIMEOUT, interval=0.1)
    _let_go(api, SYNC_NAMESPACE, labelSelector=selector)
    delete_labelled(api, BUDGET_SYNC_LABEL, tag, SYNC_NAMESPACE)
    api.delete(paths.pod_disruption_budget(SYNC_NAMESPACE, budget["metadata"]["name"]))
    return seen


# ---- a random round ----------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Room:
    """A node of a round as drawn: what it has, and what its pods take."""

    name: str
    cpu: int  # millicores
    memory: int  # MiB
    pods: int
    labels: dict[str, str]
    used_cpu: int = 0
    used_memory: int = 0
    port: bool = False

    def body(self) -> dict[str, Any]:
        body = node_body(self.name, labels=self.labels)
        resources = {"cpu": f"{self.cpu}m", "memory": f"{self.memory}Mi", "pods": str(self.pods)}
        body["status"] = {"allocatable": dict(resources), "capacity": dict(resources)}
        body["spec"] = {}
        return body


def draw_room(rng: random.Random, name: str, rnd: int) -> Room:
    labels = {ROUND_LABEL: str(rnd)}
    if rng.random() < 0.7:
        labels[POOL_LABEL] = rng.choice("ab")
    cpu = rng.choice((2000, 4000, 4000, 6000, 8000))
    return Room(name, cpu, rng.choice((4096, 8192, 8192, 16384)), rng.randint(2, 8), labels)


def pod_labels(rng: random.Random) -> dict[str, str]:
    if rng.random() < 0.12:
        return {}
    labels = {}
    if rng.random() < 0.85:
        labels["app"] = rng.choice(APPS)
    if rng.random() < 0.5:
        labels["tier"] = rng.choice("12")
    return labels


def bound_pods(rng: random.Random, room: Room, rnd: int, index: int) -> list[dict[str, Any]]:
    """The pods bound to `room`'s node, within its allocatable, each started at a minute of its own on the node; now
    and then (PROTECTED_CHANCE) all of one class of a high priority."""
    wanted = min(room.pods, rng.choice((1, 2, 2, 3, 3, 4, 5)))
    minutes = rng.sample(range(30), wanted)
    classes = (PROTECTED_CLASS,) if rng.random() < PROTECTED_CHANCE else POD_CLASSES
    pods = []
    for k in range(wanted):
        cpu = 0 if rng.random() < 0.08 else rng.randrange(100, max(200, room.cpu // 2), 100)
        memory = 0 if rng.random() < 0.15 else rng.randrange(128, max(256, room.memory // 2), 128)
        if room.used_cpu + cpu > room.cpu or room.used_memory + memory > room.memory:
            continue
        room.used_cpu += cpu
        room.used_memory += memory
        requests = {**({"cpu": f"{cpu}m"} if cpu else {}), **({"memory": f"{memory}Mi"} if memory else {})}
        ports = None
        if not room.port and rng.random() < 0.15:
            room.port = True
            ports = [{"containerPort": PORT, "hostPort": PORT, "protocol": "TCP"}]
        spec = bound_spec(room.name, {"requests": requests}, ports)
        priority_class = rng.choice(classes)
        if priority_class is not None:
            spec["priorityClassName"] = priority_class
        meta = {
            "name": f"r{rnd}-n{index}-p{k}",
            "namespace": NAMESPACE if rng.random() < 0.8 else OTHER_NAMESPACE,
            "labels": pod_labels(rng),
            "annotations": {**KWOK_LEAVE_ALONE, STARTED: _stamp(minutes[k])},
            "finalizers": [HOLD],
        }
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
    return pods


def _stamp(minute: int) -> str:
    return (START + datetime.timedelta(minutes=minute)).strftime("%Y-%m-%dT%H:%M:%SZ")


def twin(room: Room, pods: list[dict[str, Any]], name: str, index: int) -> tuple[Room, list[dict[str, Any]]]:
    """Another node just like `room`, with copies of its `pods` (the same requests, classes, labels, namespaces and
    start times): where the probe would preempt on one, the other is a candidate of the same rank."""
    copies = []
    for pod in pods:
        if pod["spec"]["nodeName"] != room.name:
            continue
        pod = copy.deepcopy(pod)
        pod["metadata"]["name"] = re.sub(r"-n\d+-", f"-n{index}-", pod["metadata"]["name"])
        pod["spec"]["nodeName"] = name
        copies.append(pod)
    return dataclasses.replace(room, name=name, labels=dict(room.labels)), copies


def pdb_selector(rng: random.Random) -> dict[str, Any]:
    app, other = rng.sample(APPS, 2)
    return rng.choice(
        (
            {"matchLabels": {"app": app}},
            {"matchLabels": {"app": app}},
            {"matchLabels": {"app": app, "tier": rng.choice("12")}},
            {"matchExpressions": [{"key": "app", "operator": "In", "values": [app, other]}]},
            {"matchExpressions": [{"key": "tier", "operator": "Exists"}]},
            {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": [app]}]},
            {"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]},
        )
    )


def budgets_for(
    rng: random.Random, pods: list[dict[str, Any]], rnd: int, target: preemption.Pod | None
) -> list[dict[str, Any]]:
    """0 to 3 PodDisruptionBudgets over the round's pods, each allowing 0 to 2 disruptions (minAvailable: the pods
    it covers less those), with how many pods it covers (the COVERED annotation: the disruption controller's count,
    label-less pods included); and one allowing none over `target`'s labels, if given."""
    drawn = [
        (NAMESPACE if rng.random() < 0.75 else OTHER_NAMESPACE, pdb_selector(rng), rng.choice((0, 0, 0, 1, 1, 2)))
        for _ in range(rng.choice((0, 1, 2, 2, 2, 3, 3)))
    ]
    if target is not None:
        drawn.append((target.namespace, {"matchLabels": dict(target.labels)}, 0))
    bodies = []
    for j, (namespace, selector, allowing) in enumerate(drawn):
        read = selectors.selector(selector, "selector")
        covered = sum(p["metadata"]["namespace"] == namespace and read.matches(p["metadata"]["labels"]) for p in pods)
        allowed = min(covered, allowing)
        meta = {"name": f"pdb-{rnd}-{j}", "namespace": namespace, "annotations": {COVERED: str(covered)}}
        spec = {"minAvailable": covered - allowed, "selector": selector}
        bodies.append({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta, "spec": spec})
    return bodies


def budget_target(
    rng: random.Random, cache: Cache, nodes: Mapping[str, Mapping[str, Any]], probe: Probe
) -> preemption.Pod | None:
    """Now and then (TARGET_CHANCE), a pod with labels that gpu-scheduler would evict for the probe were there no
    budget: a budget that allows no disruption of its like puts the budgets to the test where they matter."""
    if rng.random() >= TARGET_CHANCE:
        return None
    meta, spec = probe.body["metadata"], probe.body["spec"]
    preview = {
        **probe.body,
        "metadata": {**meta, "uid": ""},
        "spec": {**spec, "priority": CLASSES[spec["priorityClassName"]]},
    }
    best = gpu_choice(cache, nodes, preview, []).best
    labelled = sorted((p for p in best.pods() if p.labels), key=lambda p: p.key) if best else []
    return rng.choice(labelled) if labelled else None


@dataclasses.dataclass(frozen=True)
class Probe:
    body: dict[str, Any]
    cpu: int  # millicores
    memory: int  # MiB

    def too_big(self, room: Room) -> bool:
        """It asks for more than the node has at all (kube-scheduler: preemption cannot help there)."""
        return self.cpu > room.cpu or self.memory > room.memory


def draw_probe(rng: random.Random, rooms: list[Room], rnd: int) -> Probe:
    """A probe that asks for more cpu or memory (or both) than any of the round's nodes has free, by a random margin
    (sometimes more than a node has at all), maybe for a host port, maybe only of one pool."""
    mode = rng.choice(("cpu", "cpu", "memory", "both"))
    cpu = rng.randrange(100, 1000, 100)
    memory = rng.randrange(128, 1024, 128)
    if mode in ("cpu", "both"):
        cpu = max(r.cpu - r.used_cpu for r in rooms) + rng.randrange(100, 1500, 100)
    if mode in ("memory", "both"):
        memory = max(r.memory - r.used_memory for r in rooms) + rng.randrange(128, 3072, 128)
    selector = {ROUND_LABEL: str(rnd)}
    pools = sorted({r.labels[POOL_LABEL] for r in rooms if POOL_LABEL in r.labels})
    if pools and rng.random() < 0.25:
        selector[POOL_LABEL] = rng.choice(pools)
    ports = [{"containerPort": PORT, "hostPort": PORT, "protocol": "TCP"}] if rng.random() < 0.2 else None
    spec = {
        "schedulerName": KUBE_SCHEDULER,
        "priorityClassName": rng.choice(PROBE_CLASSES),
        "nodeSelector": selector,
        "containers": [container("main", {"requests": {"cpu": f"{cpu}m", "memory": f"{memory}Mi"}}, ports)],
    }
    meta = {"name": f"probe-{rnd}", "namespace": PROBE_NAMESPACE, "labels": {PROBE_LABEL: str(rnd)}}
    return Probe({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}, cpu, memory)


# ---- the two verdicts ------------------------------------------------------------------------------------------

NO_VICTIMS, NOT_HELPFUL = "no victims", "not helpful"
"""Why preemption cannot help on a node, besides the rule it still breaks with every victim gone (gpu_categories):
no pod of lower priority there; or the node refuses the pod whatever goes (kube-scheduler's UnschedulableAndUnresolvable
verdict before preemption: not selected, or asking for more than the node has at all), which kube-scheduler does not
try."""
_KUBE_PREEMPTION_REASONS = (
    ("No preemption victims found for incoming pod", NO_VICTIMS),
    ("Preemption is not helpful for scheduling", NOT_HELPFUL),
)


@dataclasses.dataclass(frozen=True)
class Verdict:
    outcome: str  # PREEMPTED, NO_CANDIDATE, BOUND
    node: str = ""
    victims: frozenset[str] = frozenset()
    message: str = ""

    def answer(self) -> tuple[str, frozenset[str]]:
        return self.node, self.victims

    def reasons(self, round_nodes: int) -> collections.Counter[str]:
        """Of a refusal: how many of the round's nodes each category of reason counts in kube-scheduler's preemption
        message ("preemption: 0/5 nodes are available: 2 No preemption victims found for incoming pod, 3 Insufficient
        cpu."), the nodes of no round (the sync node, those of rounds gone) taken off the ones it did not try."""
        tail = self.message.partition("preemption: ")[2]
        counts = kube_node_counts(tail) or collections.Counter()
        counts.pop("other", None)
        for phrase, category in _KUBE_PREEMPTION_REASONS:
            found = re.search(rf"(\d+) {re.escape(phrase)}", tail)
            if found:
                counts[category] = int(found.group(1))
        total = re.match(r"0/(\d+) nodes", tail)
        counts[NOT_HELPFUL] -= (int(total.group(1)) if total else 0) - round_nodes
        return +counts


def _terminating(api: SyncClient) -> frozenset[str]:
    return frozenset(
        f"{ns}/{p['metadata']['name']}"
        for ns in (NAMESPACE, OTHER_NAMESPACE)
        for p in api.pods(ns)
        if p["metadata"].get("deletionTimestamp")
    )


def _preemption_over(log: pathlib.Path, offset: int, name: str) -> int | None:
    """How many victims kube-scheduler's preemption for the probe `name` chose, once its log (from `offset`) says that
    preemption is over; None before."""
    with log.open("rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    preemptor = f'preemptor="{PROBE_NAMESPACE}/{name}"'
    started = [line for line in text.splitlines() if PREEMPTION_STARTS in line and preemptor in line]
    over = [line for line in text.splitlines() if PREEMPTION_OVER in line and preemptor in line]
    if not over:
        return None
    assert len(started) == 1 and len(over) == 1, f"not one preemption for {name}: {started} {over}"
    assert 'result="success"' in over[0], over[0]
    count = re.search(r"\bnumVictims=(\d+)", started[0])
    assert count, started[0]
    return int(count.group(1))


def kube_verdict(api: SyncClient, name: str, log: pathlib.Path, offset: int) -> Verdict:
    """What kube-scheduler did with the probe `name`: bound it, nominated a node and deleted pods, or refused. `log`:
    its log, the probe's lines after `offset`."""
    deadline = time.monotonic() + ROUND_TIMEOUT
    refused_since: float | None = None
    while True:
        pod = api.get(paths.pod(PROBE_NAMESPACE, name))
        if pod["spec"].get("nodeName"):
            return Verdict(BOUND, pod["spec"]["nodeName"])
        status = pod.get("status") or {}
        node = status.get("nominatedNodeName")
        if node:
            break
        scheduled = [c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"]
        now = time.monotonic()
        if scheduled and scheduled[0].get("status") == "False":
            refused_since = refused_since or now
            if now - refused_since > REFUSAL_GRACE:
                return Verdict(NO_CANDIDATE, message=str(scheduled[0].get("message") or ""))
        assert now < deadline, f"kube-scheduler neither bound, nominated nor refused {name}: {status}"
        time.sleep(0.1)
    chosen = wait_for(
        f"kube-scheduler's preemption for {name} over",
        lambda: _preemption_over(log, offset, name),
        timeout=max(1.0, deadline - time.monotonic()),
        interval=0.1,
    )
    victims = _terminating(api)
    assert len(victims) == chosen, f"kube-scheduler chose {chosen} victims for {name} and deleted {sorted(victims)}"
    return Verdict(PREEMPTED, node, victims)


@dataclasses.dataclass
class GpuChoice:
    candidates: list[preemption.Candidate]
    best: preemption.Candidate | None
    accepted: set[tuple[str, frozenset[str]]]
    """kube-scheduler's possible answers: each candidate of the best rank but for the node's name."""
    why_not: dict[str, str]
    """Per node that is no candidate: why (NO_VICTIMS, or the rule it still breaks with the victims gone)."""


def _keys(candidate: preemption.Candidate) -> frozenset[str]:
    return frozenset(p.key for p in candidate.pods())


def gpu_choice(
    cache: Cache, nodes: Mapping[str, Mapping[str, Any]], probe: Mapping[str, Any], budgets: list[preemption.Budget]
) -> GpuChoice:
    """gpu-scheduler's choice for `probe` on `cache`: PostFilter.choose's steps (preemption.candidates over every
    node, preemption.best), the probe fitting a node when the framework cycle, prepared on the trial, admits it."""
    rank = int(probe["spec"].get("priority") or 0)
    uid = probe["metadata"]["uid"]
    trial = cache.fork()
    why_not: dict[str, str] = {}

    def victims_in(node: str) -> list[preemption.Victim]:
        found = preemption.victims_on(
            cache.usage.pods_on(node),
            rank,
            lambda *_: None,  # no gangs here
            lambda _: [],
            spare=lambda victim: victim == uid or cache.assumed(victim),
        )
        if not found:
            why_not[node] = NO_VICTIMS
        return found

    def fits(node: str) -> bool:
        attempt = decision.cycle(probe, trial.snapshot)
        problem = attempt if isinstance(attempt, str) else attempt.problem(nodes[node])
        if problem is not None:
            why_not[node] = problem
        return problem is None

    found = preemption.candidates(trial, sorted(nodes), victims_in, fits, budgets)
    for candidate in found:  # what a reprieve refused on a candidate is no reason against it
        why_not.pop(candidate.node, None)
    best = preemption.best(found)
    accepted = set()
    if best is not None:
        accepted = {(c.node, _keys(c)) for c in found if c.rank()[:-1] == best.rank()[:-1]}
    return GpuChoice(found, best, accepted, why_not)


def deciding_criterion(choice: GpuChoice) -> str:
    """What chose among the candidates (CRITERIA), or that there was only one."""
    ranked = sorted(choice.candidates, key=preemption.Candidate.rank)
    if len(ranked) == 1:
        return "only candidate"
    first, second = ranked[0].rank(), ranked[1].rank()
    return next((c for i, c in enumerate(CRITERIA[:-1]) if first[i] != second[i]), "tie")


def gpu_reasons(
    choice: GpuChoice, cache: Cache, nodes: Mapping[str, Mapping[str, Any]], probe: Probe, rooms: list[Room]
) -> collections.Counter[str]:
    """Why each of the round's nodes is no candidate, as kube-scheduler's preemption message counts it: NOT_HELPFUL
    where the node refuses the probe before preemption for a reason kube-scheduler calls unresolvable (not selected;
    short of a resource it does not have at all: the first rule it breaks is NodeResourcesFit, and the probe asks for
    more than the node's allocatable), else NO_VICTIMS or the rule broken with every victim gone."""
    attempt = decision.cycle(probe.body, cache.snapshot)
    assert not isinstance(attempt, str), attempt
    counts: collections.Counter[str] = collections.Counter()
    for room in rooms:
        before = gpu_categories(attempt.problem(nodes[room.name]) or "")
        if "affinity" in before or (any(c.startswith("insufficient") for c in before) and probe.too_big(room)):
            counts[NOT_HELPFUL] += 1
        elif choice.why_not[room.name] == NO_VICTIMS:
            counts[NO_VICTIMS] += 1
        else:
            counts.update(gpu_categories(choice.why_not[room.name]))
    return counts


# ---- a round -------------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Case:
    rnd: int
    kube: Verdict
    gpu: GpuChoice
    no_budgets: GpuChoice
    pdb_in_play: bool
    kube_reasons: collections.Counter[str]
    gpu_reasons: collections.Counter[str]
    world: dict[str, Any]
    budget_sync_attempts: int
    """How many canaries it took (`sync_budgets`): more than one where kube-scheduler's budgets lagged."""

    @property
    def gpu_outcome(self) -> str:
        return PREEMPTED if self.gpu.best is not None else NO_CANDIDATE

    @property
    def wrong(self) -> bool:
        if self.kube.outcome != self.gpu_outcome:
            return True
        if self.kube.outcome == NO_CANDIDATE:
            return self.kube_reasons != self.gpu_reasons
        return self.kube.answer() not in self.gpu.accepted

    @property
    def criterion(self) -> str:
        return deciding_criterion(self.gpu) if self.gpu.best is not None else ""

    @property
    def pdb_changed(self) -> str | None:
        """How the budgets changed gpu-scheduler's choice: None (they did not), "node" or "victims"."""
        if self.gpu.accepted == self.no_budgets.accepted:
            return None
        if {n for n, _ in self.gpu.accepted} != {n for n, _ in self.no_budgets.accepted}:
            return "node"
        return "victims"

    def row(self) -> str:
        best = self.gpu.best
        gpu = f"{best.node} {sorted(_keys(best))}" if best else f"none {dict(self.gpu_reasons)}"
        kube = (
            f"{self.kube.node} {sorted(self.kube.victims)}"
            if self.kube.outcome == PREEMPTED
            else f"{self.kube.outcome} {dict(self.kube_reasons)} {self.kube.message!r}"
        )
        return f"round {self.rnd}: kube {kube}; gpu {gpu} (of the best rank: {sorted(self.gpu.accepted)})"


def _create_round(api: SyncClient, rng: random.Random, rnd: int) -> tuple[list[Room], list[dict[str, Any]]]:
    """The round's nodes and pods (in a random order, their status written)."""
    rooms = [draw_room(rng, f"pd{rnd}-n{i}", rnd) for i in range(rng.randint(2, 5))]
    pods = [p for i, room in enumerate(rooms) for p in bound_pods(rng, room, rnd, i)]
    if rng.random() < TWIN_CHANCE:
        room, copies = twin(rooms[0], pods, f"pd{rnd}-n{len(rooms)}", len(rooms))
        rooms.append(room)
        pods += copies
    create_nodes(api, [room.body() for room in rooms])
    order = list(pods)
    rng.shuffle(order)
    for pod in order:
        api.create(paths.pods(pod["metadata"]["namespace"]), pod)
    for pod in order:
        meta = pod["metadata"]
        started = meta["annotations"][STARTED]
        status = {
            "phase": "Running",
            "startTime": started,
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": started},
                {"type": "Ready", "status": "True", "lastTransitionTime": started},
            ],
        }
        api.patch(paths.pod_status(meta["namespace"], meta["name"]), {"status": status})
    return rooms, pods


def _create_budgets(api: SyncClient, bodies: list[dict[str, Any]]) -> None:
    """Create the budgets and wait until the disruption controller counts every pod each covers, healthy."""
    for body in bodies:
        api.create(paths.POD_DISRUPTION_BUDGET.collection(body["metadata"]["namespace"]), body)

    def counted(body: dict[str, Any]) -> bool:
        meta = body["metadata"]
        pdb = api.get(paths.pod_disruption_budget(meta["namespace"], meta["name"]))
        status = pdb.get("status") or {}
        covered = int(meta["annotations"][COVERED])
        return (
            status.get("observedGeneration") == pdb["metadata"]["generation"]
            and status.get("expectedPods") == covered
            and status.get("currentHealthy") == covered
        )

    for body in bodies:
        wait_for(
            f"the disruption controller to count {body['metadata']['name']}", lambda b=body: counted(b), timeout=30
        )


def _let_go(api: SyncClient, namespace: str, **query: str) -> None:
    """Take the test's finalizer (HOLD) off the pods of `namespace` that `query` lists, so that deleting them ends."""
    for pod in api.pods(namespace, **query):
        if pod["metadata"].get("finalizers"):
            api.patch(paths.pod(namespace, pod["metadata"]["name"]), {"metadata": {"finalizers": None}})


def _listed_budgets(api: SyncClient) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = api.get(paths.POD_DISRUPTION_BUDGET.collection())["items"]
    return items


def _delete_round(api: SyncClient, rooms: list[Room]) -> None:
    """The probe, then the round's pods (their finalizer taken off), budgets and nodes."""
    api.delete(paths.pods(PROBE_NAMESPACE), gracePeriodSeconds="0")
    wait_for("the probe deleted", lambda: not api.pods(PROBE_NAMESPACE) or None, timeout=30)
    for namespace in (NAMESPACE, OTHER_NAMESPACE):
        _let_go(api, namespace)
        api.delete(paths.pods(namespace), gracePeriodSeconds="0")
        api.delete(paths.POD_DISRUPTION_BUDGET.collection(namespace))
    wait_for(
        "the round's pods deleted",
        lambda: not any(api.pods(ns) for ns in (NAMESPACE, OTHER_NAMESPACE)) or None,
        timeout=30,
    )
    for room in rooms:
        api.delete(paths.node(room.name))


def _world(rooms: list[Room], pods: list[dict[str, Any]], pdbs: list[dict[str, Any]], probe: Probe) -> dict[str, Any]:
    """The round as drawn, for the report of a wrong answer."""
    return {
        "nodes": {r.name: {"cpu": r.cpu, "memory": r.memory, "pods": r.pods, "labels": r.labels} for r in rooms},
        "pods": [
            {
                "name": f"{p['metadata']['namespace']}/{p['metadata']['name']}",
                "node": p["spec"]["nodeName"],
                "class": p["spec"].get("priorityClassName"),
                "labels": p["metadata"]["labels"],
                "started": p["metadata"]["annotations"][STARTED],
                "requests": p["spec"]["containers"][0]["resources"]["requests"],
                "port": bool(p["spec"]["containers"][0].get("ports")),
            }
            for p in pods
        ],
        "budgets": [{"namespace": b["metadata"]["namespace"], **b["spec"]} for b in pdbs],
        "probe": {k: probe.body["spec"][k] for k in ("priorityClassName", "nodeSelector", "containers")},
    }


def run_round(api: SyncClient, log: pathlib.Path, rng: random.Random, rnd: int) -> Case:
    """One round; `log`: kube-scheduler's."""
    rooms, pods = _create_round(api, rng, rnd)
    probe = draw_probe(rng, rooms, rnd)
    # gpu-scheduler's view, before kube-scheduler acts: the cache (the pods stay as they are until the probe comes),
    # and the budgets its informer lists once they are counted.
    nodes = node_cache(api)
    cache = scheduler_cache(api, nodes)
    pdbs = budgets_for(rng, pods, rnd, budget_target(rng, cache, nodes, probe))
    _create_budgets(api, pdbs)
    # kube-scheduler has every node and pod write of the round (the pods' status too) once it binds the sync pod, and
    # every budget write once it preempts for the budget barrier's canary as only a budget written now decides.
    sync_node_cache(api, f"p{rnd}")
    attempts = sync_budgets(api, rnd)
    budgets = [b for pdb in _listed_budgets(api) if (b := preemption.budget(pdb)) is not None]
    attempt = decision.cycle(probe.body, cache.snapshot)
    assert not isinstance(attempt, str), attempt
    fitting = [r.name for r in rooms if attempt.fits(nodes[r.name])]
    assert not fitting, f"round {rnd}: the probe fits {fitting} as it is (the generator's mistake)"
    offset = log.stat().st_size
    stored = api.create(paths.pods(PROBE_NAMESPACE), probe.body)
    assert stored is not None
    kube = kube_verdict(api, stored["metadata"]["name"], log, offset)
    # The probe as the apiserver stored it: its spec.priority, from its class.
    gpu = gpu_choice(cache, nodes, stored, budgets)
    no_budgets = gpu_choice(cache, nodes, stored, [])
    rank = int(stored["spec"].get("priority") or 0)
    lower = [
        preemption.Pod.of(uid, taken)
        for r in rooms
        for uid, taken in cache.usage.pods_on(r.name)
        if taken.priority < rank
    ]
    in_play = any(b.covers(p) for b in budgets for p in lower)
    refused = gpu.best is None  # then the reasons are compared, node by node of the round
    kube_said = kube.reasons(len(rooms)) if refused else collections.Counter()
    gpu_said = gpu_reasons(gpu, cache, nodes, probe, rooms) if refused else collections.Counter()
    world = _world(rooms, pods, pdbs, probe)
    _delete_round(api, rooms)
    return Case(rnd, kube, gpu, no_budgets, in_play, kube_said, gpu_said, world, attempts)


# ---- the test ----------------------------------------------------------------------------------------------------


def test_preemption_agrees_with_kube_scheduler(plane: Plane) -> None:
    api = plane.api
    rng = random.Random(SEED)
    started = time.monotonic()
    cases = []
    for rnd in range(ROUNDS):
        cases.append(run_round(api, plane.scheduler.log_path, rng, rnd))
        assert plane.scheduler.running, plane.scheduler.tail()
    elapsed = time.monotonic() - started

    wrong = [c for c in cases if c.wrong]
    right = [c for c in cases if not c.wrong]
    outcomes = collections.Counter(c.kube.outcome for c in cases)
    criteria = collections.Counter(c.criterion for c in right if c.kube.outcome == PREEMPTED)
    # Per reason: the refused rounds where some node of the round is no candidate for it.
    reasons = collections.Counter(r for c in right if c.kube.outcome == NO_CANDIDATE for r in c.gpu_reasons)
    in_play = [c for c in right if c.pdb_in_play]
    changed = collections.Counter(c.pdb_changed for c in in_play if c.pdb_changed)
    unchanged = sum(c.pdb_changed is None for c in in_play)
    summary = {
        "kube_scheduler": toolchain.binary("kube-scheduler").parent.name,
        "seed": SEED,
        "rounds": len(cases),
        "wrong": len(wrong),
        "outcomes": dict(outcomes),
        "preempted_by_criterion": dict(criteria),
        "no_candidate_by_reason": dict(reasons),
        "pdb_in_play": len(in_play),
        "pdb_changed_choice": dict(changed),
        "pdb_in_play_unchanged": unchanged,
        "chosen_breaks_a_pdb": sum(bool(c.gpu.best and c.gpu.best.violations) for c in right),
        "seconds": round(elapsed, 1),
        "budget_sync_attempts": collections.Counter(c.budget_sync_attempts for c in cases),
        "wrong_cases": [{"case": c.row(), "world": c.world} for c in wrong],
        "cases": [{"case": c.row(), "world": c.world} for c in cases],
    }
    SUMMARY.parent.mkdir(parents=True, exist_ok=True)
    SUMMARY.write_text(json.dumps(summary, indent=2) + "\n")
    print(
        f"\npreemption differential: {len(cases)} rounds, {len(wrong)} wrong; {dict(outcomes)}; preempted, by the "
        f"criterion that chose: {dict(criteria)}; no candidate, by reason (rounds): {dict(reasons)}; a PDB in play "
        f"in {len(in_play)} (changed the choice: {dict(changed)}, unchanged: {unchanged}; the "
        f"choice breaks a PDB: {summary['chosen_breaks_a_pdb']}); budget barrier attempts: "
        f"{dict(summary['budget_sync_attempts'])}; {elapsed:.0f}s"
    )
    assert not wrong, f"{len(wrong)} round(s) where the choices differ (worlds in {SUMMARY}):\n" + "\n".join(
        c.row() for c in wrong
    )
    refused = [c for c in right if c.kube.outcome == NO_CANDIDATE]
    each_way = {
        "preempted": outcomes[PREEMPTED],
        "no candidate": outcomes[NO_CANDIDATE],
        "preempted, one candidate": criteria["only candidate"],
        "preempted, several candidates": sum(criteria.values()) - criteria["only candidate"],
        "a PDB changed the choice": sum(changed.values()),
        "a PDB in play did not": unchanged,
        "no candidate, a node preemption cannot help": reasons[NOT_HELPFUL],
        "no candidate, a node without victims": reasons[NO_VICTIMS],
        "no candidate, a node short with its victims gone": sum(
            any(r not in (NOT_HELPFUL, NO_VICTIMS) for r in c.gpu_reasons) for c in refused
        ),
    }
    assert min(each_way.values()) >= MIN_EACH_WAY, f"classes seen fewer than {MIN_EACH_WAY} times: {each_way}"
