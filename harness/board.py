"""gpu-board run as a real process against the test control plane, over TLS, for the board's scenarios.

Each BoardProcess has a CA and a serving certificate of its own (harness/pki.py: `127.0.0.1` and `localhost`), a
free loopback port and a log file beside the other processes'. The harness reads it back two ways: over HTTPS
verified against that CA (`client()`, an httpx client), and in a browser that trusts exactly its key
(`spki_pin`, for harness/browser.py). It watches the cluster with the administrator's kubeconfig, as the
scheduler and the webhook do here; the chart's RBAC is checked by the chart's own tests and the KinD tier.

    board = BoardProcess(cp, namespaces=["s-1234"]).start()
    board.client().get("/api/state").json()["nodes"]["node1"]
    board.stop()
"""

from __future__ import annotations

import pathlib
import ssl
from collections.abc import Sequence

import httpx

from gpu_scheduling import constants
from harness import pki
from harness.browser import spki_pin
from harness.components import SCRIPTS
from harness.controlplane import ControlPlane
from harness.processes import Process, free_port


class BoardProcess(Process):
    """One gpu-board logging to `<logs>/<name>.log`. `namespaces` are where it may create (`--namespace`, each);
    `allow_create` passes `--allow-create`. `url` is its base URL (https://127.0.0.1:<port>)."""

    def __init__(
        self,
        cp: ControlPlane,
        *,
        name: str = constants.BOARD_NAME,
        namespaces: Sequence[str] = ("default",),
        allow_create: bool = True,
        scheduler_name: str = constants.DEFAULT_SCHEDULER_NAME,
        pod_image: str | None = None,
        extra_args: Sequence[str] = (),
    ):
        self.ca = pki.CA(cp.pki_dir, name)
        # A common name other than the CA's: a certificate whose issuer equals its subject reads as self-signed.
        self.pair = self.ca.issue(name, f"{name}.localhost", server=True, dns=("localhost",), ips=("127.0.0.1",))
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.allow_create = allow_create
        self.namespaces = list(namespaces)
        argv = [
            str(SCRIPTS / constants.BOARD_NAME),
            f"--kubeconfig={cp.kubeconfig}",
            "--host=127.0.0.1",
            f"--port={self.port}",
            f"--tls-cert={self.pair.cert}",
            f"--tls-key={self.pair.key}",
            f"--scheduler-name={scheduler_name}",
            *(f"--namespace={ns}" for ns in self.namespaces),
            *(["--allow-create"] if allow_create else []),
            *([f"--pod-image={pod_image}"] if pod_image else []),
            *extra_args,
        ]
        super().__init__(name, argv, cp.logs)

    @property
    def cert_pem(self) -> bytes:
        return self.pair.cert.read_bytes()

    @property
    def spki_pin(self) -> str:
        """What harness/browser.py's Browser takes to trust this board's certificate, and no other."""
        return spki_pin(self.cert_pem)

    @property
    def ca_file(self) -> pathlib.Path:
        return self.ca.cert_path

    def ssl_context(self) -> ssl.SSLContext:
        """A client context that verifies the board's certificate against its CA (and its name, 127.0.0.1)."""
        return ssl.create_default_context(cafile=str(self.ca.cert_path))

    def client(self, timeout: float = 10) -> httpx.Client:
        """An HTTPS client of the board (base URL `url`), verifying its certificate; the caller closes it."""
        return httpx.Client(base_url=self.url, verify=self.ssl_context(), timeout=timeout)

    def start(self, timeout: float = 60) -> BoardProcess:
        """Start it and wait until /readyz answers 200 (every informer has listed); stopped again on failure."""
        super().start()
        try:
            self.wait_http(f"{self.url}/readyz", timeout=timeout, context=self.ssl_context())
        except BaseException:
            self.stop()
            raise
        return self
