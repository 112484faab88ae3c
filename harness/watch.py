"""What the project's own programs did while one scenario ran, read back at its end: restarts the harness's
supervisor made, programs that exited without the test stopping them, and tracebacks or error records in their
logs. The scenarios' `world` fixture fails a scenario that caused any of them without declaring it
(features/conftest.py). Only reads the log files and the processes' counters; starts and stops nothing.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

from harness.processes import Process

#: The log files of the project's programs (gpu-scheduler, gpu-webhook, gpu-inventory-agent, gpu-board...) among
#: everything the harness logs; the control plane's own programs have other names.
PROJECT_LOGS = "gpu-*.log"
TRACEBACK = "Traceback (most recent call last)"
#: An error record in either of the programs' log formats (gpu_scheduling.logs): the text line
#: `2026-01-01 12:00:00,000 ERROR logger: message`, or the JSON object's level.
ERROR_RECORD = re.compile(r'^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (?:ERROR|CRITICAL) |"level": "(?:ERROR|CRITICAL)"')
#: How much of a matching line a finding quotes.
EXCERPT = 400


@dataclasses.dataclass(frozen=True)
class Findings:
    """What a scenario's programs did that it may not have meant: `restarts` and `exits` name the programs,
    `tracebacks` and `errors` are `<log>: <line>` excerpts."""

    restarts: tuple[str, ...] = ()
    exits: tuple[str, ...] = ()
    tracebacks: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()

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


def exited_by_itself(process: Process) -> bool:
    """Started, not running now, and not stopped by the test."""
    return process.proc is not None and not process.running and not process.stopped


class Watch:
    """Marks the end of every project log and each program's restart count at `begin()`; `findings()` reads
    what came after."""

    def __init__(self, log_dir: pathlib.Path):
        self.log_dir = log_dir
        self._offsets: dict[pathlib.Path, int] = {}
        self._restarts: dict[str, int] = {}

    def begin(self, programs: Iterable[Process]) -> None:
        self._offsets = {path: path.stat().st_size for path in self.log_dir.glob(PROJECT_LOGS)}
        self._restarts = {p.name: p.restarts for p in programs}

    def findings(self, programs: Iterable[Process]) -> Findings:
        programs = list(programs)
        restarts = tuple(
            f"{p.name} ({p.restarts - self._restarts.get(p.name, 0)}x)"
            for p in programs
            if p.restarts > self._restarts.get(p.name, 0)
        )
        exits = tuple(
            f"{p.name} (exit {p.proc.returncode if p.proc else None})" for p in programs if exited_by_itself(p)
        )
        tracebacks: list[str] = []
        errors: list[str] = []
        for path in sorted(self.log_dir.glob(PROJECT_LOGS)):
            for line in new_lines(path, self._offsets.get(path, 0)):
                if TRACEBACK in line:
                    tracebacks.append(f"{path.name}: {line[:EXCERPT]}")
                elif ERROR_RECORD.search(line):
                    errors.append(f"{path.name}: {line[:EXCERPT]}")
        return Findings(restarts, exits, tuple(tracebacks), tuple(errors))


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


def restarted(before: Mapping[str, int], after: Mapping[str, int]) -> tuple[str, ...]:
    """The containers whose restartCount grew from `before` to `after`, as `<pod>/<container> (Nx)`. A pod that
    is new (its uid not in `before`) counts from zero: a pod replaced by its controller is not a restart, a
    container of it that restarted already is."""
    return tuple(
        f"{key.rpartition('@')[0]} ({count - before.get(key, 0)}x)"
        for key, count in sorted(after.items())
        if count > before.get(key, 0)
    )


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
