"""`kubectl gpu gangs`: one row per gang of the scheduler's pods (claims.gang_rows, the board's source too): its
minimum, bound and waiting members, topology, status and why it waits. The rows are built from the pods and the
GpuClaims of the namespace (every namespace with -A), and its PodGroups when a pod names one (Kubernetes' own gang
API); this module only fetches and prints."""

from __future__ import annotations

import asyncio
from typing import Any

from gpu_scheduling.claims import gang_rows
from gpu_scheduling.claims.gang_rows import GangRow
from gpu_scheduling.cli.api import GPU_CLAIMS, POD_GROUPS, PODS, Api, CliError
from gpu_scheduling.cli.context import Ctx
from gpu_scheduling.cli.output import NONE, dump, table

#: Characters of WHY in the default table (-o wide and -o json|yaml give it whole).
WHY_SHOWN = 80

#: The colour of each status.
STATUS_STYLES = {
    "Running": "green",
    "Waiting": "yellow",
    "Incomplete": "yellow",
    "BelowMinimum": "red",
    "Invalid": "red",
}


def short_why(r: GangRow) -> str:
    """WHY for the table: without the gang's own description the scheduler's messages start with (`gang train (min
    4) ...`: the row says it), on one line, cut to WHY_SHOWN characters with `…`; `-` when there is nothing to
    say."""
    why = r.why
    prefix = f"gang {r.gang} ("
    if why.startswith(prefix):
        close = why.find(") ", len(prefix))
        if close != -1:
            why = why[close + 2 :]
    why = " ".join(why.split())
    if not why:
        return "-"
    return why if len(why) <= WHY_SHOWN else why[: WHY_SHOWN - 1] + "…"


def headers(all_namespaces: bool, wide: bool) -> list[str]:
    out = ["GANG", "MIN", "BOUND", "WAITING", "TOPOLOGY", "STATUS", "WHY"]
    if all_namespaces:
        out.insert(0, "NAMESPACE")
    if wide:
        out.insert(out.index("WHY"), "MEMBERS")
    return out


def table_row(r: GangRow, *, all_namespaces: bool, wide: bool, status: str | None = None) -> list[str]:
    """One gang's cells; `status` replaces the status word (a coloured one)."""
    cells = [
        r.gang,
        "?" if r.min_members is None else str(r.min_members),
        str(r.bound),
        str(r.waiting),
        r.topology_text(),
        status or r.status,
    ]
    if all_namespaces:
        cells.insert(0, r.namespace)
    if wide:
        cells += [",".join(r.members) or NONE, " ".join(r.why.split()) or "-"]
    else:
        cells.append(short_why(r))
    return cells


def document(found: list[GangRow], namespace: str | None) -> dict[str, Any]:
    """-o json|yaml: the rows whole (namespace None: every namespace)."""
    return {"namespace": namespace, "gangs": [r.document() for r in found]}


async def run(api: Api, ctx: Ctx) -> int:
    if ctx.all_namespaces and ctx.args.names:
        raise CliError("a gang name cannot be given with --all-namespaces (names are per namespace)", code=2)
    scope = ctx.scope
    pods, claims = await asyncio.gather(
        api.list(PODS, scope, fieldSelector=f"spec.schedulerName={ctx.scheduler_name}"),
        api.list(GPU_CLAIMS, scope),
    )
    pod_groups = None
    if any(m is not None and m.pod_group is not None for m in map(gang_rows.member, pods)):
        # Kubernetes' own gang API: read only when a pod names a PodGroup (None: the apiserver serves none).
        pod_groups = gang_rows.PodGroups.of(await api.list_optional(POD_GROUPS, scope))
    found = gang_rows.rows(pods, claims, pod_groups)
    missing: list[str] = []
    if ctx.args.names:
        by_name = {r.gang: r for r in found}
        wanted = list(dict.fromkeys(ctx.args.names))
        missing = [n for n in wanted if n not in by_name]
        for name in missing:
            print(f'error: no gang "{name}" in namespace "{scope}"', file=ctx.err, flush=True)
        found = [by_name[n] for n in wanted if n in by_name]
    if ctx.output in ("json", "yaml"):
        ctx.write(dump(document(found, scope), ctx.output))
    elif found:
        rows = [
            table_row(
                r,
                all_namespaces=ctx.all_namespaces,
                wide=ctx.wide,
                status=ctx.paint(r.status, STATUS_STYLES.get(r.status)),
            )
            for r in found
        ]
        ctx.lines(table(headers(ctx.all_namespaces, ctx.wide), rows, headers_shown=not ctx.args.no_headers))
    elif not ctx.args.names:
        ctx.nothing_found(namespaced=True)
    return 1 if missing else 0
