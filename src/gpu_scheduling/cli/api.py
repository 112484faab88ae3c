"""The requests `kubectl gpu` makes, over the project's async `kube.client.Client`: each names its verb and resource,
so that a refusal says what was refused (`cannot list gpuclaims.gpu.scheduling in namespace "x": ...`), a 401 from
an exec plugin's expired credential is retried once with a fresh one, and a network failure names the server."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from gpu_scheduling.kube import paths
from gpu_scheduling.kube.client import Client
from gpu_scheduling.kube.config import ClusterConfig, ConfigError
from gpu_scheduling.kube.errors import ApiError, Forbidden, NotFound, TransportError, Unauthorized
from gpu_scheduling.kube.paths import Resource as Resource  # the cli's modules name it from here

JSON = dict[str, Any]
T = TypeVar("T")

#: The field manager of every server-side apply, so that `kubectl get --show-managed-fields` tells who set what.
FIELD_MANAGER = "kubectl-gpu"
APPLY_PATCH = "application/apply-patch+yaml"


class CliError(Exception):
    """A failure to report as `error: <message>` with exit status `code`; with `problems`, one `error:` line
    each."""

    def __init__(self, message: str, code: int = 1, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.message, self.code = message, code
        self.problems = problems or [message]


#: The resources `kubectl gpu` reads and writes (the one path model, `kube.paths.Resource`).
GPU_CLAIMS = paths.GPU_CLAIM
GPU_NODE_STATUSES = paths.GPU_NODE_STATUS
POLICIES = paths.GPU_SCHEDULING_POLICY
PODS = paths.POD
NODES = paths.NODE
LEASES = paths.LEASE
POD_GROUPS = paths.POD_GROUP
DEPLOYMENTS = paths.DEPLOYMENT
DAEMONSETS = paths.DAEMONSET


def where(res: Resource, namespace: str | None) -> str:
    if not res.namespaced:
        return ""
    return f' in namespace "{namespace}"' if namespace else " in all namespaces"


class Api:
    """Requests as `kubectl gpu` makes them; every API error becomes a CliError saying which request failed,
    except those the caller asks to handle (`NotFound` from `get_optional`)."""

    def __init__(self, cfg: ClusterConfig, client: Client) -> None:
        self.cfg, self.client = cfg, client

    async def _call(self, verb: str, what: str, request: Callable[[], Awaitable[T]]) -> T:
        try:
            try:
                return await request()
            except Unauthorized:
                if not self.cfg.refresh_credentials():  # an exec plugin's credential may have expired: once more
                    raise
                return await request()
        except Forbidden as exc:
            raise CliError(f"cannot {verb} {what}: {exc.message}") from None
        except Unauthorized as exc:
            raise CliError(
                f"cannot {verb} {what}: the API server refused the credentials of context {self.cfg.context!r} "
                f"(401 Unauthorized: {exc.message})"
            ) from None
        except ConfigError as exc:  # an exec credential plugin failed
            raise CliError(str(exc)) from None
        except TransportError as exc:
            raise CliError(f"cannot reach the API server {self.cfg.server}: {exc or type(exc).__name__}") from None

    async def _list(self, res: Resource, namespace: str | None, params: dict[str, str]) -> list[JSON]:
        async def pages() -> list[JSON]:
            items: list[JSON] = []
            async for page in self.client.list_pages(res.collection(namespace), 500, **params):
                items += page.get("items") or []
            return items

        return await self._call("list", res.full + where(res, namespace), pages)

    async def list_optional(self, res: Resource, namespace: str | None = None, **params: str) -> list[JSON] | None:
        """`list`, or None where the apiserver does not serve `res` (404: Kubernetes' PodGroups, say)."""
        try:
            return await self._list(res, namespace, params)
        except NotFound:
            return None
        except ApiError as exc:
            raise CliError(_api_message(exc)) from None

    async def list(self, res: Resource, namespace: str | None = None, **params: str) -> list[JSON]:
        try:
            return await self._list(res, namespace, params)
        except ApiError as exc:
            raise CliError(_api_message(exc)) from None

    async def probe(self, res: Resource, namespace: str | None = None, **params: str) -> None:
        """A LIST of one item: fails (CliError) where a LIST or WATCH of `res` would be refused."""
        try:
            await self._call(
                "list",
                res.full + where(res, namespace),
                lambda: self.client.get(res.collection(namespace), limit="1", **params),
            )
        except ApiError as exc:
            raise CliError(_api_message(exc)) from None

    async def get_optional(self, res: Resource, name: str, namespace: str | None = None) -> JSON | None:
        try:
            return await self._call(
                "get", f"{res.full} {name!r}{where(res, namespace)}", lambda: self.client.get(res.item(name, namespace))
            )
        except NotFound:
            return None
        except ApiError as exc:
            raise CliError(_api_message(exc)) from None

    async def apply(self, res: Resource, body: JSON, namespace: str | None = None, *, dry_run: bool = False) -> JSON:
        """Server-side apply of `body` (the apply patch; JSON is YAML), forcing conflicts as `kubectl apply
        --server-side --force-conflicts` does; a Conflict from a resourceVersion in `body` is raised as is."""
        params = {"fieldManager": FIELD_MANAGER, "force": "true"}
        if dry_run:
            params["dryRun"] = "All"
        name = body["metadata"]["name"]
        return await self._call(
            "patch",
            f"{res.full} {name!r}{where(res, namespace)}",
            lambda: self.client.request(
                "PATCH", res.item(name, namespace), params=params, body=body, content_type=APPLY_PATCH
            ),
        )

    async def create(self, res: Resource, body: JSON, namespace: str | None = None, *, dry_run: bool = False) -> JSON:
        params = {"dryRun": "All"} if dry_run else None
        return await self._call(
            "create",
            res.full + where(res, namespace),
            lambda: self.client.request("POST", res.collection(namespace), params=params, body=body),
        )

    async def server_version(self) -> JSON:
        try:
            return await self._call("get", "the server's version", lambda: self.client.get("/version"))
        except ApiError as exc:
            raise CliError(_api_message(exc)) from None


def _api_message(exc: ApiError) -> str:
    """kubectl's `Error from server (Reason): message`, without the prefix that `error:` replaces."""
    reason = exc.reason or str(exc.status)
    return f"from server ({reason}): {exc.message}"


def api_error(exc: ApiError) -> CliError:
    return CliError(_api_message(exc))
