"""Pins of versions.yml that restate a fact of another pinned source agree with that source."""

from __future__ import annotations

import re

import pytest
import yaml

from hack import toolchain
from harness import openapi


def test_kubeadm_etcd_image_tag_is_kubeadms_default_for_the_pinned_kubernetes() -> None:
    # The public mirror's stand-in node image carries etcd under this tag, as a real kindest/node does: kubeadm names
    # it for the pinned minor in cmd/kubeadm/app/constants (SupportedEtcdVersion), read from the module source; for a
    # minor newer than the table (v1.37's stops at 36), kubeadm's GetEtcdVersion takes the table's newest entry.
    versions = toolchain.read_versions()
    minor = int(versions["kubernetes_version"].lstrip("v").split(".")[1])
    constants = (openapi.spec_dir().parents[2] / "cmd/kubeadm/app/constants/constants.go").read_text()
    table = re.search(r"SupportedEtcdVersion = map\[uint8\]string\{(.*?)\}", constants, re.DOTALL)
    assert table, "SupportedEtcdVersion not found in kubeadm's constants.go"
    entries = {int(k): v for k, v in re.findall(r"(\d+):\s*\"([^\"]+)\"", table.group(1))}
    assert min(entries) <= minor, f"kubeadm's table starts at {min(entries)}, after the pinned minor {minor}"
    expected = entries[minor] if minor in entries else entries[max(entries)]
    assert expected == versions["kubeadm_etcd_image_tag"]


def test_staging_version_is_derived_from_the_kubernetes_release() -> None:
    assert toolchain.staging_version("v1.37.2") == "v0.37.2"
    assert toolchain.staging_version("v1.35.4") == "v0.35.4"
    for wrong in ("1.37.2", "v0.37.2", "v1.37", "v2.0.1"):
        with pytest.raises(ValueError, match="not a Kubernetes release"):
            toolchain.staging_version(wrong)


def test_the_supported_minors_are_the_newest_and_the_oldest(monkeypatch: pytest.MonkeyPatch) -> None:
    versions = toolchain.read_versions()
    newest, oldest = versions["kubernetes_version"], versions["kubernetes_oldest_version"]
    assert int(newest.split(".")[1]) - int(oldest.split(".")[1]) == 2, "three minors are supported at a time"
    monkeypatch.delenv(toolchain.KUBERNETES_ENV, raising=False)
    assert toolchain.at_kubernetes(versions)["kubernetes_version"] == newest
    monkeypatch.setenv(toolchain.KUBERNETES_ENV, "oldest")
    assert toolchain.at_kubernetes(versions)["kubernetes_version"] == oldest
    assert toolchain.at_kubernetes(versions)["etcd_version"] == versions["etcd_version"]
    monkeypatch.setenv(toolchain.KUBERNETES_ENV, "v1.35.4")
    with pytest.raises(SystemExit, match="not one of newest, oldest"):
        toolchain.at_kubernetes(versions)


def test_prometheus_release_reads_the_go_module_version() -> None:
    # Prometheus' Go module is released as v0.<major*100+minor>.<patch>; `prometheus --version` must print the
    # release (the build also checks it against the module source's VERSION file).
    assert toolchain.prometheus_release("v0.316.0") == "3.16.0"
    assert toolchain.prometheus_release("v0.300.2") == "3.0.2"
    assert toolchain.prometheus_release(toolchain.read_versions()["prometheus_version"])
    for wrong in ("v3.16.0", "v0.16.0", "0.316.0"):
        with pytest.raises(ValueError, match="not a Prometheus module version"):
            toolchain.prometheus_release(wrong)


def test_prometheus_is_built_with_its_release_and_without_service_discovery() -> None:
    versions = toolchain.read_versions()
    prometheus = toolchain.components()["prometheus"]
    assert "remove_all_sd" in prometheus.tags
    flags = toolchain._ldflags(prometheus, versions)
    release = toolchain.prometheus_release(versions["prometheus_version"])
    assert f"-X github.com/prometheus/common/version.Version={release}" in flags


@pytest.mark.parametrize(
    ("text", "release"),
    [
        ("go1.26.8", (1, 26, 8)),
        ("1.26.7", (1, 26, 7)),
        ("1.22", (1, 22)),
        ("go1.21rc2", (1, 21)),
        ("go version go1.19.8 linux/amd64", (1, 19, 8)),
        ("devel", None),
        ("", None),
    ],
)
def test_go_release_reads_every_way_go_writes_a_version(text: str, release: tuple[int, ...] | None) -> None:
    assert toolchain.go_release(text) == release


@pytest.mark.parametrize(
    ("local", "value"),
    [
        ("go1.26.7", "local"),  # the pinned one: nothing fetched
        ("go1.27.0", "local"),  # newer: used as it is
        ("go1.26.6", "go1.26.7"),  # older but able to switch: the module proxy's go1.26.7
        ("go1.21.0", "go1.26.7"),
        ("", "go1.26.7"),  # unreadable: ask for the pinned one rather than guess
    ],
)
def test_gotoolchain_uses_the_local_go_only_when_it_is_new_enough(local: str, value: str) -> None:
    assert toolchain.gotoolchain(local, "1.26.7") == value


def test_a_module_asking_for_a_newer_go_than_the_pin_is_refused_by_name() -> None:
    toolchain.check_go_directive("example.com/m", "module example.com/m\n\ngo 1.26.7\n", "1.26.7")
    toolchain.check_go_directive("example.com/m", "module example.com/m\n", "1.26.7")  # no go line: nothing asked
    with pytest.raises(SystemExit, match=r"example\.com/m's go\.mod asks for go 1\.27\.1, newer than .*1\.26\.7"):
        toolchain.check_go_directive("example.com/m", "module example.com/m\n\ngo 1.27.1\n", "1.26.7")


def test_go_version_is_at_least_the_pinned_kubernetes_modules_go_line() -> None:
    # Prometheus' go.mod (the newest, go 1.26.7) is checked by its build (check_go_directive); k8s.io/kubernetes'
    # source is on disk for the unit tier already (the OpenAPI documents), so its go line is checked here too.
    gomod = (openapi.spec_dir().parents[2] / "go.mod").read_text()
    asked = toolchain.go_directive(gomod)
    assert asked is not None
    assert asked <= toolchain.go_release(toolchain.read_versions()["go_version"])


def test_the_charts_minimum_kubernetes_is_the_oldest_supported_minor() -> None:
    chart = yaml.safe_load((toolchain.ROOT / "charts/gpu-scheduler/Chart.yaml").read_text())
    oldest = toolchain.read_versions()["kubernetes_oldest_version"]
    assert chart["annotations"]["gpu-scheduling.io/minimum-kubernetes"] == ".".join(oldest.lstrip("v").split(".")[:2])


def test_the_node_runtime_is_built_as_containerd_and_runc_build_it() -> None:
    # containerd's three programs from its one module, without the optional snapshotters (kind's base image's tags)
    # and with the version its Makefile sets, which the kubelet reports as the node's runtime version.
    versions = toolchain.read_versions()
    found = toolchain.components()
    for name in toolchain.CONTAINERD_PROGRAMS:
        comp = found[name]
        assert comp.version_key == "containerd_version"
        assert comp.package == f"{toolchain.CONTAINERD_MODULE}/cmd/{name}"
        assert {"no_btrfs", "no_devmapper", "no_zfs"} <= set(comp.tags)
        assert not comp.cgo
        flags = toolchain._ldflags(comp, versions)
        assert f"-X {toolchain.CONTAINERD_MODULE}/version.Version={versions['containerd_version']}" in flags
    assert "no_grpc" in found["containerd-shim-runc-v2"].tags
    # runc links libseccomp (seccomp profiles), statically, from Debian's -dev package.
    runc = found["runc"]
    assert runc.cgo == ("libseccomp-dev",)
    assert "seccomp" in runc.tags
    assert "libpathrs" not in runc.tags
    assert "-extldflags -static-pie" in toolchain._ldflags(runc, versions)


def test_a_cgo_build_finds_only_the_unpacked_packages(tmp_path) -> None:
    (tmp_path / "usr/lib/x86_64-linux-gnu/pkgconfig").mkdir(parents=True)
    env = toolchain.cgo_env(tmp_path)
    assert env["CGO_ENABLED"] == "1"
    assert env["PKG_CONFIG_SYSROOT_DIR"] == str(tmp_path)
    dirs = env["PKG_CONFIG_LIBDIR"].split(":")
    assert str(tmp_path / "usr/lib/x86_64-linux-gnu/pkgconfig") in dirs
    assert all(d.startswith(str(tmp_path)) for d in dirs)


def test_runc_is_refused_when_its_source_is_another_release(tmp_path) -> None:
    versions = toolchain.read_versions()
    runc = toolchain.components()["runc"]
    (tmp_path / "VERSION").write_text(versions["runc_version"].lstrip("v") + "\n")
    toolchain._check_source(runc, versions, tmp_path)
    (tmp_path / "VERSION").write_text("1.4.4\n")
    with pytest.raises(SystemExit, match=r"is runc 1\.4\.4 by its VERSION file"):
        toolchain._check_source(runc, versions, tmp_path)
