"""The chart's release on the KinD test-bed (chart.feature, KinD tier only): what its lifecycle does to a running
cluster, with the real helm (harness/helm.py) on the release roles/deploy installed.

- An upgrade that changes one value (logLevel) rolls the scheduler, the webhook and the agent onto new pods with the
  new argument; the GPU Leases are the same objects with the same holders, the bound pods the same pods on the same
  nodes, one of the new scheduler pods leads, and the webhook (failurePolicy Fail) admits every map pod created
  meanwhile (dry-run creations every 0.3 s from before the upgrade until the last old webhook pod is gone), each
  with CUDA_VISIBLE_DEVICES from the map. An upgrade back to the original values ends it.
- An uninstall deletes every object of the release's manifest (the namespace of the GPU Leases with them), the
  programs' pods and the release's records, and leaves the CRDs with their objects and the bound pods (pods are not
  the release's). Installed again from the same package with the same values, the new leader re-creates the GPU
  Leases of the bound claim pods from their allocation annotations (its lease sweep), and places new pods.
  Tagged @disruptive: features/conftest.py runs it after every other scenario, since nothing is scheduled or
  admitted while the release is away.

The map pods of the take-home StatefulSet hold no Lease (a map's GPUs are Shared and never locked), so the Leases
the scenarios follow are those of a claim pod each creates. Whatever a step fails, the fixture `release_guard`
puts the release back as it was found: the same package (build/charts/<chart>.tgz, which roles/deploy made) with
exactly the same user-supplied values, so that the next `ansible-playbook site.yml` changes nothing. The shared
steps (the claim, "created with the map", "runs on") are features/conftest.py's.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from pytest_bdd import given, parsers, scenarios, then, when

from features.support import (
    AGENT_DAEMONSET,
    APP_LABEL,
    SCHEDULER_DEPLOYMENT,
    SYSTEM_NAMESPACE,
    TAKE_HOME_MAP,
    TESTBED,
    WEBHOOK_DEPLOYMENT,
    WORKER_NODES,
    World,
    claim_status,
    cuda_values,
    get_pod,
    leases_of,
    live_pods,
    pod_body,
    pod_ready,
    running_on,
    step,
)
from gpu_scheduling import constants, gpumap
from gpu_scheduling.claims import objects
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import ApiError, NotFound
from gpu_scheduling.kube.sync import SyncClient
from harness.helm import Helm, Release
from harness.wait import wait_for

scenarios("chart.feature")

#: The programs the chart deploys, by their `app` label (each one's Deployment or DaemonSet name).
_PROGRAMS = (SCHEDULER_DEPLOYMENT, WEBHOOK_DEPLOYMENT, AGENT_DAEMONSET)
_CHECK_NAMESPACE: str = TESTBED["testbed_check_namespace"]
_CHECK_NAME: str = TESTBED["testbed_check_name"]
_CHECK_REPLICAS: int = TESTBED["testbed_check_replicas"]
#: Labels Helm puts on the Secrets that record a release's revisions (its storage driver's).
_RELEASE_RECORD_SELECTOR = "owner=helm,name={release}"
# Pods, Leases and objects that must appear or go after helm returned: seconds on an idle test-bed, room for a
# loaded 2-core machine.
_SETTLE_TIMEOUT = 180
# A follower takes the leader Lease within the lease duration and two jittered retry periods (15 + 2 x 4.4 s).
_LEADER_TIMEOUT = 60


# ---- the release and what the scenario saw --------------------------------------------------------------------


@dataclasses.dataclass
class ChartState:
    """What the scenario found and did: the release as found (the guard restores it), the programs' pods before
    the last change, the GPU Leases and bound pods recorded before it, and the admissions during the upgrade."""

    helm: Helm
    original: Release | None = None
    original_values: dict[str, Any] = dataclasses.field(default_factory=dict)
    original_args: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # program -> its container args
    pods_before: dict[str, set[str]] = dataclasses.field(default_factory=dict)  # program -> pod names
    leases: dict[str, tuple[str, tuple[str, ...]]] = dataclasses.field(default_factory=dict)  # name -> (uid, holders)
    bound: dict[tuple[str, str], tuple[str, str]] = dataclasses.field(default_factory=dict)  # (ns, pod) -> (uid, node)
    manifest: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    probes: AdmissionProbes | None = None
    upgrade_started: float = 0.0
    rollout_over: float = 0.0
    discovery: dict[str, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)  # apiVersion -> resources

    @property
    def release(self) -> Release:
        assert self.original is not None, "no release recorded (the Given step did not run)"
        return self.original


@pytest.fixture
def release_guard(world: World) -> Iterator[ChartState]:
    """The scenario's ChartState. Afterwards the release is put back as the Given step found it (installed
    again, or upgraded back to the same package and values) whatever failed; after `world`'s set-up, so that this
    runs before the scenario's namespace (and its claim pod) goes."""
    state = ChartState(Helm(world.cluster.kubeconfig))
    yield state
    if state.original is not None:
        _restore(world.api, state)


def _restore(api: SyncClient, state: ChartState) -> None:
    release, helm = state.release, state.helm
    current = helm.release(release.name, release.namespace)
    if current is None:
        print(f"\nrestoring release {release.name}: installing {release.package.name} again")
        _wait_namespace_gone(api, constants.LEASE_NAMESPACE)
        helm.install(release.name, release.namespace, release.package, state.original_values)
    elif (
        current.chart != release.chart
        or current.status != "deployed"
        or helm.values(release.name, release.namespace) != state.original_values
    ):
        print(f"\nrestoring release {release.name}: upgrading back to {release.package.name} and its values")
        helm.upgrade(release.name, release.namespace, release.package, values=state.original_values)
    _assert_original(state)


def _assert_original(state: ChartState) -> None:
    release, helm = state.release, state.helm
    current = helm.release(release.name, release.namespace)
    assert current is not None, f"no release {release.name} in {release.namespace}"
    assert (current.chart, current.app_version, current.status) == (release.chart, release.app_version, "deployed"), (
        current,
        release,
    )
    values = helm.values(release.name, release.namespace)
    assert values == state.original_values, f"release values {values}, expected {state.original_values}"


@given(step('the deployed release "{name:q}" in namespace "{namespace:q}"'))
def deployed_release(world: World, release_guard: ChartState, name: str, namespace: str) -> None:
    if world.cluster.cp is not None:
        pytest.skip("needs the release of the KinD test-bed")
    helm = release_guard.helm
    release = helm.release(name, namespace)
    assert release is not None, f"no release {name} in {namespace}: run the deploy phase (roles/deploy)"
    assert release.status == "deployed", release
    assert release.chart.startswith("gpu-scheduler-"), release
    # Checked before anything changes: without the package the release could not be put back.
    assert release.package.is_file(), f"{release.package} (roles/deploy's package of {release.chart}) is missing"
    release_guard.original = release
    release_guard.original_values = helm.values(name, namespace)
    pods = wait_for("every program's pods Ready", lambda: _program_pods(world), timeout=_SETTLE_TIMEOUT)
    release_guard.original_args = {program: _args(found[0]) for program, found in pods.items()}
    for program, found in pods.items():
        assert all(_args(p) == release_guard.original_args[program] for p in found), (
            f"the pods of {program} run with different arguments: {[_args(p) for p in found]}"
        )


def _program_pods(world: World) -> dict[str, list[dict[str, Any]]] | None:
    """Each program's live pods, when every one of them is Ready and none is being replaced."""
    found = {program: live_pods(world, SYSTEM_NAMESPACE, program) for program in _PROGRAMS}
    everyone = world.api.pods(SYSTEM_NAMESPACE, labelSelector=f"{APP_LABEL} in ({','.join(_PROGRAMS)})")
    if any(p["metadata"].get("deletionTimestamp") for p in everyone):
        return None
    if all(pods and all(pod_ready(p) for p in pods) for pods in found.values()):
        return found
    return None


def _args(pod: dict[str, Any]) -> list[str]:
    args: list[str] = pod["spec"]["containers"][0].get("args") or []
    return args


# ---- recording -------------------------------------------------------------------------------------------------


@given(step('the pod "{name:q}" runs on {node} and holds the Leases of the GPUs of its claim'))
def claim_pod_holds(world: World, name: str, node: str) -> None:
    pod = wait_for(f"pod {name} Running on {node}", lambda: running_on(world, name, node), timeout=_SETTLE_TIMEOUT)
    claim = pod["metadata"]["annotations"][constants.CLAIM_ANNOTATION]
    status = wait_for(
        f"GpuClaim {claim} Bound", lambda: (s := claim_status(world, claim)).get("phase") == "Bound" and s
    )
    assert status["nodeName"] == node, status
    expected = sorted(objects.lease_name(node, gpu) for gpu in status["gpuIds"])
    assert leases_of(world.api, pod["metadata"]["uid"]) == expected, (name, status)


@given("the programs' pods, the GPU Leases and the bound pods are recorded")
def record(world: World, release_guard: ChartState) -> None:
    pods = wait_for("every program's pods Ready", lambda: _program_pods(world), timeout=_SETTLE_TIMEOUT)
    release_guard.pods_before = {program: _names(found) for program, found in pods.items()}
    # Leases of pods an earlier scenario deleted go within seconds; record them once none is left.
    release_guard.leases = wait_for(
        "every GPU Lease naming only live bound pods", lambda: _settled_leases(world.api), timeout=_SETTLE_TIMEOUT
    )
    assert release_guard.leases, "no GPU Lease to follow"
    release_guard.bound = _bound_pods(world)


def _names(pods: list[dict[str, Any]]) -> set[str]:
    return {p["metadata"]["name"] for p in pods}


def _gpu_leases(api: SyncClient) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Every GPU Lease: name -> (its uid, its holders' pod uids)."""
    items = api.get(paths.GPU_LEASES, labelSelector=constants.GPU_LEASE_SELECTOR)["items"]
    return {
        lease["metadata"]["name"]: (lease["metadata"]["uid"], tuple(sorted(objects.lease_holders(lease))))
        for lease in items
    }


def _settled_leases(api: SyncClient) -> dict[str, tuple[str, tuple[str, ...]]] | None:
    live = {
        p["metadata"]["uid"]
        for p in api.get(paths.ALL_PODS)["items"]
        if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
    }
    leases = _gpu_leases(api)
    return leases if all(set(holders) <= live for _, holders in leases.values()) else None


def _bound_pods(world: World) -> dict[tuple[str, str], tuple[str, str]]:
    """The check StatefulSet's pods and the scenario's, each bound and Running: (namespace, name) -> (uid, node)."""
    check = world.api.pods(_CHECK_NAMESPACE, labelSelector=f"{APP_LABEL}={_CHECK_NAME}")
    pods = [*check, *world.api.pods(world.namespace)]
    assert len(check) == _CHECK_REPLICAS, f"{len(check)} check pods, expected {_CHECK_REPLICAS}"
    for pod in pods:
        assert pod["spec"].get("nodeName") and pod["status"].get("phase") == "Running", (
            pod["metadata"]["name"],
            pod["status"],
        )
    return {
        (p["metadata"]["namespace"], p["metadata"]["name"]): (p["metadata"]["uid"], p["spec"]["nodeName"]) for p in pods
    }


# ---- the upgrade ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Admission:
    """One dry-run creation of a map pod."""

    sent: float  # time.monotonic()
    name: str
    expected: str  # CUDA_VISIBLE_DEVICES of its map entry
    seconds: float
    cuda: list[list[str | None]] | None = None  # per container, as admitted
    error: str = ""


class AdmissionProbes:
    """A thread that creates a map pod every `interval` seconds with dryRun=All (the apiserver runs the admission
    chain, webhooks included, and stores nothing), cycling through the map's indices, until stopped."""

    def __init__(self, kubeconfig: str, namespace: str, gpu_map: str, interval: float) -> None:
        self.api = SyncClient(kubeconfig, timeout=15)
        self.namespace = namespace
        self.gpu_map = gpu_map
        self.entries = gpumap.parse(gpu_map)
        self.indices = sorted(self.entries.entries)
        self.interval = interval
        self.results: list[Admission] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="admission-probes", daemon=True)

    def start(self) -> AdmissionProbes:
        self._thread.start()
        return self

    def stop(self) -> list[Admission]:
        self._stop.set()
        self._thread.join(timeout=30)
        return list(self.results)

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            started = time.monotonic()
            index = self.indices[n % len(self.indices)]
            self.results.append(self._create(f"probe-{n}-{index}", index))
            n += 1
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def _create(self, name: str, index: int) -> Admission:
        expected = self.entries.entry_for(index).cuda_visible_devices
        sent = time.monotonic()
        try:
            pod = self.api.request(
                "POST", paths.pods(self.namespace), pod_body(name, gpu_map=self.gpu_map), params={"dryRun": "All"}
            )
        except (ApiError, OSError) as exc:  # a refusal, or the apiserver unreachable (urllib's errors are OSErrors)
            return Admission(sent, name, expected, time.monotonic() - sent, error=f"{type(exc).__name__}: {exc}")
        return Admission(sent, name, expected, time.monotonic() - sent, cuda=cuda_values(pod))


@when(
    parsers.parse(
        'the release is upgraded with "{setting}" while a pod with the take-home map is created every {interval:f} s'
    )
)
def upgrade_with(world: World, release_guard: ChartState, setting: str, interval: float) -> None:
    release = release_guard.release
    probes = AdmissionProbes(world.cluster.kubeconfig, world.namespace, TAKE_HOME_MAP, interval).start()
    release_guard.probes = probes
    try:
        wait_for("a first admission before the upgrade", lambda: probes.results, timeout=30, interval=0.1)
        release_guard.upgrade_started = time.monotonic()
        release_guard.helm.upgrade(
            release.name, release.namespace, release.package, reuse_values=True, set_values=[setting]
        )
        upgraded = time.monotonic()
        # helm returns once the new pods are Ready; the old webhook pods may still be answering (or refusing)
        # connections while they terminate: probe until the last one is gone.
        old = release_guard.pods_before[WEBHOOK_DEPLOYMENT]
        wait_for("the old webhook pods gone", lambda: not (_present(world, WEBHOOK_DEPLOYMENT) & old), timeout=120)
        time.sleep(2 * interval)
        release_guard.rollout_over = time.monotonic()
    finally:
        results = probes.stop()
    print(
        f"\nhelm upgrade --set {setting}: {upgraded - release_guard.upgrade_started:.1f}s; old webhook pods gone "
        f"{release_guard.rollout_over - upgraded:.1f}s later; {len(results)} dry-run creations, slowest "
        f"{max(r.seconds for r in results):.2f}s"
    )


def _present(world: World, program: str) -> set[str]:
    """The names of every pod of `program`, terminating ones included."""
    return _names(world.api.pods(SYSTEM_NAMESPACE, labelSelector=f"{APP_LABEL}={program}"))


@then(step('the scheduler, the webhook and the agent run only new pods, all Ready, with "{arg:q}"'))
def rolled_with(world: World, release_guard: ChartState, arg: str) -> None:
    flag = arg.partition("=")[0] + "="

    def expected(program: str) -> list[str]:
        return [arg if a.startswith(flag) else a for a in release_guard.original_args[program]]

    _rolled(world, release_guard, expected)


@then("the scheduler, the webhook and the agent run only new pods, all Ready, with their original arguments")
def rolled_back(world: World, release_guard: ChartState) -> None:
    _rolled(world, release_guard, lambda program: release_guard.original_args[program])


def _rolled(world: World, state: ChartState, expected_args: Any) -> None:
    """Every program's pods are new since the last recording, as many as before, all Ready, none terminating,
    each running with `expected_args(program)`."""

    def rolled() -> dict[str, list[dict[str, Any]]] | None:
        found = _program_pods(world)
        if found is None:
            return None
        for program, pods in found.items():
            if len(pods) != len(state.pods_before[program]) or _names(pods) & state.pods_before[program]:
                return None
        return found

    found = wait_for("every program on new Ready pods", rolled, timeout=_SETTLE_TIMEOUT, interval=1)
    for program, pods in found.items():
        want = expected_args(program)
        wrong = {p["metadata"]["name"]: _args(p) for p in pods if _args(p) != want}
        assert not wrong, f"{program}: pods with other arguments than {want}: {wrong}"
    state.pods_before = {program: _names(pods) for program, pods in found.items()}


@then("one of the new scheduler pods holds the leader Lease")
def new_leader(world: World, release_guard: ChartState) -> None:
    pods = release_guard.pods_before[SCHEDULER_DEPLOYMENT]
    leader_lease = paths.lease(constants.LEASE_NAMESPACE, SCHEDULER_DEPLOYMENT)

    def holder() -> str | None:
        identity = world.api.get(leader_lease)["spec"].get("holderIdentity") or ""
        # gpu-scheduler's identity is `<hostname>_<uuid>`, and a pod's hostname is its name.
        return identity if identity.rpartition("_")[0] in pods else None

    wait_for(f"one of {sorted(pods)} holding the leader Lease", holder, timeout=_LEADER_TIMEOUT, interval=0.5)


@then("every GPU Lease is the same object with the same holders")
def same_leases(world: World, release_guard: ChartState) -> None:
    assert _gpu_leases(world.api) == release_guard.leases


@then("every bound pod is the same pod on the same node")
def same_pods(world: World, release_guard: ChartState) -> None:
    for (namespace, name), (uid, node) in release_guard.bound.items():
        pod = get_pod(world, name, namespace)
        assert pod["metadata"]["uid"] == uid and not pod["metadata"].get("deletionTimestamp"), (
            f"{namespace}/{name} was re-created or is being deleted: {pod['metadata']}"
        )
        assert pod["spec"].get("nodeName") == node and pod["status"].get("phase") == "Running", (
            f"{namespace}/{name}: on {pod['spec'].get('nodeName')}, {pod['status'].get('phase')}; was Running on {node}"
        )


@then("every pod created during the upgrade was admitted with CUDA_VISIBLE_DEVICES from the map")
def admitted_throughout(release_guard: ChartState) -> None:
    assert release_guard.probes is not None
    results = release_guard.probes.results
    refused = [r for r in results if r.error]
    examples = "; ".join(f"{r.name} at +{r.sent - release_guard.upgrade_started:.1f}s: {r.error}" for r in refused[:5])
    assert not refused, f"{len(refused)} of {len(results)} creations failed, e.g. {examples}"
    wrong = [r for r in results if not r.cuda or any(v != [r.expected] for v in r.cuda)]
    assert not wrong, [(r.name, r.expected, r.cuda) for r in wrong[:5]]
    # They covered the whole rollout: from before helm started until the last old webhook pod was gone.
    assert results[0].sent < release_guard.upgrade_started, "no creation before the upgrade"
    assert results[-1].sent >= release_guard.rollout_over - 1, "no creation after the old webhook pods were gone"
    during = [r for r in results if release_guard.upgrade_started <= r.sent <= release_guard.rollout_over]
    assert len(during) >= 10, f"only {len(during)} creations during the rollout"


@when("the release is upgraded back to its original values")
def upgrade_back(release_guard: ChartState) -> None:
    release = release_guard.release
    started = time.monotonic()
    release_guard.helm.upgrade(release.name, release.namespace, release.package, values=release_guard.original_values)
    print(f"\nhelm upgrade back to the original values: {time.monotonic() - started:.1f}s")


@then("the release has its original chart and values, deployed")
def original_release(release_guard: ChartState) -> None:
    _assert_original(release_guard)


# ---- uninstall and install again --------------------------------------------------------------------------------


@when("the release is uninstalled")
def uninstall(release_guard: ChartState) -> None:
    release = release_guard.release
    release_guard.manifest = release_guard.helm.manifest(release.name, release.namespace)
    started = time.monotonic()
    release_guard.helm.uninstall(release.name, release.namespace)
    print(f"\nhelm uninstall --wait: {time.monotonic() - started:.1f}s, {len(release_guard.manifest)} objects")


@then(step('no object of the release\'s manifest is left, the namespace "{namespace:q}" with the GPU Leases included'))
def manifest_gone(world: World, release_guard: ChartState, namespace: str) -> None:
    kinds = {(doc["kind"], doc["metadata"]["name"]) for doc in release_guard.manifest}
    assert ("Namespace", namespace) in kinds, f"the release did not make the namespace {namespace}: {sorted(kinds)}"
    started = time.monotonic()
    for doc in release_guard.manifest:
        path = _object_path(world.api, release_guard, doc)
        wait_for(f"{doc['kind']} {doc['metadata']['name']} deleted", lambda path=path: _gone(world.api, path), 120)
    print(
        f"\n{len(release_guard.manifest)} objects of the manifest gone ({time.monotonic() - started:.1f}s after "
        f"helm returned): {sorted(kinds)}"
    )


def _gone(api: SyncClient, path: str) -> bool | None:
    try:
        api.get(path)
    except NotFound:
        return True
    return None


def _object_path(api: SyncClient, state: ChartState, doc: dict[str, Any]) -> str:
    """The API path of a manifest's object, whatever its kind (a manifest may hold kinds that kube.paths has no
    function for)."""
    meta = doc["metadata"]
    return f"{_collection_path(api, state, doc['apiVersion'], doc['kind'], meta.get('namespace'))}/{meta['name']}"


def _collection_path(api: SyncClient, state: ChartState, api_version: str, kind: str, namespace: str | None) -> str:
    """The API path of the objects of `kind` (in `namespace`, or the release's, when the kind is namespaced), from
    the API's discovery document of its group and version."""
    base = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
    if api_version not in state.discovery:
        state.discovery[api_version] = api.get(base)["resources"]
    (resource,) = [r for r in state.discovery[api_version] if r["kind"] == kind and "/" not in r["name"]]
    if resource["namespaced"]:
        return f"{base}/namespaces/{namespace or state.release.namespace}/{resource['name']}"
    return f"{base}/{resource['name']}"


@then("no pod of the scheduler, the webhook or the agent is left, and no record of the release")
def programs_gone(world: World, release_guard: ChartState) -> None:
    release = release_guard.release
    # The workloads' pods go after them, deleted by the garbage collector in the background.
    wait_for(
        "every pod of the scheduler, the webhook and the agent gone",
        lambda: not any(_present(world, program) for program in _PROGRAMS),
        timeout=_SETTLE_TIMEOUT,
        interval=1,
    )
    assert release_guard.helm.release(release.name, release.namespace) is None
    secrets = _collection_path(world.api, release_guard, "v1", "Secret", release.namespace)
    records = world.api.get(secrets, labelSelector=_RELEASE_RECORD_SELECTOR.format(release=release.name))["items"]
    assert not records, [s["metadata"]["name"] for s in records]


@then(
    step(
        'the CRDs "{first:q}" and "{second:q}" remain, with the GpuClaim "{claim:q}" and a GpuNodeStatus of every '
        "worker"
    )
)
def crds_remain(world: World, first: str, second: str, claim: str) -> None:
    crds = {c["metadata"]["name"]: c for c in world.api.get(paths.CRDS)["items"]}
    for name in (first, second):
        assert name in crds and not crds[name]["metadata"].get("deletionTimestamp"), f"CRD {name}: {crds.get(name)}"
    assert world.api.get(paths.gpu_claim(world.namespace, claim))["status"]["phase"] == "Bound"
    for node in WORKER_NODES:
        world.api.get(paths.gpu_node_status(node))


@when("the release is installed again from the same package with the same values")
def install_again(world: World, release_guard: ChartState) -> None:
    release = release_guard.release
    _wait_namespace_gone(world.api, constants.LEASE_NAMESPACE)
    started = time.monotonic()
    release_guard.helm.install(release.name, release.namespace, release.package, release_guard.original_values)
    print(f"\nhelm install --wait of {release.package.name}: {time.monotonic() - started:.1f}s")


def _wait_namespace_gone(api: SyncClient, namespace: str) -> None:
    """A namespace being deleted refuses new objects: Helm cannot make it again until it is gone."""
    wait_for(f"namespace {namespace} gone", lambda: _gone(api, paths.namespace(namespace)), timeout=_SETTLE_TIMEOUT)


@then("every GPU Lease is back, re-created with the same holders")
def leases_back(world: World, release_guard: ChartState) -> None:
    want = {name: holders for name, (_, holders) in release_guard.leases.items()}
    started = time.monotonic()

    def back() -> dict[str, tuple[str, tuple[str, ...]]] | None:
        leases = _gpu_leases(world.api)
        return leases if {name: holders for name, (_, holders) in leases.items()} == want else None

    leases = wait_for(f"the GPU Leases {sorted(want)} back", back, timeout=_SETTLE_TIMEOUT, interval=0.5)
    print(f"\nGPU Leases back {time.monotonic() - started:.1f}s after helm install returned")
    # New objects (the old ones went with the namespace): the scheduler made them from the pods' allocations.
    same = [name for name, (uid, _) in leases.items() if uid == release_guard.leases[name][0]]
    assert not same, f"Leases that were never deleted: {same}"
