"""What the project's own programs did while one test ran, read back at its end: restarts the harness's supervisor
made, programs that exited without the test stopping them, and tracebacks or error records in their logs, and the
project's log records made in the test's own process (code a test runs in-process: the leader election, the fit).
On KinD, the containers of the project's pods: their restart counts and their logs, read through the API. Every
test under features/ fails on any of them that it did not declare (features/conftest.py, the `watched` fixture).
Only reads the log files, the processes' counters and the API; starts and stops nothing.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import json
import logging
import pathlib
import re
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import ApiError
from gpu_scheduling.kube.sync import SyncClient
from gpu_scheduling.logs import TextFormatter
from harness.processes import Process

#: The log files of the project's programs (gpu-scheduler, gpu-webhook, gpu-inventory-agent, gpu-board...) among
#: everything the harness logs; the control plane's own programs have other names.
PROJECT_LOGS = "gpu-*.log"
#: The logger every module of the project logs under (gpu_scheduling.<module>).
PROJECT_LOGGER = "gpu_scheduling"
TRACEBACK = "Traceback (most recent call last)"
#: An error record in the programs' text format (gpu_scheduling.logs): `2026-01-01 12:00:00,000 ERROR logger: ...`.
TEXT_ERROR_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (?:ERROR|CRITICAL) ")
#: The levels of an error record, in the JSON format's `level`.
ERROR_LEVELS = frozenset({"ERROR", "CRITICAL"})
#: How much of a matching line a finding quotes.
EXCERPT = 400


@dataclasses.dataclass(frozen=True)
class Findings:
    """What a test's programs did that it may not have meant: `restarts` and `exits` name the programs,
    `tracebacks` and `errors` are `<log>: <line>` excerpts."""

    restarts: tuple[str, ...] = ()
    exits: tuple[str, ...] = ()
    tracebacks: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()

    def __add__(self, other: Findings) -> Findings:
        return Findings(
            self.restarts + other.restarts,
            self.exits + other.exits,
            self.tracebacks + other.tracebacks,
            self.errors + other.errors,
        )

    def unexpected(self, *, restarts: bool, tracebacks: bool) -> list[str]:
        """One line per finding not declared: `restarts` allows restarts and exits, `tracebacks` allows
        tracebacks and error records."""
        lines = []
        if not restarts:
            lines += [f"restarted (by the harness's supervisor, or on KinD the kubelet): {r}" for r in self.restarts]
            lines += [f"exited without being stopped: {e}" for e in self.exits]
        if not tracebacks:
            lines += [f"traceback: {t}" for t in self.tracebacks]
            lines += [f"error record: {e}" for e in self.errors]
        return lines


def scan(source: str, lines: Iterable[str]) -> Findings:
    """The tracebacks and error records among `lines` of one log (`source`, which the excerpts name), in either
    format of gpu_scheduling.logs: text (`time LEVEL logger: message`, a traceback escaped onto the record's line)
    or JSON (one object a line, its traceback in `exc`); a traceback Python itself printed (a program that died of
    an exception) shows as its first line. The one reading of a log, for the files, the test's own records and the
    KinD pods' logs alike."""
    tracebacks: list[str] = []
    errors: list[str] = []
    for line in lines:
        if TRACEBACK in line:
            tracebacks.append(f"{source}: {line[:EXCERPT]}")
        elif TEXT_ERROR_RECORD.search(line) or _json_level(line) in ERROR_LEVELS:
            errors.append(f"{source}: {line[:EXCERPT]}")
    return Findings(tracebacks=tuple(tracebacks), errors=tuple(errors))


def _json_level(line: str) -> str:
    """The `level` of a JSON record, "" for any other line."""
    if not line.startswith("{"):
        return ""
    try:
        record = json.loads(line)
    except ValueError:
        return ""
    level = record.get("level") if isinstance(record, dict) else None
    return level if isinstance(level, str) else ""


def exited_by_itself(process: Process) -> bool:
    """Started, not running now, and not stopped by the test."""
    return process.proc is not None and not process.running and not process.stopped


class Records(logging.Handler):
    """The project's records in this process that can be findings (ERROR and above, or carrying a traceback), as
    lines of the programs' text format, so that `scan` reads them as it reads a program's log."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(TextFormatter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno < logging.ERROR and not record.exc_info and not record.exc_text:
            return
        try:
            # A copy: the formatter caches its escaped traceback on the record, which the other handlers share.
            self.lines.append(self.format(copy.copy(record)))
        except Exception:  # noqa: BLE001 - as logging's own handlers: never raise into the code that logs
            self.handleError(record)


class Watch:
    """Marks, at `begin()`, the end of every project log in `log_dir` (None: no programs' logs, as on KinD), each
    program's restart count and which had ended already, and from then on collects the project's log records in
    this process until `end()`; `findings()` reads what came after. A program started later (an extra scheduler)
    counts from zero restarts and is read from its log's end at `begin()` (from its start when it had none);
    `watch()` marks one that the caller hands over later. `begin()` again (a `log_dir` set later) marks what was
    not marked yet."""

    def __init__(self, log_dir: pathlib.Path | None):
        self.log_dir = log_dir
        self._offsets: dict[pathlib.Path, int] = {}
        self._restarts: dict[Process, int] = {}
        self._ended: dict[Process, object] = {}  # program -> its process that had exited by itself when marked
        self._records = Records()

    def begin(self, programs: Iterable[Process]) -> None:
        for path in self._logs(()):
            self._offsets.setdefault(path, path.stat().st_size)
        for p in programs:
            if p not in self._restarts:
                self.watch(p)
        logging.getLogger(PROJECT_LOGGER).addHandler(self._records)

    def watch(self, program: Process) -> None:
        """Count `program`'s restarts and exits from now on, and read its log from its end now."""
        self._restarts[program] = program.restarts
        if exited_by_itself(program):
            self._ended[program] = program.proc
        if program.log_path not in self._offsets:
            self._offsets[program.log_path] = program.log_path.stat().st_size if program.log_path.exists() else 0

    def end(self) -> None:
        """Stop collecting this process's records (what `findings()` read so far stays)."""
        logging.getLogger(PROJECT_LOGGER).removeHandler(self._records)

    def programs(self, programs: Iterable[Process]) -> Findings:
        """The restarts and the exits by themselves of `programs` since `begin()`."""
        programs = list(programs)
        restarts = tuple(
            f"{p.name} ({p.restarts - self._restarts.get(p, 0)}x)"
            for p in programs
            if p.restarts > self._restarts.get(p, 0)
        )
        exits = tuple(
            f"{p.name} (exit {p.proc.returncode if p.proc else None})"
            for p in programs
            if exited_by_itself(p) and self._ended.get(p) is not p.proc
        )
        return Findings(restarts, exits)

    def logs(self, programs: Iterable[Process] = ()) -> Findings:
        """The tracebacks and error records since `begin()` in the project's logs (`programs`' own included,
        wherever they are) and among this process's records."""
        found = Findings()
        for path in self._logs(programs):
            found += scan(path.name, new_lines(path, self._offsets.get(path, 0)))
        return found + scan("this test's process", self._records.lines)

    def findings(self, programs: Iterable[Process]) -> Findings:
        programs = list(programs)
        return self.programs(programs) + self.logs(programs)

    def _logs(self, programs: Iterable[Process]) -> list[pathlib.Path]:
        found = set(self.log_dir.glob(PROJECT_LOGS)) if self.log_dir is not None else set()
        return sorted(found | {p.log_path for p in programs if p.log_path.exists()})


def container_restarts(pods: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """`<pod>/<container>@<pod uid>` -> its restartCount, for every container and init container of `pods` (the
    KinD tier's counterpart of the supervisor's counts: there the kubelet restarts the programs)."""
    counts: dict[str, int] = {}
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        for key in ("initContainerStatuses", "containerStatuses"):
            for c in status.get(key) or ():
                counts[f"{meta.get('name')}/{c.get('name')}@{meta.get('uid')}"] = int(c.get("restartCount") or 0)
    return counts


def grown(before: Mapping[str, int], after: Mapping[str, int]) -> list[str]:
    """The keys of `after` (container_restarts) whose restartCount grew from `before`; a pod that is new (its uid
    not in `before`) counts from zero: a pod replaced by its controller is not a restart, a container of it that
    restarted already is."""
    return sorted(key for key, count in after.items() if count > before.get(key, 0))


def restarted(before: Mapping[str, int], after: Mapping[str, int]) -> tuple[str, ...]:
    """The containers whose restartCount grew from `before` to `after`, as `<pod>/<container> (Nx)`."""
    return tuple(f"{key.rpartition('@')[0]} ({after[key] - before.get(key, 0)}x)" for key in grown(before, after))


def pod_logs(
    api: SyncClient, namespace: str, selector: str, since: datetime.datetime, restarted: Collection[str] = ()
) -> Findings:
    """The tracebacks and error records the containers of the pods `selector` picks in `namespace` logged from
    `since` (aware) on, read through the API (pods/log): each container's log, and for one in `restarted`
    (container_restarts' keys: it restarted meanwhile) its previous run's too. A container with no log to give
    (waiting to start, or its pod gone meanwhile) is passed over, and so is a pod deleted before the end: its logs
    went with it."""
    # Whole seconds in the request; each line's own timestamp then drops what came before `since`.
    since_time = since.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    found = Findings()
    for pod in api.pods(namespace, labelSelector=selector):
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        for key in ("initContainerStatuses", "containerStatuses"):
            for c in status.get(key) or ():
                where = f"{meta.get('name')}/{c.get('name')}"
                runs: dict[str, dict[str, str]] = {where: {}}
                if f"{where}@{meta.get('uid')}" in restarted:
                    runs[f"{where} (previous run)"] = {"previous": "true"}
                for source, previous in runs.items():
                    try:
                        text = api.text(
                            paths.pod_log(namespace, meta["name"]),
                            container=c["name"],
                            sinceTime=since_time,
                            timestamps="true",
                            **previous,
                        )
                    except ApiError:
                        continue
                    found += scan(source, lines_since(text, since))
    return found


def lines_since(text: str, since: datetime.datetime) -> list[str]:
    """The lines of a pods/log answer asked with `timestamps=true` that were written at `since` (aware) or later,
    without the kubelet's timestamp. A line without one is kept whole: nothing is passed over for its form."""
    lines = []
    for line in text.splitlines():
        stamp, _, rest = line.partition(" ")
        at = _timestamp(stamp)
        if at is None:
            lines.append(line)
        elif at >= since:
            lines.append(rest)
    return lines


def _timestamp(text: str) -> datetime.datetime | None:
    """The kubelet's RFC 3339 timestamp (`2026-01-01T12:00:00.123456789Z`, nanoseconds cut to microseconds), or
    None for anything else."""
    try:
        at = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    return at if at.tzinfo is not None else None


def new_lines(path: pathlib.Path, offset: int) -> list[str]:
    """The lines written to `path` from byte `offset` on (all of it when the file is shorter: rewritten)."""
    try:
        with path.open("rb") as f:
            if f.seek(0, 2) < offset:
                offset = 0
            f.seek(offset)
            return f.read().decode(errors="replace").splitlines()
    except OSError:
        return []
