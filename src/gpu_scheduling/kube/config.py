"""Load connection settings from a kubeconfig file or from the in-cluster service account. No requests here."""

from __future__ import annotations

import base64
import dataclasses
import os
import pathlib
import ssl
import tempfile
from typing import Any

import yaml

SERVICE_ACCOUNT_DIR = pathlib.Path("/var/run/secrets/kubernetes.io/serviceaccount")


class ConfigError(RuntimeError):
    """The kubeconfig or the in-cluster environment is unusable; the message says what is missing."""


@dataclasses.dataclass
class ClusterConfig:
    server: str
    ssl_context: ssl.SSLContext | bool
    token: str | None = None
    token_file: str | None = None

    def bearer(self) -> str | None:
        # Re-read the projected token each time: the kubelet rotates it.
        if self.token_file:
            return pathlib.Path(self.token_file).read_text().strip()
        return self.token


def _pem_path(data_b64: str, suffix: str) -> str:
    """Give in-memory PEM data a path that ssl can load, without writing to a (possibly read-only) disk."""
    data = base64.b64decode(data_b64)
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create(f"kubeconfig{suffix}")
        os.write(fd, data)
        return f"/proc/self/fd/{fd}"
    handle = tempfile.NamedTemporaryFile(suffix=suffix, delete=False)  # noqa: SIM115 - kept for the process life
    handle.write(data)
    handle.close()
    return handle.name


def _resolve(base: pathlib.Path, path: str) -> str:
    p = pathlib.Path(path)
    return str(p if p.is_absolute() else base / p)


def from_kubeconfig(path: str | os.PathLike[str], context: str | None = None) -> ClusterConfig:
    file = pathlib.Path(path).expanduser()
    try:
        doc: dict[str, Any] = yaml.safe_load(file.read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read kubeconfig {file}: {exc}") from None
    base = file.parent
    name = context or doc.get("current-context")
    contexts = {c["name"]: c["context"] for c in doc.get("contexts") or []}
    if name not in contexts:
        raise ConfigError(f"kubeconfig {file}: context {name!r} not found (have: {', '.join(contexts) or 'none'})")
    ctx = contexts[name]
    clusters = {c["name"]: c["cluster"] for c in doc.get("clusters") or []}
    users = {u["name"]: u.get("user") or {} for u in doc.get("users") or []}
    if ctx.get("cluster") not in clusters:
        raise ConfigError(f"kubeconfig {file}: cluster {ctx.get('cluster')!r} of context {name!r} not found")
    cluster = clusters[ctx["cluster"]]
    user = users.get(ctx.get("user"), {})

    server = cluster["server"].rstrip("/")
    ssl_ctx: ssl.SSLContext | bool = False
    if server.startswith("https://"):
        if cluster.get("insecure-skip-tls-verify"):
            ssl_ctx = ssl.create_default_context()
            ssl_ctx.check_hostname = False
            ssl_ctx.verify_mode = ssl.CERT_NONE
        elif cluster.get("certificate-authority-data"):
            ssl_ctx = ssl.create_default_context(
                cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
            )
        elif cluster.get("certificate-authority"):
            ssl_ctx = ssl.create_default_context(cafile=_resolve(base, cluster["certificate-authority"]))
        else:
            ssl_ctx = ssl.create_default_context()
        cert = user.get("client-certificate-data")
        key = user.get("client-key-data")
        if cert and key:
            ssl_ctx.load_cert_chain(_pem_path(cert, ".crt"), _pem_path(key, ".key"))
        elif user.get("client-certificate") and user.get("client-key"):
            ssl_ctx.load_cert_chain(_resolve(base, user["client-certificate"]), _resolve(base, user["client-key"]))
    token_file = user.get("tokenFile")
    return ClusterConfig(
        server=server,
        ssl_context=ssl_ctx,
        token=user.get("token"),
        token_file=_resolve(base, token_file) if token_file else None,
    )


def in_cluster() -> ClusterConfig:
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise ConfigError("not in a cluster: KUBERNETES_SERVICE_HOST/PORT unset; pass --kubeconfig")
    token_file = SERVICE_ACCOUNT_DIR / "token"
    if not token_file.exists():
        raise ConfigError(f"in-cluster token {token_file} is missing")
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    ctx = ssl.create_default_context(cafile=str(SERVICE_ACCOUNT_DIR / "ca.crt"))
    return ClusterConfig(server=f"https://{host}:{port}", ssl_context=ctx, token_file=str(token_file))


def load(kubeconfig: str | None = None) -> ClusterConfig:
    """`--kubeconfig`, else $KUBECONFIG, else in-cluster, else ~/.kube/config."""
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path:
        return from_kubeconfig(path.split(os.pathsep)[0])
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return in_cluster()
    default = pathlib.Path.home() / ".kube" / "config"
    if default.exists():
        return from_kubeconfig(default)
    raise ConfigError("no kubeconfig: pass --kubeconfig, set KUBECONFIG, or run in a cluster")
