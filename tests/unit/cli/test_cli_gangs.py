"""`kubectl gpu gangs`: the rows (claims.gang_rows, also the board's source) from plain pods and claims, and the
command's table, -o wide and -o json on canned API answers."""

import asyncio
import io
import json
from typing import Any

import pytest

from gpu_scheduling import constants
from gpu_scheduling.claims import gang_rows
from gpu_scheduling.cli import api, gangs, main, output
from gpu_scheduling.cli.context import Ctx

ZONE = "topology.kubernetes.io/zone"
INCOMPLETE = "gang train (min 3) waits for its members: fewer than 3 present"
NOT_WHOLE = (
    f"gang train (min 2, Required {ZONE}) does not fit whole: in {ZONE}=a member train-1 does not fit: "
    "node1 has 0 free GPUs"
)


def pod(
    name: str,
    *,
    gang: str | None = "train",
    size: str | None = "3",
    claim: str | None = None,
    node: str | None = None,
    message: str | None = None,
    phase: str | None = None,
    namespace: str = "ml",
    **annotations: str,
) -> dict[str, Any]:
    notes = dict(annotations)
    if gang is not None:
        notes[constants.GANG_ANNOTATION] = gang
    if size is not None:
        notes[constants.GANG_MIN_MEMBERS_ANNOTATION] = size
    if claim is not None:
        notes[constants.CLAIM_ANNOTATION] = claim
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": namespace, "annotations": notes},
        "spec": {"schedulerName": "gpu-scheduler", **({"nodeName": node} if node else {})},
        "status": {"phase": phase or ("Running" if node else "Pending")},
    }
    if message is not None:
        body["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
        ]
    return body


def gang_claim(name: str, gang_ref: Any, namespace: str = "ml") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"devices": {"count": 1}, "gangRef": gang_ref}}


def only(pods: list[dict[str, Any]], claims: list[dict[str, Any]] = ()) -> gang_rows.GangRow:  # type: ignore[assignment]
    found = gang_rows.rows(pods, claims)
    assert len(found) == 1, found
    return found[0]


# ---- the rows ----------------------------------------------------------------------------------------------------


def test_a_complete_gang_runs():
    r = only([pod(f"train-{i}", node=f"node{i + 1}") for i in range(3)])
    assert (r.namespace, r.gang, r.min_members, r.bound, r.waiting, r.status) == ("ml", "train", 3, 3, 0, "Running")
    assert (r.why, r.topology_text(), r.members) == ("", "-", ("train-0", "train-1", "train-2"))


def test_a_gang_that_does_not_fit_whole_waits_with_its_members_message():
    annotations = {constants.GANG_TOPOLOGY_ANNOTATION: ZONE}
    pods = [pod(f"train-{i}", size="2", message=NOT_WHOLE, **annotations) for i in range(2)]
    r = only(pods)
    assert (r.min_members, r.bound, r.waiting, r.status, r.why) == (2, 0, 2, "Waiting", NOT_WHOLE)
    assert r.topology_text() == f"Required {ZONE}"
    shown = gangs.short_why(r)  # without "gang train (...)", which the row says, and cut
    assert shown.startswith(f"does not fit whole: in {ZONE}=a member train-1") and shown.endswith("…")
    assert len(shown) == gangs.WHY_SHOWN


def test_the_common_message_is_the_one_most_waiting_members_carry():
    pods = [pod("train-0", message="other"), pod("train-1", message=INCOMPLETE), pod("train-2", message=INCOMPLETE)]
    assert only(pods).why == INCOMPLETE


def test_an_incomplete_gang_says_it_waits_for_its_members():
    r = only([pod("train-0", message=INCOMPLETE), pod("train-1", message=INCOMPLETE)])
    assert (r.bound, r.waiting, r.status, r.why) == (0, 2, "Incomplete", INCOMPLETE)
    assert gangs.short_why(r) == "waits for its members: fewer than 3 present"
    # Before the scheduler wrote its message: the same words, from the rows' own count.
    assert only([pod("train-0"), pod("train-1")]).why == INCOMPLETE


def test_a_gang_below_its_minimum_after_a_member_left():
    pods = [pod("train-0", node="node1"), pod("train-1", node="node2"), pod("train-2", node="node3", phase="Failed")]
    r = only(pods)
    assert (r.bound, r.waiting, r.status) == (2, 0, "BelowMinimum")
    assert r.why.startswith("gang train (min 3) is below its minimum: 2 of 3 members bound")
    # A member being deleted before it was bound is gone; a bound one still counts until it is gone.
    deleting = pod("train-2")
    deleting["metadata"]["deletionTimestamp"] = "2024-05-01T12:00:00Z"
    assert only([*pods[:2], deleting]).status == "BelowMinimum"
    bound_deleting = pod("train-2", node="node3")
    bound_deleting["metadata"]["deletionTimestamp"] = "2024-05-01T12:00:00Z"
    assert only([*pods[:2], bound_deleting]).status == "Running"


def test_a_replacement_member_makes_a_broken_gang_wait_again():
    pods = [pod("train-0", node="node1"), pod("train-1", node="node2"), pod("train-3", message=NOT_WHOLE)]
    r = only(pods)
    assert (r.bound, r.waiting, r.status, r.why) == (2, 1, "Waiting", NOT_WHOLE)


@pytest.mark.parametrize(
    ("annotations", "gang", "fragment"),
    [
        ({constants.GANG_MIN_MEMBERS_ANNOTATION: "three"}, "train", "='three' is not a count"),
        ({constants.GANG_MIN_MEMBERS_ANNOTATION: "0"}, "train", "out of range"),
        ({constants.GANG_TOPOLOGY_ANNOTATION: "not a label!"}, "train", "is not a label key"),
        (
            {constants.GANG_TOPOLOGY_ANNOTATION: ZONE, constants.GANG_TOPOLOGY_MODE_ANNOTATION: "Maybe"},
            "train",
            "expected one of Required, Preferred",
        ),
        ({constants.GANG_ANNOTATION: "Not_A_Name"}, "Not_A_Name", "is not a valid gang name"),
    ],
)
def test_malformed_annotations_make_an_invalid_row_that_says_why(annotations, gang, fragment):
    p = pod("train-0")
    p["metadata"]["annotations"].update(annotations)
    r = only([p])
    assert (r.gang, r.status, r.min_members) == (gang, "Invalid", None)
    assert fragment in r.why
    assert gangs.table_row(r, all_namespaces=False, wide=False)[1] == "?"


def test_a_missing_minimum_and_members_that_disagree_are_invalid():
    assert "gang-min-members is missing" in only([pod("train-0", size=None)]).why
    r = only([pod("train-0", size="2"), pod("train-1", size="3")])
    assert r.status == "Invalid" and "disagree: train-0 says gang train (min 2)" in r.why


def test_claim_pods_belong_to_the_gang_their_claim_names_unless_their_annotation_says_otherwise():
    claims = [gang_claim("shared", "team"), gang_claim("solo", None)]
    pods = [
        pod("team-0", gang=None, claim="shared", node="node1"),
        pod("team-1", gang=None, claim="shared", message="m"),
        pod("other-0", gang="other", size="1", claim="shared", node="node2"),
        pod("alone", gang=None, size=None, claim="solo"),  # a claim without gangRef: no gang
        pod("plain", gang=None, size=None),  # neither: no gang
    ]
    for p in pods[:2]:
        p["metadata"]["annotations"][constants.GANG_MIN_MEMBERS_ANNOTATION] = "2"
    found = gang_rows.rows(pods, claims)
    assert [(r.gang, r.members, r.status) for r in found] == [
        ("other", ("other-0",), "Running"),
        ("team", ("team-0", "team-1"), "Waiting"),
    ]
    # A claim in another namespace does not count; a malformed gangRef is an Invalid row.
    assert gang_rows.rows(pods[:2], [gang_claim("shared", "team", namespace="elsewhere")]) == []
    bad = only(pods[:1], [gang_claim("shared", 7)])
    assert (bad.gang, bad.status) == ("'7'", "Invalid") and "spec.gangRef is a number" in bad.why


def test_rows_of_objects_of_any_shape_never_raise():
    odd: list[Any] = [
        None,
        {},
        {"metadata": None},
        {"metadata": {"name": "x", "annotations": {constants.GANG_ANNOTATION: 5}}},
        {"metadata": {"name": "y", "annotations": {constants.GANG_ANNOTATION: "g"}}, "status": {"conditions": [None]}},
        {"metadata": {"name": "z", "annotations": {constants.CLAIM_ANNOTATION: "c"}}, "spec": []},
    ]
    found = gang_rows.rows(odd, [None, {"metadata": {"name": "c"}, "spec": {"gangRef": ["x"]}}])
    assert {r.status for r in found} == {"Invalid"}
    json.dumps([r.document() for r in found])


def test_rows_are_ordered_by_namespace_then_gang():
    pods = [pod("b-0", gang="b", size="1"), pod("a-0", gang="a", size="1")]
    pods.append(pod("a-0", gang="a", size="1", namespace="l"))
    assert [(r.namespace, r.gang) for r in gang_rows.rows(pods, [])] == [("l", "a"), ("ml", "a"), ("ml", "b")]


# ---- the command ---------------------------------------------------------------------------------------------------


class CannedApi:
    def __init__(self, pods: list[dict], claims: list[dict]) -> None:
        self.pods, self.claims = pods, claims

    async def list(self, res, namespace=None, **params):
        if res is api.PODS:
            assert params == {"fieldSelector": "spec.schedulerName=gpu-scheduler"}
            return [p for p in self.pods if namespace is None or p["metadata"]["namespace"] == namespace]
        assert res is api.GPU_CLAIMS
        return [c for c in self.claims if namespace is None or c["metadata"]["namespace"] == namespace]


PODS = [
    pod("train-0", message=INCOMPLETE),
    pod("train-1", message=INCOMPLETE),
    pod("eval-0", gang="eval", size="1", node="node1", namespace="qa"),
]


def gangs_output(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    args = main.parser().parse_args(["gangs", *argv])
    ctx = Ctx(args, out, err, output.Painter(False))
    code = asyncio.run(gangs.run(CannedApi(PODS, []), ctx))  # type: ignore[arg-type]
    return code, out.getvalue(), err.getvalue()


def test_the_table_shortens_why_and_wide_gives_it_whole():
    code, out, _ = gangs_output("-n", "ml")
    assert code == 0
    assert out.splitlines() == [
        "GANG    MIN   BOUND   WAITING   TOPOLOGY   STATUS       WHY",
        "train   3     0       2         -          Incomplete   waits for its members: fewer than 3 present",
    ]
    _, out, _ = gangs_output("-A", "-o", "wide")
    lines = [line.split(None, 8) for line in out.splitlines()]
    assert lines[0] == ["NAMESPACE", "GANG", "MIN", "BOUND", "WAITING", "TOPOLOGY", "STATUS", "MEMBERS", "WHY"]
    assert lines[1] == ["ml", "train", "3", "0", "2", "-", "Incomplete", "train-0,train-1", INCOMPLETE]
    assert lines[2][:7] == ["qa", "eval", "1", "1", "0", "-", "Running"]


def test_json_has_the_rows_whole_and_names_select_gangs():
    code, out, _ = gangs_output("-n", "ml", "-o", "json", "train")
    doc = json.loads(out)
    assert code == 0 and doc["namespace"] == "ml"
    assert doc["gangs"] == [
        {
            "namespace": "ml",
            "gang": "train",
            "minMembers": 3,
            "bound": 0,
            "waiting": 2,
            "topology": None,
            "topologyMode": None,
            "status": "Incomplete",
            "why": INCOMPLETE,
            "members": ["train-0", "train-1"],
            "memberCount": 2,
        }
    ]
    code, out, err = gangs_output("-n", "ml", "nope")
    assert (code, out, err) == (1, "", 'error: no gang "nope" in namespace "ml"\n')
    code, out, err = gangs_output("-n", "empty")
    assert (code, out, err) == (0, "", "No resources found in empty namespace.\n")


def test_a_long_why_is_cut_in_the_table():
    r = only([pod("train-0", message="gang train (min 3) " + "x" * 200)])
    assert gangs.short_why(r) == "x" * (gangs.WHY_SHOWN - 1) + "…"


# ---- Kubernetes' own gang API: pods naming a PodGroup ----------------------------------------------------------------


def native(name: str, group: str = "train", **kw: Any) -> dict[str, Any]:
    """A pod naming the PodGroup `group` (spec.schedulingGroup), without gang annotations."""
    body = pod(name, gang=None, size=None, **kw)
    body["spec"]["schedulingGroup"] = {"podGroupName": group}
    return body


def pod_group(name: str = "train", min_count: int | None = 2, topology: str | None = None) -> dict[str, Any]:
    policy = {"basic": {}} if min_count is None else {"gang": {"minCount": min_count}}
    spec: dict[str, Any] = {"schedulingPolicy": policy}
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": topology}]}
    return {"metadata": {"name": name, "namespace": "ml"}, "spec": spec}


def test_a_pod_group_makes_a_row_as_the_scheduler_counts_it():
    groups = gang_rows.PodGroups.of([pod_group(topology=ZONE)])
    (r,) = gang_rows.rows([native("train-0", node="node1"), native("train-1", node="node2")], [], groups)
    assert (r.gang, r.min_members, r.bound, r.topology_text(), r.status) == (
        "train",
        2,
        2,
        f"Required {ZONE}",
        "Running",
    )


@pytest.mark.parametrize(
    ("groups", "fragment"),
    [
        ([], "its PodGroup train does not exist"),
        (None, "the apiserver serves no scheduling.k8s.io/v1beta1 PodGroups"),
    ],
)
def test_a_missing_or_unserved_pod_group_makes_an_invalid_row_saying_why(groups, fragment):
    (r,) = gang_rows.rows([native("train-0")], [], gang_rows.PodGroups.of(groups))
    assert r.status == "Invalid" and fragment in r.why, r


def test_a_basic_pod_group_makes_no_row_and_without_pod_groups_the_reference_is_not_looked_at():
    assert gang_rows.rows([native("train-0")], [], gang_rows.PodGroups.of([pod_group(min_count=None)])) == []
    assert gang_rows.rows([native("train-0")], []) == [], "the board reads no PodGroups: no row, as before"


def test_a_reference_that_cannot_be_read_makes_an_invalid_row():
    (r,) = gang_rows.rows([native("train-0", group="Bad_Name")], [], gang_rows.PodGroups.of([]))
    assert (r.gang, r.status) == ("Bad_Name", "Invalid") and "is not a valid gang name" in r.why


class CannedGroups(CannedApi):
    """CannedApi that also serves PodGroups (None: the apiserver does not serve them) and counts their lists."""

    def __init__(self, pods: list[dict], groups: list[dict] | None) -> None:
        super().__init__(pods, [])
        self.groups, self.group_lists = groups, 0

    async def list_optional(self, res, namespace=None, **params):
        assert res is api.POD_GROUPS
        self.group_lists += 1
        return self.groups


def test_kubectl_gpu_gangs_lists_pod_groups_only_when_a_pod_names_one():
    args = main.parser().parse_args(["gangs", "-n", "ml", "-o", "json"])
    canned = CannedGroups([native("train-0"), native("train-1")], [pod_group()])
    out = io.StringIO()
    assert asyncio.run(gangs.run(canned, Ctx(args, out, io.StringIO(), output.Painter(False)))) == 0  # type: ignore[arg-type]
    ((row),) = json.loads(out.getvalue())["gangs"]
    assert (row["gang"], row["minMembers"], row["status"], canned.group_lists) == ("train", 2, "Waiting", 1)
    plain = CannedGroups(PODS, [pod_group()])
    asyncio.run(gangs.run(plain, Ctx(args, io.StringIO(), io.StringIO(), output.Painter(False))))  # type: ignore[arg-type]
    assert plain.group_lists == 0
