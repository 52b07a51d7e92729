"""The check before a ``count`` policy's handler is a decision like any other (SPEC §3):
it goes through the circuit breaker, so a silent Redis costs one socket timeout per
request only until the breaker opens; it uses local denials, so a flood on a spent
bucket costs O(1) script calls; and when the store is unavailable the decision table
answers it once, the completion charging nothing more.

Framework-free, through `Sentinel.admit` / `aadmit`; the contract suite shows the same
through every adapter.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry

import sentinel_core
from sentinel_core import Decision, DecisionReason, Sentinel
from tests.support.http import make_sentinel, request_view, script_calls
from tests.support.redis_server import RedisServer
from tests.support.tcp_proxy import TcpProxy
from tests.support.tokens import HS_SECRET, bearer, hs256

AUTH = {"authorization": bearer(hs256("tenant-a", ttl=3600))}
FLOOD = 2_000
TIMEOUT_S = 0.2


def config(redis_url: str, **policy: Any) -> dict[str, Any]:
    login = {
        "algorithm": "token_bucket",
        "rate": "1/minute",
        "burst": 2,
        "fail_mode": "closed",
        "count": [401],
    }
    return {
        "redis_url": redis_url,
        "jwt": {"key": HS_SECRET},
        "breaker": {"failure_threshold": 2, "open_seconds": 30},
        "policies": {"auth.login": login | policy},
    }


class Clock:
    """A monotonic clock that moves only when told (local denials never run out)."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class Reported:
    """The decisions the observers are told about."""

    def __init__(self) -> None:
        self.decisions: list[Decision] = []

    @sentinel_core.hookimpl
    def sentinel_decision(self, decision: Decision, request: Any) -> None:
        self.decisions.append(decision)


@pytest.fixture
def client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    own = redis_server.client()
    own.flushall()
    yield own
    own.close()


@pytest.fixture
def silent(redis_server: RedisServer) -> Iterator[TcpProxy]:
    """A Redis that accepts connections and never answers."""
    with TcpProxy(redis_server.port, "blackhole") as proxy:
        yield proxy


def test_a_flood_on_a_spent_bucket_costs_one_script_call(
    redis_server: RedisServer, client: redis.Redis
) -> None:
    limiter = make_sentinel(config(redis_server.url), clock=Clock())
    for _ in range(2):
        limiter.admit(request_view(headers=AUTH), ["auth.login"]).complete(401)
    before = script_calls(client)

    statuses = {
        limiter.admit(request_view(headers=AUTH), ["auth.login"]).denial.status  # type: ignore[union-attr]
        for _ in range(FLOOD)
    }

    calls = script_calls(client) - before
    limiter.close()
    assert statuses == {429}
    assert calls == 1, f"{FLOOD} denied checks cost {calls} script calls"


async def test_a_flood_on_a_spent_bucket_costs_one_script_call_async(
    redis_server: RedisServer, client: redis.Redis
) -> None:
    limiter = make_sentinel(config(redis_server.url), clock=Clock())
    for _ in range(2):
        await (await limiter.aadmit(request_view(headers=AUTH), ["auth.login"])).acomplete(401)
    before = script_calls(client)

    denials = [
        await limiter.aadmit(request_view(headers=AUTH), ["auth.login"]) for _ in range(FLOOD)
    ]

    calls = script_calls(client) - before
    await limiter.aclose()
    assert {admission.denial.status for admission in denials if admission.denial} == {429}
    assert calls == 1, f"{FLOOD} denied checks cost {calls} script calls"


def test_a_denial_by_the_consumption_is_remembered_for_the_next_check(
    redis_server: RedisServer, client: redis.Redis
) -> None:
    limiter = make_sentinel(config(redis_server.url, burst=1), clock=Clock())
    limiter.admit(request_view(headers=AUTH), ["auth.login"]).complete(401)
    # Admitted while a token remained; its counted 401 finds the bucket spent.
    limiter.admit(request_view(headers=AUTH), ["auth.login"]).complete(401)
    before = script_calls(client)

    denied = limiter.admit(request_view(headers=AUTH), ["auth.login"])

    limiter.close()
    assert denied.denial is not None
    assert denied.denial.status == 429
    assert script_calls(client) == before, "answered locally: the store said when"


def test_after_the_breaker_opens_a_silent_redis_costs_no_wait(silent: TcpProxy) -> None:
    limiter = make_sentinel(config(silent.url) | {"socket_timeout_ms": round(TIMEOUT_S * 1000)})
    timeouts = [limiter.admit(request_view(headers=AUTH), ["auth.login"]) for _ in range(2)]

    started = time.perf_counter()
    short = [limiter.admit(request_view(headers=AUTH), ["auth.login"]) for _ in range(20)]
    elapsed = time.perf_counter() - started

    limiter.close()
    assert [a.denial.status for a in timeouts + short if a.denial] == [503] * 22
    assert {a.denial.decision.reason for a in short if a.denial and a.denial.decision} == {
        DecisionReason.CIRCUIT_OPEN
    }
    assert elapsed < TIMEOUT_S, f"20 checks with the breaker open took {elapsed:.2f} s"
    assert silent.accepted <= 2, "no connection once the breaker is open"


async def test_after_the_breaker_opens_a_silent_redis_costs_no_wait_async(
    silent: TcpProxy,
) -> None:
    limiter = make_sentinel(config(silent.url) | {"socket_timeout_ms": round(TIMEOUT_S * 1000)})
    for _ in range(2):
        await limiter.aadmit(request_view(headers=AUTH), ["auth.login"])

    started = time.perf_counter()
    short = [await limiter.aadmit(request_view(headers=AUTH), ["auth.login"]) for _ in range(20)]
    elapsed = time.perf_counter() - started

    await limiter.aclose()
    assert {a.denial.decision.reason for a in short if a.denial and a.denial.decision} == {
        DecisionReason.CIRCUIT_OPEN
    }
    assert elapsed < TIMEOUT_S, f"20 checks with the breaker open took {elapsed:.2f} s"


def test_a_fail_open_check_is_charged_once_to_the_emergency_limiter(silent: TcpProxy) -> None:
    reported = Reported()
    policy = {"fail_mode": "open", "fallback_rate": "2/second"}
    limiter = Sentinel(
        {**config(silent.url, **policy), "socket_timeout_ms": 50},
        registry=CollectorRegistry(),
        entry_points=False,
        plugins=[reported],
        clock=Clock(),
    )
    reasons = []
    for _ in range(3):
        admission = limiter.admit(request_view(headers=AUTH), ["auth.login"])
        admission.complete(401)  # counted: no second emergency token, no second report
        decision = (admission.denial or admission.charges[0].outcome).decision
        assert decision is not None
        reasons.append(decision.reason)

    limiter.close()
    # One second's worth of 2/second: two requests, whatever their status.
    assert reasons == [
        DecisionReason.REDIS_TIMEOUT,
        DecisionReason.REDIS_TIMEOUT,
        DecisionReason.EMERGENCY_LOCAL_LIMIT,
    ]
    assert [d.reason for d in reported.decisions] == reasons


def test_an_admission_by_the_store_is_reported_once_at_its_consumption(
    redis_server: RedisServer, client: redis.Redis
) -> None:
    reported = Reported()
    limiter = make_sentinel(config(redis_server.url), plugins=[reported])

    limiter.admit(request_view(headers=AUTH), ["auth.login"]).complete(200)
    limiter.admit(request_view(headers=AUTH), ["auth.login"]).complete(401)

    limiter.close()
    assert [(d.allowed, d.reason) for d in reported.decisions] == [(True, DecisionReason.ALLOWED)]


def test_precheck_is_the_facades_check_and_consumes_nothing(
    redis_server: RedisServer, client: redis.Redis
) -> None:
    policy = {"algorithm": "token_bucket", "rate": "1/minute", "fail_mode": "closed"}
    limiter = make_sentinel({"redis_url": redis_server.url, "policies": {"api.ep": policy}})

    checks = [limiter.precheck("api.ep", "t") for _ in range(3)]
    spent = limiter.evaluate("api.ep", "t")

    after = limiter.precheck("api.ep", "t")

    limiter.close()
    assert [d.allowed for d in checks] == [True, True, True]
    assert spent.allowed
    assert not after.allowed
