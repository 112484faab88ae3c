"""The blocking twin of `client.Client` for test steps, the benchmark and tools: plain dicts, real HTTPS, the same
kubeconfig loader, PATCH kinds and `errors.ApiError` hierarchy. Standard library only (no event loop)."""

from __future__ import annotations

import base64
import http.client
import json
import pathlib
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import yaml

from gpu_scheduling.kube import config, paths
from gpu_scheduling.kube.errors import AlreadyExists, Conflict, NotFound, TransportError, error_for
from gpu_scheduling.kube.wire import JSON, PATCH_CONTENT_TYPES


def _ca_only_context(kubeconfig: str) -> ssl.SSLContext:
    """A TLS context that trusts the kubeconfig's cluster CA and presents no client certificate."""
    cluster = yaml.safe_load(pathlib.Path(kubeconfig).read_text())["clusters"][0]["cluster"]
    if "certificate-authority-data" in cluster:
        return ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    return ssl.create_default_context(cafile=cluster["certificate-authority"])


class SyncClient:
    """As the kubeconfig's user, or (`as_token`) as whoever a bearer token names, with no client certificate (the
    apiserver would prefer one), trusting the same CA. Paths are absolute API paths."""

    def __init__(self, kubeconfig: str, token: str | None = None, timeout: float = 30) -> None:
        self.kubeconfig = kubeconfig
        self.cfg = config.from_kubeconfig(kubeconfig)
        self.timeout = timeout
        self._token = token
        context = self.cfg.ssl_context if token is None else _ca_only_context(kubeconfig)
        # An https server always has an SSLContext; the flag False (plain http) never reaches this handler.
        https = urllib.request.HTTPSHandler(context=context if isinstance(context, ssl.SSLContext) else None)
        self._opener = urllib.request.build_opener(https)

    def as_token(self, token: str) -> SyncClient:
        return SyncClient(self.kubeconfig, token, self.timeout)

    def _url(self, path: str, params: dict[str, str] | None) -> str:
        return self.cfg.server + path + ("?" + urllib.parse.urlencode(params) if params else "")

    def _exchange(self, req: urllib.request.Request) -> tuple[bytes, dict[str, str]]:
        """Send `req`: the answer's body and headers. An error answer raises urllib's HTTPError (which carries
        both); no answer, or not a whole one, TransportError, as the async client says."""
        if self._token is not None:
            req.add_header("Authorization", f"Bearer {self._token}")
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                body: bytes = resp.read()
                return body, dict(resp.headers)
        except urllib.error.HTTPError:
            raise
        except (OSError, http.client.HTTPException) as exc:
            raise TransportError(req.get_method(), req.selector, exc) from exc

    def _open(self, req: urllib.request.Request) -> bytes:
        try:
            return self._exchange(req)[0]
        except urllib.error.HTTPError as exc:
            raise error_for(exc.code, exc.read().decode(errors="replace"), exc.reason or "") from None

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> JSON:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self._url(path, params), data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        answer: JSON = json.loads(self._open(req) or b"{}")
        return answer

    def headers(self, path: str) -> dict[str, str]:
        """GET `path` and return the answer's headers, whatever its status (an error answer's too)."""
        try:
            return self._exchange(urllib.request.Request(self._url(path, None), method="GET"))[1]
        except urllib.error.HTTPError as exc:
            return dict(exc.headers)

    def text(self, path: str, **params: str) -> str:
        """GET a plain-text resource such as pods/log."""
        return self._open(urllib.request.Request(self._url(path, params or None))).decode(errors="replace")

    def get(self, path: str, **params: str) -> JSON:
        return self.request("GET", path, params=params or None)

    def create(self, path: str, body: JSON, *, exist_ok: bool = False) -> JSON | None:
        """POST `body` to collection `path`; with `exist_ok`, a name already taken is not an error (None)."""
        try:
            return self.request("POST", path, body)
        except AlreadyExists:
            if exist_ok:
                return None
            raise

    def patch(self, path: str, body: Any, kind: str = "merge") -> JSON:
        return self.request("PATCH", path, body, content_type=PATCH_CONTENT_TYPES[kind])

    def delete(self, path: str, missing_ok: bool = True, **params: str) -> JSON | None:
        try:
            return self.request("DELETE", path, params=params or None)
        except NotFound:
            if missing_ok:
                return None
            raise

    def apply_or_replace(self, path: str, body: JSON) -> JSON:
        """Create `body` in collection `path`, or replace it when it exists."""
        try:
            return self.request("POST", path, body)
        except Conflict:
            pass
        item = f"{path}/{body['metadata']['name']}"
        current = self.get(item)
        body = dict(body, metadata=dict(body["metadata"], resourceVersion=current["metadata"]["resourceVersion"]))
        return self.request("PUT", item, body)

    def pods(self, namespace: str, **params: str) -> list[JSON]:
        items: list[JSON] = self.get(paths.pods(namespace), **params)["items"]
        return items

    def events(self, namespace: str, **params: str) -> list[JSON]:
        items: list[JSON] = self.get(paths.events(namespace), **params)["items"]
        return items
