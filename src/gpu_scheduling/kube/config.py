"""Load connection settings from a kubeconfig file or from the in-cluster service account. No API requests here.

A kubeconfig is read as kubectl reads it: `--kubeconfig` names one file; `$KUBECONFIG` may list several (joined
with `os.pathsep`), merged so that the first file defining a name (context, cluster, user) and the first
`current-context` win, and files that do not exist are skipped; relative paths in a file are relative to that
file. A context may be chosen instead of the current one, and its `namespace` is kept for the programs that default
to it.

Users authenticate with a client certificate, a token, a token file (re-read on every request: the kubelet rotates
projected tokens) or an **exec credential plugin** (`users[].user.exec`, as client-go runs it): the command is run
with its `args` and `env` and `KUBERNETES_EXEC_INFO` (an ExecCredential of the configured `apiVersion`,
`client.authentication.k8s.io/v1` or `v1beta1`, with `spec.interactive` and, with `provideClusterInfo`, the
cluster); it prints an ExecCredential whose `status` holds a `token` or `clientCertificateData` and
`clientKeyData` (PEM), optionally with an `expirationTimestamp`. The credential is cached until then (forever
without one) and the plugin run again once it has expired, or when the server refused it (`refresh_credentials`).
The plugin gets the terminal (stdin and stderr) only when it is interactive: `interactiveMode` Always (a terminal
is required), IfAvailable (when stdin is a terminal; the default of v1beta1) or Never. Its output is bounded
(EXEC_OUTPUT_LIMIT) and so is its run time (EXEC_TIMEOUT); every error names the command and what was wrong.

Why not a library: the maintained loader at hand, the official client's `kubernetes.config` (kubernetes 37.0.2,
already in the KinD extra for Ansible), was run on the same kubeconfigs (2026-11): it reads a `tokenFile` once, so a
rotated projected token is not seen (it kept sending the first token; this module sends the new one); a plugin that
exits 3 is logged and the config loads with no credential (here: ExecPluginError naming the command and its stderr);
it has no time limit (a plugin sleeping 4 s held it 4 s; here killed at EXEC_TIMEOUT) and no output bound (50 MB
read whole, +140 MB RSS; here killed past 1 MiB); it ignores `interactiveMode` (Always without a terminal ran the
plugin; client-go and this module refuse) and caches no exec credential (its own docstring says so). It also needs
its own HTTP stack (urllib3, requests, websocket-client, oauthlib, pydantic: 126 MB for the package alone, none in
the programs' images) and takes about 290 ms to import against about 90 ms for this module with its imports.
`kubernetes_asyncio` (the aiohttp variant, not measured) ports the same loader. What would make it worth replacing:
a loader with a bounded, refreshable exec plugin and re-read token files that returns plain settings (server, CA,
headers).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime
import json
import os
import pathlib
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from typing import IO, Any

import yaml

SERVICE_ACCOUNT_DIR = pathlib.Path("/var/run/secrets/kubernetes.io/serviceaccount")

#: The ExecCredential versions a plugin may be configured with (v1alpha1 is gone from client-go too).
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
EXEC_INTERACTIVE_MODES = ("Never", "IfAvailable", "Always")
#: Environment variable carrying the ExecCredential request to the plugin.
EXEC_INFO_ENV = "KUBERNETES_EXEC_INFO"
#: The cluster extension passed to a plugin as `spec.cluster.config` (with provideClusterInfo).
EXEC_EXTENSION = "client.authentication.k8s.io/exec"
#: Seconds a plugin may run, and how much it may print (stdout; stderr is cut to the same size).
EXEC_TIMEOUT = 60.0
EXEC_OUTPUT_LIMIT = 1 << 20


class ConfigError(RuntimeError):
    """The kubeconfig or the in-cluster environment is unusable; the message says what is missing."""


class ExecPluginError(ConfigError):
    """An exec credential plugin could not be run or printed no usable credential; the message names the command."""


@dataclasses.dataclass(frozen=True)
class ExecCredential:
    """What a plugin returned: a token, a client certificate and key (PEM), or both; `expires` is None for a
    credential without an expiry."""

    token: str | None
    cert_pem: bytes | None
    key_pem: bytes | None
    expires: datetime.datetime | None

    def expired(self, now: datetime.datetime | None = None) -> bool:
        if self.expires is None:
            return False
        return (now or datetime.datetime.now(datetime.UTC)) > self.expires


class ExecPlugin:
    """One `users[].user.exec` stanza: runs the command when no unexpired credential is cached. Thread-safe (the
    scheduler's leader election has a thread of its own sharing the same ClusterConfig)."""

    def __init__(
        self,
        *,
        user: str,
        command: str,
        args: list[str],
        env: dict[str, str],
        api_version: str,
        interactive_mode: str,
        cluster_info: dict[str, Any] | None,
        install_hint: str = "",
        timeout: float | None = None,
        output_limit: int | None = None,
    ) -> None:
        self.user, self.command, self.args, self.env = user, command, args, env
        self.api_version, self.interactive_mode = api_version, interactive_mode
        self.cluster_info = cluster_info
        self.install_hint = install_hint
        self.timeout = EXEC_TIMEOUT if timeout is None else timeout
        self.output_limit = EXEC_OUTPUT_LIMIT if output_limit is None else output_limit
        self.runs = 0  # how often the command ran (tests, and a caller that wants to know)
        self._cached: ExecCredential | None = None
        self._lock = threading.Lock()

    @property
    def who(self) -> str:
        return f"exec plugin {self.command!r} of user {self.user!r}"

    def credential(self) -> ExecCredential:
        """The cached credential, or a fresh one from the command when there is none or it has expired."""
        with self._lock:
            if self._cached is None or self._cached.expired():
                self._cached = self._run()
            return self._cached

    def invalidate(self, stale: ExecCredential | None = None) -> None:
        """Forget the cached credential (the server refused it), so the next request runs the command again; with
        `stale`, only when that is still the cached one (another request may have refreshed it already)."""
        with self._lock:
            if stale is None or self._cached is stale:
                self._cached = None

    # ---- running the command -------------------------------------------------------------------------------

    def _interactive(self) -> bool:
        tty = _stdin_is_terminal()
        if self.interactive_mode == "Never":
            return False
        if self.interactive_mode == "Always" and not tty:
            raise ExecPluginError(
                f"{self.who} cannot support interactive mode: interactiveMode is Always and standard input is "
                "not a terminal"
            )
        return tty

    def _request(self, interactive: bool) -> str:
        spec: dict[str, Any] = {"interactive": interactive}
        if self.cluster_info is not None:
            spec["cluster"] = self.cluster_info
        return json.dumps({"apiVersion": self.api_version, "kind": "ExecCredential", "spec": spec})

    def _run(self) -> ExecCredential:
        interactive = self._interactive()
        env = dict(os.environ)
        env.update(self.env)
        env[EXEC_INFO_ENV] = self._request(interactive)
        self.runs += 1
        code, out, err = _run_bounded(
            [self.command, *self.args],
            env,
            interactive=interactive,
            timeout=self.timeout,
            limit=self.output_limit,
            who=self.who,
            install_hint=self.install_hint,
        )
        if code != 0:
            detail = _tail(err)
            raise ExecPluginError(f"{self.who} failed with exit code {code}" + (f": {detail}" if detail else ""))
        return self._parse(out)

    def _parse(self, out: bytes) -> ExecCredential:
        try:
            doc = json.loads(out)
        except ValueError as exc:
            raise ExecPluginError(f"{self.who} did not print an ExecCredential as JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise ExecPluginError(f"{self.who} printed JSON that is not an ExecCredential object")
        if doc.get("kind") != "ExecCredential":
            raise ExecPluginError(f"{self.who} printed kind {doc.get('kind')!r}, expected ExecCredential")
        if doc.get("apiVersion") != self.api_version:
            raise ExecPluginError(
                f"{self.who} is configured to use API version {self.api_version}, plugin returned version "
                f"{doc.get('apiVersion')}"
            )
        status = doc.get("status")
        if not isinstance(status, dict):
            raise ExecPluginError(f"{self.who} didn't return a status field")
        token, cert, key = status.get("token"), status.get("clientCertificateData"), status.get("clientKeyData")
        for field, value in (("token", token), ("clientCertificateData", cert), ("clientKeyData", key)):
            if value is not None and not isinstance(value, str):
                raise ExecPluginError(f"{self.who} returned status.{field} that is not a string")
        if not token and not cert and not key:
            raise ExecPluginError(f"{self.who} didn't return a token or cert/key pair")
        if bool(cert) != bool(key):
            raise ExecPluginError(f"{self.who} returned only certificate or key, not both")
        expires = None
        stamp = status.get("expirationTimestamp")
        if stamp:
            try:
                expires = datetime.datetime.fromisoformat(str(stamp))
            except ValueError:
                raise ExecPluginError(
                    f"{self.who} returned status.expirationTimestamp {stamp!r}, which is not an RFC 3339 time"
                ) from None
            if expires.tzinfo is None:
                raise ExecPluginError(f"{self.who} returned status.expirationTimestamp {stamp!r} without a time zone")
        cert_pem = cert.encode() if cert else None
        key_pem = key.encode() if key else None
        if cert_pem is not None and key_pem is not None:
            try:  # fail here, naming the plugin, rather than at the first handshake
                _load_pair(ssl.create_default_context(), cert_pem, key_pem)
            except (ssl.SSLError, OSError) as exc:
                raise ExecPluginError(f"{self.who}: failed parsing client key/certificate: {exc}") from None
        return ExecCredential(token or None, cert_pem, key_pem, expires)


def _stdin_is_terminal() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (ValueError, OSError):  # closed or detached
        return False


def _tail(err: bytes, lines: int = 5) -> str:
    text = err.decode(errors="replace").strip()
    return " | ".join(text.splitlines()[-lines:])[:2000]


def _spawn(
    argv: list[str], env: dict[str, str], *, interactive: bool, who: str, install_hint: str
) -> subprocess.Popen[bytes]:
    """Start the plugin with its stdout (and, unless interactive, its stderr) piped; ExecPluginError naming it
    when it cannot be started."""
    try:
        return subprocess.Popen(
            argv,
            env=env,
            stdin=None if interactive else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=None if interactive else subprocess.PIPE,
            # Its own process group, so that a timeout also ends what it started; not when it uses the terminal.
            start_new_session=not interactive,
        )
    except FileNotFoundError:
        hint = f"\n\n{install_hint.strip()}" if install_hint.strip() else ""
        raise ExecPluginError(f"{who}: executable {argv[0]} not found{hint}") from None
    except OSError as exc:
        raise ExecPluginError(f"{who} cannot be run: {exc.strerror or exc}") from None


def _run_bounded(
    argv: list[str],
    env: dict[str, str],
    *,
    interactive: bool,
    timeout: float,
    limit: int,
    who: str,
    install_hint: str = "",
) -> tuple[int, bytes, bytes]:
    """Run `argv`, reading at most `limit` bytes of stdout (and of stderr, unless interactive: then the plugin
    talks to the terminal); killed past `timeout` seconds or `limit` bytes. Returns (exit code, stdout, stderr)."""
    proc = _spawn(argv, env, interactive=interactive, who=who, install_hint=install_hint)
    overflow = threading.Event()
    chunks: dict[str, bytearray] = {"out": bytearray(), "err": bytearray()}

    def kill() -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if interactive:
                proc.kill()
            else:
                os.killpg(proc.pid, signal.SIGKILL)

    def drain(stream: IO[bytes], name: str, strict: bool) -> None:
        buf = chunks[name]
        while data := os.read(stream.fileno(), 65536):
            room = limit - len(buf)
            buf += data[: max(room, 0)]
            # stderr beyond the limit is dropped while reading on, so the plugin never blocks writing it
            if len(data) > room and strict:
                overflow.set()
                kill()
                return
        stream.close()

    readers = [threading.Thread(target=drain, args=(proc.stdout, "out", True), daemon=True)]
    if proc.stderr is not None:
        readers.append(threading.Thread(target=drain, args=(proc.stderr, "err", False), daemon=True))
    for reader in readers:
        reader.start()
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill()
        proc.wait()
        raise ExecPluginError(f"{who} did not finish within {timeout:g}s and was killed") from None
    finally:
        for reader in readers:
            reader.join(timeout=5)
    if overflow.is_set():
        raise ExecPluginError(f"{who} printed more than {limit} bytes and was killed")
    return code, bytes(chunks["out"]), bytes(chunks["err"])


def _load_pair(ctx: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """Load a client certificate and key held in memory into `ctx` (a later load replaces the pair for the
    connections made after it): through memory files closed at once where Linux has them, else temporary files
    removed at once."""
    if hasattr(os, "memfd_create"):
        fds = []
        try:
            for data, suffix in ((cert_pem, ".crt"), (key_pem, ".key")):
                fds.append(os.memfd_create(f"exec{suffix}"))
                os.write(fds[-1], data)
            ctx.load_cert_chain(f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}")
        finally:
            for fd in fds:
                os.close(fd)
        return
    with tempfile.TemporaryDirectory() as tmp:  # pragma: no cover - not Linux
        cert, key = pathlib.Path(tmp, "tls.crt"), pathlib.Path(tmp, "tls.key")
        cert.write_bytes(cert_pem)
        key.write_bytes(key_pem)
        ctx.load_cert_chain(str(cert), str(key))


@dataclasses.dataclass
class ClusterConfig:
    server: str
    ssl_context: ssl.SSLContext | bool
    token: str | None = None
    token_file: str | None = None
    #: The context's namespace (in a pod: the service account's), None when it names none.
    namespace: str | None = None
    #: The context used (None in a cluster).
    context: str | None = None
    exec_plugin: ExecPlugin | None = None
    _exec_loaded: ExecCredential | None = dataclasses.field(default=None, repr=False, compare=False)
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False, compare=False)

    def bearer(self) -> str | None:
        """The token for the next request. Called before every request: re-reads a token file (the kubelet rotates
        the projected token) and runs the exec plugin when its credential is missing or expired; a client
        certificate it returned is loaded into `ssl_context` before the request connects."""
        if self.exec_plugin is not None:
            cred = self.exec_plugin.credential()
            if cred.cert_pem is not None and cred.key_pem is not None and isinstance(self.ssl_context, ssl.SSLContext):
                with self._lock:
                    if cred is not self._exec_loaded:
                        _load_pair(self.ssl_context, cred.cert_pem, cred.key_pem)
                        self._exec_loaded = cred
            if cred.token:
                return cred.token
        if self.token_file:
            return pathlib.Path(self.token_file).read_text().strip()
        return self.token

    def refresh_credentials(self) -> bool:
        """The server refused the credentials (401): forget an exec plugin's, so the next request gets new ones.
        False when nothing could change (no plugin): retrying would be refused again."""
        if self.exec_plugin is None:
            return False
        self.exec_plugin.invalidate()
        return True


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


@dataclasses.dataclass
class _Kubeconfig:
    """One or several kubeconfig files merged: each named entry with the folder of the file that defined it."""

    source: str
    current_context: str | None = None
    contexts: dict[str, tuple[dict[str, Any], pathlib.Path]] = dataclasses.field(default_factory=dict)
    clusters: dict[str, tuple[dict[str, Any], pathlib.Path]] = dataclasses.field(default_factory=dict)
    users: dict[str, tuple[dict[str, Any], pathlib.Path]] = dataclasses.field(default_factory=dict)

    def add(self, file: pathlib.Path, doc: Mapping[str, Any]) -> None:
        base = file.parent
        if not self.current_context and doc.get("current-context"):
            self.current_context = str(doc["current-context"])
        for key, inner, table in (
            ("contexts", "context", self.contexts),
            ("clusters", "cluster", self.clusters),
            ("users", "user", self.users),
        ):
            for entry in doc.get(key) or []:
                if isinstance(entry, dict) and "name" in entry and str(entry["name"]) not in table:
                    table[str(entry["name"])] = (entry.get(inner) or {}, base)


def _read(file: pathlib.Path) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(file.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read kubeconfig {file}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"kubeconfig {file} is not valid YAML: {exc}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ConfigError(f"kubeconfig {file} is not a mapping")
    return doc


def from_kubeconfig(path: str | os.PathLike[str], context: str | None = None) -> ClusterConfig:
    file = pathlib.Path(path).expanduser()
    merged = _Kubeconfig(str(file))
    merged.add(file, _read(file))
    return _config(merged, context)


def from_kubeconfigs(files: list[pathlib.Path], context: str | None = None) -> ClusterConfig:
    """The merge of `files` (as $KUBECONFIG lists them): files that do not exist are skipped."""
    merged = _Kubeconfig(os.pathsep.join(str(f) for f in files))
    found = [f for f in files if f.exists()]
    if not found:
        raise ConfigError(f"cannot read kubeconfig: none of {merged.source} exists")
    for file in found:
        merged.add(file, _read(file))
    return _config(merged, context)


def _config(kc: _Kubeconfig, context: str | None) -> ClusterConfig:
    where = f"kubeconfig {kc.source}"
    name = context or kc.current_context
    if name not in kc.contexts:
        have = ", ".join(kc.contexts) or "none"
        raise ConfigError(f"{where}: context {name!r} not found (have: {have})")
    ctx, _ = kc.contexts[name]
    if ctx.get("cluster") not in kc.clusters:
        raise ConfigError(f"{where}: cluster {ctx.get('cluster')!r} of context {name!r} not found")
    cluster, cluster_base = kc.clusters[ctx["cluster"]]
    user_name = ctx.get("user")
    user, user_base = kc.users.get(user_name, ({}, cluster_base)) if user_name else ({}, cluster_base)
    if "server" not in cluster:
        raise ConfigError(f"{where}: cluster {ctx['cluster']!r} has no server")

    server = str(cluster["server"]).rstrip("/")
    ssl_ctx: ssl.SSLContext | bool = False
    ca_pem: bytes | None = None
    if server.startswith("https://"):
        if cluster.get("insecure-skip-tls-verify"):
            ssl_ctx = ssl.create_default_context()
            ssl_ctx.check_hostname = False
            ssl_ctx.verify_mode = ssl.CERT_NONE
        elif cluster.get("certificate-authority-data"):
            ca_pem = base64.b64decode(cluster["certificate-authority-data"])
            ssl_ctx = ssl.create_default_context(cadata=ca_pem.decode())
        elif cluster.get("certificate-authority"):
            ca_file = _resolve(cluster_base, cluster["certificate-authority"])
            ssl_ctx = ssl.create_default_context(cafile=ca_file)
            with contextlib.suppress(OSError):
                ca_pem = pathlib.Path(ca_file).read_bytes()
        else:
            ssl_ctx = ssl.create_default_context()
        cert = user.get("client-certificate-data")
        key = user.get("client-key-data")
        if cert and key:
            ssl_ctx.load_cert_chain(_pem_path(cert, ".crt"), _pem_path(key, ".key"))
        elif user.get("client-certificate") and user.get("client-key"):
            ssl_ctx.load_cert_chain(
                _resolve(user_base, user["client-certificate"]), _resolve(user_base, user["client-key"])
            )
    token_file = user.get("tokenFile")
    plugin = None
    if user.get("exec"):
        plugin = _exec_plugin(str(user_name), user["exec"], user_base, cluster, server, ca_pem, where)
    namespace = ctx.get("namespace")
    return ClusterConfig(
        server=server,
        ssl_context=ssl_ctx,
        token=user.get("token"),
        token_file=_resolve(user_base, token_file) if token_file else None,
        namespace=str(namespace) if namespace else None,
        context=name,
        exec_plugin=plugin,
    )


def _exec_plugin(
    user: str,
    spec: Any,
    base: pathlib.Path,
    cluster: Mapping[str, Any],
    server: str,
    ca_pem: bytes | None,
    where: str,
) -> ExecPlugin:
    field = f"{where}: users[{user!r}].user.exec"
    if not isinstance(spec, dict):
        raise ConfigError(f"{field} is not a mapping")
    command = spec.get("command")
    if not command or not isinstance(command, str):
        raise ConfigError(f"{field}.command is missing")
    api_version = spec.get("apiVersion")
    if api_version not in EXEC_API_VERSIONS:
        raise ConfigError(f"{field}.apiVersion is {api_version!r}; expected one of {', '.join(EXEC_API_VERSIONS)}")
    mode = spec.get("interactiveMode")
    if not mode:
        if api_version == EXEC_API_VERSIONS[0]:
            raise ConfigError(f"{field}.interactiveMode must be set for {api_version} (Never, IfAvailable or Always)")
        mode = "IfAvailable"
    if mode not in EXEC_INTERACTIVE_MODES:
        raise ConfigError(f"{field}.interactiveMode is {mode!r}; expected one of {', '.join(EXEC_INTERACTIVE_MODES)}")
    args = spec.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ConfigError(f"{field}.args must be a list of strings")
    env: dict[str, str] = {}
    for entry in spec.get("env") or []:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or "value" not in entry:
            raise ConfigError(f"{field}.env entries need a name and a value, got {entry!r}")
        env[entry["name"]] = str(entry["value"])
    # As kubectl: a command with a path separator is relative to the kubeconfig that names it; a bare name is
    # looked up on PATH.
    if os.sep in command and not pathlib.Path(command).is_absolute():
        command = str((base / command).absolute())
    cluster_info = None
    if spec.get("provideClusterInfo"):
        cluster_info = _cluster_info(cluster, server, ca_pem)
    return ExecPlugin(
        user=user,
        command=command,
        args=list(args),
        env=env,
        api_version=str(api_version),
        interactive_mode=str(mode),
        cluster_info=cluster_info,
        install_hint=str(spec.get("installHint") or ""),
    )


def _cluster_info(cluster: Mapping[str, Any], server: str, ca_pem: bytes | None) -> dict[str, Any]:
    """`spec.cluster` of the ExecCredential handed to a plugin with provideClusterInfo (client-go's Cluster)."""
    info: dict[str, Any] = {"server": server}
    if ca_pem is not None:
        info["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    for key in ("tls-server-name", "insecure-skip-tls-verify", "proxy-url", "disable-compression"):
        if cluster.get(key):
            info[key] = cluster[key]
    for ext in cluster.get("extensions") or []:
        if isinstance(ext, dict) and ext.get("name") == EXEC_EXTENSION:
            info["config"] = ext.get("extension")
    return info


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
    namespace = None
    with contextlib.suppress(OSError):
        namespace = (SERVICE_ACCOUNT_DIR / "namespace").read_text().strip() or None
    return ClusterConfig(
        server=f"https://{host}:{port}", ssl_context=ctx, token_file=str(token_file), namespace=namespace
    )


def load(kubeconfig: str | None = None, context: str | None = None) -> ClusterConfig:
    """`--kubeconfig` (one file), else $KUBECONFIG (files merged), else in-cluster, else ~/.kube/config; `context`
    instead of the current context (not with in-cluster settings, which have none)."""
    if kubeconfig:
        return from_kubeconfig(kubeconfig, context)
    listed = os.environ.get("KUBECONFIG")
    if listed:
        files = [pathlib.Path(p).expanduser() for p in listed.split(os.pathsep) if p]
        if len(files) == 1:
            return from_kubeconfig(files[0], context)
        if files:
            return from_kubeconfigs(files, context)
    if os.environ.get("KUBERNETES_SERVICE_HOST") and not context:
        return in_cluster()
    default = pathlib.Path.home() / ".kube" / "config"
    if default.exists():
        return from_kubeconfig(default, context)
    if context:
        raise ConfigError(f"context {context!r} given, but there is no kubeconfig: pass --kubeconfig or set KUBECONFIG")
    raise ConfigError("no kubeconfig: pass --kubeconfig, set KUBECONFIG, or run in a cluster")
