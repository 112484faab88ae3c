"""Gangs placed whole or not at all (gangs.feature, control-plane tier): the claims' GPUs come from the simulated
inventory the tests publish, the zones from node labels a step sets. A gang is declared by the project's
annotations or by Kubernetes' own PodGroup (`Declared`); the scenarios of the second way are tagged @workload_api,
and one of them starts a second control plane whose apiserver has the gang API's gate off."""

from __future__ import annotations

import dataclasses
import pathlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from pytest_bdd import given, parsers, scenarios, then, when

from features.conftest import Watched
from features.support import (
    HOSTNAME_LABEL,
    JOB_NAME_LABEL,
    WORKER_NODES,
    ZONE_LABEL,
    ZONES,
    World,
    claim_status,
    gang_member_body,
    get_pod,
    indexed_job_body,
    leases_of,
    pod_body,
    step,
)
from gpu_scheduling import constants
from gpu_scheduling.claims import objects
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import NotFound
from gpu_scheduling.kube.sync import SyncClient
from harness.components import Components
from harness.controlplane import ControlPlane, create_namespace
from harness.wait import wait_for

scenarios("gangs.feature")

ANNOTATIONS, POD_GROUP = "annotations", "a PodGroup"


@dataclasses.dataclass(frozen=True)
class Declared:
    """How a scenario declared the gang of its name: by the project's annotations (its GpuClaim's gangRef and the
    members' gang annotations) or by a Kubernetes PodGroup its members name; its size; kept in one zone or not."""

    way: str
    claim: str
    size: int
    zoned: bool = False


@pytest.fixture
def declared() -> dict[str, Declared]:
    """The gangs the scenario declared, by name."""
    return {}


def pod_group_body(name: str, min_count: int | None, topology: str | None = None) -> dict[str, Any]:
    """A PodGroup of the gang policy with `min_count` (None: the basic policy), kept in one value of `topology`."""
    policy: dict[str, Any] = {"basic": {}} if min_count is None else {"gang": {"minCount": min_count}}
    spec: dict[str, Any] = {"schedulingPolicy": policy}
    if topology is not None:
        spec["schedulingConstraints"] = {"topology": [{"key": topology}]}
    return {
        "apiVersion": constants.POD_GROUP_API_VERSION,
        "kind": constants.POD_GROUP_KIND,
        "metadata": {"name": name},
        "spec": spec,
    }


def naming(body: dict[str, Any], group: str) -> dict[str, Any]:
    """`body` (a pod, or a Job's pod template) naming the PodGroup `group` in spec.schedulingGroup."""
    body["spec"]["schedulingGroup"] = {"podGroupName": group}
    return body


@given(
    parsers.re(
        r'the gang "(?P<gang>[^"]+)" of (?P<size>\d+) members, each with (?P<gpus>\d+) GPUs of the GpuClaim '
        r'"(?P<claim>[^"]+)",(?P<zoned> kept in one zone,)? is declared by (?P<way>annotations|a PodGroup)'
    )
)
def declare_gang(
    world: World, declared: dict[str, Declared], gang: str, size: str, gpus: str, claim: str, zoned: str, way: str
) -> None:
    """The GpuClaim the members name (its gangRef naming the gang when the annotations declare it) and, for a
    PodGroup, the PodGroup of the gang's size (kept in one zone: its topology constraint)."""
    spec: dict[str, Any] = {"devices": {"count": int(gpus)}}
    if way == ANNOTATIONS:
        spec["gangRef"] = gang
    world.api.create(paths.gpu_claims(world.namespace), objects.claim_body(claim, spec))
    if way == POD_GROUP:
        body = pod_group_body(gang, int(size), ZONE_LABEL if zoned else None)
        world.api.create(paths.pod_groups(world.namespace), body)
    declared[gang] = Declared(way, claim, int(size), bool(zoned))


def _declared_member(name: str, gang: str, d: Declared) -> dict[str, Any]:
    if d.way == ANNOTATIONS:
        return gang_member_body(name, d.claim, d.size, ZONE_LABEL if d.zoned else None, "Required")
    return naming(pod_body(name, gpu_map=None, claim=d.claim), gang)


@when(step('{n:d} pods "{first:q}".."{last:q}" of the gang "{gang:q}" are created'))
def create_declared_members(world: World, declared: dict[str, Declared], n: int, first: str, last: str, gang: str):
    names = _names(first, last)
    assert len(names) == n
    for name in names:
        world.api.create(paths.pods(world.namespace), _declared_member(name, gang, declared[gang]))


@when(step('the Indexed Job "{name:q}" of {pods:d} pods of the gang "{gang:q}" is created'))
def create_declared_job(world: World, declared: dict[str, Declared], name: str, pods: int, gang: str) -> None:
    d = declared[gang]
    annotations = {constants.CLAIM_ANNOTATION: d.claim}
    if d.way == ANNOTATIONS:
        annotations[constants.GANG_MIN_MEMBERS_ANNOTATION] = str(d.size)
    body = indexed_job_body(name, pods, annotations)
    if d.way == POD_GROUP:
        naming(body["spec"]["template"], gang)
    world.api.create(paths.jobs(world.namespace), body)


def _member(name: str, claim: str, size: int, mode: str | None = None) -> dict[str, Any]:
    return gang_member_body(name, claim, size, ZONE_LABEL if mode is not None else None, mode)


def _names(first: str, last: str) -> list[str]:
    prefix, _, low = first.rpartition("-")
    return [f"{prefix}-{i}" for i in range(int(low), int(last.rpartition("-")[2]) + 1)]


@when(
    parsers.re(
        r'(?P<n>\d+) pods "(?P<first>[^"]+)"\.\."(?P<last>[^"]+)" naming the GpuClaim "(?P<claim>[^"]+)" '
        r'with gang size (?P<size>\d+)(?: in one zone "(?P<mode>[^"]+)")?(?P<anti> and hostname anti-affinity)? '
        r"are created"
    )
)
def create_members(
    world: World, n: str, first: str, last: str, claim: str, size: str, mode: str | None, anti: str | None
) -> None:
    names = _names(first, last)
    assert len(names) == int(n)
    for name in names:
        body = _member(name, claim, int(size), mode)
        if anti:  # required anti-affinity for each other, per node: the gang's members see each other's placement
            labels = {"pair-of": claim}
            body["metadata"].setdefault("labels", {}).update(labels)
            term = {"topologyKey": HOSTNAME_LABEL, "labelSelector": {"matchLabels": labels}}
            body["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
        world.api.create(paths.pods(world.namespace), body)


@when(step('the pod "{name:q}" naming the GpuClaim "{claim:q}" in the gang "{gang:q}" is created'))
def create_named_member(world: World, name: str, claim: str, gang: str) -> None:
    body = _member(name, claim, 1)
    body["metadata"]["annotations"][constants.GANG_ANNOTATION] = gang
    world.api.create(paths.pods(world.namespace), body)


@when(step('the pods of the gangs "{a:q}" and "{b:q}", {n:d} members each, are created interleaved'))
def create_interleaved(world: World, a: str, b: str, n: int) -> None:
    for i in range(n):
        for gang in (a, b):
            world.api.create(paths.pods(world.namespace), _member(f"{gang}-{i}", gang, n))


def _pods(world: World, prefix: str) -> list[dict[str, Any]]:
    items = world.api.get(paths.pods(world.namespace))["items"]
    return [p for p in items if p["metadata"]["name"].rpartition("-")[0] == prefix]


def _bound(world: World, prefix: str) -> list[dict[str, Any]] | None:
    pods = _pods(world, prefix)
    return pods if pods and all(p["spec"].get("nodeName") for p in pods) else None


@then(step('every pod of "{prefix:q}" is bound'))
def all_bound(world: World, prefix: str) -> list[dict[str, Any]]:
    try:
        return wait_for(f"every pod of {prefix} bound", lambda: _bound(world, prefix), timeout=60)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; why they wait: {_why(world, prefix)}") from None


def _why(world: World, prefix: str) -> dict[str, str]:
    """Each unbound pod's PodScheduled message."""
    return {
        p["metadata"]["name"]: c.get("message", "")
        for p in _pods(world, prefix)
        for c in (p.get("status") or {}).get("conditions") or []
        if c["type"] == "PodScheduled" and not p["spec"].get("nodeName")
    }


@then(step('every pod of "{prefix:q}" is bound, each on its own node'))
def all_bound_apart(world: World, prefix: str) -> None:
    pods = all_bound(world, prefix)
    nodes = [p["spec"]["nodeName"] for p in pods]
    assert len(set(nodes)) == len(nodes), nodes


@then(step('every pod of "{prefix:q}" is bound, all in zone "{zone:q}"'))
def all_bound_in_zone(world: World, prefix: str, zone: str) -> None:
    pods = all_bound(world, prefix)
    assert {ZONES[p["spec"]["nodeName"]] for p in pods} == {zone}, [p["spec"]["nodeName"] for p in pods]


@then(step('every pod of "{prefix:q}" is bound, in both zones'))
def all_bound_across(world: World, prefix: str) -> None:
    pods = all_bound(world, prefix)
    assert {ZONES[p["spec"]["nodeName"]] for p in pods} == {"a", "b"}, [p["spec"]["nodeName"] for p in pods]


def _gang_leases(world: World, pods: list[dict[str, Any]]) -> set[str]:
    return {name for p in pods for name in leases_of(world.api, p["metadata"]["uid"])}


@then(step('every GPU Lease of the gang "{prefix:q}" was created before its first member was bound'))
def leases_before_binds(world: World, prefix: str) -> None:
    pods = _pods(world, prefix)
    names = _gang_leases(world, pods)
    assert len(names) == sum(len(p["metadata"]["annotations"][constants.GPU_IDS_ANNOTATION].split(",")) for p in pods)
    _locked_before_bound(world, pods, names)


def _locked_before_bound(world: World, pods: list[dict[str, Any]], names: set[str]) -> None:
    """From the audit log: each of the Leases `names` was created (once) before the first of `pods` was bound."""
    assert world.cluster.cp is not None
    writes = world.cluster.cp.writes()
    # The audit log is the session's: a Lease of the same name may have been created by an earlier scenario, so
    # each Lease's last create is the one that locked the GPU for this gang.
    last: dict[str, float] = {}
    for w in writes:
        if w["resource"] == "leases" and w["verb"] == "create" and w["name"] in names and w["code"] == 201:
            last[w["name"]] = max(last.get(w["name"], 0.0), w["received"])
    members = {p["metadata"]["name"] for p in pods}
    binds = [
        w["received"]
        for w in writes
        if w["resource"] == "pods/binding"
        and w["namespace"] == world.namespace
        and w["name"] in members
        and w["code"] in range(200, 300)
    ]
    assert set(last) == names, sorted(names - set(last))
    assert len(binds) == len(members), binds
    latest = max(last.values())
    assert latest <= min(binds), f"a member was bound {latest - min(binds):.3f} s before the last Lease"


@then(step('the GpuClaim "{name:q}" lists the GPUs of all {n:d} pods'))
def claim_lists_all(world: World, name: str, n: int) -> None:
    pods = {p["metadata"]["name"]: p for p in _pods(world, name)}

    def listed() -> list[dict[str, Any]] | None:
        allocations = claim_status(world, name).get("allocations") or []
        return allocations if len(allocations) == n else None

    allocations = wait_for(f"GpuClaim {name} listing {n} pods", listed, timeout=30)
    for a in allocations:
        pod = pods[a["pod"]]
        assert a["nodeName"] == pod["spec"]["nodeName"], a
        ids = pod["metadata"]["annotations"][constants.GPU_IDS_ANNOTATION]
        assert ",".join(map(str, a["gpuIds"])) == ids, (a, ids)


def _none_held(world: World, prefix: str) -> None:
    pods = _pods(world, prefix)
    assert pods, f"no pod of {prefix}"
    bound = [p["metadata"]["name"] for p in pods if p["spec"].get("nodeName")]
    assert not bound, f"bound: {bound}"
    leases = _gang_leases(world, pods)
    assert not leases, f"held: {sorted(leases)}"


@then(step('for {seconds:d} seconds no pod of "{prefix:q}" is bound and none holds a GPU Lease'))
def none_bound(world: World, seconds: int, prefix: str) -> None:
    deadline = time.monotonic() + seconds
    while True:
        _none_held(world, prefix)
        if time.monotonic() >= deadline:
            return
        time.sleep(1)


@then(
    step('one of the gangs "{a:q}" and "{b:q}" is bound whole and the other has no member bound and no GPU Lease'),
    target_fixture="gang_outcome",
)
def one_whole(world: World, a: str, b: str) -> tuple[str, str]:
    winner = wait_for(
        f"{a} or {b} bound whole", lambda: (_bound(world, a) and a) or (_bound(world, b) and b), timeout=60
    )
    loser = b if winner == a else a
    for _ in range(5):  # and it stays so
        assert _bound(world, winner)
        _none_held(world, loser)
        time.sleep(1)
    return winner, loser


@when("the pods of the bound gang are deleted")
def delete_winner(world: World, gang_outcome: tuple[str, str]) -> None:
    _delete(world, gang_outcome[0])


@when(step('the pods of "{prefix:q}" are deleted'))
def delete_gang(world: World, prefix: str) -> None:
    _delete(world, prefix)


def _delete(world: World, prefix: str) -> None:
    names = [p["metadata"]["name"] for p in _pods(world, prefix)]
    for name in names:
        world.api.delete(paths.pod(world.namespace, name), gracePeriodSeconds="0")
    wait_for(f"the pods of {prefix} gone", lambda: not _pods(world, prefix), timeout=60)


@then("every pod of the waiting gang is bound")
def loser_bound(world: World, gang_outcome: tuple[str, str]) -> None:
    all_bound(world, gang_outcome[1])


@then(step('the gang "{prefix:q}" waits with a message containing "{fragment:q}"'))
def gang_waits(world: World, prefix: str, fragment: str) -> None:
    def said() -> bool:
        why = _why(world, prefix)
        return len(why) == len(_pods(world, prefix)) and all(fragment in m for m in why.values())

    try:
        wait_for(f"every pod of {prefix} saying {fragment!r}", said, timeout=30)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; they say: {_why(world, prefix)}") from None


@then(step('the pod "{name:q}" has a GangBelowMinimum event containing "{fragment:q}"'))
def gang_broken_event(world: World, name: str, fragment: str) -> None:
    def found() -> list[dict[str, Any]]:
        events = world.api.get(paths.events(world.namespace))["items"]
        return [
            e
            for e in events
            if e["involvedObject"].get("name") == name
            and e.get("reason") == constants.EVENT_GANG_BROKEN
            and fragment in e.get("message", "")
        ]

    event = wait_for(f"GangBelowMinimum event for {name}", found, timeout=30)[0]
    assert event["type"] == "Warning", event


@then(step('the pod "{name:q}" is still bound'))
def still_bound(world: World, name: str) -> None:
    try:
        pod = get_pod(world, name)
    except NotFound as exc:
        raise AssertionError(f"{name} is gone") from exc
    assert pod["spec"].get("nodeName") and not pod["metadata"].get("deletionTimestamp"), pod["metadata"]


# ---- an Indexed Job as a gang ---------------------------------------------------------------------------------------


def _job_pods(world: World, job: str) -> list[dict[str, Any]]:
    return world.api.pods(world.namespace, labelSelector=f"{JOB_NAME_LABEL}={job}")


@then(step('the Job\'s {n:d} pods of "{job:q}" were bound, each on its own node, with {gpus:d} GPUs each'))
def job_gang_bound(world: World, n: int, job: str, gpus: int) -> None:
    def bound() -> list[dict[str, Any]] | None:
        pods = _job_pods(world, job)
        return pods if len(pods) == n and all(p["spec"].get("nodeName") for p in pods) else None

    pods = wait_for(f"the {n} pods of Job {job} bound", bound, timeout=90)
    assert len({p["spec"]["nodeName"] for p in pods}) == n, [p["spec"]["nodeName"] for p in pods]
    for p in pods:
        assert len(p["metadata"]["annotations"][constants.GPU_IDS_ANNOTATION].split(",")) == gpus, p["metadata"]


@then(step('every GPU Lease of the Job "{job:q}" was created before its first pod was bound'))
def job_leases_before_binds(world: World, job: str) -> None:
    """The Job's pods may have finished (kwok completes them at once) and released their Leases: the Leases are the
    ones named after the GPUs the pods' allocation annotations hold."""
    pods = _job_pods(world, job)
    names = {
        objects.lease_name(node, int(gpu))
        for p in pods
        for node, _, ids in [p["metadata"]["annotations"][constants.ALLOCATED_ANNOTATION].rpartition(":")]
        for gpu in ids.split(",")
    }
    _locked_before_bound(world, pods, names)


# ---- Kubernetes' own gang API only ------------------------------------------------------------------------------


@when(
    parsers.re(
        r'(?P<n>\d+) pods "(?P<first>[^"]+)"\.\."(?P<last>[^"]+)" naming the GpuClaim "(?P<claim>[^"]+)" and the '
        r'PodGroup "(?P<group>[^"]+)"(?: with gang size (?P<size>\d+))? are created'
    )
)
def create_pod_group_members(world: World, n: str, first: str, last: str, claim: str, group: str, size: str | None):
    names = _names(first, last)
    assert len(names) == int(n)
    for name in names:
        body = naming(pod_body(name, gpu_map=None, claim=claim), group)
        if size is not None:
            body["metadata"]["annotations"][constants.GANG_MIN_MEMBERS_ANNOTATION] = size
        world.api.create(paths.pods(world.namespace), body)


@given(step('the PodGroup "{name:q}" of {size:d} members is created'))
@when(step('the PodGroup "{name:q}" of {size:d} members is created'))
def create_pod_group(world: World, name: str, size: int) -> None:
    world.api.create(paths.pod_groups(world.namespace), pod_group_body(name, size))


@given(step('the PodGroup "{name:q}" of the basic policy is created'))
def create_basic_pod_group(world: World, name: str) -> None:
    world.api.create(paths.pod_groups(world.namespace), pod_group_body(name, None))


@then(step('{n:d} pods of "{prefix:q}" are bound, each on its own node, and the fifth waits'))
def some_bound(world: World, n: int, prefix: str) -> None:
    """`n` of the pods are bound (one each on `n` nodes), and for a few seconds no more is while one waits,
    refused for itself (no GPUs), not for a gang."""

    def bound() -> list[dict[str, Any]] | None:
        pods = [p for p in _pods(world, prefix) if p["spec"].get("nodeName")]
        return pods if len(pods) >= n else None

    pods = wait_for(f"{n} pods of {prefix} bound", bound, timeout=60)
    assert len({p["spec"]["nodeName"] for p in pods}) == n, [p["spec"]["nodeName"] for p in pods]
    for _ in range(3):
        waiting = [p for p in _pods(world, prefix) if not p["spec"].get("nodeName")]
        assert len(waiting) == 1 and len(_pods(world, prefix)) == n + 1, [p["metadata"]["name"] for p in waiting]
        time.sleep(1)
    why = wait_for(f"why the unbound pod of {prefix} waits", lambda: next(iter(_why(world, prefix).values()), None))
    assert "gang" not in why, why


# ---- an apiserver with the gang API's gate off -------------------------------------------------------------------

GATES_OFF = "--feature-gates=GenericWorkload=false,TopologyAwareWorkloadScheduling=false"
SECOND_NAMESPACE = "gate-off"


@dataclasses.dataclass
class SecondPlane:
    api: SyncClient
    namespace: str


@pytest.fixture
def gate_off_plane(tmp_path: pathlib.Path, watched: Watched) -> Iterator[SecondPlane]:
    """A control plane of the tested Kubernetes whose kube-apiserver (and controller manager) run with the gang API's
    gate off, as a 1.37 cluster does by default, with its own gpu-webhook and gpu-scheduler (watched as the
    session's are) and the kwok nodes node1..node4."""
    cp = ControlPlane(
        tmp_path / "gate-off", extra_args={"kube-apiserver": [GATES_OFF], "kube-controller-manager": [GATES_OFF]}
    )
    components = None
    try:
        cp.start()
        for name in WORKER_NODES:
            cp.add_node(name)
        components = Components(cp).start()
        for program in components.programs:
            watched.add(program)
        assert cp.api is not None
        create_namespace(cp.api, SECOND_NAMESPACE)
        yield SecondPlane(cp.api, SECOND_NAMESPACE)
    finally:
        if components is not None:
            components.stop()
        cp.stop()


@given(
    "a second control plane whose kube-apiserver runs with the feature gate GenericWorkload off, with gpu-webhook "
    "and gpu-scheduler",
    target_fixture="second",
)
def second_control_plane(gate_off_plane: SecondPlane) -> SecondPlane:
    with pytest.raises(NotFound):  # the gang API is not served there
        gate_off_plane.api.get(paths.POD_GROUP_API)
    return gate_off_plane


@when(step('the map pod "{name:q}" naming the PodGroup "{group:q}" is created on the second control plane'))
def create_on_second(second: SecondPlane, name: str, group: str) -> None:
    second.api.create(paths.pods(second.namespace), naming(pod_body(name, gpu_map="0=node1:0"), group))


@then(
    step(
        'on the second control plane the pod "{name:q}" has no spec.schedulingGroup and carries the annotation '
        '"{key:q}" set to "{value:q}"'
    )
)
def dropped_and_recorded(second: SecondPlane, name: str, key: str, value: str) -> None:
    """The apiserver dropped the field (PrepareForCreate, after mutating admission) and kept what gpu-webhook wrote
    from it: the webhook saw the field."""
    pod = second.api.get(paths.pod(second.namespace, name))
    assert "schedulingGroup" not in pod["spec"], pod["spec"].get("schedulingGroup")
    assert (pod["metadata"].get("annotations") or {}).get(key) == value, pod["metadata"].get("annotations")


@then(step('on the second control plane the pod "{name:q}" is Pending with a message containing "{fragment:q}"'))
def pending_on_second(second: SecondPlane, name: str, fragment: str) -> None:
    def said() -> str | None:
        pod = second.api.get(paths.pod(second.namespace, name))
        assert not pod["spec"].get("nodeName"), f"{name} was bound to {pod['spec']['nodeName']}: placed alone"
        for c in (pod.get("status") or {}).get("conditions") or []:
            if c["type"] == "PodScheduled" and c["status"] == "False" and fragment in c.get("message", ""):
                return str(c["message"])
        return None

    wait_for(f"{name} Pending saying {fragment!r}", said, timeout=60)


@then(step('on the second control plane for {seconds:d} seconds the pod "{name:q}" is not bound'))
def unbound_on_second(second: SecondPlane, seconds: int, name: str) -> None:
    deadline = time.monotonic() + seconds
    while True:
        pod = second.api.get(paths.pod(second.namespace, name))
        assert not pod["spec"].get("nodeName"), f"{name} was bound to {pod['spec']['nodeName']}: placed alone"
        if time.monotonic() >= deadline:
            return
        time.sleep(1)
