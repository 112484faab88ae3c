"""The commands that read or write a few objects and print: status, nodes, claims, submit, strategy, version and
generate-template (health and watch have modules of their own)."""

from __future__ import annotations

import asyncio
import importlib.metadata
import pathlib
import platform
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from gpu_scheduling import constants
from gpu_scheduling.claims import strategy_names as strategies
from gpu_scheduling.cli import documents, output, template, views
from gpu_scheduling.cli.api import (
    GPU_CLAIMS,
    GPU_NODE_STATUSES,
    LEASES,
    NODES,
    PODS,
    POLICIES,
    Api,
    CliError,
    Resource,
    api_error,
)
from gpu_scheduling.cli.context import Ctx
from gpu_scheduling.cli.output import NONE, STATE_STYLES, as_list, clean, dump, key_values, resource_name, table
from gpu_scheduling.kube.errors import ApiError, Conflict

JSON = dict[str, Any]
T = TypeVar("T")


def client_version() -> str:
    try:
        return importlib.metadata.version("gpu-scheduling")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _styled(ctx: Ctx, word: str) -> str:
    return ctx.paint(word, STATE_STYLES.get(word))


def _print_objects(ctx: Ctx, res: Resource, items: Sequence[JSON], *, single: bool = False) -> None:
    """-o json|yaml (a List, or the object alone when `single`) or -o name."""
    objs = [clean(item, res.api_version, res.kind) for item in items]
    if ctx.output == "name":
        for obj in objs:
            ctx.print(resource_name(res.kind, res.api_version, obj["metadata"]["name"]))
        return
    ctx.write(dump(objs[0] if single and len(objs) == 1 else as_list(objs), ctx.output))


async def _scheduler_pods(api: Api, ctx: Ctx, namespace: str | None = None) -> list[JSON]:
    """The pods of the scheduler (bound or not) of `namespace`, or of every namespace."""
    return await api.list(PODS, namespace, fieldSelector=f"spec.schedulerName={ctx.scheduler_name}")


async def _gpu_leases(api: Api) -> list[JSON]:
    return await api.list(LEASES, constants.LEASE_NAMESPACE, labelSelector=constants.GPU_LEASE_SELECTOR)


# ---- nodes -----------------------------------------------------------------------------------------------------


async def _node_views(api: Api, ctx: Ctx) -> list[views.NodeView]:
    nodes, inventories, leases, pods = await asyncio.gather(
        api.list(NODES), api.list(GPU_NODE_STATUSES), _gpu_leases(api), _scheduler_pods(api, ctx)
    )
    return views.node_views(inventories, nodes, leases, pods)


def _select(
    ctx: Ctx, res: Resource, found: list[T], names: Sequence[str], name_of: Callable[[T], str]
) -> tuple[list[T], bool]:
    """The items named on the command line (all without names), and whether a name was not found: each such name
    is reported on stderr, and the others are printed, as kubectl does."""
    if not names:
        return found, False
    by_name = {name_of(item): item for item in found}
    missing = [n for n in dict.fromkeys(names) if n not in by_name]
    for name in missing:
        print(f'error: from server (NotFound): {res.full} "{name}" not found', file=ctx.err, flush=True)
    return [by_name[n] for n in dict.fromkeys(names) if n in by_name], bool(missing)


async def nodes(api: Api, ctx: Ctx) -> int:
    found, missing = _select(ctx, GPU_NODE_STATUSES, await _node_views(api, ctx), ctx.args.names, lambda v: v.name)
    if ctx.output in ("json", "yaml", "name"):
        if found or ctx.output != "name":
            _print_objects(ctx, GPU_NODE_STATUSES, [dict(v.inventory) for v in found], single=bool(ctx.args.names))
    elif found:
        headers = views.NODE_WIDE_HEADERS if ctx.wide else views.NODE_HEADERS
        rows = [views.node_row(v, ctx.now, ctx.wide) for v in found]
        ctx.lines(table(headers, rows, headers_shown=not ctx.args.no_headers))
    if not found and not ctx.args.names and ctx.output not in ("json", "yaml"):  # those print an empty List
        ctx.nothing_found(namespaced=False)
    return 1 if missing else 0


# ---- claims ----------------------------------------------------------------------------------------------------


async def claims(api: Api, ctx: Ctx) -> int:
    if ctx.all_namespaces and ctx.args.names:
        raise CliError("a claim name cannot be given with --all-namespaces (names are per namespace)", code=2)
    found, pods = await asyncio.gather(
        api.list(GPU_CLAIMS, ctx.scope),
        _scheduler_pods(api, ctx, ctx.scope) if ctx.wide else asyncio.sleep(0, result=[]),
    )
    found.sort(key=lambda c: (c["metadata"].get("namespace", ""), c["metadata"]["name"]))
    found, missing = _select(ctx, GPU_CLAIMS, found, ctx.args.names, lambda c: str(c["metadata"]["name"]))
    if ctx.output in ("json", "yaml", "name"):
        if found or ctx.output != "name":
            _print_objects(ctx, GPU_CLAIMS, found, single=bool(ctx.args.names))
    elif found:
        by_claim = views.pods_by_claim(pods)
        rows = []
        for claim in found:
            row = views.claim_row(claim, ctx.now, all_namespaces=ctx.all_namespaces, wide=ctx.wide, pods=by_claim)
            phase_at = 2 if ctx.all_namespaces else 1
            row[phase_at] = _styled(ctx, row[phase_at])
            rows.append(row)
        headers = views.claim_headers(ctx.all_namespaces, ctx.wide)
        ctx.lines(table(headers, rows, headers_shown=not ctx.args.no_headers))
    if not found and not ctx.args.names and ctx.output not in ("json", "yaml"):
        ctx.nothing_found(namespaced=True)
    return 1 if missing else 0


# ---- status ----------------------------------------------------------------------------------------------------


async def status(api: Api, ctx: Ctx) -> int:
    scope = ctx.scope
    (nodes_, inventories, leases, pods, claims_), (policy, leader_lease) = await asyncio.gather(
        asyncio.gather(
            api.list(NODES),
            api.list(GPU_NODE_STATUSES),
            _gpu_leases(api),
            _scheduler_pods(api, ctx),
            api.list(GPU_CLAIMS, scope),
        ),
        asyncio.gather(
            api.get_optional(POLICIES, constants.POLICY_NAME),
            api.get_optional(LEASES, ctx.scheduler_name, constants.LEASE_NAMESPACE),
        ),
    )
    node_views = views.node_views(inventories, nodes_, leases, pods)
    policy_view = views.policy_view(policy)
    leader = views.leader_view(leader_lease, ctx.now)
    phases = views.phase_counts(claims_)
    pending = views.pending_pods(pods, scope)
    totals = {
        "nodes": len(node_views),
        "total": sum(v.total for v in node_views),
        "free": sum(v.free for v in node_views),
        "allocated": sum(v.allocated for v in node_views),
        "unhealthy": sum(v.unhealthy for v in node_views),
    }
    if ctx.output in ("json", "yaml"):
        ctx.write(dump(_status_doc(ctx, node_views, policy_view, leader, totals, phases, pending), ctx.output))
        return 0

    paint = ctx.paint
    lease_ref = f"{constants.LEASE_NAMESPACE}/{ctx.scheduler_name}"
    if leader is None:
        leader_text = paint(f"no leader Lease {lease_ref}", "red")
    else:
        leader_text = leader.text() if leader.current else paint(leader.text() + ", expired", "red")
    ctx.print(paint("SCHEDULER", "bold"))
    ctx.lines(
        key_values(
            [
                ("leader", leader_text),
                ("policy", _policy_line(policy_view)),
                ("strategy", _applied(policy_view.default_strategy, policy_view.applied_strategy, policy_view)),
                ("queue order", _applied(policy_view.queue_order, policy_view.applied_queue_order, policy_view)),
            ]
        )
    )
    ctx.print()
    ctx.print(
        paint("GPUS", "bold")
        + f"   {totals['nodes']} nodes   {totals['total']} total   {paint(str(totals['free']) + ' free', 'green')}"
        + f"   {totals['allocated']} allocated   "
        + paint(f"{totals['unhealthy']} unhealthy", "red" if totals["unhealthy"] else None)
    )
    if node_views:
        headers = views.NODE_WIDE_HEADERS if ctx.wide else views.NODE_HEADERS
        ctx.lines(["  " + line for line in table(headers, [views.node_row(v, ctx.now, ctx.wide) for v in node_views])])
    else:
        ctx.print("  no node has a GPU inventory (GpuNodeStatus)")
    ctx.print()
    where = f"namespace {scope}" if scope else "all namespaces"
    counts = "   ".join(_styled(ctx, f"{phase}") + f" {n}" for phase, n in phases.items())
    ctx.print(paint("CLAIMS", "bold") + f" ({where})   {counts}")
    ctx.print()
    ctx.print(paint("PENDING PODS", "bold") + f" ({where}, scheduler {ctx.scheduler_name})   {len(pending)}")
    if pending:
        headers = (["NAMESPACE"] if scope is None else []) + ["NAME", "GPUS", "AGE", "WHY"]
        rows = []
        for pod in pending:
            row = [pod["metadata"]["name"], views.gpu_source(pod), output.created_age(pod, ctx.now)]
            row.append(views.why_pending(pod))
            rows.append(([pod["metadata"]["namespace"]] if scope is None else []) + row)
        ctx.lines(["  " + line for line in table(headers, rows)])
    return 0


def _policy_line(p: views.PolicyView) -> str:
    if not p.exists:
        return f"none ({constants.GPU_SCHEDULING_POLICY_KIND} {constants.POLICY_NAME} not found): the scheduler's flags"
    return f"{constants.POLICY_NAME}: {p.observed_text()}"


def _applied(spec_value: str | None, applied: str | None, p: views.PolicyView) -> str:
    wanted = spec_value or "(scheduler default)"
    if applied and (applied != spec_value or not p.up_to_date):
        return f"{wanted} (scheduler applies {applied})"
    if applied:
        return f"{wanted} (applied)"
    return wanted


def _status_doc(
    ctx: Ctx,
    node_views: list[views.NodeView],
    p: views.PolicyView,
    leader: views.LeaderView | None,
    totals: dict[str, int],
    phases: dict[str, int],
    pending: list[Any],
) -> JSON:
    return {
        "leader": None
        if leader is None
        else {
            "holderIdentity": leader.holder,
            "renewedSecondsAgo": None if leader.renewed_ago is None else round(leader.renewed_ago, 1),
            "leaseDurationSeconds": leader.duration,
            "current": leader.current,
        },
        "policy": {
            "exists": p.exists,
            "generation": p.generation,
            "observedGeneration": p.observed,
            "upToDate": p.up_to_date,
            "defaultStrategy": p.default_strategy,
            "queueOrder": p.queue_order,
            "appliedStrategy": p.applied_strategy,
            "appliedQueueOrder": p.applied_queue_order,
            "message": p.message,
        },
        "gpus": totals,
        "nodes": [
            {
                "name": v.name,
                "gpus": v.total,
                "free": v.free,
                "allocated": v.allocated,
                "unhealthy": v.unhealthy,
                "islands": {k: {"free": f, "total": t} for k, (f, t) in v.islands.items()},
                "utilizationPercent": v.utilization,
                "nodeExists": v.exists,
            }
            for v in node_views
        ],
        "claims": {"namespace": ctx.scope, "phases": phases},
        "pendingPods": [
            {
                "namespace": pod["metadata"]["namespace"],
                "name": pod["metadata"]["name"],
                "gpus": views.gpu_source(pod),
                "message": views.why_pending(pod),
            }
            for pod in pending
        ],
    }


# ---- submit ----------------------------------------------------------------------------------------------------


def _read_input(path: str) -> tuple[str, str]:
    if path == "-":
        return sys.stdin.read(), "<stdin>"
    try:
        return pathlib.Path(path).read_text(), path
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read {path}: {exc}") from None


async def submit(api: Api, ctx: Ctx) -> int:
    text, source = _read_input(ctx.args.file)
    try:
        docs = documents.check(documents.load(text, source), ctx.namespace, ctx.scheduler_name)
    except documents.DocumentError as exc:
        raise CliError(exc.problems[0], problems=exc.problems) from None
    problems = []
    for (ns, claim), pod_doc in documents.claims_to_look_up(docs).items():
        if await api.get_optional(GPU_CLAIMS, claim, ns) is None:
            problems.append(documents.missing_claim(pod_doc))
    if problems:
        raise CliError(problems[0], problems=problems)

    resource = {constants.GPU_CLAIM_KIND: GPU_CLAIMS, "Pod": PODS}
    dry_run = ctx.args.dry_run == "server"

    async def apply_all(dry: bool) -> list[tuple[documents.Document, JSON]]:
        done = []
        for doc in docs:
            try:
                done.append((doc, await api.apply(resource[doc.kind], doc.body, doc.namespace, dry_run=dry)))
            except (ApiError, CliError) as exc:
                message = api_error(exc).message if isinstance(exc, ApiError) else exc.message
                raise CliError(f"document {doc.index} ({doc.kind} {doc.namespace}/{doc.name}): {message}") from None
        return done

    # Every document through the server's checks (schema, admission, the webhook) before any is applied, so that a
    # refusal leaves nothing half-applied.
    applied = await apply_all(dry=True)
    if not dry_run:
        applied = await apply_all(dry=False)
    suffix = " (server dry run)" if dry_run else ""
    if ctx.output in ("json", "yaml"):
        objs = [clean(obj, resource[d.kind].api_version, d.kind) for d, obj in applied]
        ctx.write(dump(objs[0] if len(objs) == 1 else as_list(objs), ctx.output))
        return 0
    for doc, _ in applied:
        res = resource[doc.kind]
        name = resource_name(res.kind, res.api_version, doc.name)
        ctx.print(name if ctx.output == "name" else f"{name} serverside-applied{suffix}")
    return 0


# ---- strategy --------------------------------------------------------------------------------------------------


async def strategy(api: Api, ctx: Ctx) -> int:
    if ctx.args.name is None:
        return await _show_policy(api, ctx)
    try:
        choice = strategies.parse(ctx.args.name)
    except ValueError as exc:
        raise CliError(str(exc), code=2) from None
    applied = await _apply_choice(api, choice)
    generation = int(applied["metadata"].get("generation") or 0)
    policy_name = resource_name(POLICIES.kind, POLICIES.api_version, constants.POLICY_NAME)
    if ctx.output == "" or ctx.output == "wide":
        ctx.print(f"{policy_name} serverside-applied")
    if ctx.args.wait:
        applied = await _wait_observed(api, generation, ctx.args.timeout)
        status = applied.get("status") or {}
        in_effect = status.get("strategy" if choice.field == strategies.STRATEGY_FIELD else "queueOrder")
        if in_effect and in_effect != choice.value:
            raise CliError(
                f"the scheduler observed generation {generation} but applies {choice.what} {in_effect}, not "
                f"{choice.value}" + (f": {status['message']}" if status.get("message") else "")
            )
        if ctx.output in ("", "wide"):
            ctx.print(f"{choice.what} {choice.value} applied (generation {generation})")
    elif ctx.output in ("", "wide"):
        ctx.print(f"{choice.what} {choice.value} set (generation {generation}); not waiting for the scheduler")
    if ctx.output in ("json", "yaml", "name"):
        _print_objects(ctx, POLICIES, [applied], single=True)
    return 0


async def _apply_choice(api: Api, choice: strategies.Choice) -> JSON:
    """Apply the policy with `choice` and the other field as it is: server-side apply removes a field this manager
    applied before and leaves out now, so both fields are always given (resourceVersion guards the read)."""
    for _ in range(5):
        current = await api.get_optional(POLICIES, constants.POLICY_NAME)
        spec = {}
        meta: JSON = {"name": constants.POLICY_NAME}
        if current is not None:
            had = current.get("spec") or {}
            spec = {k: had[k] for k in (strategies.STRATEGY_FIELD, strategies.QUEUE_FIELD) if had.get(k)}
            meta["resourceVersion"] = current["metadata"]["resourceVersion"]
        spec[choice.field] = choice.value
        body = {"apiVersion": POLICIES.api_version, "kind": POLICIES.kind, "metadata": meta, "spec": spec}
        try:
            return await api.apply(POLICIES, body)
        except Conflict:
            continue  # changed (or created) since we read it: read again
        except ApiError as exc:
            raise api_error(exc) from None
    raise CliError(f"{POLICIES.kind} {constants.POLICY_NAME} kept changing while it was applied; try again")


async def _wait_observed(api: Api, generation: int, wait_for: float) -> JSON:
    deadline = time.monotonic() + wait_for
    observed = None
    while True:
        current = await api.get_optional(POLICIES, constants.POLICY_NAME)
        if current is None:
            raise CliError(f"{POLICIES.kind} {constants.POLICY_NAME} was deleted while waiting for the scheduler")
        observed = (current.get("status") or {}).get("observedGeneration")
        if observed is not None and int(observed) >= generation:
            return current
        if time.monotonic() >= deadline:
            raise CliError(
                f"timed out after {wait_for:g}s waiting for the scheduler to apply generation {generation} of "
                f"{POLICIES.kind} {constants.POLICY_NAME} (status.observedGeneration: "
                f"{observed if observed is not None else 'unset'}); is gpu-scheduler running? "
                "`kubectl gpu status` shows its leader"
            )
        await asyncio.sleep(0.25)


async def _show_policy(api: Api, ctx: Ctx) -> int:
    policy = await api.get_optional(POLICIES, constants.POLICY_NAME)
    if ctx.output in ("json", "yaml", "name"):
        if policy is None:
            raise CliError(f'from server (NotFound): {POLICIES.full} "{constants.POLICY_NAME}" not found')
        _print_objects(ctx, POLICIES, [policy], single=True)
        return 0
    p = views.policy_view(policy)
    if not p.exists:
        ctx.lines(
            key_values(
                [
                    ("policy", f"none ({POLICIES.kind} {constants.POLICY_NAME} not found)"),
                    ("strategy", "(scheduler default)"),
                    ("queue order", "(scheduler default)"),
                    ("applied", "the scheduler's --strategy and its default queue order"),
                ],
                indent=0,
            )
        )
        return 0
    applied = f"strategy {p.applied_strategy or NONE}, queue order {p.applied_queue_order or NONE}"
    ctx.lines(
        key_values(
            [
                ("policy", f"{constants.POLICY_NAME} (generation {p.generation})"),
                ("strategy", p.default_strategy or "(scheduler default)"),
                ("queue order", p.queue_order or "(scheduler default)"),
                ("observed", _observed(ctx, p)),
                ("applied", applied if p.observed is not None else "<none>: no scheduler has reported"),
                ("message", p.message or NONE),
            ],
            indent=0,
        )
    )
    return 0


def _observed(ctx: Ctx, p: views.PolicyView) -> str:
    if p.observed is None:
        return ctx.paint(f"never (generation {p.generation} not observed by a scheduler yet)", "yellow")
    if p.up_to_date:
        return ctx.paint(f"generation {p.observed} = generation {p.generation} (up to date)", "green")
    return ctx.paint(f"generation {p.observed} < generation {p.generation} (not applied yet)", "yellow")


# ---- version and generate-template -----------------------------------------------------------------------------


async def version(api: Api | None, ctx: Ctx) -> int:
    """The client's version, then the server's (as kubectl: the client's is printed even when the server cannot be
    reached)."""
    client = {"version": client_version(), "python": platform.python_version()}
    if ctx.output in ("json", "yaml"):
        doc: JSON = {"clientVersion": client}
        if api is not None:
            doc["serverVersion"] = await api.server_version()
        ctx.write(dump(doc, ctx.output))
        return 0
    ctx.print(f"Client Version: kubectl-gpu {client['version']} (Python {client['python']})")
    if api is not None:
        server = await api.server_version()
        ctx.print(f"Server Version: {server.get('gitVersion', NONE)}")
    return 0


def generate_template(ctx: Ctx) -> int:
    args = ctx.args
    try:
        chosen = strategies.node_strategy(args.strategy) if args.strategy else None
        text = template.render(args.name, args.gpus, chosen, args.policy, args.image, ctx.scheduler_name)
    except ValueError as exc:
        raise CliError(str(exc), code=2) from None
    if args.file == "-":
        ctx.write(text)
        return 0
    path = pathlib.Path(args.file)
    if path.exists() and not args.force:
        raise CliError(f"{path} exists: pass --force to overwrite it")
    try:
        path.write_text(text)
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc}") from None
    ctx.print(f"wrote {path}: {constants.GPU_CLAIM_KIND} {args.name} and Pod {args.name} (kubectl gpu submit {path})")
    return 0
