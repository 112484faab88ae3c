#!/usr/bin/env python3
"""Build the Kubernetes binaries the tests and the test-bed need, from the Go module proxy, cached by version.

No binary is downloaded: every program is compiled here with `go build` from module sources (the machines this
project runs on reach the Go module proxy but no release server). Results go to a version-keyed folder under
``$GPU_TESTBED_CACHE`` (default ``~/.cache/gpu-scheduling-testbed``), so a second run builds nothing and a
clean clone on the same machine reuses them.

It is also the one reader of versions.yml and the one definition of the cache folder for Python and shell (the
Ansible test-bed reads versions.yml with one include_vars in roles/testbed_facts, and asks this script for the
cache folder). It runs on the system's python3 alone: no PyYAML, nothing outside the standard library.

Usage:
    hack/toolchain.py build kube-apiserver kube-controller-manager etcd kwok
    hack/toolchain.py build --kubernetes oldest kube-apiserver   # a Kubernetes program at kubernetes_oldest_version
    hack/toolchain.py bindir            # prints the folder holding the built binaries
    hack/toolchain.py cache-dir         # prints the cache folder ($GPU_TESTBED_CACHE or the default)
    hack/toolchain.py version KEY       # prints one pinned version of versions.yml, e.g. kubernetes_version
    hack/toolchain.py versions          # prints every pinned version as one JSON object
    hack/toolchain.py binary kube-apiserver   # prints the path of a built program, at the Kubernetes version under
                                              # test ($GPU_TESTBED_KUBERNETES: newest, the default, or oldest)
    hack/toolchain.py list              # components and where they come from
    hack/toolchain.py source kube-apiserver   # fetch a component's module source into the Go module cache, print
                                              # its folder (the tests read Kubernetes' OpenAPI documents there)

This script only writes below the cache folder; it never touches the repository or the system.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import functools
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

ROOT = pathlib.Path(__file__).resolve().parent.parent
VERSIONS_FILE = ROOT / "versions.yml"
#: The test-bed's inputs (read here only for its path: hack/prereqs.py, hack/footprint.py and harness/manifests.py
#: read the values).
INVENTORY = ROOT / "inventory" / "localhost" / "group_vars" / "all.yml"

# Staging modules that k8s.io/kubernetes requires at v0.0.0 and resolves with `replace` to ./staging in its
# own tree; outside that tree each needs a replace to its published v0.X.Y release. The union over the supported
# minors (cri-streaming and streaming are new in 1.37): a replace of a module the build does not need is ignored.
K8S_STAGING_MODULES = [
    "api",
    "apiextensions-apiserver",
    "apimachinery",
    "apiserver",
    "cli-runtime",
    "client-go",
    "cloud-provider",
    "cluster-bootstrap",
    "code-generator",
    "component-base",
    "component-helpers",
    "controller-manager",
    "cri-api",
    "cri-client",
    "cri-streaming",
    "csi-translation-lib",
    "dynamic-resource-allocation",
    "endpointslice",
    "externaljwt",
    "kms",
    "kube-aggregator",
    "kube-controller-manager",
    "kube-proxy",
    "kube-scheduler",
    "kubectl",
    "kubelet",
    "metrics",
    "mount-utils",
    "pod-security-admission",
    "sample-apiserver",
    "streaming",
]


def read_versions(path: pathlib.Path = VERSIONS_FILE) -> dict[str, str]:
    """Parse the flat `key: "value"` YAML of versions.yml without needing PyYAML."""
    versions: dict[str, str] = {}
    for line in path.read_text().splitlines():
        m = re.match(r'^([a-z0-9_]+):\s*"?([^"#\s]+)"?\s*(#.*)?$', line)
        if m:
            versions[m.group(1)] = m.group(2)
    return versions


#: The variable that picks the Kubernetes version a test run's control plane runs ("newest" or "oldest"), and the
#: versions.yml key of each.
KUBERNETES_ENV = "GPU_TESTBED_KUBERNETES"
KUBERNETES_KEYS = {"newest": "kubernetes_version", "oldest": "kubernetes_oldest_version"}


def staging_version(kubernetes: str) -> str:
    """The staging modules' release (k8s.io/api, k8s.io/client-go, ...) of a Kubernetes release: v1.37.2 -> v0.37.2."""
    m = re.fullmatch(r"v1\.(\d+)\.(\d+)", kubernetes)
    if not m:
        raise ValueError(f"not a Kubernetes release (v1.<minor>.<patch>): {kubernetes!r}")
    return f"v0.{m.group(1)}.{m.group(2)}"


def kubernetes_choice(name: str | None = None) -> str:
    """ "newest" or "oldest": `name`, else $GPU_TESTBED_KUBERNETES, else "newest"; anything else is refused by name."""
    choice = name or os.environ.get(KUBERNETES_ENV) or "newest"
    if choice not in KUBERNETES_KEYS:
        known = ", ".join(KUBERNETES_KEYS)
        raise SystemExit(f"toolchain: Kubernetes {choice!r} is not one of {known} (${KUBERNETES_ENV})")
    return choice


def at_kubernetes(versions: dict[str, str], choice: str | None = None) -> dict[str, str]:
    """versions.yml with kubernetes_version set to the chosen supported minor's pin (the builds and version flags of
    every Kubernetes program read kubernetes_version)."""
    return {**versions, "kubernetes_version": versions[KUBERNETES_KEYS[kubernetes_choice(choice)]]}


@dataclasses.dataclass(frozen=True)
class Component:
    """One program built from one Go module."""

    name: str
    module: str  # module path as found on the proxy
    package: str  # main package to build
    version_key: str  # key in versions.yml
    kubernetes: bool = False  # needs the staging replaces and version ldflags
    tags: tuple[str, ...] = ()  # go build -tags
    # Debian -dev packages whose C headers and static libraries a cgo build links: downloaded with `apt-get download`
    # and unpacked into the build's temporary folder (never installed), the program linked statically against them.
    # Empty: built with CGO_ENABLED=0.
    cgo: tuple[str, ...] = ()


def components() -> dict[str, Component]:
    k8s = [
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kube-proxy",
        "kubelet",
        "kubeadm",
        "kubectl",
    ]
    found = {
        name: Component(name, "k8s.io/kubernetes", f"k8s.io/kubernetes/cmd/{name}", "kubernetes_version", True)
        for name in k8s
    }
    found["etcd"] = Component("etcd", "go.etcd.io/etcd/server/v3", "go.etcd.io/etcd/server/v3", "etcd_version")
    found["kwok"] = Component("kwok", "sigs.k8s.io/kwok", "sigs.k8s.io/kwok/cmd/kwok", "kwok_version")
    found["kind"] = Component("kind", "sigs.k8s.io/kind", "sigs.k8s.io/kind", "kind_version")
    found["coredns"] = Component(
        "coredns", "github.com/coredns/coredns", "github.com/coredns/coredns", "coredns_version"
    )
    # The chart's installer, the OCI registry the test-bed's nodes pull from, and kind's storage provisioner.
    found["helm"] = Component("helm", "helm.sh/helm/v3", "helm.sh/helm/v3/cmd/helm", "helm_version")
    found["registry"] = Component(
        "registry",
        "github.com/distribution/distribution/v3",
        "github.com/distribution/distribution/v3/cmd/registry",
        "registry_version",
    )
    found["local-path-provisioner"] = Component(
        "local-path-provisioner",
        "github.com/rancher/local-path-provisioner",
        "github.com/rancher/local-path-provisioner",
        "local_path_provisioner_version",
    )
    # The kind node's container runtime (images/kind-node): containerd 2's daemon, its runc shim and its client, and
    # runc. containerd needs no C here (the optional snapshotters that do are left out, as kind's base image does);
    # runc needs libseccomp for seccomp profiles (pods with seccompProfile RuntimeDefault, as the chart's are).
    for name in CONTAINERD_PROGRAMS:
        found[name] = Component(
            name,
            CONTAINERD_MODULE,
            f"{CONTAINERD_MODULE}/cmd/{name}",
            "containerd_version",
            tags=CONTAINERD_TAGS + (("no_grpc",) if name == "containerd-shim-runc-v2" else ()),
        )
    found["runc"] = Component(
        "runc",
        "github.com/opencontainers/runc",
        "github.com/opencontainers/runc",
        "runc_version",
        tags=RUNC_TAGS,
        cgo=("libseccomp-dev",),
    )
    # The CNI plugins of hack/gpu-node.py's one-node cluster: a bridge with host-local addresses, and loopback. Pure Go;
    # each its own program, named cni-<plugin> here (hack/gpu-node.py installs them under the plugin's own name).
    for name, package in CNI_PLUGINS.items():
        found[f"cni-{name}"] = Component(f"cni-{name}", CNI_MODULE, f"{CNI_MODULE}/{package}", "cni_plugins_version")
    # The scenarios' Prometheus (harness/prometheus.py): static scrape targets only, so every service-discovery
    # plugin but file and http is left out (remove_all_sd), and the API without the web UI (no builtinassets: its
    # assets are generated by npm, not part of the module; the UI's pages answer 404, the API is whole).
    found["prometheus"] = Component(
        "prometheus",
        "github.com/prometheus/prometheus",
        "github.com/prometheus/prometheus/cmd/prometheus",
        "prometheus_version",
        tags=PROMETHEUS_TAGS,
    )
    return found


PROMETHEUS_TAGS = ("remove_all_sd",)
CNI_MODULE = "github.com/containernetworking/plugins"
#: The CNI plugins built (cni-<name>), and each one's main package in their module.
CNI_PLUGINS = {
    "bridge": "plugins/main/bridge",
    "host-local": "plugins/ipam/host-local",
    "loopback": "plugins/main/loopback",
}

CONTAINERD_MODULE = "github.com/containerd/containerd/v2"
CONTAINERD_PROGRAMS = ("containerd", "containerd-shim-runc-v2", "ctr")
# kind's base image's choice (images/base/Dockerfile: no optional snapshotter), plus the Makefile's defaults; the shim
# is built as containerd's Makefile builds it (no_grpc).
CONTAINERD_TAGS = ("no_aufs", "no_zfs", "no_btrfs", "no_devmapper", "urfave_cli_no_docs")
# runc's Makefile's default tags but libpathrs (a Rust library Debian 12 does not package: runc
# then uses its pure-Go pathrs-lite), and its static build's netgo and osusergo.
RUNC_TAGS = ("seccomp", "urfave_cli_no_docs", "netgo", "osusergo")


def prometheus_release(module_version: str) -> str:
    """Prometheus' release for its Go module version: v0.<major*100+minor>.<patch>, so v0.316.0 is 3.16.0."""
    m = re.fullmatch(r"v0\.(\d+)\.(\d+)", module_version)
    if not m or int(m.group(1)) < 100:
        raise ValueError(f"not a Prometheus module version (v0.<major*100+minor>.<patch>): {module_version!r}")
    combined, patch = int(m.group(1)), int(m.group(2))
    return f"{combined // 100}.{combined % 100}.{patch}"


# The cache folder's default and the variable that overrides it: defined here and nowhere else (shell scripts
# and the Ansible test-bed run `toolchain.py cache-dir`).
CACHE_ENV = "GPU_TESTBED_CACHE"
CACHE_DEFAULT = pathlib.Path("~/.cache/gpu-scheduling-testbed")


def cache_root() -> pathlib.Path:
    """$GPU_TESTBED_CACHE when set and not empty, else ~/.cache/gpu-scheduling-testbed; absolute."""
    return pathlib.Path(os.environ.get(CACHE_ENV) or CACHE_DEFAULT).expanduser().absolute()


# The oldest Go that can fetch another toolchain from the module proxy (GOTOOLCHAIN, Go 1.21).
GO_SWITCHING = (1, 21)


def go_release(text: str) -> tuple[int, ...] | None:
    """The release numbers of a Go version as `go version`, `go env GOVERSION` or a go.mod's `go` line write it
    ("go1.26.8", "1.26.7", "1.22", "go1.21rc2" -> (1, 21)); None when there are none."""
    m = re.search(r"(?:^|go)(\d+)\.(\d+)(?:\.(\d+))?", text.strip())
    if not m:
        return None
    return tuple(int(g) for g in m.groups() if g is not None)


def go_directive(gomod: str) -> tuple[int, ...] | None:
    """The `go` line of a go.mod file, as release numbers; None when it has none."""
    m = re.search(r"^go\s+(\S+)\s*$", gomod, re.MULTILINE)
    return go_release(m.group(1)) if m else None


def gotoolchain(local: str, needed: str) -> str:
    """GOTOOLCHAIN for the builds: `local` when the Go on PATH (its `go env GOVERSION`) is the pinned go_version or
    newer, so that nothing is fetched; otherwise the pinned one, which a Go of 1.21 or newer fetches from the module
    proxy once and keeps in its module cache."""
    have, want = go_release(local), go_release(needed)
    if want is None:
        raise ValueError(f"versions.yml go_version {needed!r} is not a Go version")
    if have is not None and have >= want:
        return "local"
    return "go" + ".".join(map(str, want))


def local_go_version() -> str | None:
    """The Go on PATH as it names itself (`go env GOVERSION`, or `go version` before Go 1.16), never one a go.mod
    nearby would switch to (GOTOOLCHAIN=local); None when no `go` is on PATH."""
    if shutil.which("go") is None:
        return None
    env = dict(os.environ, GOTOOLCHAIN="local")
    result = subprocess.run(["go", "env", "GOVERSION"], env=env, capture_output=True, text=True, timeout=30, cwd="/")
    if result.returncode != 0:
        result = subprocess.run(["go", "version"], env=env, capture_output=True, text=True, timeout=30, cwd="/")
    return result.stdout.strip() or None


@functools.cache
def _gotoolchain_here(needed: str) -> str:
    return gotoolchain(local_go_version() or "", needed)


def go_env(versions: dict[str, str], **extra: str) -> dict[str, str]:
    """The environment every `go` command of the project's builds runs in (also hack/protos.py's)."""
    return dict(os.environ, GOFLAGS="-mod=mod", GOTOOLCHAIN=_gotoolchain_here(versions["go_version"]), **extra)


def check_go_directive(module: str, gomod: str, needed: str) -> None:
    """Refuse a module whose go.mod asks for a newer Go than versions.yml's go_version, naming both."""
    asked, pinned = go_directive(gomod), go_release(needed)
    if asked is not None and pinned is not None and asked > pinned:
        raise SystemExit(
            f"toolchain: {module}'s go.mod asks for go {'.'.join(map(str, asked))}, newer than versions.yml's "
            f"go_version {needed}: raise go_version to it"
        )


def bindir() -> pathlib.Path:
    return cache_root() / "bin"


def versioned_path(comp: Component, versions: dict[str, str]) -> pathlib.Path:
    return cache_root() / "builds" / f"{comp.name}-{versions[comp.version_key]}" / comp.name


def binary(name: str, choice: str | None = None) -> pathlib.Path:
    """The built program `name`; a Kubernetes program at the chosen supported minor (kubernetes_choice). Not built
    here: a clear error names the command that builds it."""
    comp = components()[name]
    versions = at_kubernetes(read_versions(), choice)
    path = versioned_path(comp, versions)
    if not path.exists():
        flag = f" --kubernetes {kubernetes_choice(choice)}" if comp.kubernetes else ""
        raise RuntimeError(
            f"{name} {versions[comp.version_key]} is not built ({path}): "
            f"run `python3 hack/toolchain.py build{flag} {name}`"
        )
    return path


def _wrapper_gomod(comp: Component, versions: dict[str, str]) -> str:
    lines = ["module local/toolchain", "", "go 1.24.0", "", f"require {comp.module} {versions[comp.version_key]}", ""]
    if comp.kubernetes:
        staging = staging_version(versions["kubernetes_version"])
        lines.append("replace (")
        lines += [f"\tk8s.io/{m} => k8s.io/{m} {staging}" for m in K8S_STAGING_MODULES]
        lines.append(")")
    return "\n".join(lines) + "\n"


def _ldflags(comp: Component, versions: dict[str, str]) -> str:
    flags = ["-s", "-w"]
    if comp.kubernetes:
        # Without these the binaries report v0.0.0 and kubeadm/kubelet version checks refuse them.
        version = versions["kubernetes_version"]
        major, minor = version.lstrip("v").split(".")[:2]
        for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
            flags += [
                f"-X {pkg}.gitVersion={version}",
                f"-X {pkg}.gitMajor={major}",
                f"-X {pkg}.gitMinor={minor}",
                f"-X {pkg}.gitTreeState=clean",
                f"-X {pkg}.buildDate=1970-01-01T00:00:00Z",
            ]
    if comp.name == "helm":
        # `helm version` (which kubernetes.core.helm reads) prints v0.0.0-unknown without it.
        flags.append(f"-X helm.sh/helm/v3/internal/version.version={versions['helm_version']}")
    if comp.name == "local-path-provisioner":
        flags.append(f"-X main.VERSION={versions['local_path_provisioner_version']}")
    if comp.name == "kind":
        flags.append(f"-X sigs.k8s.io/kind/pkg/internal/kindversion.gitCommit={versions['kind_version']}")
    if comp.module == CONTAINERD_MODULE:
        # What containerd's Makefile sets (`containerd --version`, and the runtime version the kubelet reports for a
        # node, which reads v2.x.y+unknown without it); no git revision is known outside a clone.
        pkg = f"{CONTAINERD_MODULE}/version"
        flags += [
            f"-X {pkg}.Version={versions['containerd_version']}",
            f"-X {pkg}.Package=github.com/containerd/containerd",
        ]
    if comp.cgo:
        # A static PIE, as runc's `make static` links it: it runs on any node root filesystem, whatever its C library.
        flags += ["-linkmode external", "-extldflags -static-pie"]
    if comp.name == "prometheus":
        # What promu sets (.promu.yml): `prometheus --version` and prometheus_build_info print 0.0.0 without it.
        module_version = versions["prometheus_version"]
        pkg = "github.com/prometheus/common/version"
        flags += [
            f"-X {pkg}.Version={prometheus_release(module_version)}",
            f"-X {pkg}.Revision={module_version}",
            f"-X {pkg}.Branch=HEAD",
            f"-X {pkg}.BuildUser=toolchain@gpu-scheduling-testbed",
            f"-X {pkg}.BuildDate=19700101-00:00:00",
        ]
    return " ".join(flags)


def _check_source(comp: Component, versions: dict[str, str], source: pathlib.Path) -> None:
    """Refuse to build a component whose module source says it is another release than its ldflags would (runc
    embeds its VERSION file)."""
    if comp.name == "runc":
        release = (source / "VERSION").read_text().strip()
        if "v" + release != versions["runc_version"]:
            raise SystemExit(
                f"toolchain: {comp.module}@{versions['runc_version']} is runc {release} by its VERSION file"
            )
    if comp.name == "prometheus":
        release = (source / "VERSION").read_text().strip()
        expected = prometheus_release(versions["prometheus_version"])
        if release != expected:
            raise SystemExit(
                f"toolchain: {comp.module}@{versions['prometheus_version']} is Prometheus {release} by its VERSION "
                f"file, not {expected}: fix prometheus_release()"
            )


@contextlib.contextmanager
def _build_lock(comp: Component, versions: dict[str, str]) -> Iterator[None]:
    """Hold the component's build lock: a second `build` of the same component and version (`make test` builds
    some in the background while its `scenarios` step asks for them too) waits for the first, then finds its
    result cached, instead of building it again beside it."""
    path = cache_root() / "builds" / f"{comp.name}-{versions[comp.version_key]}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"toolchain: waiting for another build of {comp.name} ({path}) ...", flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def build(comp: Component, versions: dict[str, str], *, link: bool = True) -> pathlib.Path:
    """Build (or find cached) one program; `link` puts it in bindir() too (only the default versions are linked)."""
    target = versioned_path(comp, versions)
    if target.exists():  # the common case: no lock taken
        print(f"toolchain: {comp.name} {versions[comp.version_key]} cached at {target}", flush=True)
    else:
        with _build_lock(comp, versions):
            _build_locked(comp, versions, target)
    return _link(comp, target) if link else target


def cgo_env(sysroot: pathlib.Path) -> dict[str, str]:
    """The environment of a cgo build against Debian -dev packages unpacked into `sysroot`: pkg-config, which the
    `#cgo pkg-config:` lines run, sees only their .pc files and gives their paths under `sysroot`."""
    found = [*sysroot.glob("usr/lib/*/pkgconfig"), sysroot / "usr/lib/pkgconfig", sysroot / "usr/share/pkgconfig"]
    return {
        "CGO_ENABLED": "1",
        "PKG_CONFIG_LIBDIR": ":".join(str(d) for d in found),
        "PKG_CONFIG_SYSROOT_DIR": str(sysroot),
    }


#: What a cgo build needs on PATH, and the Debian package of each.
CGO_TOOLS = {"gcc": "gcc", "pkg-config": "pkg-config", "apt-get": "apt", "dpkg-deb": "dpkg"}


def _debian_sysroot(comp: Component, sysroot: pathlib.Path) -> pathlib.Path:
    """Debian's `comp.cgo` packages (the release in the machine's apt sources), downloaded and unpacked into
    `sysroot`: nothing is installed. A static library needs no runtime package beside it."""
    missing = [f"{tool} (Debian's {package})" for tool, package in CGO_TOOLS.items() if shutil.which(tool) is None]
    if missing:
        raise SystemExit(f"toolchain: {comp.name} links C libraries and needs {', '.join(missing)} on PATH")
    debs = sysroot.with_name("debs")
    debs.mkdir()
    downloaded = subprocess.run(["apt-get", "download", *comp.cgo], cwd=debs, capture_output=True, text=True)
    if downloaded.returncode != 0:
        raise SystemExit(
            f"toolchain: `apt-get download {' '.join(comp.cgo)}` failed for {comp.name} (an empty package index? "
            f"`apt-get update` fills it):\n{downloaded.stdout}{downloaded.stderr}"
        )
    for deb in sorted(debs.glob("*.deb")):
        subprocess.run(["dpkg-deb", "--extract", str(deb), str(sysroot)], check=True)
        print(f"toolchain: {comp.name} links {deb.name} (unpacked, not installed)", flush=True)
    return sysroot


def _build_locked(comp: Component, versions: dict[str, str], target: pathlib.Path) -> None:
    if not target.exists():
        print(f"toolchain: building {comp.name} {versions[comp.version_key]} from {comp.module} ...", flush=True)
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f"toolchain-{comp.name}-") as work:
            wd = pathlib.Path(work)
            (wd / "go.mod").write_text(_wrapper_gomod(comp, versions))
            env = go_env(versions, CGO_ENABLED="0")
            if comp.cgo:
                env.update(cgo_env(_debian_sysroot(comp, wd / "sysroot")))
            # `go mod download` of the main module fills go.sum for the wrapper; `go build -mod=mod` then
            # resolves the remaining entries itself.
            downloaded = subprocess.run(
                ["go", "mod", "download", "-json", comp.module],
                cwd=wd,
                env=env,
                check=True,
                stdout=subprocess.PIPE,
                text=True,
            )
            module = json.loads(downloaded.stdout)
            check_go_directive(comp.module, pathlib.Path(module["GoMod"]).read_text(), versions["go_version"])
            _check_source(comp, versions, pathlib.Path(module["Dir"]))
            tmp_out = target.with_suffix(".partial")
            tmp_out.parent.mkdir(parents=True, exist_ok=True)
            tags = ["-tags", ",".join(comp.tags)] if comp.tags else []
            subprocess.run(
                [
                    "go",
                    "build",
                    "-trimpath",
                    *(["-buildmode=pie"] if comp.cgo else []),
                    *tags,
                    "-ldflags",
                    _ldflags(comp, versions),
                    "-o",
                    str(tmp_out),
                    comp.package,
                ],
                cwd=wd,
                env=env,
                check=True,
            )
            tmp_out.rename(target)
        print(f"toolchain: built {comp.name} in {time.monotonic() - started:.0f}s -> {target}", flush=True)
    else:
        print(f"toolchain: {comp.name} {versions[comp.version_key]} built meanwhile at {target}", flush=True)


def _link(comp: Component, target: pathlib.Path) -> pathlib.Path:
    link = bindir() / comp.name
    link.parent.mkdir(parents=True, exist_ok=True)
    if (link.is_symlink() or link.exists()) and link.resolve() == target.resolve():
        return target
    # Replaced in one step, so that two builds linking at once (or a reader meanwhile) never see it missing.
    tmp = link.with_name(f".{comp.name}.{os.getpid()}")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target)
    tmp.replace(link)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build components (cached by version)")
    b.add_argument("names", nargs="+")
    b.add_argument(
        "--kubernetes",
        choices=sorted(KUBERNETES_KEYS),
        help="the supported minor to build Kubernetes programs at (default newest: kubernetes_version); programs "
        "built at oldest are not linked into bindir",
    )
    bi = sub.add_parser("binary", help="print a built program's path (a Kubernetes one at $GPU_TESTBED_KUBERNETES)")
    bi.add_argument("name")
    sub.add_parser("bindir", help="print the folder of built binaries")
    sub.add_parser("cache-dir", help=f"print the cache folder (${CACHE_ENV}, default {CACHE_DEFAULT})")
    v = sub.add_parser("version", help="print one pinned version of versions.yml")
    v.add_argument("key", help="a key of versions.yml, e.g. kubernetes_version")
    sub.add_parser("versions", help="print every pinned version of versions.yml as a JSON object")
    sub.add_parser("list", help="list known components")
    src = sub.add_parser("source", help="fetch a component's module source into the Go module cache, print its folder")
    src.add_argument("name")
    args = parser.parse_args(argv)

    if args.cmd == "bindir":
        print(bindir())
        return 0
    if args.cmd == "cache-dir":
        print(cache_root())
        return 0
    versions = read_versions()
    if args.cmd == "version":
        if args.key not in versions:
            print(f"toolchain: no key {args.key!r} in {VERSIONS_FILE}; keys: {', '.join(versions)}", file=sys.stderr)
            return 2
        print(versions[args.key])
        return 0
    if args.cmd == "versions":
        print(json.dumps(versions, indent=2))
        return 0
    known = components()
    if args.cmd == "binary":
        if args.name not in known:
            parser.error(f"unknown component {args.name!r}; known: {', '.join(known)}")
        try:
            print(binary(args.name))
        except RuntimeError as e:
            print(f"toolchain: {e}", file=sys.stderr)
            return 1
        return 0
    if args.cmd == "list":
        for c in known.values():
            print(f"{c.name:26} {c.module}@{versions[c.version_key]}")
        return 0
    if args.cmd == "source":
        if args.name not in known:
            parser.error(f"unknown component {args.name!r}; known: {', '.join(known)}")
        comp = known[args.name]
        env = go_env(versions)
        out = subprocess.run(
            ["go", "mod", "download", "-json", f"{comp.module}@{versions[comp.version_key]}"],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        print(json.loads(out)["Dir"])
        return 0
    unknown = [n for n in args.names if n not in known]
    if unknown:
        parser.error(f"unknown component(s) {', '.join(unknown)}; known: {', '.join(known)}")
    if shutil.which("go") is None:
        print(
            f"toolchain: `go` is not on PATH; install Go {'.'.join(map(str, GO_SWITCHING))} or newer (it fetches go"
            f"{versions['go_version']} itself; `python3 hack/prereqs.py` says where to get it)",
            file=sys.stderr,
        )
        return 1
    started = time.monotonic()
    chosen = at_kubernetes(versions, args.kubernetes or "newest")
    for name in args.names:
        build(known[name], chosen, link=chosen == versions or not known[name].kubernetes)
    print(f"toolchain: {len(args.names)} component(s) ready in {time.monotonic() - started:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
