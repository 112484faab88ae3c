#!/usr/bin/env python3
"""A one-node Kubernetes on a lent GPU machine that has no container runtime: what travels there, and bringing it up.

The lent machine (issue 39, docs/gpu-node.md) is root on Ubuntu 24.04 with the NVIDIA driver, python3.12 and nothing
else of ours: no container runtime, no iptables, no network out, and at most 64 MiB of this tree carried per call.
So everything it needs is built here, compressed, and carried in a git-ignored folder; there it is unpacked and run
as plain processes: etcd, kube-apiserver, containerd 2 with runc and a bridge CNI, a kubelet, then gpu-scheduler,
gpu-webhook (--isolated-gpus with NVML) and gpu-device-plugin from src/. No kube-controller-manager, kube-proxy or
DNS runs.

Usage:
    .venv/bin/python hack/gpu-node.py prepare [--python-version 3.12] [--out build/gpu-node]   # here
    .venv/bin/python hack/gpu-node.py prepare --split     # for two calls: the Kubernetes archive in build/gpu-node-1
    python3 hack/gpu-node.py up [--source nvml|simulated] [--bundle build/gpu-node]            # there, as root
    python3 hack/gpu-node.py down [--purge]                                                     # there, as root

`prepare` needs the project's venv (cryptography for the certificates, PyYAML and helm for the chart's objects);
`up` and `down` need only the standard library of the machine's python3 (the programs get the carried wheels).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import dataclasses
import hashlib
import http.server
import io
import itertools
import json
import lzma
import os
import pathlib
import shutil
import signal
import ssl
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import urllib.error
import urllib.request
import zipfile
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_BUNDLE = ROOT / "build" / "gpu-node"
#: What one call to the lent machine carries at most, the tracked tree included (its `run` tool's limit).
BUDGET_MIB = 64
NODE = "gpu-node"
#: Where `up` keeps what it unpacks and writes (logs, configs, etcd, containerd's images), and its runtime sockets.
STATE_DIR = pathlib.Path("/var/lib/gpu-node")
RUN_DIR = pathlib.Path("/run/gpu-node")
#: The sandbox image under containerd 2.4's default name for it (and kubeadm 1.37's PauseVersion), so that nothing
#: ever asks registry.k8s.io for another.
PAUSE_IMAGE = "registry.k8s.io/pause:3.10.2"
#: The pods' image: Debian's busybox-static, one file and its applets' links.
POD_IMAGE = "gpu-node.local/busybox:1"
REGISTRY_PORT = 5000
WEBHOOK_PORT = 9443
API_PORT = 6443
SCHEDULER_HEALTH_PORT = 18081
PLUGIN_HEALTH_PORT = 18082
POD_SUBNET = "10.244.0.0/24"
SERVICE_RANGE = "10.96.0.0/16"
#: The Go programs that travel, by toolchain component; the CNI plugins are installed under their plugin names.
KUBERNETES_PROGRAMS = ("etcd", "kube-apiserver", "kubelet")
RUNTIME_PROGRAMS = ("containerd", "containerd-shim-runc-v2", "runc")
CNI_PROGRAMS = ("cni-bridge", "cni-host-local", "cni-loopback")


def wheel_requirements() -> list[str]:
    """The programs' Python dependencies that a bare python3.12 lacks: pyproject.toml's, with the nvml extra (the one
    source of them; the machine gets their wheels)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [*project["dependencies"], *project["optional-dependencies"]["nvml"]]


#: The applets the pod image links to busybox (what the checks' shell lines use).
BUSYBOX_APPLETS = ("sh", "ls", "cat", "env", "echo", "sleep", "true", "printenv", "grep", "head", "wc", "ps", "mount")


def log(message: str) -> None:
    print(f"gpu-node: {message}", flush=True)


# ---- prepare (here) --------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Group:
    """Files compressed together as one solid .tar.xz: programs that share much of their code (the Kubernetes ones
    share client-go and the API types) compress to less together than apart, when the window holds them both."""

    name: str
    files: dict[str, pathlib.Path]  # name in the archive -> source
    dict_mib: int = 64  # xz's window: -9's 64 MiB, or more to reach across programs

    def stamp(self) -> str:
        """What the archive was made from: a new build of any input makes it again."""
        parts = [f"{n}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for n, p in sorted(self.files.items())]
        return hashlib.sha256("\n".join([*parts, str(self.dict_mib)]).encode()).hexdigest()


def xz_filters(dict_mib: int) -> list[dict[str, Any]]:
    """xz -9e with the x86 branch filter (about 5% less for Go programs, measured) and the given window."""
    return [
        {"id": lzma.FILTER_X86},
        {"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME, "dict_size": dict_mib << 20},
    ]


def write_group(group: Group, out: pathlib.Path) -> pathlib.Path:
    """`out`/<name>.tar.xz of the group's files, made again only when an input changed."""
    target = out / f"{group.name}.tar.xz"
    stamp = out / f".{group.name}.stamp"
    if target.exists() and stamp.exists() and stamp.read_text() == group.stamp():
        log(f"{target.name}: up to date ({target.stat().st_size / 2**20:.1f} MiB)")
        return target
    started = time.monotonic()
    partial = target.with_suffix(".partial")
    with (
        lzma.open(partial, "wb", format=lzma.FORMAT_XZ, filters=xz_filters(group.dict_mib)) as xz,
        tarfile.open(fileobj=xz, mode="w") as tar,
    ):
        for name, path in sorted(group.files.items()):
            tar.add(path, arcname=name)
    partial.rename(target)
    stamp.write_text(group.stamp())
    log(f"{target.name}: {target.stat().st_size / 2**20:.1f} MiB in {time.monotonic() - started:.0f}s")
    return target


def built(names: tuple[str, ...]) -> dict[str, pathlib.Path]:
    """The toolchain's builds of `names` (built now when missing, cached by version)."""
    from hack import toolchain

    versions = toolchain.read_versions()
    known = toolchain.components()
    return {name: toolchain.build(known[name], versions, link=False) for name in names}


def oci_layout(folder: pathlib.Path, name: str, files: dict[str, bytes | str], config: dict[str, Any]) -> None:
    """An OCI image layout of one uncompressed layer in `folder`: regular files (bytes, mode 0755) and symbolic
    links (str targets), tagged `name` (what gpu-node.py's registry serves and containerd pulls)."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, content in sorted(files.items()):
            info = tarfile.TarInfo(path)
            info.mtime = 0
            if isinstance(content, str):
                info.type, info.linkname = tarfile.SYMTYPE, content
                tar.addfile(info)
            else:
                info.size, info.mode = len(content), 0o755
                tar.addfile(info, io.BytesIO(content))
    blobs = folder / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)

    def blob(data: bytes, media_type: str) -> dict[str, Any]:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}

    layer_bytes = layer.getvalue()
    diff_id = f"sha256:{hashlib.sha256(layer_bytes).hexdigest()}"
    image_config = {
        "architecture": "amd64",
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": blob(json.dumps(image_config).encode(), "application/vnd.oci.image.config.v1+json"),
        "layers": [blob(layer_bytes, "application/vnd.oci.image.layer.v1.tar")],
    }
    entry = blob(json.dumps(manifest).encode(), "application/vnd.oci.image.manifest.v1+json")
    entry["annotations"] = {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name}
    entry["platform"] = {"architecture": "amd64", "os": "linux"}
    (folder / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    (folder / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [entry]}))


def pause_binary(work: pathlib.Path) -> bytes:
    """Kubernetes' pause, compiled from its source as images/kind-node/build.sh does (static, stripped)."""
    from hack import toolchain

    listed = subprocess.run(
        [sys.executable, str(ROOT / "hack/toolchain.py"), "source", "kube-apiserver"],
        capture_output=True,
        text=True,
        check=True,
    )
    source = pathlib.Path(listed.stdout.strip()) / "build/pause/linux/pause.c"
    out = work / "pause"
    version = toolchain.read_versions()["kubernetes_version"]
    subprocess.run(
        ["gcc", "-Os", "-Wall", "-Werror", "-static", f'-DVERSION="{version}-gpu-node"', "-o", str(out), str(source)],
        check=True,
    )
    subprocess.run(["strip", str(out)], check=True)
    return out.read_bytes()


def busybox_binary(work: pathlib.Path) -> bytes:
    """Debian's busybox-static (the release in this machine's apt sources), downloaded and unpacked, not installed."""
    subprocess.run(["apt-get", "download", "busybox-static"], cwd=work, check=True, capture_output=True)
    (deb,) = work.glob("busybox-static_*.deb")
    subprocess.run(["dpkg-deb", "--extract", str(deb), str(work / "busybox")], check=True)
    return (work / "busybox/bin/busybox").read_bytes()


def images(out: pathlib.Path) -> dict[str, pathlib.Path]:
    """The pause and pod images as OCI layouts under `out`/images/<repository>."""
    folder = out / "images"
    shutil.rmtree(folder, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="gpu-node-") as tmp:
        work = pathlib.Path(tmp)
        oci_layout(
            folder / "pause",
            PAUSE_IMAGE,
            {"pause": pause_binary(work)},
            {"Entrypoint": ["/pause"], "User": "65535:65535"},
        )
        applets: dict[str, bytes | str] = {f"bin/{a}": "busybox" for a in BUSYBOX_APPLETS}
        oci_layout(
            folder / "busybox",
            POD_IMAGE,
            {"bin/busybox": busybox_binary(work), **applets},
            {"Cmd": ["sh"], "Env": ["PATH=/bin"]},
        )
    return {f"images/{p.relative_to(folder)}": p for p in sorted(folder.rglob("*")) if p.is_file()}


def wheels(python_version: str) -> dict[str, pathlib.Path]:
    """The programs' dependencies as the lent machine's python takes them (cp<version>, manylinux x86_64), from the
    package index, unpacked (what installing a wheel without scripts amounts to) for the archive `python`: xz of the
    unpacked files is 8.0 MiB where the wheels' own zip is 11.6 MiB. Downloaded and unpacked beside the bundle, in
    build/gpu-node-wheels-<version>/, so that only the archive travels."""
    folder = ROOT / "build" / f"gpu-node-wheels-{python_version}"
    folder.mkdir(parents=True, exist_ok=True)
    abi = "cp" + python_version.replace(".", "")
    platforms = ["manylinux2014_x86_64", *(f"manylinux_2_{m}_x86_64" for m in (17, 28, 34, 39))]
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--python-version",
         python_version, "--implementation", "cp", "--abi", abi, *(a for p in platforms for a in ("--platform", p)),
         "--dest", str(folder), *wheel_requirements()],
        check=True,
    )  # fmt: skip
    found = sorted(folder.glob("*.whl"))
    unpacked, marker = folder / "unpacked", folder / "unpacked.list"
    if not marker.exists() or marker.read_text() != "\n".join(w.name for w in found):
        shutil.rmtree(unpacked, ignore_errors=True)
        for wheel in found:
            with zipfile.ZipFile(wheel) as whl:
                whl.extractall(unpacked)
        marker.write_text("\n".join(w.name for w in found))
    return {f"python/{p.relative_to(unpacked)}": p for p in sorted(unpacked.rglob("*")) if p.is_file()}


def pki(out: pathlib.Path) -> None:
    """The cluster's certificates and keys (1 day, harness/pki.py's), the service-account keys and the kubeconfigs:
    made here, where `cryptography` is, for a throwaway cluster whose names are fixed (node gpu-node, 127.0.0.1)."""
    from harness import controlplane
    from harness import pki as harness_pki

    folder = out / "pki"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    ca = harness_pki.CA(folder, "cluster")
    ca.issue(
        "apiserver",
        "kube-apiserver",
        server=True,
        dns=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
        ips=("127.0.0.1", "10.96.0.1"),
    )
    ca.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", org="system:masters", client=True)
    admin = ca.issue("admin", "admin", org="system:masters", client=True)
    kubelet = ca.issue("kubelet", f"system:node:{NODE}", org="system:nodes", client=True)
    ca.issue("webhook", "gpu-webhook", server=True, dns=("localhost",), ips=("127.0.0.1",))
    harness_pki.service_account_keys(folder)
    server = f"https://127.0.0.1:{API_PORT}"
    for name, pair in (("admin", admin), ("kubelet", kubelet)):
        (folder / f"{name}.kubeconfig").write_text(controlplane.kubeconfig(server, ca.pem, pair, user=name))


def api_objects(out: pathlib.Path) -> None:
    """The chart's CRDs and its MutatingWebhookConfiguration for a webhook on 127.0.0.1:WEBHOOK_PORT, rendered here
    (helm and PyYAML), for `up` to apply as they are."""
    from gpu_scheduling import constants
    from harness import manifests

    ca = (out / "pki" / "cluster-ca.crt").read_bytes()
    webhook = manifests.webhook_configuration(
        url=f"https://127.0.0.1:{WEBHOOK_PORT}/mutate",
        service=None,
        ca_bundle_b64=base64.b64encode(ca).decode(),
        scheduler_name=constants.DEFAULT_SCHEDULER_NAME,
    )
    document = {"namespace": constants.LEASE_NAMESPACE, "crds": manifests.crds(), "webhook": webhook}
    (out / "objects.json").write_text(json.dumps(document, indent=1))


def tracked_tree_bytes() -> int:
    """What every call carries besides the bundle: the tracked files and the untracked ones git does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    )
    paths = {ROOT / n.decode() for n in listed.stdout.split(b"\0") if n}
    return sum(p.stat().st_size for p in paths if p.is_file() and not p.is_symlink())


def prepare(args: argparse.Namespace) -> int:
    out = pathlib.Path(args.out).absolute()
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    stubs = ROOT / "src/gpu_scheduling/kubeletapi"
    if not (stubs / "__init__.py").exists():
        raise SystemExit(f"gpu-node: {stubs} is missing: generate it with `make venv` (hack/protos.py)")
    cni = {f"cni/{name.removeprefix('cni-')}": path for name, path in built(CNI_PROGRAMS).items()}
    groups = [
        Group("kubernetes", {f"bin/{n}": p for n, p in built(KUBERNETES_PROGRAMS).items()}, dict_mib=args.dict_mib),
        Group("runtime", {**{f"bin/{n}": p for n, p in built(RUNTIME_PROGRAMS).items()}, **cni}, dict_mib=64),
        Group("images", images(out / "work"), dict_mib=64),
        Group("kubeletapi", {str(p.relative_to(ROOT / "src")): p for p in stubs.rglob("*") if p.is_file()}),
        Group("python", wheels(args.python_version)),
    ]
    first = staged(out)
    for group in groups:
        # --split: the Kubernetes archive in <out>-1, carried by a first call (the rest by a second); an archive
        # already made moves between the two folders rather than being made again.
        here, there = (first, out) if args.split and group.name == "kubernetes" else (out, first)
        here.mkdir(parents=True, exist_ok=True)
        for name in (f"{group.name}.tar.xz", f".{group.name}.stamp"):
            if (there / name).exists():
                (there / name).replace(here / name)
        write_group(group, here)
    shutil.rmtree(out / "work", ignore_errors=True)
    shutil.rmtree(out / "wheels", ignore_errors=True)  # an earlier layout's
    pki(out)
    api_objects(out)
    (out / "bundle.json").write_text(
        json.dumps(
            {"python_version": args.python_version, "prepared": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        )
    )
    if not any(first.iterdir()):
        first.rmdir()
    seconds = time.monotonic() - started
    tree = tracked_tree_bytes()
    over = [folder for folder in (first, out) if folder.exists() and not report(folder, tree, args.budget_mib)]
    print(f"gpu-node: prepared in {seconds:.0f}s" + (f"; carry {first} in a first call" if first.exists() else ""))
    return 1 if over else 0


def staged(out: pathlib.Path) -> pathlib.Path:
    """The folder a first call carries when the bundle is split (`prepare --split`): <out>-1, beside it."""
    return out.with_name(f"{out.name}-1")


def report(folder: pathlib.Path, tree: int, budget_mib: int) -> bool:
    """One call's files and sizes; whether they fit with the tree beside them."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    for path in files:
        if path.stat().st_size >= 1 << 20:
            print(f"  {path.stat().st_size / 2**20:7.1f} MiB  {path.relative_to(folder)}")
    bundle = sum(p.stat().st_size for p in files)
    total = bundle + tree
    print(
        f"gpu-node: {folder} {bundle / 2**20:.1f} MiB in {len(files)} files + the tree {tree / 2**20:.1f} MiB "
        f"= {total / 2**20:.1f} MiB of {budget_mib} MiB"
    )
    if total > budget_mib << 20:
        excess = (total - (budget_mib << 20)) / 2**20
        print(f"gpu-node: {folder.name} is over one call's budget by {excess:.1f} MiB (--split?)", file=sys.stderr)
        return False
    return True


# ---- up (there) ------------------------------------------------------------------------------------------------------


class Api:
    """The few requests `up` makes of the apiserver, with the admin certificate (standard library only)."""

    def __init__(self, pki_dir: pathlib.Path):
        self.context = ssl.create_default_context(cafile=str(pki_dir / "cluster-ca.crt"))
        self.context.load_cert_chain(str(pki_dir / "admin.crt"), str(pki_dir / "admin.key"))
        self.base = f"https://127.0.0.1:{API_PORT}"

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Content-Type", content_type)
        with urllib.request.urlopen(req, context=self.context, timeout=10) as resp:
            raw = resp.read()
        return json.loads(raw) if raw[:1] == b"{" else raw.decode()

    def get(self, path: str) -> Any:
        try:
            return self.request("GET", path)
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise

    def create(self, path: str, body: dict[str, Any]) -> None:
        """POST, an existing object left as it is (`up` after `up`)."""
        try:
            self.request("POST", path, body)
        except urllib.error.HTTPError as e:
            if e.code != 409:
                raise RuntimeError(f"POST {path}: {e.code} {e.read().decode()[:500]}") from e


def wait(what: str, check: Any, timeout: float, procs: dict[str, subprocess.Popen[bytes]] | None = None) -> Any:
    """Poll `check` until it returns something true; fail naming `what`, or the started program that exited."""
    deadline = time.monotonic() + timeout
    while True:
        for name, proc in (procs or {}).items():
            if proc.poll() is not None:
                raise SystemExit(f"gpu-node: {name} exited ({proc.returncode}) while waiting for {what}: see its log")
        try:
            result = check()
        except (OSError, urllib.error.URLError, ValueError, RuntimeError):
            result = None
        if result:
            return result
        if time.monotonic() > deadline:
            raise SystemExit(f"gpu-node: {what}: not within {timeout:.0f}s")
        time.sleep(0.5)


def unpack(bundle: pathlib.Path, state: pathlib.Path) -> None:
    """The carried archives into `state` (the programs' dependencies land in state/python), and a copy of src/
    with its kubelet stubs in state/site."""
    for archive in sorted([*bundle.glob("*.tar.xz"), *staged(bundle).glob("*.tar.xz")]):
        with tarfile.open(archive, "r:xz") as tar:
            # The "tar" filter where this python has it (3.11.4 and newer): the archives are our own.
            if hasattr(tarfile, "tar_filter"):
                tar.extractall(state, filter="tar")
            else:
                tar.extractall(state)
    site = state / "site"
    shutil.rmtree(site, ignore_errors=True)
    shutil.copytree(ROOT / "src", site, ignore=shutil.ignore_patterns("__pycache__", "kubeletapi", "*.egg-info"))
    shutil.copytree(state / "gpu_scheduling/kubeletapi", site / "gpu_scheduling/kubeletapi")
    for path in [*(state / "bin").iterdir(), *(state / "cni").iterdir()]:
        path.chmod(0o755)
    shutil.copytree(bundle / "pki", state / "pki", dirs_exist_ok=True)


def cgroup_v2() -> bool:
    return (pathlib.Path("/sys/fs/cgroup") / "cgroup.controllers").exists()


def prepare_cgroups() -> str:
    """On cgroup v2 the kubelet needs the controllers enabled below the root it sees. Where that root holds
    processes (a container's namespace: the no-internal-processes rule), they move to /init first, as kind does."""
    root = pathlib.Path("/sys/fs/cgroup")
    if not cgroup_v2():
        return "cgroup v1 (the kubelet is told failCgroupV1: false)"
    controllers = (root / "cgroup.controllers").read_text().split()

    def enable() -> list[str]:
        failed = []
        for c in controllers:
            try:
                (root / "cgroup.subtree_control").write_text(f"+{c}")
            except OSError:
                failed.append(c)
        return failed

    failed = enable()
    if failed:
        init = root / "init"
        init.mkdir(exist_ok=True)
        for pid in (root / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):  # a kernel thread, or gone
                (init / "cgroup.procs").write_text(pid)
        failed = enable()
    enabled = (root / "cgroup.subtree_control").read_text().split()
    return f"cgroup v2, controllers {' '.join(enabled)}" + (f" (not {' '.join(failed)})" if failed else "")


def node_ip() -> str:
    """The machine's first IPv4 address that is not loopback (the kubelet refuses loopback as the node's IP; with no
    default route it cannot choose one itself), from the kernel's own table."""
    lines = pathlib.Path("/proc/net/fib_trie").read_text().splitlines()
    for previous, line in itertools.pairwise(lines):
        if "/32 host LOCAL" in line:
            address = previous.split()[-1]
            if not address.startswith("127."):
                return address
    raise SystemExit("gpu-node: the machine has no IPv4 address but loopback; the kubelet needs one for the node")


def write_configs(state: pathlib.Path) -> None:
    """containerd's, the CNI network's, the registry mirrors' and the kubelet's configuration files."""
    (state / "containerd.toml").write_text(f"""version = 3
root = "{state}/containerd"
state = "{RUN_DIR}/containerd"
[grpc]
  address = "{RUN_DIR}/containerd.sock"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "native"
  use_local_image_pull = true
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{PAUSE_IMAGE}"
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "{state}/certs.d"
[plugins.'io.containerd.cri.v1.runtime']
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
  # Never below containerd's own: lowering oom_score_adj needs CAP_SYS_RESOURCE, which a machine (or the container
  # `up` is tried in) may not grant; runc then fails every sandbox (images/kind-node/base.Dockerfile does the same).
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["{state}/cni"]
    conf_dir = "{state}/net.d"
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "{state}/bin/runc"
        Root = "{RUN_DIR}/runc"
        SystemdCgroup = false
""")
    for host in ("registry.k8s.io", POD_IMAGE.split("/")[0]):
        folder = state / "certs.d" / host
        folder.mkdir(parents=True, exist_ok=True)
        mirror = f"http://127.0.0.1:{REGISTRY_PORT}"
        (folder / "hosts.toml").write_text(
            f'server = "{mirror}"\n[host."{mirror}"]\n  capabilities = ["pull", "resolve"]\n'
        )
    (state / "net.d").mkdir(exist_ok=True)
    network = {
        "cniVersion": "1.0.0",
        "name": NODE,
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": False,  # no iptables or nft on the lent machine, and nothing outside to reach
                "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_SUBNET}]], "routes": [{"dst": "0.0.0.0/0"}]},
            },
        ],
    }
    (state / "net.d" / "10-gpu-node.conflist").write_text(json.dumps(network, indent=1))
    pki = state / "pki"
    kubelet = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # cgroupfs: the lent machine may have no systemd managing cgroups, and a container never does.
        "cgroupDriver": "cgroupfs",
        # 1.35 and newer refuse cgroup v1 unless told (the machines this is built on run v1; the lent one v2).
        "failCgroupV1": cgroup_v2(),
        "containerRuntimeEndpoint": f"unix://{RUN_DIR}/containerd.sock",
        "failSwapOn": False,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(pki / "cluster-ca.crt")},
        },
        "authorization": {"mode": "Webhook"},
        # Little disk or memory left must not evict the check's pods (the test machine's disk is shared).
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "resolvConf": "/etc/resolv.conf",
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
    }
    (state / "kubelet.yaml").write_text(json.dumps(kubelet, indent=1))


@dataclasses.dataclass
class Started:
    """A background program `up` started: its name, pid and log (kept in state/pids.json for `down`)."""

    name: str
    pid: int
    log: str


def start(
    name: str, argv: list[str], state: pathlib.Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """A program in its own session, so that it outlives `up`; its output in state/logs/<name>.log."""
    logs = state / "logs"
    logs.mkdir(exist_ok=True)
    with (logs / f"{name}.log").open("ab") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, env=env
        )
    pids = state / "pids.json"
    known = json.loads(pids.read_text()) if pids.exists() else []
    known.append(dataclasses.asdict(Started(name, proc.pid, str(logs / f"{name}.log"))))
    pids.write_text(json.dumps(known, indent=1))
    return proc


def http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    with urllib.request.urlopen(url, context=context, timeout=3) as resp:
        return bool(resp.status == 200)


def node_ready(api: Api) -> bool:
    node = api.get(f"/api/v1/nodes/{NODE}")
    conditions = (node or {}).get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def up(args: argparse.Namespace) -> int:
    t0 = time.monotonic()
    bundle, state = pathlib.Path(args.bundle).absolute(), pathlib.Path(args.state).absolute()
    if os.geteuid() != 0:
        raise SystemExit("gpu-node: `up` runs as root (cgroups, mounts, the kubelet)")
    if (state / "pids.json").exists():
        raise SystemExit(f"gpu-node: {state}/pids.json exists: `down` first")
    made = json.loads((bundle / "bundle.json").read_text())
    age = time.time() - time.mktime(time.strptime(made["prepared"], "%Y-%m-%dT%H:%M:%SZ")) + time.timezone
    if age > 20 * 3600:
        raise SystemExit(f"gpu-node: the bundle was prepared {age / 3600:.0f} h ago; its certificates last 24 h")
    if not args.python and made["python_version"] != "{}.{}".format(*sys.version_info[:2]):
        log(f"the bundle's wheels are for Python {made['python_version']}, this is {sys.version.split()[0]}")
    state.mkdir(parents=True, exist_ok=True)
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    unpack(bundle, state)
    log(f"unpacked {bundle} into {state} in {time.monotonic() - t0:.1f}s")
    log(prepare_cgroups())
    # The kubelet's volume mounts must propagate into containers (what a systemd host has, and a container lacks).
    subprocess.run(["mount", "--make-rshared", "/"], check=False)
    # The kubelet's OOM watcher reads /dev/kmsg and stops the kubelet without it: a container may lack it (kind
    # links the console there too).
    kmsg = pathlib.Path("/dev/kmsg")
    if not kmsg.exists():
        kmsg.symlink_to("/dev/console")
    write_configs(state)
    pki, binary = state / "pki", state / "bin"
    procs: dict[str, subprocess.Popen[bytes]] = {}
    python = args.python or sys.executable
    procs["registry"] = start(
        "registry", [python, str(pathlib.Path(__file__).absolute()), "registry", str(state / "images")], state
    )
    procs["etcd"] = start(
        "etcd",
        [
            str(binary / "etcd"),
            f"--data-dir={state}/etcd",
            "--listen-client-urls=http://127.0.0.1:2379",
            "--advertise-client-urls=http://127.0.0.1:2379",
            "--listen-peer-urls=http://127.0.0.1:2380",
            "--unsafe-no-fsync",
            "--log-level=warn",
        ],
        state,
    )
    wait("etcd healthy", lambda: http_ok("http://127.0.0.1:2379/health"), 60, procs)
    procs["kube-apiserver"] = start(
        "kube-apiserver",
        [
            str(binary / "kube-apiserver"),
            "--etcd-servers=http://127.0.0.1:2379",
            "--bind-address=127.0.0.1",
            f"--secure-port={API_PORT}",
            "--advertise-address=127.0.0.1",
            "--endpoint-reconciler-type=none",
            f"--tls-cert-file={pki}/apiserver.crt",
            f"--tls-private-key-file={pki}/apiserver.key",
            f"--client-ca-file={pki}/cluster-ca.crt",
            f"--kubelet-client-certificate={pki}/apiserver-kubelet-client.crt",
            f"--kubelet-client-key={pki}/apiserver-kubelet-client.key",
            "--kubelet-preferred-address-types=InternalIP",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki}/sa.pub",
            f"--service-account-signing-key-file={pki}/sa.key",
            f"--service-cluster-ip-range={SERVICE_RANGE}",
            "--authorization-mode=Node,RBAC",
            "--allow-privileged=true",
            # No kube-controller-manager runs: nothing would make the ServiceAccounts the ServiceAccount plugin
            # waits for, or lift the not-ready taint TaintNodesByCondition puts on a new node. So neither plugin
            # runs; pods get no service-account token (the checks' pods never call the API).
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
            f"--cert-dir={state}/apiserver-certs",
            "--profiling=false",
        ],
        state,
    )
    api = Api(pki)
    wait("kube-apiserver ready", lambda: api.request("GET", "/readyz") == "ok", 120, procs)
    log(f"kube-apiserver ready at {time.monotonic() - t0:.1f}s")
    env = dict(os.environ, PATH=f"{binary}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    procs["containerd"] = start(
        "containerd", [str(binary / "containerd"), f"--config={state}/containerd.toml"], state, env
    )
    wait("containerd's socket", lambda: (RUN_DIR / "containerd.sock").exists(), 60, procs)
    procs["kubelet"] = start(
        "kubelet",
        [
            str(binary / "kubelet"),
            f"--config={state}/kubelet.yaml",
            f"--kubeconfig={pki}/kubelet.kubeconfig",
            f"--hostname-override={NODE}",
            f"--node-ip={node_ip()}",
            "--v=2",
        ],
        state,
        env,
    )
    wait(f"node {NODE} Ready", lambda: node_ready(api), args.timeout, procs)
    ready = time.monotonic() - t0
    log(f"node {NODE} Ready {ready:.1f}s after `up` started")
    start_programs(args, state, api, procs, python)
    summary = {"node_ready_s": round(ready, 1), **checks(api, procs, args.timeout)}
    summary["total_s"] = round(time.monotonic() - t0, 1)
    (state / "up.json").write_text(json.dumps(summary))
    log(f"up: {json.dumps(summary)}; logs in {state}/logs, admin kubeconfig {pki}/admin.kubeconfig")
    return 0


def start_programs(
    args: argparse.Namespace, state: pathlib.Path, api: Api, procs: dict[str, subprocess.Popen[bytes]], python: str
) -> None:
    """The chart's namespace and CRDs, then gpu-webhook (registered by URL), gpu-scheduler and gpu-device-plugin as
    processes with the admin kubeconfig (the chart's RBAC is not what this checks)."""
    objects = json.loads((pathlib.Path(args.bundle) / "objects.json").read_text())
    api.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": objects["namespace"]}}
    )
    for crd in objects["crds"]:
        api.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    for crd in objects["crds"]:
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}"
        wait(
            f"CRD {crd['metadata']['name']} Established",
            lambda p=path: any(
                c["type"] == "Established" and c["status"] == "True"
                for c in (api.get(p) or {}).get("status", {}).get("conditions") or []
            ),
            60,
        )
    pki = state / "pki"
    kubeconfig = f"--kubeconfig={pki}/admin.kubeconfig"
    env = dict(os.environ, PYTHONPATH=f"{state / 'site'}:{state / 'python'}")
    # NVML's library where the lent machine's driver is (/usr/local/nvidia, not in the loader's default paths).
    libraries = [
        str(d) for d in (pathlib.Path("/usr/local/nvidia/lib64"), pathlib.Path("/usr/local/nvidia/lib")) if d.is_dir()
    ]
    if libraries:
        env["LD_LIBRARY_PATH"] = ":".join([*libraries, *filter(None, [os.environ.get("LD_LIBRARY_PATH")])])

    # As the chart decides (gpu-scheduler.isolatedGpus): with NVML, NVIDIA's runtime shows a container only its own
    # GPUs, numbered from 0, and the webhook and the scheduler must both say so.
    isolated = ["--isolated-gpus"] if args.source == "nvml" else []

    def program(module: str, name: str, flags: list[str]) -> None:
        code = f"import sys; from {module} import main; sys.argv[0] = {name!r}; sys.exit(main())"
        procs[name] = start(name, [python, "-c", code, *flags], state, env)

    program(
        "gpu_scheduling.webhook.main",
        "gpu-webhook",
        [
            "--host=127.0.0.1",
            f"--port={WEBHOOK_PORT}",
            f"--tls-cert-file={pki}/webhook.crt",
            f"--tls-private-key-file={pki}/webhook.key",
            "--gpu-resource=gpu.scheduling/gpu",
            *isolated,
        ],
    )
    context = ssl.create_default_context(cafile=str(pki / "cluster-ca.crt"))
    wait("gpu-webhook ready", lambda: http_ok(f"https://127.0.0.1:{WEBHOOK_PORT}/readyz", context), 60, procs)
    api.create("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", objects["webhook"])
    program(
        "gpu_scheduling.scheduler.main",
        "gpu-scheduler",
        [
            kubeconfig,
            "--no-leader-elect",
            "--health-host=127.0.0.1",
            f"--health-port={SCHEDULER_HEALTH_PORT}",
            *isolated,
        ],
    )
    wait("gpu-scheduler ready", lambda: http_ok(f"http://127.0.0.1:{SCHEDULER_HEALTH_PORT}/readyz"), 60, procs)
    program(
        "gpu_scheduling.agent.deviceplugin",
        "gpu-device-plugin",
        [
            kubeconfig,
            f"--node-name={NODE}",
            f"--source={args.source}",
            f"--files-dir={state}/devices",
            # The pods' busybox has no glibc: the driver's loader comes with its programs (nvidia-smi in a pod).
            *(["--cdi-glibc"] if args.source == "nvml" else []),
            "--health-host=127.0.0.1",
            f"--health-port={PLUGIN_HEALTH_PORT}",
        ],
    )

    def advertised() -> bool:
        node = api.get(f"/api/v1/nodes/{NODE}") or {}
        return int(node.get("status", {}).get("allocatable", {}).get("gpu.scheduling/gpu", "0")) > 0

    wait("the node's allocatable gpu.scheduling/gpu", advertised, 120, procs)
    log("gpu-webhook, gpu-scheduler and gpu-device-plugin run; the node advertises gpu.scheduling/gpu")


def run_pod(
    api: Api, procs: dict[str, subprocess.Popen[bytes]], timeout: float, name: str, script: str, **extra: Any
) -> tuple[float, str, dict[str, Any]]:
    """A pod of the busybox image running `script` to its end: the seconds from its creation to Succeeded, its log
    and the pod as the apiserver keeps it. `extra`: more of its metadata (labels, annotations) and spec."""
    started = time.monotonic()
    metadata = {"name": name, "namespace": "default", **extra.pop("metadata", {})}
    spec = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "containers": [{"name": "c", "image": POD_IMAGE, "command": ["sh", "-c", script]}],
        **extra,
    }
    api.create(
        "/api/v1/namespaces/default/pods", {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    )
    path = f"/api/v1/namespaces/default/pods/{name}"

    def done() -> str | None:
        phase = (api.get(path) or {}).get("status", {}).get("phase")
        if phase == "Failed":
            raise SystemExit(f"gpu-node: pod {name} failed: {json.dumps(api.get(path)['status'])[:1000]}")
        return phase if phase == "Succeeded" else None

    wait(f"pod {name} Succeeded", done, timeout, procs)
    seconds = time.monotonic() - started
    output = api.request("GET", path + "/log").strip()
    log(f"pod {name} Succeeded in {seconds:.1f}s; its log: {output!r}")
    return seconds, output, api.get(path)


def checks(api: Api, procs: dict[str, subprocess.Popen[bytes]], timeout: float) -> dict[str, Any]:
    """A pod without GPUs bound by name (the runtime, the CNI, pulls from the registry), then a map pod of GPU 0
    through gpu-webhook, gpu-scheduler and gpu-device-plugin: what the container is given and sees."""
    stamp = int(time.time())
    plain, _, _ = run_pod(api, procs, timeout, f"plain-{stamp}", "echo plain ok; ls /dev", nodeName=NODE)
    script = (
        "echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES; env | grep -i -e nvidia -e gpu; ls /dev; "
        "nvidia-smi -L 2>&1; true"
    )
    gpu, output, pod = run_pod(
        api,
        procs,
        timeout,
        f"gpu-{stamp}",
        script,
        metadata={
            "labels": {"apps.kubernetes.io/pod-index": "0"},
            "annotations": {"gpu-scheduling-map": f"0={NODE}:0"},
        },
        schedulerName="gpu-scheduler",
    )
    container = pod["spec"]["containers"][0]
    return {
        "plain_pod_s": round(plain, 1),
        "gpu_pod_s": round(gpu, 1),
        "gpu_pod_env": container.get("env"),
        "gpu_pod_resources": container.get("resources"),
        "gpu_pod_log": output.splitlines(),
    }


# ---- the registry (there, a background process of `up`) -------------------------------------------------------------


def registry(args: argparse.Namespace) -> int:
    """A read-only OCI distribution endpoint over the carried image layouts: containerd pulls the pause and pod
    images from it as from any registry (no ctr needs to travel to import them)."""
    root = pathlib.Path(args.images)
    tags: dict[tuple[str, str], str] = {}
    media: dict[str, str] = {}
    for layout in root.iterdir():
        for entry in json.loads((layout / "index.json").read_text())["manifests"]:
            repository, tag = entry["annotations"]["io.containerd.image.name"].split("/", 1)[1].rsplit(":", 1)
            tags[(repository, tag)] = entry["digest"]
            media[entry["digest"]] = entry["mediaType"]
    blobs = {p.name: p for p in root.glob("*/blobs/sha256/*")}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:
            self.answer(body=False)

        def do_GET(self) -> None:
            self.answer(body=True)

        def answer(self, body: bool) -> None:
            parts = self.path.split("?")[0].strip("/").split("/")
            if parts == ["v2"]:
                return self.send(b"{}", "application/json", None, body)
            if len(parts) >= 4 and parts[0] == "v2" and parts[-2] in ("manifests", "blobs"):
                repository, kind, reference = "/".join(parts[1:-2]), parts[-2], parts[-1]
                digest = tags.get((repository, reference), reference) if kind == "manifests" else reference
                path = blobs.get(digest.removeprefix("sha256:"))
                if path is not None:
                    content_type = media.get(digest, "application/octet-stream")
                    return self.send(path.read_bytes(), content_type, digest, body)
            self.send_error(404)
            return None

        def send(self, data: bytes, content_type: str, digest: str | None, body: bool) -> None:
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            if digest:
                self.send_header("Docker-Content-Digest", digest)
            self.end_headers()
            if body:
                self.wfile.write(data)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"registry: {len(tags)} images on 127.0.0.1:{args.port}: {sorted(tags)}", flush=True)
    server.serve_forever()
    return 0


# ---- down (there) ----------------------------------------------------------------------------------------------------


def down(args: argparse.Namespace) -> int:
    """Stop what `up` started, newest first; then the pods' shims and containers, and the mounts they left."""
    state = pathlib.Path(args.state).absolute()
    pids = state / "pids.json"
    started = [Started(**s) for s in json.loads(pids.read_text())] if pids.exists() else []
    for program in reversed(started):
        stop_pid(program.pid, program.name)
    shim = state / "bin" / "containerd-shim-runc-v2"
    for proc in pathlib.Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and (proc / "exe").readlink() == shim:
                stop_pid(int(proc.name), "containerd-shim-runc-v2", grace=0)
        except OSError:
            continue
    runc_root = RUN_DIR / "runc" / "k8s.io"
    if (state / "bin" / "runc").exists() and runc_root.exists():
        listed = subprocess.run(
            [str(state / "bin/runc"), "--root", str(runc_root), "list", "-q"], capture_output=True, text=True
        )
        for container in listed.stdout.split():
            subprocess.run([str(state / "bin/runc"), "--root", str(runc_root), "delete", "--force", container])
    roots = (str(state), str(RUN_DIR), "/var/lib/kubelet")
    mounts = [line.split()[4] for line in pathlib.Path("/proc/self/mountinfo").read_text().splitlines()]
    for mount in reversed([m for m in mounts if m.startswith(roots)]):
        subprocess.run(["umount", "-l", mount], check=False)
    pids.unlink(missing_ok=True)
    if args.purge:
        for folder in (state, RUN_DIR, pathlib.Path("/var/lib/kubelet"), pathlib.Path(f"/var/lib/cni/networks/{NODE}")):
            shutil.rmtree(folder, ignore_errors=True)
        if shutil.which("ip"):  # the bridge the CNI made (iproute2; without it the bridge stays, harmless)
            subprocess.run(["ip", "link", "delete", "cni0"], check=False, capture_output=True)
    log(f"down: stopped {len(started)} programs" + (", removed their state" if args.purge else ""))
    return 0


def alive(pid: int) -> bool:
    """Whether `pid` still runs: a zombie does not (`up` has exited, and whatever reaps its orphans may not)."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def stop_pid(pid: int, name: str, grace: float = 10) -> None:
    try:
        os.kill(pid, signal.SIGTERM if grace else signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not alive(pid):
            return
        time.sleep(0.2)
    try:
        os.kill(pid, signal.SIGKILL)
        log(f"{name} ({pid}) killed")
    except ProcessLookupError:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="build and compress what travels into --out (here, with the project's venv)")
    p.add_argument("--out", default=str(DEFAULT_BUNDLE))
    p.add_argument("--python-version", default="3.12", help="the lent machine's python, for the wheels (3.12)")
    p.add_argument("--budget-mib", type=int, default=BUDGET_MIB)
    p.add_argument("--dict-mib", type=int, default=256, help="xz's window over the Kubernetes programs together")
    p.add_argument(
        "--split",
        action="store_true",
        help="for two calls: the Kubernetes archive in <out>-1 (a first call carries it; `up` reads both folders)",
    )
    u = sub.add_parser("up", help="unpack --bundle and start the one-node cluster and the programs (there, as root)")
    u.add_argument("--bundle", default=str(DEFAULT_BUNDLE))
    u.add_argument("--state", default=str(STATE_DIR))
    u.add_argument("--source", choices=["nvml", "simulated"], default="nvml", help="gpu-device-plugin's GPUs")
    u.add_argument("--python", default="", help="the programs' python (default: this one)")
    u.add_argument("--timeout", type=float, default=180, help="seconds to wait for the node, and for the smoke pod")
    d = sub.add_parser("down", help="stop everything `up` started (there, as root)")
    d.add_argument("--state", default=str(STATE_DIR))
    d.add_argument(
        "--purge", action="store_true", help="also remove the state, /run/gpu-node, /var/lib/kubelet and the CNI bridge"
    )
    r = sub.add_parser("registry", help="(started by `up`) serve the image layouts under IMAGES to containerd")
    r.add_argument("images")
    r.add_argument("--port", type=int, default=REGISTRY_PORT)
    args = parser.parse_args(argv)
    if args.cmd == "prepare":
        sys.path[:0] = [str(ROOT), str(ROOT / "src")]
        return prepare(args)
    return {"up": up, "down": down, "registry": registry}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
