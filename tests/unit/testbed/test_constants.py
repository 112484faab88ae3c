"""The chart and the test-bed use the same keys as the programs (src/gpu_scheduling/constants.py), from one place
(the chart's keys.yaml, which Ansible includes as `testbed_keys`), and the chart's MutatingWebhookConfiguration,
rendered by the one template for both the test-bed and the control-plane tests, scopes the webhook the same way in
both. The manifests are the chart's as `helm template` renders them with its defaults in the test-bed's namespace
(harness/manifests.py); tests/unit/testbed/test_chart.py checks each of its values."""

import base64
import copy
import functools
import pathlib
import re

import jinja2
import pytest
import yaml

from gpu_scheduling import constants, gpumap
from gpu_scheduling.agent import inventory
from gpu_scheduling.board import forms
from harness import manifests
from tests import ROOT

CHART = manifests.CHART
KEYS = manifests.keys()
CHART_DEFAULTS = manifests.chart_defaults()
TESTBED = manifests.values()
SYSTEM_NAMESPACE = TESTBED["testbed_system_namespace"]
SCHEDULER = TESTBED["deploy_scheduler_name"]
AGENT = TESTBED["deploy_agent_name"]
WEBHOOK = TESTBED["testbed_webhook_service"]
# Every string constant of the programs, by name.
CONSTANTS = {name: value for name, value in vars(constants).items() if name.isupper() and isinstance(value, str)}


@functools.cache
def _chart() -> tuple[dict, ...]:
    return tuple(manifests.render())


def chart() -> list[dict]:
    """The chart's documents with its defaults, in the test-bed's namespace (a fresh copy for each caller)."""
    return copy.deepcopy(list(_chart()))


def one(kind: str, name: str) -> dict:
    (doc,) = [d for d in chart() if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


@pytest.mark.parametrize("key", sorted(KEYS))
def test_every_key_is_the_constant_of_its_name(key):
    """keys.yaml <name> equals constants.<NAME>: each entry is named after the constant it stands for."""
    assert key.upper() in CONSTANTS, f"keys.yaml {key}: src/gpu_scheduling/constants.py has no {key.upper()}"
    assert KEYS[key] == CONSTANTS[key.upper()], f"keys.yaml {key} != constants.{key.upper()}"


def _ansible_files() -> list[pathlib.Path]:
    files = [p for d in ("roles", "playbooks") for p in sorted((ROOT / d).rglob("*")) if p.is_file()]
    return [*files, ROOT / "site.yml", ROOT / "teardown.yml"]


def _chart_files() -> list[pathlib.Path]:
    """The chart's files but keys.yaml, the one place the keys are spelled out."""
    return [p for p in sorted(CHART.rglob("*")) if p.is_file() and p != manifests.KEYS_FILE]


@pytest.mark.parametrize("key", sorted(KEYS))
def test_every_key_is_used(key):
    """An entry nothing reads (no chart template as `$keys.<name>`, no Ansible file as `testbed_keys.<name>`) is a
    second copy of a constant for no reason: remove it."""
    templates = [p for p in sorted((CHART / "templates").rglob("*")) if p.is_file()]
    in_chart = any(f"$keys.{key}" in p.read_text() for p in templates)
    in_ansible = any(f"testbed_keys.{key}" in p.read_text() for p in _ansible_files())
    assert in_chart or in_ansible, f"keys.yaml {key} is unused"


# Distinctive values: a constant's value is looked for only when an ordinary word or identifier cannot be it.
DISTINCTIVE_MIN_LENGTH = 16
# Files that must spell a value out, with the reason.
LITERAL_FILES = {
    "charts/gpu-scheduler/crds/": "Helm installs crds/ as they are (no templating), and the control-plane tests read "
    "them as they are; test_the_crds_use_the_api_of_the_constants checks them instead",
}
# (file, value) pairs where a value equals a constant by coincidence, with the reason.
LITERAL_VALUES = {
    (
        "charts/gpu-scheduler/dashboards/gpu-scheduling.json",
        "gpu-scheduling",
    ): "the dashboard's uid names the project, not the Lease namespace",
    (
        "roles/app_images/defaults/main.yml",
        "gpu-scheduler",
    ): "the scheduler image's name (images/README.md), not the schedulerName",
    (
        "roles/app_images/tasks/build.yml",
        "gpu-scheduling",
    ): "the Python distribution's name (pyproject.toml), not the Lease namespace",
    (
        "roles/deploy/defaults/main.yml",
        "gpu-scheduler",
    ): "the Helm release's name (the chart's), not the schedulerName",
    (
        "charts/gpu-scheduler/Chart.yaml",
        "gpu-scheduler",
    ): "the chart's name, not the schedulerName",
    (
        "charts/gpu-scheduler/values.yaml",
        "gpu-scheduler",
    ): "the scheduler image's repository (images/README.md), not the schedulerName",
    (
        "charts/gpu-scheduler/templates/_helpers.tpl",
        "gpu-scheduling",
    ): "app.kubernetes.io/part-of names the project (pyproject.toml), not the Lease namespace",
    (
        "charts/gpu-scheduler/values.yaml",
        "gpu-board",
    ): "the board image's repository (images/README.md); board.name's default is keys.yaml board_name",
    (
        "roles/app_images/defaults/main.yml",
        "gpu-board",
    ): "the board image's name (images/README.md), not the name of its Deployment",
    (
        "charts/gpu-scheduler/ci/agent-values.yaml",
        "nvidia.com/gpu",
    ): "the key of the NoSchedule taint of GPU node pools, not NVIDIA's resource",
}


def _distinctive(value: str) -> bool:
    return any(c in value for c in "/.-") or len(value) >= DISTINCTIVE_MIN_LENGTH


def _without_comments(text: str) -> str:
    """The text without template comments (Jinja's {# #}, Go's {{/* */}}) and YAML/shell/Python comments (`#` to
    the end of the line, at its start or after a blank): prose may name a key, configuration may not."""
    text = re.sub(r"\{#.*?#\}", "", text, flags=re.DOTALL)
    text = re.sub(r"\{\{-?\s*/\*.*?\*/\s*-?\}\}", "", text, flags=re.DOTALL)
    return "\n".join(re.sub(r"(^|\s)#.*$", "", line) for line in text.splitlines())


def test_no_file_of_the_chart_or_the_test_bed_spells_out_a_constant():
    """Every file of the chart (keys.yaml aside) and under roles/ and playbooks/ (and site.yml, teardown.yml) takes
    the keys the programs agree on from keys.yaml (`$keys` in the templates, `testbed_keys` in Ansible, or a value
    derived from them), never as a literal, so a new literal key cannot creep in.

    Rule: a string constant of src/gpu_scheduling/constants.py is looked for when its value is distinctive, that is
    it contains `/`, `.` or `-`, or is at least DISTINCTIVE_MIN_LENGTH characters long (so ordinary words and
    identifiers such as `Scheduled`, `NODE_NAME` or `v1` are not). It is found where it stands as a whole token:
    not inside a longer name (`gpu-scheduler-check` does not contain `gpu-scheduler`, `gpu.scheduling/claim` does
    not contain `gpu.scheduling`). Comments are not looked at; README.md files are documentation. LITERAL_FILES and
    LITERAL_VALUES list the exceptions, each with its reason. A constant the chart and the test-bed do not use needs
    no entry in keys.yaml; one they use must have one.
    """
    values = {value: name for name, value in CONSTANTS.items() if _distinctive(value)}
    found = []
    for path in [*_chart_files(), *_ansible_files()]:
        rel = path.relative_to(ROOT).as_posix()
        if path.name == "README.md" or any(rel.startswith(prefix) for prefix in LITERAL_FILES):
            continue
        text = _without_comments(path.read_text())
        for value, name in values.items():
            if (rel, value) in LITERAL_VALUES:
                continue
            if re.search(rf"(?<![\w/-])(?<!\w\.){re.escape(value)}(?![\w/-]|\.\w)", text):
                found.append(f"{rel}: {value!r} (use keys.yaml {name.lower()})")
    assert not found, "literal keys instead of keys.yaml:\n" + "\n".join(found)


def test_the_exceptions_are_still_needed():
    """An exception that no longer matches anything is removed, so the list stays the true one."""
    for rel, value in LITERAL_VALUES:
        assert value in CONSTANTS.values(), (rel, value)
        assert value in _without_comments((ROOT / rel).read_text()), (rel, value)
    for prefix in LITERAL_FILES:
        assert (ROOT / prefix).is_dir(), prefix


def test_the_crds_use_the_api_of_the_constants():
    names = {}
    crds = manifests.crds()
    assert len(crds) == len(list(manifests.CRD_DIR.glob("*.yaml"))) == 3
    for crd in crds:
        spec = crd["spec"]
        name = crd["metadata"]["name"]
        assert spec["group"] == constants.CLAIM_GROUP, name
        assert name == f"{spec['names']['plural']}.{constants.CLAIM_GROUP}", name
        assert constants.CLAIM_VERSION in [v["name"] for v in spec["versions"]], name
        names[spec["names"]["kind"]] = spec["names"]["plural"]
    # The kinds and plurals the programs build their paths and objects from (kube.paths, claims.objects).
    assert names == {
        constants.GPU_CLAIM_KIND: constants.GPU_CLAIM_PLURAL,
        constants.GPU_NODE_STATUS_KIND: constants.GPU_NODE_STATUS_PLURAL,
        constants.GPU_SCHEDULING_POLICY_KIND: constants.GPU_SCHEDULING_POLICY_PLURAL,
    }


CA_PEM = b"-----BEGIN CERTIFICATE-----\nQ0E=\n-----END CERTIFICATE-----\n"
CA_B64 = base64.b64encode(CA_PEM).decode()
URL = "https://127.0.0.1:18443/mutate"


def _webhook_configuration(mode: str, scheduler_name: str) -> tuple[dict, dict]:
    """The configuration rendered one way, and the clientConfig it must have."""
    service = {"name": WEBHOOK, "namespace": SYSTEM_NAMESPACE, "path": "/mutate", "port": 443}
    if mode == "chart":  # what the test-bed installs: the chart with its Secret and CA (webhook.url empty)
        values = {
            "scheduler": {"name": scheduler_name},
            "webhook": {"tls": {"existingSecret": KEYS["webhook_tls_secret"], "caBundle": CA_B64}},
        }
        (config,) = [d for d in manifests.render(values) if d["kind"] == "MutatingWebhookConfiguration"]
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
@pytest.mark.parametrize("mode", ["chart", "harness, service", "harness, url"])
def test_webhook_configuration_scopes_the_same_in_every_mode(mode, scheduler_name):
    config, client = _webhook_configuration(mode, scheduler_name)
    assert config["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert config["kind"] == "MutatingWebhookConfiguration"
    assert config["metadata"]["name"] == WEBHOOK and set(config["metadata"]) == {"name", "labels"}
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
    assert hook["timeoutSeconds"] == CHART_DEFAULTS["webhook"]["timeoutSeconds"] == 5
    assert hook["reinvocationPolicy"] == "Never"


def test_webhook_configuration_modes_differ_only_in_the_client():
    configs = [
        _webhook_configuration(mode, constants.DEFAULT_SCHEDULER_NAME)[0]
        for mode in ("chart", "harness, service", "harness, url")
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
    """webhook_tls signs the DNS names of testbed_webhook_service, the Service the chart creates and calls
    (tests/unit/testbed/test_chart.py checks the certificate the chart generates)."""
    tls_tasks = (ROOT / "roles/webhook_tls/tasks/main.yml").read_text()
    assert 'DNS:{{ testbed_webhook_service }}.{{ testbed_system_namespace }}.svc"' in tls_tasks
    service = one("Service", WEBHOOK)
    assert service["metadata"]["namespace"] == SYSTEM_NAMESPACE
    assert service["spec"]["ports"][0]["port"] == CHART_DEFAULTS["webhook"]["port"]
    hook = one("MutatingWebhookConfiguration", WEBHOOK)["webhooks"][0]
    assert hook["clientConfig"]["service"]["name"] == WEBHOOK


def _role_template(name: str) -> list[dict]:
    """A template the deploy role still renders itself (the take-home's check StatefulSet), as Ansible does: the
    inventory, keys.yaml as testbed_keys, the scheduler's name and the images the app_images role hands over."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(ROOT / "roles" / "deploy" / "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        keep_trailing_newline=True,
    )
    images = {"scheduler": "s:1", "webhook": "w:1", "check": "c:1", "agent": "a:1", "board": "b:1"}
    text = env.get_template(name).render(**TESTBED, deploy_images=images, app_images_refs=images)
    return [doc for doc in yaml.safe_load_all(text) if doc]


def test_check_statefulset_carries_the_take_home_map():
    _service, sts = _role_template("check.yaml.j2")
    template = sts["spec"]["template"]
    assert sts["spec"]["replicas"] == 5 and template["spec"]["schedulerName"] == constants.DEFAULT_SCHEDULER_NAME
    parsed = gpumap.parse(template["metadata"]["annotations"][constants.MAP_ANNOTATION])
    assert gpumap.encode(parsed) == "0=node1:0,1\n1=node2:2\n2=node3:0,1,2\n3=node4:3\n4=node4:3\n"


def _workloads() -> list[tuple[str, dict]]:
    docs = [(f"chart {d['kind']} {d['metadata']['name']}", d) for d in chart()]
    docs += [(f"check.yaml.j2 {d['kind']}", d) for d in _role_template("check.yaml.j2")]
    return [(name, d) for name, d in docs if d["kind"] in ("Deployment", "StatefulSet", "DaemonSet")]


def test_workloads_are_locked_down():
    workloads = _workloads()
    assert {d["metadata"]["name"] for _, d in workloads} == {
        SCHEDULER,
        WEBHOOK,
        AGENT,
        constants.BOARD_NAME,
        TESTBED["testbed_check_name"],
    }
    for name, doc in workloads:
        pod = doc["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 1000, name
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] and sc["allowPrivilegeEscalation"] is False, name
            assert sc["capabilities"]["drop"] == ["ALL"], name
    # The webhook and the check pods call no API: no service-account token in them.
    tokenless = {
        d["metadata"]["name"]
        for _, d in workloads
        if d["spec"]["template"]["spec"].get("automountServiceAccountToken") is False
    }
    assert tokenless == {WEBHOOK, TESTBED["testbed_check_name"]}
    # The check StatefulSet (roles/deploy/templates/_security.yaml.j2) and the chart (_helpers.tpl) lock pods down
    # the same way: two renderers of one fact, kept equal here.
    by_name = {d["metadata"]["name"]: d["spec"]["template"]["spec"] for _, d in workloads}
    check, scheduler = by_name[TESTBED["testbed_check_name"]], by_name[SCHEDULER]
    assert check["securityContext"] == scheduler["securityContext"]
    assert check["containers"][0]["securityContext"] == scheduler["containers"][0]["securityContext"]


def test_the_boards_pods_are_locked_down_as_the_charts():
    """gpu-board's form builds its pods in Python (board/forms.py), a third renderer of the chart's lock-down: its
    pod security context equals the chart's, and its container's holds every setting of the chart's container (it
    repeats two pod-level ones besides)."""
    scheduler = {d["metadata"]["name"]: d["spec"]["template"]["spec"] for _, d in _workloads()}[SCHEDULER]
    pod = forms.pod_spec(forms.Settings())
    assert pod["securityContext"] == scheduler["securityContext"]
    chart_container = scheduler["containers"][0]["securityContext"]
    form_container = pod["containers"][0]["securityContext"]
    assert {k: form_container.get(k) for k in chart_container} == chart_container


def test_scheduler_rbac_is_least_privilege():
    role = one("ClusterRole", SCHEDULER)
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
        ("events", "patch"),
        ("gpuclaims", "get"),
        ("gpuclaims", "list"),
        ("gpuclaims", "watch"),
        ("gpunodestatuses", "get"),
        ("gpunodestatuses", "list"),
        ("gpunodestatuses", "watch"),
        ("gpuclaims/status", "patch"),
        ("gpuschedulingpolicies", "get"),
        ("gpuschedulingpolicies", "list"),
        ("gpuschedulingpolicies", "watch"),
        ("gpuschedulingpolicies/status", "patch"),
        # Volumes (scheduler/volumebinder.py): read, and a claim's selected-node or a volume's claimRef patched.
        ("persistentvolumeclaims", "get"),
        ("persistentvolumeclaims", "list"),
        ("persistentvolumeclaims", "watch"),
        ("persistentvolumeclaims", "patch"),
        ("persistentvolumes", "get"),
        ("persistentvolumes", "list"),
        ("persistentvolumes", "watch"),
        ("persistentvolumes", "patch"),
        ("storageclasses", "get"),
        ("storageclasses", "list"),
        ("storageclasses", "watch"),
        ("csinodes", "get"),
        ("csinodes", "list"),
        ("csinodes", "watch"),
        # Namespaces' labels, for pod affinity terms' namespace selectors (plugins/inter_pod_affinity.py).
        ("namespaces", "get"),
        ("namespaces", "list"),
        ("namespaces", "watch"),
        # Preemption (scheduler/postfilter.py): victims deleted, PodDisruptionBudgets read.
        ("pods", "delete"),
        ("poddisruptionbudgets", "get"),
        ("poddisruptionbudgets", "list"),
        ("poddisruptionbudgets", "watch"),
        # Kubernetes' own gang API (scheduler/gangs.py): PodGroups read, never written.
        ("podgroups", "get"),
        ("podgroups", "list"),
        ("podgroups", "watch"),
    }
    # ... of their API group alone (a `podgroups` of another group is no gang of Kubernetes').
    (pod_groups,) = [r for r in role["rules"] if constants.POD_GROUP_PLURAL in r["resources"]]
    assert pod_groups == {
        "apiGroups": [constants.SCHEDULING_API_GROUP],
        "resources": [constants.POD_GROUP_PLURAL],
        "verbs": ["get", "list", "watch"],
    }
    # The policy's status: the one policy the scheduler reads, no other.
    (status_rule,) = [r for r in role["rules"] if "gpuschedulingpolicies/status" in r["resources"]]
    assert status_rule["resourceNames"] == [constants.POLICY_NAME]
    assert one("ClusterRoleBinding", SCHEDULER)["subjects"] == [
        {"kind": "ServiceAccount", "name": SCHEDULER, "namespace": SYSTEM_NAMESPACE}
    ]
    assert one("ServiceAccount", SCHEDULER)["metadata"]["namespace"] == SYSTEM_NAMESPACE
    # Leases (the GPU locks and the leader Lease) only in the project's own namespace.
    lease_role = one("Role", f"{SCHEDULER}-leases")
    assert lease_role["metadata"]["namespace"] == constants.LEASE_NAMESPACE
    assert lease_role["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "list", "watch", "create", "update", "delete"],
        }
    ]
    binding = one("RoleBinding", f"{SCHEDULER}-leases")
    assert binding["metadata"]["namespace"] == constants.LEASE_NAMESPACE
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": lease_role["metadata"]["name"],
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpu-scheduler", "namespace": SYSTEM_NAMESPACE}]
    # Nothing on Leases in kube-system, where the cluster's own components keep theirs.
    in_kube_system = [
        d for d in chart() if d["metadata"].get("namespace") == "kube-system" and d["kind"] in ("Role", "RoleBinding")
    ]
    assert in_kube_system == []
    assert not any("leases" in rule["resources"] for rule in role["rules"])


def test_leases_are_reachable_only_in_the_project_namespace():
    for doc in chart():
        if doc["kind"] in ("Role", "ClusterRole"):
            on_leases = [r for r in doc["rules"] if "leases" in r["resources"]]
            if on_leases:
                assert doc["kind"] == "Role" and doc["metadata"]["namespace"] == constants.LEASE_NAMESPACE, doc
        if doc["kind"] in ("Role", "RoleBinding"):
            assert doc["metadata"]["namespace"] != "kube-system", doc


def test_the_agent_lists_the_gpu_leases_where_they_are():
    role = one("Role", f"{AGENT}-leases")
    assert role["metadata"]["namespace"] == constants.LEASE_NAMESPACE
    assert role["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["list"]}]
    binding = one("RoleBinding", f"{AGENT}-leases")
    assert binding["metadata"]["namespace"] == constants.LEASE_NAMESPACE
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": AGENT, "namespace": SYSTEM_NAMESPACE}]


def test_the_agent_writes_only_its_own_inventory():
    role = one("ClusterRole", AGENT)
    granted = {(res, verb) for rule in role["rules"] for res in rule["resources"] for verb in rule["verbs"]}
    assert granted == {
        ("nodes", "get"),
        ("pods", "list"),
        ("pods", "watch"),  # gpu-device-plugin's watch of its node's pods
        ("gpunodestatuses", "create"),
        ("gpunodestatuses/status", "patch"),
    }


def test_the_project_namespace_is_created():
    (namespace,) = [d for d in chart() if d["kind"] == "Namespace"]
    assert namespace["metadata"]["name"] == constants.LEASE_NAMESPACE


def test_the_scheduler_runs_two_replicas_with_leader_election():
    deployment, pdb = one("Deployment", SCHEDULER), one("PodDisruptionBudget", SCHEDULER)
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
    assert pdb["metadata"]["namespace"] == deployment["metadata"]["namespace"] == SYSTEM_NAMESPACE
    # The budget counts the Deployment's pods: its selector is the Deployment's, which the pods' labels match.
    assert pdb["spec"]["selector"] == spec["selector"]
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()


def test_the_scheduler_args_parse():
    """What the Deployment passes is accepted by the program, and elects on the Lease the chart grants."""
    from gpu_scheduling.scheduler import main

    deployment = one("Deployment", SCHEDULER)
    args = main.parse_args(deployment["spec"]["template"]["spec"]["containers"][0]["args"])
    election = main.election_config(args)
    assert args.leader_elect and election.namespace == constants.LEASE_NAMESPACE
    assert election.name == constants.DEFAULT_SCHEDULER_NAME


def test_the_annotation_policy_fixes_every_key_the_programs_use():
    """Every annotation that decides a pod's GPUs is in the policy that fixes them at creation, one validation
    each; and the Binding and creation policies name the allocation keys."""
    rendered = manifests.admission_policies()
    assert rendered == [d for d in chart() if d["kind"].startswith("ValidatingAdmissionPolicy")]
    docs = {d["metadata"]["name"]: d for d in rendered if d["kind"] == "ValidatingAdmissionPolicy"}
    assert set(docs) == {
        "gpu-scheduling-pod-annotations-fixed",
        "gpu-scheduling-binding-annotations",
        "gpu-scheduling-allocation-not-at-creation",
        "gpu-scheduling-gpu-resource",
        f"{AGENT}-own-node",
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
    # Only the scheduler's service account may put the allocation on a Binding; the agent is held to its node.
    binding_policy = str(docs["gpu-scheduling-binding-annotations"]["spec"])
    assert f"'system:serviceaccount:{SYSTEM_NAMESPACE}:{SCHEDULER}'" in binding_policy
    own_node = docs[f"{AGENT}-own-node"]["spec"]
    assert own_node["matchConditions"] == [
        {
            "name": "the-inventory-agent",
            "expression": f"request.userInfo.username == 'system:serviceaccount:{SYSTEM_NAMESPACE}:{AGENT}'",
        }
    ]
    assert own_node["matchConstraints"]["resourceRules"][0]["resources"] == [
        constants.GPU_NODE_STATUS_PLURAL,
        f"{constants.GPU_NODE_STATUS_PLURAL}/status",
    ]
    bindings = {
        d["spec"]["policyName"]: d["spec"]["validationActions"]
        for d in rendered
        if d["kind"] == "ValidatingAdmissionPolicyBinding"
    }
    assert bindings == {name: ["Deny"] for name in docs}


def test_the_deployed_agent_simulates_what_the_control_plane_tests_write():
    """The KinD agent's simulated inventory (the chart's agent.simulatedInventory) and the one the control-plane
    scenarios and the benchmark write (agent.inventory.simulated_status()) are the same, so a scenario holds on both
    tiers."""
    assert CHART_DEFAULTS["agent"]["simulatedInventory"] == inventory.DEFAULT_SIMULATED
    assert TESTBED["deploy_agent_simulated"] == inventory.DEFAULT_SIMULATED
    containers = one("DaemonSet", AGENT)["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["agent", "device-plugin"]
    for container in containers:
        assert f"--simulated={inventory.DEFAULT_SIMULATED}" in container["args"]
        assert container["env"][0] == {
            "name": constants.NODE_NAME_ENV,
            "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
        }


def test_the_scenarios_share_the_test_beds_names():
    """features/support.py takes the names of what the test-bed deploys from manifests.values(): they are the
    names of the chart's objects."""
    assert TESTBED["testbed_keys"] == KEYS
    assert one("Deployment", SCHEDULER)["metadata"]["namespace"] == SYSTEM_NAMESPACE
    assert one("Deployment", WEBHOOK)["spec"]["selector"]["matchLabels"] == {"app": WEBHOOK}
    assert one("DaemonSet", AGENT)["spec"]["selector"]["matchLabels"] == {"app": AGENT}
    assert SCHEDULER == constants.DEFAULT_SCHEDULER_NAME
    assert set(TESTBED["testbed_worker_nodes"]) >= {"node1", "node2", "node3", "node4"}
