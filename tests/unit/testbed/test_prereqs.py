"""hack/prereqs.py, the first step of `make demo` and `make test`: each missing prerequisite is named with what was
found and how to get it, a machine that has everything passes, and the local registry's port is told apart from a
free port and from another program. The verdicts are plain functions of the facts read; the port is a real socket."""

from __future__ import annotations

import dataclasses
import http.server
import os
import pathlib
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from hack import prereqs, toolchain
from tests import ROOT

READY = prereqs.Facts(
    goal="test",
    machine="x86_64",
    os_release="Debian GNU/Linux 12 (bookworm)",
    python=(3, 11, 2),
    has_venv=True,
    venv_ready=False,
    go="go1.26.8",
    go_needed="1.26.7",
    uid=0,
    cores=2,
    memory_gib=23.5,
    disk_free_gib=60,
    caches_warm=False,
    registry="localhost:5001",
    registry_port="free",
    docker="missing",
)


def missing(facts: prereqs.Facts) -> dict[str, prereqs.Finding]:
    return {f.name: f for f in prereqs.assess(facts) if not f.ok and not f.note}


def test_a_machine_with_every_prerequisite_passes_and_each_line_says_what_was_found() -> None:
    findings = prereqs.assess(READY)
    assert not missing(READY)
    names = [f.name for f in findings]
    assert names == [
        "machine",
        "python",
        "python3-venv",
        "go",
        "root",
        "cores",
        "memory",
        "disk",
        "port of localhost:5001",
        "docker",
    ]
    assert all(f.found for f in findings)
    docker = next(f for f in findings if f.name == "docker")
    assert "installs Debian's docker.io" in docker.found


@pytest.mark.parametrize(
    ("change", "name", "found", "fix"),
    [
        ({"go": None}, "go", "no `go` on PATH", "bookworm-backports"),
        ({"go": "go1.19.8"}, "go", "go1.19.8", "Go 1.21 or newer on PATH, which fetches go1.26.7"),
        ({"go": "go1.20.14"}, "go", "go1.20.14", "go.dev/dl tarball"),
        ({"has_venv": False}, "python3-venv", "no venv/ensurepip module", "apt-get install python3-venv"),
        ({"python": (3, 9, 2)}, "python", "Python 3.9.2", "Python 3.11 or newer"),
        ({"uid": 1000}, "root", "uid 1000", "sudo make test"),
        ({"cores": 1}, "cores", "1", "2 or more"),
        ({"memory_gib": 3.8}, "memory", "3.8 GiB", "8 GiB or more"),
        ({"disk_free_gib": 20}, "disk", "20 GiB free", "40 GiB free (a first run"),
        ({"disk_free_gib": 10, "caches_warm": True}, "disk", "10 GiB free", "15 GiB free (caches filled)"),
        (
            {"registry_port": "an HTTP server without a registry's header"},
            "port of localhost:5001",
            "not a registry",
            "set testbed_registry to another localhost port",
        ),
        ({"machine": "aarch64"}, "machine", "aarch64", "built for amd64"),
    ],
)
def test_each_missing_prerequisite_is_named_with_what_was_found_and_how_to_get_it(
    change: dict[str, object], name: str, found: str, fix: str
) -> None:
    facts = dataclasses.replace(READY, **change)  # type: ignore[arg-type]
    assert list(missing(facts)) == [name]
    finding = missing(facts)[name]
    assert found in finding.found
    assert fix in finding.fix
    assert finding.line().startswith(f"prereqs: MISSING {name}: ")


def test_an_older_go_that_can_switch_is_enough_and_says_it_fetches_the_pinned_one() -> None:
    finding = next(f for f in prereqs.assess(dataclasses.replace(READY, go="go1.24.3")) if f.name == "go")
    assert finding.ok
    assert "fetch go1.26.7 from the Go module proxy" in finding.found


def test_a_non_debian_amd64_machine_is_a_note_not_a_failure() -> None:
    facts = dataclasses.replace(READY, os_release="Ubuntu 24.04 LTS")
    finding = next(f for f in prereqs.assess(facts) if f.name == "machine")
    assert not finding.ok and finding.note and not missing(facts)
    assert finding.line().startswith("prereqs: note    machine:")


def test_the_go_check_and_the_builds_read_the_same_pin() -> None:
    assert prereqs.read_facts("demo").go_needed == toolchain.read_versions()["go_version"]


def test_without_go_on_path_the_script_exits_1_naming_go_and_where_to_get_it(tmp_path: pathlib.Path) -> None:
    # A PATH holding python3 only: the real script, as `make demo` runs it, on a machine without Go.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    result = subprocess.run(
        ["python3", str(ROOT / "hack" / "prereqs.py"), "--for", "demo"],
        env={**os.environ, "PATH": str(bin_dir)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "prereqs: MISSING go: no `go` on PATH" in result.stdout
    assert "bookworm-backports" in result.stdout
    assert "`make demo` needs them" in result.stderr


# ---- the local registry's port ------------------------------------------------------------------------------------


def _serve(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[int]:
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


class _Registry(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Docker-Distribution-Api-Version", "registry/2.0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


class _Other(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def registry() -> Iterator[int]:
    yield from _serve(_Registry)


@pytest.fixture
def other() -> Iterator[int]:
    yield from _serve(_Other)


def test_a_registry_on_the_port_is_taken_for_the_test_beds_own(registry: int) -> None:
    assert prereqs.registry_port(f"localhost:{registry}") == "registry"


def test_another_http_server_on_the_port_is_named(other: int) -> None:
    assert prereqs.registry_port(f"localhost:{other}") == "HTTP 404 without a registry's header"


def test_a_port_nothing_listens_on_is_free() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        assert prereqs.registry_port(f"localhost:{port}") == "free"


def test_a_registry_on_another_host_is_not_checked_here() -> None:
    assert prereqs.registry_port("registry.example.com:5000/team") == "remote"


def test_the_registry_checked_is_the_inventorys() -> None:
    assert prereqs.inventory_registry() == "localhost:5001"
