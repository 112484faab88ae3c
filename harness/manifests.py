"""Manifests of the test-bed rendered for the control-plane tests, from the test-bed's own templates.

roles/deploy/templates/webhook-configuration.yaml.j2 is the one renderer of the MutatingWebhookConfiguration: the
deploy role renders it for KinD (clientConfig.service), this module for the control-plane tests, whose webhook
runs on localhost (clientConfig.url). The values come from the same places as the test-bed's: the inventory's
group_vars (testbed_keys, the shared names) and the deploy role's defaults, with the caller's overrides.
"""

from __future__ import annotations

import ast
import functools
import pathlib
from typing import Any

import jinja2
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
GROUP_VARS = ROOT / "inventory" / "localhost" / "group_vars" / "all.yml"
DEPLOY_DEFAULTS = ROOT / "roles" / "deploy" / "defaults" / "main.yml"
DEPLOY_TEMPLATES = ROOT / "roles" / "deploy" / "templates"


def _environment() -> jinja2.Environment:
    # As Ansible's template lookup: trim_blocks; StrictUndefined so that a variable the template needs and this
    # module does not give fails here instead of rendering empty.
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(DEPLOY_TEMPLATES),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        keep_trailing_newline=True,
    )


def _resolve(values: dict[str, Any], env: jinja2.Environment) -> dict[str, Any]:
    """Render the string values that are Jinja expressions (role defaults refer to group_vars, as in Ansible),
    leaving out those that need a variable nobody gives here (e.g. deploy_images, set by the app_images role)."""
    resolved = dict(values)
    for _ in range(len(values) + 1):
        pending = {k: v for k, v in resolved.items() if isinstance(v, str) and "{{" in v}
        if not pending:
            break
        progressed = False
        for key, text in pending.items():
            try:
                rendered = env.from_string(text).render(**{k: v for k, v in resolved.items() if k != key})
            except jinja2.UndefinedError:
                continue
            if "{{" not in rendered:
                resolved[key] = _native(rendered)
                progressed = True
        if not progressed:
            break
    return {k: v for k, v in resolved.items() if not (isinstance(v, str) and "{{" in v)}


def _native(text: str) -> Any:
    """A rendered value as Ansible's native templating gives it: a Python literal when it reads as one."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


@functools.cache
def _inventory() -> dict[str, Any]:
    return {**yaml.safe_load(GROUP_VARS.read_text()), **yaml.safe_load(DEPLOY_DEFAULTS.read_text())}


def values() -> dict[str, Any]:
    """The test-bed's values as the deploy role sees them (group_vars, then its defaults, Jinja resolved): the one
    source of the names the scenarios share with the test-bed (worker nodes, the take-home map, namespaces, the
    webhook's and the agent's names)."""
    return _resolve(_inventory(), _environment())


def render(template: str, **overrides: Any) -> list[dict[str, Any]]:
    """The documents of one of roles/deploy/templates, with group_vars, the deploy defaults and overrides."""
    env = _environment()
    text = env.get_template(template).render(**_resolve({**_inventory(), **overrides}, env))
    return [doc for doc in yaml.safe_load_all(text) if doc]


def webhook_configuration(
    *, url: str | None, service: tuple[str, str, int] | None, ca_bundle_b64: str, scheduler_name: str
) -> dict[str, Any]:
    """The MutatingWebhookConfiguration for a webhook reached at `url` (https, e.g. on localhost) or through the
    Service `service` = (name, namespace, port); exactly one of the two. ca_bundle_b64 is the base64 of the PEM
    CA bundle that signed the webhook's certificate, scheduler_name the schedulerName whose pods reach it."""
    if (url is None) == (service is None):
        raise ValueError("give exactly one of url and service")
    overrides: dict[str, Any] = {
        "webhook_tls_ca_bundle": ca_bundle_b64,
        "deploy_scheduler_name": scheduler_name,
        "deploy_webhook_url": url or "",
    }
    if service is not None:
        name, namespace, port = service
        overrides.update(testbed_webhook_service=name, testbed_system_namespace=namespace, deploy_webhook_port=port)
    (config,) = render("webhook-configuration.yaml.j2", **overrides)
    return config
