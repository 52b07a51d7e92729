"""A data error is not an outage (issue 15): a bucket value the script cannot use is
read as a full bucket and overwritten, never a Redis error, never a breaker failure."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from prometheus_client import CollectorRegistry

from sentinel_core import Sentinel
from sentinel_core._models import MICRO, DecisionReason
from sentinel_core.identity._keys import AnonymousIdentity, TenantIdentity
from sentinel_core.resilience._breaker import BreakerState
from tests.conftest import make_config
from tests.support.redis_server import RedisServer

POLICIES = {
    "tb": {
        "algorithm": "token_bucket",
        "rate": "1/hour",
        "burst": 3,
        "fail_mode": "open",
        "fallback_rate": "1/second",
    },
    "sw": {"algorithm": "sliding_window", "rate": "3/hour", "fail_mode": "closed"},
}


@pytest.fixture
def client(flushed_client: redis.Redis) -> redis.Redis:
    return flushed_client


@pytest.fixture
def sentinel(redis_server: RedisServer) -> Iterator[Sentinel]:
    config = make_config(redis_server.url, **POLICIES)
    config["breaker"] = {"failure_threshold": 2, "open_seconds": 30}
    sentinel = Sentinel(config, registry=CollectorRegistry(), entry_points=False)
    yield sentinel
    sentinel.close()


def key_of(sentinel: Sentinel, endpoint_id: str, tenant: str) -> str:
    (key,) = TenantIdentity(tenant).bucket_keys(sentinel.policy(endpoint_id))
    return key


@pytest.mark.parametrize("endpoint_id", ["tb", "sw"])
@pytest.mark.parametrize("kind", ["list", "hash"])
def test_a_wrongtype_bucket_neither_fails_nor_opens_the_breaker(
    sentinel: Sentinel, client: redis.Redis, endpoint_id: str, kind: str
) -> None:
    key = key_of(sentinel, endpoint_id, "broken")
    if kind == "list":
        client.rpush(key, "a", "b")
    else:
        client.hset(key, "a", "b")
    # more calls than the breaker's threshold: every one is a decision of the script
    first = sentinel.evaluate(endpoint_id, "broken")
    assert first.reason is DecisionReason.ALLOWED
    assert client.type(key) == b"string"  # overwritten by the admission
    for _ in range(4):
        sentinel.evaluate(endpoint_id, "broken")
    assert sentinel.breaker_state is BreakerState.CLOSED
    assert sentinel.evaluate(endpoint_id, "someone-else").reason is DecisionReason.ALLOWED


def test_a_wrongtype_bucket_left_by_a_denial_is_still_no_failure(
    sentinel: Sentinel, client: redis.Redis, redis_server: RedisServer
) -> None:
    """The anonymous AND denied by its network bucket writes nothing: the device key
    stays a list, and every decision still comes from the script."""
    config = make_config(
        redis_server.url,
        login={
            "algorithm": "token_bucket",
            "rate": "1/hour",
            "burst": 1,
            "fail_mode": "closed",
            "identity": "anonymous",
            "network_rate": "1/hour",
            "network_burst": 1,
        },
    )
    config["anonymous"] = {"cookie_secret": "s" * 32}
    config["breaker"] = {"failure_threshold": 1, "open_seconds": 30}
    anonymous = Sentinel(config, registry=CollectorRegistry(), entry_points=False)
    try:
        first = AnonymousIdentity("device-a", "ipv4:192.0.2.1", b"k" * 32)
        second = AnonymousIdentity("device-b", "ipv4:192.0.2.1", b"k" * 32)
        assert anonymous.evaluate("login", first).allowed
        device_key, _ = second.bucket_keys(anonymous.policy("login"))
        client.rpush(device_key, "x")
        for _ in range(3):
            assert anonymous.evaluate("login", second).reason is DecisionReason.RATE_LIMITED
        assert client.type(device_key) == b"list"
        assert anonymous.breaker_state is BreakerState.CLOSED
    finally:
        anonymous.close()


@pytest.mark.parametrize("endpoint_id", ["tb", "sw"])
def test_garbage_is_a_full_bucket(
    sentinel: Sentinel, client: redis.Redis, endpoint_id: str
) -> None:
    key = key_of(sentinel, endpoint_id, "garbage")
    client.set(key, "not:a:bucket")
    assert [sentinel.evaluate(endpoint_id, "garbage").allowed for _ in range(4)] == [
        True,
        True,
        True,
        False,
    ]


def server_time_us(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * MICRO + int(micros)


def test_a_future_timestamp_is_never_a_huge_retry_after(
    sentinel: Sentinel, client: redis.Redis
) -> None:
    """The issue's reproduction gave ``Retry-After: 98203716906``."""
    key = key_of(sentinel, "tb", "future")
    client.set(key, str(server_time_us(client) + 98_203_716_906 * MICRO))
    decision = sentinel.evaluate("tb", "future")
    assert decision.allowed  # further ahead than an empty bucket: read as a full one
    assert int(client.get(key) or 0) <= server_time_us(client) + 3_600 * MICRO
    for _ in range(3):
        decision = sentinel.evaluate("tb", "future")
    assert not decision.allowed
    assert decision.retry_after_seconds is not None
    assert decision.retry_after_seconds <= 3_600  # one request's refill: the horizon


def test_a_future_window_is_never_a_huge_retry_after(
    sentinel: Sentinel, client: redis.Redis
) -> None:
    key = key_of(sentinel, "sw", "future")
    client.set(key, "3:3:99999999999")
    decision = sentinel.evaluate("sw", "future")
    assert decision.allowed
    for _ in range(3):
        decision = sentinel.evaluate("sw", "future")
    assert not decision.allowed
    assert decision.retry_after_seconds is not None
    assert decision.retry_after_seconds <= 3 * 3_600
