"""`kubectl gpu watch`: one line per change of the GpuClaims, the scheduler's pods and the GpuNodeStatuses, from
watches (`kube.informer.Informer`: list, then watch from that resourceVersion; a dropped watch reconnects from the
last resourceVersion it saw, and one answered 410 Gone lists again and reports what changed meanwhile).

Each object is summed up as a state and a detail (a claim: its phase, and its allocation or message; a pod: its
phase, or Unschedulable, and its node and GPUs; an inventory: its free and total GPUs); a line is printed when that
summary changes, not on every write (the inventory agent rewrites its object every few seconds):

    12:00:01  gpuclaim/ns/train  Pending -> Bound  node2:0,1
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from gpu_scheduling.claims import objects
from gpu_scheduling.cli import views
from gpu_scheduling.cli.api import GPU_CLAIMS, GPU_NODE_STATUSES, PODS, Api, Resource
from gpu_scheduling.cli.context import Ctx
from gpu_scheduling.cli.output import NONE, STATE_STYLES, Painter
from gpu_scheduling.kube.informer import Informer, key_of

if TYPE_CHECKING:
    from gpu_scheduling.kube.client import Client

Summary = tuple[str, str]  # (state, detail)
NEW, DELETED = "new", "deleted"


def claim_summary(claim: Mapping[str, Any]) -> Summary:
    status = claim.get("status") or {}
    phase = str(status.get("phase") or NONE)
    detail = status.get("allocated") if phase == "Bound" else " ".join(str(status.get("message") or "").split())
    return phase, str(detail or "")


def pod_summary(pod: Mapping[str, Any]) -> Summary:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    phase = str((pod.get("status") or {}).get("phase") or "Pending")
    if meta.get("deletionTimestamp"):
        phase = "Terminating"
    node = spec.get("nodeName")
    if not node:
        why = views.why_pending(pod)
        if why != NONE and phase == "Pending":
            return "Unschedulable", why
        return phase, views.gpu_source(pod)
    hold = objects.hold_from_pod(pod)
    if hold is not None:
        return phase, f"{hold.node}:{','.join(str(g) for g in hold.gpu_ids)}"
    return phase, str(node)


def inventory_summary(inventory: Mapping[str, Any]) -> Summary:
    status = inventory.get("status") or {}
    state = f"free {status.get('free', '?')}/{status.get('total', '?')}"
    unhealthy = int(status.get("unhealthy") or 0)
    return state, (f"{unhealthy} unhealthy" if unhealthy else "")


@dataclasses.dataclass
class Source:
    label: str  # gpuclaim, pod, gpunodestatus
    res: Resource
    summarize: Callable[[Mapping[str, Any]], Summary]
    params: dict[str, str]


class Printer:
    """Turns informer events into lines: remembers each object's last summary and prints only changes."""

    def __init__(
        self,
        emit: Callable[[str], None],
        *,
        paint: Painter | None = None,
        fmt: str = "",
        snapshot: bool = True,
        clock: Callable[[], datetime.datetime] | None = None,
    ) -> None:
        self.emit, self.fmt, self.snapshot = emit, fmt, snapshot
        self.paint = paint or Painter(False)
        self.clock = clock or (lambda: datetime.datetime.now().astimezone())
        self.last: dict[tuple[str, str], Summary] = {}

    def handler(
        self, source: Source, informer: Informer
    ) -> Callable[[str, dict[str, Any], dict[str, Any] | None], None]:
        """The informer's handler for `source`: events delivered before its first list is complete are the
        snapshot."""

        def on_event(kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
            self.event(source, kind, obj, initial=not informer.synced.is_set())

        return on_event

    def event(self, source: Source, kind: str, obj: Mapping[str, Any], *, initial: bool = False) -> None:
        key = (source.label, key_of(dict(obj)))
        before = self.last.get(key)
        if kind == "DELETED":
            self.last.pop(key, None)
            if before is not None:
                self._line(source, obj, "deleted", before[0], DELETED, "")
            return
        now = source.summarize(obj)
        self.last[key] = now
        if now == before:
            return
        if initial:
            if self.snapshot:
                self._line(source, obj, "snapshot", None, now[0], now[1])
            return
        self._line(source, obj, "added" if before is None else "modified", before[0] if before else NEW, now[0], now[1])

    def _line(self, source: Source, obj: Mapping[str, Any], event: str, old: str | None, new: str, detail: str) -> None:
        meta = obj.get("metadata") or {}
        stamp = self.clock()
        if self.fmt == "json":
            self.emit(
                json.dumps(
                    {
                        "time": stamp.isoformat(timespec="seconds"),
                        "event": event,
                        "kind": source.res.kind,
                        "namespace": meta.get("namespace"),
                        "name": meta.get("name"),
                        "from": old,
                        "to": new,
                        "detail": detail,
                    },
                    sort_keys=True,
                )
            )
            return
        name = f"{source.label}/{key_of(dict(obj))}"
        change = (
            self.paint(new, STATE_STYLES.get(new))
            if old is None
            else f"{old} -> {self.paint(new, STATE_STYLES.get(new))}"
        )
        self.emit(f"{stamp:%H:%M:%S}  {name}  {change}  {detail}".rstrip())


def sources(scheduler_name: str) -> list[Source]:
    return [
        Source("gpunodestatus", GPU_NODE_STATUSES, inventory_summary, {}),
        Source("gpuclaim", GPU_CLAIMS, claim_summary, {}),
        Source("pod", PODS, pod_summary, {"fieldSelector": f"spec.schedulerName={scheduler_name}"}),
    ]


async def follow(client: Client, printer: Printer, srcs: list[Source], scope: str | None) -> None:
    """Run an informer per source until cancelled."""
    informers: list[Informer] = []
    for src in srcs:
        path = src.res.collection(scope if src.res.namespaced else None)
        inf = Informer(client, path, lambda *_: None, params=dict(src.params), name=f"{src.label} watch")
        inf.handler = printer.handler(src, inf)
        informers.append(inf)
    async with asyncio.TaskGroup() as tasks:
        for inf in informers:
            tasks.create_task(inf.run())


async def run(api: Api, ctx: Ctx) -> int:
    scope = ctx.scope
    srcs = sources(ctx.scheduler_name)
    # Fail at once on what would only be retried forever by the informers: a refusal, an unknown resource.
    for src in srcs:
        await api.probe(src.res, scope if src.res.namespaced else None, **src.params)
    printer = Printer(ctx.print, paint=ctx.paint, fmt=ctx.output, snapshot=not ctx.args.no_snapshot)
    try:
        async with asyncio.timeout(ctx.args.timeout):
            await follow(api.client, printer, srcs, scope)
    except TimeoutError:
        pass
    return 0
