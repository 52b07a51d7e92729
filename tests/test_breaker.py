"""The circuit breaker's transition table, driven by a fake clock (no sleeps), and its
behaviour under real thread and task concurrency."""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref
from collections.abc import Callable

import pytest

from sentinel_core import BreakerState
from sentinel_core.resilience._breaker import (
    WAKE_MARGIN_SECONDS,
    CircuitBreaker,
    Permit,
    Scheduler,
)

CLOSED, OPEN, HALF_OPEN = BreakerState.CLOSED, BreakerState.OPEN, BreakerState.HALF_OPEN


class FakeClock:
    """A monotonic clock that only moves when the test says so."""

    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Recorder:
    """An ``on_transition`` listener that keeps every (previous, current) pair."""

    def __init__(self) -> None:
        self.transitions: list[tuple[BreakerState, BreakerState]] = []
        self._lock = threading.Lock()

    def __call__(self, previous: BreakerState, current: BreakerState) -> None:
        with self._lock:
            self.transitions.append((previous, current))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


def make_breaker(
    clock: FakeClock,
    recorder: Recorder | None = None,
    *,
    threshold: int = 3,
    open_seconds: float = 30,
    probes: int = 1,
    schedule: Scheduler | None = None,
) -> CircuitBreaker:
    return CircuitBreaker(
        threshold,
        open_seconds,
        half_open_max_probes=probes,
        clock=clock,
        on_transition=recorder,
        schedule=schedule,
    )


def fail(breaker: CircuitBreaker, times: int = 1) -> None:
    for _ in range(times):
        permit = breaker.acquire()
        assert permit is not None
        breaker.record_failure(permit)


def trip(breaker: CircuitBreaker, threshold: int = 3) -> None:
    fail(breaker, threshold)
    assert breaker.state is OPEN


def half_open(breaker: CircuitBreaker, clock: FakeClock, open_seconds: float = 30) -> Permit:
    """Trip the breaker, let the quarantine elapse, and take the first probe permit."""
    trip(breaker)
    clock.advance(open_seconds)
    permit = breaker.acquire()
    assert permit is not None
    assert permit.probe
    assert breaker.state is HALF_OPEN
    return permit


# -- CLOSED ----------------------------------------------------------------------


def test_a_new_breaker_is_closed_and_grants_plain_permits(clock: FakeClock) -> None:
    breaker = make_breaker(clock)
    permit = breaker.acquire()
    assert breaker.state is CLOSED
    assert permit is not None
    assert not permit.probe


def test_failures_below_the_threshold_keep_it_closed(clock: FakeClock, recorder: Recorder) -> None:
    breaker = make_breaker(clock, recorder, threshold=3)
    fail(breaker, 2)
    assert breaker.state is CLOSED
    assert breaker.acquire() is not None
    assert recorder.transitions == []


def test_the_threshold_th_consecutive_failure_opens_it(
    clock: FakeClock, recorder: Recorder
) -> None:
    breaker = make_breaker(clock, recorder, threshold=3)
    fail(breaker, 3)
    assert breaker.state is OPEN
    assert recorder.transitions == [(CLOSED, OPEN)]


def test_a_success_resets_the_consecutive_failure_count(clock: FakeClock) -> None:
    breaker = make_breaker(clock, threshold=3)
    fail(breaker, 2)
    permit = breaker.acquire()
    assert permit is not None
    breaker.record_success(permit)
    fail(breaker, 2)
    assert breaker.state is CLOSED, "2 + 2 failures split by a success are not 3 in a row"
    fail(breaker)
    assert breaker.state is OPEN


# -- OPEN ------------------------------------------------------------------------


def test_open_short_circuits_every_call_until_the_quarantine_ends(clock: FakeClock) -> None:
    breaker = make_breaker(clock, open_seconds=30)
    trip(breaker)
    for _ in range(100):
        assert breaker.acquire() is None
    clock.advance(29.999)
    assert breaker.acquire() is None
    assert breaker.state is OPEN


def test_open_becomes_half_open_when_open_seconds_have_elapsed(
    clock: FakeClock, recorder: Recorder
) -> None:
    breaker = make_breaker(clock, recorder, open_seconds=30)
    trip(breaker)
    clock.advance(30)
    permit = breaker.acquire()
    assert permit is not None
    assert permit.probe
    assert breaker.state is HALF_OPEN
    assert recorder.transitions == [(CLOSED, OPEN), (OPEN, HALF_OPEN)]


def test_the_quarantine_is_counted_from_the_opening_not_from_the_first_failure(
    clock: FakeClock,
) -> None:
    breaker = make_breaker(clock, open_seconds=30)
    fail(breaker, 2)
    clock.advance(20)
    fail(breaker)  # opens now
    clock.advance(29)
    assert breaker.acquire() is None
    clock.advance(1)
    assert breaker.acquire() is not None


# -- HALF_OPEN -------------------------------------------------------------------


def test_half_open_admits_at_most_half_open_max_probes(clock: FakeClock) -> None:
    breaker = make_breaker(clock, probes=3)
    trip(breaker)
    clock.advance(30)
    permits = [breaker.acquire() for _ in range(5)]
    granted = [permit for permit in permits if permit is not None]
    assert len(granted) == 3
    assert all(permit.probe for permit in granted)
    assert permits[3:] == [None, None]
    assert breaker.state is HALF_OPEN


def test_a_successful_probe_closes_it_and_resets_the_failure_count(
    clock: FakeClock, recorder: Recorder
) -> None:
    breaker = make_breaker(clock, recorder, threshold=3)
    probe = half_open(breaker, clock)
    breaker.record_success(probe)
    assert breaker.state is CLOSED
    assert recorder.transitions == [(CLOSED, OPEN), (OPEN, HALF_OPEN), (HALF_OPEN, CLOSED)]
    fail(breaker, 2)
    assert breaker.state is CLOSED, "the failures before the quarantine were forgotten"


def test_a_failed_probe_reopens_it_with_a_fresh_quarantine(
    clock: FakeClock, recorder: Recorder
) -> None:
    breaker = make_breaker(clock, recorder, open_seconds=30)
    trip(breaker)
    clock.advance(45)  # well past the first quarantine
    probe = breaker.acquire()
    assert probe is not None
    breaker.record_failure(probe)
    assert breaker.state is OPEN
    assert recorder.transitions[-1] == (HALF_OPEN, OPEN)
    assert breaker.retry_after_seconds() == 30, "a full quarantine from the failed probe"
    clock.advance(29.5)
    assert breaker.acquire() is None
    clock.advance(0.5)
    assert breaker.acquire() is not None


def test_a_released_probe_frees_its_slot(clock: FakeClock) -> None:
    breaker = make_breaker(clock, probes=1)
    probe = half_open(breaker, clock)
    assert breaker.acquire() is None, "the only probe slot is taken"
    breaker.release(probe)
    again = breaker.acquire()
    assert again is not None
    assert again.probe
    assert breaker.state is HALF_OPEN


def test_releasing_a_plain_permit_changes_nothing(clock: FakeClock) -> None:
    breaker = make_breaker(clock, threshold=3)
    fail(breaker, 2)
    permit = breaker.acquire()
    assert permit is not None
    breaker.release(permit)
    fail(breaker)
    assert breaker.state is OPEN, "release neither counted a failure nor reset the count"


# -- stale permits (an older generation) --------------------------------------------


def test_failures_of_calls_started_before_the_opening_are_ignored(
    clock: FakeClock, recorder: Recorder
) -> None:
    breaker = make_breaker(clock, recorder, threshold=3)
    in_flight = [breaker.acquire() for _ in range(10)]
    for permit in in_flight:
        assert permit is not None
        breaker.record_failure(permit)
    assert recorder.transitions == [(CLOSED, OPEN)]
    clock.advance(30)
    probe = breaker.acquire()
    assert probe is not None
    breaker.record_success(probe)
    assert breaker.state is CLOSED
    fail(breaker, 2)
    assert breaker.state is CLOSED, "no stale failure leaked into the new generation"


def test_a_stale_success_cannot_close_an_open_breaker(clock: FakeClock) -> None:
    breaker = make_breaker(clock, threshold=3)
    slow_call = breaker.acquire()
    assert slow_call is not None
    trip(breaker)
    breaker.record_success(slow_call)
    assert breaker.state is OPEN


def test_a_stale_probe_result_is_ignored(clock: FakeClock) -> None:
    breaker = make_breaker(clock, probes=2)
    first = half_open(breaker, clock)
    second = breaker.acquire()
    assert second is not None
    breaker.record_failure(first)  # re-opens: `second` belongs to the old generation
    breaker.record_success(second)
    assert breaker.state is OPEN
    breaker.release(second)
    clock.advance(30)
    assert breaker.acquire() is not None
    assert breaker.acquire() is not None
    assert breaker.acquire() is None, "the stale release did not make a third slot"


def test_a_stale_release_does_not_free_a_probe_slot(clock: FakeClock) -> None:
    breaker = make_breaker(clock, threshold=3)
    plain = breaker.acquire()
    assert plain is not None
    probe = half_open(breaker, clock)
    breaker.release(plain)
    assert breaker.acquire() is None
    breaker.record_success(probe)
    assert breaker.state is CLOSED


# -- retry_after_seconds -----------------------------------------------------------


def test_retry_after_is_none_unless_open(clock: FakeClock) -> None:
    breaker = make_breaker(clock)
    assert breaker.retry_after_seconds() is None
    probe = half_open(breaker, clock)
    assert breaker.retry_after_seconds() is None
    breaker.record_success(probe)
    assert breaker.retry_after_seconds() is None


@pytest.mark.parametrize(
    ("elapsed", "expected"),
    [(0, 30), (0.1, 30), (0.999, 30), (1, 29), (28.5, 2), (29, 1), (29.9, 1), (29.999, 1)],
)
def test_retry_after_is_the_quarantine_left_rounded_up_and_at_least_one(
    clock: FakeClock, elapsed: float, expected: int
) -> None:
    breaker = make_breaker(clock, open_seconds=30)
    trip(breaker)
    clock.advance(elapsed)
    assert breaker.retry_after_seconds() == expected


def test_retry_after_is_one_when_the_quarantine_ended_but_nothing_looked(
    clock: FakeClock,
) -> None:
    breaker = make_breaker(clock, open_seconds=30)
    trip(breaker)
    clock.advance(100)
    assert breaker.retry_after_seconds() == 1
    assert breaker.state is HALF_OPEN
    assert breaker.retry_after_seconds() is None


# -- an idle breaker (SPEC §3: it does not stay OPEN for want of traffic) ------------


def test_reading_the_state_after_the_quarantine_moves_it_to_half_open_without_a_call(
    clock: FakeClock, recorder: Recorder
) -> None:
    breaker = make_breaker(clock, recorder, open_seconds=30)
    trip(breaker)
    clock.advance(29.999)
    assert breaker.state is OPEN
    clock.advance(0.001)
    assert breaker.state is HALF_OPEN
    assert recorder.transitions == [(CLOSED, OPEN), (OPEN, HALF_OPEN)]
    assert breaker.state is HALF_OPEN, "read twice, moved once"
    assert len(recorder.transitions) == 2
    probe = breaker.acquire()
    assert probe is not None
    assert probe.probe, "the next call is the probe, as if a call had ended the quarantine"
    breaker.record_success(probe)
    assert breaker.state is CLOSED


class Wakes:
    """A `Scheduler` that keeps each wake-up for the test to run when it likes."""

    def __init__(self) -> None:
        self.pending: list[tuple[float, Callable[[], None]]] = []

    def __call__(self, delay: float, wake: Callable[[], None]) -> None:
        self.pending.append((delay, wake))

    def run(self) -> None:
        pending, self.pending = self.pending, []
        for _, wake in pending:
            wake()


def test_every_opening_asks_to_be_woken_when_its_quarantine_ends(clock: FakeClock) -> None:
    wakes = Wakes()
    breaker = make_breaker(clock, open_seconds=30, schedule=wakes)
    assert wakes.pending == []
    probe = half_open(breaker, clock)
    assert [delay for delay, _ in wakes.pending] == [30 + WAKE_MARGIN_SECONDS]
    breaker.record_failure(probe)  # a failed probe re-opens: a fresh quarantine, a new wake
    assert [delay for delay, _ in wakes.pending] == [30 + WAKE_MARGIN_SECONDS] * 2


def test_the_wake_up_moves_an_idle_breaker_and_reports_it_without_any_reading(
    clock: FakeClock, recorder: Recorder
) -> None:
    wakes = Wakes()
    breaker = make_breaker(clock, recorder, open_seconds=30, schedule=wakes)
    trip(breaker)
    clock.advance(30 + WAKE_MARGIN_SECONDS)
    wakes.run()
    assert recorder.transitions == [(CLOSED, OPEN), (OPEN, HALF_OPEN)]


def test_an_early_wake_up_changes_nothing(clock: FakeClock, recorder: Recorder) -> None:
    wakes = Wakes()
    breaker = make_breaker(clock, recorder, open_seconds=30, schedule=wakes)
    trip(breaker)
    clock.advance(10)
    wakes.run()
    assert recorder.transitions == [(CLOSED, OPEN)]
    assert breaker.state is OPEN


def test_a_pending_wake_up_keeps_no_breaker_alive(clock: FakeClock, recorder: Recorder) -> None:
    wakes = Wakes()
    breaker = make_breaker(clock, recorder, schedule=wakes)
    trip(breaker)
    alive = weakref.ref(breaker)
    del breaker
    gc.collect()
    assert alive() is None
    clock.advance(60)
    wakes.run()  # finds no breaker: nothing to do
    assert recorder.transitions == [(CLOSED, OPEN)]


def test_by_default_a_daemon_timer_wakes_the_breaker_on_the_real_clock() -> None:
    """The default scheduler, on the real monotonic clock and a 50 ms quarantine: the
    HALF_OPEN transition is reported with no call and no reading of the state."""
    reported = threading.Event()
    seen: list[tuple[BreakerState, BreakerState]] = []

    def listener(previous: BreakerState, current: BreakerState) -> None:
        seen.append((previous, current))
        if current is HALF_OPEN:
            reported.set()

    breaker = CircuitBreaker(1, 0.05, on_transition=listener)
    fail(breaker)
    assert reported.wait(timeout=10)
    assert seen == [(CLOSED, OPEN), (OPEN, HALF_OPEN)]
    timers = [t for t in threading.enumerate() if isinstance(t, threading.Timer)]
    assert all(timer.daemon for timer in timers)


# -- listener ----------------------------------------------------------------------


def test_the_listener_sees_every_transition_of_a_full_cycle_in_order(
    clock: FakeClock, recorder: Recorder
) -> None:
    breaker = make_breaker(clock, recorder)
    probe = half_open(breaker, clock)
    breaker.record_failure(probe)
    clock.advance(30)
    probe = breaker.acquire()
    assert probe is not None
    breaker.record_success(probe)
    assert recorder.transitions == [
        (CLOSED, OPEN),
        (OPEN, HALF_OPEN),
        (HALF_OPEN, OPEN),
        (OPEN, HALF_OPEN),
        (HALF_OPEN, CLOSED),
    ]


def test_the_listener_may_read_the_breaker_without_deadlocking(clock: FakeClock) -> None:
    seen: list[tuple[BreakerState, int | None]] = []
    breaker: CircuitBreaker

    def listener(previous: BreakerState, current: BreakerState) -> None:
        seen.append((breaker.state, breaker.retry_after_seconds()))

    breaker = CircuitBreaker(1, 30, clock=clock, on_transition=listener, schedule=None)
    fail(breaker)
    assert seen == [(OPEN, 30)]


# -- concurrency -------------------------------------------------------------------


def test_32_threads_failing_at_once_open_it_exactly_once(
    clock: FakeClock, recorder: Recorder
) -> None:
    breaker = make_breaker(clock, recorder, threshold=5)
    barrier = threading.Barrier(32)
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            permit = breaker.acquire()
            assert permit is not None
            barrier.wait(timeout=10)  # every call is in flight before any reports
            breaker.record_failure(permit)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert errors == []
    assert breaker.state is OPEN
    assert recorder.transitions == [(CLOSED, OPEN)]


def test_32_threads_hammering_a_failing_store_open_it_exactly_once(
    clock: FakeClock, recorder: Recorder
) -> None:
    breaker = make_breaker(clock, recorder, threshold=5)
    barrier = threading.Barrier(32)
    short_circuits = [0] * 32

    def worker(index: int) -> None:
        barrier.wait(timeout=10)
        for _ in range(200):
            permit = breaker.acquire()
            if permit is None:
                short_circuits[index] += 1
            else:
                breaker.record_failure(permit)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert recorder.transitions == [(CLOSED, OPEN)]
    assert sum(short_circuits) >= 32 * 200 - 5 - 31, "only calls already in flight got out"


def test_half_open_grants_exactly_max_probes_to_racing_threads(clock: FakeClock) -> None:
    breaker = make_breaker(clock, probes=4)
    trip(breaker)
    clock.advance(30)
    barrier = threading.Barrier(32)
    permits: list[Permit | None] = []
    lock = threading.Lock()

    def worker() -> None:
        barrier.wait(timeout=10)
        permit = breaker.acquire()
        with lock:
            permits.append(permit)

    threads = [threading.Thread(target=worker) for _ in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert len(permits) == 32
    assert sum(permit is not None for permit in permits) == 4


async def test_50_tasks_failing_at_once_open_it_exactly_once(
    clock: FakeClock, recorder: Recorder
) -> None:
    breaker = make_breaker(clock, recorder, threshold=5)
    all_in_flight = asyncio.Event()
    started = 0

    async def call() -> None:
        nonlocal started
        permit = breaker.acquire()
        assert permit is not None
        started += 1
        if started == 50:
            all_in_flight.set()
        await all_in_flight.wait()  # the "Redis call": every task waits here
        breaker.record_failure(permit)

    await asyncio.gather(*(call() for _ in range(50)))
    assert breaker.state is OPEN
    assert recorder.transitions == [(CLOSED, OPEN)]
    assert breaker.acquire() is None


def test_transitions_reach_the_listener_in_the_order_they_happened(clock: FakeClock) -> None:
    """A listener that sets a gauge to ``current`` must end on the breaker's real state,
    even when the thread that fired a transition is slow to report it."""
    probe_closed = threading.Event()
    half_opened = threading.Event()
    seen: list[tuple[BreakerState, BreakerState]] = []

    def slow_listener(previous: BreakerState, current: BreakerState) -> None:
        if (previous, current) == (OPEN, HALF_OPEN):
            half_opened.set()
            probe_closed.wait(timeout=0.2)  # this thread is descheduled a while
        seen.append((previous, current))

    breaker = CircuitBreaker(
        1, 30, half_open_max_probes=2, clock=clock, on_transition=slow_listener, schedule=None
    )
    fail(breaker)
    clock.advance(30)

    def first_probe() -> None:
        breaker.acquire()  # fires OPEN -> HALF_OPEN, then reports it slowly

    slow = threading.Thread(target=first_probe)
    slow.start()
    assert half_opened.wait(timeout=5)
    second = breaker.acquire()
    assert second is not None
    breaker.record_success(second)  # HALF_OPEN -> CLOSED while the first report waits
    probe_closed.set()
    slow.join(timeout=5)
    assert breaker.state is CLOSED
    assert seen == [(CLOSED, OPEN), (OPEN, HALF_OPEN), (HALF_OPEN, CLOSED)]


class InterleavingClock(FakeClock):
    """Runs ``interleave`` once, at its next reading: stands for what another thread does
    between a caller's lock-free look at the state and its taking the lock."""

    def __init__(self) -> None:
        super().__init__()
        self.interleave: Callable[[], None] | None = None

    def __call__(self) -> float:
        action, self.interleave = self.interleave, None
        if action is not None:
            action()
        return self.now


def test_a_caller_that_finds_it_closed_once_it_holds_the_lock_gets_a_current_plain_permit() -> None:
    clock = InterleavingClock()
    breaker = make_breaker(clock, threshold=1)
    trip(breaker, threshold=1)
    clock.advance(30)

    def another_caller_probes_and_closes_it() -> None:
        probe = breaker.acquire()
        assert probe is not None
        assert probe.probe
        breaker.record_success(probe)
        assert breaker.state is CLOSED

    clock.interleave = another_caller_probes_and_closes_it
    permit = breaker.acquire()  # saw OPEN without the lock; CLOSED once it had it

    assert permit is not None
    assert not permit.probe
    breaker.record_failure(permit)  # a permit of the current generation: it counts
    assert breaker.state is OPEN
