"""Kubernetes' own gang API (KEP-4671) as a way to declare a gang (docs/gangs.md): a pod naming a PodGroup
(`spec.schedulingGroup.podGroupName`, or gpu-webhook's record of it) is a member of the gang of that name, the
PodGroup's `gang.minCount` its minimum and its topology constraint its Required topology.

The pure rules (claims.gangs `pod_group_ref`, `gang_name`, `read` with a `Native`), with hypothesis: a PodGroup
makes exactly the gang the equivalent annotations make; hostile objects get a GangError, never another exception.
Then the scheduler's gang path (the real Scheduler and informers fed watch events; a recording client answers): a
member whose PodGroup is missing or not served waits with the reason and is never bound; the PodGroup's arrival
tries its pods again at once and binds the gang whole; a basic PodGroup's pod is placed alone; discovery and a
watch answered 404 stop nothing."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_scheduling import constants
from gpu_scheduling.claims import gangs
from gpu_scheduling.claims.gangs import GangError, Native, Spec
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import NotFound
from gpu_scheduling.scheduler.controller import Scheduler, SchedulerConfig
from tests.unit import scheduler as shared

NAMESPACE = "ns"
ZONE = "topology.kubernetes.io/zone"


def pod_group(name: str, min_count: int | None = 2, topology: str | None = None, **spec: Any) -> dict[str, Any]:
    """A PodGroup of the gang policy (min_count None: the basic policy), kept in one value of `topology`."""
    policy = {"basic": {}} if min_count is None else {"gang": {"minCount": min_count}}
    body: dict[str, Any] = {"schedulingPolicy": policy, **spec}
    if topology is not None:
        body["schedulingConstraints"] = {"topology": [{"key": topology}]}
    return {
        "apiVersion": constants.POD_GROUP_API_VERSION,
        "kind": constants.POD_GROUP_KIND,
        "metadata": {"name": name, "namespace": NAMESPACE, "resourceVersion": "1"},
        "spec": body,
    }


def gangs_annotations() -> tuple[str, ...]:
    return (
        constants.GANG_ANNOTATION,
        constants.GANG_MIN_MEMBERS_ANNOTATION,
        constants.GANG_TOPOLOGY_ANNOTATION,
        constants.GANG_TOPOLOGY_MODE_ANNOTATION,
    )


def naming(group: str) -> dict[str, Any]:
    """A pod spec naming the PodGroup `group`."""
    return {"schedulingGroup": {"podGroupName": group}}


# ---- which PodGroup a pod names ------------------------------------------------------------------------------------


def test_the_field_names_the_pod_group_and_the_webhooks_record_stands_in_for_it() -> None:
    recorded = {constants.POD_GROUP_ANNOTATION: "train"}
    assert gangs.pod_group_ref(naming("train"), {}) == "train"
    assert gangs.pod_group_ref({}, recorded) == "train"  # the apiserver dropped the field: the record remains
    assert gangs.pod_group_ref(naming("train"), recorded) == "train"
    assert gangs.pod_group_ref({}, {}) is None
    assert gangs.pod_group_ref(None, {}) is None


@pytest.mark.parametrize(
    ("spec", "annotations", "fragment"),
    [
        (naming("a"), {constants.POD_GROUP_ANNOTATION: "b"}, "name two PodGroups"),
        (naming("Not_A_Name"), {}, "spec.schedulingGroup.podGroupName='Not_A_Name' is not a valid gang name"),
        (naming(""), {}, "is not a valid gang name"),
        ({"schedulingGroup": {"podGroupName": 7}}, {}, "spec.schedulingGroup.podGroupName is a number"),
        ({"schedulingGroup": {}}, {}, "spec.schedulingGroup names no podGroupName"),
        ({"schedulingGroup": "train"}, {}, "spec.schedulingGroup names no podGroupName"),
        ({}, {constants.POD_GROUP_ANNOTATION: "x y"}, "annotation gpu.scheduling/pod-group='x y' is not a valid"),
        ({"workloadRef": {"name": "w", "podGroup": "g"}}, {}, "spec.workloadRef (Kubernetes 1.35's alpha"),
    ],
)
def test_a_reference_that_cannot_be_read_is_a_reason_to_wait(spec: Any, annotations: dict[str, str], fragment: str):
    with pytest.raises(GangError) as caught:
        gangs.pod_group_ref(spec, annotations)
    assert fragment in str(caught.value)


# ---- which gang it makes -----------------------------------------------------------------------------------------


def test_a_pod_naming_a_gang_pod_group_is_a_member_of_the_gang_of_its_name() -> None:
    group = pod_group("train", 4, ZONE)
    assert gangs.gang_name({}, None, Native("train", group)) == "train"
    assert gangs.read({}, "train", Native("train", group)) == Spec("train", 4, ZONE, "Required")
    assert gangs.read({}, "train", Native("train", pod_group("train", 3))) == Spec("train", 3)


def test_the_pods_own_pod_group_wins_over_its_claims_gang_ref_as_the_annotation_does() -> None:
    assert gangs.gang_name({}, "from-claim", Native("train", pod_group("train"))) == "train"
    assert gangs.gang_name({constants.GANG_ANNOTATION: "train"}, "from-claim") == "train"


def test_a_basic_pod_group_makes_no_gang_and_forbids_a_gang_annotation_naming_it() -> None:
    basic = Native("solo", pod_group("solo", None))
    assert gangs.gang_name({}, "from-claim", basic) is None  # placed one by one, as kube-scheduler does
    with pytest.raises(GangError, match="has the basic policy"):
        gangs.gang_name({constants.GANG_ANNOTATION: "solo"}, None, basic)


def test_a_missing_or_unserved_pod_group_keeps_its_member_in_a_gang_that_waits() -> None:
    for native, fragment in [
        (Native("train", None), "its PodGroup train does not exist"),
        (Native("train", None, served=False), "the apiserver serves no scheduling.k8s.io/v1beta1 PodGroups"),
    ]:
        assert gangs.gang_name({}, None, native) == "train", "a member, never placed alone"
        with pytest.raises(GangError, match="train") as caught:
            gangs.read({}, "train", native)
        assert fragment in str(caught.value)


@pytest.mark.parametrize(
    ("annotations", "fragment"),
    [
        ({constants.GANG_ANNOTATION: "other"}, "annotation gpu.scheduling/gang='other' and spec.schedulingGroup"),
        ({constants.GANG_MIN_MEMBERS_ANNOTATION: "3"}, "gang-min-members='3' disagrees with its PodGroup's"),
        ({constants.GANG_TOPOLOGY_ANNOTATION: "rack"}, "gang-topology='rack' disagrees"),
        ({constants.GANG_TOPOLOGY_MODE_ANNOTATION: "Preferred"}, "gang-topology-mode='Preferred' disagrees"),
    ],
)
def test_annotations_that_disagree_with_the_pod_group_are_a_reason_to_wait(annotations: dict[str, str], fragment):
    native = Native("train", pod_group("train", 4, ZONE))
    with pytest.raises(GangError) as caught:
        gangs.agreed({"ns/p": gangs.read(annotations, gangs.gang_name(annotations, None, native) or "", native)})
    assert fragment in str(caught.value)


def test_annotations_that_agree_with_the_pod_group_are_accepted() -> None:
    native = Native("train", pod_group("train", 4, ZONE))
    said = {
        constants.GANG_ANNOTATION: "train",
        constants.GANG_MIN_MEMBERS_ANNOTATION: "4",
        constants.GANG_TOPOLOGY_ANNOTATION: ZONE,
        constants.GANG_TOPOLOGY_MODE_ANNOTATION: "Required",
    }
    assert gangs.gang_name(said, None, native) == "train"
    assert gangs.read(said, "train", native) == gangs.read(said, "train")


@pytest.mark.parametrize(
    ("group", "fragment"),
    [
        (pod_group("g", 0), "minCount=0 is out of range"),
        (pod_group("g", gangs.MAX_MEMBERS + 1), "minCount=10001 is out of range"),
        (pod_group("g", 2**80), "minCount='1208925819614629174706176' is out of range"),
        (pod_group("g", 2**20000), "minCount='<an integer of 20001 bits>' is out of range"),
        ({"spec": {"schedulingPolicy": {"gang": {"minCount": "4"}}}}, "minCount is a string; expected an integer"),
        ({"spec": {"schedulingPolicy": {"gang": {"minCount": True}}}}, "minCount is a boolean; expected an integer"),
        ({"spec": {"schedulingPolicy": {"gang": {}}}}, "minCount is null; expected an integer"),
        ({"spec": {"schedulingPolicy": {}}}, "neither a gang nor a basic policy"),
        ({"spec": "x"}, "neither a gang nor a basic policy"),
        (pod_group("g", 2, schedulingConstraints={"topology": [{"key": "a"}, {"key": "b"}]}), "is 2 entries"),
        (pod_group("g", 2, schedulingConstraints={"topology": "zone"}), "topology is a string"),
        (pod_group("g", 2, "not a key"), "topology[0].key='not a key' is not a label key"),
        (pod_group("g", 2, schedulingConstraints={"topology": [None]}), "topology[0].key is null"),
    ],
)
def test_a_pod_group_the_scheduler_cannot_keep_is_a_reason_to_wait(group: dict[str, Any], fragment: str) -> None:
    with pytest.raises(GangError) as caught:
        gangs.read({}, "g", Native("g", group))
    assert fragment in str(caught.value)


LABEL_KEYS = st.sampled_from(["", ZONE, "example.com/rack", "block"])


@given(min_count=st.integers(1, gangs.MAX_MEMBERS), topology=LABEL_KEYS, annotate=st.booleans())
def test_a_pod_group_makes_the_gang_its_equivalent_annotations_make(min_count: int, topology: str, annotate: bool):
    """docs/gangs.md's mapping: gang.minCount is gang-min-members, the topology constraint's key is gang-topology
    with the mode Required; a member may carry those annotations too, agreeing."""
    group = pod_group("g", min_count, topology or None)
    equivalent = {constants.GANG_MIN_MEMBERS_ANNOTATION: str(min_count)}
    if topology:
        equivalent |= {
            constants.GANG_TOPOLOGY_ANNOTATION: topology,
            constants.GANG_TOPOLOGY_MODE_ANNOTATION: "Required",
        }
    carried = equivalent if annotate else {}
    assert gangs.read(carried, "g", Native("g", group)) == gangs.read(equivalent, "g")


@given(min_count=st.integers(1, gangs.MAX_MEMBERS), said=st.integers(1, gangs.MAX_MEMBERS))
def test_a_member_saying_another_minimum_than_its_pod_group_always_waits(min_count: int, said: int) -> None:
    annotations = {constants.GANG_MIN_MEMBERS_ANNOTATION: str(said)}
    native = Native("g", pod_group("g", min_count))
    if said == min_count:
        assert gangs.read(annotations, "g", native).min_members == min_count
    else:
        with pytest.raises(GangError, match="disagrees"):
            gangs.read(annotations, "g", native)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=300),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=20), inner, max_size=3),
    max_leaves=12,
)

# A well-formed pod (its spec and annotations) and PodGroup, and every place in them that hostile input may replace:
# one place is replaced by anything JSON holds, so that each level, the deepest included, is reached as often as
# the others.
POD_PLACES: list[tuple[Any, ...]] = [
    ("spec",),
    ("spec", "schedulingGroup"),
    ("spec", "schedulingGroup", "podGroupName"),
    ("spec", "workloadRef"),
    *(("annotations", key) for key in (constants.POD_GROUP_ANNOTATION, *gangs_annotations())),
]
GROUP_PLACES: list[tuple[Any, ...]] = [
    ("spec",),
    ("spec", "schedulingPolicy"),
    ("spec", "schedulingPolicy", "gang"),
    ("spec", "schedulingPolicy", "gang", "minCount"),
    ("spec", "schedulingConstraints"),
    ("spec", "schedulingConstraints", "topology"),
    ("spec", "schedulingConstraints", "topology", 0),
    ("spec", "schedulingConstraints", "topology", 0, "key"),
]


def _replaced(obj: Any, place: tuple[Any, ...], value: Any) -> Any:
    parent = obj
    for step in place[:-1]:
        parent = parent[step]
    parent[place[-1]] = value
    return obj


@st.composite
def hostile(draw: st.DrawFn, valid: Any, places: list[tuple[Any, ...]]) -> Any:
    obj = valid()
    for place in draw(st.lists(st.sampled_from(places), max_size=2)):
        value = draw(JSON | st.integers() | st.text(max_size=3000))
        with contextlib.suppress(KeyError, IndexError, TypeError):  # a level above was replaced already
            _replaced(obj, place, value)
    return obj


def _valid_pod() -> dict[str, Any]:
    return {"spec": naming("g"), "annotations": {}}


def _valid_group() -> dict[str, Any]:
    return pod_group("g", 2, ZONE)


@given(group=hostile(_valid_group, GROUP_PLACES))
def test_whatever_a_pod_group_says_it_makes_a_gang_or_a_bounded_reason(group: Any) -> None:
    try:
        spec = gangs.pod_group_spec(group, "g")
    except GangError as exc:
        assert len(str(exc)) < 2000, str(exc)
    else:
        assert 1 <= spec.min_members <= gangs.MAX_MEMBERS and spec.mode == "Required"


@given(
    pod=hostile(_valid_pod, POD_PLACES),
    group=hostile(_valid_group, GROUP_PLACES),
    exists=st.booleans(),
    served=st.booleans(),
)
def test_whatever_the_objects_say_the_answer_is_a_gang_or_a_bounded_reason(pod, group, exists, served):
    annotations = pod["annotations"] if isinstance(pod.get("annotations"), dict) else {}
    try:
        ref = gangs.pod_group_ref(pod.get("spec"), annotations)
        native = Native(ref, group if exists and served else None, served) if ref is not None else None
        name = gangs.gang_name(annotations, None, native)
        if name is not None:
            gangs.read(annotations, name, native)
    except GangError as exc:
        assert len(str(exc)) < 2000, str(exc)


# ---- the scheduler -------------------------------------------------------------------------------------------------


class Recording(shared.Recording):
    """tests.unit.scheduler's Recording that also pages and watches the PodGroups in `groups` (a watch answers 404
    when `watch_gone`)."""

    def __init__(self, objects: dict[str, Any], groups: list[dict[str, Any]] | None = None, watch_gone: bool = False):
        super().__init__(objects)
        self.groups, self.watch_gone = groups or [], watch_gone
        self.watches = 0
        self.watched_twice = asyncio.Event()

    async def list_pages(self, path: str, page_size: int, **params: Any) -> AsyncIterator[dict[str, Any]]:
        self.calls.append(("LIST", path))
        yield {"items": list(self.groups), "metadata": {"resourceVersion": "1"}}

    async def watch(self, path: str, params: dict[str, str]) -> AsyncIterator[dict[str, Any]]:
        self.watches += 1
        if self.watches >= 2:
            self.watched_twice.set()
        if self.watch_gone:
            raise NotFound(404, "NotFound", "the server could not find the requested resource")
        await asyncio.Event().wait()
        yield {}

    def bound(self) -> list[str]:
        return sorted(p.split("/")[-2] for verb, p in self.calls if verb == "POST" and p.endswith("/binding"))

    def reported(self) -> list[str]:
        return sorted(p.split("/")[-2] for verb, p in self.calls if verb == "PATCH" and p.endswith("/status"))


SERVED = {paths.POD_GROUP_API: {"resources": [{"name": constants.POD_GROUP_PLURAL}, {"name": "workloads"}]}}


def node(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": {"pods": "110"}},
    }


def member(name: str, group: str | None = None, **annotations: str) -> dict[str, Any]:
    """A map pod `<gang>-<index>` on node n<index>, naming the PodGroup `group` when given."""
    container = {"name": "c", "env": [{"name": constants.CUDA_ENV, "value": "0"}]}  # as gpu-webhook set it
    spec: dict[str, Any] = {"schedulerName": constants.DEFAULT_SCHEDULER_NAME, "containers": [container]}
    if group is not None:
        spec |= naming(group)
    return {
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": f"uid-{name}",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": {constants.MAP_ANNOTATION: "0=n0:0\n1=n1:0\n2=n2:0", **annotations},
        },
        "spec": spec,
        "status": {"phase": "Pending"},
    }


async def scheduler(client: Recording) -> Scheduler:
    s = Scheduler(client, SchedulerConfig(retry_seconds=0.01, max_retry_seconds=0.01))  # type: ignore[arg-type]
    s.leading = True
    for i in range(3):
        s.nodes._apply({"type": "ADDED", "object": node(f"n{i}")})
    return s


async def work(s: Scheduler) -> list[str]:
    """Schedule every pod in the queue now, then those it retries at once; the keys tried."""
    tried = []
    while True:
        try:
            key = await asyncio.wait_for(s.queue.work.get(), 0.5)
        except TimeoutError:
            return tried
        tried.append(key)
        await s._schedule(key)
        s.queue.work.done(key)


def test_discovery_finding_no_pod_groups_makes_their_members_wait_with_the_reason() -> None:
    async def scenario() -> None:
        client = Recording({})  # the apiserver answers 404 for scheduling.k8s.io/v1beta1 (1.35, or the gate off)
        s = await scheduler(client)
        assert await s.gangs.watch() == [] and not s.gangs.served
        for i in range(2):
            s.pods._apply({"type": "ADDED", "object": member(f"g-{i}", "g")})
        await work(s)
        assert client.bound() == [], "a member is never placed alone"
        assert client.reported() == ["g-0", "g-1"]
        assert "serves no scheduling.k8s.io/v1beta1 PodGroups" in s.queue._reported[f"{NAMESPACE}/g-0"]
        # gpu-webhook's record alone (the field dropped by the apiserver) keeps the pod waiting just the same
        s.pods._apply({"type": "ADDED", "object": member("r-0", None, **{constants.POD_GROUP_ANNOTATION: "r"})})
        await work(s)
        assert client.bound() == [] and "PodGroup r" in s.queue._reported[f"{NAMESPACE}/r-0"]

    asyncio.run(scenario())


def test_a_missing_pod_group_keeps_the_gang_waiting_until_it_appears_then_binds_it_whole() -> None:
    async def scenario() -> None:
        client = Recording(SERVED)
        s = await scheduler(client)
        tasks = await s.gangs.watch()
        assert s.gangs.served and ("LIST", paths.ALL_POD_GROUPS) in client.calls
        for i in range(2):
            s.pods._apply({"type": "ADDED", "object": member(f"g-{i}", "g")})
        await work(s)
        assert client.bound() == []
        assert "its PodGroup g does not exist" in s.queue._reported[f"{NAMESPACE}/g-1"]

        s.gangs.groups._apply({"type": "ADDED", "object": pod_group("g", 2)})
        tried = await work(s)
        assert tried, "the PodGroup's arrival tries its pods again (no LIST per pod)"
        assert client.bound() == ["g-0", "g-1"]
        assert [c for c in client.calls if c[0] == "LIST"] == [("LIST", paths.ALL_POD_GROUPS)]
        for t in tasks:
            t.cancel()

    asyncio.run(scenario())


def test_a_pod_group_larger_than_the_members_present_keeps_them_waiting_for_more() -> None:
    async def scenario() -> None:
        client = Recording(SERVED, [pod_group("g", 3)])
        s = await scheduler(client)
        tasks = await s.gangs.watch()
        for i in range(2):
            s.pods._apply({"type": "ADDED", "object": member(f"g-{i}", "g")})
        await work(s)
        assert client.bound() == []
        s.pods._apply({"type": "ADDED", "object": member("g-2", "g")})
        await work(s)
        assert client.bound() == ["g-0", "g-1", "g-2"]
        for t in tasks:
            t.cancel()

    asyncio.run(scenario())


def test_a_basic_pod_group_places_its_pods_one_by_one() -> None:
    async def scenario() -> None:
        client = Recording(SERVED, [pod_group("solo", None)])
        s = await scheduler(client)
        tasks = await s.gangs.watch()
        s.pods._apply({"type": "ADDED", "object": member("solo-0", "solo")})
        await work(s)
        assert client.bound() == ["solo-0"]
        for t in tasks:
            t.cancel()

    asyncio.run(scenario())


def test_a_member_whose_annotation_disagrees_with_its_pod_group_waits_with_both_named() -> None:
    async def scenario() -> None:
        client = Recording(SERVED, [pod_group("g", 2)])
        s = await scheduler(client)
        tasks = await s.gangs.watch()
        s.pods._apply({"type": "ADDED", "object": member("g-0", "g")})
        s.pods._apply({"type": "ADDED", "object": member("g-1", "g", **{constants.GANG_MIN_MEMBERS_ANNOTATION: "3"})})
        await work(s)
        assert client.bound() == []
        said = s.queue._reported[f"{NAMESPACE}/g-0"]
        assert "gang-min-members='3' disagrees with its PodGroup's spec.schedulingPolicy.gang.minCount" in said
        for t in tasks:
            t.cancel()

    asyncio.run(scenario())


def test_a_pod_group_watch_answered_404_is_retried_and_stops_nothing() -> None:
    async def scenario() -> None:
        client = Recording(SERVED, [pod_group("g", 2)], watch_gone=True)  # the API went away after discovery
        s = await scheduler(client)
        (task,) = await s.gangs.watch()
        await asyncio.wait_for(client.watched_twice.wait(), 30)
        assert not task.done(), "the informer keeps trying; the scheduler goes on"
        assert s.gangs.groups.cache, "what it had listed is kept"
        task.cancel()

    asyncio.run(scenario())
