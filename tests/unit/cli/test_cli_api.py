"""kubectl-gpu's requests: the resources' paths agree with kube.paths, a refusal names the verb and resource, a 401
is retried once with fresh exec credentials (and only then)."""

import asyncio

import pytest

from gpu_scheduling import constants
from gpu_scheduling.cli import api
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.config import ClusterConfig
from gpu_scheduling.kube.errors import Forbidden, NotFound, Unauthorized


def test_resource_paths_are_the_projects_own():
    assert api.GPU_CLAIMS.collection("ml") == paths.gpu_claims("ml")
    assert api.GPU_CLAIMS.collection(None) == paths.ALL_GPU_CLAIMS
    assert api.GPU_CLAIMS.item("t", "ml") == paths.gpu_claim("ml", "t")
    assert api.GPU_NODE_STATUSES.item("node1") == paths.gpu_node_status("node1")
    assert api.POLICIES.item(constants.POLICY_NAME) == paths.scheduling_policy()
    assert api.PODS.collection("ml") == paths.pods("ml") and api.PODS.collection(None) == paths.ALL_PODS
    assert api.NODES.collection() == paths.NODES
    assert api.LEASES.item("x", constants.LEASE_NAMESPACE) == paths.lease(constants.LEASE_NAMESPACE, "x")
    assert api.DEPLOYMENTS.item("d", "kube-system") == paths.deployment("kube-system", "d")
    assert (api.GPU_CLAIMS.full, api.PODS.full, api.LEASES.full) == (
        "gpuclaims.gpu.scheduling",
        "pods",
        "leases.coordination.k8s.io",
    )
    assert api.Resource is paths.Resource and api.GPU_CLAIMS is paths.GPU_CLAIM  # one model, not a copy


class Plugin:
    def __init__(self) -> None:
        self.invalidated = 0

    def invalidate(self) -> None:
        self.invalidated += 1


class FakeClient:
    """Answers `get` from a list of outcomes (an exception is raised, anything else returned)."""

    def __init__(self, *outcomes) -> None:
        self.outcomes = list(outcomes)
        self.calls: list[str] = []

    async def get(self, path, **params):
        self.calls.append(path)
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


def cfg(with_plugin: bool) -> ClusterConfig:
    config = ClusterConfig(server="https://k:6443", ssl_context=False, context="ctx")
    if with_plugin:
        config.exec_plugin = Plugin()  # type: ignore[assignment]
    return config


def test_a_401_is_retried_once_with_fresh_exec_credentials():
    client = FakeClient(Unauthorized(401, "Unauthorized", "expired"), {"kind": "GpuSchedulingPolicy"})
    config = cfg(with_plugin=True)
    found = asyncio.run(api.Api(config, client).get_optional(api.POLICIES, "default"))  # type: ignore[arg-type]
    assert found == {"kind": "GpuSchedulingPolicy"}
    assert len(client.calls) == 2 and config.exec_plugin.invalidated == 1  # type: ignore[union-attr]


def test_a_401_without_exec_credentials_is_reported_naming_the_context():
    client = FakeClient(Unauthorized(401, "Unauthorized", "bad token"))
    with pytest.raises(api.CliError) as info:
        asyncio.run(api.Api(cfg(with_plugin=False), client).get_optional(api.POLICIES, "default"))  # type: ignore[arg-type]
    assert info.value.message == (
        "cannot get gpuschedulingpolicies.gpu.scheduling 'default': the API server refused the credentials of "
        "context 'ctx' (401 Unauthorized: bad token)"
    )
    assert len(client.calls) == 1


def test_a_403_names_the_verb_and_the_resource():
    message = 'pods is forbidden: User "bob" cannot list resource "pods" in API group "" in the namespace "ml"'
    client = FakeClient(Forbidden(403, "Forbidden", message))
    with pytest.raises(api.CliError) as info:
        asyncio.run(api.Api(cfg(False), client).probe(api.PODS, "ml"))  # type: ignore[arg-type]
    assert info.value.message == f'cannot list pods in namespace "ml": {message}'


def test_not_found_is_none_and_other_errors_read_as_kubectl():
    client = FakeClient(NotFound(404, "NotFound", "x"), Forbidden(403, "Forbidden", "no"))
    a = api.Api(cfg(False), client)  # type: ignore[arg-type]
    assert asyncio.run(a.get_optional(api.GPU_NODE_STATUSES, "node9")) is None
    with pytest.raises(api.CliError, match=r"cannot get gpunodestatuses\.gpu\.scheduling 'node9': no"):
        asyncio.run(a.get_optional(api.GPU_NODE_STATUSES, "node9"))
    assert api.api_error(NotFound(404, "NotFound", 'gpuclaims "x" not found')).message == (
        'from server (NotFound): gpuclaims "x" not found'
    )
