"""A real headless Chromium driven through Selenium 4, for the board's scenarios: Debian's `/usr/bin/chromium` and its
`/usr/bin/chromedriver` (the Makefile's `browser` step installs both with apt-get); nothing downloads a browser or
a driver (Selenium Manager is never asked: the driver's path is given).

TLS stays on: instead of `--ignore-certificate-errors`, which would accept any certificate, the browser is given
the SHA-256 of the server certificate's SubjectPublicKeyInfo (`--ignore-certificate-errors-spki-list`), so exactly
the key of the board under test is trusted and every other certificate still fails.

Each browser has a fresh profile folder of its own (removed on close) and no network chatter of its own (no sync,
component updates, QUIC or background requests), so what the page does is all that happens. What the page logs to
its console (a script error, a CSP violation, a failed fetch) is collected: `console_errors()` lists the SEVERE
entries, which a scenario asserts empty.

    with Browser(spki_pin(cert_pem)) as browser:
        browser.driver.get("https://127.0.0.1:8443/")
        assert not browser.console_errors()
"""

from __future__ import annotations

import base64
import hashlib
import pathlib
import shutil
import tempfile
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM = pathlib.Path("/usr/bin/chromium")
CHROMEDRIVER = pathlib.Path("/usr/bin/chromedriver")
WINDOW = (1400, 1000)
#: Chromium's flags besides the profile, the window and the pinned key: headless, no sandbox (the tests may run as
#: root in a container), no GPU, and nothing that talks to the network by itself.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def spki_pin(cert_pem: bytes) -> str:
    """base64(SHA-256(DER SubjectPublicKeyInfo)) of the PEM certificate `cert_pem`: what Chromium's
    `--ignore-certificate-errors-spki-list` takes to trust that one key."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    spki = cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(spki).digest()).decode()


def missing() -> list[str]:
    """The browser's files that are not installed (`make browser` installs them)."""
    return [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]


class Browser:
    """One headless Chromium with a fresh profile; `pins` are the SPKI hashes (spki_pin) of the certificates it
    trusts besides the system's; `log_path` receives chromedriver's log."""

    def __init__(
        self,
        pins: list[str] | tuple[str, ...] = (),
        *,
        window: tuple[int, int] = WINDOW,
        log_path: pathlib.Path | None = None,
    ):
        absent = missing()
        if absent:
            raise RuntimeError(
                f"no {' and no '.join(absent)}: `make browser` installs Debian's chromium and its driver"
            )
        self.profile = pathlib.Path(tempfile.mkdtemp(prefix="chromium-profile-"))
        options = webdriver.ChromeOptions()
        options.binary_location = str(CHROMIUM)
        for flag in FLAGS:
            options.add_argument(flag)
        options.add_argument(f"--user-data-dir={self.profile}")
        options.add_argument(f"--window-size={window[0]},{window[1]}")
        if pins:
            options.add_argument(f"--ignore-certificate-errors-spki-list={','.join(pins)}")
        # The page's console messages, read back by console_errors().
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        service = Service(executable_path=str(CHROMEDRIVER), log_output=str(log_path) if log_path else None)
        try:
            self.driver = webdriver.Chrome(service=service, options=options)
        except BaseException:
            shutil.rmtree(self.profile, ignore_errors=True)
            raise
        self.driver.set_page_load_timeout(30)
        self.driver.set_script_timeout(30)
        self.console: list[dict[str, Any]] = []
        self.closed = False

    def console_log(self) -> list[dict[str, Any]]:
        """Every console entry so far (chromedriver hands each out once; they are kept here): `level`
        (SEVERE, WARNING, INFO), `message`, `source`, `timestamp`."""
        self.console.extend(self.driver.get_log("browser"))
        return list(self.console)

    def console_errors(self) -> list[str]:
        """The SEVERE console entries so far (script errors, CSP violations, failed requests), as messages."""
        return [e["message"] for e in self.console_log() if e.get("level") == "SEVERE"]

    def js(self, script: str, *args: Any) -> Any:
        """Run `script` (a function body: `return ...`) in the page."""
        return self.driver.execute_script(script, *args)

    def screenshot(self, path: pathlib.Path) -> pathlib.Path:
        """A PNG of the window as it is now."""
        path.parent.mkdir(parents=True, exist_ok=True)
        if not self.driver.save_screenshot(str(path)):
            raise RuntimeError(f"chromium could not write a screenshot to {path}")
        return path

    def close(self) -> None:
        """Quit the browser and its driver and remove the profile; a second call does nothing."""
        if self.closed:
            return
        self.closed = True
        try:
            self.driver.quit()
        finally:
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
