"""Parse and encode the `gpu-scheduling-map` annotation and resolve a pod's index. Pure: no I/O, no client.

Grammar, one entry per line::

    <index> = <node> : <gpu id>[, <gpu id> ...]

Blank lines and surrounding spaces are ignored, CRLF is accepted, spaces around `=`, `:` and `,` are accepted.
The index is a unique non-negative integer below 10^9, the node a valid Kubernetes node name (RFC 1123
subdomain), the ids non-negative integers below 10^4. Two indices may share a node and even the same GPU ids (the
take-home's 3 and 4 do).

The map is ASCII: the only whitespace is space and tab around tokens and LF, CRLF (or a lone CR) between lines.
Any other character outside printable ASCII (a no-break space, U+2028, a zero-width space, a control character)
is a problem naming it, never silently taken as a space.

Parsing is linear in the input and its errors are bounded: a :class:`MapError` keeps the first
:data:`MAX_PROBLEMS` problems (each naming its line, showing the line cut to :data:`SHOWN_CHARS` characters in an
escaped form, and saying what was expected) and counts the rest, so its message stays a few KB whatever the map.
Used by both the scheduler and the webhook so that they can never disagree about a map.

A pod's index (:func:`pod_index`) comes from the labels its workload controller sets, read in one documented order
so that a pod carrying several (a LeaderWorkerSet pod also carries the StatefulSet label, a JobSet pod the Job's)
is read by the most specific: LeaderWorkerSet, JobSet, Kubeflow training operator, Indexed Job, StatefulSet, and
last the pod name's trailing `-<number>`. The webhook and the scheduler both read it through :func:`pod_index`.
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any

from gpu_scheduling import constants, names
from gpu_scheduling.text import SHOWN_CHARS, describe_char, json_type, show

_INT_RE = re.compile(r"^[0-9]+$")
_NAME_INDEX_RE = re.compile(r"-([0-9]+)$")


_NOT_ASCII_RE = re.compile(r"[^\x20-\x7e\t]")  # anything but printable ASCII and tab
_BLANK = " \t"

MAX_INDEX_DIGITS = 9
"""An index has at most this many digits (index < 10^9), checked before any conversion."""

MAX_GPU_ID_DIGITS = 4
"""A GPU id has at most this many digits (id < 10^4), checked before any conversion."""

MAX_MAP_CHARS = 256 * 1024
"""Longest map accepted: Kubernetes allows 256 KiB for all of a pod's annotations together."""

MAX_PROBLEMS = 10
"""A :class:`MapError` keeps (and its message lists) the first this many problems, then says how many more."""

MAX_INDICES_SHOWN = 20
"""A :class:`PodIndexError` for an index missing from the map lists at most this many of the map's indices."""

PARSE_CACHE_BYTES = 8 * 1024 * 1024
"""A :class:`ParseCache` holds, by default, at most about this many bytes, all entries together: the map text
(its key) plus :data:`CACHE_BYTES_PER_ENTRY` per parsed line (measured with tracemalloc). 256 maps of 100 lines
take about 7 MB."""

CACHE_BYTES_PER_ENTRY = 260
"""Estimated memory of one parsed line (an :class:`Entry`, its node name, ids and dict slot) in the cache."""

PARSE_CACHE_ENTRIES = 256
"""... and at most this many distinct maps."""

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

    def cuda_value(self, isolated: bool = False) -> str:
        """CUDA_VISIBLE_DEVICES for this entry: the node's GPU ids (the take-home's meaning, right where a container
        can open every GPU of the node: simulated GPUs, no device plugin), or, where the kubelet's device plugin
        gives a container only its own GPUs (`isolated`, NVIDIA's runtime), 0..n-1: CUDA numbers the GPUs a
        container sees from 0, so the node's ids would name GPUs that are not there."""
        return ",".join(str(i) for i in range(len(self.gpu_ids))) if isolated else self.cuda_visible_devices


@dataclasses.dataclass(frozen=True)
class Problem:
    """What is wrong with one line: its number (1-based), its text and what was expected.

    `text` is kept cut to a little more than :data:`SHOWN_CHARS` characters; `str()` shows it escaped."""

    line: int
    text: str
    reason: str

    def __str__(self) -> str:
        return f"line {self.line} {show(self.text)}: {self.reason}"


class PodMapError(Exception):
    """The pod is bad (its map, its index, or what it asks for), as opposed to the request or the cluster being
    bad. Its message is bounded (a few KB) whatever the pod."""


class MapError(PodMapError, ValueError):
    """The map annotation is malformed. Carries the first :data:`MAX_PROBLEMS` problems in `problems` and the
    number of all problems found in `total`."""

    def __init__(self, problems: list[Problem], total: int | None = None):
        self.problems = problems[:MAX_PROBLEMS]
        self.total = max(total if total is not None else len(problems), len(self.problems))
        more = self.total - len(self.problems)
        tail = f"; and {more} more problem{'s' if more != 1 else ''}" if more else ""
        super().__init__(f"invalid {constants.MAP_ANNOTATION} annotation: " + "; ".join(map(str, self.problems)) + tail)


class PodIndexError(PodMapError, LookupError):
    """The pod's index cannot be resolved or is not in the map."""


class _Problems:
    """Collects problems in line order, keeping the first MAX_PROBLEMS and counting the others."""

    __slots__ = ("kept", "total")

    def __init__(self) -> None:
        self.kept: list[Problem] = []
        self.total = 0

    def add(self, line: int, text: str, reason: str | Callable[[], str]) -> None:
        """Count a problem; keep it (building its reason, when given as a function) only while there is room."""
        self.total += 1
        if len(self.kept) < MAX_PROBLEMS:
            self.kept.append(Problem(line, text[: SHOWN_CHARS + 1], reason if isinstance(reason, str) else reason()))

    def error(self) -> MapError:
        return MapError(self.kept, self.total)


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
            shown = heapq.nsmallest(MAX_INDICES_SHOWN, self.entries)
            known = ", ".join(map(str, shown)) or "none"
            if len(self.entries) > len(shown):
                known += f", … ({len(self.entries)} indices in all)"
            raise PodIndexError(
                f"pod index {index} is not in the {constants.MAP_ANNOTATION} annotation (indices in the map: {known})"
            ) from None


def _integer(token: str, what: str, digits: int, example: str) -> int | Callable[[], str]:
    """The value of a decimal token, or a function giving the reason it is not one (built only for the problems
    a MapError keeps). The length is checked before any conversion."""
    if not token:
        return lambda: f"{what} {show('(empty)')} is not a non-negative integer; expected e.g. `{example}`"
    if not _INT_RE.match(token):
        return lambda: f"{what} {show(token)} is not a non-negative integer; expected e.g. `{example}`"
    if len(token) > digits:
        return lambda: (
            f"{what} {show(token)} has {len(token)} digits; at most {digits} are allowed ({what} < 10^{digits})"
        )
    return int(token)


def _parse_line(number: int, text: str, problems: _Problems) -> Entry | None:
    """One non-blank line, already stripped of spaces and tabs and known to be printable ASCII."""
    before = problems.total

    if "=" not in text:
        problems.add(number, text, f"missing `=`; {EXPECTED_FORM}")
        return None
    index_text, _, rest = text.partition("=")
    index_text = index_text.strip(_BLANK)
    if ":" not in rest:
        problems.add(number, text, f"missing `:` between node and gpu ids; {EXPECTED_FORM}")
        return None
    node, _, ids_text = rest.partition(":")
    node, ids_text = node.strip(_BLANK), ids_text.strip(_BLANK)

    index = None
    if not index_text:
        problems.add(number, text, f"missing index before `=`; {EXPECTED_FORM}")
    elif not _INT_RE.match(index_text):
        problems.add(number, text, f"index {show(index_text)} is not a non-negative integer")
    else:
        value = _integer(index_text, "index", MAX_INDEX_DIGITS, "0")
        if not isinstance(value, int):
            problems.add(number, text, value)
        else:
            index = value

    if not node:
        problems.add(number, text, f"missing node name before `:`; {EXPECTED_FORM}")
    elif not names.is_subdomain(node):
        problems.add(number, text, f"node {show(node)} is not a valid Kubernetes node name ({names.subdomain_rule()})")

    ids: list[int] = []
    if not ids_text:
        problems.add(number, text, "missing gpu ids after `:`; expected comma-separated integers like `0,1`")
    else:
        for item in ids_text.split(","):
            value = _integer(item.strip(_BLANK), "gpu id", MAX_GPU_ID_DIGITS, "0,1")
            if not isinstance(value, int):
                problems.add(number, text, value)
            else:
                ids.append(value)

    if problems.total != before or index is None:
        return None
    return Entry(index, node, tuple(ids))


def parse(text: str) -> GpuMap:
    """Parse a map annotation value. Raises :class:`MapError` with the first problems (and their count).

    Linear in the length of `text`; the error's message is bounded whatever `text` is."""
    if not isinstance(text, str):
        raise MapError([Problem(1, "", f"the map is {json_type(text)}; expected a string")])
    if len(text) > MAX_MAP_CHARS:
        raise MapError(
            [
                Problem(
                    1,
                    text[: SHOWN_CHARS + 1],
                    f"the map is {len(text)} characters long; at most {MAX_MAP_CHARS} are allowed "
                    "(Kubernetes allows 256 KiB for all of a pod's annotations)",
                )
            ]
        )
    entries: dict[int, Entry] = {}
    first_line: dict[int, int] = {}
    problems = _Problems()
    for number, raw in enumerate(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"), start=1):
        line = raw.strip(_BLANK)
        if not line:
            continue
        bad_char = _NOT_ASCII_RE.search(line)
        if bad_char is not None:
            problems.add(
                number,
                line,
                f"character {describe_char(bad_char.group())} is not allowed: the map is "
                "ASCII (only spaces and tabs around tokens, one entry per line)",
            )
            continue
        entry = _parse_line(number, line, problems)
        if entry is None:
            continue
        if entry.index in entries:
            problems.add(number, line, f"index {entry.index} already given on line {first_line[entry.index]}")
            continue
        entries[entry.index] = entry
        first_line[entry.index] = number
    if problems.total:
        raise problems.error()
    if not entries:
        raise MapError(
            [Problem(1, text.strip(_BLANK + "\r\n")[: SHOWN_CHARS + 1], f"the map is empty; {EXPECTED_FORM}")]
        )
    return GpuMap(entries)


class ParseCache:
    """Recent parse results keyed by the map text, valid or not: at most `max_entries` distinct maps and about
    `max_bytes` bytes (the key, plus CACHE_BYTES_PER_ENTRY per parsed line; a MapError keeps at most MAX_PROBLEMS
    small problems), least recently used first out. Every replica of a StatefulSet carries the same map, so the
    scheduler and the webhook parse it once per group instead of once per pod (profiling showed parsing a 100-line
    map per pod as their largest cost).

    The program that parses owns one and passes it to :func:`podrequest.read` / :func:`entry_for_pod` (its
    `bytes` and `len()` say how full it is); nothing here keeps one. Safe to share between threads."""

    def __init__(self, max_entries: int = PARSE_CACHE_ENTRIES, max_bytes: int = PARSE_CACHE_BYTES):
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.bytes = 0
        self._data: collections.OrderedDict[str, tuple[GpuMap | tuple[tuple[Problem, ...], int], int]] = (
            collections.OrderedDict()
        )
        self._lock = threading.Lock()

    def parse(self, text: str) -> GpuMap:
        """:func:`parse`, answered from the cache when `text` was seen. The result must not be modified; a
        malformed map raises a fresh MapError each time (a raised one keeps its traceback)."""
        if not isinstance(text, str):
            return parse(text)  # raises
        result = self.get(text)
        if result is None:
            try:
                result = parse(text)
            except MapError as exc:
                result = (tuple(exc.problems), exc.total)
            self.put(text, result)
        if isinstance(result, tuple):
            raise MapError(list(result[0]), result[1])
        return result

    def get(self, text: str) -> GpuMap | tuple[tuple[Problem, ...], int] | None:
        with self._lock:
            item = self._data.get(text)
            if item is None:
                return None
            self._data.move_to_end(text)
            return item[0]

    def put(self, text: str, result: GpuMap | tuple[tuple[Problem, ...], int]) -> None:
        size = len(text) + CACHE_BYTES_PER_ENTRY * (len(result) if isinstance(result, GpuMap) else MAX_PROBLEMS)
        if size > self.max_bytes:
            return
        with self._lock:
            if text in self._data:
                return
            self._data[text] = (result, size)
            self.bytes += size
            while len(self._data) > self.max_entries or self.bytes > self.max_bytes:
                _, (_, old_size) = self._data.popitem(last=False)
                self.bytes -= old_size

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self.bytes = 0


def parse_with(maps: ParseCache | None, text: str) -> GpuMap:
    """`maps.parse(text)`, or :func:`parse` when the caller keeps no cache (a one-shot reader)."""
    return parse(text) if maps is None else maps.parse(text)


def encode(gpu_map: GpuMap | Mapping[int, Entry]) -> str:
    """Write a map in canonical form (sorted by index, one entry per line); `parse(encode(m)) == m`."""
    entries = gpu_map.entries if isinstance(gpu_map, GpuMap) else gpu_map
    return "".join(
        f"{e.index}={e.node}:{e.cuda_visible_devices}\n" for e in sorted(entries.values(), key=lambda e: e.index)
    )


def _index_value(token: str, where: str) -> int:
    if not _INT_RE.match(token):
        raise PodIndexError(f"{where} is not a non-negative integer")
    if len(token) > MAX_INDEX_DIGITS:
        raise PodIndexError(
            f"{where} has {len(token)} digits; at most {MAX_INDEX_DIGITS} are allowed (index < 10^{MAX_INDEX_DIGITS})"
        )
    return int(token)


_INDEX_SOURCES = (
    f"LeaderWorkerSet {constants.LWS_WORKER_INDEX_LABEL}, JobSet {constants.JOBSET_GLOBAL_INDEX_LABEL}, "
    f"training operator {constants.TRAINING_REPLICA_INDEX_LABEL}, Indexed Job {constants.JOB_COMPLETION_INDEX_KEY}, "
    f"StatefulSet {constants.POD_INDEX_LABEL}"
)
"""Where an index comes from, in the order :func:`pod_index` reads them, as its errors list them."""


def _values(metadata: Mapping[str, Any], field: str) -> Mapping[str, Any]:
    """`metadata.labels` or `metadata.annotations`: {} when absent, PodIndexError when not an object."""
    values = metadata.get(field)
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise PodIndexError(f"metadata.{field} is {json_type(values)}; expected an object of strings")
    return values


def _read_index(values: Mapping[str, Any], what: str, key: str) -> int | None:
    """The index held by the label or annotation `key` (`what` says which), None when it is absent."""
    value = values.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise PodIndexError(f"{what} {key} is {json_type(value)}; expected a string holding a non-negative integer")
    return _index_value(value, f"{what} {key}={show(value)}")


def _completion_index(labels: Mapping[str, Any], annotations: Mapping[str, Any]) -> int | None:
    """An Indexed Job's completion index: the label (Kubernetes >= 1.28), else the annotation of the same key."""
    label = _read_index(labels, "label", constants.JOB_COMPLETION_INDEX_KEY)
    if label is not None:
        return label
    return _read_index(annotations, "annotation", constants.JOB_COMPLETION_INDEX_KEY)


def _leaderworkerset_index(worker: int, labels: Mapping[str, Any], annotations: Mapping[str, Any]) -> int:
    """group × size + worker: the groups' pods numbered one after the other, the leader of each first."""
    group = _read_index(labels, "label", constants.LWS_GROUP_INDEX_LABEL) or 0
    size = _read_index(annotations, "annotation", constants.LWS_SIZE_ANNOTATION)
    if size is None:
        if group == 0:
            return worker
        raise PodIndexError(
            f"label {constants.LWS_GROUP_INDEX_LABEL}={group} needs the annotation {constants.LWS_SIZE_ANNOTATION} "
            f"(the group's size) to number the pod group × size + worker; the LeaderWorkerSet controller sets it"
        )
    if worker >= size:
        raise PodIndexError(
            f"label {constants.LWS_WORKER_INDEX_LABEL}={worker} is not below the annotation "
            f"{constants.LWS_SIZE_ANNOTATION}={size}; expected a worker index from 0 to size - 1"
        )
    index = group * size + worker
    if index >= 10**MAX_INDEX_DIGITS:
        raise PodIndexError(
            f"LeaderWorkerSet index group {group} × size {size} + worker {worker} = {index} is not below "
            f"10^{MAX_INDEX_DIGITS}, the largest index a map may hold"
        )
    return index


def _jobset_index(global_index: int, labels: Mapping[str, Any], annotations: Mapping[str, Any]) -> int:
    """A JobSet pod's index: its child Job's global index when each child Job runs one pod, its completion index
    when the JobSet has a single child Job; anything else has no one number per pod."""
    replicas = _read_index(labels, "label", constants.JOBSET_GLOBAL_REPLICAS_LABEL)
    completion = _completion_index(labels, annotations)
    if replicas == 1:
        return global_index if completion is None else completion
    if not completion:  # absent or 0: one pod per child Job (or the first pod of each)
        return global_index
    raise PodIndexError(
        f"label {constants.JOBSET_GLOBAL_INDEX_LABEL}={global_index} and {constants.JOB_COMPLETION_INDEX_KEY}="
        f"{completion}: a JobSet whose child Jobs run several pods each cannot be indexed unambiguously; run one "
        "pod per child Job (parallelism 1, the map indexed by the global Job index) or one replicated Job with "
        "replicas 1 (the map indexed by the completion index)"
    )


def pod_index(metadata: Mapping[str, Any]) -> int:
    """The pod's index in the map, from the first of these that the pod carries:

    1. LeaderWorkerSet: `group × size + worker` from the labels `leaderworkerset.sigs.k8s.io/worker-index` and
       `group-index` (absent: 0) and the annotation `leaderworkerset.sigs.k8s.io/size` (needed when group > 0).
       First, because its pods also carry the StatefulSet label (of the group's StatefulSet, not of the set).
    2. JobSet: the label `jobset.sigs.k8s.io/job-global-index` when each child Job runs one pod; the completion
       index when `jobset.sigs.k8s.io/global-replicas` is 1 (one child Job). Before the Job's own label, which
       restarts at 0 in every child Job. Child Jobs running several pods each: an error.
    3. Kubeflow training operator: the label `training.kubeflow.org/replica-index` (each replica type has its own
       pod template, hence its own map).
    4. Indexed Job: the label `batch.kubernetes.io/job-completion-index`, else the annotation of that key (the
       Job controller sets both; the label since Kubernetes 1.28). Its pods are named `<job>-<index>-<random>`,
       so the name alone would give the random suffix's digits, or nothing.
    5. StatefulSet: the label `apps.kubernetes.io/pod-index` (Kubernetes >= 1.28).
    6. The trailing `-<digits>` of the pod's name (a StatefulSet pod `<set>-<index>`, or a pod named so by hand).

    Every value is a decimal string of at most :data:`MAX_INDEX_DIGITS` digits. Raises :class:`PodIndexError`
    (never anything else) for any shape of `metadata`, its message naming the label or annotation and what was
    expected."""
    if not isinstance(metadata, Mapping):
        raise PodIndexError(f"metadata is {json_type(metadata)}; expected an object")
    labels = _values(metadata, "labels")

    def annotations() -> Mapping[str, Any]:  # read only by the rules that need them
        return _values(metadata, "annotations")

    worker = _read_index(labels, "label", constants.LWS_WORKER_INDEX_LABEL)
    if worker is not None:
        return _leaderworkerset_index(worker, labels, annotations())
    global_index = _read_index(labels, "label", constants.JOBSET_GLOBAL_INDEX_LABEL)
    if global_index is not None:
        return _jobset_index(global_index, labels, annotations())
    index = _read_index(labels, "label", constants.TRAINING_REPLICA_INDEX_LABEL)
    if index is None:
        index = _completion_index(labels, annotations())
    if index is None:
        index = _read_index(labels, "label", constants.POD_INDEX_LABEL)
    if index is not None:
        return index
    name = metadata.get("name")
    if name is None:
        name = ""
    if not isinstance(name, str):
        raise PodIndexError(f"metadata.name is {json_type(name)}; expected a string")
    match = _NAME_INDEX_RE.search(name)
    if match is None:
        if name:
            shown = f"pod name {show(name)}"
        else:
            generate = metadata.get("generateName")
            shown = f"pod has no name yet (generateName {show(generate)})"
        raise PodIndexError(
            f"cannot resolve the pod index for the {constants.MAP_ANNOTATION} annotation: the pod carries none of "
            f"the index labels ({_INDEX_SOURCES}) and {shown} does not end in `-<number>`; create it from one of "
            "those controllers or name it `<name>-<index>`"
        )
    return _index_value(match.group(1), f"the index {show(match.group(1))} at the end of pod name {show(name)}")


def entry_for_pod(metadata: Mapping[str, Any], maps: ParseCache | None = None) -> Entry | None:
    """The map entry of a pod, or None when the pod has no map annotation; the map parsed through `maps` when
    the caller keeps a cache.

    Raises :class:`MapError` for a malformed map and :class:`PodIndexError` for an index that cannot be resolved
    or is missing from the map (and for metadata of the wrong shape). See also
    :func:`gpu_scheduling.podrequest.read`, which also checks the claim annotation.
    """
    if not isinstance(metadata, Mapping):
        raise PodIndexError(f"metadata is {json_type(metadata)}; expected an object")
    annotations = metadata.get("annotations")
    if annotations is None:
        return None
    if not isinstance(annotations, Mapping):
        raise PodIndexError(f"metadata.annotations is {json_type(annotations)}; expected an object of strings")
    text = annotations.get(constants.MAP_ANNOTATION)
    if text is None:
        return None
    if not isinstance(text, str):
        raise MapError(
            [Problem(1, "", f"annotation {constants.MAP_ANNOTATION} is {json_type(text)}; expected a string")]
        )
    return parse_with(maps, text).entry_for(pod_index(metadata))
