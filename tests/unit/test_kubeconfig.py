"""Loading connection settings from kubeconfig files and the in-cluster environment."""

import base64
import ssl

import pytest

from gpu_scheduling.kube import config
from harness import pki
from harness.controlplane import kubeconfig


def test_embedded_client_certificate(tmp_path):
    ca = pki.CA(tmp_path, "k")
    admin = ca.issue("admin", "admin", org="system:masters", client=True)
    path = tmp_path / "kc"
    path.write_text(kubeconfig("https://127.0.0.1:6443/", ca.pem, admin))
    cfg = config.from_kubeconfig(path)
    assert cfg.server == "https://127.0.0.1:6443"
    assert isinstance(cfg.ssl_context, ssl.SSLContext) and cfg.ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert cfg.bearer() is None


def test_token_file_is_reread_and_relative_paths_resolve(tmp_path):
    ca = pki.CA(tmp_path, "k")
    (tmp_path / "token").write_text("first\n")
    path = tmp_path / "kc"
    path.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "https://h:1", certificate-authority: {ca.cert_path.name}}}}}]
users: [{{name: u, user: {{tokenFile: token}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
""")
    cfg = config.from_kubeconfig(path)
    assert cfg.bearer() == "first"
    (tmp_path / "token").write_text("rotated")
    assert cfg.bearer() == "rotated"


@pytest.mark.parametrize(
    "doc, fragment",
    [
        ("current-context: nope\ncontexts: []\n", "context 'nope' not found"),
        ("current-context: x\ncontexts: [{name: x, context: {cluster: gone, user: u}}]\n", "cluster 'gone'"),
    ],
)
def test_broken_kubeconfig_says_what_is_missing(tmp_path, doc, fragment):
    path = tmp_path / "kc"
    path.write_text(doc)
    with pytest.raises(config.ConfigError, match=fragment):
        config.from_kubeconfig(path)


def test_missing_file(tmp_path):
    with pytest.raises(config.ConfigError, match="cannot read kubeconfig"):
        config.from_kubeconfig(tmp_path / "absent")


def test_in_cluster_requires_the_environment(monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(config.ConfigError, match="KUBERNETES_SERVICE_HOST"):
        config.in_cluster()


def test_plain_http_server_needs_no_tls(tmp_path):
    path = tmp_path / "kc"
    token = base64.b64encode(b"x").decode()
    path.write_text(f"""clusters: [{{name: c, cluster: {{server: "http://127.0.0.1:8080"}}}}]
users: [{{name: u, user: {{token: {token}}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
""")
    cfg = config.from_kubeconfig(path)
    assert cfg.ssl_context is False and cfg.bearer() == token
