"""Steps of features/security.feature on the KinD test-bed: the RBAC matrix of every service account the test-bed
deploys (`kubectl auth can-i --as=system:serviceaccount:<ns>:<sa>`, asserted both ways), the
ValidatingAdmissionPolicies of roles/deploy (annotations fixed at creation, Bindings, the agent's own node), and
the webhook's replicas, PodDisruptionBudget and priority class.

KinD tier only: the service accounts, policies and Deployments are the test-bed's (roles/deploy); on the
control-plane tier, where the components are processes of the test session, these steps skip.

Imported into features/conftest.py (`from features.steps_security import *`), so it must not import that module
at run time; it reuses the shared steps (pod creation, "runs on", the claim steps) through the Gherkin text. Names
that the star import should not carry start with an underscore.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shutil
import subprocess
from typing import TYPE_CHECKING, Any

import pytest
from pytest_bdd import given, parsers, then, when

from gpu_scheduling import constants, gpumap
from tests.harness.api import Api, ApiError, wait_for

if TYPE_CHECKING:
    from features.conftest import World

# Where roles/deploy puts things (its defaults deploy_system_namespace, deploy_webhook_name, deploy_agent_name).
_SYSTEM_NAMESPACE = "kube-system"
_WEBHOOK = "cuda-env-webhook"
_AGENT = "gpu-inventory-agent"
_GNS = f"/apis/{constants.CLAIM_GROUP}/{constants.CLAIM_VERSION}/gpunodestatuses"
_ALLOCATION = (constants.ALLOCATED_ANNOTATION, constants.GPU_IDS_ANNOTATION, constants.EXCLUSIVITY_ANNOTATION)


def _parse(text: str) -> parsers.StepParser:
    return parsers.parse(text)


def _kind_only(world: World) -> None:
    if not world.cluster.real_kubelets:
        pytest.skip("needs the test-bed's service accounts and admission policies (KinD tier)")


def _kubectl() -> str:
    """The test-bed's kubectl (built at the cluster's version next to its state: <cache>/bin, the kubeconfig in
    <cache>/state/<cluster>/kubeconfig), or GPU_TEST_KUBECTL, or one on PATH."""
    if os.environ.get("GPU_TEST_KUBECTL"):
        return os.environ["GPU_TEST_KUBECTL"]
    kubeconfig = os.environ.get("GPU_TEST_KUBECONFIG", "")
    if kubeconfig:
        beside = pathlib.Path(kubeconfig).resolve().parents[2] / "bin" / "kubectl"
        if beside.exists():
            return str(beside)
    found = shutil.which("kubectl")
    if not found:
        pytest.fail("no kubectl: set GPU_TEST_KUBECTL")
    return found


@dataclasses.dataclass
class SecurityState:
    """A service-account token the scenario asked for, and the last refusal seen."""

    token: str = ""
    bound_pod: str = ""
    evicted: str = ""


@pytest.fixture
def security() -> SecurityState:
    return SecurityState()


# ---- the RBAC matrix -----------------------------------------------------------------------------------------

@then(_parse('"kubectl auth can-i {verb} {resource}" as the service account "{account}" in {where} answers {answer}'))
def can_i(world: World, verb: str, resource: str, account: str, where: str, answer: str) -> None:
    _kind_only(world)
    kubeconfig = os.environ["GPU_TEST_KUBECONFIG"]
    base, _, sub = resource.partition("/")
    argv = [_kubectl(), "--kubeconfig", kubeconfig, "auth", "can-i", verb, base,
            f"--as=system:serviceaccount:{account}"]
    if sub:
        argv.append(f"--subresource={sub}")
    if where in ("all namespaces", "the cluster"):  # cluster-scoped, or every namespace at once
        argv.append("--all-namespaces")
    else:
        argv += ["--namespace", where]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    said = done.stdout.strip().split()[0] if done.stdout.strip() else ""
    # can-i exits 0 for yes and 1 for no; anything else (a typo in the table, an unknown resource) is an error.
    assert said in ("yes", "no") and done.returncode == (0 if said == "yes" else 1), (argv, done.stdout, done.stderr)
    assert "Warning" not in done.stderr, (argv, done.stderr)  # e.g. "the server doesn't have a resource type"
    assert said == answer, f"{' '.join(argv[3:])}: {said}, expected {answer}"


# ---- annotations fixed at creation -----------------------------------------------------------------------------

def _pod_path(world: World, name: str) -> str:
    return f"/api/v1/namespaces/{world.namespace}/pods/{name}"


def _try(world: World, write: Any) -> None:
    try:
        write()
        world.error = None
    except ApiError as exc:
        world.error = exc


@when(_parse('the annotation "{key}" of the pod "{name}" is set to "{value}"'))
def set_annotation(world: World, key: str, name: str, value: str) -> None:
    _kind_only(world)
    _try(world, lambda: world.api.patch(_pod_path(world, name), {"metadata": {"annotations": {key: value}}}))


@when(_parse('the annotation "{key}" of the pod "{name}" is removed'))
def remove_annotation(world: World, key: str, name: str) -> None:
    _kind_only(world)
    _try(world, lambda: world.api.patch(_pod_path(world, name), {"metadata": {"annotations": {key: None}}}))


@when(_parse('the annotation "{key}" of the pod "{name}" is set to "{value}" through the status subresource'))
def set_annotation_through_status(world: World, key: str, name: str, value: str) -> None:
    _kind_only(world)
    _try(world, lambda: world.api.patch(f"{_pod_path(world, name)}/status",
                                        {"metadata": {"annotations": {key: value}}}))


@when(_parse('the label "{key}" of the pod "{name}" is set to "{value}"'))
def set_label(world: World, key: str, name: str, value: str) -> None:
    _try(world, lambda: world.api.patch(_pod_path(world, name), {"metadata": {"labels": {key: value}}}))


@when(_parse('the condition "{kind}" of the pod "{name}" is set through the status subresource'))
def set_condition(world: World, kind: str, name: str) -> None:
    condition = {"type": kind, "status": "True", "reason": "Checked", "message": "set by features/security.feature"}
    _try(world, lambda: world.api.patch(f"{_pod_path(world, name)}/status",
                                        {"status": {"conditions": [condition]}}, kind="strategic"))


@then(_parse('the change is refused with a message containing "{fragment}"'))
def change_refused(world: World, fragment: str) -> None:
    assert world.error is not None, "the change was accepted, expected a refusal"
    assert world.error.status == 403, world.error
    assert fragment in world.error.message, world.error.message


@then("the change is accepted")
def change_accepted(world: World) -> None:
    assert world.error is None, world.error


@when(_parse('the pod "{name}" for scheduler "{scheduler}" is created with the annotation "{key}" set to "{value}"'))
def create_annotated_pod(world: World, name: str, scheduler: str, key: str, value: str) -> None:
    _kind_only(world)
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": {key: value}},
            "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
                     "automountServiceAccountToken": False,
                     "containers": [{"name": "check", "image": os.environ.get("GPU_TEST_CHECK_IMAGE", "check:dev"),
                                     "imagePullPolicy": "IfNotPresent"}]}}
    _try(world, lambda: world.api.create(f"/api/v1/namespaces/{world.namespace}/pods", body))


def _bind(world: World, name: str, node: str, annotations: dict[str, str] | None) -> None:
    pod = world.api.get(_pod_path(world, name))
    meta: dict[str, Any] = {"name": name, "namespace": world.namespace, "uid": pod["metadata"]["uid"]}
    if annotations:
        meta["annotations"] = annotations
    body = {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
    _try(world, lambda: world.api.create(f"{_pod_path(world, name)}/binding", body))


@when(_parse('the administrator binds the pod "{name}" to {node:w} with the annotation "{key}" set to "{value}"'))
def bind_with_annotation(world: World, name: str, node: str, key: str, value: str) -> None:
    _kind_only(world)
    _bind(world, name, node, {key: value})


@when(_parse('the administrator binds the pod "{name}" to {node:w}'))
def bind_plain(world: World, name: str, node: str) -> None:
    _kind_only(world)
    _bind(world, name, node, None)


@then(_parse('the pod "{name}" is bound to {node:w}'))
def bound_to(world: World, name: str, node: str) -> None:
    pod = world.api.get(_pod_path(world, name))
    assert pod["spec"].get("nodeName") == node, pod["spec"].get("nodeName")
    assert not set(_ALLOCATION) & set(pod["metadata"].get("annotations") or {}), pod["metadata"]


@then(_parse('the pod "{name}" is bound to {node:w} with its allocation annotations'))
def bound_with_allocation(world: World, name: str, node: str) -> None:
    def bound() -> dict[str, Any] | None:
        pod = world.api.get(_pod_path(world, name))
        return pod if pod["spec"].get("nodeName") else None

    pod = wait_for(f"pod {name} bound", bound, timeout=60)
    annotations = pod["metadata"].get("annotations") or {}
    assert pod["spec"]["nodeName"] == node, pod["spec"]["nodeName"]
    assert all(key in annotations for key in _ALLOCATION), annotations
    assert annotations[constants.ALLOCATED_ANNOTATION].startswith(f"{node}:"), annotations
    world.snapshot[name] = (json.dumps({k: annotations[k] for k in _ALLOCATION}, sort_keys=True), node)


@then(_parse('the pod "{name}" keeps the allocation annotations it was bound with'))
def keeps_allocation(world: World, name: str) -> None:
    annotations = world.api.get(_pod_path(world, name))["metadata"].get("annotations") or {}
    now = json.dumps({k: annotations.get(k) for k in _ALLOCATION}, sort_keys=True)
    assert now == world.snapshot[name][0], (now, world.snapshot[name][0])


# ---- the agent's own node --------------------------------------------------------------------------------------

def _token_request(world: World, pod: dict[str, Any] | None) -> str:
    spec: dict[str, Any] = {"expirationSeconds": 600}
    if pod is not None:
        spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"],
                                  "uid": pod["metadata"]["uid"]}
    review = world.api.create(f"/api/v1/namespaces/{_SYSTEM_NAMESPACE}/serviceaccounts/{_AGENT}/token",
                              {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec})
    return review["status"]["token"]


@given(_parse('a token of the service account "{account}" bound to its pod on {node}, as the kubelet gives it'))
def agent_token(world: World, security: SecurityState, account: str, node: str) -> None:
    _kind_only(world)
    assert account == _AGENT, account
    pods = [p for p in world.api.pods(_SYSTEM_NAMESPACE, labelSelector=f"app={_AGENT}")
            if p["spec"].get("nodeName") == node and not p["metadata"].get("deletionTimestamp")]
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    security.token, security.bound_pod = _token_request(world, pods[0]), pods[0]["metadata"]["name"]


@given(_parse('a token of the service account "{account}" bound to no pod'))
def unbound_token(world: World, security: SecurityState, account: str) -> None:
    _kind_only(world)
    assert account == _AGENT, account
    security.token = _token_request(world, None)


def _as_token(token: str, method: str, path: str, body: Any = None,
              content_type: str = "application/json") -> dict[str, Any]:
    """A request with only the bearer token (no client certificate, which the apiserver would prefer)."""
    return Api(os.environ["GPU_TEST_KUBECONFIG"]).as_token(token).request(method, path, body,
                                                                          content_type=content_type)


@then(_parse("the apiserver authenticates that token with the node name {node}"))
def token_node(world: World, security: SecurityState, node: str) -> None:
    review = _as_token(security.token, "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                       {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    user = review["status"]["userInfo"]
    assert user["username"] == f"system:serviceaccount:{_SYSTEM_NAMESPACE}:{_AGENT}", user
    assert user.get("extra", {}).get("authentication.kubernetes.io/node-name") == [node], user
    assert user["extra"].get("authentication.kubernetes.io/pod-name") == [security.bound_pod], user


@when(_parse('that token writes the status of the GpuNodeStatus "{name}"'))
def token_writes_status(world: World, security: SecurityState, name: str) -> None:
    # What the agent itself writes: the status as it is (read by the administrator), so an accepted write changes
    # nothing the scheduler sees.
    current = world.api.get(f"{_GNS}/{name}").get("status") or {}
    _try(world, lambda: _as_token(security.token, "PATCH", f"{_GNS}/{name}/status", {"status": current},
                                  content_type="application/merge-patch+json"))


@when(_parse('that token creates the GpuNodeStatus "{name}" for node "{node}"'))
def token_creates(world: World, security: SecurityState, name: str, node: str) -> None:
    body = {"apiVersion": f"{constants.CLAIM_GROUP}/{constants.CLAIM_VERSION}", "kind": "GpuNodeStatus",
            "metadata": {"name": name}, "spec": {"nodeName": node}}
    _try(world, lambda: _as_token(security.token, "POST", _GNS, body))


# ---- the webhook's availability --------------------------------------------------------------------------------

def _webhook_pods(world: World) -> list[dict[str, Any]]:
    return [p for p in world.api.pods(_SYSTEM_NAMESPACE, labelSelector=f"app={_WEBHOOK}")
            if not p["metadata"].get("deletionTimestamp")]


def _ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


@then(_parse('the webhook Deployment has {replicas:d} ready replicas on different nodes with priority class '
             '"{priority}"'))
def webhook_replicas(world: World, replicas: int, priority: str) -> None:
    _kind_only(world)

    def settled() -> list[dict[str, Any]] | None:
        pods = _webhook_pods(world)
        return pods if len(pods) == replicas and all(_ready(p) for p in pods) else None

    pods = wait_for(f"{replicas} ready {_WEBHOOK} pods", settled, timeout=120)
    nodes = [p["spec"]["nodeName"] for p in pods]
    assert len(set(nodes)) == replicas, nodes
    assert all(p["spec"].get("priorityClassName") == priority for p in pods), [p["spec"].get("priorityClassName")
                                                                               for p in pods]
    pdb = world.api.get(f"/apis/policy/v1/namespaces/{_SYSTEM_NAMESPACE}/poddisruptionbudgets/{_WEBHOOK}")
    assert pdb["spec"]["minAvailable"] == 1, pdb["spec"]


def _evict(world: World, name: str) -> None:
    world.api.create(f"/api/v1/namespaces/{_SYSTEM_NAMESPACE}/pods/{name}/eviction",
                     {"apiVersion": "policy/v1", "kind": "Eviction",
                      "metadata": {"name": name, "namespace": _SYSTEM_NAMESPACE}})


@when("one webhook pod is evicted")
def evict_one(world: World, security: SecurityState) -> None:
    _kind_only(world)
    # The PodDisruptionBudget controller must have counted both replicas healthy first.
    wait_for("the webhook's PodDisruptionBudget allowing a disruption",
             lambda: world.api.get(f"/apis/policy/v1/namespaces/{_SYSTEM_NAMESPACE}/poddisruptionbudgets/{_WEBHOOK}")
             .get("status", {}).get("disruptionsAllowed", 0) >= 1, timeout=60)
    pod = sorted(p["metadata"]["name"] for p in _webhook_pods(world))[0]
    _evict(world, pod)
    security.evicted = pod


@then("evicting the other webhook pod at once is refused by the PodDisruptionBudget")
def evict_other_refused(world: World, security: SecurityState) -> None:
    others = [p["metadata"]["name"] for p in _webhook_pods(world)
              if p["metadata"]["name"] != security.evicted and _ready(p)]
    assert others, "no other ready webhook pod"
    with pytest.raises(ApiError) as refused:
        _evict(world, others[0])
    assert refused.value.status == 429, refused.value
    assert "disruption budget" in refused.value.message, refused.value.message


@then(_parse('every pod of the deployed StatefulSet "{name}" in namespace "{namespace}" runs on the node its map '
             'names'))
def deployed_on_mapped_nodes(world: World, name: str, namespace: str) -> None:
    sts = world.api.get(f"/apis/apps/v1/namespaces/{namespace}/statefulsets/{name}")
    parsed = gpumap.parse(sts["spec"]["template"]["metadata"]["annotations"][constants.MAP_ANNOTATION])
    pods = [p for p in world.api.pods(namespace, labelSelector=f"app={name}")]
    assert len(pods) == sts["spec"]["replicas"], [p["metadata"]["name"] for p in pods]
    for pod in pods:
        entry = parsed.entry_for(gpumap.pod_index(pod["metadata"]))
        assert pod["spec"].get("nodeName") == entry.node, (pod["metadata"]["name"], pod["spec"].get("nodeName"))
        assert pod["status"].get("phase") == "Running", (pod["metadata"]["name"], pod["status"].get("phase"))
