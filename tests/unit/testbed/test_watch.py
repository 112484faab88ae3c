"""harness/watch.py: what a test's programs did, read from their logs, counters and the KinD pods' logs; and
harness/skips.py."""

import datetime
import logging
import pathlib
import sys

import pytest

from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import BadRequest, NotFound
from harness import skips
from harness.components import SchedulerProcess
from harness.processes import Process
from harness.watch import Watch, container_restarts, grown, lines_since, pod_logs, restarted, scan

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


def _exit_after(go: pathlib.Path, code: int) -> str:
    """A program that exits with `code` once `go` exists: after `Watch.begin`, however slow the machine (one that
    had exited before it is not the test's doing, and a fast exit on an idle machine raced the begin)."""
    return f"import os, time\nwhile not os.path.exists({str(go)!r}):\n    time.sleep(0.01)\nraise SystemExit({code})"


def test_a_restart_and_an_exit_nobody_asked_for_are_found_and_a_stop_is_not(tmp_path):
    def program(name: str, code: str) -> Process:
        return Process(name, [sys.executable, "-c", code], tmp_path).start()

    go = tmp_path / "go"
    crashed = program("gpu-webhook", _exit_after(go, 3))
    stopped = program("gpu-scheduler", "import time; time.sleep(60)")
    watch = Watch(tmp_path)
    watch.begin([crashed, stopped])
    go.touch()
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


# What gpu-scheduler wrote in each of its formats (gpu_scheduling.logs) when a pod's attempt raised, as the kubelet
# answers pods/log with timestamps=true: a bind, the exception, a warning.
TEXT_SAMPLE = (
    "2026-11-27T20:23:57.984112345Z 2026-11-27 20:23:57,984 INFO gpu_scheduling.scheduler.controller: bound "
    "s-1a2b3c4d/p-0 to node1 with GPUs 0,1\n"
    "2026-11-27T20:23:57.984562011Z 2026-11-27 20:23:57,984 ERROR gpu_scheduling.scheduler.controller: unexpected "
    'error scheduling s-1a2b3c4d/p-1\\nTraceback (most recent call last):\\n  File "<stdin>", line 8, in '
    "<module>\\nKeyError: 'gpus'\n"
    "2026-11-27T20:23:57.985001200Z 2026-11-27 20:23:57,984 WARNING gpu_scheduling.scheduler.leases: re-created "
    "lease node1-gpu-0 for s-1a2b3c4d/p-0\n"
)
JSON_SAMPLE = (
    '2026-11-27T20:23:57.985230001Z {"time": "2026-11-27T20:23:57.985Z", "level": "INFO", "logger": '
    '"gpu_scheduling.scheduler.controller", "msg": "bound s-1a2b3c4d/p-0 to node1 with GPUs 0,1"}\n'
    '2026-11-27T20:23:57.985612345Z {"time": "2026-11-27T20:23:57.985Z", "level": "ERROR", "logger": '
    '"gpu_scheduling.scheduler.controller", "msg": "unexpected error scheduling s-1a2b3c4d/p-1", "exc": '
    '"Traceback (most recent call last):\\n  File \\"<stdin>\\", line 8, in <module>\\nKeyError: \'gpus\'"}\n'
    '2026-11-27T20:23:57.985999999Z {"time": "2026-11-27T20:23:57.985Z", "level": "WARNING", "logger": '
    '"gpu_scheduling.scheduler.leases", "msg": "re-created lease node1-gpu-0 for s-1a2b3c4d/p-0"}\n'
)
#: Before the scenario began: an earlier scenario's.
EARLIER = "2026-11-27T20:23:50.000000000Z 2026-11-27 20:23:50,000 ERROR gpu_scheduling.webhook: earlier\n"
BEGAN = datetime.datetime(2026, 11, 27, 20, 23, 55, tzinfo=datetime.UTC)


@pytest.mark.parametrize("sample", [TEXT_SAMPLE, JSON_SAMPLE], ids=["text", "json"])
def test_a_traceback_in_a_captured_kind_log_is_found_in_either_format(sample):
    found = scan("gpu-scheduler-x/scheduler", lines_since(EARLIER + sample, BEGAN))
    assert len(found.tracebacks) == 1 and found.errors == ()
    assert found.tracebacks[0].startswith("gpu-scheduler-x/scheduler: ")
    assert "unexpected error scheduling s-1a2b3c4d/p-1" in found.tracebacks[0]
    assert found.unexpected(restarts=False, tracebacks=False) == [f"traceback: {found.tracebacks[0]}"]
    assert found.unexpected(restarts=False, tracebacks=True) == []


def test_the_scan_tells_error_records_from_other_lines_in_both_formats():
    lines = [
        "2026-01-01 12:00:00,000 ERROR gpu_scheduling.scheduler: allocator chose GPUs the ledger says are held",
        "2026-01-01 12:00:00,000 CRITICAL gpu_scheduling.board: out of memory",
        '{"time": "t", "level": "ERROR", "logger": "gpu_scheduling.board", "msg": "failed"}',
        '{"time":"t","level":"CRITICAL","msg":"compact JSON too"}',
        # not error records: other levels, a message quoting one, a JSON string that is no record
        "2026-01-01 12:00:00,000 INFO gpu_scheduling.webhook: pod named ERROR admitted",
        "2026-01-01 12:00:00,000 WARNING gpu_scheduling.scheduler: slow answer, ERROR budget 3",
        '{"time": "t", "level": "INFO", "msg": "\\"level\\": \\"ERROR\\""}',
        '{"level": "ERROR" not JSON',
        "==== start /venv/bin/gpu-scheduler --scheduler-name=gpu-scheduler",
        # a program that died of an exception: Python's own traceback, several lines
        "Traceback (most recent call last):",
        '  File "/venv/bin/gpu-scheduler", line 8, in <module>',
    ]
    found = scan("gpu-x.log", lines)
    assert [line.split(": ", 1)[1] for line in found.errors] == lines[:4]
    assert found.tracebacks == ("gpu-x.log: Traceback (most recent call last):",)


def test_a_kind_log_keeps_the_lines_from_the_scenarios_start_without_the_kubelets_timestamp():
    assert lines_since(EARLIER + TEXT_SAMPLE, BEGAN) == [line.split(" ", 1)[1] for line in TEXT_SAMPLE.splitlines()]
    assert lines_since(EARLIER, BEGAN) == []
    # a line without the kubelet's timestamp is kept whole
    assert lines_since("2026-01-01 12:00:00,000 ERROR x: y\n", BEGAN) == ["2026-01-01 12:00:00,000 ERROR x: y"]


class _PodLogs:
    """The two calls pod_logs makes, answered from `logs`: (pod, container, previous) -> the log text; any other
    log is the apiserver's 400 for a container waiting to start."""

    def __init__(self, pods: list[dict], logs: dict[tuple[str, str, bool], str]):
        self._pods, self._logs = pods, logs
        self.asked: list[tuple[str, dict[str, str]]] = []

    def pods(self, namespace: str, **params: str) -> list[dict]:
        assert (namespace, params) == ("kube-system", {"labelSelector": "app.kubernetes.io/part-of=gpu-scheduling"})
        return self._pods

    def text(self, path: str, **params: str) -> str:
        self.asked.append((path, params))
        pod = path.split("/")[-2]
        key = (pod, params["container"], params.get("previous") == "true")
        if pod == "gone":
            raise NotFound(404, "NotFound", f'pods "{pod}" not found')
        if key not in self._logs:
            raise BadRequest(400, "BadRequest", f'container "{params["container"]}" is waiting to start')
        return self._logs[key]


def test_on_kind_every_project_container_is_read_since_the_start_and_a_restarted_one_from_its_previous_run_too():
    pods = [
        _system_pod("gpu-scheduler-a", "u1", 1),
        _system_pod("agent-x", "u2", 0),  # its init container waits: no log
        _system_pod("gone", "u3", 0),  # deleted since it was listed
    ]
    api = _PodLogs(
        pods,
        {
            ("gpu-scheduler-a", "main", False): EARLIER + "2026-11-27T20:23:58Z 2026-11-27 20:23:58,000 INFO x: up\n",
            ("gpu-scheduler-a", "main", True): JSON_SAMPLE,
            ("gpu-scheduler-a", "wait", False): "",
            ("agent-x", "main", False): "2026-11-27T20:23:59Z 2026-11-27 20:23:59,000 ERROR gpu_scheduling.agent: no\n",
        },
    )
    found = pod_logs(api, "kube-system", "app.kubernetes.io/part-of=gpu-scheduling", BEGAN, ["gpu-scheduler-a/main@u1"])
    assert [t.split(": ")[0] for t in found.tracebacks] == ["gpu-scheduler-a/main (previous run)"]
    assert found.errors == ("agent-x/main: 2026-11-27 20:23:59,000 ERROR gpu_scheduling.agent: no",)
    assert api.asked[1] == (
        paths.pod_log("kube-system", "gpu-scheduler-a"),
        {"container": "main", "sinceTime": "2026-11-27T20:23:55Z", "timestamps": "true"},
    )
    assert api.asked[2][1] == dict(api.asked[1][1], previous="true")
    assert sum(1 for _, params in api.asked if params.get("previous")) == 1


def test_the_containers_whose_restart_count_grew_are_named_by_their_key():
    before = container_restarts([_system_pod("gpu-scheduler-a", "u1", 2)])
    after = container_restarts([_system_pod("gpu-scheduler-a", "u1", 3), _system_pod("board-y", "u4", 0, 1)])
    assert grown(before, after) == ["board-y/wait@u4", "gpu-scheduler-a/main@u1"]


def test_the_projects_records_in_the_tests_own_process_are_read_like_a_programs_log(caplog):
    watch = Watch(None)
    log = logging.getLogger("gpu_scheduling.kube.leaderelection")
    log.error("before the test: not its")
    watch.begin([])
    log.warning("renewing took %ss", 3)
    logging.getLogger("harness.other").error("not the project's")
    log.error("the Lease %s is gone", "x")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.warning("a traceback at a warning is one too", exc_info=True)
    watch.end()
    log.error("after the test: not its")
    found = watch.findings([])
    assert len(found.tracebacks) == len(found.errors) == 1
    assert all(t.startswith("this test's process: 20") for t in found.tracebacks + found.errors)
    assert "WARNING gpu_scheduling.kube.leaderelection: a traceback" in found.tracebacks[0]
    assert "\\nRuntimeError: boom" in found.tracebacks[0]
    assert found.errors[0].endswith(" ERROR gpu_scheduling.kube.leaderelection: the Lease x is gone")
    assert "\nRuntimeError: boom" in caplog.text  # the other handlers still see the record as it was logged


def test_programs_of_the_same_name_are_told_apart_and_one_that_ended_before_the_start_is_no_exit(tmp_path):
    def program(name: str, code: str) -> Process:
        return Process(name, [sys.executable, "-c", code], tmp_path).start()

    earlier = program("gpu-scheduler-b", "raise SystemExit(1)")  # a scenario before this one, which declared it
    assert earlier.proc is not None
    earlier.proc.wait()
    earlier.restarts = 3
    watch = Watch(tmp_path)
    watch.begin([earlier])
    again = program("gpu-scheduler-b", "raise SystemExit(2)")  # started by this test, same name
    assert again.proc is not None
    again.proc.wait()
    again.restarts = 1
    found = watch.findings([earlier, again])
    assert found.exits == ("gpu-scheduler-b (exit 2)",)
    assert found.restarts == ("gpu-scheduler-b (1x)",)


def test_a_retired_extra_scheduler_that_had_exited_by_itself_stays_an_exit_and_one_stopped_does_not(tmp_path):
    def scheduler(name: str, code: str) -> SchedulerProcess:
        proc = SchedulerProcess(
            name,
            [sys.executable, "-c", code],
            tmp_path,
            base_identity=name,
            health_port=0,
            leader_election=False,
            restart_on_failure=True,
        )
        return proc.start()

    go = tmp_path / "go"
    crashed = scheduler("gpu-scheduler-c", _exit_after(go, 0))  # exit 0: the supervisor does not restart it
    running = scheduler("gpu-scheduler-d", "import time; time.sleep(60)")
    watch = Watch(tmp_path)
    watch.begin([crashed, running])
    go.touch()
    assert crashed.proc is not None
    crashed.proc.wait()
    crashed.retire()
    running.retire()
    assert not running.running
    assert watch.findings([crashed, running]).exits == ("gpu-scheduler-c (exit 0)",)
