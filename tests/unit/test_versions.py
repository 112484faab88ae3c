"""Pins of versions.yml that restate a fact of another pinned source agree with that source."""

from __future__ import annotations

import re

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
