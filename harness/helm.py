"""The project's Helm release on a running cluster: read it (`helm list`, `helm get values`, `helm get manifest`),
upgrade it, uninstall it and install it again, with the helm binary hack/toolchain.py builds (harness.manifests.helm,
which also renders the chart for the control-plane tests).

For the KinD tier's chart scenarios (features/chart), which must leave the test-bed's release exactly as they found
it: the same chart package (roles/deploy installs a package of the chart versioned with a digest of its files, from
build/charts/) and the same user-supplied values, which is all kubernetes.core.helm compares, so that the next
`ansible-playbook site.yml` changes nothing. It touches only the release it is given, and never the CRDs (Helm
leaves them alone on upgrade and uninstall; roles/deploy applies them itself).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from harness import manifests

#: Where roles/deploy packages the chart (deploy_package_dir): gpu-scheduler-<version>+<digest>.tgz, the name of
#: the chart as `helm list` shows it.
PACKAGE_DIR = manifests.ROOT / "build" / "charts"
#: How long helm waits for the release's workloads (--timeout): the deploy role's deploy_wait_timeout.
WAIT_TIMEOUT = 300
#: What the subprocess allows helm beyond its own --timeout (reading the release, rendering, its last requests).
_SLACK = 60


@dataclasses.dataclass(frozen=True)
class Release:
    """One release as `helm list` shows it."""

    name: str
    namespace: str
    chart: str  # "<chart name>-<chart version>", e.g. gpu-scheduler-0.1.0+3f2a9c0d1e4b
    app_version: str
    revision: int
    status: str  # deployed, failed, pending-upgrade, ...

    @property
    def package(self) -> pathlib.Path:
        """The package roles/deploy installed this release from."""
        return PACKAGE_DIR / f"{self.chart}.tgz"


class Helm:
    """helm against the cluster of `kubeconfig`."""

    def __init__(self, kubeconfig: str, wait_timeout: int = WAIT_TIMEOUT) -> None:
        self.kubeconfig = kubeconfig
        self.wait_timeout = wait_timeout

    def run(self, *args: str, stdin: str | None = None, timeout: float = 120) -> str:
        """helm `args` with this kubeconfig; its stdout. manifests.HelmError with helm's message when it fails."""
        return manifests.helm("--kubeconfig", self.kubeconfig, *args, stdin=stdin, timeout=timeout)

    # ---- reading --------------------------------------------------------------------------------------------

    def release(self, name: str, namespace: str) -> Release | None:
        """The release `name` in `namespace` whatever its status, or None when there is none."""
        text = self.run("list", "--namespace", namespace, "--all", "--filter", f"^{re.escape(name)}$", "-o", "json")
        found = [r for r in json.loads(text or "[]") if r["name"] == name]
        if not found:
            return None
        (r,) = found
        return Release(r["name"], r["namespace"], r["chart"], r.get("app_version", ""), int(r["revision"]), r["status"])

    def values(self, name: str, namespace: str) -> dict[str, Any]:
        """The release's user-supplied values (what kubernetes.core.helm compares with the role's), {} for none."""
        loaded = json.loads(self.run("get", "values", name, "--namespace", namespace, "-o", "json") or "null")
        return dict(loaded or {})

    def manifest(self, name: str, namespace: str) -> list[dict[str, Any]]:
        """The objects the release made (its rendered templates; not the CRDs of crds/, which Helm does not own)."""
        text = self.run("get", "manifest", name, "--namespace", namespace)
        return [doc for doc in yaml.safe_load_all(text) if doc]

    # ---- changing -------------------------------------------------------------------------------------------

    def upgrade(
        self,
        name: str,
        namespace: str,
        package: pathlib.Path,
        *,
        values: Mapping[str, Any] | None = None,
        set_values: Sequence[str] = (),
        reuse_values: bool = False,
    ) -> str:
        """`helm upgrade --wait` to `package`. With `reuse_values`, the release keeps its values and takes
        `set_values` (`key=value`, as --set) over them; without, its values become exactly `values` and
        `set_values` (--reset-values: none of the previous ones stay), the chart's defaults under them."""
        args = ["upgrade", name, str(package), "--namespace", namespace, *self._wait()]
        if reuse_values:
            args.append("--reuse-values")
        else:
            args.append("--reset-values")
        for item in set_values:
            args += ["--set", item]
        stdin = None
        if values is not None:
            args += ["--values", "-"]  # as JSON (a subset of YAML) on stdin
            stdin = json.dumps(dict(values))
        return self.run(*args, stdin=stdin, timeout=self.wait_timeout + _SLACK)

    def install(self, name: str, namespace: str, package: pathlib.Path, values: Mapping[str, Any]) -> str:
        """`helm install --wait` of `package` with exactly `values`, without the CRDs (as roles/deploy: they are
        applied on their own, and an uninstall leaves them)."""
        return self.run(
            "install",
            name,
            str(package),
            "--namespace",
            namespace,
            "--skip-crds",
            *self._wait(),
            "--values",
            "-",
            stdin=json.dumps(dict(values)),
            timeout=self.wait_timeout + _SLACK,
        )

    def uninstall(self, name: str, namespace: str) -> str:
        """`helm uninstall --wait`: returns once every object of the release is deleted (the pods of its
        workloads go after them, by the garbage collector)."""
        return self.run("uninstall", name, "--namespace", namespace, *self._wait(), timeout=self.wait_timeout + _SLACK)

    def _wait(self) -> list[str]:
        return ["--wait", "--timeout", f"{self.wait_timeout}s"]
