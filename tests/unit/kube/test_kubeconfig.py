"""Loading connection settings from kubeconfig files and the in-cluster environment."""

import base64
import datetime
import json
import pathlib
import re
import socket
import ssl
import threading
import time

import pytest
import yaml

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


# ---- contexts, namespaces, several files -------------------------------------------------------------------------

TWO_CONTEXTS = """apiVersion: v1
kind: Config
clusters:
- {name: a, cluster: {server: "http://127.0.0.1:1"}}
- {name: b, cluster: {server: "http://127.0.0.1:2"}}
users:
- {name: ua, user: {token: token-a}}
- {name: ub, user: {token: token-b}}
contexts:
- {name: first, context: {cluster: a, user: ua}}
- {name: second, context: {cluster: b, user: ub, namespace: team-b}}
current-context: first
"""


def test_context_chooses_cluster_user_and_namespace(tmp_path):
    path = tmp_path / "kc"
    path.write_text(TWO_CONTEXTS)
    current = config.load(str(path))
    assert (current.server, current.bearer(), current.namespace, current.context) == (
        "http://127.0.0.1:1",
        "token-a",
        None,
        "first",
    )
    other = config.load(str(path), context="second")
    assert (other.server, other.bearer(), other.namespace, other.context) == (
        "http://127.0.0.1:2",
        "token-b",
        "team-b",
        "second",
    )
    with pytest.raises(config.ConfigError, match="context 'third' not found"):
        config.load(str(path), context="third")


def test_kubeconfig_list_is_merged_first_definition_wins(tmp_path, monkeypatch):
    first = tmp_path / "one"
    first.write_text("""clusters: [{name: a, cluster: {server: "http://first:1"}}]
users: [{name: u, user: {token: from-first}}]
contexts: [{name: x, context: {cluster: a, user: u}}]
current-context: x
""")
    second = tmp_path / "two"
    second.write_text("""clusters: [{name: a, cluster: {server: "http://second:1"}}, {name: b, cluster: {server: "http://b:1"}}]
users: [{name: u, user: {token: from-second}}, {name: v, user: {tokenFile: tok}}]
contexts: [{name: y, context: {cluster: b, user: v, namespace: ns-y}}]
current-context: y
""")
    (tmp_path / "tok").write_text("relative-to-the-second-file\n")
    monkeypatch.setenv("KUBECONFIG", f"{first}:{tmp_path / 'absent'}:{second}")
    cfg = config.load()
    assert (cfg.server, cfg.bearer(), cfg.context) == ("http://first:1", "from-first", "x")
    cfg = config.load(context="y")
    assert (cfg.server, cfg.bearer(), cfg.namespace) == ("http://b:1", "relative-to-the-second-file", "ns-y")
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'absent'}:{tmp_path / 'gone'}")
    with pytest.raises(config.ConfigError, match="none of"):
        config.load()


def test_in_cluster_namespace_comes_from_the_service_account(tmp_path, monkeypatch):
    ca = pki.CA(tmp_path, "k")
    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "ca.crt").write_bytes(ca.pem)
    (tmp_path / "namespace").write_text("kube-system")
    monkeypatch.setattr(config, "SERVICE_ACCOUNT_DIR", tmp_path)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    cfg = config.load()
    assert (cfg.server, cfg.namespace, cfg.bearer()) == ("https://10.0.0.1:443", "kube-system", "sa-token")


# ---- exec credential plugins -----------------------------------------------------------------------------------

V1 = "client.authentication.k8s.io/v1"
V1BETA1 = "client.authentication.k8s.io/v1beta1"


def plugin(tmp_path, body: str, name: str = "plugin") -> pathlib.Path:
    """An executable shell script; it appends a line to `runs` each time it runs."""
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\necho run >> {tmp_path / 'runs'}\n{body}\n")
    path.chmod(0o755)
    return path


def runs(tmp_path) -> int:
    file = tmp_path / "runs"
    return len(file.read_text().splitlines()) if file.exists() else 0


def credential(api_version: str = V1, **status) -> str:
    return json.dumps({"apiVersion": api_version, "kind": "ExecCredential", "status": status})


def exec_kubeconfig(tmp_path, exec_: dict, server: str = "http://127.0.0.1:8080", cluster_extra: dict | None = None):
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server, **(cluster_extra or {})}}],
        "users": [{"name": "u", "user": {"exec": exec_}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "kc"
    path.write_text(yaml.safe_dump(doc))
    return config.from_kubeconfig(path)


def printing(tmp_path, text: str, **exec_) -> config.ClusterConfig:
    (tmp_path / "out.json").write_text(text)
    script = plugin(tmp_path, f"cat {tmp_path / 'out.json'}")
    spec = {"apiVersion": V1, "command": str(script), "interactiveMode": "Never"} | exec_
    return exec_kubeconfig(tmp_path, spec)


@pytest.mark.parametrize("api_version", [V1, V1BETA1])
def test_exec_token_is_cached_until_it_expires(tmp_path, api_version):
    later = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)).isoformat()
    cfg = printing(tmp_path, credential(api_version, token="tok-1", expirationTimestamp=later), apiVersion=api_version)
    assert runs(tmp_path) == 0, "the plugin runs at the first request, not when the kubeconfig is read"
    assert cfg.bearer() == "tok-1"
    assert cfg.bearer() == "tok-1"
    assert runs(tmp_path) == 1
    assert cfg.exec_plugin is not None and cfg.exec_plugin.credential().expires == datetime.datetime.fromisoformat(
        later
    )


def test_exec_runs_again_once_the_credential_has_expired(tmp_path):
    # Each run prints the next token, valid for one second.
    script = plugin(
        tmp_path,
        f"""n=$(wc -l < {tmp_path / "runs"})
exp=$(date -u -d '+1 second' +%Y-%m-%dT%H:%M:%SZ)
status='"token":"tok-'$n'","expirationTimestamp":"'$exp'"'
printf '{{"apiVersion":"{V1}","kind":"ExecCredential","status":{{%s}}}}' "$status"
""",
    )
    cfg = exec_kubeconfig(tmp_path, {"apiVersion": V1, "command": str(script), "interactiveMode": "Never"})
    assert cfg.bearer() == "tok-1"
    assert cfg.bearer() == "tok-1"
    deadline = time.monotonic() + 10
    while cfg.bearer() == "tok-1":
        assert time.monotonic() < deadline, "the expired token was never replaced"
        time.sleep(0.2)
    assert cfg.bearer() == "tok-2" and runs(tmp_path) == 2


def test_exec_credential_without_expiry_is_kept_and_refreshed_after_a_refusal(tmp_path):
    cfg = printing(tmp_path, credential(token="forever"))
    assert [cfg.bearer(), cfg.bearer()] == ["forever", "forever"] and runs(tmp_path) == 1
    assert cfg.refresh_credentials() is True  # the server answered 401
    assert cfg.bearer() == "forever" and runs(tmp_path) == 2


def test_no_exec_plugin_means_a_refusal_is_final(tmp_path):
    path = tmp_path / "kc"
    path.write_text(TWO_CONTEXTS)
    assert config.from_kubeconfig(path).refresh_credentials() is False


def test_exec_gets_args_env_and_the_exec_info(tmp_path):
    script = plugin(
        tmp_path,
        f"""printf '%s\\n' "$@" > {tmp_path / "args"}
printf '%s' "$PLUGIN_REGION" > {tmp_path / "env"}
printf '%s' "$KUBERNETES_EXEC_INFO" > {tmp_path / "info"}
echo '{credential(token="t")}'""",
    )
    ca = pki.CA(tmp_path, "k")
    cfg = exec_kubeconfig(
        tmp_path,
        {
            "apiVersion": V1,
            "command": str(script),
            "args": ["--cluster", "two words"],
            "env": [{"name": "PLUGIN_REGION", "value": "eu-west"}],
            "interactiveMode": "IfAvailable",
            "provideClusterInfo": True,
        },
        server="https://127.0.0.1:6443",
        cluster_extra={
            "certificate-authority-data": base64.b64encode(ca.pem).decode(),
            "tls-server-name": "api.internal",
            "extensions": [{"name": "client.authentication.k8s.io/exec", "extension": {"audience": "k8s"}}],
        },
    )
    assert cfg.bearer() == "t"
    assert (tmp_path / "args").read_text().splitlines() == ["--cluster", "two words"]
    assert (tmp_path / "env").read_text() == "eu-west"
    info = json.loads((tmp_path / "info").read_text())
    assert info["apiVersion"] == V1 and info["kind"] == "ExecCredential"
    assert info["spec"]["interactive"] is False  # IfAvailable without a terminal
    cluster = info["spec"]["cluster"]
    assert cluster["server"] == "https://127.0.0.1:6443"
    assert base64.b64decode(cluster["certificate-authority-data"]) == ca.pem
    assert cluster["tls-server-name"] == "api.internal" and cluster["config"] == {"audience": "k8s"}


def test_exec_info_has_no_cluster_without_provide_cluster_info(tmp_path):
    script = plugin(
        tmp_path,
        f"""printf '%s' "$KUBERNETES_EXEC_INFO" > {tmp_path / "info"}\necho '{credential(V1BETA1, token="t")}'""",
    )
    cfg = exec_kubeconfig(tmp_path, {"apiVersion": V1BETA1, "command": str(script)})
    assert cfg.bearer() == "t"
    info = json.loads((tmp_path / "info").read_text())
    assert info == {"apiVersion": V1BETA1, "kind": "ExecCredential", "spec": {"interactive": False}}


@pytest.mark.parametrize(
    "mode, terminal, interactive",
    [("Never", True, False), ("IfAvailable", True, True), ("IfAvailable", False, False), ("Always", True, True)],
)
def test_interactive_mode(tmp_path, monkeypatch, mode, terminal, interactive):
    monkeypatch.setattr(config, "_stdin_is_terminal", lambda: terminal)
    script = plugin(
        tmp_path, f"""printf '%s' "$KUBERNETES_EXEC_INFO" > {tmp_path / "info"}\necho '{credential(token="t")}'"""
    )
    cfg = exec_kubeconfig(tmp_path, {"apiVersion": V1, "command": str(script), "interactiveMode": mode})
    assert cfg.bearer() == "t"
    assert json.loads((tmp_path / "info").read_text())["spec"]["interactive"] is interactive


def test_interactive_mode_always_needs_a_terminal(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "_stdin_is_terminal", lambda: False)
    script = plugin(tmp_path, f"echo '{credential(token='t')}'")
    cfg = exec_kubeconfig(tmp_path, {"apiVersion": V1, "command": str(script), "interactiveMode": "Always"})
    with pytest.raises(config.ExecPluginError, match="interactiveMode is Always and standard input is not a terminal"):
        cfg.bearer()
    assert runs(tmp_path) == 0


def test_relative_command_is_relative_to_the_kubeconfig(tmp_path, monkeypatch):
    (tmp_path / "bin").mkdir()
    plugin(tmp_path, f"echo '{credential(token='from-bin')}'", name="bin/creds")
    monkeypatch.chdir("/")
    cfg = exec_kubeconfig(tmp_path, {"apiVersion": V1, "command": "./bin/creds", "interactiveMode": "Never"})
    assert cfg.bearer() == "from-bin"


def test_exec_client_certificate_is_presented_in_the_handshake(tmp_path):
    """The plugin's certificate and key end up in the TLS context: a server that requires a client certificate
    from the CA accepts the handshake and sees the plugin's subject."""
    ca = pki.CA(tmp_path, "k")
    server_pair = ca.issue("server", "localhost", server=True, ips=("127.0.0.1",))
    client_pair = ca.issue("client", "exec-user", org="team", client=True)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(ca.cert_path))
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    server_ctx.load_cert_chain(str(server_pair.cert), str(server_pair.key))
    listener = socket.create_server(("127.0.0.1", 0))
    seen: dict[str, object] = {}

    def serve() -> None:
        conn, _ = listener.accept()
        with server_ctx.wrap_socket(conn, server_side=True) as tls:
            seen["peer"] = tls.getpeercert()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    cfg = printing(
        tmp_path,
        credential(clientCertificateData=client_pair.cert.read_text(), clientKeyData=client_pair.key.read_text()),
    )
    # The kubeconfig above has a plain-http server; give it the cluster's TLS settings as an https kubeconfig would.
    cfg.ssl_context = ssl.create_default_context(cafile=str(ca.cert_path))
    assert cfg.bearer() is None  # no token: the certificate is the credential
    port = listener.getsockname()[1]
    with (
        socket.create_connection(("127.0.0.1", port)) as raw,
        cfg.ssl_context.wrap_socket(raw, server_hostname="127.0.0.1"),
    ):
        pass
    thread.join(timeout=10)
    listener.close()
    subject = dict(item for rdn in seen["peer"]["subject"] for item in rdn)
    assert subject["commonName"] == "exec-user" and subject["organizationName"] == "team"


@pytest.mark.parametrize(
    "printed, fragment",
    [
        ("not json", "did not print an ExecCredential as JSON"),
        ('["a list"]', "printed JSON that is not an ExecCredential object"),
        (json.dumps({"apiVersion": V1, "kind": "Secret", "status": {"token": "t"}}), "printed kind 'Secret'"),
        (credential(V1BETA1, token="t"), f"configured to use API version {V1}, plugin returned version {V1BETA1}"),
        (json.dumps({"apiVersion": V1, "kind": "ExecCredential"}), "didn't return a status field"),
        (credential(), "didn't return a token or cert/key pair"),
        (credential(clientCertificateData="-----BEGIN CERTIFICATE-----"), "returned only certificate or key, not both"),
        (credential(clientCertificateData="junk", clientKeyData="junk"), "failed parsing client key/certificate"),
        (credential(token="t", expirationTimestamp="tomorrow"), "expirationTimestamp 'tomorrow'"),
        (credential(token=5), "status.token that is not a string"),
    ],
)
def test_exec_output_errors_name_the_command_and_the_problem(tmp_path, printed, fragment):
    cfg = printing(tmp_path, printed)
    with pytest.raises(config.ExecPluginError) as info:
        cfg.bearer()
    assert fragment in str(info.value)
    assert str(tmp_path / "plugin") in str(info.value) and "of user 'u'" in str(info.value)


def test_exec_failure_shows_exit_code_and_stderr(tmp_path):
    script = plugin(tmp_path, "echo 'token expired, run: login' >&2\nexit 3")
    cfg = exec_kubeconfig(tmp_path, {"apiVersion": V1, "command": str(script), "interactiveMode": "Never"})
    with pytest.raises(config.ExecPluginError, match=r"failed with exit code 3: token expired, run: login"):
        cfg.bearer()


def test_exec_missing_command_shows_the_install_hint(tmp_path):
    cfg = exec_kubeconfig(
        tmp_path,
        {
            "apiVersion": V1,
            "command": "no-such-credential-helper-here",
            "interactiveMode": "Never",
            "installHint": "install it with: apt install helper",
        },
    )
    with pytest.raises(config.ExecPluginError, match="executable no-such-credential-helper-here not found") as info:
        cfg.bearer()
    assert "install it with: apt install helper" in str(info.value)


def test_exec_is_killed_after_its_timeout(tmp_path):
    script = plugin(tmp_path, "sleep 30")
    cfg = exec_kubeconfig(tmp_path, {"apiVersion": V1, "command": str(script), "interactiveMode": "Never"})
    assert cfg.exec_plugin is not None
    cfg.exec_plugin.timeout = 0.5
    started = time.monotonic()
    with pytest.raises(config.ExecPluginError, match=r"did not finish within 0.5s and was killed"):
        cfg.bearer()
    assert time.monotonic() - started < 10


def test_exec_output_is_bounded(tmp_path):
    script = plugin(tmp_path, "head -c 3000000 /dev/zero | tr '\\0' a")
    cfg = exec_kubeconfig(tmp_path, {"apiVersion": V1, "command": str(script), "interactiveMode": "Never"})
    assert cfg.exec_plugin is not None
    cfg.exec_plugin.output_limit = 1 << 20
    with pytest.raises(config.ExecPluginError, match=r"printed more than 1048576 bytes and was killed"):
        cfg.bearer()


@pytest.mark.parametrize(
    "exec_, fragment",
    [
        ({"apiVersion": V1, "interactiveMode": "Never"}, "exec.command is missing"),
        ({"command": "x", "interactiveMode": "Never"}, "exec.apiVersion is None"),
        ({"command": "x", "apiVersion": "client.authentication.k8s.io/v1alpha1"}, "exec.apiVersion is"),
        ({"command": "x", "apiVersion": V1}, "interactiveMode must be set for client.authentication.k8s.io/v1"),
        ({"command": "x", "apiVersion": V1, "interactiveMode": "Sometimes"}, "interactiveMode is 'Sometimes'"),
        ({"command": "x", "apiVersion": V1BETA1, "args": "one"}, "args must be a list of strings"),
        ({"command": "x", "apiVersion": V1BETA1, "env": [{"name": "A"}]}, "env entries need a name and a value"),
    ],
)
def test_exec_stanza_is_checked_when_the_kubeconfig_is_read(tmp_path, exec_, fragment):
    with pytest.raises(config.ConfigError, match=re.escape(fragment)):
        exec_kubeconfig(tmp_path, exec_)
