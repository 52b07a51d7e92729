"""The emergency limiter (fail-open cap) on a fake nanosecond clock, and under threads."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sentinel_core import Rate
from sentinel_core.resilience._emergency import EmergencyLimiter, emergency_capacity_micro

SECOND = 1_000_000_000
MILLI = 1_000_000
MICRO = 1_000_000


class FakeClockNs:
    def __init__(self, now: int = 10 * SECOND) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ns: int) -> None:
        self.now += ns


@pytest.fixture
def clock() -> FakeClockNs:
    return FakeClockNs()


def admissions(limiter: EmergencyLimiter, endpoint: str, rate: Rate, calls: int) -> int:
    return sum(limiter.acquire(endpoint, rate).allowed for _ in range(calls))


@pytest.mark.parametrize(
    ("rate", "capacity"),
    [
        (Rate(2, 1), 2),
        (Rate(50, 1), 50),
        (Rate(120, 60), 2),
        (Rate(90, 60), 1),  # 1.5 requests: one whole request available at once
        (Rate(1, 60), 1),  # less than one request a second: still one request
        (Rate(5, 3600), 1),
        (Rate(86_400, 86_400), 1),
    ],
)
def test_capacity_is_one_second_of_the_fallback_rate_and_at_least_one_request(
    clock: FakeClockNs, rate: Rate, capacity: int
) -> None:
    assert emergency_capacity_micro(rate) // MICRO == capacity
    limiter = EmergencyLimiter(clock)
    assert admissions(limiter, "e", rate, 1_000) == capacity


@pytest.mark.parametrize(
    ("rate", "step_ns", "steps"),
    [
        (Rate(10, 1), MILLI, 5_000),  # 10 + 50
        (Rate(2, 1), 7 * MILLI, 1_000),  # 2 + floor(2 * 7.0) = 16
        (Rate(120, 60), 250 * MILLI, 40),  # 2 + 2/s * 10 s = 22
        (Rate(1, 60), SECOND, 300),  # 1 + 300/60 = 6
        (Rate(1_000, 1), 100_000, 10_000),  # 1000 + 1000/s * 1 s = 2000
        (Rate(3, 1), 111 * MILLI, 100),  # 3 + floor(3 * 11.1) = 36
    ],
)
def test_admissions_over_time_are_exactly_capacity_plus_rate_times_elapsed(
    clock: FakeClockNs, rate: Rate, step_ns: int, steps: int
) -> None:
    limiter = EmergencyLimiter(clock)
    admitted = 0
    for step in range(steps + 1):
        if step:
            clock.advance(step_ns)
        admitted += admissions(limiter, "e", rate, 3)  # more calls than tokens, each step
    elapsed_ns = steps * step_ns
    capacity = emergency_capacity_micro(rate)
    expected = capacity + elapsed_ns * rate.count * MICRO // (rate.period_seconds * SECOND)
    assert admitted == expected // MICRO


def test_denied_calls_never_bank_a_refill() -> None:
    """The V1 double-refill bug: a denial that writes its partial refill lets a
    stream of denied calls sustain more than the fallback rate."""
    rate = Rate(2, 1)  # a token every 500 ms
    quiet_clock, noisy_clock = FakeClockNs(), FakeClockNs()
    quiet, noisy = EmergencyLimiter(quiet_clock), EmergencyLimiter(noisy_clock)
    quiet_admissions: list[int] = []
    noisy_admissions: list[int] = []
    for ms in range(0, 10_000, 50):
        quiet_clock.now = noisy_clock.now = 10 * SECOND + ms * MILLI
        quiet_admissions += [ms] * admissions(quiet, "e", rate, 3)
        noisy_admissions += [ms] * admissions(noisy, "e", rate, 3)
        for _ in range(24):  # denied calls between two ticks, 2 ms apart
            noisy_clock.advance(2 * MILLI)
            assert not noisy.acquire("e", rate).allowed
    assert noisy_admissions == quiet_admissions
    assert len(noisy_admissions) == 2 + 19  # capacity + floor(2/s * 9.95 s)


def test_a_denial_leaves_the_bucket_as_it_was(clock: FakeClockNs) -> None:
    limiter = EmergencyLimiter(clock)
    rate = Rate(1, 1)
    assert limiter.acquire("e", rate).allowed
    clock.advance(999 * MILLI)
    for _ in range(1_000):
        assert not limiter.acquire("e", rate).allowed
    clock.advance(MILLI)
    assert limiter.acquire("e", rate).allowed, "exactly one second after the admission"
    assert not limiter.acquire("e", rate).allowed


@settings(max_examples=200, deadline=None)
@given(
    count=st.integers(1, 200),
    period=st.sampled_from([1, 60, 3600]),
    gaps=st.lists(
        st.one_of(st.just(0), st.integers(0, 5_000).map(lambda ms: ms * MILLI)),
        min_size=1,
        max_size=300,
    ),
)
def test_admissions_never_exceed_capacity_plus_rate_times_elapsed(
    count: int, period: int, gaps: list[int]
) -> None:
    clock = FakeClockNs()
    limiter = EmergencyLimiter(clock)
    rate = Rate(count, period)
    start = clock.now
    admitted = 0
    for gap in gaps:
        clock.advance(gap)
        admitted += limiter.acquire("e", rate).allowed
    bound = emergency_capacity_micro(rate) + (clock.now - start) * count * MICRO // (
        period * SECOND
    )
    assert admitted <= bound // MICRO
    assert admitted >= 1


def test_retry_after_is_the_wait_for_one_token_rounded_up_and_at_least_one(
    clock: FakeClockNs,
) -> None:
    limiter = EmergencyLimiter(clock)
    fast = Rate(1_000, 1)
    assert admissions(limiter, "fast", fast, 1_000) == 1_000
    denied = limiter.acquire("fast", fast)
    assert not denied.allowed
    assert denied.retry_after_seconds == 1, "1 ms to wait still says 1 second"
    slow = Rate(1, 60)
    assert limiter.acquire("slow", slow).allowed
    verdict = limiter.acquire("slow", slow)
    assert verdict.retry_after_seconds == 60
    clock.advance(59 * SECOND + 500 * MILLI)
    verdict = limiter.acquire("slow", slow)
    assert not verdict.allowed
    assert verdict.retry_after_seconds == 1
    clock.advance(500 * MILLI)
    assert limiter.acquire("slow", slow).allowed


def test_an_admission_has_no_retry_after_and_reports_what_remains(clock: FakeClockNs) -> None:
    limiter = EmergencyLimiter(clock)
    rate = Rate(3, 1)
    verdicts = [limiter.acquire("e", rate) for _ in range(4)]
    assert [v.allowed for v in verdicts] == [True, True, True, False]
    assert [v.remaining for v in verdicts] == [2, 1, 0, 0]
    assert [v.retry_after_seconds for v in verdicts[:3]] == [None, None, None]
    assert verdicts[2].reset_seconds == 1  # 3 tokens at 3/s: full again in 1 s


def test_each_endpoint_has_its_own_bucket(clock: FakeClockNs) -> None:
    limiter = EmergencyLimiter(clock)
    rate = Rate(2, 1)
    assert admissions(limiter, "a", rate, 10) == 2
    assert admissions(limiter, "b", rate, 10) == 2
    assert admissions(limiter, "a", rate, 10) == 0
    clock.advance(500 * MILLI)
    assert admissions(limiter, "a", rate, 10) == 1
    assert admissions(limiter, "b", rate, 10) == 1


def test_16_threads_with_a_frozen_clock_admit_exactly_the_capacity(
    clock: FakeClockNs,
) -> None:
    limiter = EmergencyLimiter(clock)
    rate = Rate(100, 1)
    barrier = threading.Barrier(16)
    admitted = [0] * 16

    def worker(index: int) -> None:
        barrier.wait(timeout=10)
        for _ in range(50):
            admitted[index] += limiter.acquire("e", rate).allowed

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert sum(admitted) == 100
