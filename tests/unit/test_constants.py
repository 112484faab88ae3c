"""The test-bed's templates and inventory use the same keys as the programs (src/gpu_scheduling/constants.py),
and its MutatingWebhookConfiguration scopes the webhook exactly as the control-plane tests do."""

import pathlib

import jinja2
import pytest
import yaml

from gpu_scheduling import constants, gpumap
from tests.harness.components import match_conditions

ROOT = pathlib.Path(__file__).resolve().parents[2]
GROUP_VARS = yaml.safe_load((ROOT / "inventory/localhost/group_vars/all.yml").read_text())
DEPLOY_DEFAULTS = yaml.safe_load((ROOT / "roles/deploy/defaults/main.yml").read_text())


@pytest.mark.parametrize(
    "var, constant",
    [
        ("testbed_map_annotation", constants.MAP_ANNOTATION),
        ("testbed_scheduler_name", constants.DEFAULT_SCHEDULER_NAME),
        ("testbed_cuda_env", constants.CUDA_ENV),
        ("testbed_node_name_env", constants.NODE_NAME_ENV),
        ("testbed_webhook_name", constants.WEBHOOK_NAME),
        ("testbed_webhook_tls_secret", constants.WEBHOOK_TLS_SECRET),
        ("testbed_claim_annotation", constants.CLAIM_ANNOTATION),
        ("testbed_allocated_annotation", constants.ALLOCATED_ANNOTATION),
        ("testbed_gpu_ids_annotation", constants.GPU_IDS_ANNOTATION),
        ("testbed_exclusivity_annotation", constants.EXCLUSIVITY_ANNOTATION),
    ],
)
def test_inventory_keys_match_the_programs(var, constant):
    assert GROUP_VARS[var] == constant


@pytest.mark.parametrize("var, constant", [("deploy_lease_namespace", constants.LEASE_NAMESPACE)])
def test_deploy_defaults_match_the_programs(var, constant):
    assert DEPLOY_DEFAULTS[var] == constant


def render(template: str) -> list[dict]:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(ROOT / "roles/deploy/templates"),
                             undefined=jinja2.StrictUndefined)
    values = {**GROUP_VARS, **DEPLOY_DEFAULTS, "webhook_tls_ca_bundle": "Q0E=", "webhook_tls_checksum": "abc",
              "deploy_images": {"scheduler": "s:1", "webhook": "w:1", "check": "c:1", "agent": "a:1"}}
    return [d for d in yaml.safe_load_all(env.get_template(template).render(**values)) if d]


def test_webhook_configuration_scopes_like_the_tests():
    (config,) = render("webhook-configuration.yaml.j2")
    hook = config["webhooks"][0]
    assert hook["name"] == constants.WEBHOOK_NAME
    assert hook["matchConditions"] == match_conditions(constants.DEFAULT_SCHEDULER_NAME)
    assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
    assert hook["admissionReviewVersions"] == ["v1"]


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
    assert granted == {("pods", "get"), ("pods", "list"), ("pods", "watch"), ("nodes", "get"), ("nodes", "list"),
                       ("nodes", "watch"), ("pods/binding", "create"), ("pods/status", "patch"),
                       ("events", "create"), ("gpuclaims", "get"), ("gpuclaims", "list"),
                       ("gpuclaims", "watch"), ("gpunodestatuses", "get"), ("gpunodestatuses", "list"),
                       ("gpunodestatuses", "watch"), ("gpuclaims/status", "patch")}
    # Leases (the GPU locks and the leader Lease) only in the project's own namespace.
    (lease_role,) = [d for d in docs if d["kind"] == "Role"]
    assert lease_role["metadata"]["namespace"] == constants.LEASE_NAMESPACE
    assert lease_role["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                                    "verbs": ["get", "list", "watch", "create", "update", "delete"]}]
    (binding,) = [d for d in docs if d["kind"] == "RoleBinding"]
    assert binding["metadata"]["namespace"] == constants.LEASE_NAMESPACE
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": lease_role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpu-scheduler",
                                    "namespace": DEPLOY_DEFAULTS["deploy_system_namespace"]}]
    # Nothing on Leases in kube-system, where the cluster's own components keep theirs.
    in_kube_system = [d for d in docs if d["metadata"].get("namespace") == "kube-system"
                      and d["kind"] in ("Role", "RoleBinding")]
    assert in_kube_system == []
    assert not any("leases" in rule["resources"] for rule in role["rules"])


@pytest.mark.parametrize("template", ["scheduler-rbac.yaml.j2", "agent.yaml.j2", "webhook.yaml.j2",
                                      "scheduler.yaml.j2"])
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
    assert not [a for a in args if a.startswith(("--leader-elect-lease-duration", "--leader-elect-renew-deadline",
                                                 "--leader-elect-retry-period", "--leader-elect-identity"))]
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
    docs = {d["metadata"]["name"]: d for d in render("admission-policies.yaml.j2")
            if d["kind"] == "ValidatingAdmissionPolicy"}
    fixed = docs["gpu-scheduling-pod-annotations-fixed"]["spec"]["validations"]
    keys = (constants.MAP_ANNOTATION, constants.CLAIM_ANNOTATION, constants.ALLOCATED_ANNOTATION,
            constants.GPU_IDS_ANNOTATION, constants.EXCLUSIVITY_ANNOTATION)
    for key in keys:
        assert sum(f"'{key}'" in v["expression"] for v in fixed) == 1, key
    for name in ("gpu-scheduling-binding-annotations", "gpu-scheduling-allocation-not-at-creation"):
        text = str(docs[name]["spec"])
        for key in keys[2:]:
            assert key in text, (name, key)
    bindings = {d["spec"]["policyName"] for d in render("admission-policies.yaml.j2")
                if d["kind"] == "ValidatingAdmissionPolicyBinding"}
    assert bindings == set(docs)
