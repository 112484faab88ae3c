"""The licence the package declares is the licence the repository ships: pyproject.toml's `license` (an SPDX
expression, PEP 639) names Apache-2.0, and LICENSE at the root is the Apache License 2.0, word for word.

Without the file the declaration is a claim with nothing behind it: the licence's own section 4(a) asks every copy
of the work to carry it, and setuptools puts LICENSE* into the wheel and the sdist only when it exists."""

import fnmatch
import hashlib
import tomllib

from tests import ROOT

LICENSE = ROOT / "LICENSE"
#: SPDX identifier -> the first lines of its licence text (blank lines and indentation aside).
HEADINGS = {"Apache-2.0": ("Apache License", "Version 2.0, January 2004", "http://www.apache.org/licenses/")}
#: sha256 of https://www.apache.org/licenses/LICENSE-2.0.txt (Debian's /usr/share/common-licenses/Apache-2.0): any
#: edit of the text, a missing appendix or changed whitespace included, is no longer the licence.
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def project() -> dict:
    with (ROOT / "pyproject.toml").open("rb") as f:
        table: dict = tomllib.load(f)["project"]
    return table


def headings(text: str, count: int) -> tuple[str, ...]:
    """The first `count` non-blank lines of a licence text, stripped."""
    return tuple([line.strip() for line in text.splitlines() if line.strip()][:count])


def test_pyproject_declares_an_spdx_licence_this_test_knows():
    """PEP 639's form: a plain SPDX string (not the old `{text = ...}` table), one this test can check a file for."""
    licence = project()["license"]
    assert isinstance(licence, str), f"pyproject.toml license should be an SPDX expression, not {licence!r}"
    assert licence in HEADINGS, f"pyproject.toml license {licence!r}: add its heading to HEADINGS ({sorted(HEADINGS)})"


def test_the_licence_file_is_the_declared_licence():
    """LICENSE starts with the heading of the licence pyproject.toml names."""
    licence = project()["license"]
    expected = HEADINGS[licence]
    assert LICENSE.is_file(), f"pyproject.toml declares {licence} but there is no {LICENSE.name} at the root"
    found = headings(LICENSE.read_text(), len(expected))
    assert found == expected, f"{LICENSE.name} starts with {found}, not the heading of {licence} {expected}"


def test_the_apache_licence_text_is_complete_and_unchanged():
    """The whole Apache License 2.0 as the ASF publishes it (terms, END OF TERMS AND CONDITIONS, the appendix)."""
    assert project()["license"] == "Apache-2.0"
    digest = hashlib.sha256(LICENSE.read_bytes()).hexdigest()
    assert digest == APACHE_2_0_SHA256, f"{LICENSE.name} differs from the Apache License 2.0 text (sha256 {digest})"


def test_the_distributions_carry_the_licence_file():
    """setuptools adds the files `license-files` matches to the wheel and sdist (default: LICEN[CS]E*, ...): a
    `license-files` that misses LICENSE would ship the declaration without the text."""
    patterns = project().get("license-files", ["LICEN[CS]E*"])
    assert any(fnmatch.fnmatch(LICENSE.name, p) for p in patterns), f"license-files {patterns} leaves out LICENSE"
