"""Nothing in `make test` may skip: a test that cannot run because something is missing would otherwise pass
the run over what it was meant to prove. `as_failure` turns a skipped report into a failed one; tests/conftest.py
applies it to the unit and integration tests, features/conftest.py to the control-plane tier's scenarios.
"""

from __future__ import annotations

import pytest


def as_failure(report: pytest.TestReport) -> None:
    """Make `report`, when it says skipped (an xfail is no skip), a failure that gives the skip's reason."""
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    report.outcome = "failed"
    report.longrepr = f"skipped ({reason}), but no test of this run may skip: provide what it needs"
