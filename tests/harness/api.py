"""A small synchronous Kubernetes client for test steps (plain dicts, real HTTPS to the real apiserver)."""

from __future__ import annotations

import base64
import json
import pathlib
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any, TypeVar

import yaml

from gpu_scheduling.kube import config

T = TypeVar("T")


def _ca_only_context(kubeconfig: str) -> ssl.SSLContext:
    """A TLS context that trusts the kubeconfig's cluster CA and presents no client certificate."""
    cluster = yaml.safe_load(pathlib.Path(kubeconfig).read_text())["clusters"][0]["cluster"]
    if "certificate-authority-data" in cluster:
        return ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    return ssl.create_default_context(cafile=cluster["certificate-authority"])


class ApiError(Exception):
    def __init__(self, status: int, body: dict[str, Any]):
        self.status, self.body = status, body
        self.message = body.get("message", "")
        self.reason = body.get("reason", "")
        super().__init__(f"{status} {self.reason}: {self.message}")


class Api:
    """As the kubeconfig's user, or (`as_token`) as whoever a bearer token names, with no client certificate (the
    apiserver would prefer one), trusting the same CA."""

    def __init__(self, kubeconfig: str, token: str | None = None):
        self.kubeconfig = kubeconfig
        self.cfg = config.from_kubeconfig(kubeconfig)
        self._token = token
        context = self.cfg.ssl_context if token is None else _ca_only_context(kubeconfig)
        handler = urllib.request.HTTPSHandler(context=context)
        self._opener = urllib.request.build_opener(handler)

    def as_token(self, token: str) -> Api:
        return Api(self.kubeconfig, token)

    def _request(self, url: str, data: bytes | None = None, method: str | None = None) -> urllib.request.Request:
        req = urllib.request.Request(url, data=data, method=method)
        if self._token is not None:
            req.add_header("Authorization", f"Bearer {self._token}")
        return req

    def request(self, method: str, path: str, body: Any = None, params: dict[str, str] | None = None,
                content_type: str = "application/json") -> dict[str, Any]:
        url = self.cfg.server + path + ("?" + urllib.parse.urlencode(params) if params else "")
        data = None if body is None else json.dumps(body).encode()
        req = self._request(url, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with self._opener.open(req, timeout=30) as resp:
                return json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = {"message": raw.decode(errors="replace")}
            raise ApiError(exc.code, parsed) from None

    def text(self, path: str, **params: str) -> str:
        """GET a plain-text resource such as pods/log."""
        url = self.cfg.server + path + ("?" + urllib.parse.urlencode(params) if params else "")
        try:
            with self._opener.open(self._request(url), timeout=30) as resp:
                return resp.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            raise ApiError(exc.code, {"message": exc.read().decode(errors="replace")}) from None

    def get(self, path: str, **params: str) -> dict[str, Any]:
        return self.request("GET", path, params=params or None)

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", path, body)

    def patch(self, path: str, body: Any, kind: str = "merge") -> dict[str, Any]:
        ct = {"merge": "application/merge-patch+json", "strategic": "application/strategic-merge-patch+json",
              "json": "application/json-patch+json"}[kind]
        return self.request("PATCH", path, body, content_type=ct)

    def delete(self, path: str, missing_ok: bool = True, **params: str) -> dict[str, Any] | None:
        try:
            return self.request("DELETE", path, params=params or None)
        except ApiError as exc:
            if missing_ok and exc.status == 404:
                return None
            raise

    def apply_or_replace(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create `body` in collection `path`, or replace it when it exists."""
        try:
            return self.create(path, body)
        except ApiError as exc:
            if exc.status != 409:
                raise
        item = f"{path}/{body['metadata']['name']}"
        current = self.get(item)
        body = dict(body, metadata=dict(body["metadata"], resourceVersion=current["metadata"]["resourceVersion"]))
        return self.request("PUT", item, body)

    # ---- conveniences used by many steps --------------------------------------------------------------------
    def pods(self, namespace: str, **params: str) -> list[dict[str, Any]]:
        return self.get(f"/api/v1/namespaces/{namespace}/pods", **params)["items"]

    def events(self, namespace: str, **params: str) -> list[dict[str, Any]]:
        return self.get(f"/api/v1/namespaces/{namespace}/events", **params)["items"]


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 60, interval: float = 0.25) -> T:
    """Poll `probe` until it returns something truthy; fail naming `what` and the last value seen."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = probe()
        except ApiError as exc:
            last = exc
        if last and not isinstance(last, Exception):
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last seen: {last!r}")
        time.sleep(interval)
