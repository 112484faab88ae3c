"""The Gherkin scenarios: the two tiers they run on, the session's cluster, each scenario's `World`, and the steps
that several subjects share. Each subject (features/<subject>/) binds its .feature files and holds its own steps
in its `test_<subject>.py`; what those steps share besides steps is in features/support.py.

Tiers (`--tier`, default `controlplane`):

- `controlplane`: one control plane per test session (real etcd, kube-apiserver, kube-controller-manager, kwok
  with Ready fake nodes node1..node4) with gpu-webhook and gpu-scheduler running as real processes; every
  scenario works in its own namespace and undoes what it changed on shared nodes. Every scenario not tagged
  @kind. This is what a plain `pytest` (or `pytest features`) runs.
- `kind`: the deployed KinD test-bed named by GPU_TEST_KUBECONFIG (the scheduler and the webhook deployed,
  kubelets running real containers, so pod logs are checked too): the scenarios tagged @kind and those of the
  control-plane tier that hold on a real cluster as well, tagged with one of KIND_TIER_MARKERS below.
  `pytest features --tier kind` (the verify role).

The tier is chosen only by `--tier`; `-m` and `-k` then select among its scenarios. Whatever the tier leaves out
is reported as deselected, with a line saying how many and which option selects them. Should the tier leave out
every scenario that the paths, `-m` and `-k` selected (`pytest features -m kind` without `--tier kind`), the run
stops with a usage error instead of passing on nothing. GPU_TEST_KUBECONFIG and the tier must agree: the kind tier
needs it (except with --collect-only), and the control-plane tier refuses it rather than ignore it. The unit and
integration tests under tests/ belong to no tier. Scenarios tagged @disruptive (the chart's uninstall, which takes
the scheduler and the webhook away while it runs) are run after all the others.

Scenarios tagged @exclusive need the KinD cluster to themselves: they uninstall, roll or kill the release, restart
kubelets, drain or patch nodes, or need free GPUs on node1..node4. On the kind tier they run only on a cluster the
test-bed created, which it marks with a ConfigMap in kube-public (inventory: testbed_marker_configmap), or when
GPU_TEST_EXCLUSIVE=true (the inventory's testbed_exclusive_scenarios); otherwise they are deselected with a line
saying why and how to opt in.
"""

from __future__ import annotations

import datetime
import os
import pathlib
import time
import uuid
from collections.abc import Generator, Iterator
from typing import Any

import pytest
from pytest_bdd import given, then, when

from features.support import (
    SYSTEM_NAMESPACE,
    TAKE_HOME_MAP,
    TESTBED,
    WORKER_NODES,
    ZONE_LABEL,
    ZONES,
    Cluster,
    StatefulSet,
    World,
    assert_cuda,
    assert_refused,
    assert_scheduled_event,
    bind_counts,
    claim_status,
    events_for,
    get_pod,
    leases_of,
    on_node,
    pod_body,
    pods_on_mapped_nodes,
    running_on,
    statefulset_body,
    step,
)
from gpu_scheduling import constants, gpumap
from gpu_scheduling.agent.inventory import simulated_status
from gpu_scheduling.claims import objects
from gpu_scheduling.cli.health import PART_OF, PART_OF_LABEL
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import NotFound
from gpu_scheduling.kube.sync import SyncClient
from hack import toolchain
from harness.components import Components
from harness.controlplane import ControlPlane, create_namespace, workload_api_flags
from harness.inventory import publish
from harness.processes import Process
from harness.skips import as_failure
from harness.wait import wait_for
from harness.watch import Findings, Watch, container_restarts, grown, pod_logs, restarted

# ---- tiers -----------------------------------------------------------------------------------------------------

CONTROLPLANE, KIND = "controlplane", "kind"
#: Tags of the scenarios that run on the KinD test-bed: its own and those that hold on a real cluster as well.
KIND_TIER_MARKERS = frozenset({"kind", "takehome", "errors", "claims"})
#: Tag of the scenarios that break every other one while they run: collected last (pytest_collection_modifyitems).
DISRUPTIVE = "disruptive"
#: Tag of the scenarios that need a cluster the test-bed created, or GPU_TEST_EXCLUSIVE (module docstring).
EXCLUSIVE = "exclusive"
EXCLUSIVE_ENV = "GPU_TEST_EXCLUSIVE"
MARKER_NAMESPACE = "kube-public"
MARKER_CONFIGMAP: str = TESTBED["testbed_marker_configmap"]
FEATURES = pathlib.Path(__file__).parent
EXTERNAL_KUBECONFIG = os.environ.get("GPU_TEST_KUBECONFIG")
#: Tags of the scenarios that make a program restart (or exit) or log a traceback or an error record on purpose;
#: every other scenario fails at its end when one did (harness/watch.py, the `world` fixture).
EXPECT_RESTART, EXPECT_TRACEBACK = "expect_restart", "expect_traceback"
#: Tag of the scenarios that need Kubernetes' own gang API (scheduling.k8s.io/v1beta1 PodGroups, 1.37 on): the
#: control-plane tier leaves them out on an older minor ($GPU_TESTBED_KUBERNETES=oldest), reported as deselected.
WORKLOAD_API = "workload_api"
_DESELECTED = pytest.StashKey[int]()
_WITHOUT_WORKLOAD_API = pytest.StashKey[tuple[int, str]]()
_WHY_NOT_EXCLUSIVE = pytest.StashKey[tuple[int, str]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--tier",
        choices=(CONTROLPLANE, KIND),
        default=CONTROLPLANE,
        help="which Gherkin scenarios run, and against what: 'controlplane' (default) on a control "
        "plane the session starts; 'kind' on the KinD test-bed named by GPU_TEST_KUBECONFIG",
    )


def tiers(item: pytest.Item) -> set[str]:
    """The tiers a scenario (or another test under features/) runs on."""
    markers = {mark.name for mark in item.iter_markers()}
    return ({CONTROLPLANE} if "kind" not in markers else set()) | ({KIND} if markers & KIND_TIER_MARKERS else set())


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{EXPECT_RESTART}: a program of the scenario restarts or exits by itself, on purpose (faults)"
    )
    config.addinivalue_line(
        "markers", f"{EXPECT_TRACEBACK}: a program of the scenario logs a traceback or an error record, on purpose"
    )
    config.addinivalue_line(
        "markers", f"{WORKLOAD_API}: needs Kubernetes' gang API ({constants.POD_GROUP_API_VERSION}), 1.37 on"
    )
    tier = config.getoption("tier")
    if tier == KIND and not EXTERNAL_KUBECONFIG and not config.option.collectonly:
        raise pytest.UsageError("--tier kind runs against the KinD test-bed: set GPU_TEST_KUBECONFIG to its kubeconfig")
    if tier == CONTROLPLANE and EXTERNAL_KUBECONFIG:
        raise pytest.UsageError(
            "GPU_TEST_KUBECONFIG is set, but the control-plane tier starts its own cluster: "
            "run the KinD tier with --tier kind, or unset GPU_TEST_KUBECONFIG"
        )


@pytest.hookimpl(trylast=True)  # after -m and -k, so that an empty selection can be told apart
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tier = config.getoption("tier")
    ours = [item for item in items if item.path.is_relative_to(FEATURES)]
    other = [item for item in ours if tier not in tiers(item)]
    config.stash[_DESELECTED] = len(other)
    if other:
        if len(other) == len(ours):
            raise pytest.UsageError(
                f"the {len(other)} scenario(s) selected under features/ are not in the {tier} tier (the default is "
                f"{CONTROLPLANE}): run them with --tier {KIND if tier == CONTROLPLANE else CONTROLPLANE}"
            )
        _deselect(config, items, other)
    kubernetes = toolchain.at_kubernetes(toolchain.read_versions())["kubernetes_version"]
    if tier == CONTROLPLANE and not workload_api_flags(kubernetes):
        needing = [item for item in items if item.get_closest_marker(WORKLOAD_API) is not None]
        if needing:
            config.stash[_WITHOUT_WORKLOAD_API] = (len(needing), kubernetes)
            _deselect(config, items, needing)
    exclusive = [item for item in items if item.get_closest_marker(EXCLUSIVE) is not None]
    if tier == KIND and exclusive and EXTERNAL_KUBECONFIG:
        why = exclusive_refusal(os.environ.get(EXCLUSIVE_ENV, ""), SyncClient(EXTERNAL_KUBECONFIG))
        if why:
            config.stash[_WHY_NOT_EXCLUSIVE] = (len(exclusive), why)
            _deselect(config, items, exclusive)
    # The @disruptive scenarios take the deployed components away while they run (features/chart: the release
    # uninstalled), so every other scenario runs before them; the order among each group stays as collected.
    items.sort(key=lambda item: item.get_closest_marker(DISRUPTIVE) is not None)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """No scenario may skip, on either tier (harness/skips.py): each tier runs only the scenarios it has everything
    for, so the steps' skips for the other tier (a KinD-only step on the control plane, and the reverse) are
    never reached, and one that is fails."""
    report = yield
    as_failure(report)
    return report


def _deselect(config: pytest.Config, items: list[pytest.Item], drop: list[pytest.Item]) -> None:
    """Report `drop` as deselected and take it out of `items`, in place."""
    config.hook.pytest_deselected(items=drop)
    dropped = set(drop)
    items[:] = [item for item in items if item not in dropped]


def exclusive_refusal(opt_in: str, api: SyncClient) -> str:
    """Why the @exclusive scenarios may not run on this cluster, or "" when they may: the opt-in says yes, or the
    cluster carries the test-bed's marker."""
    if opt_in.strip().lower() in ("1", "true", "yes"):
        return ""
    try:
        api.get(paths.config_map(MARKER_NAMESPACE, MARKER_CONFIGMAP))
    except NotFound:
        return (
            f"this cluster has no ConfigMap {MARKER_NAMESPACE}/{MARKER_CONFIGMAP}, so the test-bed did not create it; "
            f"{EXCLUSIVE_ENV}=true (site.yml: -e testbed_exclusive_scenarios=true) runs them"
        )
    return ""


def pytest_report_collectionfinish(config: pytest.Config) -> list[str]:
    tier = config.getoption("tier")
    lines = []
    count = config.stash.get(_DESELECTED, 0)
    if count:
        other = KIND if tier == CONTROLPLANE else CONTROLPLANE
        lines.append(f"tier {tier}: {count} scenario(s) of the {other} tier deselected (--tier {other} runs them)")
    needing, kubernetes = config.stash.get(_WITHOUT_WORKLOAD_API, (0, ""))
    if needing:
        lines.append(
            f"tier {tier}: {needing} @{WORKLOAD_API} scenario(s) deselected: Kubernetes {kubernetes} does not serve "
            f"the gang API ({constants.POD_GROUP_API_VERSION}); the newest supported minor runs them"
        )
    exclusive, why = config.stash.get(_WHY_NOT_EXCLUSIVE, (0, ""))
    if exclusive:
        lines.append(f"tier {tier}: {exclusive} @{EXCLUSIVE} scenario(s) deselected: {why}")
    return lines


# ---- the cluster and the world ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if request.config.getoption("tier") == KIND:
        assert EXTERNAL_KUBECONFIG
        api = SyncClient(EXTERNAL_KUBECONFIG)
        drop_stale_scenario_namespaces(api)
        yield Cluster(api)
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


#: Every scenario's namespace carries it, so that one left by an interrupted run can be found.
SCENARIO_LABEL = "gpu-scheduling.test/scenario"


def drop_stale_scenario_namespaces(api: SyncClient, timeout: float = 180) -> None:
    """Delete the scenario namespaces an interrupted earlier session left on the KinD cluster (its pods would
    still hold GPUs and fail this session's scenarios), and wait until they are gone."""
    stale = [n["metadata"]["name"] for n in api.get(paths.NAMESPACES, labelSelector=SCENARIO_LABEL)["items"]]
    for ns in stale:
        print(f"\ndeleting namespace {ns}, left by an interrupted session")
        api.delete(paths.pods(ns), gracePeriodSeconds="0")
        api.delete(paths.namespace(ns))

    def gone(ns: str) -> bool | None:
        try:
            api.get(paths.namespace(ns))
        except NotFound:
            return True
        return None

    for ns in stale:
        wait_for(f"namespace {ns} deleted", lambda ns=ns: gone(ns), timeout=timeout)


class Watched:
    """What the project's programs did while one test ran (harness/watch.py), read at its end by the `watched`
    fixture: the project's log records in the test's own process always; once a cluster is attached (`attach`:
    the test uses the session's cluster), on the control-plane tier the session's programs (the webhook, every
    scheduler, the extra ones included after they are stopped) and any the test hands to `add`, on KinD the
    containers of the project's pods in the system namespace: their restart counts and their logs."""

    def __init__(self) -> None:
        self.cluster: Cluster | None = None
        self.watch = Watch(None)
        self.added: list[Process] = []
        self.since = datetime.datetime.now(datetime.UTC)
        self._kind_restarts: dict[str, int] = {}
        self._settled: Findings | None = None
        self._restarted_containers: list[str] = []
        self.watch.begin(())

    def attach(self, cluster: Cluster) -> None:
        """Watch `cluster`'s programs from now on (once; the `world` fixture and any test using `cluster`)."""
        if self.cluster is not None:
            return
        self.cluster = cluster
        self.since = datetime.datetime.now(datetime.UTC)
        if cluster.cp is not None:
            self.watch.log_dir = cluster.cp.logs
            self.watch.begin(self.programs)
        else:
            self._kind_restarts = container_restarts(cluster.api.pods(SYSTEM_NAMESPACE))

    @property
    def programs(self) -> list[Process]:
        comps = self.cluster.components if self.cluster is not None else None
        return [*(comps.programs if comps is not None else ()), *self.added]

    def add(self, program: Process) -> Process:
        """Watch `program` too, one the test starts itself (an inventory agent, a board): its restarts, its exits
        by itself and its log from now on."""
        self.watch.watch(program)
        self.added.append(program)
        return program

    def settle(self) -> None:
        """Read now which programs restarted or exited by themselves: what the test's teardown does after this
        (starting again what the test stopped) is not the test's. Once; `end` reads it when nobody did before."""
        if self._settled is not None:
            return
        self._settled = self.watch.programs(self.programs)
        if self.cluster is not None and self.cluster.cp is None:
            after = container_restarts(self.cluster.api.pods(SYSTEM_NAMESPACE))
            self._settled += Findings(restarts=restarted(self._kind_restarts, after))
            self._restarted_containers = grown(self._kind_restarts, after)

    def end(self, request: pytest.FixtureRequest) -> None:
        """Fail the test on what its programs did that it does not declare; the logs are read last, so that the
        requests of the test's teardown count too."""
        self.settle()
        assert self._settled is not None
        try:
            found = self._settled + self.watch.logs(self.programs)
        finally:
            self.watch.end()
        where = f"{self.watch.log_dir} and the test's log" if self.watch.log_dir else "the test's log"
        if self.cluster is not None and self.cluster.cp is None:
            found += pod_logs(self.cluster.api, SYSTEM_NAMESPACE, PROJECT_PODS, self.since, self._restarted_containers)
            where = f"the logs of the {SYSTEM_NAMESPACE} namespace's pods labelled {PROJECT_PODS}"
        fail_on_undeclared(request, found, where)


#: The project's pods among the system namespace's (the chart's label: app.kubernetes.io/part-of).
PROJECT_PODS = f"{PART_OF_LABEL}={PART_OF}"


@pytest.fixture(autouse=True)
def watched(request: pytest.FixtureRequest) -> Iterator[Watched]:
    """Every test under features/ fails at its end on what the project's programs it ran did without its
    declaring it (@expect_restart, @expect_traceback): restarts, exits by themselves, tracebacks and error records
    (harness/watch.py). A test taking `cluster` is watched with it from its start; a scenario from when its `world`
    is made (pytest-bdd asks for the steps' fixtures as the steps run)."""
    watched = Watched()
    if "cluster" in request.fixturenames:
        watched.attach(request.getfixturevalue("cluster"))
    yield watched
    watched.end(request)


@pytest.fixture
def world(request: pytest.FixtureRequest, cluster: Cluster, watched: Watched) -> Iterator[World]:
    api = cluster.api
    ns = f"s-{uuid.uuid4().hex[:8]}"
    create_namespace(api, ns, timeout=30, labels={SCENARIO_LABEL: "true"})
    w = World(api, cluster, ns)
    comps = cluster.components
    watched.attach(cluster)
    yield w
    # What the programs did is read before the teardown restarts any of them; their logs after it (`watched`).
    watched.settle()
    # Undo what this scenario changed on shared things, then drop its namespace.
    if comps is not None and not comps.webhook.running:
        comps.start_webhook()
    if comps is not None and not comps.scheduler.running:
        comps.start_scheduler()
    for node, patch in reversed(w.node_undo):
        api.patch(paths.node(node), patch, kind="strategic")
    api.delete(paths.statefulsets(ns))
    api.delete(paths.jobs(ns))  # orphans its pods (the Jobs' default), deleted next, so none is created again
    api.delete(paths.pods(ns), gracePeriodSeconds="0")
    for node in w.added_nodes:
        api.delete(paths.node(node))
    api.delete(paths.namespace(ns))
    if cluster.cp is not None:
        cluster.cp.check_alive()


def fail_on_undeclared(request: pytest.FixtureRequest, found: Findings, where: str) -> None:
    """Fail the test on what its programs did that its tags (markers) do not declare (harness/watch.py)."""
    unexpected = found.unexpected(
        restarts=request.node.get_closest_marker(EXPECT_RESTART) is not None,
        tracebacks=request.node.get_closest_marker(EXPECT_TRACEBACK) is not None,
    )
    if unexpected:
        pytest.fail(
            f"the test's programs did what it did not declare (tagged @{EXPECT_RESTART} or @{EXPECT_TRACEBACK} "
            f"when meant; see {where}):\n" + "\n".join(unexpected),
            pytrace=False,
        )


# ---- StatefulSets (takehome, admission, resilience, kind) ------------------------------------------------------


@given("the take-home map", target_fixture="gpu_map")
def take_home_map() -> str:
    return TAKE_HOME_MAP


@given(
    step('the StatefulSet "{name:q}" with {replicas:d} replicas is created with that map'), target_fixture="statefulset"
)
@when(
    step('the StatefulSet "{name:q}" with {replicas:d} replicas is created with that map'), target_fixture="statefulset"
)
def create_statefulset(world: World, gpu_map: str, name: str, replicas: int) -> StatefulSet:
    world.api.create(paths.statefulsets(world.namespace), statefulset_body(name, replicas, gpu_map))
    return StatefulSet(name, world.namespace, gpu_map)


@given(
    step('a StatefulSet "{name:q}" of {replicas:d} parallel replicas mapped round-robin onto node1..node4'),
    target_fixture="statefulset",
)
def create_round_robin_statefulset(world: World, name: str, replicas: int) -> StatefulSet:
    # Map more indices than replicas, so that the later scale-up is covered by the same map.
    entries = {i: gpumap.Entry(i, WORKER_NODES[i % 4], (i % 8,)) for i in range(100)}
    gpu_map = gpumap.encode(entries)
    world.api.create(paths.statefulsets(world.namespace), statefulset_body(name, replicas, gpu_map, parallel=True))
    return StatefulSet(name, world.namespace, gpu_map)


@given(step('the deployed StatefulSet "{name:q}" in namespace "{namespace:q}"'), target_fixture="statefulset")
def deployed_statefulset(name: str, namespace: str) -> StatefulSet:
    return StatefulSet(name, namespace)


@then(step("all {replicas:d} pods run on their mapped nodes"))
def all_n_pods_on_mapped_nodes(world: World, statefulset: StatefulSet, replicas: int) -> None:
    pods_on_mapped_nodes(world, statefulset, replicas)


# ---- pods ------------------------------------------------------------------------------------------------------


@when(step('the pod "{name:q}" is created with the map "{gpu_map:q}"'))
def create_pod_with_map(world: World, name: str, gpu_map: str) -> None:
    world.attempt(lambda: world.api.create(paths.pods(world.namespace), pod_body(name, gpu_map=gpu_map)))


@when(step('the pod "{name:q}" for scheduler "{scheduler:q}" is created without a map'))
def create_pod_without_map(world: World, name: str, scheduler: str) -> None:
    world.api.create(paths.pods(world.namespace), pod_body(name, gpu_map=None, scheduler=scheduler))
    world.error = None


@given(step('the pod "{name:q}" naming the GpuClaim "{claim:q}" is created'))
@when(step('the pod "{name:q}" naming the GpuClaim "{claim:q}" is created'))
def create_claim_pod(world: World, name: str, claim: str) -> None:
    world.api.create(paths.pods(world.namespace), pod_body(name, gpu_map=None, claim=claim))
    world.error = None


# ---- what a pod asks of its node (scheduler.fit) ------------------------------------------------------------------


@given(step('the pod "{name:q}" of another scheduler requesting {resource} "{quantity:q}" runs on node "{node:q}"'))
def other_pod_on_node(world: World, name: str, resource: str, quantity: str, node: str) -> None:
    # Bound at creation, as a DaemonSet's or another scheduler's pod would be: it takes its room on the node.
    body = pod_body(name, gpu_map=None, scheduler="another-scheduler", requests={resource: quantity}, node=node)
    world.api.create(paths.pods(world.namespace), body)


@when(step('the pod "{name:q}" requesting {resource} "{quantity:q}" is created with the map "{gpu_map:q}"'))
def create_map_pod_with_requests(world: World, name: str, resource: str, quantity: str, gpu_map: str) -> None:
    body = pod_body(name, gpu_map=gpu_map, requests={resource: quantity})
    world.api.create(paths.pods(world.namespace), body)


@when(step('the pod "{name:q}" requesting {resource} "{quantity:q}" naming the GpuClaim "{claim:q}" is created'))
def create_claim_pod_with_requests(world: World, name: str, resource: str, quantity: str, claim: str) -> None:
    body = pod_body(name, gpu_map=None, claim=claim, requests={resource: quantity})
    world.api.create(paths.pods(world.namespace), body)


@when(step('the pod "{name:q}" naming the GpuClaim "{claim:q}" with required node affinity to "{nodes:q}" is created'))
def create_claim_pod_with_affinity(world: World, name: str, claim: str, nodes: str) -> None:
    body = pod_body(name, gpu_map=None, claim=claim, affinity_nodes=nodes.split(","))
    world.api.create(paths.pods(world.namespace), body)


@then(step('for {seconds:d} seconds the pod "{name:q}" stays unbound'))
def stays_unbound(world: World, name: str, seconds: int) -> None:
    deadline = time.monotonic() + seconds
    while True:
        pod = get_pod(world, name)
        assert not pod["spec"].get("nodeName"), f"{name} was bound to {pod['spec'].get('nodeName')}"
        if time.monotonic() >= deadline:
            return
        time.sleep(0.5)


@given(step('the GpuClaim "{name:q}" asking for {count:d} GPUs on any node is created'))
def claim_anywhere(world: World, name: str, count: int) -> None:
    world.api.create(paths.gpu_claims(world.namespace), objects.claim_body(name, {"devices": {"count": count}}))


@when(step('the pod "{name:q}" held by the scheduling gate "{gate:q}" is created with the map "{gpu_map:q}"'))
def create_gated_map_pod(world: World, name: str, gate: str, gpu_map: str) -> None:
    world.api.create(paths.pods(world.namespace), pod_body(name, gpu_map=gpu_map, gates=[gate]))


@when(step('the pod "{name:q}" naming the GpuClaim "{claim:q}" and held by the scheduling gate "{gate:q}" is created'))
def create_gated_claim_pod(world: World, name: str, claim: str, gate: str) -> None:
    world.api.create(paths.pods(world.namespace), pod_body(name, gpu_map=None, claim=claim, gates=[gate]))


@then(
    step(
        'for {seconds:d} seconds the pod "{name:q}" is not bound, gpu-scheduler never tries it and its PodScheduled '
        "condition says SchedulingGated"
    )
)
def gated_and_untried(world: World, name: str, seconds: int) -> None:
    # A gated pod is not the scheduler's to try (the apiserver refuses its Binding): no attempt, no event, and the
    # apiserver's own condition left as it set it.
    deadline = time.monotonic() + seconds
    while True:
        pod = get_pod(world, name)
        assert not pod["spec"].get("nodeName"), pod["spec"].get("nodeName")
        conditions = {c["type"]: c for c in pod["status"].get("conditions") or []}
        assert conditions.get("PodScheduled", {}).get("reason") == "SchedulingGated", conditions
        if time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    assert bind_counts(world, range(1000))[name] == 0, "gpu-scheduler tried to bind it"
    assert events_for(world, "Pod", name, "FailedScheduling") == [], "gpu-scheduler reported on a gated pod"


@when(step('the scheduling gates of the pod "{name:q}" are removed'))
def remove_gates(world: World, name: str) -> None:
    world.api.patch(paths.pod(world.namespace, name), {"spec": {"schedulingGates": None}}, kind="merge")


@when(step('the pod "{name:q}" is deleted'))
def delete_pod(world: World, name: str) -> None:
    uid = get_pod(world, name)["metadata"]["uid"]
    world.deleted[name] = uid
    world.held_at_deletion[name] = leases_of(world.api, uid)
    world.api.delete(paths.pod(world.namespace, name), gracePeriodSeconds="0")


@then(step('the pod "{name:q}" runs on {node} with CUDA_VISIBLE_DEVICES "{devices:q}"'))
def pod_runs(world: World, name: str, node: str, devices: str) -> None:
    pod = wait_for(f"pod {name} Running on {node}", lambda: running_on(world, name, node), timeout=60)
    assert_cuda(pod, devices)


@then(step('there is no pod "{name:q}"'))
def no_pod(world: World, name: str) -> None:
    try:
        get_pod(world, name)
    except NotFound:
        pass
    else:
        raise AssertionError(f"pod {name} exists")


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
    events = wait_for(
        f"FailedScheduling event for {name}",
        lambda: [
            e for e in events_for(world, "Pod", name, constants.EVENT_FAILED_SCHEDULING) if fragment in e["message"]
        ],
    )
    assert events[0]["type"] == "Warning" and events[0]["source"]["component"] == constants.DEFAULT_SCHEDULER_NAME


# ---- refusals --------------------------------------------------------------------------------------------------


@then(step('the creation is refused with a message containing "{fragment:q}"'))
def refused(world: World, fragment: str) -> None:
    assert_refused(world, fragment)


@then(step('the message also contains "{fragment:q}"'))
def refused_also(world: World, fragment: str) -> None:
    assert_refused(world, fragment)


# ---- the scheduler's binds -------------------------------------------------------------------------------------


@when("the scheduler is stopped")
def stop_scheduler(world: World) -> None:
    assert world.cluster.components is not None
    world.cluster.components.scheduler.stop()


@when("the scheduler is started again", target_fixture="restarted_at")
def restart_scheduler(world: World) -> float:
    assert world.cluster.components is not None
    restarted_at = time.time()
    world.cluster.components.start_scheduler()
    return restarted_at


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
            f"{name}: {successes[name]} successful bindings, {cut_off[name]} cut off"
        )
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
        events = wait_for(
            f"a Scheduled event for {name}", lambda name=name: events_for(world, "Pod", name, constants.EVENT_SCHEDULED)
        )
        assert_scheduled_event(world, pod, events)


# ---- GpuClaims and their GPUs (claims, claims_scheduling, faults, security, kind, chart) -----------------------


@given('node1 and node2 are in zone "a", node3 and node4 in zone "b"')
def zones(world: World) -> None:
    for node, zone in ZONES.items():
        world.api.patch(paths.node(node), {"metadata": {"labels": {ZONE_LABEL: zone}}}, kind="strategic")
        world.node_undo.append((node, {"metadata": {"labels": {ZONE_LABEL: None}}}))


@given("every kwok node has the simulated inventory of 8 GPUs in two NVLink islands")
def inventory(world: World) -> None:
    publish(world.cluster.kubeconfig, {node: simulated_status() for node in WORKER_NODES})


@given(step('the GpuClaim "{name:q}" asking for {count:d} GPUs with policy "{policy:q}" on node "{node:q}" is created'))
def claim_on_node(world: World, name: str, count: int, policy: str, node: str) -> None:
    world.api.create(
        paths.gpu_claims(world.namespace),
        objects.claim_body(name, {"devices": {"count": count, "policy": policy}, "selector": on_node(node)}),
    )


@given(step('the GpuClaim "{name:q}" asking for {count:d} GPUs for the gang "{gang:q}" is created'))
def gang_claim(world: World, name: str, count: int, gang: str) -> None:
    body = objects.claim_body(name, {"devices": {"count": count}, "gangRef": gang})
    world.api.create(paths.gpu_claims(world.namespace), body)


@then(step('the GpuClaim "{name:q}" is {phase} with a message containing "{fragment:q}"'))
def claim_phase(world: World, name: str, phase: str, fragment: str) -> None:
    wait_for(
        f"GpuClaim {name} {phase} mentioning {fragment!r}",
        lambda: (s := claim_status(world, name)).get("phase") == phase and fragment in s.get("message", ""),
        timeout=60,
    )


@then(step('the GpuClaim "{name:q}" is Bound with GPUs "{gpus:q}" on {node}'))
def claim_bound(world: World, name: str, gpus: str, node: str) -> None:
    status = wait_for(
        f"GpuClaim {name} Bound", lambda: (s := claim_status(world, name)).get("phase") == "Bound" and s, timeout=60
    )
    assert status["nodeName"] == node and status["allocated"] == f"{node}:{gpus}", status
    assert status["gpuIds"] == [int(g) for g in gpus.split(",")], status


@then(step('the pod "{name:q}" holds the leases "{names:q}"'))
def holds_leases(world: World, name: str, names: str) -> None:
    assert leases_of(world.api, get_pod(world, name)["metadata"]["uid"]) == sorted(names.split(","))


@then(step('no GPU lease is held by the pod "{name:q}"'))
def no_leases(world: World, name: str) -> None:
    uid = world.deleted[name]
    # Released, not never taken: the pod held Leases when the scenario deleted it.
    assert world.held_at_deletion.get(name), f"{name} held no GPU Lease when it was deleted"
    wait_for(f"the leases of {name} released", lambda: not leases_of(world.api, uid), timeout=30)
