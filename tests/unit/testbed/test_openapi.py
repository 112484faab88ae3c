"""harness.openapi checks manifests as the apiserver would (fieldValidation=Strict), against the real OpenAPI v3
schemas of the pinned Kubernetes version and the project's own CRDs: what is valid passes, and each kind of
mistake is reported with the document, the field's path and what was expected."""

import base64
import copy

import pytest
import yaml

from harness import openapi
from tests import ROOT

# The CRDs live in the chart; before the chart they were files of the deploy role.
CRD_DIRS = [ROOT / "charts" / "gpu-scheduler" / "crds", ROOT / "roles" / "deploy" / "files" / "crds"]
CA_BUNDLE = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n...\n-----END CERTIFICATE-----\n").decode()

LABELS = {"app.kubernetes.io/name": "gpu-scheduler", "app.kubernetes.io/part-of": "gpu-scheduling"}
POD_SPEC = {
    "serviceAccountName": "gpu-scheduler",
    "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
    "containers": [
        {
            "name": "scheduler",
            "image": "localhost:5000/gpu-scheduler:dev",
            "imagePullPolicy": "IfNotPresent",
            "args": ["--leader-elect", "--scheduler-name=gpu-scheduler"],
            "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
            "ports": [{"name": "metrics", "containerPort": 8080, "protocol": "TCP"}],
            "readinessProbe": {"httpGet": {"path": "/readyz", "port": "metrics"}, "periodSeconds": 5},
            "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}},
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": 1.5e8, "cpu": 1}},
            "securityContext": {
                "allowPrivilegeEscalation": False,
                "readOnlyRootFilesystem": True,
                "capabilities": {"drop": ["ALL"]},
            },
        }
    ],
    "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}],
}
DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "gpu-scheduler", "namespace": "gpu-system", "labels": LABELS, "annotations": None},
    "spec": {
        "replicas": 2,
        "selector": {"matchLabels": LABELS},
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": "25%"}},
        "template": {"metadata": {"labels": LABELS}, "spec": POD_SPEC},
    },
}
DAEMONSET = {
    "apiVersion": "apps/v1",
    "kind": "DaemonSet",
    "metadata": {"name": "gpu-inventory-agent", "namespace": "gpu-system"},
    "spec": {
        "selector": {"matchLabels": {"app": "agent"}},
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}},
        "template": {
            "metadata": {"labels": {"app": "agent"}},
            "spec": {
                "nodeSelector": {"gpu.scheduling/gpu-node": "true"},
                "containers": [
                    {"name": "agent", "image": "agent:dev", "volumeMounts": [{"name": "dev", "mountPath": "/dev"}]}
                ],
                "volumes": [{"name": "dev", "hostPath": {"path": "/dev", "type": "Directory"}}],
            },
        },
    },
}
SERVICE = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "gpu-webhook", "namespace": "gpu-system"},
    "spec": {
        "selector": {"app": "gpu-webhook"},
        "ports": [
            {"name": "https", "port": 443, "targetPort": "https"},
            {"name": "metrics", "port": 8080, "targetPort": 8080},
        ],
    },
}
VALIDATING_ADMISSION_POLICY = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingAdmissionPolicy",
    "metadata": {"name": "gpu-scheduling-pod-annotations-fixed"},
    "spec": {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["UPDATE"],
                    "resources": ["pods", "pods/status"],
                }
            ]
        },
        "variables": [{"name": "before", "expression": "oldObject.metadata.annotations"}],
        "validations": [{"expression": "true", "reason": "Forbidden", "messageExpression": "'fixed'"}],
    },
}
VALIDATING_ADMISSION_POLICY_BINDING = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingAdmissionPolicyBinding",
    "metadata": {"name": "gpu-scheduling-pod-annotations-fixed"},
    "spec": {"policyName": "gpu-scheduling-pod-annotations-fixed", "validationActions": ["Deny"]},
}
MUTATING_WEBHOOK_CONFIGURATION = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "MutatingWebhookConfiguration",
    "metadata": {"name": "gpu-webhook"},
    "webhooks": [
        {
            "name": "gpu-webhook.gpu.scheduling",
            "clientConfig": {
                "service": {"name": "gpu-webhook", "namespace": "gpu-system", "path": "/mutate", "port": 443},
                "caBundle": CA_BUNDLE,
            },
            "rules": [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE"],
                    "resources": ["pods"],
                    "scope": "Namespaced",
                }
            ],
            "matchConditions": [{"name": "gpu-pods-only", "expression": "has(object.spec.schedulerName)"}],
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 5,
            "reinvocationPolicy": "Never",
        }
    ],
}
POD_DISRUPTION_BUDGET = {
    "apiVersion": "policy/v1",
    "kind": "PodDisruptionBudget",
    "metadata": {"name": "gpu-scheduler", "namespace": "gpu-system"},
    "spec": {"minAvailable": 1, "selector": {"matchLabels": LABELS}},
}
NAMESPACE = {
    "apiVersion": "v1",
    "kind": "Namespace",
    "metadata": {"name": "gpu-system", "labels": {"pod-security.kubernetes.io/enforce": "restricted"}},
}
CLUSTER_ROLE = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": {"name": "gpu-scheduler"},
    "rules": [
        {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
    ],
}
CLAIM = {
    "apiVersion": "gpu.scheduling/v1",
    "kind": "GpuClaim",
    "metadata": {"name": "train", "namespace": "team-a", "labels": {"team": "a"}},
    "spec": {
        "devices": {"count": 2, "policy": "preferIds", "preferIds": [0, 1], "exclusivity": "Exclusive"},
        "selector": {"matchLabels": {"gpu.scheduling/model": "h100"}},
        "topology": {"mode": "Preferred", "minBandwidthGBps": 100},
    },
    "status": {"phase": "Bound", "nodeName": "node4", "gpuIds": [0, 1], "allocated": "node4:0,1"},
}


def crds() -> list[dict]:
    folder = next((d for d in CRD_DIRS if d.is_dir()), None)
    assert folder is not None, f"no CRD folder among {CRD_DIRS}"
    return [doc for path in sorted(folder.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc]


def changed(doc: dict, path: str, value: object) -> dict:
    """A deep copy of `doc` with the field at the dotted `path` (list indexes as numbers) set to `value`."""
    new = copy.deepcopy(doc)
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    target = new
    for key in parents:
        target = target[key]
    target[last] = value
    return new


def removed(doc: dict, path: str) -> dict:
    new = copy.deepcopy(doc)
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    target = new
    for key in parents:
        target = target[key]
    del target[last]
    return new


def the_error(doc: dict, **kwargs) -> str:
    errors = openapi.validate([doc], **kwargs)
    assert len(errors) == 1, errors
    return errors[0]


VALID = {
    "Deployment": DEPLOYMENT,
    "DaemonSet": DAEMONSET,
    "Service": SERVICE,
    "ValidatingAdmissionPolicy": VALIDATING_ADMISSION_POLICY,
    "ValidatingAdmissionPolicyBinding": VALIDATING_ADMISSION_POLICY_BINDING,
    "MutatingWebhookConfiguration": MUTATING_WEBHOOK_CONFIGURATION,
    "PodDisruptionBudget": POD_DISRUPTION_BUDGET,
    "Namespace": NAMESPACE,
    "ClusterRole": CLUSTER_ROLE,
}


@pytest.mark.parametrize("doc", VALID.values(), ids=VALID.keys())
def test_a_valid_object_has_no_errors(doc):
    assert openapi.validate([doc]) == []


def test_the_projects_crds_are_valid_customresourcedefinitions():
    assert openapi.validate(crds()) == []


def test_a_valid_custom_resource_has_no_errors():
    assert openapi.validate([CLAIM], crds=crds()) == []


def test_an_unknown_field_is_named_with_its_path_and_a_suggestion():
    doc = changed(DEPLOYMENT, "spec.template.spec.containers.0.imagePullPolcy", "Always")
    assert the_error(doc) == (
        "Deployment gpu-system/gpu-scheduler: spec.template.spec.containers[0].imagePullPolcy: "
        'unknown field "imagePullPolcy" of Container (strict field validation); did you mean imagePullPolicy?'
    )


def test_an_unknown_field_of_objectmeta_is_an_error():
    error = the_error(changed(NAMESPACE, "metadata.label", {"a": "b"}))
    assert error.startswith('Namespace gpu-system: metadata.label: unknown field "label" of ObjectMeta')


def test_an_unknown_top_level_field_is_an_error():
    error = the_error(changed(CLUSTER_ROLE, "rule", []))
    assert error.startswith('ClusterRole gpu-scheduler: rule: unknown field "rule" of ClusterRole')


def test_a_wrong_type_names_the_expected_type_and_the_value():
    error = the_error(changed(DEPLOYMENT, "spec.replicas", "two"))
    assert error == 'Deployment gpu-system/gpu-scheduler: spec.replicas: expected integer (int32), got string "two"'


def test_a_yaml_boolean_where_a_string_belongs_is_an_error():
    # `value: yes` in YAML 1.1 is a boolean: the apiserver refuses it for an env var's string value.
    doc = changed(DEPLOYMENT, "spec.template.spec.containers.0.env", [{"name": "DEBUG", "value": True}])
    assert the_error(doc).endswith("spec.template.spec.containers[0].env[0].value: expected string, got boolean true")


def test_a_missing_required_field_is_named():
    doc = removed(DEPLOYMENT, "spec.template.spec.containers.0.name")
    assert the_error(doc) == (
        "Deployment gpu-system/gpu-scheduler: spec.template.spec.containers[0].name: required field missing"
    )


def test_null_stands_for_not_set_but_not_for_a_required_field():
    assert openapi.validate([changed(DEPLOYMENT, "spec.strategy", None)]) == []
    doc = changed(POD_DISRUPTION_BUDGET, "spec.selector.matchExpressions", [{"key": "app", "operator": None}])
    assert the_error(doc).endswith("spec.selector.matchExpressions[0].operator: required field is null")


def test_an_int32_out_of_range_is_an_error():
    error = the_error(changed(SERVICE, "spec.ports.0.port", 2**31))
    assert error.endswith("spec.ports[0].port: 2147483648 is out of range of int32")


@pytest.mark.parametrize("port", [8443, "https"])
def test_an_int_or_string_port_takes_either_form(port):
    assert openapi.validate([changed(SERVICE, "spec.ports.0.targetPort", port)]) == []


@pytest.mark.parametrize("value", ["50%", 1])
def test_an_int_or_string_budget_takes_either_form(value):
    assert openapi.validate([changed(POD_DISRUPTION_BUDGET, "spec.minAvailable", value)]) == []


@pytest.mark.parametrize(("value", "shown"), [(True, "boolean true"), (1.5, "number 1.5"), ([443], "array")])
def test_an_int_or_string_refuses_anything_else(value, shown):
    error = the_error(changed(SERVICE, "spec.ports.0.targetPort", value))
    assert error.endswith(f"spec.ports[0].targetPort: expected an integer or a string, got {shown}")


def test_a_quantity_must_parse():
    doc = changed(DEPLOYMENT, "spec.template.spec.containers.0.resources.limits.memory", "1GB")
    assert "resources.limits.memory: expected a quantity" in the_error(doc)


def test_a_ca_bundle_must_be_base64():
    doc = changed(MUTATING_WEBHOOK_CONFIGURATION, "webhooks.0.clientConfig.caBundle", "-----BEGIN CERTIFICATE-----")
    assert "webhooks[0].clientConfig.caBundle: expected base64 (format byte)" in the_error(doc)


def test_map_keys_that_are_not_identifiers_are_bracketed():
    doc = changed(NAMESPACE, "metadata.labels", {"pod-security.kubernetes.io/enforce": 1})
    expected = "metadata.labels[pod-security.kubernetes.io/enforce]: expected string, got integer 1"
    assert the_error(doc).endswith(expected)


def test_an_unknown_kind_is_an_error_with_a_suggestion():
    error = the_error({**DEPLOYMENT, "kind": "Deploymnet"})
    assert error.startswith("Deploymnet gpu-system/gpu-scheduler: unknown kind 'Deploymnet' of apiVersion 'apps/v1'")
    assert error.endswith("did you mean Deployment?")


def test_a_kind_in_the_wrong_group_version_is_an_error():
    assert "unknown kind 'Deployment' of apiVersion 'v1'" in the_error({**DEPLOYMENT, "apiVersion": "v1"})


def test_an_unknown_api_version_is_an_error():
    assert "unknown apiVersion 'apps/v2'" in the_error({**DEPLOYMENT, "apiVersion": "apps/v2"})
    assert "unknown apiVersion '../../etc'" in the_error({**DEPLOYMENT, "apiVersion": "../../etc"})


def test_a_custom_resource_without_its_crd_is_of_an_unknown_kind():
    assert "unknown apiVersion 'gpu.scheduling/v1' (kind GpuClaim)" in the_error(CLAIM)


def test_a_version_that_the_crd_does_not_serve_is_unknown():
    unserved = copy.deepcopy(crds())
    for crd in unserved:
        for version in crd["spec"]["versions"]:
            version["served"] = False
    assert "unknown apiVersion 'gpu.scheduling/v1'" in the_error(CLAIM, crds=unserved)


def test_a_custom_resource_is_checked_against_its_crd_schema():
    doc = copy.deepcopy(CLAIM)
    doc["metadata"]["labelz"] = {}
    doc["spec"]["devices"].update(count=0, policy="tightest", colour="green")
    doc["spec"]["gangRef"] = 7
    assert openapi.validate([doc], crds=crds()) == [
        (
            'GpuClaim team-a/train: metadata.labelz: unknown field "labelz" of ObjectMeta (strict field validation); '
            "did you mean labels?"
        ),
        "GpuClaim team-a/train: spec.devices.count: expected >= 1, got 0",
        (
            'GpuClaim team-a/train: spec.devices.policy: unsupported value string "tightest": expected one of '
            '"contiguous", "spread", "preferIds"'
        ),
        'GpuClaim team-a/train: spec.devices.colour: unknown field "colour" (strict field validation)',
        "GpuClaim team-a/train: spec.gangRef: expected string, got integer 7",
    ]


def test_a_custom_resource_without_its_required_spec_is_an_error():
    assert the_error(removed(CLAIM, "spec"), crds=crds()) == "GpuClaim team-a/train: spec: required field missing"


def test_a_crd_object_without_properties_is_closed_unless_it_preserves_unknown_fields():
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Cluster",
            "names": {"kind": "Widget", "plural": "widgets"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {
                                        "pruned": {"type": "object"},
                                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                                        "port": {"x-kubernetes-int-or-string": True},
                                        "items": {
                                            "type": "array",
                                            "x-kubernetes-list-type": "map",
                                            "x-kubernetes-list-map-keys": ["name"],
                                            "items": {
                                                "type": "object",
                                                "required": ["name"],
                                                "properties": {"name": {"type": "string"}},
                                            },
                                        },
                                    },
                                }
                            },
                        }
                    },
                }
            ],
        },
    }
    assert openapi.validate([crd]) == []
    widget = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"pruned": {"a": 1}, "free": {"b": {"c": 2}}, "port": "http", "items": [{"name": "x"}, {"name": "x"}]},
    }
    assert openapi.validate([widget], crds=[crd]) == [
        'Widget w: spec.pruned.a: unknown field "a" (strict field validation)',
        'Widget w: spec.items[1]: duplicate entry (name="x") of item 0 in a map',
    ]


def test_every_problem_of_every_document_is_reported_and_empty_documents_are_skipped():
    bad_replicas, bad_spec = changed(DEPLOYMENT, "spec.replicas", "two"), changed(NAMESPACE, "spec", 1)
    docs = [None, bad_replicas, NAMESPACE, "kind: Service", bad_spec]
    errors = openapi.validate(docs)
    labels = [e.split(":")[0] for e in errors]
    assert labels == ["Deployment gpu-system/gpu-scheduler", "document #3", "Namespace gpu-system"]


def test_missing_schemas_name_the_command_that_fetches_them(monkeypatch, tmp_path):
    monkeypatch.setenv("GOMODCACHE", str(tmp_path))
    openapi.spec_dir.cache_clear()
    try:
        with pytest.raises(openapi.SchemasMissing, match=r"go mod download -json k8s\.io/kubernetes@v"):
            openapi.spec_dir()
    finally:
        monkeypatch.undo()
        openapi.spec_dir.cache_clear()
    assert openapi.spec_dir().is_dir()
