"""How `kubectl gpu` prints, as kubectl does: aligned tables with upper-case headers and at least three spaces between
columns, ages in kubectl's units, `-o json|yaml` as a `List` of API objects, `-o name` as `kind.group/name`, and
colour only on a terminal and never with NO_COLOR. Pure: strings in, strings out."""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TextIO

import yaml

#: Formats of `-o`; "" is the default table.
FORMATS = ("wide", "json", "yaml", "name")
#: Spaces between columns, as kubectl's tab writer pads them.
GAP = 3
NONE = "<none>"
UNKNOWN = "<unknown>"

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_STYLES = {"bold": "1", "red": "31", "green": "32", "yellow": "33", "blue": "34", "dim": "2"}


# ---- colour ----------------------------------------------------------------------------------------------------


def colour_wanted(stream: TextIO, environ: Mapping[str, str]) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (https://no-color.org: to any non-empty value) or
    the terminal is `dumb`."""
    if environ.get("NO_COLOR"):
        return False
    if environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (ValueError, OSError):
        return False


class Painter:
    """Wraps text in ANSI colours when `enabled`; otherwise returns it as it is."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, text: str, style: str | None) -> str:
        if not self.enabled or not style or not text:
            return text
        return f"\x1b[{_STYLES[style]}m{text}\x1b[0m"


#: The colour of each state word the commands print.
STATE_STYLES = {
    "Bound": "green",
    "Running": "green",
    "Succeeded": "green",
    "OK": "green",
    "Pending": "yellow",
    "Reserved": "yellow",
    "WARN": "yellow",
    "Failed": "red",
    "FAIL": "red",
    "Unknown": "red",
}


def visible_len(text: str) -> int:
    return len(_ANSI.sub("", text))


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


# ---- tables ----------------------------------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], *, headers_shown: bool = True) -> list[str]:
    """The lines of an aligned table: every column as wide as its widest cell plus GAP spaces, the last one
    unpadded; headers upper-case. Cells may carry colour, which takes no width."""
    body = [[str(c) for c in row] for row in rows]
    head = [h.upper() for h in headers]
    for row in body:
        if len(row) != len(head):
            raise ValueError(f"row {row!r} has {len(row)} cells for {len(head)} columns")
    shown = [head, *body] if headers_shown else body
    if not shown:
        return []
    widths = [max(visible_len(r[i]) for r in shown) for i in range(len(head))]
    lines = []
    for row in shown:
        cells = [cell + " " * (widths[i] - visible_len(cell) + GAP) for i, cell in enumerate(row[:-1])]
        lines.append(("".join(cells) + row[-1]).rstrip())
    return lines


def key_values(pairs: Iterable[tuple[str, str]], indent: int = 2) -> list[str]:
    """`key   value` lines with the values aligned (at least GAP spaces after the longest key)."""
    items = list(pairs)
    if not items:
        return []
    width = max(len(k) for k, _ in items) + GAP
    return [(" " * indent + k.ljust(width) + v).rstrip() for k, v in items]


# ---- ages ------------------------------------------------------------------------------------------------------


def human_duration(seconds: float) -> str:
    """kubectl's age (apimachinery's duration.HumanDuration): `45s`, `5m30s`, `12m`, `3h5m`, `20h`, `3d4h`, `12d`,
    `2y30d`, `9y`; `0s` for up to a second in the future (clock skew), `<invalid>` beyond."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m" if s % 60 == 0 else f"{minutes}m{s % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def parse_time(stamp: Any) -> datetime.datetime | None:
    """An RFC 3339 time of the API (`2024-05-01T12:00:00Z`, or a MicroTime with fractions), None when absent or
    malformed."""
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        when = datetime.datetime.fromisoformat(stamp)
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=datetime.UTC)


def age(stamp: Any, now: datetime.datetime) -> str:
    when = parse_time(stamp)
    if when is None:
        return UNKNOWN
    return human_duration((now - when).total_seconds())


def created_age(obj: Mapping[str, Any], now: datetime.datetime) -> str:
    return age((obj.get("metadata") or {}).get("creationTimestamp"), now)


# ---- -o json | yaml | name -------------------------------------------------------------------------------------


def clean(obj: Mapping[str, Any], api_version: str, kind: str) -> dict[str, Any]:
    """An object as kubectl prints it: with its apiVersion and kind (a LIST's items lack them) and without
    metadata.managedFields (kubectl hides them unless --show-managed-fields)."""
    out = dict(obj)
    out.setdefault("apiVersion", api_version)
    out.setdefault("kind", kind)
    meta = out.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        out["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    return out


def as_list(items: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """kubectl's `-o json|yaml` of several objects: a v1 List."""
    return {"apiVersion": "v1", "items": list(items), "kind": "List", "metadata": {"resourceVersion": ""}}


def dump(doc: Any, fmt: str) -> str:
    """`doc` as kubectl prints it: JSON indented by 4 with sorted keys, or YAML in block style (both end with a
    newline)."""
    if fmt == "json":
        return json.dumps(doc, indent=4, sort_keys=True, ensure_ascii=False) + "\n"
    if fmt == "yaml":
        text: str = yaml.safe_dump(doc, default_flow_style=False, sort_keys=True, allow_unicode=True)
        return text
    raise ValueError(f"not a document format: {fmt!r}")


def resource_name(kind: str, api_version: str, name: str) -> str:
    """kubectl's `-o name`: `<kind>.<group>/<name>` in lower case, `<kind>/<name>` for the core group."""
    group = api_version.rpartition("/")[0] if "/" in api_version else ""
    return f"{kind.lower()}.{group}/{name}" if group else f"{kind.lower()}/{name}"


def no_resources(namespace: str | None) -> str:
    """kubectl's line on stderr for an empty list: namespaced (`in <ns> namespace`) or not."""
    return f"No resources found in {namespace} namespace." if namespace else "No resources found"
