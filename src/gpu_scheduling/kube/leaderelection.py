"""Leader election on a `coordination.k8s.io/v1` Lease, with the semantics of client-go's
tools/leaderelection: several replicas run, one of them (the leader) does the work, the others wait warm.

Time is never read from another machine. A candidate measures a Lease's age on its own monotonic clock, from
the moment it first saw the record in its current form (spec and resourceVersion); the `acquireTime` and
`renewTime` it writes are for people and are never read back for a decision. A leader that cannot renew within
the renew deadline, counted from the start of its last successful attempt, stops leading. Every other candidate
saw that renewal no earlier than it was sent, and waits a whole lease duration (longer than the renew deadline)
after seeing it before taking over, so the old leader has stopped first; the difference absorbs clocks that run
at slightly different rates and the time the work needs to stop.

`observe`, `decide` and `release_record` are the whole decision, pure functions of plain data; `LeaderElector`
is a thin loop of GET, POST and PUT (the resourceVersion as compare-and-swap) around them. It writes one Lease,
its own, and nothing else. Like client-go it does not fence: someone who deletes the Lease by hand can make two
leaders for up to a renew deadline.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import datetime
import enum
import logging
import math
import random
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, TypeVar

from gpu_scheduling import constants
from gpu_scheduling.kube import paths
from gpu_scheduling.kube.errors import ApiError, Conflict, NotFound, TransportError

if TYPE_CHECKING:
    from gpu_scheduling.kube.client import Client

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Format of a Lease's `acquireTime` / `renewTime` (Kubernetes MicroTime, always UTC).
MICRO_TIME = "%Y-%m-%dT%H:%M:%S.%fZ"

#: client-go's JitterFactor: a follower retries every retry period plus up to 1.2 retry periods at random (so
#: the followers do not ask in step), and the renew deadline must leave room for one such jittered retry.
JITTER_FACTOR = 1.2


def micro_time(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime(MICRO_TIME)


# ---- configuration -----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ElectionConfig:
    namespace: str
    """Namespace of the Lease."""

    name: str
    """Name of the Lease; every replica that competes for the same work uses the same one."""

    identity: str
    """This candidate's `holderIdentity`; unique per process (a restart is a new candidate)."""

    lease_duration: float = 15.0
    """Seconds a follower waits, on its own clock, after last seeing the record change before it takes over. It is
    also what a leader promises in `leaseDurationSeconds` (rounded up to whole seconds). Default as client-go."""

    renew_deadline: float = 10.0
    """Seconds a leader keeps leading without a successful renewal; must be shorter than the lease duration."""

    retry_period: float = 2.0
    """Seconds between a leader's renewals and between a follower's attempts (a follower's are jittered)."""

    release_timeout: float = 2.0
    """Seconds a stopping leader spends at most on handing the Lease back, so that shutdown is never held up."""

    def problems(self) -> list[str]:
        """Every problem with these values at once (empty: valid)."""
        out = [f"{field} must not be empty" for field in ("namespace", "name", "identity") if not getattr(self, field)]
        out.extend(
            f"{field} must be greater than zero, got {getattr(self, field)}"
            for field in ("lease_duration", "renew_deadline", "retry_period", "release_timeout")
            if not getattr(self, field) > 0
        )
        if not self.lease_duration > self.renew_deadline:
            out.append(
                f"lease duration ({self.lease_duration}s) must be greater than the renew deadline "
                f"({self.renew_deadline}s)"
            )
        if not self.renew_deadline > self.retry_period * JITTER_FACTOR:
            out.append(
                f"renew deadline ({self.renew_deadline}s) must be greater than the retry period "
                f"({self.retry_period}s) times {JITTER_FACTOR}"
            )
        return out

    def validate(self) -> None:
        if problems := self.problems():
            raise ValueError("invalid leader election settings: " + "; ".join(problems))

    @property
    def lease_seconds(self) -> int:
        """`leaseDurationSeconds` to write: whole seconds, rounded up so the promise is never shorter than ours."""
        return max(1, math.ceil(self.lease_duration))


# ---- the decision (pure) -----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LeaseRecord:
    """The election's part of a Lease's spec."""

    holder: str = ""
    """`holderIdentity`; empty when nobody holds it (released)."""
    duration_seconds: int | None = None
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None) -> LeaseRecord:
        spec = spec or {}
        return cls(
            holder=spec.get("holderIdentity") or "",
            duration_seconds=spec.get("leaseDurationSeconds"),
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            transitions=spec.get("leaseTransitions") or 0,
        )

    def to_spec(self) -> dict[str, Any]:
        return {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.duration_seconds,
            "acquireTime": self.acquire_time,
            "renewTime": self.renew_time,
            "leaseTransitions": self.transitions,
        }


@dataclasses.dataclass(frozen=True)
class Observation:
    """What a candidate last read, and when (its own monotonic clock) it first saw it in this form."""

    record: LeaseRecord | None
    """None: there is no Lease."""
    version: str
    """The Lease's resourceVersion ("" when there is none): any write changes it, even one that leaves the
    record's fields as they were (two renewals within one clock tick)."""
    since: float


def observe(previous: Observation | None, record: LeaseRecord | None, version: str, now: float) -> Observation:
    """The observation after reading (`record`, `version`) at `now`: the age restarts only when they changed."""
    if previous is not None and previous.record == record and previous.version == version:
        return previous
    return Observation(record, version, now)


def expired(observation: Observation, now: float, fallback_seconds: float) -> bool:
    """Whether the holder's promise has run out, on our clock. A record without `leaseDurationSeconds` (one not
    written by an elector) is given our own lease duration."""
    record = observation.record
    assert record is not None
    duration = record.duration_seconds if record.duration_seconds and record.duration_seconds > 0 else fallback_seconds
    return now >= observation.since + duration


class Action(enum.Enum):
    CREATE = "create"  # POST a new Lease
    UPDATE = "update"  # PUT, conditional on the resourceVersion read
    WAIT = "wait"  # someone else holds a live lease


@dataclasses.dataclass(frozen=True)
class Decision:
    action: Action
    record: LeaseRecord | None = None
    """What to write (CREATE, UPDATE)."""
    reason: str = ""


def decide(observation: Observation | None, identity: str, now: float, stamp: str, lease_seconds: int) -> Decision:
    """What candidate `identity` does after reading `observation`, at `now` on its clock; `stamp` is its wall
    time as MicroTime, written only for people to read."""
    if observation is None or observation.record is None:
        return Decision(Action.CREATE, LeaseRecord(identity, lease_seconds, stamp, stamp, 0), "no lease yet")
    current = observation.record
    if current.holder == identity:
        renewed = dataclasses.replace(
            current, duration_seconds=lease_seconds, renew_time=stamp, acquire_time=current.acquire_time or stamp
        )
        return Decision(Action.UPDATE, renewed, "renew")
    if current.holder and not expired(observation, now, lease_seconds):
        return Decision(Action.WAIT, None, f"held by {current.holder}")
    reason = f"expired lease of {current.holder}" if current.holder else "released lease"
    return Decision(Action.UPDATE, LeaseRecord(identity, lease_seconds, stamp, stamp, current.transitions + 1), reason)


def still_leading(renewed_at: float, now: float, renew_deadline: float) -> bool:
    """A leader leads until the renew deadline after the START of its last successful attempt: a follower can
    only have seen that write after it was sent, so this moment comes before any follower's lease expiry."""
    return now < renewed_at + renew_deadline


def release_record(observation: Observation | None, identity: str, stamp: str) -> LeaseRecord | None:
    """The record that hands the lease back (client-go's ReleaseOnCancel), or None when we do not hold it."""
    if observation is None or observation.record is None or observation.record.holder != identity:
        return None
    return LeaseRecord("", 1, stamp, stamp, observation.record.transitions)


# ---- the loop (I/O) ----------------------------------------------------------------------------------------------


class LeadershipLost(Exception):
    """The leader could not renew its lease in time, or saw another holder; the work was stopped."""


class LeaderElector:
    """Competes for one Lease. `run(lead)` returns or raises only when `lead` does, when leadership is lost
    (LeadershipLost) or when it is cancelled; it hands the lease back unless leadership was lost."""

    def __init__(
        self,
        client: Client,
        config: ElectionConfig,
        *,
        on_transition: Callable[[bool], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        config.validate()
        self.client, self.config = client, config
        self._on_transition = on_transition
        self._clock = clock
        self._collection = paths.leases(config.namespace)
        self._item = paths.lease(config.namespace, config.name)
        self._observation: Observation | None = None
        self._lease: dict[str, Any] | None = None  # the Lease as last read or written, the base of the next PUT
        self._renewed_at = -math.inf
        self._reported_holder: str | None = None
        self.is_leader = False

    @property
    def holder(self) -> str:
        """The holder identity last observed ("" when nobody holds the lease or it was not read yet)."""
        obs = self._observation
        return obs.record.holder if obs is not None and obs.record is not None else ""

    @property
    def description(self) -> str:
        return f"{self.config.namespace}/{self.config.name}"

    async def run(self, lead: Callable[[], Awaitable[T]]) -> T:
        try:
            await self._acquire()
        except asyncio.CancelledError:
            # A write cut off by the cancellation may still have made us the holder: the release reads first.
            await self._release_quietly()
            raise
        self._set_leading(True)
        task = asyncio.ensure_future(lead())
        try:
            lost = await self._renew(task)
        except BaseException:  # run was cancelled: stop the work, then hand the lease over at once
            self._set_leading(False)
            await self._stop(task)
            await self._release_quietly()
            raise
        if lost:
            await self._stop(task)
            raise LeadershipLost(f"lost the leader lease {self.description}: {lost}")
        self._set_leading(False)
        await self._release_quietly()
        return task.result()  # lead's own value or exception

    # ---- phases --------------------------------------------------------------------------------------------------
    async def _acquire(self) -> None:
        log.info("%s: attempting to acquire the leader lease %s", self.config.identity, self.description)
        while True:
            started = self._clock()
            action = await self._try(self.config.renew_deadline)
            if action in (Action.CREATE, Action.UPDATE):
                self._renewed_at = started
                return
            await asyncio.sleep(self.config.retry_period * (1 + random.random() * JITTER_FACTOR))

    async def _renew(self, task: asyncio.Future[Any]) -> str:
        """Renew every retry period until `task` finishes (returns "") or leadership is lost (returns why)."""
        cfg = self.config
        while True:
            remaining = self._renewed_at + cfg.renew_deadline - self._clock()
            done, _ = await asyncio.wait({task}, timeout=max(0.0, min(cfg.retry_period, remaining)))
            if done:
                return ""
            started = self._clock()
            if not still_leading(self._renewed_at, started, cfg.renew_deadline):
                self._set_leading(False, f"no successful renewal within the renew deadline of {cfg.renew_deadline}s")
                return f"not renewed within {cfg.renew_deadline}s"
            action = await self._try(self._renewed_at + cfg.renew_deadline - started)
            if action in (Action.CREATE, Action.UPDATE):
                self._renewed_at = started
            elif action is Action.WAIT:
                self._set_leading(False, f"the lease is now held by {self.holder}")
                return f"held by {self.holder}"

    async def _stop(self, task: asyncio.Future[Any]) -> None:
        task.cancel()
        await asyncio.wait({task})
        if not task.cancelled() and task.exception() is not None:
            log.error("the leader's work failed while it was being stopped", exc_info=task.exception())

    # ---- one attempt ---------------------------------------------------------------------------------------------
    async def _try(self, seconds: float) -> Action | None:
        """One read-decide-write round within `seconds`; None when it failed (logged)."""
        try:
            return await asyncio.wait_for(self._attempt(), timeout=max(seconds, 0.001))
        except TimeoutError:
            log.warning(
                "%s: no answer about the lease %s within %.1fs", self.config.identity, self.description, seconds
            )
        except Conflict as exc:  # another candidate wrote first; the next read shows who
            log.debug("%s: lost a race for the lease %s: %s", self.config.identity, self.description, exc)
        except ApiError as exc:
            log.warning("%s: cannot read or write the lease %s: %s", self.config.identity, self.description, exc)
        except TransportError as exc:
            log.warning(
                "%s: cannot reach the API server for the lease %s: %s", self.config.identity, self.description, exc
            )
        return None

    async def _attempt(self) -> Action:
        cfg = self.config
        try:
            lease: dict[str, Any] | None = await self.client.get(self._item)
        except NotFound:
            lease = None
        self._seen(lease)
        verdict = decide(self._observation, cfg.identity, self._clock(), self._stamp(), cfg.lease_seconds)
        if verdict.action is Action.WAIT:
            return verdict.action
        assert verdict.record is not None
        if verdict.action is Action.CREATE:
            body = {
                "apiVersion": constants.LEASE_API_VERSION,
                "kind": "Lease",
                "metadata": {"name": cfg.name, "namespace": cfg.namespace},
                "spec": verdict.record.to_spec(),
            }
            written = await self.client.post(self._collection, body)
        else:
            assert lease is not None
            written = await self.client.request("PUT", self._item, body=self._updated(lease, verdict.record))
        if verdict.reason != "renew":
            log.debug("%s: took the lease %s (%s)", cfg.identity, self.description, verdict.reason)
        self._seen(written)
        return verdict.action

    async def _release(self) -> None:
        try:  # read first: the Lease as it is now, even if our last write's answer never came back
            self._seen(await self.client.get(self._item))
        except NotFound:
            return
        record = release_record(self._observation, self.config.identity, self._stamp())
        if record is None or self._lease is None:
            return
        written = await self.client.request("PUT", self._item, body=self._updated(self._lease, record))
        self._reported_holder = ""  # said here, not again as "free"
        self._seen(written)
        log.info("%s: released the leader lease %s", self.config.identity, self.description)

    async def _release_quietly(self) -> None:
        """Best effort, bounded: a stopping process must not hang on an unreachable API server."""
        try:
            await asyncio.wait_for(self._release(), timeout=self.config.release_timeout)
        except (TimeoutError, ApiError, TransportError) as exc:
            log.warning(
                "%s: could not release the leader lease %s: %s (it expires by itself)",
                self.config.identity,
                self.description,
                exc,
            )

    # ---- bookkeeping ---------------------------------------------------------------------------------------------
    @staticmethod
    def _updated(lease: dict[str, Any], record: LeaseRecord) -> dict[str, Any]:
        """`lease` with the election's fields replaced; its resourceVersion makes the PUT a compare-and-swap."""
        return {**lease, "spec": {**(lease.get("spec") or {}), **record.to_spec()}}

    def _seen(self, lease: dict[str, Any] | None) -> None:
        self._lease = lease
        record = LeaseRecord.from_spec(lease.get("spec")) if lease is not None else None
        version = lease["metadata"].get("resourceVersion", "") if lease is not None else ""
        self._observation = observe(self._observation, record, version, self._clock())
        holder = self.holder
        if holder != self._reported_holder:
            self._reported_holder = holder
            if holder and holder != self.config.identity:
                log.info("%s: leader is now %s", self.config.identity, holder)
            elif not holder and lease is not None:
                log.info("%s: the leader lease %s is free", self.config.identity, self.description)

    def _set_leading(self, leading: bool, why: str = "") -> None:
        if leading == self.is_leader:
            return
        self.is_leader = leading
        if leading:
            log.info("%s: became leader (lease %s)", self.config.identity, self.description)
        elif why:
            log.info("%s: lost leadership of the lease %s: %s", self.config.identity, self.description, why)
        else:
            log.info("%s: stopped leading (lease %s)", self.config.identity, self.description)
        if self._on_transition is not None:
            self._on_transition(leading)

    @staticmethod
    def _stamp() -> str:
        return micro_time(datetime.datetime.now(datetime.UTC))


async def run_on_own_thread(
    make_client: Callable[[], AbstractAsyncContextManager[Client]],
    config: ElectionConfig,
    lead: Callable[[], Awaitable[T]],
    *,
    on_transition: Callable[[bool], None] | None = None,
) -> T:
    """`LeaderElector(...).run(lead)`, with the election on a thread and event loop of its own (and a client made
    there by `make_client`) while `lead` runs on the caller's loop.

    A leader's busy event loop (thousands of watch events arriving at once, each handled in turn) can delay a
    renewal sitting in its queue for longer than the renew deadline: measured, 8 s without a renewal request
    leaving the process while it bound pods. On its own thread a renewal waits at most for the interpreter's
    switch interval (5 ms), as client-go's election goroutine does. Cancelling this coroutine stops the work and
    hands the lease back, as `LeaderElector.run` does; LeadershipLost and `lead`'s own outcome come back here."""
    caller = asyncio.get_running_loop()
    outcome: concurrent.futures.Future[T] = concurrent.futures.Future()
    outcome.set_running_or_notify_cancel()  # cancelling our wrapper must not cancel the thread's result
    election_task: list[tuple[asyncio.AbstractEventLoop, asyncio.Task[T]]] = []
    ready = threading.Event()

    async def lead_on_caller() -> T:
        """Runs on the election's loop for as long as `lead` runs on the caller's; cancelled, it cancels `lead` and
        returns only once `lead` has stopped, so the lease is never handed back while work is still going on."""
        own = asyncio.get_running_loop()
        finished = asyncio.Event()

        async def work() -> T:
            try:
                return await lead()
            finally:
                own.call_soon_threadsafe(finished.set)

        running = asyncio.run_coroutine_threadsafe(work(), caller)
        try:
            await finished.wait()
        except asyncio.CancelledError:
            running.cancel()
            await finished.wait()
            raise
        return running.result()

    async def elect() -> T:
        me = asyncio.current_task()
        assert me is not None  # asyncio.run runs it as a task
        election_task.append((asyncio.get_running_loop(), me))
        ready.set()
        async with make_client() as client:
            return await LeaderElector(client, config, on_transition=on_transition).run(lead_on_caller)

    def thread() -> None:
        try:
            outcome.set_result(asyncio.run(elect()))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, whatever it is
            outcome.set_exception(exc)
        finally:
            ready.set()

    threading.Thread(target=thread, name=f"leader-election-{config.name}", daemon=True).start()
    try:
        return await asyncio.wrap_future(outcome)
    except asyncio.CancelledError:
        await caller.run_in_executor(None, ready.wait)
        if election_task:
            loop, task = election_task[0]
            with contextlib.suppress(RuntimeError):  # its loop already closed: the election is over
                loop.call_soon_threadsafe(task.cancel)
        with contextlib.suppress(BaseException):
            await asyncio.wrap_future(outcome)
        raise
