"""Parse and encode the `gpu-scheduling-map` annotation and resolve a pod's index. Pure: no I/O, no client.

Grammar, one entry per line::

    <index> = <node> : <gpu id>[, <gpu id> ...]

Blank lines and surrounding spaces are ignored, CRLF is accepted, spaces around `=`, `:` and `,` are accepted.
The index is a unique non-negative integer, the node a valid Kubernetes node name (RFC 1123 subdomain), the ids
non-negative integers. Two indices may share a node and even the same GPU ids (the take-home's 3 and 4 do).

Every problem of one map is collected and raised together in one :class:`MapError`, each naming its line.
Used by both the scheduler and the webhook so that they can never disagree about a map.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping
from typing import Any

from gpu_scheduling import constants

# RFC 1123 subdomain, the rule Kubernetes applies to node names.
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_NODE_NAME_RE = re.compile(rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$")
_MAX_NODE_NAME = 253
_INT_RE = re.compile(r"^[0-9]+$")
_NAME_INDEX_RE = re.compile(r"-([0-9]+)$")

EXPECTED_FORM = "expected `<index>=<node>:<gpu ids>`, e.g. `0=node1:0,1`"


@dataclasses.dataclass(frozen=True)
class Entry:
    """One line of the map: pod `index` goes to `node` and sees GPUs `gpu_ids`."""

    index: int
    node: str
    gpu_ids: tuple[int, ...]

    @property
    def cuda_visible_devices(self) -> str:
        return ",".join(str(i) for i in self.gpu_ids)


@dataclasses.dataclass(frozen=True)
class Problem:
    """What is wrong with one line: its number (1-based), its text and what was expected."""

    line: int
    text: str
    reason: str

    def __str__(self) -> str:
        return f"line {self.line} {self.text!r}: {self.reason}"


class PodMapError(Exception):
    """The pod is bad (its map or its index), as opposed to the request or the cluster being bad."""


class MapError(PodMapError, ValueError):
    """The map annotation is malformed. Carries every problem found, not only the first."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__(f"invalid {constants.MAP_ANNOTATION} annotation: " + "; ".join(map(str, problems)))


class PodIndexError(PodMapError, LookupError):
    """The pod's index cannot be resolved or is not in the map."""




@dataclasses.dataclass(frozen=True)
class GpuMap:
    """A parsed map: index -> entry."""

    entries: Mapping[int, Entry]

    def __len__(self) -> int:
        return len(self.entries)

    def entry_for(self, index: int) -> Entry:
        try:
            return self.entries[index]
        except KeyError:
            known = ", ".join(str(i) for i in sorted(self.entries)) or "none"
            raise PodIndexError(
                f"pod index {index} is not in the {constants.MAP_ANNOTATION} annotation (indices in the map: {known})"
            ) from None


def _parse_line(number: int, raw: str) -> tuple[Entry | None, list[Problem]]:
    text = raw.strip()
    problems: list[Problem] = []

    def bad(reason: str) -> tuple[None, list[Problem]]:
        return None, [Problem(number, text, reason)]

    if "=" not in text:
        return bad(f"missing `=`; {EXPECTED_FORM}")
    index_text, _, rest = (part.strip() for part in text.partition("="))
    if ":" not in rest:
        return bad(f"missing `:` between node and gpu ids; {EXPECTED_FORM}")
    node, _, ids_text = (part.strip() for part in rest.partition(":"))

    index = None
    if not index_text:
        problems.append(Problem(number, text, f"missing index before `=`; {EXPECTED_FORM}"))
    elif not _INT_RE.match(index_text):
        problems.append(Problem(number, text, f"index {index_text!r} is not a non-negative integer"))
    else:
        index = int(index_text)

    if not node:
        problems.append(Problem(number, text, f"missing node name before `:`; {EXPECTED_FORM}"))
    elif len(node) > _MAX_NODE_NAME or not _NODE_NAME_RE.match(node):
        problems.append(
            Problem(
                number,
                text,
                f"node {node!r} is not a valid Kubernetes node name "
                "(lower-case letters, digits, `-` and `.`, starting and ending with a letter or digit)",
            )
        )

    ids: list[int] = []
    if not ids_text:
        problems.append(Problem(number, text, "missing gpu ids after `:`; expected comma-separated integers like `0,1`"))
    else:
        for item in (i.strip() for i in ids_text.split(",")):
            if not _INT_RE.match(item):
                shown = item if item else "(empty)"
                problems.append(
                    Problem(number, text, f"gpu id {shown!r} is not a non-negative integer; expected e.g. `0,1`")
                )
            else:
                ids.append(int(item))

    if problems or index is None:
        return None, problems
    return Entry(index, node, tuple(ids)), []


def parse(text: str) -> GpuMap:
    """Parse a map annotation value. Raises :class:`MapError` listing every problem."""
    entries: dict[int, Entry] = {}
    first_line: dict[int, int] = {}
    problems: list[Problem] = []
    for number, raw in enumerate(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"), start=1):
        if not raw.strip():
            continue
        entry, line_problems = _parse_line(number, raw)
        problems += line_problems
        if entry is None:
            continue
        if entry.index in entries:
            problems.append(
                Problem(number, raw.strip(), f"index {entry.index} already given on line {first_line[entry.index]}")
            )
            continue
        entries[entry.index] = entry
        first_line[entry.index] = number
    if problems:
        raise MapError(problems)
    if not entries:
        raise MapError([Problem(1, text.strip(), f"the map is empty; {EXPECTED_FORM}")])
    return GpuMap(entries)


@functools.lru_cache(maxsize=256)
def _parse_remembered(text: str) -> GpuMap | tuple[Problem, ...]:
    try:
        return parse(text)
    except MapError as exc:
        return tuple(exc.problems)


def parse_cached(text: str) -> GpuMap:
    """:func:`parse`, remembering the last 256 distinct maps (valid or not). Every replica of a StatefulSet
    carries the same map, so the scheduler and the webhook parse it once per group instead of once per pod
    (profiling showed parsing a 100-line map per pod as their largest cost). The result must not be modified."""
    result = _parse_remembered(text)
    if isinstance(result, tuple):
        raise MapError(list(result))  # a fresh exception each time: a raised one keeps its traceback
    return result


def encode(gpu_map: GpuMap | Mapping[int, Entry]) -> str:
    """Write a map in canonical form (sorted by index, one entry per line); `parse(encode(m)) == m`."""
    entries = gpu_map.entries if isinstance(gpu_map, GpuMap) else gpu_map
    return "".join(
        f"{e.index}={e.node}:{e.cuda_visible_devices}\n" for e in sorted(entries.values(), key=lambda e: e.index)
    )


def pod_index(metadata: Mapping[str, Any]) -> int:
    """The pod's index: the `apps.kubernetes.io/pod-index` label, else the trailing `-<digits>` of its name."""
    labels = metadata.get("labels") or {}
    label = labels.get(constants.POD_INDEX_LABEL)
    if label is not None:
        if not _INT_RE.match(str(label)):
            raise PodIndexError(
                f"label {constants.POD_INDEX_LABEL}={label!r} is not a non-negative integer"
            )
        return int(label)
    name = metadata.get("name") or ""
    match = _NAME_INDEX_RE.search(name)
    if match is None:
        shown = f"pod name {name!r}" if name else f"pod has no name yet (generateName {metadata.get('generateName')!r})"
        raise PodIndexError(
            f"cannot resolve the pod index for the {constants.MAP_ANNOTATION} annotation: {shown} does not end in "
            f"`-<number>` and there is no {constants.POD_INDEX_LABEL} label; name the pod `<name>-<index>` "
            "or create it from a StatefulSet"
        )
    return int(match.group(1))


def entry_for_pod(metadata: Mapping[str, Any]) -> Entry | None:
    """The map entry of a pod, or None when the pod has no map annotation.

    Raises :class:`MapError` for a malformed map and :class:`PodIndexError` for an index that cannot be resolved
    or is missing from the map.
    """
    annotations = metadata.get("annotations") or {}
    text = annotations.get(constants.MAP_ANNOTATION)
    if text is None:
        return None
    gpu_map = parse_cached(text)
    return gpu_map.entry_for(pod_index(metadata))
