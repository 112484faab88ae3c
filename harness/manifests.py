"""The project's manifests for the tests, rendered from its Helm chart (charts/gpu-scheduler) by the real helm binary
(`helm template`, built by hack/toolchain.py), and the test-bed's shared values.

The chart is the one source of every manifest the project deploys: the KinD test-bed installs it (roles/deploy),
this module renders it for the control-plane tests, whose webhook runs on localhost (webhook_configuration(url=...):
the same MutatingWebhookConfiguration, called by URL instead of through the Service). The CRDs are the chart's
crds/, the keys the programs agree on its keys.yaml.

It renders and reads; it never talks to a cluster, and never writes outside a temporary file helm reads.
"""

from __future__ import annotations

import copy
import functools
import json
import pathlib
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from hack import toolchain

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "gpu-scheduler"
CHART_VALUES = CHART / "values.yaml"
#: The keys the programs agree on (src/gpu_scheduling/constants.py), which the chart's templates and Ansible read.
KEYS_FILE = CHART / "keys.yaml"
CRD_DIR = CHART / "crds"
GROUP_VARS = toolchain.INVENTORY
DEPLOY_DEFAULTS = ROOT / "roles" / "deploy" / "defaults" / "main.yml"
#: The release name the test-bed installs the chart under (the objects' names do not depend on it).
RELEASE = "gpu-scheduler"
#: The chart's templates, for `show_only`.
MUTATING_WEBHOOK_TEMPLATE = "templates/webhook/mutatingwebhookconfiguration.yaml"
ADMISSION_POLICIES_TEMPLATE = "templates/admission-policies.yaml"


class HelmError(RuntimeError):
    """helm refused: the chart does not render with these values (helm's message says which value and why)."""


def helm_binary() -> pathlib.Path:
    """The helm that hack/toolchain.py builds (versions.yml helm_version)."""
    path = toolchain.bindir() / "helm"
    if not path.exists():
        raise RuntimeError(f"missing {path}; run `python3 hack/toolchain.py build helm` (or `make toolchain`)")
    return path


def helm(*args: str, stdin: str | None = None, timeout: float = 120) -> str:
    """Run helm with `args` (no cluster is reached by the commands this module uses); its stdout. HelmError with
    helm's own message when it fails."""
    done = subprocess.run(
        [str(helm_binary()), *args], input=stdin, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise HelmError(f"helm {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def render(
    values: Mapping[str, Any] | None = None,
    *,
    namespace: str | None = None,
    show_only: Sequence[str] = (),
    values_files: Sequence[pathlib.Path] = (),
    release: str = RELEASE,
) -> list[dict[str, Any]]:
    """The documents `helm template` renders from the chart: its values.yaml, then `values_files` in order, then
    `values` (nested as in values.yaml); in `namespace` (default: the test-bed's, testbed_system_namespace), only
    the templates `show_only` when given. Raises HelmError when the chart refuses the values (values.schema.json,
    or a template's `fail`)."""
    args = ["template", release, str(CHART), "--namespace", namespace or _system_namespace()]
    for path in values_files:
        args += ["--values", str(path)]
    args += ["--values", "-"]  # `values`, as JSON (a subset of YAML) on stdin: last, so it wins
    for template in show_only:
        args += ["--show-only", template]
    text = helm(*args, stdin=json.dumps(dict(values or {})))
    return [doc for doc in yaml.safe_load_all(text) if doc]


@functools.cache
def keys() -> dict[str, str]:
    """charts/gpu-scheduler/keys.yaml: constant name in lowercase -> its value (tests/unit/testbed/test_constants.py
    checks each against src/gpu_scheduling/constants.py)."""
    loaded: dict[str, str] = yaml.safe_load(KEYS_FILE.read_text())
    return loaded


@functools.cache
def chart_defaults() -> dict[str, Any]:
    """The chart's values.yaml."""
    loaded: dict[str, Any] = yaml.safe_load(CHART_VALUES.read_text())
    return loaded


def _literal(variables: Mapping[str, Any]) -> dict[str, Any]:
    """The variables that are plain data: those that are Ansible expressions ("{{ ... }}", evaluated by Ansible
    only) are left out, and the chart's defaults stand in for them."""
    return {k: v for k, v in variables.items() if not (isinstance(v, str) and "{{" in v)}


def values() -> dict[str, Any]:
    """The test-bed's values as its scenarios need them: the one source of the names they share with the test-bed
    (worker nodes, the take-home map, namespaces, the webhook's, the scheduler's and the agent's names).

    Inventory facts come from the inventory's group_vars and the deploy role's defaults (their plain values);
    chart-owned facts (what the chart deploys unless the role says otherwise) from the chart's values.yaml, under
    the names the role used to define (deploy_scheduler_name, deploy_agent_name, ...); `testbed_keys` is the
    chart's keys.yaml, which Ansible includes under that name."""
    chart = chart_defaults()
    k = keys()
    facts: dict[str, Any] = {
        "deploy_scheduler_name": chart["scheduler"]["name"] or k["default_scheduler_name"],
        "deploy_scheduler_replicas": chart["scheduler"]["replicas"],
        "deploy_agent_name": chart["agent"]["name"],
        "deploy_agent_simulated": chart["agent"]["simulatedInventory"],
        "deploy_webhook_replicas": chart["webhook"]["replicas"],
        "deploy_webhook_timeout_seconds": chart["webhook"]["timeoutSeconds"],
        "deploy_webhook_port": chart["webhook"]["port"],
        "deploy_webhook_path": chart["webhook"]["path"],
        "testbed_webhook_service": chart["webhook"]["name"],
    }
    inventory = {
        **_literal(yaml.safe_load(GROUP_VARS.read_text()) or {}),
        **(_literal(yaml.safe_load(DEPLOY_DEFAULTS.read_text()) or {}) if DEPLOY_DEFAULTS.exists() else {}),
    }
    return {**facts, **inventory, "testbed_keys": dict(k)}


def _system_namespace() -> str:
    """The namespace the test-bed installs the chart into (group_vars testbed_system_namespace)."""
    namespace: str = values()["testbed_system_namespace"]
    return namespace


def crds() -> list[dict[str, Any]]:
    """The CustomResourceDefinitions of the chart's crds/ (GpuClaim, GpuNodeStatus, GpuSchedulingPolicy), as Helm
    installs them."""
    return [doc for path in sorted(CRD_DIR.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc]


def admission_policies(
    values: Mapping[str, Any] | None = None, *, namespace: str | None = None
) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicies and their bindings, as the chart renders them with `values`."""
    return render(values, namespace=namespace, show_only=[ADMISSION_POLICIES_TEMPLATE])


def webhook_configuration(
    *, url: str | None, service: tuple[str, str, int] | None, ca_bundle_b64: str, scheduler_name: str
) -> dict[str, Any]:
    """The chart's MutatingWebhookConfiguration for a webhook reached at `url` (https, e.g. on localhost) or through
    the Service `service` = (name, namespace, port); exactly one of the two. ca_bundle_b64 is the base64 of the PEM
    CA bundle that signed the webhook's certificate, scheduler_name the schedulerName whose pods reach it."""
    if (url is None) == (service is None):
        raise ValueError("give exactly one of url and service")
    return copy.deepcopy(_webhook_configuration(url, service, ca_bundle_b64, scheduler_name))


@functools.lru_cache(maxsize=32)
def _webhook_configuration(
    url: str | None, service: tuple[str, str, int] | None, ca_bundle_b64: str, scheduler_name: str
) -> dict[str, Any]:
    # One helm run per distinct configuration: the scenarios register the same one again and again.
    tls: dict[str, Any] = {"caBundle": ca_bundle_b64}
    webhook: dict[str, Any] = {"tls": tls}
    namespace = None
    if url is not None:
        webhook["url"] = url
    elif service is not None:
        name, namespace, port = service
        webhook.update(name=name, port=port)
        # The Service mode calls a webhook the chart deploys, with a certificate from a Secret: name one (the
        # configuration does not show it).
        tls["existingSecret"] = keys()["webhook_tls_secret"]
    docs = render(
        {"scheduler": {"name": scheduler_name}, "webhook": webhook},
        namespace=namespace,
        show_only=[MUTATING_WEBHOOK_TEMPLATE],
    )
    (config,) = docs
    return config


# ---- the roles' variables, evaluated as Ansible does ----------------------------------------------------------------


def combine(base: Mapping[str, Any], other: Mapping[str, Any], recursive: bool = False) -> dict[str, Any]:
    """Ansible's combine filter (recursive: mappings merged key by key; anything else replaced)."""
    merged = dict(base)
    for key, value in other.items():
        if recursive and isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = combine(merged[key], value, recursive=True)
        else:
            merged[key] = value
    return merged


def evaluate(pending: Mapping[str, Any], known: Mapping[str, Any]) -> dict[str, Any]:
    """Role variables (`pending`, in Ansible's precedence order already merged) evaluated as Ansible does: each Jinja
    expression once what it names is known, native types kept (a dict stays a dict). What other roles hand over is
    in `known`; a variable that needs Ansible itself (a lookup, one of its own filters) stays out of the result."""
    import jinja2
    import jinja2.nativetypes

    env = jinja2.nativetypes.NativeEnvironment(undefined=jinja2.StrictUndefined)
    env.filters["combine"] = combine
    result = dict(known)
    left = dict(pending)
    while left:
        done = {}
        for name, value in left.items():
            if not (isinstance(value, str) and "{{" in value):
                done[name] = value
                continue
            try:
                done[name] = env.from_string(value).render(**result)
            except jinja2.TemplateError:
                continue  # names a variable not known yet, or needs Ansible's own lookups and filters
        if not done:
            break
        result.update(done)
        left = {k: v for k, v in left.items() if k not in done}
    return result
