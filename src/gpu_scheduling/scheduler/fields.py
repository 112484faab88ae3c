"""Reading the fields of API objects that the scheduler's rules judge: an object where one is expected, or a
FitError naming the field and what was expected. Pure; the lowest of the rules' modules (scheduler.fit and
scheduler.selectors read through it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class FitError(ValueError):
    """A field the rules read is not of the shape the API gives it (say which and what was expected)."""


def obj(value: Any, field: str) -> Mapping[str, Any]:
    """`value` as an object (absent: empty), or FitError naming `field`."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise FitError(f"{field} is not an object")
    return value


def spec_of(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj(pod.get("spec"), "spec")
