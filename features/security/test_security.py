"""Steps of features/security.feature on the KinD test-bed: the RBAC matrix of every service account the test-bed
deploys (`kubectl auth can-i --as=system:serviceaccount:<ns>:<sa>`, asserted both ways), the
ValidatingAdmissionPolicies of roles/deploy (annotations fixed at creation, Bindings, the agent's own node), the
webhook's replicas, PodDisruptionBudget and priority class, and the board's locked-down pods and HTTPS Service.

KinD tier only (@kind): the service accounts, policies and Deployments are the test-bed's (roles/deploy); on the
control-plane tier, where the components are processes of the test session, these steps skip. The shared steps
(pod creation, "runs on", the claim steps) are features/conftest.py's.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shutil
import subprocess
from typing import Any

import pytest
from pytest_bdd import given, parsers, scenarios, then, when

from features.support import (
    AGENT_DAEMONSET,
    APP_LABEL,
    CHECK_IMAGE,
    SYSTEM_NAMESPACE,
    WEBHOOK_DEPLOYMENT,
    World,
    live_pods,
    pod_ready,
)
from gpu_scheduling import constants, gpumap
from gpu_scheduling.claims import objects
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import Forbidden, TooManyRequests
from harness.wait import wait_for

scenarios("security.feature")

_ALLOCATION = (constants.ALLOCATED_ANNOTATION, constants.GPU_IDS_ANNOTATION, constants.EXCLUSIVITY_ANNOTATION)


def _kind_only(world: World) -> None:
    if not world.cluster.real_kubelets:
        pytest.skip("needs the test-bed's service accounts and admission policies (KinD tier)")


def _kubectl(kubeconfig: str) -> str:
    """The test-bed's kubectl (built at the cluster's version next to its state: <cache>/bin, the kubeconfig in
    <cache>/state/<cluster>/kubeconfig), or GPU_TEST_KUBECTL, or one on PATH."""
    if os.environ.get("GPU_TEST_KUBECTL"):
        return os.environ["GPU_TEST_KUBECTL"]
    beside = pathlib.Path(kubeconfig).resolve().parents[2] / "bin" / "kubectl"
    if beside.exists():
        return str(beside)
    found = shutil.which("kubectl")
    if not found:
        pytest.fail("no kubectl: set GPU_TEST_KUBECTL")
    return found


# ---- the RBAC matrix -----------------------------------------------------------------------------------------


@then(
    parsers.parse(
        '"kubectl auth can-i {verb} {resource}" as the service account "{account}" in {where} answers {answer}'
    )
)
def can_i(world: World, verb: str, resource: str, account: str, where: str, answer: str) -> None:
    _kind_only(world)
    kubeconfig = world.cluster.kubeconfig
    base, _, sub = resource.partition("/")
    argv = [
        _kubectl(kubeconfig),
        "--kubeconfig",
        kubeconfig,
        "auth",
        "can-i",
        verb,
        base,
        f"--as=system:serviceaccount:{account}",
    ]
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


@then(
    parsers.parse(
        'a SubjectAccessReview of "{verb} {resource}" in the API group "{group}" as the service account "{account}" '
        "in {where} answers {answer}"
    )
)
def access_review(world: World, verb: str, resource: str, group: str, account: str, where: str, answer: str) -> None:
    """The authorizer's answer for a resource the apiserver may not serve (Kubernetes' PodGroups, where the gang
    API's gate is off): `kubectl auth can-i` resolves the resource through discovery first, and for one not served
    asks about another resource, so this asks the authorizer directly, as can-i's impersonated review would."""
    _kind_only(world)
    namespace, _, name = account.partition(":")
    base, _, sub = resource.partition("/")
    attributes = {"verb": verb, "group": group, "resource": base, "subresource": sub}
    if where not in ("all namespaces", "the cluster"):
        attributes["namespace"] = where
    review = {
        "apiVersion": paths.SUBJECT_ACCESS_REVIEW.api_version,
        "kind": paths.SUBJECT_ACCESS_REVIEW.kind,
        "spec": {
            "user": f"system:serviceaccount:{namespace}:{name}",
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
            "resourceAttributes": attributes,
        },
    }
    status = (world.api.create(paths.SUBJECT_ACCESS_REVIEWS, review) or {}).get("status") or {}
    assert not status.get("evaluationError"), status
    said = "yes" if status.get("allowed") else "no"
    assert said == answer, f"{verb} {resource}.{group} in {where} as {account}: {said}, expected {answer} ({status})"


# ---- the board's pods and Service ------------------------------------------------------------------------------


@then(
    parsers.parse(
        'every pod of the Deployment "{name}" in {namespace} is ready, runs as uid 1000 and non-root with the '
        "RuntimeDefault seccomp profile, a read-only root filesystem, no privilege escalation and no capabilities"
    )
)
def deployment_locked_down(world: World, name: str, namespace: str) -> None:
    """What the apiserver holds for the running pods (not the chart's text): the pod's and every container's
    security context."""
    _kind_only(world)

    def ready() -> list[dict[str, Any]] | None:
        pods = live_pods(world, namespace, name)
        return pods if pods and all(pod_ready(p) for p in pods) else None

    for pod in wait_for(f"ready {name} pods", ready, timeout=120):
        spec, pod_name = pod["spec"], pod["metadata"]["name"]
        sc = spec.get("securityContext") or {}
        assert sc.get("runAsNonRoot") is True and sc.get("runAsUser") == 1000, (pod_name, sc)
        assert sc.get("seccompProfile") == {"type": "RuntimeDefault"}, (pod_name, sc)
        for c in [*spec.get("initContainers", []), *spec["containers"]]:
            csc = c.get("securityContext") or {}
            assert csc.get("readOnlyRootFilesystem") is True, (pod_name, c["name"], csc)
            assert csc.get("allowPrivilegeEscalation") is False, (pod_name, c["name"], csc)
            assert csc.get("capabilities", {}).get("drop") == ["ALL"], (pod_name, c["name"], csc)
            assert not csc.get("capabilities", {}).get("add") and not csc.get("privileged"), (pod_name, c["name"])


@then(parsers.parse('the Service "{name}" in {namespace} serves HTTPS only, on its port named "{port}"'))
def service_https_only(world: World, name: str, namespace: str, port: str) -> None:
    _kind_only(world)
    # kube.paths has no Service path (no program reads one): the core API's, as features/board reads it too.
    service = world.api.get(f"{paths.CORE_API}/namespaces/{namespace}/services/{name}")
    assert [p["name"] for p in service["spec"]["ports"]] == [port], service["spec"]["ports"]
    # The port it targets is the pods' only one, probed over HTTPS: nothing of the board is served in plain HTTP.
    assert [p["targetPort"] for p in service["spec"]["ports"]] == [port], service["spec"]["ports"]
    for pod in live_pods(world, namespace, name):
        (c,) = pod["spec"]["containers"]
        assert [p["name"] for p in c["ports"]] == [port], c["ports"]
        probe = c["readinessProbe"]["httpGet"]
        assert probe["scheme"] == "HTTPS" and probe["port"] == port, probe


# ---- annotations fixed at creation -----------------------------------------------------------------------------


@pytest.fixture
def allocations() -> dict[str, str]:
    """Pod name -> its allocation annotations as it was bound (JSON), for a later step to compare."""
    return {}


@when(parsers.parse('the annotation "{key}" of the pod "{name}" is set to "{value}"'))
def set_annotation(world: World, key: str, name: str, value: str) -> None:
    _kind_only(world)
    world.attempt(
        lambda: world.api.patch(paths.pod(world.namespace, name), {"metadata": {"annotations": {key: value}}})
    )


@when(parsers.parse('the annotation "{key}" of the pod "{name}" is removed'))
def remove_annotation(world: World, key: str, name: str) -> None:
    _kind_only(world)
    world.attempt(lambda: world.api.patch(paths.pod(world.namespace, name), {"metadata": {"annotations": {key: None}}}))


@when(parsers.parse('the annotation "{key}" of the pod "{name}" is set to "{value}" through the status subresource'))
def set_annotation_through_status(world: World, key: str, name: str, value: str) -> None:
    _kind_only(world)
    world.attempt(
        lambda: world.api.patch(paths.pod_status(world.namespace, name), {"metadata": {"annotations": {key: value}}})
    )


@when(parsers.parse('the label "{key}" of the pod "{name}" is set to "{value}"'))
def set_label(world: World, key: str, name: str, value: str) -> None:
    world.attempt(lambda: world.api.patch(paths.pod(world.namespace, name), {"metadata": {"labels": {key: value}}}))


@when(parsers.parse('the condition "{kind}" of the pod "{name}" is set through the status subresource'))
def set_condition(world: World, kind: str, name: str) -> None:
    condition = {"type": kind, "status": "True", "reason": "Checked", "message": "set by features/security.feature"}
    world.attempt(
        lambda: world.api.patch(
            paths.pod_status(world.namespace, name), {"status": {"conditions": [condition]}}, kind="strategic"
        )
    )


@then(parsers.parse('the change is refused with a message containing "{fragment}"'))
def change_refused(world: World, fragment: str) -> None:
    assert world.error is not None, "the change was accepted, expected a refusal"
    assert isinstance(world.error, Forbidden), world.error
    assert fragment in world.error.message, world.error.message


@then("the change is accepted")
def change_accepted(world: World) -> None:
    assert world.error is None, world.error


@when(
    parsers.parse(
        'the pod "{name}" for scheduler "{scheduler}" is created with the annotation "{key}" set to "{value}"'
    )
)
def create_annotated_pod(world: World, name: str, scheduler: str, key: str, value: str) -> None:
    _kind_only(world)
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {key: value}},
        "spec": {
            "schedulerName": scheduler,
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "containers": [{"name": "check", "image": CHECK_IMAGE, "imagePullPolicy": "IfNotPresent"}],
        },
    }
    world.attempt(lambda: world.api.create(paths.pods(world.namespace), body))


def _bind(world: World, name: str, node: str, annotations: dict[str, str] | None) -> None:
    pod = world.api.get(paths.pod(world.namespace, name))
    meta: dict[str, Any] = {"name": name, "namespace": world.namespace, "uid": pod["metadata"]["uid"]}
    if annotations:
        meta["annotations"] = annotations
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": meta,
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    world.attempt(lambda: world.api.create(paths.pod_binding(world.namespace, name), body))


@when(
    parsers.parse('the administrator binds the pod "{name}" to {node:w} with the annotation "{key}" set to "{value}"')
)
def bind_with_annotation(world: World, name: str, node: str, key: str, value: str) -> None:
    _kind_only(world)
    _bind(world, name, node, {key: value})


@when(parsers.parse('the administrator binds the pod "{name}" to {node:w}'))
def bind_plain(world: World, name: str, node: str) -> None:
    _kind_only(world)
    _bind(world, name, node, None)


@then(parsers.parse('the pod "{name}" is bound to {node:w}'))
def bound_to(world: World, name: str, node: str) -> None:
    pod = world.api.get(paths.pod(world.namespace, name))
    assert pod["spec"].get("nodeName") == node, pod["spec"].get("nodeName")
    assert not set(_ALLOCATION) & set(pod["metadata"].get("annotations") or {}), pod["metadata"]


@then(parsers.parse('the pod "{name}" is bound to {node:w} with its allocation annotations'))
def bound_with_allocation(world: World, allocations: dict[str, str], name: str, node: str) -> None:
    def bound() -> dict[str, Any] | None:
        pod = world.api.get(paths.pod(world.namespace, name))
        return pod if pod["spec"].get("nodeName") else None

    pod = wait_for(f"pod {name} bound", bound, timeout=60)
    annotations = pod["metadata"].get("annotations") or {}
    assert pod["spec"]["nodeName"] == node, pod["spec"]["nodeName"]
    assert all(key in annotations for key in _ALLOCATION), annotations
    assert annotations[constants.ALLOCATED_ANNOTATION].startswith(f"{node}:"), annotations
    allocations[name] = json.dumps({k: annotations[k] for k in _ALLOCATION}, sort_keys=True)


@then(parsers.parse('the pod "{name}" keeps the allocation annotations it was bound with'))
def keeps_allocation(world: World, allocations: dict[str, str], name: str) -> None:
    annotations = world.api.get(paths.pod(world.namespace, name))["metadata"].get("annotations") or {}
    now = json.dumps({k: annotations.get(k) for k in _ALLOCATION}, sort_keys=True)
    assert now == allocations[name], (now, allocations[name])


# ---- the agent's own node --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class AgentToken:
    """A token of the agent's service account that a Given asked for, and the pod it is bound to ("" for none)."""

    token: str
    bound_pod: str = ""


def _token_request(world: World, pod: dict[str, Any] | None) -> str:
    spec: dict[str, Any] = {"expirationSeconds": 600}
    if pod is not None:
        spec["boundObjectRef"] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": pod["metadata"]["name"],
            "uid": pod["metadata"]["uid"],
        }
    review = world.api.create(
        paths.service_account_token(SYSTEM_NAMESPACE, AGENT_DAEMONSET),
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
    )
    return review["status"]["token"]


@given(
    parsers.parse('a token of the service account "{account}" bound to its pod on {node}, as the kubelet gives it'),
    target_fixture="agent_token",
)
def agent_token(world: World, account: str, node: str) -> AgentToken:
    _kind_only(world)
    assert account == AGENT_DAEMONSET, account
    pods = [p for p in live_pods(world, SYSTEM_NAMESPACE, AGENT_DAEMONSET) if p["spec"].get("nodeName") == node]
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    return AgentToken(_token_request(world, pods[0]), pods[0]["metadata"]["name"])


@given(parsers.parse('a token of the service account "{account}" bound to no pod'), target_fixture="agent_token")
def unbound_token(world: World, account: str) -> AgentToken:
    _kind_only(world)
    assert account == AGENT_DAEMONSET, account
    return AgentToken(_token_request(world, None))


# The requests below go with the agent's token alone (no client certificate, which the apiserver would prefer):
# who writes is what the admission policy decides on, so these GpuNodeStatus writes are the agent's own.


@then(parsers.parse("the apiserver authenticates that token with the node name {node}"))
def token_node(world: World, agent_token: AgentToken, node: str) -> None:
    review = world.api.as_token(agent_token.token).create(
        paths.SELF_SUBJECT_REVIEWS, {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    )
    assert review is not None
    user = review["status"]["userInfo"]
    assert user["username"] == f"system:serviceaccount:{SYSTEM_NAMESPACE}:{AGENT_DAEMONSET}", user
    assert user.get("extra", {}).get("authentication.kubernetes.io/node-name") == [node], user
    assert user["extra"].get("authentication.kubernetes.io/pod-name") == [agent_token.bound_pod], user


@when(parsers.parse('that token writes the status of the GpuNodeStatus "{name}"'))
def token_writes_status(world: World, agent_token: AgentToken, name: str) -> None:
    # What the agent itself writes: the status as it is (read by the administrator), so an accepted write changes
    # nothing the scheduler sees.
    current = world.api.get(paths.gpu_node_status(name)).get("status") or {}
    agent = world.api.as_token(agent_token.token)
    world.attempt(lambda: agent.patch(paths.gpu_node_status_status(name), {"status": current}))


@when(parsers.parse('that token creates the GpuNodeStatus "{name}" for node "{node}"'))
def token_creates(world: World, agent_token: AgentToken, name: str, node: str) -> None:
    body = objects.node_status_body(name)
    body["spec"]["nodeName"] = node
    agent = world.api.as_token(agent_token.token)
    world.attempt(lambda: agent.create(paths.NODE_STATUSES, body))


# ---- the webhook's availability --------------------------------------------------------------------------------


def _webhook_pods(world: World) -> list[dict[str, Any]]:
    return live_pods(world, SYSTEM_NAMESPACE, WEBHOOK_DEPLOYMENT)


def _webhook_budget(world: World) -> dict[str, Any]:
    return world.api.get(paths.pod_disruption_budget(SYSTEM_NAMESPACE, WEBHOOK_DEPLOYMENT))


@then(
    parsers.parse(
        'the webhook Deployment has {replicas:d} ready replicas on different nodes with priority class "{priority}"'
    )
)
def webhook_replicas(world: World, replicas: int, priority: str) -> None:
    _kind_only(world)

    def settled() -> list[dict[str, Any]] | None:
        pods = _webhook_pods(world)
        return pods if len(pods) == replicas and all(pod_ready(p) for p in pods) else None

    pods = wait_for(f"{replicas} ready {WEBHOOK_DEPLOYMENT} pods", settled, timeout=120)
    nodes = [p["spec"]["nodeName"] for p in pods]
    assert len(set(nodes)) == replicas, nodes
    assert all(p["spec"].get("priorityClassName") == priority for p in pods), [
        p["spec"].get("priorityClassName") for p in pods
    ]
    pdb = _webhook_budget(world)
    assert pdb["spec"]["minAvailable"] == 1, pdb["spec"]


def _evict(world: World, name: str) -> None:
    world.api.create(
        paths.pod_eviction(SYSTEM_NAMESPACE, name),
        {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": SYSTEM_NAMESPACE}},
    )


@when("one webhook pod is evicted", target_fixture="evicted_webhook_pod")
def evict_one(world: World) -> str:
    _kind_only(world)
    # The PodDisruptionBudget controller must have counted both replicas healthy first.
    wait_for(
        "the webhook's PodDisruptionBudget allowing a disruption",
        lambda: _webhook_budget(world).get("status", {}).get("disruptionsAllowed", 0) >= 1,
        timeout=60,
    )
    pod = min(p["metadata"]["name"] for p in _webhook_pods(world))
    _evict(world, pod)
    return pod


@then("evicting the other webhook pod at once is refused by the PodDisruptionBudget")
def evict_other_refused(world: World, evicted_webhook_pod: str) -> None:
    others = [
        p["metadata"]["name"]
        for p in _webhook_pods(world)
        if p["metadata"]["name"] != evicted_webhook_pod and pod_ready(p)
    ]
    assert others, "no other ready webhook pod"
    with pytest.raises(TooManyRequests) as refused:
        _evict(world, others[0])
    assert "disruption budget" in refused.value.message, refused.value.message


@then(
    parsers.parse(
        'every pod of the deployed StatefulSet "{name}" in namespace "{namespace}" runs on the node its map names'
    )
)
def deployed_on_mapped_nodes(world: World, name: str, namespace: str) -> None:
    sts = world.api.get(paths.statefulset(namespace, name))
    parsed = gpumap.parse(sts["spec"]["template"]["metadata"]["annotations"][constants.MAP_ANNOTATION])
    pods = world.api.pods(namespace, labelSelector=f"{APP_LABEL}={name}")
    assert len(pods) == sts["spec"]["replicas"], [p["metadata"]["name"] for p in pods]
    for pod in pods:
        entry = parsed.entry_for(gpumap.pod_index(pod["metadata"]))
        assert pod["spec"].get("nodeName") == entry.node, (pod["metadata"]["name"], pod["spec"].get("nodeName"))
        assert pod["status"].get("phase") == "Running", (pod["metadata"]["name"], pod["status"].get("phase"))
