"""`kubectl-gpu`, run by kubectl as `kubectl gpu ...` (kubectl runs any `kubectl-<name>` on the PATH as a plugin):
the command-line view of the GPU scheduler. `kubectl gpu --help` lists the commands, `kubectl gpu CMD --help` their
flags. kubectl's conventions throughout: -n/-A, --kubeconfig, --context, -o wide|json|yaml|name, aligned tables,
kubectl's ages, `error: ...` on stderr with exit status 1 (2 for a usage error)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TextIO

from gpu_scheduling import constants, runtime
from gpu_scheduling.claims import strategy_names as strategies
from gpu_scheduling.cli import commands, gangs, health, output, template, watch
from gpu_scheduling.cli.api import Api, CliError
from gpu_scheduling.cli.context import Ctx
from gpu_scheduling.kube.client import Client

PROG = "kubectl gpu"

#: -o formats each command prints ("" is its table or text).
FORMATS: dict[str, tuple[str, ...]] = {
    "status": ("", "wide", "json", "yaml"),
    "nodes": ("", "wide", "json", "yaml", "name"),
    "claims": ("", "wide", "json", "yaml", "name"),
    "gangs": ("", "wide", "json", "yaml"),
    "submit": ("", "json", "yaml", "name"),
    "strategy": ("", "json", "yaml", "name"),
    "watch": ("", "json"),
    "health": ("", "json", "yaml"),
    "generate-template": ("",),
    "version": ("", "json", "yaml"),
}
ALIASES = {"workloads": "claims"}


def _global_flags(p: argparse.ArgumentParser, *, suppress: bool) -> None:
    """The flags every command takes, before or after its name: the top-level parser holds their defaults, each
    command's copy leaves what it was not given alone (SUPPRESS)."""

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    p.add_argument("-n", "--namespace", default=default(None), help="namespace (default: the context's, else default)")
    p.add_argument("-A", "--all-namespaces", action="store_true", default=default(False), help="every namespace")
    p.add_argument(
        "--kubeconfig", default=default(None), help="kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)"
    )
    p.add_argument("--context", default=default(None), help="kubeconfig context (default: its current-context)")
    p.add_argument(
        "-o",
        "--output",
        choices=output.FORMATS,
        default=default(None),
        help="wide (more columns), json or yaml (the API objects, as a List), name (kind.group/name)",
    )
    p.add_argument("--no-headers", action="store_true", default=default(False), help="tables without their header")
    p.add_argument(
        "--scheduler-name",
        default=default(os.environ.get(constants.SCHEDULER_NAME_ENV) or constants.DEFAULT_SCHEDULER_NAME),
        help="the scheduler's name: its pods' spec.schedulerName and its leader Lease "
        f"(default: ${constants.SCHEDULER_NAME_ENV}, else {constants.DEFAULT_SCHEDULER_NAME})",
    )


#: `--timeout`: up to a week, as `30`, `30s`, `2m` or `1h`.
_timeout = runtime.seconds(0.001, 7 * 24 * 3600)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog=PROG,
        description="The GPU scheduler from the command line: its nodes, claims, gangs, policy and health.",
        epilog=f"Run `{PROG} COMMAND --help` for a command's flags.",
    )
    _global_flags(top, suppress=False)
    common = argparse.ArgumentParser(add_help=False)
    _global_flags(common, suppress=True)
    sub = top.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, summary: str, **kw: Any) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=summary, description=summary, parents=[common], **kw)

    command("status", "one screen: GPU nodes and counts, claims by phase, pending pods, policy, leader")

    p = command("nodes", "nodes with a GPU inventory: GPUs, free, unhealthy, islands, utilization")
    p.add_argument("names", nargs="*", metavar="NAME", help="only these nodes")

    p = command("claims", "GpuClaims: phase, node, GPUs, strategy (alias: workloads)", aliases=["workloads"])
    p.add_argument("names", nargs="*", metavar="NAME", help="only these claims")

    p = command("gangs", "gangs of GPU pods: minimum, bound and waiting members, topology, status and why one waits")
    p.add_argument("names", nargs="*", metavar="NAME", help="only these gangs")

    p = command("submit", "server-side apply a file of GpuClaims and their pods (claims first)")
    p.add_argument("file", metavar="FILE", help="YAML file, - for stdin")
    p.add_argument(
        "--dry-run",
        choices=("none", "server"),
        default="none",
        help="server: let the API server check every document without storing any",
    )

    p = command("strategy", "show the scheduling policy, or set its default strategy or queue order")
    p.add_argument(
        "name",
        nargs="?",
        metavar="NAME",
        help=f"one of: {strategies.accepted()}",
    )
    p.add_argument(
        "--wait",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="wait until the scheduler applies the new generation (default: wait)",
    )
    p.add_argument("--timeout", type=_timeout, default=30.0, help="how long --wait waits (default 30s)")

    p = command("watch", "follow claims, scheduler pods and GPU inventories as they change (from watches)")
    p.add_argument("--no-snapshot", action="store_true", help="print only changes, not the objects as they are")
    p.add_argument("--timeout", type=_timeout, default=None, help="stop after this long (default: never)")

    p = command("health", "check the leader, the webhook, inventories, the chart's workloads and the GPU Leases")
    p.add_argument(
        "--settle",
        type=_timeout,
        default=10.0,
        help="how long a Lease finding may take to clear before it counts (releases lag their pods; default 10s)",
    )

    p = command("generate-template", "write a commented GpuClaim and a pod that names it, ready for submit")
    p.add_argument("file", metavar="FILE", help="file to write, - for stdout")
    p.add_argument(
        "--name", default=template.DEFAULT_NAME, help=f"claim and pod name (default {template.DEFAULT_NAME})"
    )
    p.add_argument("--gpus", type=int, default=1, help="GPUs to claim (default 1)")
    p.add_argument("--strategy", default=None, help="node strategy of the claim (default: the cluster's)")
    p.add_argument("--policy", choices=template.POLICIES, default="contiguous", help="GPU choice (default contiguous)")
    p.add_argument(
        "--image", default=template.DEFAULT_IMAGE, help=f"container image (default {template.DEFAULT_IMAGE})"
    )
    p.add_argument("--force", action="store_true", help="overwrite FILE if it exists")

    p = command("version", "print the client's version and the API server's")
    p.add_argument("--client", action="store_true", help="only the client's version (no cluster needed)")
    return top


Handler = Callable[[Api, Ctx], Awaitable[int]]
HANDLERS: dict[str, Handler] = {
    "status": commands.status,
    "nodes": commands.nodes,
    "claims": commands.claims,
    "gangs": gangs.run,
    "submit": commands.submit,
    "strategy": commands.strategy,
    "watch": watch.run,
    "health": health.run,
}


async def _with_api(ctx: Ctx, handler: Handler) -> int:
    cfg = ctx.config()
    async with Client(cfg, user_agent=f"kubectl-gpu/{commands.client_version()}") as client:
        return await handler(Api(cfg, client), ctx)


async def _version(ctx: Ctx) -> int:
    if ctx.args.client:
        return await commands.version(None, ctx)
    return await _with_api(ctx, commands.version)


def run(
    argv: Sequence[str] | None = None,
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    environ: dict[str, str] | None = None,
) -> int:
    out, err = stdout or sys.stdout, stderr or sys.stderr
    args = parser().parse_args(argv)
    args.command = ALIASES.get(args.command, args.command)
    env = dict(os.environ) if environ is None else environ
    ctx = Ctx(args, out, err, output.Painter(output.colour_wanted(out, env)))
    handler = logging.StreamHandler(err)
    handler.setFormatter(logging.Formatter("warning: %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler], force=True)
    try:
        if (args.output or "") not in FORMATS[args.command]:
            shown = ", ".join(f for f in FORMATS[args.command] if f)
            what = f"does not print -o {args.output} (it prints: {shown})" if shown else "takes no -o"
            raise CliError(f"{PROG} {args.command} {what}", code=2)
        if args.command == "generate-template":
            return commands.generate_template(ctx)
        if args.command == "version":
            return asyncio.run(_version(ctx))
        return asyncio.run(_with_api(ctx, HANDLERS[args.command]))
    except CliError as exc:
        for problem in exc.problems:
            print(f"error: {problem}", file=err, flush=True)
        return exc.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `kubectl gpu watch | head`: the reader left
        with_devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(with_devnull, out.fileno())
        return 141


def main() -> None:
    sys.exit(run())
