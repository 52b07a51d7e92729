"""`Sentinel(config, clock=...)`: one monotonic clock drives the breaker, the emergency
limiter, the local denials and the memory store, so tests move time instead of sleeping."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from sentinel_core import DecisionReason, Sentinel
from tests.conftest import make_config
from tests.support.redis_server import free_port

R = DecisionReason


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def sentinel_on(clock: Clock, url: str, **policies: dict[str, Any]) -> Sentinel:
    config = {
        **make_config(url, **policies),
        "breaker": {"failure_threshold": 1, "open_seconds": 30},
    }
    return Sentinel(config, registry=CollectorRegistry(), entry_points=False, clock=clock)


def test_the_memory_store_refills_on_the_injected_clock() -> None:
    clock = Clock()
    policy = {"algorithm": "token_bucket", "rate": "1/hour", "fail_mode": "closed"}
    sentinel = sentinel_on(clock, "memory://", api__ep=policy)
    assert [sentinel.evaluate("api.ep", "t").reason for _ in range(2)] == [
        R.ALLOWED,
        R.RATE_LIMITED,
    ]
    clock.now += 3599
    assert sentinel.evaluate("api.ep", "t").reason is R.RATE_LIMITED
    clock.now += 1
    assert sentinel.evaluate("api.ep", "t").reason is R.ALLOWED


def test_the_breaker_quarantine_elapses_on_the_injected_clock() -> None:
    clock = Clock()
    policy = {"algorithm": "token_bucket", "rate": "5/second", "fail_mode": "closed"}
    sentinel = sentinel_on(clock, f"redis://127.0.0.1:{free_port()}/0", api__ep=policy)
    assert sentinel.evaluate("api.ep", "t").reason is R.FAIL_CLOSED
    denied = sentinel.evaluate("api.ep", "t")
    assert (denied.reason, denied.retry_after_seconds) == (R.CIRCUIT_OPEN, 30)
    clock.now += 29.5
    assert sentinel.evaluate("api.ep", "t").retry_after_seconds == 1
    clock.now += 0.5
    assert sentinel.evaluate("api.ep", "t").reason is R.FAIL_CLOSED, "a half-open probe"


def test_the_emergency_limiter_refills_on_the_injected_clock() -> None:
    clock = Clock()
    policy = {
        "algorithm": "token_bucket",
        "rate": "5/second",
        "fail_mode": "open",
        "fallback_rate": "1/second",
    }
    sentinel = sentinel_on(clock, f"redis://127.0.0.1:{free_port()}/0", api__ep=policy)
    reasons = [sentinel.evaluate("api.ep", "t").reason for _ in range(3)]
    assert reasons == [R.REDIS_CONNECTION_ERROR, R.EMERGENCY_LOCAL_LIMIT, R.EMERGENCY_LOCAL_LIMIT]
    clock.now += 1
    assert sentinel.evaluate("api.ep", "t").reason is R.CIRCUIT_OPEN
