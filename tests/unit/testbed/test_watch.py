"""harness/watch.py: what a scenario's programs did, read from their logs and counters; and harness/skips.py."""

import pathlib
import sys

import pytest

from harness import skips
from harness.processes import Process
from harness.watch import Watch, container_restarts, restarted

TRACEBACK_RECORD = (
    "2026-01-01 12:00:00,000 ERROR gpu_scheduling.scheduler.controller: unexpected error scheduling ns/p\\n"
    "Traceback (most recent call last):\\n  ...\\nRuntimeError: boom\n"
)


def _write(path: pathlib.Path, text: str) -> None:
    with path.open("a") as f:
        f.write(text)


def test_only_what_came_after_begin_in_the_projects_logs_is_found(tmp_path):
    scheduler = tmp_path / "gpu-scheduler.log"
    _write(scheduler, TRACEBACK_RECORD)  # an earlier scenario's
    _write(tmp_path / "kube-apiserver.log", "Traceback (most recent call last): not one of ours\n")
    watch = Watch(tmp_path)
    watch.begin([])
    assert watch.findings([]).unexpected(restarts=False, tracebacks=False) == []

    _write(scheduler, "2026-01-01 12:00:01,000 INFO gpu_scheduling.scheduler: bound ns/p to node1\n")
    _write(scheduler, TRACEBACK_RECORD)
    _write(tmp_path / "gpu-board.log", '{"time": "t", "level": "ERROR", "logger": "b", "msg": "failed"}\n')
    _write(tmp_path / "gpu-webhook.log", "2026-01-01 12:00:02,000 WARNING gpu_scheduling.webhook: slow client\n")
    found = watch.findings([])
    assert [line.split(":")[0] for line in found.tracebacks] == ["gpu-scheduler.log"]
    assert [line.split(":")[0] for line in found.errors] == ["gpu-board.log"]
    assert len(found.unexpected(restarts=False, tracebacks=False)) == 2
    assert found.unexpected(restarts=False, tracebacks=True) == []


def test_a_restart_and_an_exit_nobody_asked_for_are_found_and_a_stop_is_not(tmp_path):
    def program(name: str, code: str) -> Process:
        return Process(name, [sys.executable, "-c", code], tmp_path).start()

    crashed = program("gpu-webhook", "raise SystemExit(3)")
    stopped = program("gpu-scheduler", "import time; time.sleep(60)")
    watch = Watch(tmp_path)
    watch.begin([crashed, stopped])
    assert crashed.proc is not None
    crashed.proc.wait()
    stopped.stop()
    stopped.restarts += 1  # as the supervisor counts one
    found = watch.findings([crashed, stopped])
    assert found.exits == ("gpu-webhook (exit 3)",)
    assert found.restarts == ("gpu-scheduler (1x)",)
    assert found.unexpected(restarts=True, tracebacks=False) == []


def test_a_skip_becomes_a_failure_and_an_xfail_stays(tmp_path):
    skipped = pytest.TestReport("t", ("f", 1, "t"), {}, "skipped", ("f", 1, "Skipped: no kubectl"), "call")
    skips.as_failure(skipped)
    assert skipped.outcome == "failed" and "no kubectl" in str(skipped.longrepr)
    xfailed = pytest.TestReport("t", ("f", 1, "t"), {}, "skipped", None, "call")
    xfailed.wasxfail = "known"
    skips.as_failure(xfailed)
    assert xfailed.outcome == "skipped"


def _system_pod(name: str, uid: str, restarts: int, init_restarts: int = 0) -> dict:
    return {
        "metadata": {"name": name, "uid": uid},
        "status": {
            "initContainerStatuses": [{"name": "wait", "restartCount": init_restarts}],
            "containerStatuses": [{"name": "main", "restartCount": restarts}],
        },
    }


def test_on_kind_a_container_whose_restart_count_grew_is_a_restart_and_a_replaced_pod_is_not():
    before = container_restarts([_system_pod("gpu-scheduler-a", "u1", 2), _system_pod("agent-x", "u2", 0)])
    after = container_restarts(
        [
            _system_pod("gpu-scheduler-a", "u1", 3),  # restarted once more during the scenario
            _system_pod("agent-x", "u2", 0, init_restarts=1),  # its init container restarted
            _system_pod("gpu-scheduler-b", "u3", 0),  # a replacement pod, started fresh: not a restart
            _system_pod("board-y", "u4", 1),  # a new pod whose container restarted already: a restart
        ]
    )
    assert restarted(before, after) == (
        "agent-x/wait (1x)",
        "board-y/main (1x)",
        "gpu-scheduler-a/main (1x)",
    )
    assert restarted(after, after) == ()
    assert container_restarts([{"metadata": {"name": "p", "uid": "u"}, "status": {}}]) == {}
