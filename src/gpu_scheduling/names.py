"""The Kubernetes name rules the components check before a name reaches the apiserver: a DNS label (namespaces,
pod and workload names), an RFC 1123 subdomain (node names, GpuClaims, any object's `metadata.name`), and the
name part of a label key, which is also the form of a non-empty label value. Pure: no I/O.

Each check takes any decoded value (only a `str` can pass) and applies the length limit with the pattern, and
each rule has its sentence for messages, so every place that refuses a name says the same thing.
"""

from __future__ import annotations

import re
from typing import Final

MAX_LABEL: Final = 63
"""Longest DNS label (RFC 1123); also the longest label name and label value."""

MAX_SUBDOMAIN: Final = 253
"""Longest RFC 1123 subdomain."""

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_LABEL_RE = re.compile(_LABEL)
_SUBDOMAIN_RE = re.compile(rf"{_LABEL}(\.{_LABEL})*")
_LABEL_NAME_RE = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


def label_rule(limit: int = MAX_LABEL) -> str:
    """What a DNS label is, for a message."""
    return f"lower-case letters, digits and '-', starting and ending with a letter or digit, at most {limit} characters"


def subdomain_rule(limit: int = MAX_SUBDOMAIN) -> str:
    """What an RFC 1123 subdomain is, for a message."""
    return (
        "lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, "
        f"at most {limit} characters"
    )


LABEL_NAME_RULE: Final = (
    f"letters, digits, '-', '_' and '.', starting and ending with a letter or digit, at most {MAX_LABEL} characters"
)
"""What the name part of a label key (and a non-empty label value) is, for a message."""


def is_label(value: object, limit: int = MAX_LABEL) -> bool:
    """A DNS label of at most `limit` characters (`limit` below 63 for a name that gets a suffix)."""
    return isinstance(value, str) and len(value) <= limit and _LABEL_RE.fullmatch(value) is not None


def is_subdomain(value: object, limit: int = MAX_SUBDOMAIN) -> bool:
    """An RFC 1123 subdomain of at most `limit` characters (a valid node, GpuClaim or object name)."""
    return isinstance(value, str) and len(value) <= limit and _SUBDOMAIN_RE.fullmatch(value) is not None


def is_label_name(value: object) -> bool:
    """The name part of a label key, or a non-empty label value."""
    return isinstance(value, str) and len(value) <= MAX_LABEL and _LABEL_NAME_RE.fullmatch(value) is not None


def is_label_key(value: object) -> bool:
    """A label key: a name (`is_label_name`), optionally after a DNS subdomain prefix and `/`
    (`topology.kubernetes.io/zone`)."""
    if not isinstance(value, str):
        return False
    prefix, slash, name = value.rpartition("/")
    return is_label_name(name) and (not slash or is_subdomain(prefix))
