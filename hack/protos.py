#!/usr/bin/env python3
"""Generate the Python stubs of the kubelet's gRPC APIs the node side speaks, from k8s.io/kubelet's own `api.proto`
files at the pinned Kubernetes version (the Go module proxy serves them as source; nothing else is downloaded).

- the device plugin API `v1beta1` (`pkg/apis/deviceplugin/v1beta1/api.proto`): Registration, DevicePlugin;
- the PodResources API `v1` (`pkg/apis/podresources/v1/api.proto`): which devices the kubelet gave each container.

The message classes and their type stubs (`api_pb2.py`, `api_pb2.pyi`; the services are called through grpcio's
generic handlers by method names read from the same descriptors, so no `_pb2_grpc` module is needed) go to
`src/gpu_scheduling/kubeletapi/<api>/`, which git ignores:
they are build output, made by `make venv` (so by `make test` and `make demo`) with grpcio-tools' protoc, and they
travel into the images inside the project's wheel. A stamp file names the module version they were made from, so a
second run with the same pin does nothing and a new pin regenerates them.

Usage: .venv/bin/python hack/protos.py [--force]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "hack"))
import toolchain  # noqa: E402  (hack/ is not a package; toolchain is the one reader of versions.yml)

MODULE = "k8s.io/kubelet"
#: Python package of the stubs, and the API folders inside it: name -> the proto file in the module.
PACKAGE = "gpu_scheduling/kubeletapi"
APIS = {
    "deviceplugin": "pkg/apis/deviceplugin/v1beta1/api.proto",
    "podresources": "pkg/apis/podresources/v1/api.proto",
}
OUT = ROOT / "src" / PACKAGE
STAMP = OUT / "SOURCE"

_PACKAGE_DOC = '''"""Generated: the kubelet's gRPC APIs ({source}), made by hack/protos.py.

Do not edit; git ignores this folder."""
'''


def module_source(version: str) -> pathlib.Path:
    env = toolchain.go_env(toolchain.read_versions())
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"{MODULE}@{version}"], env=env, check=True, capture_output=True, text=True
    ).stdout
    return pathlib.Path(json.loads(out)["Dir"])


def generate(force: bool = False) -> bool:
    """Write the stubs unless the stamp says they are current; True when it wrote them."""
    version = toolchain.staging_version(toolchain.read_versions()["kubernetes_version"])
    source = f"{MODULE}@{version}"
    if not force and STAMP.is_file() and STAMP.read_text().strip() == source:
        return False
    src = module_source(version)
    from grpc_tools import protoc  # the `protos` extra (grpcio-tools), installed by `make venv`

    with tempfile.TemporaryDirectory() as tmp:
        staged = pathlib.Path(tmp, "stage")
        built = pathlib.Path(tmp, "out")
        built.mkdir()
        protos = []
        for api, rel in APIS.items():
            # Staged under the package's path, so that the generated imports name gpu_scheduling.kubeletapi.<api>.
            target = staged / PACKAGE / api / "api.proto"
            target.parent.mkdir(parents=True)
            shutil.copyfile(src / rel, target)
            protos.append(str(target.relative_to(staged)))
        include = pathlib.Path(protoc.__file__).parent / "_proto"
        code = protoc.main(
            [
                "protoc",
                f"-I{staged}",
                f"-I{include}",
                f"--python_out={built}",
                f"--pyi_out={built}",
                *protos,
            ]
        )
        if code != 0:
            raise SystemExit(f"protos: protoc failed ({code}) on {source}")
        for api in APIS:
            (built / PACKAGE / api / "__init__.py").write_text(_PACKAGE_DOC.format(source=f"{source} {APIS[api]}"))
        (built / PACKAGE / "__init__.py").write_text(_PACKAGE_DOC.format(source=source))
        (built / PACKAGE / "SOURCE").write_text(source + "\n")
        if OUT.exists():
            shutil.rmtree(OUT)
        shutil.copytree(built / PACKAGE, OUT)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--force", action="store_true", help="regenerate even when the stamp is current")
    args = parser.parse_args(argv)
    wrote = generate(args.force)
    print(f"protos: {'generated' if wrote else 'current'}: {OUT.relative_to(ROOT)} from {STAMP.read_text().strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
