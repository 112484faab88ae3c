"""Quoting user values in messages and log lines, bounded and escaped whatever they are. Pure: no I/O.

Every component that names a value it refuses (the map parser, the pod reader, the webhook, the scheduler, the
board) quotes it through :func:`show` or :func:`plain`, and names a decoded value's type through :func:`json_type`,
so a message stays a few hundred characters and never carries a raw newline or control character.
"""

from __future__ import annotations

import re
import unicodedata

SHOWN_CHARS = 60
"""User text quoted in a message is cut to this many characters (then escaped, see :func:`show`)."""


def show(value: object, limit: int = SHOWN_CHARS) -> str:
    """`value` quoted for a message or a log line: cut to `limit` characters, escaped like :func:`ascii` (so a
    newline or a control character shows as `\\n`, `\\x00`, never raw), then `…` when it was cut. At most about
    `3 * limit` characters whatever the input."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4 * limit:
        text = f"<an integer of {value.bit_length()} bits>"  # str() of it could raise past 4300 digits
    elif isinstance(value, (int, float, bool)) or value is None:
        text = repr(value)
    else:
        text = f"<{type(value).__name__}>"
    shown = ascii(text[:limit])
    if len(shown) > 2 * limit + 2:
        return shown[: 2 * limit + 2] + "…"
    return shown + "…" if len(text) > limit else shown


_PLAIN_RE = re.compile(r"^[A-Za-z0-9._-]{1,253}$")


def plain(value: object) -> str:
    """A name as it is when it is a plain name (letters, digits, `.`, `_`, `-`; at most 253), else :func:`show`."""
    if isinstance(value, str) and _PLAIN_RE.match(value):
        return value
    return show(value)


def json_type(value: object) -> str:
    """The JSON name of a decoded value's type, for messages ("a string", "null", "an array")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"


def describe_char(ch: str) -> str:
    """`U+00A0 (NO-BREAK SPACE)`, `U+0000 (control character)`."""
    name = unicodedata.name(ch, "")
    if not name:
        category = unicodedata.category(ch)
        name = {
            "Cc": "control character",
            "Cs": "surrogate",
            "Co": "private use character",
            "Cn": "unassigned character",
        }.get(category, f"character of category {category}")
    return f"U+{ord(ch):04X} ({name})"
