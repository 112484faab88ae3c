"""Turn the apiserver's audit log into per-pod create and bind times and into counts of write requests, and those
into the figures. Pure except for reading the log.

A pod is created when its create request completes (after admission and the etcd write) and bound when its
pods/binding request completes with 201. Throughput runs from the first create request received to the last
bind completed, so it includes creating the pods, as a user would see it.

A write is a create, update, patch or delete request, counted by verb, resource and subresource ("patch
pods/status") when it completed (whatever its answer: a refused write costs the apiserver too).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import pathlib
import statistics
from collections.abc import Iterable, Sequence


def _ts(text: str) -> float:
    return datetime.datetime.fromisoformat(text).timestamp()


@dataclasses.dataclass
class PodTimes:
    received: float  # create request received
    created: float  # create response complete
    bound: float | None = None


class _Tail:
    """Reads the complete lines appended to an audit log since the last call (the last, unfinished one waits)."""

    path: pathlib.Path
    _offset: int
    _partial: bytes

    def _new_lines(self) -> list[bytes]:
        if not self.path.exists():
            return []
        with self.path.open("rb") as f:
            f.seek(self._offset)
            data = f.read()
            self._offset = f.tell()
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        return lines


class AuditTail(_Tail):
    """Reads an audit log incrementally (it grows while the run goes on) and keeps per-pod times of one
    namespace."""

    def __init__(self, path: pathlib.Path, namespace: str):
        self.path, self.namespace = path, namespace
        self.pods: dict[str, PodTimes] = {}
        self.bound = 0
        self.failed_binds = 0
        # Binds logged before their pod's create: a fast scheduler sees the pod in its watch (it is in etcd) and
        # binds it before the apiserver has finished answering the create, whose audit event then comes later.
        self._early_binds: dict[str, float] = {}
        self._offset = 0
        self._partial = b""

    def poll(self) -> int:
        """Read what was appended since the last call; returns the number of pods bound so far."""
        for line in self._new_lines():
            # Only pod events matter here; the log also holds every other write, which is not worth parsing
            # while the contenders run on the same CPUs.
            if b'"pods"' in line:
                self._event(json.loads(line))
        return self.bound

    def _event(self, event: dict) -> None:
        ref = event.get("objectRef") or {}
        if ref.get("namespace") != self.namespace or event.get("stage") != "ResponseComplete":
            return
        code = (event.get("responseStatus") or {}).get("code")
        name = ref.get("name")
        if ref.get("resource") != "pods" or not name:
            return
        if ref.get("subresource") == "binding":
            pod = self.pods.get(name)
            if code != 201:
                self.failed_binds += 1
            elif pod is None:
                self._early_binds.setdefault(name, _ts(event["stageTimestamp"]))
            elif pod.bound is None:
                pod.bound = _ts(event["stageTimestamp"])
                self.bound += 1
        elif not ref.get("subresource") and code == 201:
            pod = self.pods[name] = PodTimes(_ts(event["requestReceivedTimestamp"]), _ts(event["stageTimestamp"]))
            early = self._early_binds.pop(name, None)
            if early is not None:  # bound while its create was still being answered: no wait counted
                pod.bound = max(early, pod.created)
                self.bound += 1


WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


def write_key(event: dict) -> str | None:
    """ "<verb> <resource>[/<subresource>]" of a completed write request, else None."""
    if event.get("stage") != "ResponseComplete" or event.get("verb") not in WRITE_VERBS:
        return None
    ref = event.get("objectRef") or {}
    resource = ref.get("resource", "?") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
    return f"{event['verb']} {resource}"


class WriteTail(_Tail):
    """The completed write requests of an audit log, read incrementally: who made each, when it was received,
    and its `write_key`; and when each object's last successful create was received (`created`)."""

    def __init__(self, path: pathlib.Path):
        self.path = path
        self._offset = 0
        self._partial = b""
        self.events: list[tuple[float, str, str]] = []  # (request received, user, key), in log order
        self._created: dict[tuple[str, str, str], float] = {}  # (key, namespace, name) -> last 2xx create received

    def poll(self) -> int:
        """Read what was appended since the last call; returns the number of writes seen so far."""
        for line in self._new_lines():
            if not line.strip():
                continue
            event = json.loads(line)
            key = write_key(event)
            if key is not None:
                user = (event.get("user") or {}).get("username", "")
                received = _ts(event["requestReceivedTimestamp"])
                self.events.append((received, user, key))
                if event["verb"] == "create" and 200 <= (event.get("responseStatus") or {}).get("code", 0) < 300:
                    ref = event.get("objectRef") or {}
                    self._created[(key, ref.get("namespace", ""), ref.get("name", ""))] = received
        return len(self.events)

    def created(self, key: str, namespace: str) -> dict[str, float]:
        """Name -> when the last successful `key` write ("create leases", "create pods/binding") of that name in
        `namespace` was received: the Lease that holds a GPU now is its last create, a pod is bound once."""
        return {name: t for (k, ns, name), t in self._created.items() if k == key and ns == namespace}

    def counts(self, user: str | None, since: float | None = None, until: float | None = None) -> dict[str, int]:
        """Writes by `user` (None: by anyone) received in [since, until) (None: unbounded), by key."""
        out: dict[str, int] = {}
        for received, who, key in self.events:
            if (
                (user is None or who == user)
                and (since is None or received >= since)
                and (until is None or received < until)
            ):
                out[key] = out.get(key, 0) + 1
        return dict(sorted(out.items()))


def per_pod(counts: dict[str, int], pods: int) -> dict[str, float]:
    """Write counts divided by the pods they were made for, with the total under "total"."""
    out = {k: v / pods for k, v in counts.items()} if pods else {}
    out["total"] = sum(counts.values()) / pods if pods else 0.0
    return out


def tried(pod: dict) -> bool:
    """The scheduler has tried the pod and found no place for it (condition PodScheduled=False). A bound pod is
    not: a waiting pod of the storm must never be bound (bench/checks.py)."""
    return not pod["spec"].get("nodeName") and any(
        c.get("type") == "PodScheduled" and c.get("status") == "False"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


@dataclasses.dataclass
class RunFigures:
    pods: int
    bound: int
    seconds: float  # first create received -> last bind
    throughput: float  # bound pods / seconds
    create_seconds: float  # first create received -> last create complete
    latency_p50_ms: float
    latency_p90_ms: float
    latency_p99_ms: float
    failed_binds: int
    curve: list[tuple[float, int]]  # (seconds since first create, pods bound so far)


def figures(times: dict[str, PodTimes], failed_binds: int = 0) -> RunFigures:
    start = min(t.received for t in times.values())
    bound = sorted(t.bound for t in times.values() if t.bound is not None)
    latencies = [(t.bound - t.created) * 1000 for t in times.values() if t.bound is not None]
    end = bound[-1] if bound else start
    seconds = end - start
    return RunFigures(
        pods=len(times),
        bound=len(bound),
        seconds=seconds,
        throughput=len(bound) / seconds if seconds > 0 else 0.0,
        create_seconds=max(t.created for t in times.values()) - start,
        latency_p50_ms=percentile(latencies, 50) if latencies else 0.0,
        latency_p90_ms=percentile(latencies, 90) if latencies else 0.0,
        latency_p99_ms=percentile(latencies, 99) if latencies else 0.0,
        failed_binds=failed_binds,
        curve=[(b - start, i + 1) for i, b in enumerate(bound)],
    )


def spread(values: Iterable[float]) -> tuple[float, float, float]:
    """(median, min, max)."""
    vals = list(values)
    return statistics.median(vals), min(vals), max(vals)


def request_latencies_ms(csv_path: pathlib.Path) -> list[float]:
    """Per-request latencies from a load generator CSV (`seq,start_unix_ns,end_unix_ns,http_status`)."""
    out = []
    for line in csv_path.read_text().splitlines()[1:]:
        _seq, start, end, _status = line.split(",")
        out.append((int(end) - int(start)) / 1e6)
    return out


@dataclasses.dataclass
class GangFigures:
    gangs: int
    placed: int  # gangs with every member bound
    seconds: float  # first member's create received -> last gang bound
    gangs_per_second: float
    gang_p50_ms: float  # last member created -> last member bound, per placed gang
    gang_p99_ms: float
    gang_max_ms: float


def gang_figures(times: dict[str, PodTimes], gangs: dict[str, list[str]]) -> GangFigures:
    """Gangs placed per second (from the first create request received to the bind that completed the last gang)
    and, per placed gang, the time from its last member's create to its last member's bind: how long the gang
    waited once whole, which gpu_scheduler_gang_scheduling_duration_seconds also measures (from the scheduler's
    side). A gang with a member never created or never bound is not placed."""
    start = min(t.received for t in times.values())
    waits: list[float] = []
    ends: list[float] = []
    for members in gangs.values():
        mine = [times.get(m) for m in members]
        if not mine or any(t is None or t.bound is None for t in mine):
            continue
        done = max(t.bound for t in mine if t is not None and t.bound is not None)
        ends.append(done)
        waits.append((done - max(t.created for t in mine if t is not None)) * 1000)
    seconds = max(ends) - start if ends else 0.0
    return GangFigures(
        gangs=len(gangs),
        placed=len(ends),
        seconds=seconds,
        gangs_per_second=len(ends) / seconds if seconds > 0 else 0.0,
        gang_p50_ms=percentile(waits, 50) if waits else 0.0,
        gang_p99_ms=percentile(waits, 99) if waits else 0.0,
        gang_max_ms=max(waits) if waits else 0.0,
    )


@dataclasses.dataclass
class GangPhases:
    """Where a placed gang's wait went, by the apiserver's account: medians over the gangs, in ms. The commit is the
    gang's first write after its decision: its first GPU Lease create (gpu-scheduler locks every member's GPUs
    before it binds any), or, for a scheduler that writes no Lease, its first binding."""

    gangs: int
    to_commit_p50_ms: float  # last member's create completed -> the gang's first commit write received
    locking_p50_ms: float  # first GPU Lease create -> last one received (0 without Leases)
    binding_p50_ms: float  # last Lease create (or first binding) -> last binding received


def gang_phases(
    times: dict[str, PodTimes],
    gangs: dict[str, list[str]],
    leases: dict[str, list[float]],
    binds: dict[str, float],
) -> GangPhases:
    """`leases`: member -> when each of its GPU Leases' creates was received (none for a scheduler without Leases);
    `binds`: member -> when its binding was received. A gang with a member never created, bound or logged is left
    out."""
    commit, locking, binding = [], [], []
    for members in gangs.values():
        if not members or any(m not in times or times[m].bound is None or m not in binds for m in members):
            continue
        created = max(times[m].created for m in members)
        locked = [at for m in members for at in leases.get(m, [])]
        bound = [binds[m] for m in members]
        first = min(locked) if locked else min(bound)
        last_lock = max(locked) if locked else first
        commit.append((first - created) * 1000)
        locking.append((last_lock - first) * 1000)
        binding.append((max(bound) - last_lock) * 1000)
    return GangPhases(
        gangs=len(commit),
        to_commit_p50_ms=percentile(commit, 50) if commit else 0.0,
        locking_p50_ms=percentile(locking, 50) if locking else 0.0,
        binding_p50_ms=percentile(binding, 50) if binding else 0.0,
    )
