"""The leader election's decision, on plain data: table tests of each rule, and a hypothesis state machine of
candidates whose clocks run at different rates racing for one Lease through a compare-and-swap store, checking
after every step that at most one of them believes it leads and that transitions are counted."""

from __future__ import annotations

import dataclasses
import datetime
import math

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from gpu_scheduling.kube.leaderelection import (
    Action,
    ElectionConfig,
    LeaseRecord,
    Observation,
    decide,
    expired,
    micro_time,
    observe,
    release_record,
    still_leading,
)

ME, OTHER = "me_1", "other_2"
STAMP = "2026-01-02T03:04:05.000006Z"


def seen(record: LeaseRecord | None, since: float = 100.0, version: str = "7") -> Observation:
    return Observation(record, version, since)


# ---- the rules, one by one ---------------------------------------------------------------------------------------


def test_no_lease_is_created_with_us_as_holder():
    for observation in (None, seen(None)):
        d = decide(observation, ME, now=0.0, stamp=STAMP, lease_seconds=15)
        assert d.action is Action.CREATE
        assert d.record == LeaseRecord(ME, 15, STAMP, STAMP, 0)


def test_our_own_lease_is_renewed_keeping_acquire_time_and_transitions():
    mine = LeaseRecord(ME, 15, "2026-01-01T00:00:00.000000Z", "2026-01-01T00:00:10.000000Z", 4)
    # However old it looks: it is ours.
    d = decide(seen(mine), ME, now=10_000.0, stamp=STAMP, lease_seconds=20)
    assert d.action is Action.UPDATE
    assert d.record == LeaseRecord(ME, 20, "2026-01-01T00:00:00.000000Z", STAMP, 4)


@pytest.mark.parametrize(
    "since, now, duration, action",
    [
        (100.0, 100.0, 15, Action.WAIT),  # just seen
        (100.0, 114.999, 15, Action.WAIT),  # one moment before its promise runs out, on our clock
        (100.0, 115.0, 15, Action.UPDATE),  # expired: take it
        (100.0, 400.0, 15, Action.UPDATE),
        (100.0, 101.0, 1, Action.UPDATE),  # a released-style short promise
        (100.0, 110.0, None, Action.WAIT),  # no leaseDurationSeconds: our own 15 s apply
        (100.0, 115.0, None, Action.UPDATE),
        (100.0, 110.0, 0, Action.WAIT),  # a nonsensical 0 is treated like a missing value
    ],
)
def test_another_holder_is_waited_for_until_its_lease_expires_on_our_clock(since, now, duration, action):
    theirs = LeaseRecord(OTHER, duration, "x", "y", 2)
    d = decide(seen(theirs, since=since), ME, now=now, stamp=STAMP, lease_seconds=15)
    assert d.action is action
    if action is Action.UPDATE:
        assert d.record == LeaseRecord(ME, 15, STAMP, STAMP, 3)
        assert d.reason == f"expired lease of {OTHER}"
    else:
        assert d.record is None and d.reason == f"held by {OTHER}"


def test_the_holders_own_timestamps_are_never_trusted():
    # renewTime a year in the past (the holder's clock is wrong), but the record just changed under our eyes.
    stale_clock = LeaseRecord(OTHER, 15, "2025-01-01T00:00:00.000000Z", "2025-01-01T00:00:00.000000Z", 0)
    assert decide(seen(stale_clock, since=50.0), ME, now=51.0, stamp=STAMP, lease_seconds=15).action is Action.WAIT
    # renewTime far in the future, but unchanged for longer than the lease: expired.
    future = dataclasses.replace(stale_clock, renew_time="2099-01-01T00:00:00.000000Z")
    assert decide(seen(future, since=50.0), ME, now=65.0, stamp=STAMP, lease_seconds=15).action is Action.UPDATE


def test_a_released_lease_is_taken_at_once_and_counts_a_transition():
    released = LeaseRecord("", 1, "a", "a", 5)
    d = decide(seen(released, since=100.0), ME, now=100.0, stamp=STAMP, lease_seconds=15)
    assert d.action is Action.UPDATE and d.record == LeaseRecord(ME, 15, STAMP, STAMP, 6)
    assert d.reason == "released lease"


def test_expiry_reads_the_records_own_duration():
    assert not expired(seen(LeaseRecord(OTHER, 30), since=0.0), now=29.9, fallback_seconds=15)
    assert expired(seen(LeaseRecord(OTHER, 30), since=0.0), now=30.0, fallback_seconds=15)


@pytest.mark.parametrize(
    "record, version, kept",
    [
        (LeaseRecord(OTHER, 15, "a", "b", 1), "7", True),  # nothing changed: the age keeps running
        (LeaseRecord(OTHER, 15, "a", "c", 1), "7", False),  # renewed
        (LeaseRecord(OTHER, 15, "a", "b", 1), "8", False),  # rewritten with identical fields (same clock tick)
        (LeaseRecord(ME, 15, "a", "b", 2), "8", False),  # another holder
        (None, "", False),  # deleted
    ],
)
def test_observation_age_restarts_only_when_the_lease_changed(record, version, kept):
    before = seen(LeaseRecord(OTHER, 15, "a", "b", 1), since=10.0, version="7")
    after = observe(before, record, version, now=20.0)
    assert after.since == (10.0 if kept else 20.0)
    assert (after.record, after.version) == (record, version)
    assert observe(None, record, version, now=3.0).since == 3.0


def test_release_hands_back_only_our_own_lease():
    mine = LeaseRecord(ME, 15, "a", "b", 3)
    assert release_record(seen(mine), ME, STAMP) == LeaseRecord("", 1, STAMP, STAMP, 3)
    assert release_record(seen(LeaseRecord(OTHER, 15, "a", "b", 3)), ME, STAMP) is None
    assert release_record(seen(None), ME, STAMP) is None
    assert release_record(None, ME, STAMP) is None


@pytest.mark.parametrize(
    "renewed_at, now, leading",
    [(0.0, 0.0, True), (0.0, 9.999, True), (0.0, 10.0, False), (-math.inf, 0.0, False)],
)
def test_a_leader_leads_until_the_renew_deadline_after_its_last_successful_attempt(renewed_at, now, leading):
    assert still_leading(renewed_at, now, renew_deadline=10.0) is leading


def test_lease_spec_round_trip():
    record = LeaseRecord(ME, 15, STAMP, STAMP, 2)
    spec = record.to_spec()
    assert spec == {
        "holderIdentity": ME,
        "leaseDurationSeconds": 15,
        "acquireTime": STAMP,
        "renewTime": STAMP,
        "leaseTransitions": 2,
    }
    assert LeaseRecord.from_spec(spec) == record
    # What kubectl or the apiserver leave out.
    assert LeaseRecord.from_spec({}) == LeaseRecord("", None, None, None, 0)
    assert LeaseRecord.from_spec(None) == LeaseRecord()


def test_micro_time_is_utc_with_microseconds():
    moment = datetime.datetime(2026, 1, 2, 4, 4, 5, 6, tzinfo=datetime.timezone(datetime.timedelta(hours=1)))
    assert micro_time(moment) == STAMP


# ---- configuration -----------------------------------------------------------------------------------------------


def test_client_go_defaults_are_valid():
    config = ElectionConfig("gpu-scheduling", "gpu-scheduler", ME)
    assert (config.lease_duration, config.renew_deadline, config.retry_period) == (15.0, 10.0, 2.0)
    assert config.problems() == [] and config.lease_seconds == 15
    config.validate()


@pytest.mark.parametrize(
    "changes, fragment",
    [
        ({"lease_duration": 10.0}, "lease duration (10.0s) must be greater than the renew deadline (10.0s)"),
        ({"retry_period": 9.0}, "renew deadline (10.0s) must be greater than the retry period (9.0s) times 1.2"),
        ({"retry_period": 0.0}, "retry_period must be greater than zero"),
        ({"identity": ""}, "identity must not be empty"),
        ({"name": ""}, "name must not be empty"),
    ],
)
def test_invalid_timings_are_refused(changes, fragment):
    config = dataclasses.replace(ElectionConfig("ns", "lease", ME), **changes)
    assert any(fragment in p for p in config.problems()), config.problems()
    with pytest.raises(ValueError, match="invalid leader election settings"):
        config.validate()


def test_every_problem_is_reported_at_once():
    config = ElectionConfig("", "lease", ME, lease_duration=5.0, renew_deadline=6.0, retry_period=6.0)
    assert len(config.problems()) == 3


def test_a_fractional_lease_duration_is_promised_rounded_up():
    assert ElectionConfig("ns", "l", ME, lease_duration=10.2, renew_deadline=10.1, retry_period=1).lease_seconds == 11


# ---- candidates racing: at most one believes it leads --------------------------------------------------------------

LEASE, DEADLINE, RETRY = 15.0, 10.0, 2.0
# Clock rates may differ by less than the lease duration / renew deadline ratio (1.5): here by at most 1.1/0.9.
RATES = st.floats(0.9, 1.1)


@dataclasses.dataclass
class Candidate:
    identity: str
    rate: float
    offset: float
    observation: Observation | None = None
    renewed_at: float = -math.inf  # local time at the start of the last attempt that succeeded
    pending: tuple[int, Action, LeaseRecord, float] | None = None  # version read, what to write, round start

    def local(self, real: float) -> float:
        return self.offset + self.rate * real

    def wall_stamp(self, real: float) -> str:
        # A coarse wall clock (whole seconds, arbitrary offset): renewals within one tick write equal records.
        moment = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
        return micro_time(moment + datetime.timedelta(seconds=int(self.local(real))))

    def believes(self, real: float) -> bool:
        obs = self.observation
        return (
            obs is not None
            and obs.record is not None
            and obs.record.holder == self.identity
            and still_leading(self.renewed_at, self.local(real), DEADLINE)
        )


class Election(RuleBasedStateMachine):
    """The apiserver is a record with a version; reads and writes of different candidates interleave freely, a
    write may be refused by the compare-and-swap, or land while its answer is lost."""

    @initialize(
        rates=st.lists(RATES, min_size=2, max_size=3), offsets=st.lists(st.floats(0, 1e6), min_size=3, max_size=3)
    )
    def start(self, rates, offsets):
        self.real = 0.0
        self.record: LeaseRecord | None = None
        self.version = 0
        self.expected_transitions = 0
        self.candidates = [Candidate(f"c{i}_{i}", r, offsets[i]) for i, r in enumerate(rates)]

    def pick(self, i: int) -> Candidate:
        return self.candidates[i % len(self.candidates)]

    @rule(dt=st.one_of(st.floats(0, 2 * RETRY), st.floats(DEADLINE - RETRY, LEASE + RETRY)))
    def time_passes(self, dt):
        self.real += dt

    @rule(i=st.integers(0, 2))
    def read(self, i):
        c = self.pick(i)
        now = c.local(self.real)
        c.observation = observe(c.observation, self.record, str(self.version), now)
        d = decide(c.observation, c.identity, now, c.wall_stamp(self.real), math.ceil(LEASE))
        if d.action is Action.WAIT:
            c.pending = None
            c.renewed_at = -math.inf  # a leader that sees another holder stops at once
        else:
            assert d.record is not None
            c.pending = (self.version, d.action, d.record, now)

    @rule(i=st.integers(0, 2), answer_lost=st.booleans())
    def write(self, i, answer_lost):
        c = self.pick(i)
        if c.pending is None:
            return
        version, action, record, started = c.pending
        c.pending = None
        if action is Action.CREATE and self.record is not None:
            return  # 409 AlreadyExists
        if action is Action.UPDATE and (self.record is None or version != self.version):
            return  # 409 Conflict (or 404): someone wrote in between
        self.apply(record)
        if not answer_lost and still_leading(started, c.local(self.real), DEADLINE):
            # Success is counted only when the answer comes back before the deadline (the elector's timeout).
            c.observation = Observation(record, str(self.version), c.local(self.real))
            c.renewed_at = started

    @rule(i=st.integers(0, 2), answer_lost=st.booleans())
    def attempt(self, i, answer_lost):
        """A read and its write with nothing in between (the common case)."""
        self.read(i)
        self.write(i, answer_lost)

    @rule(i=st.integers(0, 2))
    def release(self, i):
        c = self.pick(i)
        c.renewed_at = -math.inf  # stop believing first, then hand the lease back
        c.pending = None
        record = release_record(c.observation, c.identity, c.wall_stamp(self.real))
        if record is not None and c.observation is not None and c.observation.version == str(self.version):
            self.apply(record)
            c.observation = Observation(record, str(self.version), c.local(self.real))

    def apply(self, record: LeaseRecord) -> None:
        previous = self.record
        if previous is not None and record.holder and record.holder != previous.holder:
            self.expected_transitions += 1
        self.record, self.version = record, self.version + 1

    @invariant()
    def at_most_one_leader(self):
        if not hasattr(self, "candidates"):
            return
        leaders = [c.identity for c in self.candidates if c.believes(self.real)]
        assert len(leaders) <= 1, f"at t={self.real}: {leaders} all believe they lead"

    @invariant()
    def transitions_count_changes_of_holder(self):
        if getattr(self, "record", None) is not None:
            assert self.record.transitions == self.expected_transitions

    @invariant()
    def a_believer_holds_the_current_record(self):
        for c in getattr(self, "candidates", []):
            if c.believes(self.real):
                assert self.record is not None and self.record.holder == c.identity


Election.TestCase.settings = settings(max_examples=300, stateful_step_count=60)
test_at_most_one_leader = Election.TestCase


def test_a_follower_takes_over_from_a_crashed_leader_after_the_lease_duration():
    """Liveness, step by step: the leader dies right after renewing; a follower whose clock runs 10% slow takes
    over after one lease duration on its own clock (about 16.7 s real), never earlier."""
    a = decide(None, "a", now=0.0, stamp=STAMP, lease_seconds=15)
    store = a.record
    follower_rate = 0.9
    obs = observe(None, store, "1", now=0.0)
    for real in (1.0, 8.0, 16.0):
        obs = observe(obs, store, "1", now=follower_rate * real)
        assert decide(obs, "b", follower_rate * real, STAMP, 15).action is Action.WAIT
    obs = observe(obs, store, "1", now=follower_rate * 16.7)
    took = decide(obs, "b", follower_rate * 16.7, STAMP, 15)
    assert took.action is Action.UPDATE and took.record.holder == "b" and took.record.transitions == 1


# ---- gpu-scheduler's flags -----------------------------------------------------------------------------------------


def test_scheduler_flags_default_to_kube_schedulers_election():
    from gpu_scheduling import constants
    from gpu_scheduling.scheduler import main

    args = main.parse_args(["--scheduler-name=my-scheduler"])
    election = main.election_config(args)
    assert args.leader_elect is True
    assert (election.lease_duration, election.renew_deadline, election.retry_period) == (15.0, 10.0, 2.0)
    assert election.namespace == constants.LEASE_NAMESPACE and election.name == "my-scheduler"
    host, _, suffix = election.identity.rpartition("_")
    assert host and len(suffix) == 32 and int(suffix, 16) >= 0
    # Filled in once: the Lease, the logs and the user agent name the same candidate.
    assert main.election_config(args).identity == election.identity


def test_scheduler_flags_take_seconds_with_or_without_unit():
    from gpu_scheduling.scheduler import main

    args = main.parse_args(
        [
            "--leader-elect-lease-duration=30s",
            "--leader-elect-renew-deadline=20",
            "--leader-elect-retry-period=4s",
            "--leader-elect-identity=a_1",
            "--leader-elect-resource-name=lock",
            "--leader-elect-resource-namespace=ns",
        ]
    )
    assert main.election_config(args) == ElectionConfig("ns", "lock", "a_1", 30.0, 20.0, 4.0)
    assert main.parse_args(["--no-leader-elect"]).leader_elect is False


def test_scheduler_refuses_inconsistent_timings(capsys):
    from gpu_scheduling.scheduler import main

    with pytest.raises(SystemExit) as exit_:
        main.parse_args(["--leader-elect-lease-duration=5"])
    assert exit_.value.code == 2
    assert "lease duration (5.0s) must be greater than the renew deadline (10.0s)" in capsys.readouterr().err
    # Without leader election the timings are not used, so not checked.
    assert main.parse_args(["--no-leader-elect", "--leader-elect-lease-duration=5"]).leader_elect is False
