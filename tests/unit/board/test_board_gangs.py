"""The board's gangs: the rows of claims.gang_rows (the source `kubectl gpu gangs` prints), kept current by the
informer events, in the document and in a patch only when a row changed."""

from __future__ import annotations

from typing import Any

from gpu_scheduling import constants
from gpu_scheduling.board.state import Board
from gpu_scheduling.claims import gang_rows

from .test_board_state import claim_pod, gpu_claim

INCOMPLETE = "gang team (min 3) waits for its members: fewer than 3 present"


def member(name: str, uid: str, allocated: str | None = None, *, size: str = "3", **kw: Any) -> dict[str, Any]:
    """A claim pod of the claim "team" stating the gang's size (its gang comes from the claim's gangRef)."""
    pod = claim_pod(name, uid, allocated, claim="team", **kw)
    pod["metadata"]["annotations"][constants.GANG_MIN_MEMBERS_ANNOTATION] = size
    return pod


def team_claim(gang_ref: Any = "team") -> dict[str, Any]:
    claim = gpu_claim("team")
    claim["spec"]["gangRef"] = gang_ref
    return claim


def rows(board: Board) -> list[tuple[str, str, int | None, int, int, str, str]]:
    doc = board.document()["gangs"]
    assert doc["total"] == len(doc["rows"])
    return [
        (r["namespace"], r["gang"], r["minMembers"], r["bound"], r["waiting"], r["status"], r["why"])
        for r in doc["rows"]
    ]


def test_a_claim_gang_is_incomplete_then_running_and_below_its_minimum_after_a_member_left():
    board = Board()
    board.apply("gpuclaims", "ADDED", team_claim())
    for i in range(2):
        board.apply("pods", "ADDED", member(f"team-{i}", f"u{i}", reason=INCOMPLETE))
    assert rows(board) == [("default", "team", 3, 0, 2, "Incomplete", INCOMPLETE)]
    for i in range(3):
        board.apply("pods", "MODIFIED", member(f"team-{i}", f"u{i}", f"node1:{i}"))
    assert rows(board) == [("default", "team", 3, 3, 0, "Running", "")]
    board.apply("pods", "DELETED", member("team-2", "u2", "node1:2"))
    ((*_, status, why),) = rows(board)
    assert status == "BelowMinimum" and why.startswith("gang team (min 3) is below its minimum: 2 of 3")
    for i in range(2):
        board.apply("pods", "DELETED", member(f"team-{i}", f"u{i}", f"node1:{i}"))
    assert rows(board) == []


def test_the_rows_are_those_kubectl_gpu_gangs_builds_from_the_same_objects():
    objs = [member("team-0", "u0", "node1:0"), member("team-1", "u1", reason="x"), member("team-2", "u2")]
    board = Board()
    board.apply("gpuclaims", "ADDED", team_claim())
    for pod in objs:
        board.apply("pods", "ADDED", pod)
    assert board.document()["gangs"]["rows"] == [r.document() for r in gang_rows.rows(objs, [team_claim()])]


def test_a_gang_ref_set_or_changed_later_moves_the_claims_pods():
    board = Board()
    board.apply("pods", "ADDED", member("team-0", "u0", reason="m"))
    board.apply("gpuclaims", "ADDED", gpu_claim("team"))
    assert rows(board) == []  # a claim without gangRef: a pod served alone
    board.apply("gpuclaims", "MODIFIED", team_claim("team"))
    assert [r[1] for r in rows(board)] == ["team"]
    board.apply("gpuclaims", "MODIFIED", team_claim("crew"))
    assert [r[1] for r in rows(board)] == ["crew"]
    board.apply("gpuclaims", "MODIFIED", team_claim(["not", "a", "name"]))
    ((*_, status, why),) = rows(board)
    assert status == "Invalid" and "spec.gangRef is an array" in why
    board.apply("gpuclaims", "DELETED", team_claim())
    assert rows(board) == []


def test_malformed_annotations_are_an_invalid_row_never_an_error():
    pod = member("team-0", "u0", size="many")
    board = Board()
    board.apply("gpuclaims", "ADDED", team_claim())
    board.apply("pods", "ADDED", pod)
    ((_, gang, minimum, _, _, status, why),) = rows(board)
    assert (gang, minimum, status) == ("team", None, "Invalid") and "='many' is not a count" in why


def test_only_this_schedulers_live_pods_are_members():
    other = member("team-0", "u0", reason="m")
    other["spec"]["schedulerName"] = "default-scheduler"
    done = member("team-1", "u1", "node1:1", phase="Succeeded")
    board = Board()
    board.apply("gpuclaims", "ADDED", team_claim())
    board.apply("pods", "ADDED", other)
    board.apply("pods", "ADDED", done)
    assert rows(board) == []


def test_a_patch_carries_the_gangs_only_when_a_row_changed():
    board = Board()
    board.apply("gpuclaims", "ADDED", team_claim())
    board.take_changes()
    board.apply("pods", "ADDED", member("team-0", "u0", reason="m"))
    changes = board.take_changes()
    assert changes is not None and changes.gangs
    assert board.patch(changes)["gangs"]["rows"][0]["members"] == ["team-0"]
    # A change a row does not read (a label) makes no gangs patch.
    relabelled = member("team-0", "u0", reason="m", labels={"x": "y"})
    board.apply("pods", "MODIFIED", relabelled)
    changes = board.take_changes()
    assert changes is None or not changes.gangs
    board.apply("pods", "MODIFIED", member("team-0", "u0", reason="another message", labels={"x": "y"}))
    changes = board.take_changes()
    assert changes is not None and changes.gangs
    assert board.patch(changes)["gangs"]["rows"][0]["why"] == "another message"
