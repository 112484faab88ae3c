"""The test-bed's templates and inventory use the same keys as the programs (src/gpu_scheduling/constants.py),
from one place (the inventory's `testbed_keys`), and its MutatingWebhookConfiguration, rendered by the one
template for both the test-bed and the control-plane tests, scopes the webhook the same way in both."""

import base64
import pathlib
import re

import pytest
import yaml

from gpu_scheduling import constants, gpumap
from gpu_scheduling.agent import inventory
from harness import manifests

ROOT = pathlib.Path(__file__).resolve().parents[2]
GROUP_VARS = yaml.safe_load((ROOT / "inventory/localhost/group_vars/all.yml").read_text())
KEYS = GROUP_VARS["testbed_keys"]
DEPLOY_DEFAULTS = yaml.safe_load((ROOT / "roles/deploy/defaults/main.yml").read_text())
# Every string constant of the programs, by name.
CONSTANTS = {name: value for name, value in vars(constants).items() if name.isupper() and isinstance(value, str)}


@pytest.mark.parametrize("key", sorted(KEYS))
def test_every_testbed_key_is_the_constant_of_its_name(key):
    """testbed_keys.<name> equals constants.<NAME>: each entry is named after the constant it stands for."""
    assert key.upper() in CONSTANTS, f"testbed_keys.{key}: src/gpu_scheduling/constants.py has no {key.upper()}"
    assert KEYS[key] == CONSTANTS[key.upper()], f"testbed_keys.{key} != constants.{key.upper()}"


def _ansible_files() -> list[pathlib.Path]:
    files = [p for d in ("roles", "playbooks") for p in sorted((ROOT / d).rglob("*")) if p.is_file()]
    return [*files, ROOT / "site.yml", ROOT / "teardown.yml"]


@pytest.mark.parametrize("key", sorted(KEYS))
def test_every_testbed_key_is_used(key):
    """An entry nothing reads is a second copy of a constant for no reason: remove it."""
    assert any(f"testbed_keys.{key}" in p.read_text() for p in _ansible_files()), f"testbed_keys.{key} is unused"


# Distinctive values: a constant's value is looked for only when an ordinary word or identifier cannot be it.
DISTINCTIVE_MIN_LENGTH = 16
# Files that must spell a value out, with the reason.
LITERAL_FILES = {
    "roles/deploy/files/crds/": "the CRDs are applied as static files (kubernetes.core.k8s src:) and read as they "
    "are by the control-plane tests; test_the_crds_use_the_api_of_the_constants checks "
    "them instead",
}
# (file, value) pairs where a value equals a constant by coincidence, with the reason.
LITERAL_VALUES = {
    (
        "roles/app_images/defaults/main.yml",
        "gpu-scheduler",
    ): "the scheduler image's name (images/README.md), not the schedulerName",
    (
        "roles/app_images/tasks/build.yml",
        "gpu-scheduling",
    ): "the Python distribution's name (pyproject.toml), not the Lease namespace",
    (
        "roles/deploy/templates/lease-namespace.yaml.j2",
        "gpu-scheduling",
    ): "app.kubernetes.io/part-of names the project, not the Lease namespace",
}


def _distinctive(value: str) -> bool:
    return any(c in value for c in "/.-") or len(value) >= DISTINCTIVE_MIN_LENGTH


def _without_comments(text: str) -> str:
    """The text without Jinja comments ({# #}) and YAML/shell/Python comments (`#` to the end of the line, at its
    start or after a blank): prose may name a key, configuration may not."""
    text = re.sub(r"\{#.*?#\}", "", text, flags=re.DOTALL)
    return "\n".join(re.sub(r"(^|\s)#.*$", "", line) for line in text.splitlines())


def test_no_file_of_the_test_bed_spells_out_a_constant():
    """Every file under roles/ and playbooks/ (and site.yml, teardown.yml) takes the keys the programs agree on from
    `testbed_keys` (or a variable derived from it), never as a literal, so a new literal key cannot creep in.

    Rule: a string constant of src/gpu_scheduling/constants.py is looked for when its value is distinctive, that is
    it contains `/`, `.` or `-`, or is at least DISTINCTIVE_MIN_LENGTH characters long (so ordinary words and
    identifiers such as `Scheduled`, `NODE_NAME` or `v1` are not). It is found where it stands as a whole token:
    not inside a longer name (`gpu-scheduler-check` does not contain `gpu-scheduler`, `gpu.scheduling/claim` does
    not contain `gpu.scheduling`). Comments are not looked at; README.md files are documentation. LITERAL_FILES and
    LITERAL_VALUES list the exceptions, each with its reason. A constant the templates do not use needs no entry
    in testbed_keys; one they use must have one.
    """
    values = {value: name for name, value in CONSTANTS.items() if _distinctive(value)}
    found = []
    for path in _ansible_files():
        rel = path.relative_to(ROOT).as_posix()
        if path.name == "README.md" or any(rel.startswith(prefix) for prefix in LITERAL_FILES):
            continue
        text = _without_comments(path.read_text())
        for value, name in values.items():
            if (rel, value) in LITERAL_VALUES:
                continue
            if re.search(rf"(?<![\w/-])(?<!\w\.){re.escape(value)}(?![\w/-]|\.\w)", text):
                found.append(f"{rel}: {value!r} (use testbed_keys.{name.lower()})")
    assert not found, "literal keys instead of testbed_keys:\n" + "\n".join(found)


def test_the_exceptions_are_still_needed():
    """An exception that no longer matches anything is removed, so the list stays the true one."""
    for rel, value in LITERAL_VALUES:
        assert value in CONSTANTS.values(), (rel, value)
        assert value in _without_comments((ROOT / rel).read_text()), (rel, value)
    for prefix in LITERAL_FILES:
        assert (ROOT / prefix).is_dir(), prefix


def test_the_crds_use_the_api_of_the_constants():
    names = {}
    for path in sorted((ROOT / "roles/deploy/files/crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        spec = crd["spec"]
        assert spec["group"] == constants.CLAIM_GROUP, path.name
        assert crd["metadata"]["name"] == f"{spec['names']['plural']}.{constants.CLAIM_GROUP}", path.name
        assert constants.CLAIM_VERSION in [v["name"] for v in spec["versions"]], path.name
        names[spec["names"]["kind"]] = spec["names"]["plural"]
    # The kinds and plurals the programs build their paths and objects from (kube.paths, claims.objects).
    assert names == {
        constants.GPU_CLAIM_KIND: constants.GPU_CLAIM_PLURAL,
        constants.GPU_NODE_STATUS_KIND: constants.GPU_NODE_STATUS_PLURAL,
    }


def render(template: str) -> list[dict]:
    """A template of roles/deploy as the deploy role renders it (group_vars, its defaults, the facts of the TLS and
    image roles)."""
    return manifests.render(
        template,
        webhook_tls_ca_bundle="Q0E=",
        webhook_tls_checksum="abc",
        deploy_images={"scheduler": "s:1", "webhook": "w:1", "check": "c:1", "agent": "a:1"},
    )


CA_PEM = b"-----BEGIN CERTIFICATE-----\nQ0E=\n-----END CERTIFICATE-----\n"
CA_B64 = base64.b64encode(CA_PEM).decode()
URL = "https://127.0.0.1:18443/mutate"


def _webhook_configuration(mode: str, scheduler_name: str) -> tuple[dict, dict]:
    """The configuration rendered one way, and the clientConfig it must have."""
    service = {
        "name": GROUP_VARS["testbed_webhook_service"],
        "namespace": GROUP_VARS["testbed_system_namespace"],
        "path": "/mutate",
        "port": 443,
    }
    if mode == "deploy role":  # what roles/deploy applies (deploy_webhook_url empty: the Service)
        (config,) = manifests.render(
            "webhook-configuration.yaml.j2", webhook_tls_ca_bundle=CA_B64, deploy_scheduler_name=scheduler_name
        )
        return config, {"service": service, "caBundle": CA_B64}
    if mode == "harness, service":
        config = manifests.webhook_configuration(
            url=None,
            service=(service["name"], service["namespace"], 443),
            ca_bundle_b64=CA_B64,
            scheduler_name=scheduler_name,
        )
        return config, {"service": service, "caBundle": CA_B64}
    # The control-plane tests: the webhook on localhost.
    config = manifests.webhook_configuration(url=URL, service=None, ca_bundle_b64=CA_B64, scheduler_name=scheduler_name)
    return config, {"url": URL, "caBundle": CA_B64}


@pytest.mark.parametrize("scheduler_name", [constants.DEFAULT_SCHEDULER_NAME, "other-scheduler"])
@pytest.mark.parametrize("mode", ["deploy role", "harness, service", "harness, url"])
def test_webhook_configuration_scopes_the_same_in_every_mode(mode, scheduler_name):
    config, client = _webhook_configuration(mode, scheduler_name)
    assert config["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert config["kind"] == "MutatingWebhookConfiguration"
    assert config["metadata"] == {"name": GROUP_VARS["testbed_webhook_service"]}
    (hook,) = config["webhooks"]
    assert hook["clientConfig"] == client
    assert hook["name"] == constants.WEBHOOK_NAME
    assert hook["rules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]
    # Only pods that carry the map or use this scheduler reach the webhook.
    assert hook["matchConditions"] == [
        {
            "name": "gpu-pods-only",
            "expression": f"(has(object.metadata.annotations) && '{constants.MAP_ANNOTATION}' in "
            f"object.metadata.annotations) || (has(object.spec.schedulerName) && "
            f"object.spec.schedulerName == '{scheduler_name}')",
        }
    ]
    assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["timeoutSeconds"] == DEPLOY_DEFAULTS["deploy_webhook_timeout_seconds"] == 5
    assert hook["reinvocationPolicy"] == "Never"


def test_webhook_configuration_modes_differ_only_in_the_client():
    configs = [
        _webhook_configuration(mode, constants.DEFAULT_SCHEDULER_NAME)[0]
        for mode in ("deploy role", "harness, service", "harness, url")
    ]
    for config in configs:
        del config["webhooks"][0]["clientConfig"]
    assert configs[0] == configs[1] == configs[2]


def test_webhook_configuration_takes_one_client():
    with pytest.raises(ValueError):
        manifests.webhook_configuration(url=URL, service=("s", "ns", 443), ca_bundle_b64=CA_B64, scheduler_name="x")
    with pytest.raises(ValueError):
        manifests.webhook_configuration(url=None, service=None, ca_bundle_b64=CA_B64, scheduler_name="x")


def test_the_webhook_certificate_names_the_service_the_configuration_calls():
    """webhook_tls signs the DNS names of testbed_webhook_service, the Service deploy creates and calls."""
    tls_tasks = (ROOT / "roles/webhook_tls/tasks/main.yml").read_text()
    assert 'DNS:{{ testbed_webhook_service }}.{{ testbed_system_namespace }}.svc"' in tls_tasks
    service = next(d for d in render("webhook.yaml.j2") if d["kind"] == "Service")
    assert service["metadata"] == {
        "name": GROUP_VARS["testbed_webhook_service"],
        "namespace": GROUP_VARS["testbed_system_namespace"],
    }
    assert service["spec"]["ports"][0]["port"] == DEPLOY_DEFAULTS["deploy_webhook_port"]


def test_check_statefulset_carries_the_take_home_map():
    _service, sts = render("check.yaml.j2")
    template = sts["spec"]["template"]
    assert sts["spec"]["replicas"] == 5 and template["spec"]["schedulerName"] == constants.DEFAULT_SCHEDULER_NAME
    parsed = gpumap.parse(template["metadata"]["annotations"][constants.MAP_ANNOTATION])
    assert gpumap.encode(parsed) == "0=node1:0,1\n1=node2:2\n2=node3:0,1,2\n3=node4:3\n4=node4:3\n"


@pytest.mark.parametrize("template", ["scheduler.yaml.j2", "webhook.yaml.j2", "check.yaml.j2", "agent.yaml.j2"])
def test_workloads_are_locked_down(template):
    for doc in render(template):
        if doc["kind"] not in ("Deployment", "StatefulSet", "DaemonSet"):
            continue
        pod = doc["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 1000
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] and sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"]["drop"] == ["ALL"]


def test_scheduler_rbac_is_least_privilege():
    docs = render("scheduler-rbac.yaml.j2")
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    granted = {(res, verb) for rule in role["rules"] for res in rule["resources"] for verb in rule["verbs"]}
    assert granted == {
        ("pods", "get"),
        ("pods", "list"),
        ("pods", "watch"),
        ("nodes", "get"),
        ("nodes", "list"),
        ("nodes", "watch"),
        ("pods/binding", "create"),
        ("pods/status", "patch"),
        ("events", "create"),
        ("gpuclaims", "get"),
        ("gpuclaims", "list"),
        ("gpuclaims", "watch"),
        ("gpunodestatuses", "get"),
        ("gpunodestatuses", "list"),
        ("gpunodestatuses", "watch"),
        ("gpuclaims/status", "patch"),
    }
    # Leases (the GPU locks and the leader Lease) only in the project's own namespace.
    (lease_role,) = [d for d in docs if d["kind"] == "Role"]
    assert lease_role["metadata"]["namespace"] == constants.LEASE_NAMESPACE
    assert lease_role["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "list", "watch", "create", "update", "delete"],
        }
    ]
    (binding,) = [d for d in docs if d["kind"] == "RoleBinding"]
    assert binding["metadata"]["namespace"] == constants.LEASE_NAMESPACE
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": lease_role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpu-scheduler", "namespace": GROUP_VARS["testbed_system_namespace"]}
    ]
    # Nothing on Leases in kube-system, where the cluster's own components keep theirs.
    in_kube_system = [
        d for d in docs if d["metadata"].get("namespace") == "kube-system" and d["kind"] in ("Role", "RoleBinding")
    ]
    assert in_kube_system == []
    assert not any("leases" in rule["resources"] for rule in role["rules"])


@pytest.mark.parametrize(
    "template", ["scheduler-rbac.yaml.j2", "agent.yaml.j2", "webhook.yaml.j2", "scheduler.yaml.j2"]
)
def test_leases_are_reachable_only_in_the_project_namespace(template):
    for doc in render(template):
        if doc["kind"] in ("Role", "ClusterRole"):
            on_leases = [r for r in doc["rules"] if "leases" in r["resources"]]
            if on_leases:
                assert doc["kind"] == "Role" and doc["metadata"]["namespace"] == constants.LEASE_NAMESPACE, doc
        if doc["kind"] in ("Role", "RoleBinding"):
            assert doc["metadata"]["namespace"] != "kube-system", doc


def test_the_agent_lists_the_gpu_leases_where_they_are():
    (role,) = [d for d in render("agent.yaml.j2") if d["kind"] == "Role"]
    assert role["metadata"]["namespace"] == constants.LEASE_NAMESPACE
    assert role["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["list"]}]
    (binding,) = [d for d in render("agent.yaml.j2") if d["kind"] == "RoleBinding"]
    assert binding["metadata"]["namespace"] == constants.LEASE_NAMESPACE


def test_the_project_namespace_is_created():
    (namespace,) = render("lease-namespace.yaml.j2")
    assert namespace["kind"] == "Namespace" and namespace["metadata"]["name"] == constants.LEASE_NAMESPACE


def test_the_scheduler_runs_two_replicas_with_leader_election():
    deployment, pdb = render("scheduler.yaml.j2")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    # A rollout never goes below two replicas: the new one is ready before an old one goes.
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    (container,) = spec["template"]["spec"]["containers"]
    args = container["args"]
    assert "--leader-elect" in args and "--no-leader-elect" not in args
    assert f"--leader-elect-resource-namespace={constants.LEASE_NAMESPACE}" in args
    assert f"--leader-elect-resource-name={constants.DEFAULT_SCHEDULER_NAME}" in args
    # The program's own timings and identity apply (one source for them).
    assert not [
        a
        for a in args
        if a.startswith(
            (
                "--leader-elect-lease-duration",
                "--leader-elect-renew-deadline",
                "--leader-elect-retry-period",
                "--leader-elect-identity",
            )
        )
    ]
    assert pdb["kind"] == "PodDisruptionBudget" and pdb["spec"]["minAvailable"] == 1
    assert pdb["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert pdb["spec"]["selector"]["matchLabels"] == spec["template"]["metadata"]["labels"]


def test_the_scheduler_args_parse():
    """What the Deployment passes is accepted by the program, and elects on the Lease the role grants."""
    from gpu_scheduling.scheduler import main

    deployment, _ = render("scheduler.yaml.j2")
    args = main.parse_args(deployment["spec"]["template"]["spec"]["containers"][0]["args"])
    election = main.election_config(args)
    assert args.leader_elect and election.namespace == constants.LEASE_NAMESPACE
    assert election.name == constants.DEFAULT_SCHEDULER_NAME


def test_the_annotation_policy_fixes_every_key_the_programs_use():
    """Every annotation that decides a pod's GPUs is in the policy that fixes them at creation, one validation
    each; and the Binding and creation policies name the allocation keys."""
    docs = {
        d["metadata"]["name"]: d
        for d in render("admission-policies.yaml.j2")
        if d["kind"] == "ValidatingAdmissionPolicy"
    }
    fixed = docs["gpu-scheduling-pod-annotations-fixed"]["spec"]["validations"]
    keys = (
        constants.MAP_ANNOTATION,
        constants.CLAIM_ANNOTATION,
        constants.ALLOCATED_ANNOTATION,
        constants.GPU_IDS_ANNOTATION,
        constants.EXCLUSIVITY_ANNOTATION,
    )
    for key in keys:
        assert sum(f"'{key}'" in v["expression"] for v in fixed) == 1, key
    for name in ("gpu-scheduling-binding-annotations", "gpu-scheduling-allocation-not-at-creation"):
        text = str(docs[name]["spec"])
        for key in keys[2:]:
            assert key in text, (name, key)
    bindings = {
        d["spec"]["policyName"]
        for d in render("admission-policies.yaml.j2")
        if d["kind"] == "ValidatingAdmissionPolicyBinding"
    }
    assert bindings == set(docs)


def test_the_deployed_agent_simulates_what_the_control_plane_tests_write():
    """The KinD agent's simulated inventory (deploy_agent_simulated) and the one the control-plane scenarios and the
    benchmark write (agent.inventory.simulated_status()) are the same, so a scenario holds on both tiers."""
    assert DEPLOY_DEFAULTS["deploy_agent_simulated"] == inventory.DEFAULT_SIMULATED
