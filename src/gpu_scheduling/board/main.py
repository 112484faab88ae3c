"""`gpu-board` entry point: flags are read here and only here.

One informer per resource feeds `Board.apply` (no polling): nodes, GpuNodeStatuses, the pods of this scheduler
(all namespaces, field-selected by `spec.schedulerName`), GpuClaims (all namespaces), the GPU Leases (label-selected
in the project's namespace) and the GpuSchedulingPolicy `default` (field-selected by name). /readyz answers once
every informer has listed. The event hub publishes the board's changes every `--coalesce` seconds. SIGTERM ends
the event streams (the pages reconnect by themselves), stops the informers and closes the server.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import os
import ssl
from collections.abc import Sequence
from typing import Any

from gpu_scheduling import constants, health, logs, runtime
from gpu_scheduling.board.server import DEFAULT_POD_IMAGE, BoardMetrics, ServerConfig, make_app
from gpu_scheduling.board.state import Board
from gpu_scheduling.claims import strategy_names
from gpu_scheduling.kube import config as kubeconfig
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.client import Client
from gpu_scheduling.kube.informer import Handler, Informer

log = logging.getLogger("gpu_scheduling.board")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog=constants.BOARD_NAME,
        description="Serve the cluster's GPUs as a live board grouped by topology, with a create form.",
    )
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)")
    p.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    p.add_argument("--port", type=runtime.port, default=None, help="port (default 8443 with TLS, 8080 without)")
    p.add_argument("--tls-cert", help="PEM serving certificate (chain); with --tls-key the board serves HTTPS")
    p.add_argument("--tls-key", help="PEM private key of --tls-cert")
    p.add_argument(
        "--topology-label",
        action="append",
        dest="topology_labels",
        metavar="LABEL",
        help="node label of a topology level above the node, outermost first; repeatable (default: "
        f"{', '.join(constants.DEFAULT_TOPOLOGY_LABELS)}); the node and its NVLink islands always follow",
    )
    p.add_argument(
        "--scheduler-name",
        default=os.environ.get(constants.SCHEDULER_NAME_ENV, constants.DEFAULT_SCHEDULER_NAME),
        help="spec.schedulerName of the pods to show and to create (default: $SCHEDULER_NAME or gpu-scheduler)",
    )
    p.add_argument(
        "--strategy",
        type=strategy_names.flag,
        default=os.environ.get(constants.STRATEGY_ENV, constants.DEFAULT_STRATEGY),
        help=f"the scheduler's --strategy, shown while the GpuSchedulingPolicy {constants.POLICY_NAME!r} sets none: "
        f"{', '.join(constants.STRATEGIES)} (default: ${constants.STRATEGY_ENV} or {constants.DEFAULT_STRATEGY})",
    )
    p.add_argument(
        "--allow-create",
        action="store_true",
        help="serve the create form's preview, create and delete (default: off, they answer 403)",
    )
    p.add_argument(
        "--namespace",
        action="append",
        dest="namespaces",
        metavar="NAMESPACE",
        help="a namespace the form may create and delete in; repeatable (default: default)",
    )
    p.add_argument(
        "--pod-image",
        default=DEFAULT_POD_IMAGE,
        help=f"image of the pods the form creates (default {DEFAULT_POD_IMAGE})",
    )
    p.add_argument(
        "--coalesce",
        type=runtime.seconds(0.01, 60),
        default=ServerConfig.coalesce,
        metavar="SECONDS",
        help=f"publish the board's changes at most this often (default {ServerConfig.coalesce:g})",
    )
    p.add_argument(
        "--heartbeat",
        type=runtime.seconds(0.1, 3600),
        default=ServerConfig.heartbeat,
        metavar="SECONDS",
        help=f"heartbeat comment on an idle event stream this often (default {ServerConfig.heartbeat:g})",
    )
    p.add_argument(
        "--max-clients",
        type=runtime.integer(1, 100_000),
        default=ServerConfig.max_clients,
        help=f"event streams at once; beyond, 503 (default {ServerConfig.max_clients})",
    )
    logs.add_arguments(p)
    args = p.parse_args(argv)
    try:  # the environment's value is not checked by argparse
        args.strategy = strategy_names.flag(args.strategy)
    except argparse.ArgumentTypeError as exc:
        p.error(f"{constants.STRATEGY_ENV}: {exc}")
    if bool(args.tls_cert) != bool(args.tls_key):
        p.error("--tls-cert and --tls-key go together")
    if args.port is None:
        args.port = 8443 if args.tls_cert else 8080
    args.topology_labels = tuple(args.topology_labels or constants.DEFAULT_TOPOLOGY_LABELS)
    args.namespaces = tuple(dict.fromkeys(args.namespaces or ["default"]))
    return args


def server_config(args: argparse.Namespace) -> ServerConfig:
    return ServerConfig(
        allow_create=args.allow_create,
        namespaces=args.namespaces,
        scheduler_name=args.scheduler_name,
        pod_image=args.pod_image,
        coalesce=args.coalesce,
        heartbeat=args.heartbeat,
        max_clients=args.max_clients,
    )


def informers(client: Client, board: Board, metrics: BoardMetrics, scheduler_name: str) -> list[Informer]:
    """One informer per resource the board shows, each handing its events to `board.apply`."""

    def handler(resource: str) -> Handler:
        counter = metrics.events.labels(resource)

        def apply(event: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
            counter.inc()
            try:
                board.apply(resource, event, obj, old)
            except Exception:  # the Board does not raise on any object; a bug must not stop the informer
                metrics.apply_errors.inc()
                log.exception("applying %s %s to the board failed", event, resource)

        return apply

    watched = [
        ("nodes", paths.NODES, {}),
        ("gpunodestatuses", paths.NODE_STATUSES, {}),
        ("pods", paths.ALL_PODS, {"fieldSelector": f"spec.schedulerName={scheduler_name}"}),
        ("gpuclaims", paths.ALL_GPU_CLAIMS, {}),
        ("leases", paths.GPU_LEASES, {"labelSelector": constants.GPU_LEASE_SELECTOR}),
        ("policies", paths.SCHEDULING_POLICIES, {"fieldSelector": f"metadata.name={constants.POLICY_NAME}"}),
    ]
    made = []
    for resource, path, params in watched:
        informer = Informer(client, path, handler(resource), params=params, name=resource)
        metrics.synced.labels(resource).set_function(informer.synced.is_set)
        made.append(informer)
    return made


async def run(args: argparse.Namespace, stop: asyncio.Event) -> None:
    cfg = kubeconfig.load(args.kubeconfig)
    tls = runtime.server_tls(args.tls_cert, args.tls_key, alpn=["http/1.1"]) if args.tls_cert else None
    board = Board(
        topology_labels=args.topology_labels, scheduler_name=args.scheduler_name, default_strategy=args.strategy
    )
    metrics = BoardMetrics()
    async with Client(cfg, user_agent=constants.BOARD_NAME) as client:
        watches = informers(client, board, metrics, args.scheduler_name)

        def ready() -> bool:
            return all(i.synced.is_set() for i in watches)

        app, server = make_app(board, client, server_config(args), ready=ready, metrics=metrics)
        runner = await health.serve(app, args.host, args.port, tls)
        log.info(
            "gpu-board serving %s on %s:%d for scheduler %s%s",
            "HTTPS" if tls else "HTTP",
            args.host,
            args.port,
            args.scheduler_name,
            f"; creation allowed in {', '.join(args.namespaces)}" if args.allow_create else "; creation off",
        )
        tasks = [asyncio.create_task(i.run(), name=f"informer-{i.name}") for i in watches]
        tasks.append(asyncio.create_task(server.hub.run(), name="event-hub"))
        done: set[asyncio.Task[Any]] = set()
        try:
            done = await runtime.until_stopped(stop, tasks)
        finally:
            log.info("gpu-board stopping")
            await server.hub.close()  # the streams end now; the pages reconnect
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)
            await runner.cleanup()  # requests in flight (a create) finish first
        runtime.raise_failure(done)
        log.info("gpu-board stopped")


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    logs.configure(args.log_level, args.log_format)
    runtime.run(constants.BOARD_NAME, functools.partial(run, args), start_errors=(OSError, ssl.SSLError))


if __name__ == "__main__":
    main()
