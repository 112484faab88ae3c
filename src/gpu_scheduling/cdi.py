"""The CDI (Container Device Interface) spec of this node's NVIDIA GPUs, as plain data: what containerd 2 (CDI always
on) or any CDI-aware runtime adds to a container that the device plugin's Allocate names a device of. Pure: the
caller lists the driver root and /dev; writing the file is `agent.deviceplugin`'s.

**Why CDI.** The device plugin's device specs give a container the GPU's device nodes, but no driver: without
NVIDIA's container runtime a CUDA image has no libcuda.so.1, no libnvidia-ml.so.1 and no nvidia-smi. A CDI spec
carries those too, and the kubelet passes the names in `ContainerAllocateResponse.cdi_devices` to the runtime, which
applies the spec's edits. So a plain containerd + runc node needs no NVIDIA runtime class.

**Names.** One kind, `gpu.scheduling/gpu` (`KIND`; file `gpu.scheduling-gpu.json`, the name CDI's GenerateSpecName
gives a vendor and class). Each GPU is a device twice, by its index (`0`) and by its UUID (`GPU-…`), as nvidia-ctk
names them; the plugin answers the UUID, which stays the same when another GPU disappears and the indexes move.

**What a device gives.** Per GPU: its /dev/nvidia<minor>. Common to all (applied once whatever the number of GPUs):
- the control devices that exist (/dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools, /dev/nvidia-modeset).
  Not /dev/nvidia-caps: those nodes grant MIG configuration and monitoring, which a whole-GPU container never needs;
- the driver root's folders that exist (`bin`, `lib64`, `glibc`), bind-mounted read-only at the same path, so that
  the libraries' own paths (and the CUDA images' default `/usr/local/nvidia/lib64` for the default root) hold. Not
  with a root of `/`, whose /bin and /lib64 are the host's own and would hide the image's;
- each program of `PROGRAMS` that exists, also mounted at /usr/bin/<name>, so an unmodified `nvidia-smi` is on every
  image's default PATH without replacing the image's PATH (a CDI env entry replaces the variable, it never appends);
- `LD_LIBRARY_PATH=<root>/lib64`, so nvidia-smi and NVML/CUDA programs find libnvidia-ml.so.1 and libcuda.so.1 in
  any image (no ldconfig hook runs). It replaces the image's and the pod's value: CUDA images' default names the same
  folder for the default root; a program that needs more folders sets them itself.

**glibc** (`with_glibc`, off by default). The driver's programs are linked against glibc and their ELF interpreter is
/lib64/ld-linux-x86-64.so.2. An image with glibc has both, and the driver's libraries run on it (they need only old
symbol versions). An image without glibc (distroless static, busybox) has neither, and nvidia-smi cannot start there.
`with_glibc` mounts the driver's loader at /lib64/ld-linux-x86-64.so.2 and adds the loader's folder to
LD_LIBRARY_PATH after the driver's libraries: the loader and its libc then always come as one pair. The cost, and why
it is not the default: every dynamically linked glibc program of the container then runs on the driver's glibc, and
one built against a newer glibc fails (`GLIBC_2.xx not found`). Use it for images without glibc or with an older one.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpu_scheduling import devices

#: The CDI spec version written: 0.6.0 is the lowest that allows what the spec uses (device names starting with a
#: digit and deviceNodes' hostPath need 0.5.0), and every CDI-aware containerd (1.7 and 2.x) reads it.
CDI_VERSION = "0.6.0"
VENDOR = "gpu.scheduling"
CLASS = "gpu"
KIND = f"{VENDOR}/{CLASS}"
#: The spec file's name in the CDI folder: "<vendor>-<class>" and the encoding's extension (CDI's GenerateSpecName).
SPEC_FILE = f"{VENDOR}-{CLASS}.json"
DEFAULT_DIR = "/var/run/cdi"
DEFAULT_DRIVER_ROOT = "/usr/local/nvidia"
#: The driver root's folders given to a container (those that exist), mounted read-only at the same path.
DRIVER_FOLDERS = ("bin", "lib64", "glibc")
#: The driver's programs also put on the default PATH (/usr/bin), those that exist in <root>/bin.
PROGRAMS = ("nvidia-smi", "nvidia-debugdump", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server")
#: The ELF interpreter of x86-64 glibc programs, nvidia-smi's.
LOADER = "/lib64/ld-linux-x86-64.so.2"
#: Read-only bind mounts that cannot carry device nodes or setuid programs into the container.
MOUNT_OPTIONS = ("ro", "nosuid", "nodev", "bind")

# CDI's name rules (the container-device-interface parser): vendor and class start with a letter, devices with a
# letter or digit; both end with a letter or digit; between them letters, digits, "_", "-", "." (and ":" in devices).
_VENDOR_CLASS_RE = re.compile(r"^[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
_DEVICE_NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$")


@dataclasses.dataclass(frozen=True)
class Driver:
    """What exists of the driver on this node: paths relative to the driver root (`bin/nvidia-smi`,
    `lib64/libnvidia-ml.so.1`, `glibc/lib/ld-linux-x86-64.so.2`), and the absolute /dev paths of its device nodes."""

    root: str = DEFAULT_DRIVER_ROOT
    files: frozenset[str] = frozenset()
    dev: frozenset[str] = frozenset()


def qualified_name(device: str, kind: str = KIND) -> str:
    """The fully qualified CDI name of a device of `kind` (this spec's by default), as the kubelet passes it to the
    runtime."""
    return f"{kind}={device}"


def valid_kind(kind: str) -> bool:
    """Whether `kind` is a CDI kind, "<vendor>/<class>"."""
    vendor, _, klass = kind.partition("/")
    return bool(_VENDOR_CLASS_RE.match(vendor) and _VENDOR_CLASS_RE.match(klass))


def device_name(gpu: devices.NodeGpu) -> str:
    """The name the plugin answers for a GPU: its UUID (stable when the indexes move)."""
    return gpu.uuid


def _bind(host: str, container: str | None = None) -> dict[str, Any]:
    return {"hostPath": host, "containerPath": container or host, "options": list(MOUNT_OPTIONS)}


def _loader(driver: Driver) -> str | None:
    """The driver's glibc loader (relative path under `glibc/`), the shortest such path when several exist."""
    found = sorted(
        (f for f in driver.files if f.startswith("glibc/") and posixpath.basename(f) == posixpath.basename(LOADER)),
        key=lambda f: (f.count("/"), f),
    )
    return found[0] if found else None


def common_edits(driver: Driver, *, with_glibc: bool = False) -> dict[str, Any]:
    """The edits every container given one of the GPUs gets once (see the module's docstring for each part)."""
    root = driver.root.rstrip("/") or "/"
    edits: dict[str, Any] = {}
    nodes = [{"path": d, "hostPath": d, "permissions": "rw"} for d in devices.NVIDIA_CONTROL_DEVICES if d in driver.dev]
    if nodes:
        edits["deviceNodes"] = nodes
    # A driver installed at "/" (the host's own /usr/bin and /usr/lib) has no folders of its own: mounting the host's
    # /bin or /lib64 over the image's would replace the image's programs, so only the programs are given then.
    folders = [f for f in DRIVER_FOLDERS if root != "/" and any(p.startswith(f"{f}/") for p in driver.files)]
    mounts = [_bind(posixpath.join(root, f)) for f in folders]
    mounts.extend(
        _bind(posixpath.join(root, "bin", p), f"/usr/bin/{p}") for p in PROGRAMS if f"bin/{p}" in driver.files
    )
    library_path = [posixpath.join(root, "lib64")] if "lib64" in folders else []
    loader = _loader(driver) if with_glibc and "glibc" in folders else None
    if loader is not None:
        mounts.append(_bind(posixpath.join(root, loader), LOADER))
        library_path.append(posixpath.join(root, posixpath.dirname(loader)))
    if mounts:
        edits["mounts"] = mounts
    if library_path:
        edits["env"] = [f"LD_LIBRARY_PATH={':'.join(library_path)}"]
    return edits


def spec(gpus: Iterable[devices.NodeGpu], driver: Driver, *, with_glibc: bool = False) -> dict[str, Any]:
    """The CDI spec of `gpus`: each GPU whose /dev/nvidia<minor> exists, named by its index and by its UUID. A GPU
    without one is left out, so an Allocate naming it fails at container creation (an unresolvable CDI device)
    instead of starting a container without its GPU."""
    out: list[dict[str, Any]] = []
    for gpu in sorted(gpus, key=lambda g: g.id):
        node = f"/dev/nvidia{gpu.minor}"
        if gpu.minor is None or node not in driver.dev:
            continue
        edits = {"deviceNodes": [{"path": node, "hostPath": node, "permissions": "rw"}]}
        names = [str(gpu.id)] + ([gpu.uuid] if gpu.uuid and gpu.uuid != str(gpu.id) else [])
        out.extend({"name": name, "containerEdits": edits} for name in names)
    document: dict[str, Any] = {"cdiVersion": CDI_VERSION, "kind": KIND, "devices": out}
    common = common_edits(driver, with_glibc=with_glibc)
    if common:
        document["containerEdits"] = common
    return document


def _check_edits(where: str, edits: Mapping[str, Any]) -> list[str]:
    problems = [
        f"{where}: environment entry {env!r} is not NAME=value"
        for env in edits.get("env", [])
        if not isinstance(env, str) or env.find("=") <= 0
    ]
    for node in edits.get("deviceNodes", []):
        problems.extend(
            f"{where}: device node {key} {node[key]!r} is not absolute"
            for key in ("path", "hostPath")
            if key in node and not posixpath.isabs(node[key])
        )
        if node.get("permissions", "") not in ("", "none") and node["permissions"].strip("rwm"):
            problems.append(f"{where}: device node permissions {node['permissions']!r} are not of r, w, m")
    for mount in edits.get("mounts", []):
        problems.extend(
            f"{where}: mount {key} {mount.get(key)!r} is not absolute"
            for key in ("hostPath", "containerPath")
            if not posixpath.isabs(mount.get(key) or "")
        )
    return problems


def problems(document: Mapping[str, Any]) -> list[str]:
    """Why `document` is not a CDI spec a runtime would load (CDI's rules: the kind's and the devices' name syntax,
    at least one device, unique names, no device without edits, NAME=value env, absolute paths); [] when it is
    one. Paths are held to be absolute although CDI accepts relative ones: this spec only ever means host paths."""
    out: list[str] = []
    if not valid_kind(str(document.get("kind", ""))):
        out.append(f"kind {document.get('kind')!r} is not <vendor>/<class>")
    if not re.match(r"^[0-9]+\.[0-9]+\.[0-9]+$", str(document.get("cdiVersion", ""))):
        out.append(f"cdiVersion {document.get('cdiVersion')!r} is not a semantic version")
    items: Sequence[Mapping[str, Any]] = document.get("devices") or []
    if not items:
        out.append("no devices (a CDI spec needs at least one)")
    seen: set[str] = set()
    for item in items:
        name = str(item.get("name", ""))
        if not _DEVICE_NAME_RE.match(name):
            out.append(f"device name {name!r} breaks CDI's name syntax")
        if name in seen:
            out.append(f"device name {name!r} appears twice")
        seen.add(name)
        if not item.get("containerEdits"):
            out.append(f"device {name!r} has no containerEdits")
        out.extend(_check_edits(f"device {name!r}", item.get("containerEdits") or {}))
    out.extend(_check_edits("containerEdits", document.get("containerEdits") or {}))
    return out
