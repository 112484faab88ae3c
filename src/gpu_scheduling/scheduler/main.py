"""`gpu-scheduler` entry point: flags and environment are read here and only here."""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import os
import socket
import uuid
from collections.abc import Callable

from aiohttp import web

from gpu_scheduling import constants, health, logs, runtime
from gpu_scheduling.claims import strategy_names
from gpu_scheduling.kube import config as kubeconfig
from gpu_scheduling.kube.client import Client
from gpu_scheduling.kube.leaderelection import ElectionConfig, LeadershipLost, run_on_own_thread
from gpu_scheduling.scheduler.controller import Scheduler, SchedulerConfig

log = logging.getLogger("gpu_scheduling.scheduler")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="gpu-scheduler",
        description="Bind pods of this scheduler to the node their index maps to in the gpu-scheduling-map annotation.",
    )
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)")
    p.add_argument(
        "--scheduler-name",
        default=os.environ.get(constants.SCHEDULER_NAME_ENV, constants.DEFAULT_SCHEDULER_NAME),
        help="spec.schedulerName to serve (default: $SCHEDULER_NAME or gpu-scheduler)",
    )
    p.add_argument(
        "--health-port", type=runtime.port, default=8080, help="port of /healthz, /readyz, /metrics (default 8080)"
    )
    p.add_argument("--health-host", default="0.0.0.0", help="address of the health server (default 0.0.0.0)")
    p.add_argument("--workers", type=int, default=SchedulerConfig.workers, help="concurrent bind workers")
    p.add_argument(
        "--strategy",
        type=strategy_names.flag,
        default=os.environ.get(constants.STRATEGY_ENV, constants.DEFAULT_STRATEGY),
        help=f"node strategy of the GpuClaims that name none while the GpuSchedulingPolicy "
        f"{constants.POLICY_NAME!r} sets no defaultStrategy: {', '.join(constants.STRATEGIES)} "
        f"(also snake_case, as the reference's least_utilized; default: ${constants.STRATEGY_ENV} "
        f"or {constants.DEFAULT_STRATEGY})",
    )
    p.add_argument(
        "--qps",
        type=runtime.number(0, 100_000),
        default=50,
        help="the scheduler's own API requests per second, as kube-scheduler's --kube-api-qps (default 50; 0: no "
        "limit): a backlog of waiting pods is reported at this rate, not all at once. Leader election has a client of "
        "its own outside it",
    )
    p.add_argument(
        "--burst",
        type=runtime.integer(1, 100_000),
        default=100,
        help="requests it may make at once above --qps (default 100)",
    )
    p.add_argument(
        "--gang-timeout",
        type=runtime.seconds(1, 86_400),
        default=SchedulerConfig.gang_timeout_seconds,
        help="a gang with fewer members than its gpu.scheduling/gang-min-members for this long is reported by a "
        "GangIncomplete event on its members (15, 15s, 2m, 1h; default 5m)",
    )
    p.add_argument(
        "--unschedulable-flush",
        type=runtime.seconds(1, 86_400),
        default=SchedulerConfig.flush_seconds,
        help="this often a waiting pod that nothing has woken since its last attempt is tried again, in case the "
        "event that could help it was missed (kube-scheduler's podMaxInUnschedulablePodsDuration; 15, 15s, 2m; "
        "default 5m)",
    )
    p.add_argument(
        "--volume-bind-timeout",
        type=runtime.seconds(1, 86_400),
        default=SchedulerConfig.volume_bind_timeout_seconds,
        help="how long a pod's WaitForFirstConsumer claims may take to be bound once its node is chosen; then the "
        "attempt ends and what it took is released (kube-scheduler's bindTimeoutSeconds; 15, 15s, 2m; default 10m)",
    )
    p.add_argument(
        "--isolated-gpus",
        action="store_true",
        help="containers see only their own GPUs (gpu-device-plugin with NVML): a map pod's CUDA_VISIBLE_DEVICES is "
        "expected numbered from 0, as gpu-webhook --isolated-gpus sets it",
    )
    logs.add_arguments(p)

    # Leader election: the names and defaults of kube-scheduler's flags.
    defaults = ElectionConfig(namespace=constants.LEASE_NAMESPACE, name="-", identity="-")
    le = p.add_argument_group("leader election", "several replicas watch; only the holder of a Lease schedules")
    le.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="compete for the leader Lease before scheduling (default: on); off: schedule at once",
    )
    le.add_argument(
        "--leader-elect-lease-duration",
        type=runtime.seconds(0, 3600),
        default=defaults.lease_duration,
        metavar="SECONDS",
        help="how long followers wait after the leader's last renewal before "
        f"taking over (default {defaults.lease_duration:g})",
    )
    le.add_argument(
        "--leader-elect-renew-deadline",
        type=runtime.seconds(0, 3600),
        default=defaults.renew_deadline,
        metavar="SECONDS",
        help=f"how long the leader keeps scheduling without a successful renewal (default {defaults.renew_deadline:g})",
    )
    le.add_argument(
        "--leader-elect-retry-period",
        type=runtime.seconds(0, 3600),
        default=defaults.retry_period,
        metavar="SECONDS",
        help=f"time between renewals and between a follower's attempts (default {defaults.retry_period:g})",
    )
    le.add_argument(
        "--leader-elect-resource-namespace",
        default=constants.LEASE_NAMESPACE,
        help=f"namespace of the leader Lease (default {constants.LEASE_NAMESPACE})",
    )
    le.add_argument(
        "--leader-elect-resource-name", default=None, help="name of the leader Lease (default: the scheduler name)"
    )
    le.add_argument(
        "--leader-elect-identity",
        default=None,
        help="this replica's holder identity (default: <hostname>_<random uuid>, new at every start)",
    )
    args = p.parse_args(argv)
    try:  # the environment's value is not checked by argparse
        args.strategy = strategy_names.flag(args.strategy)
    except argparse.ArgumentTypeError as exc:
        p.error(f"{constants.STRATEGY_ENV}: {exc}")
    if args.leader_elect:
        problems = election_config(args).problems()
        if problems:
            p.error("; ".join(problems))
    return args


def election_config(args: argparse.Namespace) -> ElectionConfig:
    """The election settings the flags ask for; the defaults of name and identity are filled in here, once, so
    that the Lease, the logs and the user agent all name the same candidate."""
    if args.leader_elect_resource_name is None:
        args.leader_elect_resource_name = args.scheduler_name
    if args.leader_elect_identity is None:
        # As kube-scheduler: the hostname (in a pod, the pod's name) and a fresh uuid, so a restart is a new
        # candidate and two processes on one host never share an identity.
        args.leader_elect_identity = f"{socket.gethostname()}_{uuid.uuid4().hex}"
    return ElectionConfig(
        namespace=args.leader_elect_resource_namespace,
        name=args.leader_elect_resource_name,
        identity=args.leader_elect_identity,
        lease_duration=args.leader_elect_lease_duration,
        renew_deadline=args.leader_elect_renew_deadline,
        retry_period=args.leader_elect_retry_period,
    )


async def schedule(
    scheduler: Scheduler, election_client: Callable[[], Client], election: ElectionConfig | None
) -> None:
    """Watch (every replica, so a new leader starts warm), then schedule: at once, or while holding the lease.
    The election runs on a thread of its own with its own client (`election_client` makes it there), as
    kube-scheduler's leader-election client: its renewals never wait in the scheduler's event loop, connection pool
    or rate limiter, so a busy leader does not lose its lease."""
    watches = await scheduler.watch()
    try:
        if election is None:
            scheduler.metrics.set_leader(True)
            await scheduler.lead()
            return

        def transition(leading: bool) -> None:
            scheduler.metrics.set_leader(leading)

        await run_on_own_thread(election_client, election, scheduler.lead, on_transition=transition)
    finally:
        scheduler.metrics.set_leader(False)
        for task in watches:
            task.cancel()


async def run(args: argparse.Namespace, stop: asyncio.Event) -> None:
    cfg = kubeconfig.load(args.kubeconfig)
    election = election_config(args) if args.leader_elect else None
    # The audit log tells the replicas apart by their user agent.
    agent = f"{args.scheduler_name}/{election.identity}" if election else args.scheduler_name
    async with Client(
        cfg, qps=args.qps, burst=args.burst, connections=max(64, args.workers * 2), user_agent=agent
    ) as client:
        scheduler = Scheduler(
            client,
            SchedulerConfig(
                name=args.scheduler_name,
                workers=args.workers,
                strategy=args.strategy,
                isolated_gpus=args.isolated_gpus,
                gang_timeout_seconds=args.gang_timeout,
                flush_seconds=args.unschedulable_flush,
                volume_bind_timeout_seconds=args.volume_bind_timeout,
            ),
        )
        app = web.Application()
        health.add_probes(app, scheduler.ready, scheduler.metrics.registry)
        runner = await health.serve(app, args.health_host, args.health_port)
        log.info(
            "gpu-scheduler %s serving health on %s:%d%s",
            args.scheduler_name,
            args.health_host,
            args.health_port,
            f", leader election as {election.identity}" if election else ", without leader election",
        )
        election_client = functools.partial(Client, cfg, connections=2, user_agent=f"{agent}/leader-election")
        main = asyncio.create_task(schedule(scheduler, election_client, election), name="schedule")
        try:
            await runtime.until_stopped(stop, {main})
        finally:
            # Wait for the work to stop: a leader stops scheduling, then hands the lease over (bounded), so that
            # a follower takes over at once instead of after a lease duration.
            main.cancel()
            await asyncio.wait({main})
            await runner.cleanup()
        runtime.raise_failure({main})
        log.info("gpu-scheduler stopped")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logs.configure(args.log_level, args.log_format)
    try:
        runtime.run("gpu-scheduler", functools.partial(run, args))
    except LeadershipLost as exc:
        # As kube-scheduler: never go on with caches and queues of a term that ended; the kubelet restarts the
        # container, which comes back as a follower.
        log.error("%s; exiting so that this replica restarts as a follower", exc)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
