"""What every unit and integration test shares: hypothesis's settings profiles, and the rule that no test skips.

Profiles (HYPOTHESIS_PROFILE, default "dev"): both run without a per-example deadline, since a loaded 2-core
machine can stall any example for longer than hypothesis's 200 ms default and a deadline would then fail a
correct test; "ci" also derandomizes, so that a failure in CI is found again by the same run, and prints the
failing example's blob to reproduce it. A test's own `max_examples` stays with the test: it says how much of its
space that test must cover. "fuzz" is what the fuzz files take as their parent settings
(`settings.get_profile("fuzz")`): derandomized whatever the profile, no example database, and the health checks
that a hostile-input strategy trips on purpose (slow, large or much-filtered examples) off.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Generator

import pytest
from hypothesis import HealthCheck, settings

from harness.skips import as_failure

settings.register_profile("dev", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.register_profile(
    "fuzz",
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    as_failure(report)
    return report


@pytest.fixture(autouse=True)
def _root_logger_restored() -> Generator[None]:
    """A program's `main` configures logging (gpu_scheduling.logs.configure replaces the root logger's handlers);
    what it installs must not outlive its test: a left-over text handler escaped the traceback cached on every later
    record before the next tests' own handlers saw it (test_watch failed only after test_inventory had run)."""
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    yield
    for handler in list(root.handlers):
        if handler not in saved[0]:
            root.removeHandler(handler)
    for handler in saved[0]:
        if handler not in root.handlers:
            root.addHandler(handler)
    root.setLevel(saved[1])
