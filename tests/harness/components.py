"""The project's own programs (gpu-webhook, gpu-scheduler) run as real processes against the test control plane,
and the MutatingWebhookConfiguration that points the apiserver at the webhook by URL."""

from __future__ import annotations

import base64
import pathlib
import ssl
import sys
from typing import Any

from gpu_scheduling import constants
import yaml

from tests.harness import pki
from tests.harness.api import wait_for
from tests.harness.controlplane import ControlPlane
from tests.harness.processes import Process, free_port

SCRIPTS = pathlib.Path(sys.executable).parent  # console scripts of the installed package
CRD_DIR = pathlib.Path(__file__).resolve().parents[2] / "roles" / "deploy" / "files" / "crds"


def match_conditions(scheduler_name: str) -> list[dict[str, str]]:
    """Only pods that carry the map or use this scheduler reach the webhook; every other pod is admitted even
    when the webhook is down (failurePolicy Fail then only affects pods that need it)."""
    return [{
        "name": "gpu-pods-only",
        "expression": (
            f"(has(object.metadata.annotations) && '{constants.MAP_ANNOTATION}' in object.metadata.annotations)"
            f" || (has(object.spec.schedulerName) && object.spec.schedulerName == '{scheduler_name}')"
        ),
    }]


def webhook_configuration(url: str, ca_pem: bytes, scheduler_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "cuda-env-webhook"},
        "webhooks": [{
            "name": constants.WEBHOOK_NAME,
            "clientConfig": {"url": url, "caBundle": base64.b64encode(ca_pem).decode()},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"],
                       "scope": "Namespaced"}],
            "matchConditions": match_conditions(scheduler_name),
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 5,
            "reinvocationPolicy": "Never",
        }],
    }


class Components:
    def __init__(self, cp: ControlPlane, scheduler_name: str = constants.DEFAULT_SCHEDULER_NAME):
        self.cp = cp
        self.scheduler_name = scheduler_name
        ca = pki.CA(cp.pki_dir, "webhook")
        self.webhook_ca = ca
        self.webhook_pair = ca.issue("webhook", "gpu-webhook", server=True, dns=("localhost",), ips=("127.0.0.1",))
        self.webhook_port = free_port()
        self.health_port = free_port()
        self.webhook = Process("gpu-webhook", [
            str(SCRIPTS / "gpu-webhook"), "--host", "127.0.0.1", f"--port={self.webhook_port}",
            f"--tls-cert-file={self.webhook_pair.cert}", f"--tls-private-key-file={self.webhook_pair.key}",
        ], cp.logs)
        self.scheduler = Process("gpu-scheduler", [
            str(SCRIPTS / "gpu-scheduler"), f"--kubeconfig={cp.kubeconfig}", f"--scheduler-name={scheduler_name}",
            "--health-host=127.0.0.1", f"--health-port={self.health_port}",
        ], cp.logs)

    @property
    def webhook_url(self) -> str:
        return f"https://127.0.0.1:{self.webhook_port}/mutate"

    def start_webhook(self) -> None:
        self.webhook.start()
        ctx = ssl.create_default_context(cafile=str(self.webhook_ca.cert_path))
        self.webhook.wait_http(f"https://127.0.0.1:{self.webhook_port}/readyz", context=ctx)

    def start_scheduler(self) -> None:
        self.scheduler.start()
        self.scheduler.wait_http(f"http://127.0.0.1:{self.health_port}/readyz")

    def register_webhook(self) -> None:
        assert self.cp.api is not None
        self.cp.api.apply_or_replace(
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
            webhook_configuration(self.webhook_url, self.webhook_ca.pem, self.scheduler_name),
        )

    def install_crds(self) -> None:
        """The GpuClaim and GpuNodeStatus CRDs, from the same files the test-bed's deploy role applies."""
        assert self.cp.api is not None
        api = self.cp.api
        for path in sorted(CRD_DIR.glob("*.yaml")):
            crd = yaml.safe_load(path.read_text())
            api.apply_or_replace("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
            name = crd["metadata"]["name"]
            wait_for(f"CRD {name} Established", lambda n=name: any(
                c["type"] == "Established" and c["status"] == "True"
                for c in api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{n}")
                .get("status", {}).get("conditions") or []))

    def start(self) -> Components:
        self.install_crds()
        self.start_webhook()
        self.register_webhook()
        self.start_scheduler()
        return self

    def stop(self) -> None:
        self.scheduler.stop()
        self.webhook.stop()
