"""Reading the fields of API objects that the scheduler's rules judge: an object where one is expected, or a
FitError naming the field and what was expected. Pure; the lowest of the rules' modules (scheduler.fit and
scheduler.selectors read through it)."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

_INTEGER = re.compile(r"^[+-]?[0-9]+$")
_INT64 = 2**63


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


def requirement_holds(key: str, op: Any, values: Collection[str], labels: Mapping[str, str]) -> bool:
    """One requirement of a label selector or a node selector term on `labels`: In, NotIn, Exists, DoesNotExist,
    and (node selectors only) Gt and Lt, which compare one integer value. An operator of another name holds for no
    labels."""
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt") and key in labels and len(values) == 1:
        have, bound = _int64(labels[key]), _int64(next(iter(values)))
        if have is None or bound is None:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def _int64(text: Any) -> int | None:
    """A label value as Go's strconv.ParseInt(text, 10, 64) reads it, or None."""
    if not isinstance(text, str) or not _INTEGER.match(text):
        return None
    value = int(text)
    return value if -_INT64 <= value < _INT64 else None
