"""The Helm chart charts/gpu-scheduler, with the real helm (hack/toolchain.py builds it; nothing reaches a cluster):
`helm lint --strict` with its defaults and with each ci/*-values.yaml; `helm template` with each of them, every
document valid against the pinned Kubernetes OpenAPI schemas (harness/openapi.py) and doing what its values say;
the values the schema or the templates refuse, each naming the value; the programs accepting the arguments the
chart gives them; every value documented, in the schema and set by a ci file.

tests/unit/testbed/test_constants.py checks the keys, the RBAC, the policies and the webhook configuration of the
defaults.
"""

from __future__ import annotations

import base64
import copy
import datetime
import functools
import hashlib
import json
import re
import subprocess
import sys
import tarfile
import tomllib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from gpu_scheduling import constants
from gpu_scheduling.agent import inventory
from harness import manifests, openapi

CHART = manifests.CHART
ROOT = CHART.parents[1]
CI_DIR = CHART / "ci"
CI = sorted(p.name for p in CI_DIR.glob("*.yaml"))
DEFAULTS = manifests.chart_defaults()
APP_VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
NAMESPACE = "kube-system"  # where the test-bed installs the chart
SCHEDULER = constants.DEFAULT_SCHEDULER_NAME
WEBHOOK = DEFAULTS["webhook"]["name"]
AGENT = DEFAULTS["agent"]["name"]
BOARD = constants.BOARD_NAME
TLS_SECRET = constants.WEBHOOK_TLS_SECRET
CHECKSUM = "gpu-scheduling.io/tls-checksum"
#: Kinds that live in no namespace.
CLUSTER_KINDS = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "MutatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "FlowSchema",
    "CustomResourceDefinition",
}
#: Values whose value is a map or a list given as a whole (resources, node labels, tolerations, labels): one value
#: each.
WHOLE_VALUES = {"resources", "nodeSelector", "tolerations", "labels"}
DASHBOARD_FILE = CHART / "dashboards" / "gpu-scheduling.json"
DASHBOARD = "gpu-scheduling-dashboard"
SERVICE_MONITOR = "gpu-scheduling"
METRICS_LABEL = {"gpu-scheduling.io/metrics": "true"}
#: The RBAC kinds: monitoring adds none (Prometheus and Grafana's sidecar read with their own rights).
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
#: A minimal CustomResourceDefinition of the Prometheus Operator's ServiceMonitor (monitoring.coreos.com/v1): the
#: fields the chart sets, with their types and forms as the operator's own CRD has them, and unknown fields refused
#: (the pinned Kubernetes schemas of harness/openapi.py know no ServiceMonitor, and the chart ships no such CRD).
DURATION = "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
_KEY_REF = {
    "type": "object",
    "required": ["key"],
    "properties": {"name": {"type": "string"}, "key": {"type": "string"}, "optional": {"type": "boolean"}},
}
_LABEL_SELECTOR = {
    "type": "object",
    "properties": {
        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
        "matchExpressions": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["key", "operator"],
                "properties": {
                    "key": {"type": "string"},
                    "operator": {"type": "string"},
                    "values": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
    },
}
SERVICE_MONITOR_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
    "spec": {
        "group": "monitoring.coreos.com",
        "names": {"kind": "ServiceMonitor", "plural": "servicemonitors", "singular": "servicemonitor"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "required": ["spec"],
                        "properties": {
                            "apiVersion": {"type": "string"},
                            "kind": {"type": "string"},
                            "metadata": {"type": "object"},
                            "spec": {
                                "type": "object",
                                "required": ["selector"],
                                "properties": {
                                    "jobLabel": {"type": "string"},
                                    "namespaceSelector": {
                                        "type": "object",
                                        "properties": {
                                            "any": {"type": "boolean"},
                                            "matchNames": {"type": "array", "items": {"type": "string"}},
                                        },
                                    },
                                    "selector": _LABEL_SELECTOR,
                                    "endpoints": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "properties": {
                                                "port": {"type": "string"},
                                                "path": {"type": "string"},
                                                "scheme": {"type": "string", "enum": ["http", "https"]},
                                                "interval": {"type": "string", "pattern": DURATION},
                                                "scrapeTimeout": {"type": "string", "pattern": DURATION},
                                                "honorLabels": {"type": "boolean"},
                                                "tlsConfig": {
                                                    "type": "object",
                                                    "properties": {
                                                        "ca": {
                                                            "type": "object",
                                                            "properties": {"configMap": _KEY_REF, "secret": _KEY_REF},
                                                        },
                                                        "serverName": {"type": "string"},
                                                        "insecureSkipVerify": {"type": "boolean"},
                                                    },
                                                },
                                            },
                                        },
                                    },
                                },
                            },
                        },
                    }
                },
            }
        ],
    },
}


@functools.cache
def _rendered(ci: str | None, namespace: str = NAMESPACE) -> tuple[dict[str, Any], ...]:
    return tuple(manifests.render(values_files=[CI_DIR / ci] if ci else [], namespace=namespace))


def render(ci: str | None = None, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """The chart's documents with a ci values file (None: the defaults), once per session, a fresh copy each call."""
    return copy.deepcopy(list(_rendered(ci, namespace)))


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (doc,) = find(docs, kind, name)
    return doc


def container(docs: list[dict[str, Any]], kind: str, name: str, container_name: str | None = None) -> dict[str, Any]:
    """The workload's one container, or (the agent's pods, which also run gpu-device-plugin) the one named so."""
    containers = one(docs, kind, name)["spec"]["template"]["spec"]["containers"]
    if kind == "DaemonSet" and container_name is None:
        container_name = "agent"
    if container_name is not None:
        (c,) = [c for c in containers if c["name"] == container_name]
        return c
    (c,) = containers
    return c


def helm_fails(*args: str, values: dict[str, Any] | None = None) -> str:
    """helm template's message when it refuses (the test fails when it renders)."""
    with pytest.raises(manifests.HelmError) as refused:
        command = ["template", "t", str(CHART), "--namespace", NAMESPACE, *args, "--values", "-"]
        manifests.helm(*command, stdin=json.dumps(values or {}))
    return str(refused.value)


def leaves(values: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted path, value) of every value: a mapping's entries, down to the values of WHOLE_VALUES and scalars."""
    if isinstance(values, dict) and prefix.rsplit(".", 1)[-1] not in WHOLE_VALUES and (values or not prefix):
        for key, value in values.items():
            yield from leaves(value, f"{prefix}.{key}" if prefix else key)
    else:
        yield prefix, values


def dig(values: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(values, dict) or part not in values:
            return KeyError
        values = values[part]
    return values


def certificate(secret: dict[str, Any], key: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(base64.b64decode(secret["data"][key]))


def days(cert: x509.Certificate) -> float:
    return (cert.not_valid_after_utc - cert.not_valid_before_utc) / datetime.timedelta(days=1)


# ---- lint, render, validate -------------------------------------------------------------------------------------


@pytest.mark.parametrize("ci", [None, *CI])
def test_helm_lint_strict(ci):
    """No error, no warning (--strict turns warnings into failures)."""
    args = ["lint", "--strict", str(CHART), "--namespace", NAMESPACE]
    out = manifests.helm(*args, *(["--values", str(CI_DIR / ci)] if ci else []))
    assert "0 chart(s) failed" in out and "[WARNING]" not in out and "[ERROR]" not in out, out


@pytest.mark.parametrize("ci", [None, *CI])
def test_every_document_is_valid_kubernetes(ci):
    """Every rendered document (and the CRDs) against the pinned Kubernetes OpenAPI schemas: unknown fields, types
    and required fields as the apiserver's strict field validation refuses them."""
    docs = render(ci)
    assert docs
    crds = manifests.crds()
    assert openapi.validate([*docs, *crds, SERVICE_MONITOR_CRD], crds=[*crds, SERVICE_MONITOR_CRD]) == []


@pytest.mark.parametrize("ci", [None, *CI])
def test_namespaced_objects_go_to_the_release_namespace(ci):
    """Everything namespaced goes to the release's namespace (the defaults also in another than kube-system), but
    the Roles on the GPU Leases (the programs' namespace) and the board's create form's Roles (board.namespaces,
    with board.allowCreate); nothing namespaced lacks one."""
    values = yaml.safe_load((CI_DIR / ci).read_text()) if ci else None
    board = {**DEFAULTS["board"], **((values or {}).get("board") or {})}
    create_role = f"{board['name'] or BOARD}-create"
    for namespace in (NAMESPACE, "gpu-system") if ci is None else (NAMESPACE,):
        for doc in render(ci, namespace):
            where = doc["metadata"].get("namespace")
            if doc["kind"] in CLUSTER_KINDS:
                assert where is None, doc["metadata"]
            elif doc["kind"] in ("Role", "RoleBinding") and doc["metadata"]["name"] == create_role:
                assert board["allowCreate"] and where in board["namespaces"], doc["metadata"]
            elif doc["kind"] in ("Role", "RoleBinding"):
                assert where == constants.LEASE_NAMESPACE, doc["metadata"]
            else:
                assert where == namespace, (doc["kind"], doc["metadata"])


def test_the_release_namespace_is_in_the_service_account_users():
    """The policies name the service accounts of the release's namespace, the certificate that namespace's
    Service."""
    docs = render(None, "gpu-system")
    policies = str(find(docs, "ValidatingAdmissionPolicy"))
    assert f"system:serviceaccount:gpu-system:{SCHEDULER}" in policies
    assert f"system:serviceaccount:gpu-system:{AGENT}" in policies
    assert "system:serviceaccount:kube-system" not in policies
    cert = certificate(one(docs, "Secret", TLS_SECRET), "tls.crt")
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"{WEBHOOK}.gpu-system.svc" in names.get_values_for_type(x509.DNSName)


# ---- what each ci/*-values.yaml does ----------------------------------------------------------------------------


def check_defaults(docs: list[dict[str, Any]]) -> None:
    # The objects and names the test-bed had before the chart.
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert {
        ("Namespace", constants.LEASE_NAMESPACE),
        ("Deployment", SCHEDULER),
        ("PodDisruptionBudget", SCHEDULER),
        ("ServiceAccount", SCHEDULER),
        ("ClusterRole", SCHEDULER),
        ("Role", f"{SCHEDULER}-leases"),
        ("Deployment", WEBHOOK),
        ("Service", WEBHOOK),
        ("PodDisruptionBudget", WEBHOOK),
        ("MutatingWebhookConfiguration", WEBHOOK),
        ("DaemonSet", AGENT),
        ("ServiceAccount", AGENT),
        ("ValidatingAdmissionPolicy", f"{AGENT}-own-node"),
        ("Secret", TLS_SECRET),
        ("Secret", f"{TLS_SECRET}-ca"),
    } <= names
    assert (WEBHOOK, AGENT) == ("cuda-env-webhook", "gpu-inventory-agent")
    # Images: <repository>:<appVersion>, no registry.
    for kind, name, repository in (
        ("Deployment", SCHEDULER, "gpu-scheduler"),
        ("Deployment", WEBHOOK, "gpu-webhook"),
        ("DaemonSet", AGENT, "gpu-inventory-agent"),
        ("Deployment", BOARD, "gpu-board"),
    ):
        c = container(docs, kind, name)
        assert c["image"] == f"{repository}:{APP_VERSION}" and c["imagePullPolicy"] == "IfNotPresent"
        assert c["args"][-2:] == ["--log-level=INFO", "--log-format=text"]
    for name in (SCHEDULER, WEBHOOK):
        deployment = one(docs, "Deployment", name)
        assert deployment["spec"]["replicas"] == 2
        assert deployment["spec"]["template"]["spec"]["priorityClassName"] == "system-cluster-critical"
        assert one(docs, "PodDisruptionBudget", name)["spec"]["minAvailable"] == 1
    # A webhook pod being deleted serves on 5 s, then drains (the program); the grace period covers both.
    assert container(docs, "Deployment", WEBHOOK)["lifecycle"] == {"preStop": {"sleep": {"seconds": 5}}}
    assert one(docs, "Deployment", WEBHOOK)["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 20
    assert container(docs, "Deployment", SCHEDULER)["resources"] == {
        "requests": {"cpu": "50m", "memory": "64Mi"},
        "limits": {"memory": "256Mi"},
    }
    # The MutatingWebhookConfiguration calls the Service, with the CA the chart generated.
    (hook,) = one(docs, "MutatingWebhookConfiguration", WEBHOOK)["webhooks"]
    assert hook["clientConfig"]["service"] == {"name": WEBHOOK, "namespace": NAMESPACE, "path": "/mutate", "port": 443}
    check_generated_tls(docs, WEBHOOK, cert_days=365, ca_days=3650)
    agent = container(docs, "DaemonSet", AGENT)
    assert agent["args"][:5] == [
        "--source=nvml",  # the device plugin's: a GPU node's inventory is never silently simulated
        f"--simulated={inventory.DEFAULT_SIMULATED}",
        "--interval=10",
        "--kubelet-view-file=/run/gpu-scheduling/kubelet/view.json",  # what the device plugin keeps
        "--health-port=8080",
    ]
    pod = one(docs, "DaemonSet", AGENT)["spec"]["template"]["spec"]
    assert "nodeSelector" not in pod and "tolerations" not in pod
    # Monitoring: the dashboard for Grafana's sidecar; no ServiceMonitor (its CRD may not be there), nothing for it.
    dashboard = one(docs, "ConfigMap", DASHBOARD)
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1" and "annotations" not in dashboard["metadata"]
    assert find(docs, "ServiceMonitor") == []
    assert sorted(d["metadata"]["name"] for d in find(docs, "Service")) == sorted([BOARD, WEBHOOK])
    assert not set(METRICS_LABEL) & set(one(docs, "Service", WEBHOOK)["metadata"]["labels"])
    assert [d["metadata"]["name"] for d in find(docs, "ConfigMap")] == [DASHBOARD]
    check_board_defaults(docs)


def check_generated_tls(docs: list[dict[str, Any]], service: str, *, cert_days: int, ca_days: int) -> None:
    """The chart's CA and certificate: ECDSA P-256, the certificate for the Service's DNS names signed by the CA, the
    CA in the configuration's caBundle and the serving Secret's ca.crt, the certificate's digest on the pods."""
    serving, ca_secret = one(docs, "Secret", TLS_SECRET), one(docs, "Secret", f"{TLS_SECRET}-ca")
    assert serving["type"] == ca_secret["type"] == "kubernetes.io/tls"
    assert set(serving["data"]) == {"tls.crt", "tls.key", "ca.crt"} and set(ca_secret["data"]) == {"tls.crt", "tls.key"}
    cert, ca = certificate(serving, "tls.crt"), certificate(ca_secret, "tls.crt")
    cert.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    for c in (cert, ca):
        key = c.public_key()
        assert isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name == "secp256r1"
    dns = [service, f"{service}.{NAMESPACE}", f"{service}.{NAMESPACE}.svc", f"{service}.{NAMESPACE}.svc.cluster.local"]
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == dns
    assert serving["metadata"]["annotations"]["gpu-scheduling.io/dns-names"] == ",".join(dns)
    assert round(days(cert)) == cert_days and round(days(ca)) == ca_days
    for secret, c in ((serving, cert), (ca_secret, ca)):  # what an upgrade compares with the time of day
        noted = int(secret["metadata"]["annotations"]["gpu-scheduling.io/not-after"])
        assert abs(noted - c.not_valid_after_utc.timestamp()) < 120
    assert serving["data"]["ca.crt"] == ca_secret["data"]["tls.crt"]
    (hook,) = one(docs, "MutatingWebhookConfiguration", service)["webhooks"]
    assert hook["clientConfig"]["caBundle"] == serving["data"]["ca.crt"]
    deployment = one(docs, "Deployment", service)
    pod = deployment["spec"]["template"]
    digest = hashlib.sha256(cert.public_bytes(serialization.Encoding.PEM)).hexdigest()
    assert pod["metadata"]["annotations"][CHECKSUM] == digest
    assert pod["spec"]["volumes"] == [{"name": "tls", "secret": {"secretName": TLS_SECRET}}]


def webhook_secrets(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in find(docs, "Secret") if d["metadata"]["name"].startswith(TLS_SECRET)]


def check_images(docs: list[dict[str, Any]]) -> None:
    scheduler = container(docs, "Deployment", SCHEDULER)
    assert scheduler["image"] == "localhost:5001/gpu-scheduler:sha-0123abcd"
    assert scheduler["imagePullPolicy"] == "Always"
    webhook = container(docs, "Deployment", WEBHOOK)
    assert webhook["image"] == "registry.example.com:5000/gpu/team/gpu-webhook:1.2.3"
    assert webhook["imagePullPolicy"] == "IfNotPresent"
    agent = container(docs, "DaemonSet", AGENT)
    assert agent["image"] == f"localhost:5001/gpu-agent:{APP_VERSION}" and agent["imagePullPolicy"] == "Never"
    board = container(docs, "Deployment", BOARD)
    assert board["image"] == "localhost:5001/gpu-board:board-1" and board["imagePullPolicy"] == "Never"
    assert "--pod-image=localhost:5001/gpu-scheduler-check:check-1" in board["args"]


def check_images_per_component(docs: list[dict[str, Any]]) -> None:
    scheduler = container(docs, "Deployment", SCHEDULER)
    assert scheduler["image"] == f"ghcr.io/example/gpu/scheduler:{APP_VERSION}"
    webhook = container(docs, "Deployment", WEBHOOK)
    assert webhook["image"] == f"registry.example.com/gpu-webhook:{APP_VERSION}"
    assert webhook["imagePullPolicy"] == "Always"
    agent = container(docs, "DaemonSet", AGENT)
    assert agent["image"] == "localhost:5001/gpu-inventory-agent:agent-7" and agent["imagePullPolicy"] == "IfNotPresent"
    board = container(docs, "Deployment", BOARD)
    assert board["image"] == f"localhost:5001/team/gpu-board:{APP_VERSION}"
    assert f"--pod-image=ghcr.io/example/gpu/check:{APP_VERSION}" in board["args"]


def check_logging(docs: list[dict[str, Any]]) -> None:
    for kind, name in (("Deployment", SCHEDULER), ("Deployment", WEBHOOK), ("DaemonSet", AGENT), ("Deployment", BOARD)):
        assert container(docs, kind, name)["args"][-2:] == ["--log-level=DEBUG", "--log-format=json"]


def check_scheduler(docs: list[dict[str, Any]]) -> None:
    name = "other-scheduler"
    assert not [d for d in docs if d["metadata"]["name"].startswith(SCHEDULER)]
    deployment = one(docs, "Deployment", name)
    assert deployment["spec"]["replicas"] == 3
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == name and "priorityClassName" not in pod
    (c,) = pod["containers"]
    assert f"--scheduler-name={name}" in c["args"] and f"--leader-elect-resource-name={name}" in c["args"]
    assert "--strategy=LeastUtilized" in c["args"] and "--gang-timeout=90s" in c["args"]
    # The board shows this scheduler's pods and its strategy.
    board = container(docs, "Deployment", BOARD)["args"]
    assert f"--scheduler-name={name}" in board and "--strategy=LeastUtilized" in board
    assert c["resources"] == {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}}
    assert one(docs, "PodDisruptionBudget", name)["spec"]["minAvailable"] == 2
    for kind in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding"):
        one(docs, kind, name)
    assert one(docs, "RoleBinding", f"{name}-leases")["subjects"][0]["name"] == name
    (hook,) = one(docs, "MutatingWebhookConfiguration", WEBHOOK)["webhooks"]
    assert hook["matchConditions"][0]["expression"].endswith(f"object.spec.schedulerName == '{name}')")
    policy = one(docs, "ValidatingAdmissionPolicy", "gpu-scheduling-binding-annotations")
    assert f"'system:serviceaccount:{NAMESPACE}:{name}'" in str(policy["spec"])
    assert f"the {name}'s Binding" in str(find(docs, "ValidatingAdmissionPolicy"))


def check_single_replica(docs: list[dict[str, Any]]) -> None:
    assert one(docs, "Deployment", SCHEDULER)["spec"]["replicas"] == 1
    assert one(docs, "Deployment", WEBHOOK)["spec"]["replicas"] == 1
    assert find(docs, "PodDisruptionBudget") == []


def check_webhook_service(docs: list[dict[str, Any]]) -> None:
    name = "gpu-env-webhook"
    assert not find(docs, "Deployment", WEBHOOK) and not find(docs, "Service", WEBHOOK)
    deployment = one(docs, "Deployment", name)
    assert deployment["spec"]["replicas"] == 3 and "priorityClassName" not in deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 25
    assert container(docs, "Deployment", name)["lifecycle"] == {"preStop": {"sleep": {"seconds": 10}}}
    assert container(docs, "Deployment", name)["resources"] == {
        "requests": {"cpu": "50m", "memory": "64Mi"},
        "limits": {"memory": "256Mi"},
    }
    service = one(docs, "Service", name)
    assert service["spec"]["ports"] == [{"name": "https", "port": 8443, "targetPort": "https"}]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"] == {"app": name}
    assert one(docs, "PodDisruptionBudget", name)["spec"]["minAvailable"] == "50%"
    (hook,) = one(docs, "MutatingWebhookConfiguration", name)["webhooks"]
    service = {"name": name, "namespace": NAMESPACE, "path": "/mutate-pods", "port": 8443}
    assert hook["clientConfig"]["service"] == service
    assert hook["timeoutSeconds"] == 10
    check_generated_tls(docs, name, cert_days=365, ca_days=3650)


def check_webhook_generated_tls(docs: list[dict[str, Any]]) -> None:
    check_generated_tls(docs, WEBHOOK, cert_days=90, ca_days=730)


def check_webhook_existing_secret(docs: list[dict[str, Any]]) -> None:
    values = yaml.safe_load((CI_DIR / "webhook-existing-secret-values.yaml").read_text())["webhook"]["tls"]
    assert webhook_secrets(docs) == []
    pod = one(docs, "Deployment", WEBHOOK)["spec"]["template"]
    assert pod["spec"]["volumes"] == [{"name": "tls", "secret": {"secretName": "my-webhook-tls"}}]
    digest = hashlib.sha256(f"{values['caBundle']}\n{values['certChecksum']}".encode()).hexdigest()
    assert pod["metadata"]["annotations"][CHECKSUM] == digest
    (hook,) = one(docs, "MutatingWebhookConfiguration", WEBHOOK)["webhooks"]
    assert hook["clientConfig"] == {
        "service": {"name": WEBHOOK, "namespace": NAMESPACE, "path": "/mutate", "port": 443},
        "caBundle": values["caBundle"],
    }


def check_webhook_url(docs: list[dict[str, Any]]) -> None:
    values = yaml.safe_load((CI_DIR / "webhook-url-values.yaml").read_text())["webhook"]
    assert [d for d in docs if d["metadata"]["name"] == WEBHOOK] == [one(docs, "MutatingWebhookConfiguration", WEBHOOK)]
    assert webhook_secrets(docs) == []
    (hook,) = one(docs, "MutatingWebhookConfiguration", WEBHOOK)["webhooks"]
    assert hook["clientConfig"] == {"url": values["url"], "caBundle": values["tls"]["caBundle"]}
    one(docs, "Deployment", SCHEDULER)
    one(docs, "DaemonSet", AGENT)


def check_agent(docs: list[dict[str, Any]]) -> None:
    name = "gpu-agent"
    assert not [d for d in docs if d["metadata"]["name"].startswith(AGENT)]
    daemonset = one(docs, "DaemonSet", name)
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == name
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    c = container(docs, "DaemonSet", name)
    # The device plugin's source (nvml by default) is the agent's too: explicit, never a silent simulation.
    assert c["args"][:3] == [
        "--source=nvml",
        "--simulated=count=4,islands=1,bandwidth=300,unhealthy=3",
        "--interval=30",
    ]
    assert c["resources"] == {"requests": {"cpu": "10m", "memory": "48Mi"}, "limits": {"memory": "96Mi"}}
    for kind in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding"):
        one(docs, kind, name)
    assert one(docs, "RoleBinding", f"{name}-leases")["subjects"][0]["name"] == name
    policy = one(docs, "ValidatingAdmissionPolicy", f"{name}-own-node")
    assert f"'system:serviceaccount:{NAMESPACE}:{name}'" in policy["spec"]["matchConditions"][0]["expression"]
    assert one(docs, "ValidatingAdmissionPolicyBinding", f"{name}-own-node")["spec"]["policyName"] == f"{name}-own-node"


def check_agent_disabled(docs: list[dict[str, Any]]) -> None:
    assert not [d for d in docs if d["metadata"]["name"].startswith(AGENT)]
    assert find(docs, "DaemonSet") == []
    assert {d["metadata"]["name"] for d in find(docs, "ValidatingAdmissionPolicy")} == {
        "gpu-scheduling-pod-annotations-fixed",
        "gpu-scheduling-binding-annotations",
        "gpu-scheduling-allocation-not-at-creation",
    }


def check_metrics(docs: list[dict[str, Any]]) -> None:
    """The ServiceMonitor (labelled for the Prometheus that selects it) finds the scheduler, the agent and the webhook
    through Services whose pods serve /metrics on the ports it names; the dashboard under the other sidecar label,
    in its folder."""
    monitor = one(docs, "ServiceMonitor", SERVICE_MONITOR)
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "monitoring"
    spec = monitor["spec"]
    assert spec["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    assert spec["selector"] == {"matchLabels": {**METRICS_LABEL, "app.kubernetes.io/instance": manifests.RELEASE}}
    assert spec["jobLabel"] == "app.kubernetes.io/name"
    endpoints = {e["port"]: e for e in spec["endpoints"]}
    assert sorted(endpoints) == ["health", "https"]
    assert endpoints["health"] == {"port": "health", "path": "/metrics", "scheme": "http", "interval": "15s"}
    ca = one(docs, "ConfigMap", f"{WEBHOOK}-metrics-ca")
    assert endpoints["https"] == {
        "port": "https",
        "path": "/metrics",
        "scheme": "https",
        "interval": "15s",
        "tlsConfig": {
            "ca": {"configMap": {"name": ca["metadata"]["name"], "key": "ca.crt"}},
            "serverName": f"{WEBHOOK}.{NAMESPACE}.svc",
        },
    }
    # The CA Prometheus verifies the webhook with is the one the apiserver trusts, and signed the serving certificate.
    (hook,) = one(docs, "MutatingWebhookConfiguration", WEBHOOK)["webhooks"]
    assert ca["data"]["ca.crt"].strip() == base64.b64decode(hook["clientConfig"]["caBundle"]).decode().strip()
    assert f"{WEBHOOK}.{NAMESPACE}.svc" in str(
        certificate(one(docs, "Secret", TLS_SECRET), "tls.crt")
        .extensions.get_extension_for_class(x509.SubjectAlternativeName)
        .value.get_values_for_type(x509.DNSName)
    )
    check_service_monitor_targets(docs, {SCHEDULER: "scheduler", WEBHOOK: "webhook", AGENT: "agent"})
    dashboard = one(docs, "ConfigMap", DASHBOARD)
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "gpu"
    assert dashboard["metadata"]["annotations"] == {"k8s-sidecar-target-directory": "GPU"}


def check_service_monitor_targets(docs: list[dict[str, Any]], expected: dict[str, str]) -> None:
    """Each Service the ServiceMonitor selects (in its namespaces) selects the pods of one workload, and each
    endpoint's port is one of the Service's ports whose target is a named port of those pods' container; the
    workloads so reached are `expected` (workload name -> component), each through the port its program serves
    /metrics on: the scheduler's and the agent's health port (8080), the webhook's https port (8443)."""
    (monitor,) = find(docs, "ServiceMonitor")
    selector = monitor["spec"]["selector"]["matchLabels"]
    services = [
        s
        for s in find(docs, "Service")
        if s["metadata"]["namespace"] in monitor["spec"]["namespaceSelector"]["matchNames"]
        and selector.items() <= s["metadata"]["labels"].items()
    ]
    workloads = [d for d in docs if d["kind"] in ("Deployment", "DaemonSet")]
    reached: dict[str, str] = {}
    for service in services:
        (workload,) = [
            w
            for w in workloads
            if service["spec"]["selector"].items() <= w["spec"]["template"]["metadata"]["labels"].items()
        ]
        # The agent's pods also run gpu-device-plugin, which serves no metrics.
        (c,) = [c for c in workload["spec"]["template"]["spec"]["containers"] if c["name"] != "device-plugin"]
        container_ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
        for endpoint in monitor["spec"]["endpoints"]:
            for port in service["spec"]["ports"]:
                if port["name"] == endpoint["port"]:
                    name = workload["metadata"]["name"]
                    assert name not in reached, f"{name} scraped twice"
                    reached[name] = workload["metadata"]["labels"]["app.kubernetes.io/component"]
                    target = container_ports[port["targetPort"]]
                    assert (endpoint["scheme"], target) == (
                        ("https", 8443) if reached[name] == "webhook" else ("http", 8080)
                    ), name
                    assert endpoint["path"] == "/metrics"
    assert reached == expected
    # The health port is where the program is told to serve /metrics.
    for name, component in expected.items():
        if component != "webhook":
            kind = "DaemonSet" if component == "agent" else "Deployment"
            assert "--health-port=8080" in container(docs, kind, name)["args"]


def check_dashboard_disabled(docs: list[dict[str, Any]]) -> None:
    assert find(docs, "ConfigMap") == []


def check_lease_namespace_existing(docs: list[dict[str, Any]]) -> None:
    assert find(docs, "Namespace") == []
    assert {d["metadata"]["namespace"] for d in find(docs, "Role")} == {constants.LEASE_NAMESPACE}


# ---- gpu-board --------------------------------------------------------------------------------------------------

#: Who may do what, as a set of (where, API group, resource, verb): `where` is "cluster" for a ClusterRole's grant
#: (every namespace, and cluster-scoped resources), else the Role's namespace.
Grant = tuple[str, str, str, str]


def granted(docs: list[dict[str, Any]], account: str, namespace: str = NAMESPACE) -> set[Grant]:
    """Everything the bindings of `docs` grant the ServiceAccount `namespace/account`, through the roles they bind."""
    subject = {"kind": "ServiceAccount", "name": account, "namespace": namespace}
    roles = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d for d in docs}
    grants: set[Grant] = set()
    for binding in docs:
        if binding["kind"] not in ("ClusterRoleBinding", "RoleBinding") or subject not in binding["subjects"]:
            continue
        ref = binding["roleRef"]
        role_ns = None if ref["kind"] == "ClusterRole" else binding["metadata"]["namespace"]
        role = roles[(ref["kind"], role_ns, ref["name"])]
        where = "cluster" if binding["kind"] == "ClusterRoleBinding" else binding["metadata"]["namespace"]
        for rule in role["rules"]:
            assert "resourceNames" not in rule and "nonResourceURLs" not in rule, rule
            grants |= {(where, g, r, v) for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    return grants


def board_reads() -> set[Grant]:
    """What the board's informers read (the contract's RBAC): nodes, pods, GpuClaims, GpuNodeStatuses and the policy
    everywhere; the GPU Leases in the programs' namespace."""
    group = constants.CLAIM_GROUP
    resources = [
        ("", "nodes"),
        ("", "pods"),
        (group, constants.GPU_CLAIM_PLURAL),
        (group, constants.GPU_NODE_STATUS_PLURAL),
        (group, constants.GPU_SCHEDULING_POLICY_PLURAL),
    ]
    reads = {("cluster", g, r, v) for g, r in resources for v in ("get", "list", "watch")}
    return reads | {
        (constants.LEASE_NAMESPACE, constants.COORDINATION_GROUP, "leases", v) for v in ("get", "list", "watch")
    }


def board_creates(namespaces: list[str]) -> set[Grant]:
    """The create form's rights: create (a dry run is a create), get, list, delete of what it makes, in each
    namespace it is given."""
    made = [("", "pods"), (constants.CLAIM_GROUP, constants.GPU_CLAIM_PLURAL), ("apps", "statefulsets")]
    verbs = ("create", "get", "list", "delete")
    return {(ns, g, r, v) for ns in namespaces for g, r in made for v in verbs}


def board_args(docs: list[dict[str, Any]], name: str = BOARD) -> list[str]:
    args: list[str] = container(docs, "Deployment", name)["args"]
    return args


def check_board_tls(docs: list[dict[str, Any]], name: str, *, cert_days: int, ca_days: int) -> None:
    """The chart's CA and certificate for the board: ECDSA P-256, for the Service's DNS names, localhost and
    127.0.0.1 (a port-forward), signed by the CA in <name>-tls-ca, mounted by the pods, its digest on them."""
    serving, ca_secret = one(docs, "Secret", f"{name}-tls"), one(docs, "Secret", f"{name}-tls-ca")
    assert serving["type"] == ca_secret["type"] == "kubernetes.io/tls"
    assert set(serving["data"]) == {"tls.crt", "tls.key", "ca.crt"} and set(ca_secret["data"]) == {"tls.crt", "tls.key"}
    cert, ca = certificate(serving, "tls.crt"), certificate(ca_secret, "tls.crt")
    cert.verify_directly_issued_by(ca)
    assert serving["data"]["ca.crt"] == ca_secret["data"]["tls.crt"]
    for c in (cert, ca):
        key = c.public_key()
        assert isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name == "secp256r1"
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    dns = [name, f"{name}.{NAMESPACE}", f"{name}.{NAMESPACE}.svc", f"{name}.{NAMESPACE}.svc.cluster.local", "localhost"]
    assert sans.get_values_for_type(x509.DNSName) == dns
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert serving["metadata"]["annotations"]["gpu-scheduling.io/dns-names"] == ",".join([*dns, "127.0.0.1"])
    assert round(days(cert)) == cert_days and round(days(ca)) == ca_days
    pod = one(docs, "Deployment", name)["spec"]["template"]
    digest = hashlib.sha256(cert.public_bytes(serialization.Encoding.PEM)).hexdigest()
    assert pod["metadata"]["annotations"][CHECKSUM] == digest
    assert pod["spec"]["volumes"] == [{"name": "tls", "secret": {"secretName": f"{name}-tls"}}]
    # The webhook's CA is another: trusting the board's does not trust the admission path, nor the other way.
    if find(docs, "Secret", f"{TLS_SECRET}-ca"):
        assert one(docs, "Secret", f"{TLS_SECRET}-ca")["data"]["tls.crt"] != ca_secret["data"]["tls.crt"]


def check_board_defaults(docs: list[dict[str, Any]]) -> None:
    """The board reads only: its RBAC is the reads, nothing in any namespace to write; one replica, HTTPS on 8443
    behind a Service on 443, grouped by zone, showing the default scheduler's pods and strategy."""
    deployment = one(docs, "Deployment", BOARD)
    assert deployment["spec"]["replicas"] == 1
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == BOARD and "automountServiceAccountToken" not in pod
    assert board_args(docs) == [
        "--port=8443",
        "--tls-cert=/tls/tls.crt",
        "--tls-key=/tls/tls.key",
        *(f"--topology-label={label}" for label in constants.DEFAULT_TOPOLOGY_LABELS),
        f"--scheduler-name={SCHEDULER}",
        f"--strategy={constants.DEFAULT_STRATEGY}",
        f"--pod-image=gpu-scheduler-check:{APP_VERSION}",
        "--log-level=INFO",
        "--log-format=text",
    ]
    assert granted(docs, BOARD) == board_reads()
    assert not [d for d in find(docs, "Role") if d["metadata"]["name"] == f"{BOARD}-create"]
    service = one(docs, "Service", BOARD)
    assert service["spec"]["ports"] == [{"name": "https", "port": 443, "targetPort": "https"}]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"] == {"app": BOARD}
    c = container(docs, "Deployment", BOARD)
    assert c["ports"] == [{"name": "https", "containerPort": 8443}]
    assert c["resources"] == {"requests": {"cpu": "20m", "memory": "64Mi"}, "limits": {"memory": "512Mi"}}
    check_board_tls(docs, BOARD, cert_days=365, ca_days=3650)


def check_board(docs: list[dict[str, Any]]) -> None:
    name = "gpu-tetris"
    assert not [d for d in docs if d["metadata"]["name"].startswith(BOARD)]
    deployment = one(docs, "Deployment", name)
    assert deployment["spec"]["replicas"] == 2
    args = board_args(docs, name)
    labels = [a for a in args if a.startswith("--topology-label=")]
    assert labels == ["--topology-label=topology.kubernetes.io/region", "--topology-label=topology.kubernetes.io/zone"]
    assert "--allow-create" in args
    assert [a for a in args if a.startswith("--namespace=")] == ["--namespace=default", "--namespace=team-a"]
    assert container(docs, "Deployment", name)["resources"] == {
        "requests": {"cpu": "50m", "memory": "128Mi"},
        "limits": {"memory": "1Gi"},
    }
    service = one(docs, "Service", name)
    assert service["spec"]["ports"] == [{"name": "https", "port": 8443, "targetPort": "https"}]
    assert service["spec"]["selector"] == {"app": name}
    # Reads everywhere, writes in its two namespaces only, and exactly what the form makes there.
    assert granted(docs, name) == board_reads() | board_creates(["default", "team-a"])
    for kind in ("Role", "RoleBinding"):
        assert sorted(d["metadata"]["namespace"] for d in find(docs, kind, f"{name}-create")) == ["default", "team-a"]
    check_board_tls(docs, name, cert_days=90, ca_days=730)


def check_board_existing_secret(docs: list[dict[str, Any]]) -> None:
    """Your Secret: the chart makes none for the board, its pods mount yours; `helm template` reads no Secret, so the
    checksum is that of nothing (an install or upgrade digests the Secret's certificate)."""
    assert not [d for d in find(docs, "Secret") if d["metadata"]["name"].startswith(BOARD)]
    pod = one(docs, "Deployment", BOARD)["spec"]["template"]
    assert pod["spec"]["volumes"] == [{"name": "tls", "secret": {"secretName": "my-board-tls"}}]
    assert pod["metadata"]["annotations"][CHECKSUM] == hashlib.sha256(b"").hexdigest()
    check_generated_tls(docs, WEBHOOK, cert_days=365, ca_days=3650)  # the webhook's stays as it was


def check_board_disabled(docs: list[dict[str, Any]]) -> None:
    assert not [d for d in docs if d["metadata"]["name"].startswith(BOARD)]
    assert granted(docs, BOARD) == set()
    assert [d["metadata"]["name"] for d in find(docs, "Service")] == [WEBHOOK]


def check_device_plugin(docs: list[dict[str, Any]]) -> None:
    """Simulated GPUs: no RuntimeClass or NVIDIA variables, the files folder mounted, the values passed."""
    pod = one(docs, "DaemonSet", AGENT)["spec"]["template"]["spec"]
    assert "runtimeClassName" not in pod
    plugin = container(docs, "DaemonSet", AGENT, "device-plugin")
    assert {"--source=simulated", "--slots=4", "--files-dir=/var/lib/gpu-testbed/devices"} <= set(plugin["args"])
    assert plugin["resources"] == {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "192Mi"}}
    assert {v["name"]: v.get("hostPath", {}).get("path") for v in pod["volumes"]}[
        "device-files"
    ] == "/var/lib/gpu-testbed/devices"
    for c in pod["containers"]:
        assert constants.NVIDIA_DEVICES_ENV not in {e["name"] for e in c["env"]}, c["name"]
    assert "--source=simulated" in container(docs, "DaemonSet", AGENT)["args"]


def check_device_plugin_disabled(docs: list[dict[str, Any]]) -> None:
    """Without the plugin: the agent alone (its source auto again), no resource asked for, no policy, list only."""
    pod = one(docs, "DaemonSet", AGENT)["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["agent"] and "volumes" not in pod
    assert "volumeMounts" not in pod["containers"][0]
    assert not [a for a in container(docs, "DaemonSet", AGENT)["args"] if a.startswith("--source")]
    assert not [a for a in container(docs, "Deployment", WEBHOOK)["args"] if a.startswith("--gpu-resource")]
    assert not find(docs, "ValidatingAdmissionPolicy", "gpu-scheduling-gpu-resource")
    assert ("pods", "watch") not in granted(docs, AGENT)


CHECKS: dict[str, Callable[[list[dict[str, Any]]], None]] = {
    "default-values.yaml": check_defaults,
    "images-values.yaml": check_images,
    "images-per-component-values.yaml": check_images_per_component,
    "logging-values.yaml": check_logging,
    "scheduler-values.yaml": check_scheduler,
    "single-replica-values.yaml": check_single_replica,
    "webhook-service-values.yaml": check_webhook_service,
    "webhook-generated-tls-values.yaml": check_webhook_generated_tls,
    "webhook-existing-secret-values.yaml": check_webhook_existing_secret,
    "webhook-url-values.yaml": check_webhook_url,
    "agent-values.yaml": check_agent,
    "agent-disabled-values.yaml": check_agent_disabled,
    "lease-namespace-existing-values.yaml": check_lease_namespace_existing,
    "metrics-values.yaml": check_metrics,
    "dashboard-disabled-values.yaml": check_dashboard_disabled,
    "board-values.yaml": check_board,
    "board-existing-secret-values.yaml": check_board_existing_secret,
    "board-disabled-values.yaml": check_board_disabled,
    "device-plugin-values.yaml": check_device_plugin,
    "device-plugin-disabled-values.yaml": check_device_plugin_disabled,
}


@pytest.mark.parametrize("ci", CI)
def test_each_values_file_does_what_it_says(ci):
    assert ci in CHECKS, f"ci/{ci} has no check in CHECKS"
    CHECKS[ci](render(ci))


def test_every_check_has_its_values_file():
    assert sorted(CHECKS) == CI


def test_every_value_is_set_by_a_values_file():
    """chart-testing's convention: every value is exercised, by a ci file that sets it to something other than its
    default."""
    set_by = {ci: yaml.safe_load((CI_DIR / ci).read_text()) or {} for ci in CI}
    unset = [
        path
        for path, default in leaves(DEFAULTS)
        if not any(dig(values, path) not in (KeyError, default) for values in set_by.values())
    ]
    assert unset == []
    # ... and sets only values that exist.
    known = {path for path, _ in leaves(DEFAULTS)}
    for ci, values in set_by.items():
        assert {path for path, _ in leaves(values) if path} <= known, ci


def test_the_default_values_file_is_the_defaults():
    assert render("default-values.yaml") != [] and not yaml.safe_load((CI_DIR / "default-values.yaml").read_text())


# ---- the programs accept what the chart passes them --------------------------------------------------------------


@pytest.mark.parametrize("ci", ["default-values.yaml", "logging-values.yaml", "scheduler-values.yaml"])
def test_the_scheduler_and_the_webhook_accept_their_args(ci):
    from gpu_scheduling.scheduler import main as scheduler
    from gpu_scheduling.webhook import main as webhook

    docs = render(ci)
    (deployment,) = [
        d for d in find(docs, "Deployment") if d["metadata"]["labels"]["app.kubernetes.io/component"] == "scheduler"
    ]
    args = scheduler.parse_args(deployment["spec"]["template"]["spec"]["containers"][0]["args"])
    assert args.leader_elect and args.scheduler_name == deployment["metadata"]["name"]
    assert scheduler.election_config(args).namespace == constants.LEASE_NAMESPACE
    assert args.strategy == ("LeastUtilized" if ci == "scheduler-values.yaml" else constants.DEFAULT_STRATEGY)
    assert args.gang_timeout == (90 if ci == "scheduler-values.yaml" else 300)
    args = webhook.parse_args(container(docs, "Deployment", WEBHOOK)["args"])
    assert args.port == 8443 and args.tls_cert_file == "/tls/tls.crt"


@pytest.mark.parametrize("ci", ["default-values.yaml", "agent-values.yaml", "logging-values.yaml"])
def test_the_agent_accepts_its_args(ci):
    """The agent's arguments as the DaemonSet gives them, run with --print (no cluster: it prints the inventory it
    would write)."""
    docs = render(ci)
    (daemonset,) = find(docs, "DaemonSet")
    c = container(docs, "DaemonSet", daemonset["metadata"]["name"])
    agent = [sys.executable, "-c", "from gpu_scheduling.agent.main import main; main()"]
    done = subprocess.run(
        [*agent, *c["args"], "--source=simulated", "--print"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    simulated = next(a.removeprefix("--simulated=") for a in c["args"] if a.startswith("--simulated="))
    assert len(json.loads(done.stdout)["devices"]) == len(inventory.parse_simulated(simulated))


# ---- gpu-device-plugin: exactly the node access it needs ---------------------------------------------------------


@pytest.mark.parametrize("ci", [None, "device-plugin-values.yaml"])
def test_the_device_plugin_gets_exactly_the_kubelets_sockets(ci):
    """Root (the kubelet's folders are root's) and nothing else: no capability, no privilege escalation, a read-only
    root filesystem, no host namespaces; the device plugin folder writable, PodResources read-only, the simulated
    GPUs' files folder only with the simulated source; the agent's own container unchanged and unprivileged."""
    docs = render(ci)
    pod = one(docs, "DaemonSet", AGENT)["spec"]["template"]["spec"]
    plugin = container(docs, "DaemonSet", AGENT, "device-plugin")
    agent = container(docs, "DaemonSet", AGENT)
    scheduler = container(docs, "Deployment", SCHEDULER)
    assert plugin["securityContext"] == {
        "runAsNonRoot": False,
        "runAsUser": 0,
        "runAsGroup": 0,
        **scheduler["securityContext"],
    }
    assert scheduler["securityContext"] == {
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert agent["securityContext"] == scheduler["securityContext"]
    # The agent reads the kubelet's view the plugin keeps, and nothing of the host.
    assert agent["volumeMounts"] == [
        {"name": "kubelet-view", "mountPath": "/run/gpu-scheduling/kubelet", "readOnly": True}
    ]
    assert not {"hostNetwork", "hostPID", "hostIPC"} & set(pod)
    simulated = ci is not None
    mounts = {m["name"]: (m["mountPath"], m.get("readOnly", False)) for m in plugin["volumeMounts"]}
    expected = {
        "device-plugins": ("/var/lib/kubelet/device-plugins", False),
        "pod-resources": ("/var/lib/kubelet/pod-resources", True),
        "kubelet-view": ("/run/gpu-scheduling/kubelet", False),
    }
    if simulated:
        expected["device-files"] = ("/var/lib/gpu-testbed/devices", False)
    assert mounts == expected
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes.pop("kubelet-view") == {"name": "kubelet-view", "emptyDir": {"medium": "Memory", "sizeLimit": "4Mi"}}
    assert {n: v["hostPath"]["path"] for n, v in volumes.items()} == {
        n: p for n, (p, _) in expected.items() if n != "kubelet-view"
    }
    assert all(set(v) == {"name", "hostPath"} for v in volumes.values())  # no other volume kind
    # NVML (the default): NVIDIA's runtime and its variables, as NVIDIA's device plugin gets the driver.
    if not simulated:
        assert pod["runtimeClassName"] == "nvidia"
        for c in (plugin, agent):
            env = {e["name"]: e.get("value") for e in c["env"]}
            assert env[constants.NVIDIA_DEVICES_ENV] == "all" and env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    # The program accepts what it is given, and the webhook asks for the plugin's resource.
    from gpu_scheduling.agent import deviceplugin

    args = deviceplugin.parse_args(plugin["args"])
    assert args.resource == constants.GPU_RESOURCE and args.health_port == 8081
    # No CDI spec of its own (it would need /var/run/cdi of the host, not granted above): Allocate names no CDI device
    # that no spec would resolve.
    assert args.cdi_dir == ""
    assert plugin["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "plugin-health"}
    assert f"--gpu-resource={constants.GPU_RESOURCE}" in container(docs, "Deployment", WEBHOOK)["args"]
    from gpu_scheduling.webhook import main as webhook

    hook = webhook.parse_args(container(docs, "Deployment", WEBHOOK)["args"])
    assert hook.gpu_resource == constants.GPU_RESOURCE
    # Isolated GPUs (NVML) for both programs or for neither: one chart value decides.
    from gpu_scheduling.scheduler import main as scheduler

    sched = scheduler.parse_args(container(docs, "Deployment", SCHEDULER)["args"])
    assert hook.isolated_gpus == sched.isolated_gpus == (not simulated)


def test_only_the_schedulers_pods_may_ask_for_the_gpu_resource():
    policy = one(render(), "ValidatingAdmissionPolicy", "gpu-scheduling-gpu-resource")
    (validation,) = policy["spec"]["validations"]
    assert f"object.spec.schedulerName == '{constants.DEFAULT_SCHEDULER_NAME}'" in validation["expression"]
    assert f"'{constants.GPU_RESOURCE}' in c.resources.limits" in policy["spec"]["variables"][1]["expression"]
    binding = one(render(), "ValidatingAdmissionPolicyBinding", "gpu-scheduling-gpu-resource")
    assert binding["spec"]["validationActions"] == ["Deny"]


# ---- monitoring: the dashboard, the ServiceMonitor, the agent's health port ---------------------------------------

#: What each panel of the dashboard must show, as (title, the metric names its queries must read).
DASHBOARD_PANELS = {
    "Scheduling attempts by result and strategy": {"gpu_scheduler_scheduling_attempts_total"},
    "Scheduling attempt latency p50 / p99": {"gpu_scheduler_scheduling_attempt_duration_seconds_bucket"},
    "End-to-end scheduling latency p99": {"gpu_scheduler_e2e_scheduling_duration_seconds_bucket"},
    "Pending pods by kind": {"gpu_scheduler_pending_pods"},
    "GPUs by state per node": {"gpu_scheduler_node_gpus"},
    "Allocated GPUs per NVLink island": {"gpu_scheduler_island_allocated_gpus"},
    "GPU lease reconciles by outcome": {"gpu_scheduler_lease_reconciles_total"},
    "Active strategy": {"gpu_scheduler_strategy_info"},
    "Leader": {"gpu_scheduler_leader"},
    "Webhook requests": {
        "gpu_webhook_requests_total",
        "gpu_webhook_patched_total",
        "gpu_webhook_denied_total",
        "gpu_webhook_bad_requests_total",
        "gpu_webhook_errors_total",
    },
    "Webhook latency p99": {"gpu_webhook_request_duration_seconds_bucket"},
    "GPU utilization": {"gpu_inventory_agent_gpu_utilization_ratio"},
    "GPU memory used / total": {
        "gpu_inventory_agent_gpu_memory_used_bytes",
        "gpu_inventory_agent_gpu_memory_total_bytes",
    },
    "Inventory agent syncs by result": {"gpu_inventory_agent_syncs_total"},
    "Time since the last inventory sync": {"gpu_inventory_agent_last_sync_timestamp_seconds"},
}


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD_FILE.read_text())
    return loaded


def exposed_series_names() -> set[str]:
    """Every sample name the three programs expose (tests/unit/programs/test_metrics.py's registries, with state, a
    written status and an observation each, so that every family shows)."""
    from prometheus_client.parser import text_string_to_metric_families

    from gpu_scheduling import health
    from tests.unit.programs.test_metrics import _registries

    return {
        sample.name
        for _, registry in _registries()
        for family in text_string_to_metric_families(health.render_metrics(registry, None)[0].decode())
        for sample in family.samples
    }


def test_the_dashboard_configmap_holds_the_dashboard_file():
    configmap = one(render(), "ConfigMap", DASHBOARD)
    assert set(configmap["data"]) == {"gpu-scheduling.json"}
    assert json.loads(configmap["data"]["gpu-scheduling.json"]) == dashboard()
    assert configmap["data"]["gpu-scheduling.json"] == DASHBOARD_FILE.read_text().rstrip("\n")


def test_the_dashboard_is_stable_and_asks_for_its_data_source():
    board = dashboard()
    assert board["uid"] == "gpu-scheduling" and board["title"] == "GPU scheduling"
    assert board["schemaVersion"] >= 39 and board["id"] is None
    (variable,) = board["templating"]["list"]
    assert (variable["name"], variable["type"], variable["query"]) == ("datasource", "datasource", "prometheus")
    source = {"type": "prometheus", "uid": "${datasource}"}
    panels = board["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    for panel in panels:
        assert panel["datasource"] == source, panel["title"]
        assert panel["targets"], panel["title"]
        for t in panel["targets"]:
            assert t["datasource"] == source, panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]
    # No two panels overlap.
    cells = [
        (x, y)
        for p in panels
        for x in range(p["gridPos"]["x"], p["gridPos"]["x"] + p["gridPos"]["w"])
        for y in range(p["gridPos"]["y"], p["gridPos"]["y"] + p["gridPos"]["h"])
    ]
    assert len(cells) == len(set(cells))


def test_the_dashboard_queries_read_only_series_the_programs_expose():
    """Each panel of DASHBOARD_PANELS reads its metrics, every metric any query names is one a program exposes, and
    no query needs a template variable other than Grafana's $__rate_interval (so it runs as written)."""
    exposed = exposed_series_names()
    panels = {p["title"]: p for p in dashboard()["panels"]}
    assert sorted(panels) == sorted(DASHBOARD_PANELS)
    for title, wanted in DASHBOARD_PANELS.items():
        exprs = [t["expr"] for t in panels[title]["targets"]]
        named = {m for e in exprs for m in re.findall(r"\b(gpu_[a-z0-9_]+)", e)}
        assert named == wanted, title
        assert named <= exposed, (title, named - exposed)
        for expr in exprs:
            assert set(re.findall(r"\$\{?(\w+)", expr)) <= {"__rate_interval"}, expr
            assert expr.count("(") == expr.count(")") and expr.count("[") == expr.count("]"), expr
            # A rate() of a counter or of histogram buckets only: of series that are there, at 0, from the start.
            for rated in re.findall(r"rate\((\w+)\[", expr):
                assert rated.endswith(("_total", "_bucket")), expr


def _with(ci: str, extra: dict[str, Any]) -> list[dict[str, Any]]:
    values = yaml.safe_load((CI_DIR / ci).read_text())
    return manifests.render({**values, **extra}, namespace=NAMESPACE)


def test_the_service_monitor_without_the_webhook_or_the_agent():
    """webhook.url: no webhook in the cluster, so no https endpoint and no CA; no agent: no agent Service."""
    on = {"metrics": {"serviceMonitor": {"enabled": True}}}
    docs = _with("webhook-url-values.yaml", on)
    (monitor,) = find(docs, "ServiceMonitor")
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["health"]
    assert monitor["spec"]["endpoints"][0]["interval"] == "30s" and set(monitor["metadata"]["labels"]) == set(
        one(docs, "Deployment", SCHEDULER)["metadata"]["labels"]
    )
    assert not find(docs, "ConfigMap", f"{WEBHOOK}-metrics-ca")
    check_service_monitor_targets(docs, {SCHEDULER: "scheduler", AGENT: "agent"})
    docs = _with("agent-disabled-values.yaml", on)
    assert not find(docs, "Service", f"{AGENT}-metrics")
    check_service_monitor_targets(docs, {SCHEDULER: "scheduler", WEBHOOK: "webhook"})
    crds = [SERVICE_MONITOR_CRD]
    assert openapi.validate([d for d in docs if d["kind"] == "ServiceMonitor"], crds=crds) == []


def test_the_service_monitor_trusts_an_existing_secret_s_ca():
    values = yaml.safe_load((CI_DIR / "webhook-existing-secret-values.yaml").read_text())
    docs = _with("webhook-existing-secret-values.yaml", {"metrics": {"serviceMonitor": {"enabled": True}}})
    ca = one(docs, "ConfigMap", f"{WEBHOOK}-metrics-ca")
    assert ca["data"]["ca.crt"].strip() == base64.b64decode(values["webhook"]["tls"]["caBundle"]).decode().strip()
    check_service_monitor_targets(docs, {SCHEDULER: "scheduler", WEBHOOK: "webhook", AGENT: "agent"})


def test_the_service_monitor_follows_renamed_components():
    docs = _with("scheduler-values.yaml", {"metrics": {"serviceMonitor": {"enabled": True}}})
    check_service_monitor_targets(docs, {"other-scheduler": "scheduler", WEBHOOK: "webhook", AGENT: "agent"})
    docs = _with("agent-values.yaml", {"metrics": {"serviceMonitor": {"enabled": True}}})
    check_service_monitor_targets(docs, {SCHEDULER: "scheduler", WEBHOOK: "webhook", "gpu-agent": "agent"})


def test_the_agent_serves_probes_and_metrics_on_its_health_port():
    """As the scheduler: --health-port 8080, the container port named health, /healthz and /readyz probed there."""
    docs = render()
    agent, scheduler = container(docs, "DaemonSet", AGENT), container(docs, "Deployment", SCHEDULER)
    assert agent["ports"] == scheduler["ports"] == [{"name": "health", "containerPort": 8080}]
    assert agent["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert agent["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert "--health-port=8080" in agent["args"]  # test_the_agent_accepts_its_args runs the agent with them


@pytest.mark.parametrize("ci", ["metrics-values.yaml", "dashboard-disabled-values.yaml"])
def test_monitoring_adds_no_rbac(ci):
    """The ServiceMonitor and the dashboard need no rights of the programs: the RBAC objects are the defaults'."""

    def rbac(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return sorted((d for d in docs if d["kind"] in RBAC_KINDS), key=lambda d: (d["kind"], d["metadata"]["name"]))

    assert rbac(render(ci)) == rbac(render())
    assert rbac(render()) != []


# ---- refused values ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("scheduler.replicas=-1", "/scheduler/replicas"),
        ("webhook.replicas=0", "/webhook/replicas"),
        ("scheduler.image.pullPolicy=Sometimes", "/scheduler/image/pullPolicy"),
        ("scheduler.image.tag=bad:tag", "/scheduler/image/tag"),
        ("agent.image.repository=Upper/Case", "/agent/image/repository"),
        ("imageRegistry=https://registry.example.com", "/imageRegistry"),
        ("scheduler.name=Bad.Name", "/scheduler/name"),
        ("webhook.name=cuda_env_webhook", "/webhook/name"),
        ("agent.name=-agent", "/agent/name"),
        ("webhook.url=http://insecure.example.com/mutate", "/webhook/url"),
        ("webhook.url=https://example.com/mutate?x=1", "/webhook/url"),
        ("webhook.timeoutSeconds=31", "/webhook/timeoutSeconds"),
        ("webhook.shutdownDelaySeconds=61", "/webhook/shutdownDelaySeconds"),
        ("webhook.shutdownDelaySeconds=-1", "/webhook/shutdownDelaySeconds"),
        ("webhook.port=70000", "/webhook/port"),
        ("webhook.path=mutate", "/webhook/path"),
        ("webhook.tls.caBundle=not*base64", "/webhook/tls/caBundle"),
        ("webhook.tls.existingSecret=Bad_Secret", "/webhook/tls/existingSecret"),
        ("webhook.tls.certValidityDays=0", "/webhook/tls/certValidityDays"),
        ("scheduler.podDisruptionBudget.minAvailable=half", "/scheduler/podDisruptionBudget/minAvailable"),
        ("scheduler.gangTimeout=5min", "/scheduler/gangTimeout"),
        ("scheduler.gangTimeout=0", "/scheduler/gangTimeout"),
        ("agent.simulatedInventory=gpus=8", "/agent/simulatedInventory"),
        ("agent.interval=0", "/agent/interval"),
        ("agent.enabled=maybe", "/agent/enabled"),
        ("leaseNamespace.create=yes", "/leaseNamespace/create"),
        ("logLevel=TRACE", "/logLevel"),
        ("logFormat=xml", "/logFormat"),
        ("metrics.dashboard.enabled=maybe", "/metrics/dashboard/enabled"),
        ("metrics.dashboard.folderAnnotation=bad annotation", "/metrics/dashboard/folderAnnotation"),
        ("metrics.serviceMonitor.enabled=yes", "/metrics/serviceMonitor/enabled"),
        ("metrics.serviceMonitor.interval=soon", "/metrics/serviceMonitor/interval"),
        ("board.enabled=maybe", "/board/enabled"),
        ("board.name=Gpu_Board", "/board/name"),
        ("board.replicas=0", "/board/replicas"),
        ("board.allowCreate=yes", "/board/allowCreate"),
        ("board.namespaces={}", "/board/namespaces"),
        ("board.namespaces[0]=Not_A_Namespace", "/board/namespaces/0"),
        ("board.topologyLabels[0]=bad label", "/board/topologyLabels/0"),
        ("board.podImage.repository=Upper", "/board/podImage/repository"),
        ("board.service.port=0", "/board/service/port"),
        ("board.tls.secretName=Bad_Secret", "/board/tls/secretName"),
        ("board.image.pullPolicy=Sometimes", "/board/image/pullPolicy"),
        ("scheduler.replica=3", "additional properties 'replica' not allowed"),
        ("unknown=1", "additional properties 'unknown' not allowed"),
    ],
)
def test_the_schema_refuses_a_bad_value_naming_it(setting, named):
    message = helm_fails("--set", setting)
    assert "values don't meet the specifications of the schema" in message and named in message, message


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"webhook": {"tls": {"existingSecret": "s"}}},
            "webhook.tls.existingSecret (s) is set: give webhook.tls.caBundle too",
        ),
        (
            {"webhook": {"tls": {"caBundle": "Q0E="}}},
            "webhook.tls.caBundle is set: give webhook.tls.existingSecret too",
        ),
        ({"webhook": {"url": "https://127.0.0.1:8443/mutate"}}, "webhook.url is set: give webhook.tls.caBundle too"),
        (
            {"webhook": {"url": "https://127.0.0.1:8443/mutate", "tls": {"existingSecret": "s", "caBundle": "Q0E="}}},
            "webhook.tls.existingSecret has no use",
        ),
        (
            {"webhook": {"tls": {"existingSecret": "s", "caBundle": "Q0E="}}},
            "webhook.tls.caBundle must be the base64 of a PEM CA certificate",
        ),
        (
            {"scheduler": {"replicas": 1}},
            "scheduler.podDisruptionBudget.minAvailable (1) must be below scheduler.replicas (1)",
        ),
        (
            {"webhook": {"replicas": 2, "podDisruptionBudget": {"minAvailable": 2}}},
            "webhook.podDisruptionBudget.minAvailable (2) must be below webhook.replicas (2)",
        ),
        ({"scheduler": {"gangTimeout": "25h"}}, "scheduler.gangTimeout (25h) must be from 1s to 24h"),
        ({"scheduler": {"gangTimeout": "0s"}}, "scheduler.gangTimeout (0s) must be from 1s to 24h"),
        (
            {"webhook": {"tls": {"renewBeforeDays": 365}}},
            "webhook.tls.renewBeforeDays (365) must be below webhook.tls.certValidityDays (365)",
        ),
        (
            {"webhook": {"tls": {"certValidityDays": 4000}}},
            "webhook.tls.certValidityDays (4000) must not exceed webhook.tls.caValidityDays (3650)",
        ),
        (
            {"board": {"tls": {"renewBeforeDays": 365}}},
            "board.tls.renewBeforeDays (365) must be below board.tls.certValidityDays (365)",
        ),
        (
            {"board": {"tls": {"certValidityDays": 4000}}},
            "board.tls.certValidityDays (4000) must not exceed board.tls.caValidityDays (3650)",
        ),
    ],
)
def test_the_templates_refuse_values_that_do_not_fit_together(values, message):
    refused = helm_fails(values=values)
    assert message in refused, refused


def test_set_image_tag_on_the_command_line():
    """docs/chart.md's `--set scheduler.image.tag=...`, also with a tag that --set reads as a number."""
    for tag in ("0.2.0", "20240101"):
        tagged = ["--set", f"scheduler.image.tag={tag}", "--show-only", "templates/scheduler/deployment.yaml"]
        docs = yaml.safe_load_all(manifests.helm("template", "t", str(CHART), *tagged))
        (deployment,) = [d for d in docs if d]
        assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == f"gpu-scheduler:{tag}"


def test_no_shutdown_delay_means_no_prestop():
    """webhook.shutdownDelaySeconds 0: no preStop hook (SIGTERM at once), the grace period still the program's."""
    docs = manifests.render({"webhook": {"shutdownDelaySeconds": 0}}, namespace=NAMESPACE)
    assert "lifecycle" not in container(docs, "Deployment", WEBHOOK)
    assert one(docs, "Deployment", WEBHOOK)["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 15
    assert openapi.validate(docs) == []


# ---- the chart as a package -------------------------------------------------------------------------------------


def test_chart_metadata():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["name"] == "gpu-scheduler" and chart["type"] == "application"
    assert re.fullmatch(r"\d+\.\d+\.\d+", chart["version"])
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert chart["appVersion"] == project["version"], "appVersion is the programs' version (pyproject.toml)"


def test_the_package_holds_what_the_templates_read(tmp_path):
    """`helm package` keeps keys.yaml (the templates read it), crds/ and the schema, and leaves ci/ out."""
    manifests.helm("package", str(CHART), "--destination", str(tmp_path))
    (package,) = tmp_path.glob("*.tgz")
    with tarfile.open(package) as tar:
        names = {name.removeprefix("gpu-scheduler/") for name in tar.getnames()}
    assert {"Chart.yaml", "values.yaml", "values.schema.json", "keys.yaml", "README.md", "templates/NOTES.txt"} <= names
    assert "dashboards/gpu-scheduling.json" in names  # the dashboard ConfigMap reads it
    assert {f"crds/{p.name}" for p in manifests.CRD_DIR.glob("*.yaml")} <= names
    assert not [n for n in names if n.startswith("ci/")]


NOTES_CASES = [
    "default-values.yaml",
    "board-values.yaml",
    "board-disabled-values.yaml",
    "metrics-values.yaml",
    "webhook-existing-secret-values.yaml",
    "webhook-url-values.yaml",
    "agent-disabled-values.yaml",
]


@pytest.mark.parametrize("ci", NOTES_CASES)
def test_the_notes_render(ci, tmp_path):
    """templates/NOTES.txt, which helm prints after install (helm template does not render it: a copy of the chart
    renders it into a ConfigMap)."""
    copy_dir = tmp_path / "gpu-scheduler"
    subprocess.run(["cp", "-r", str(CHART), str(copy_dir)], check=True)
    notes = (copy_dir / "templates" / "NOTES.txt").read_text()
    (copy_dir / "templates" / "NOTES.txt").unlink()
    (copy_dir / "templates" / "notes.tpl").write_text('{{- define "test.notes" -}}\n' + notes + "\n{{- end -}}\n")
    (copy_dir / "templates" / "notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\n"
        'data:\n  notes: {{ include "test.notes" . | toJson }}\n'
    )
    values = ["--namespace", NAMESPACE, "--values", str(CI_DIR / ci)]
    text = manifests.helm("template", "gpu-scheduler", str(copy_dir), *values, "--show-only", "templates/notes.yaml")
    rendered = yaml.safe_load(text)["data"]["notes"]
    assert "kubectl apply --server-side -f crds/" in rendered
    assert f"schedulerName: {SCHEDULER}" in rendered and constants.MAP_ANNOTATION in rendered
    assert ("not deployed" in rendered) == (ci == "webhook-url-values.yaml")
    assert ("DaemonSet" in rendered) == (ci != "agent-disabled-values.yaml")
    assert "<no value>" not in rendered
    assert ("ServiceMonitor" in rendered) == (ci == "metrics-values.yaml")
    assert "the Grafana dashboard" in rendered
    board = {"board-values.yaml": "gpu-tetris", "board-disabled-values.yaml": None}.get(ci, BOARD)
    if board:
        port = 8443 if ci == "board-values.yaml" else 443
        assert f"kubectl -n {NAMESPACE} port-forward service/{board} 8443:{port}" in rendered
        assert "https://localhost:8443/" in rendered
        created = "allowed in default, team-a" if ci == "board-values.yaml" else "off"
        assert f"Deployment and Service {NAMESPACE}/{board} (HTTPS), creation {created}" in rendered
    else:
        assert "port-forward" not in rendered and "\n  board " not in rendered


# ---- documentation ----------------------------------------------------------------------------------------------


def test_the_readme_lists_every_value():
    """The chart's README has one row per value (`| `path` | default | meaning |`), and none for a value that is
    gone."""
    text = (CHART / "README.md").read_text()
    table = text[text.index("| value | default | meaning |") :].split("\n\n", 1)[0]
    rows = re.findall(r"^\| `([\w.]+)` \|", table, flags=re.MULTILINE)
    values = [path for path, _ in leaves(DEFAULTS)]
    assert sorted(rows) == sorted(values)


def test_the_readme_gives_the_crd_upgrade_step():
    readme = (CHART / "README.md").read_text()
    assert "kubectl apply --server-side -f charts/gpu-scheduler/crds/" in readme


def test_the_schema_knows_every_value_and_closes_every_object():
    schema = json.loads((CHART / "values.schema.json").read_text())

    def walk(node: dict[str, Any], path: str) -> None:
        if "properties" in node:
            assert node.get("additionalProperties") is False, f"{path or 'values'}: unknown values must be refused"
            assert set(node.get("required", [])) <= set(node["properties"]), path
            for key, child in node["properties"].items():
                walk(child, f"{path}.{key}" if path else key)

    walk(schema, "")
    for path, _ in leaves(DEFAULTS):
        node = schema
        for part in path.split("."):
            node = node["properties"][part]
        assert node.get("description"), f"{path}: no description in values.schema.json"


def test_values_yaml_comments_every_value():
    """values.yaml says what each value is: a comment line right above every key (the entries of a map given whole,
    such as resources' requests and limits, aside)."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    stack: list[tuple[int, str]] = []  # (indentation, key) of the keys enclosing the current line
    uncommented = []
    for i, line in enumerate(lines):
        match = re.match(r"^(\s*)([A-Za-z]\w*):", line)
        if not match:
            continue
        indent, key = len(match.group(1)), match.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([k for _, k in stack] + [key])
        stack.append((indent, key))
        if any(k in WHOLE_VALUES for _, k in stack[:-1]):
            continue
        if not lines[i - 1].lstrip().startswith("#"):
            uncommented.append(path)
    assert uncommented == []


def test_kubectl_gpu_health_finds_the_charts_workloads_by_their_part_of_label():
    """`kubectl gpu health` looks for the chart's Deployments and DaemonSet by app.kubernetes.io/part-of: the
    value it looks for is the one the chart writes."""
    from gpu_scheduling.cli import health

    docs = render("default-values.yaml")
    workloads = [d for d in docs if d["kind"] in ("Deployment", "DaemonSet")]
    assert len(workloads) == 4
    # ... and the Services (the board's, the webhook's) carry it too, as every object of the chart does.
    for doc in [*workloads, *find(docs, "Service")]:
        assert doc["metadata"]["labels"][health.PART_OF_LABEL] == health.PART_OF, doc["metadata"]


# ---- gpu-board: security, defaults and the program -----------------------------------------------------------


@pytest.mark.parametrize("ci", [None, *CI])
def test_the_board_runs_locked_down_like_the_other_programs(ci):
    """The board's pod and container security settings are the scheduler's (uid/gid 1000, non-root, RuntimeDefault
    seccomp, read-only root filesystem, no privilege escalation, no capabilities)."""
    docs = render(ci)
    boards = [d for d in find(docs, "Deployment") if d["metadata"]["labels"]["app.kubernetes.io/component"] == "board"]
    (scheduler,) = [
        d for d in find(docs, "Deployment") if d["metadata"]["labels"]["app.kubernetes.io/component"] == "scheduler"
    ]
    assert len(boards) == (0 if ci == "board-disabled-values.yaml" else 1)
    for board in boards:
        pod, reference = board["spec"]["template"]["spec"], scheduler["spec"]["template"]["spec"]
        assert pod["securityContext"] == reference["securityContext"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        (c,) = pod["containers"]
        assert c["securityContext"] == reference["containers"][0]["securityContext"]
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        # Probed over HTTPS on its one port, as the webhook is.
        assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "https", "scheme": "HTTPS"}
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "https", "scheme": "HTTPS"}


@pytest.mark.parametrize("ci", [None, *CI])
def test_the_board_gets_exactly_its_rbac(ci):
    """Whatever the values: the board's ServiceAccount gets the reads, plus the form's rights in board.namespaces
    exactly when board.allowCreate; no other account is bound to its roles, and it to no other role."""
    values = yaml.safe_load((CI_DIR / ci).read_text()) if ci else {}
    board = {**DEFAULTS["board"], **((values or {}).get("board") or {})}
    docs = render(ci)
    name = board["name"] or BOARD
    if not board["enabled"]:
        assert granted(docs, name) == set()
        return
    expected = board_reads() | (board_creates(board["namespaces"]) if board["allowCreate"] else set())
    assert granted(docs, name) == expected
    for binding in docs:
        if binding["kind"] in ("ClusterRoleBinding", "RoleBinding") and binding["roleRef"]["name"].startswith(name):
            assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}]


def test_the_board_with_creation_in_the_test_bed_s_form():
    """What the test-bed deploys (roles/deploy: board.allowCreate with board.namespaces [default]): the reads, and
    create, get, list, delete of pods, GpuClaims and StatefulSets in default only; never update, patch, bind,
    evict, Secrets, Leases written, or anything in kube-system."""
    docs = manifests.render({"board": {"allowCreate": True, "namespaces": ["default"]}}, namespace=NAMESPACE)
    grants = granted(docs, BOARD)
    assert grants == board_reads() | board_creates(["default"])
    assert not {v for _, _, _, v in grants} & {"update", "patch", "deletecollection", "*"}
    assert not {r for _, _, r, _ in grants} & {"secrets", "pods/binding", "pods/eviction", "pods/exec", "configmaps"}
    assert not [g for g in grants if g[0] == NAMESPACE]
    args = board_args(docs)
    assert args[args.index("--allow-create") + 1] == "--namespace=default"
    assert openapi.validate(docs) == []


def test_the_board_defaults_are_the_program_s():
    """The chart's defaults are the program's own (constants): its name, the topology it groups by."""
    assert DEFAULTS["board"]["name"] == "" and manifests.keys()["board_name"] == constants.BOARD_NAME
    assert tuple(DEFAULTS["board"]["topologyLabels"]) == constants.DEFAULT_TOPOLOGY_LABELS
    assert DEFAULTS["board"]["allowCreate"] is False


def test_the_board_certificate_follows_the_release_namespace():
    docs = render(None, "gpu-system")
    cert = certificate(one(docs, "Secret", f"{BOARD}-tls"), "tls.crt")
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"{BOARD}.gpu-system.svc" in names.get_values_for_type(x509.DNSName)


@pytest.mark.parametrize(
    "ci", ["default-values.yaml", "board-values.yaml", "scheduler-values.yaml", "logging-values.yaml"]
)
def test_the_board_accepts_its_args(ci):
    """The arguments the Deployment gives gpu-board parse (its main's parse_args) to what the values say."""
    from gpu_scheduling.board import main as board

    docs = render(ci)
    (deployment,) = [
        d for d in find(docs, "Deployment") if d["metadata"]["labels"]["app.kubernetes.io/component"] == "board"
    ]
    values = yaml.safe_load((CI_DIR / ci).read_text()) or {}
    expected = {**DEFAULTS["board"], **(values.get("board") or {})}
    args = board.parse_args(deployment["spec"]["template"]["spec"]["containers"][0]["args"])
    assert (args.port, args.tls_cert, args.tls_key) == (8443, "/tls/tls.crt", "/tls/tls.key")
    assert list(args.topology_labels) == expected["topologyLabels"]
    assert args.allow_create is expected["allowCreate"]
    if expected["allowCreate"]:
        assert list(args.namespaces) == expected["namespaces"]
    assert args.scheduler_name == ("other-scheduler" if ci == "scheduler-values.yaml" else SCHEDULER)
    assert args.pod_image == f"gpu-scheduler-check:{APP_VERSION}"


def test_the_test_bed_deploys_the_board_with_creation_in_default():
    """roles/deploy's deploy_values (evaluated as Ansible does, with the images app_images hands over): the board
    from testbed_registry, --allow-create --namespace default, its pods on the check image; the chart renders it
    with exactly the reads and the form's rights in default."""
    role = ROOT / "roles" / "deploy"
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text())
    variables = yaml.safe_load((role / "vars" / "main.yml").read_text())
    ca_bundle = yaml.safe_load((CI_DIR / "webhook-existing-secret-values.yaml").read_text())["webhook"]["tls"][
        "caBundle"
    ]
    programs = ("scheduler", "webhook", "check", "agent", "board")
    context: dict[str, Any] = {
        **manifests.values(),
        "testbed_registry": "localhost:5001",
        "testbed_keys": manifests.keys(),
        "webhook_tls_ca_bundle": ca_bundle,
        "webhook_tls_checksum": "0123",
        "app_images_repositories": {p: f"repo-{p}" for p in programs},
        "app_images_tags": {p: f"tag-{p}" for p in programs},
    }
    values = manifests.evaluate({**defaults, **variables}, context)["deploy_values"]
    assert values["board"]["allowCreate"] is True and values["board"]["namespaces"] == ["default"]
    docs = manifests.render(values, namespace=NAMESPACE)
    c = container(docs, "Deployment", BOARD)
    assert c["image"] == "localhost:5001/repo-board:tag-board"
    args = c["args"]
    assert args[args.index("--allow-create") + 1 :][:1] == ["--namespace=default"]
    assert "--pod-image=localhost:5001/repo-check:tag-check" in args
    assert granted(docs, BOARD) == board_reads() | board_creates(["default"])
    assert openapi.validate(docs) == []
