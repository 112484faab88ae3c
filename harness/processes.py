"""Start, watch and stop the real processes of a test run; every process logs to a file kept for debugging."""

from __future__ import annotations

import http.client
import os
import pathlib
import signal
import socket
import ssl
import subprocess
import time
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Process:
    """One long-running program with its log file."""

    def __init__(self, name: str, argv: list[str], log_dir: pathlib.Path, env: dict[str, str] | None = None):
        self.name, self.argv = name, argv
        self.log_path = log_dir / f"{name}.log"
        self.env = dict(os.environ, **(env or {}))
        self.proc: subprocess.Popen[bytes] | None = None
        self.stopped = False  # by the test (stop, kill), since the last start: an exit it meant
        self.restarts = 0  # starts made by a supervisor (harness/components.py), not by the test

    def start(self) -> Process:
        log = self.log_path.open("ab")
        log.write(f"\n==== start {' '.join(self.argv)}\n".encode())
        log.flush()
        self.proc = subprocess.Popen(
            self.argv, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
        )
        log.close()
        self.stopped = False
        return self

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10) -> None:
        self.stopped = True
        if not self.running:
            return
        assert self.proc is not None
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def wait_http(self, url: str, *, timeout: float = 60, context: ssl.SSLContext | None = None) -> None:
        """Wait until `url` answers 200, failing early (with the log tail) when the process dies."""
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            if not self.running:
                raise RuntimeError(f"{self.name} exited with {self.proc and self.proc.returncode}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(url, timeout=2, context=context) as resp:
                    if resp.status == 200:
                        return
            except (OSError, http.client.HTTPException) as exc:  # not up yet (URLError and ssl errors are OSErrors)
                last = exc
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} not ready at {url} after {timeout}s ({last}):\n{self.tail()}")
