"""Pins of versions.yml that restate a fact of another pinned source agree with that source."""

from __future__ import annotations

import re

import pytest

from hack import toolchain
from harness import openapi


def test_kubeadm_etcd_image_tag_is_kubeadms_default_for_the_pinned_kubernetes() -> None:
    # The public mirror's stand-in node image carries etcd under this tag, as a real kindest/node does: kubeadm names
    # it for the pinned minor in cmd/kubeadm/app/constants (SupportedEtcdVersion), read from the module source.
    versions = toolchain.read_versions()
    minor = int(versions["kubernetes_version"].lstrip("v").split(".")[1])
    constants = (openapi.spec_dir().parents[2] / "cmd/kubeadm/app/constants/constants.go").read_text()
    table = re.search(r"SupportedEtcdVersion = map\[uint8\]string\{(.*?)\}", constants, re.DOTALL)
    assert table, "SupportedEtcdVersion not found in kubeadm's constants.go"
    entries = dict(re.findall(r"(\d+):\s*\"([^\"]+)\"", table.group(1)))
    assert entries[str(minor)] == versions["kubeadm_etcd_image_tag"]


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
