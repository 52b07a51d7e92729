"""The pytest plugin's fixtures (SPEC §9): ``sentinel_clock`` drives every ``memory://``
Sentinel of the process, ``sentinel_reset`` empties them.

The adapters' test clients are driven the same way in tests/contract, and a user's test
file in a fresh virtualenv in tests/packaging.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from sentinel_core import DecisionReason, Rate, Sentinel
from sentinel_core.testing import SentinelClock, frozen_clock, pytest_plugin, reset_memory_stores

TENANT = "tenant-a"


def limiter(policy: dict[str, Any], url: str = "memory://", **top: Any) -> Sentinel:
    config = {"redis_url": url, "policies": {"api": {"fail_mode": "closed"} | policy}} | top
    return Sentinel(config, registry=CollectorRegistry(), entry_points=False)


def allowed(sentinel: Sentinel, n: int) -> list[bool]:
    return [sentinel.evaluate("api", TENANT).allowed for _ in range(n)]


@pytest.fixture
def made_before_the_clock_froze() -> Sentinel:
    """A limiter built before ``sentinel_clock`` (a module-level app): driven all the same."""
    return limiter({"algorithm": "token_bucket", "rate": "2/second"})


def test_a_token_bucket_refills_as_the_clock_advances(
    made_before_the_clock_froze: Sentinel, sentinel_clock: SentinelClock
) -> None:
    sentinel = made_before_the_clock_froze

    assert allowed(sentinel, 3) == [True, True, False]
    sentinel_clock.advance(0.5)  # one token at 2/second
    assert allowed(sentinel, 2) == [True, False]
    sentinel_clock.advance(10)  # full again, never more than the burst
    assert allowed(sentinel, 3) == [True, True, False]


def test_frozen_time_does_not_refill_however_long_the_test_takes(
    sentinel_clock: SentinelClock,
) -> None:
    sentinel = limiter({"algorithm": "token_bucket", "rate": "1000/second", "burst": 1})
    assert allowed(sentinel, 1) == [True]

    denied = sentinel.evaluate("api", TENANT)

    assert not denied.allowed
    assert allowed(sentinel, 50) == [False] * 50  # a real millisecond would have refilled it
    sentinel_clock.advance(0.001)
    assert allowed(sentinel, 2) == [True, False]


def test_a_sliding_window_slides_and_a_quota_period_turns(sentinel_clock: SentinelClock) -> None:
    window = limiter({"algorithm": "sliding_window", "rate": "3/minute"})
    quota = limiter({"algorithm": "quota", "rate": "2/day"})
    assert allowed(window, 4) == [True, True, True, False]
    assert allowed(quota, 3) == [True, True, False]

    sentinel_clock.advance(120)  # two windows later: the window is empty again
    assert allowed(window, 4) == [True, True, True, False]
    assert allowed(quota, 1) == [False]
    sentinel_clock.advance(86_400)  # the next calendar day
    assert allowed(quota, 3) == [True, True, False]


def test_local_denials_run_out_on_the_same_clock(sentinel_clock: SentinelClock) -> None:
    sentinel = limiter({"algorithm": "token_bucket", "rate": "1/minute", "burst": 1})
    assert allowed(sentinel, 1) == [True]

    first = sentinel.evaluate("api", TENANT)
    remembered = sentinel.evaluate("api", TENANT)
    sentinel_clock.advance(0.5)
    still = sentinel.evaluate("api", TENANT)
    sentinel_clock.advance(0.5)  # local_denials_ms (1000) is over: the store answers
    asked = sentinel.evaluate("api", TENANT)

    assert (first.local, remembered.local, still.local, asked.local) == (False, True, True, False)
    assert remembered.retry_after_seconds == 60
    assert asked.retry_after_seconds == 59


def test_the_emergency_limiter_follows_the_same_clock(sentinel_clock: SentinelClock) -> None:
    emergency = limiter({"algorithm": "token_bucket", "rate": "1/second"})._engine.emergency

    assert emergency.acquire("api", Rate(1, 1)).allowed
    assert not emergency.acquire("api", Rate(1, 1)).allowed
    sentinel_clock.advance(1)
    assert emergency.acquire("api", Rate(1, 1)).allowed


def test_a_limiter_on_redis_keeps_the_servers_time(
    redis_url: str, sentinel_clock: SentinelClock
) -> None:
    sentinel = limiter({"algorithm": "token_bucket", "rate": "1/hour", "burst": 1}, redis_url)
    try:
        assert allowed(sentinel, 1) == [True]
        sentinel_clock.advance(7200)

        decision = sentinel.evaluate("api", TENANT)
    finally:
        sentinel.close()

    assert decision.reason is DecisionReason.RATE_LIMITED


def test_a_limiter_given_its_own_clock_keeps_it(sentinel_clock: SentinelClock) -> None:
    now = [0.0]
    sentinel = Sentinel(
        {
            "redis_url": "memory://",
            "policies": {
                "api": {"algorithm": "token_bucket", "rate": "1/second", "fail_mode": "closed"}
            },
        },
        registry=CollectorRegistry(),
        entry_points=False,
        clock=lambda: now[0],
    )
    assert allowed(sentinel, 2) == [True, False]

    sentinel_clock.advance(5)
    assert allowed(sentinel, 1) == [False]
    now[0] = 1.0
    assert allowed(sentinel, 2) == [True, False]


def test_advance_takes_only_seconds_forward(sentinel_clock: SentinelClock) -> None:
    start = sentinel_clock.monotonic()

    sentinel_clock.advance(0)
    sentinel_clock.advance(1.5)

    assert sentinel_clock.monotonic() == start + 1.5
    for bad in (-0.001, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="time never goes back"):
            sentinel_clock.advance(bad)


def test_the_clock_runs_on_from_where_it_stood_and_is_frozen_once() -> None:
    with frozen_clock() as clock:
        clock.advance(3600)
        frozen_at = clock.monotonic()
        with pytest.raises(RuntimeError, match="already frozen"), frozen_clock():
            pass  # pragma: no cover - never entered

    assert clock.monotonic() >= frozen_at  # running again, never back
    with pytest.raises(RuntimeError, match="sentinel_clock"):
        clock.advance(1)


@pytest.fixture
def exhausted() -> Sentinel:
    sentinel = limiter({"algorithm": "token_bucket", "rate": "1/hour", "burst": 2})
    assert allowed(sentinel, 3) == [True, True, False]
    return sentinel


def test_sentinel_reset_empties_every_memory_store_before_the_test(
    exhausted: Sentinel, sentinel_reset: Callable[[], None]
) -> None:
    assert allowed(exhausted, 3) == [True, True, False]  # its local denial forgotten too

    sentinel_reset()

    assert allowed(exhausted, 3) == [True, True, False]


def test_reset_memory_stores_leaves_redis_alone(redis_url: str) -> None:
    sentinel = limiter({"algorithm": "token_bucket", "rate": "1/hour", "burst": 1}, redis_url)
    try:
        assert allowed(sentinel, 1) == [True]
        reset_memory_stores()
        assert allowed(sentinel, 1) == [False]
    finally:
        sentinel.close()


def test_the_plugin_defines_fixtures_and_no_hook() -> None:
    """Inert until a test asks: nothing runs at collection, set-up or report time."""
    names = {name for name in vars(pytest_plugin) if not name.startswith("_")}
    assert not {name for name in names if name.startswith("pytest_")}
    assert {"sentinel_clock", "sentinel_reset"} <= names
