"""Unit tests of the scheduler's modules; what several of them build is here."""

from __future__ import annotations

from typing import Any


def queued_pod(key: str, priority: int = 0, created: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    """A pending pod as the scheduling queue orders it: `<namespace>/<name>`, spec.priority, its creation time."""
    namespace, _, name = key.partition("/")
    return {
        "metadata": {"namespace": namespace, "name": name, "creationTimestamp": created},
        "spec": {"priority": priority},
    }
