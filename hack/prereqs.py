#!/usr/bin/env python3
"""Check this machine against what `make demo` and `make test` need, before any long build starts.

Each prerequisite is one line: `ok` with what was found, or `MISSING` with what was found, what is needed and how to
get it on Debian 12. The run exits 1 when anything is missing, so that `make` stops here instead of failing half an
hour later in a build with a message about something else. Warnings (`note`) never stop the run.

What the project installs itself (Docker's engine, debootstrap, chromium, every Kubernetes binary, the Python
packages) is not a prerequisite: the line says that it will be installed. What it cannot install is: Python with
its venv module, a Go that can build or fetch the pinned toolchain, root for the phases that change the system,
the cores, memory and disk the test-bed needs, and the local registry's port.

It runs on the system's python3 alone, standard library only (it runs before the virtual environment exists), and
changes nothing.

Usage: hack/prereqs.py [--for demo|test]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import pathlib
import platform
import re
import shutil
import socket
import subprocess
import sys
import urllib.error
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import toolchain

ROOT = toolchain.ROOT
INVENTORY = toolchain.INVENTORY

PYTHON_MIN = (3, 11)  # pyproject.toml's requires-python
CORES_MIN = 2
MEMORY_MIN_GIB = 8
# Free disk for a first run (the Go module and build caches, the virtual environment, the cache's binaries and node
# image, Docker's images and the KinD nodes' containers), and for a run that finds those caches filled.
DISK_COLD_GIB = 40
DISK_WARM_GIB = 15


@dataclasses.dataclass(frozen=True)
class Facts:
    """What was read from the machine: everything the verdicts depend on, so that they are plain functions."""

    goal: str  # "demo" or "test"
    machine: str  # platform.machine()
    os_release: str  # /etc/os-release's PRETTY_NAME, or ""
    python: tuple[int, ...]
    has_venv: bool  # the venv and ensurepip modules (Debian's python3-venv)
    venv_ready: bool  # .venv exists already: the venv module is no longer needed
    go: str | None  # `go env GOVERSION`, None when no go is on PATH
    go_needed: str  # versions.yml go_version
    uid: int
    cores: int
    memory_gib: float
    disk_free_gib: float  # on the filesystem of the cache folder
    caches_warm: bool  # the cache folder holds built binaries already
    registry: str  # the inventory's testbed_registry
    registry_port: str  # "free", "registry" (a registry answers there), "remote" (not on this machine), or what else
    docker: str  # "missing", "stopped" or "running"


@dataclasses.dataclass(frozen=True)
class Finding:
    name: str
    ok: bool
    found: str
    fix: str = ""  # what is needed and how to get it, when not ok
    note: bool = False  # a warning: printed, never fails the run

    def line(self) -> str:
        status = "ok     " if self.ok else ("note   " if self.note else "MISSING")
        text = f"prereqs: {status} {self.name}: {self.found}"
        return text + (f"\n                 -> {self.fix}" if self.fix else "")


def _verdict(name: str, ok: bool, found: str, fix: str) -> Finding:
    """`ok` with what was found, or missing with what was found and `fix`."""
    return Finding(name, ok, found, "" if ok else fix)


def _release(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def assess(f: Facts) -> list[Finding]:
    """The verdict on each prerequisite, in the order a newcomer would fix them."""
    out: list[Finding] = []
    debian = "Debian GNU/Linux 12" in f.os_release
    amd64 = f.machine in ("x86_64", "amd64")
    machine = f"{f.os_release or 'unknown OS'} on {f.machine}"
    out.append(
        Finding("machine", True, machine)
        if amd64 and debian
        else Finding(
            "machine",
            False,
            machine,
            "the test-bed is built and tested on Debian 12 (bookworm) amd64"
            + (
                "; other amd64 Linux distributions may work but are not tested"
                if amd64
                else ": the node image and every binary are built for amd64"
            ),
            note=amd64,
        )
    )
    out.append(
        _verdict(
            "python",
            f.python >= PYTHON_MIN,
            f"Python {_release(f.python)}",
            f"Python {_release(PYTHON_MIN)} or newer is needed (Debian 12's python3 is 3.11: apt-get install python3)",
        )
    )
    if f.venv_ready or f.has_venv:
        out.append(Finding("python3-venv", True, ".venv exists" if f.venv_ready else "the venv module is there"))
    else:
        out.append(
            Finding(
                "python3-venv",
                False,
                "python3 has no venv/ensurepip module, so `python3 -m venv .venv` fails",
                "apt-get install python3-venv",
            )
        )
    out.append(_go(f))
    out.append(
        _verdict(
            "root",
            f.uid == 0,
            "running as root" if f.uid == 0 else f"running as uid {f.uid}",
            "run as root (sudo make " + f.goal + "): the test-bed installs Debian packages with apt-get (docker.io, "
            "debootstrap, chromium), writes /etc/docker/daemon.json and its runc wrapper, starts dockerd, and "
            "builds the node image and base images with debootstrap; a non-root run is not tested",
        )
    )
    out.append(_verdict("cores", f.cores >= CORES_MIN, f"{f.cores}", f"{CORES_MIN} or more"))
    out.append(
        _verdict(
            "memory",
            f.memory_gib >= MEMORY_MIN_GIB,
            f"{f.memory_gib:.1f} GiB",
            f"{MEMORY_MIN_GIB} GiB or more: the Go builds and the five KinD nodes with their control plane need it",
        )
    )
    need = DISK_WARM_GIB if f.caches_warm else DISK_COLD_GIB
    out.append(
        Finding("disk", True, f"{f.disk_free_gib:.0f} GiB free ({need} GiB needed)")
        if f.disk_free_gib >= need
        else Finding(
            "disk",
            False,
            f"{f.disk_free_gib:.0f} GiB free under the cache folder's filesystem",
            f"{need} GiB free ({'caches filled' if f.caches_warm else 'a first run: Go caches, images, KinD nodes'}); "
            "`make uninstall` removes what an earlier test-bed left, `docker system prune` what other projects left",
        )
    )
    if f.registry_port in ("free", "registry", "remote"):
        found = {
            "free": "free",
            "registry": "a registry answers there (the test-bed's, which `make teardown` keeps)",
            "remote": "not on this machine (testbed_registry names another host)",
        }[f.registry_port]
        out.append(Finding(f"port of {f.registry}", True, found))
    else:
        out.append(
            Finding(
                f"port of {f.registry}",
                False,
                f"in use by something that is not a registry ({f.registry_port})",
                "stop that program, or set testbed_registry to another localhost port in "
                "inventory/localhost/group_vars/all.yml",
            )
        )
    docker = {
        "running": "running (used as it is)",
        "stopped": "installed, not running (the test-bed starts it)",
        "missing": "not installed (the test-bed installs Debian's docker.io and starts it)",
    }
    out.append(Finding("docker", True, docker.get(f.docker, f.docker)))
    return out


def _go(f: Facts) -> Finding:
    needed = toolchain.go_release(f.go_needed)
    fix = (
        f"Go {_release(toolchain.GO_SWITCHING)} or newer on PATH, which fetches go{f.go_needed} from the Go module "
        "proxy itself. Debian 12's golang-go is 1.19, too old; bookworm-backports has 1.23: echo 'deb "
        "http://deb.debian.org/debian bookworm-backports main' >/etc/apt/sources.list.d/backports.list && apt-get "
        "update && apt-get install -t bookworm-backports golang-go. Or the go.dev/dl tarball: tar -C /usr/local "
        "-xzf go*.linux-amd64.tar.gz and PATH=/usr/local/go/bin:$PATH"
    )
    if f.go is None:
        return Finding("go", False, "no `go` on PATH", fix)
    have = toolchain.go_release(f.go)
    if have is None or have < toolchain.GO_SWITCHING:
        return Finding("go", False, f"{f.go or 'unreadable version'}", fix)
    if needed is not None and have < needed:
        return Finding("go", True, f"{f.go}; the builds fetch go{f.go_needed} from the Go module proxy (GOTOOLCHAIN)")
    return Finding("go", True, f"{f.go}")


# ---- reading the machine ----------------------------------------------------------------------------------------


def _os_release() -> str:
    try:
        text = pathlib.Path("/etc/os-release").read_text()
    except OSError:
        return ""
    m = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', text, re.MULTILINE)
    return m.group(1) if m else ""


def _memory_gib() -> float:
    try:
        text = pathlib.Path("/proc/meminfo").read_text()
    except OSError:
        return 0.0
    m = re.search(r"^MemTotal:\s+(\d+) kB", text, re.MULTILINE)
    return int(m.group(1)) / 1024 / 1024 if m else 0.0


def inventory_registry(path: pathlib.Path = INVENTORY) -> str:
    """The inventory's testbed_registry (a flat `key: value` line; no PyYAML here)."""
    m = re.search(r"^testbed_registry:\s*\"?([^\"#\s]+)", path.read_text(), re.MULTILINE)
    return m.group(1) if m else "localhost:5001"


def registry_port(registry: str, timeout: float = 3) -> str:
    """ "free" when nothing listens on the registry's loopback port, "registry" when an OCI registry answers there,
    else what answered."""
    host, _, port = registry.split("/", 1)[0].partition(":")
    if host not in ("localhost", "127.0.0.1") or not port:
        return "remote"  # not the test-bed's own registry: nothing on this machine to check
    with socket.socket() as s:
        s.settimeout(timeout)
        if s.connect_ex(("127.0.0.1", int(port))) != 0:
            return "free"
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=timeout) as r:
            api = r.headers.get("Docker-Distribution-Api-Version", "")
    except urllib.error.HTTPError as e:  # a registry asking for credentials still names its API
        api = e.headers.get("Docker-Distribution-Api-Version", "") if e.headers else ""
        if not api:
            return f"HTTP {e.code} without a registry's header"
    except (OSError, ValueError) as e:
        return f"no HTTP registry: {e}"
    return "registry" if api.startswith("registry/2") else "an HTTP server without a registry's header"


def _docker() -> str:
    if shutil.which("docker") is None and shutil.which("dockerd") is None:
        return "missing"
    try:
        ok = subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return "running" if ok else "stopped"


def read_facts(goal: str) -> Facts:
    cache = toolchain.cache_root()
    existing = next((p for p in (cache, *cache.parents) if p.exists()), pathlib.Path("/"))
    usage = shutil.disk_usage(existing)
    versions = toolchain.read_versions()
    registry = inventory_registry()
    return Facts(
        goal=goal,
        machine=platform.machine(),
        os_release=_os_release(),
        python=sys.version_info[:3],
        has_venv=all(importlib.util.find_spec(m) is not None for m in ("venv", "ensurepip")),
        venv_ready=(ROOT / ".venv" / "bin" / "python").exists(),
        go=toolchain.local_go_version(),
        go_needed=versions["go_version"],
        uid=os.getuid(),
        cores=os.cpu_count() or 1,
        memory_gib=_memory_gib(),
        disk_free_gib=usage.free / 1024**3,
        caches_warm=(cache / "builds").is_dir() and any((cache / "builds").iterdir()),
        registry=registry,
        registry_port=registry_port(registry),
        docker=_docker(),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--for", dest="goal", choices=("demo", "test"), default="demo")
    args = parser.parse_args(argv)
    findings = assess(read_facts(args.goal))
    for finding in findings:
        print(finding.line())
    missing = [f.name for f in findings if not f.ok and not f.note]
    if missing:
        print(
            f"prereqs: {len(missing)} missing ({', '.join(missing)}): `make {args.goal}` needs them; see "
            "docs/troubleshooting.md",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
