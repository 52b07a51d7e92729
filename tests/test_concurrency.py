"""Concurrency limits (SPEC §2 ``algorithm: "concurrency"``): at most ``limit`` requests
in flight per tenant and endpoint, held by leases in one sorted set per bucket.

Behaviour runs on the memory store and a private redis-server, through ``evaluate``
and ``aevaluate``; the Lua script is held against its Python twin; lease expiry is
shown on an injected clock (memory store) and on Redis's own clock.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry

from sentinel_core import ConfigError, Decision, DecisionReason, Sentinel, load_config
from sentinel_core._models import MICRO
from sentinel_core.decision._leases import LocalInflight, count_call, lease_call
from sentinel_core.identity._keys import tenant_identity
from sentinel_core.store._redis import MemoryStore, RedisStore
from sentinel_core.store._reference import ScriptReply
from sentinel_core.store._reference_extra import COUNT, GIVE_BACK, TAKE
from sentinel_core.store._scripts import run_reference
from tests.support.redis_server import RedisServer, free_port
from tests.support.tcp_proxy import TcpProxy


def policy(**extra: Any) -> dict[str, Any]:
    return {"algorithm": "concurrency", "limit": 2, "fail_mode": "closed", **extra}


POLICIES = {
    "reports.render": policy(lease_seconds=30),
    "reports.shadow": policy(shadow=True, limit=1),
    "reports.open": policy(fail_mode="open", fallback_limit=1),
}


def build(url: str, policies: dict[str, Any] = POLICIES, **options: Any) -> Sentinel:
    return Sentinel(
        {"redis_url": url, "socket_timeout_ms": 2000, "policies": policies, **options},
        registry=CollectorRegistry(),
        entry_points=False,
    )


@pytest.fixture(params=["memory", "redis"])
async def sentinel(request: pytest.FixtureRequest) -> AsyncIterator[Sentinel]:
    url = "memory://" if request.param == "memory" else request.getfixturevalue("redis_url")
    sentinel = build(url)
    yield sentinel
    sentinel.close()
    await sentinel.aclose()


# -- configuration -----------------------------------------------------------------------


def test_a_concurrency_policy_loads_with_its_lease_length() -> None:
    loaded = load_config({"redis_url": "memory://", "policies": POLICIES}).policies
    assert (loaded["reports.render"].limit, loaded["reports.render"].lease_seconds) == (2, 30)
    assert loaded["reports.shadow"].lease_seconds == 60
    assert loaded["reports.open"].fallback_limit == 1


@pytest.mark.parametrize(
    ("entry", "path", "message"),
    [
        (policy(rate="2/second"), "rate", "take `limit`"),
        (policy(limit=0), "limit", "between 1 and"),
        (policy(lease_seconds=0), "lease_seconds", "between 1 and"),
        (policy(fail_mode="open"), "fallback_limit", "fail-open needs a fallback_limit"),
        (policy(fail_mode="open", fallback_rate="1/second"), "fallback_rate", "fallback_limit"),
        (policy(fallback_limit=3), "fallback_limit", "fail_mode open only"),
        (policy(identity="anonymous"), "identity", "limit tenants only"),
        (policy(cost=2), "cost", "unknown key"),
        ({"algorithm": "concurrency", "fail_mode": "closed"}, "limit", "missing key"),
        ({"algorithm": "concurrency", "limit": 1}, "fail_mode", "missing key"),
    ],
)
def test_concurrency_config_errors_name_their_key(entry: Any, path: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as raised:
        load_config({"redis_url": "memory://", "policies": {"x": entry}})
    assert raised.value.path == f"policies.x.{path}"


def test_an_explicit_tenant_identity_is_accepted() -> None:
    config = {"redis_url": "memory://", "policies": {"x": policy(identity="tenant")}}
    assert load_config(config).policies["x"].limit == 2


# -- behaviour on every store ------------------------------------------------------------


@pytest.mark.parametrize("entry", ["evaluate", "aevaluate"])
async def test_limit_leases_at_once_then_429_until_one_is_released(
    sentinel: Sentinel, entry: str
) -> None:
    async def decide() -> Decision:
        if entry == "evaluate":
            return sentinel.evaluate("reports.render", "acme")
        return await sentinel.aevaluate("reports.render", "acme")

    async def release(decision: Decision) -> None:
        if entry == "evaluate":
            sentinel.release(decision)
        else:
            await sentinel.arelease(decision)

    first, second, third = [await decide() for _ in range(3)]
    assert (first.allowed, first.remaining) == (True, 1)
    assert (second.allowed, second.remaining) == (True, 0)
    assert not third.allowed
    assert third.reason is DecisionReason.RATE_LIMITED
    assert third.retry_after_seconds == 1  # a release can come at any moment
    assert 29 <= third.reset_seconds <= 30  # ... and the oldest lease ends by then
    assert third.lease is None
    assert sentinel.usage("reports.render", "acme").used == 2
    await release(first)
    await release(first)  # a second release is a no-op, not a second slot
    await release(third)  # nothing held: nothing to do
    assert sentinel.usage("reports.render", "acme").used == 1
    assert (await decide()).allowed
    assert not (await decide()).allowed
    assert (await decide_other(sentinel)).allowed  # another tenant has its own leases


async def decide_other(sentinel: Sentinel) -> Decision:
    return await sentinel.aevaluate("reports.render", "globex")


def test_a_shadow_policy_admits_everything_but_leases_only_real_slots(
    sentinel: Sentinel,
) -> None:
    held = sentinel.evaluate("reports.shadow", "acme")
    over = sentinel.evaluate("reports.shadow", "acme")
    assert held.allowed
    assert held.lease is not None
    assert over.allowed
    assert not over.would_allow
    assert over.lease is None
    sentinel.release(held)
    assert sentinel.evaluate("reports.shadow", "acme").would_allow


def test_the_lease_block_releases_after_an_exception(sentinel: Sentinel) -> None:
    def handler() -> None:
        with sentinel.lease("reports.render", "acme") as decision:
            assert decision.allowed
            raise RuntimeError("handler failed")

    with pytest.raises(RuntimeError, match="handler failed"):
        handler()
    assert sentinel.usage("reports.render", "acme").used == 0


async def test_the_async_lease_block_releases_when_its_task_is_cancelled(
    sentinel: Sentinel,
) -> None:
    inside = asyncio.Event()

    async def handler() -> None:
        async with sentinel.alease("reports.render", "acme") as decision:
            assert decision.allowed
            inside.set()
            await asyncio.Event().wait()  # a slow handler, cancelled by its client

    task = asyncio.create_task(handler())
    await inside.wait()
    assert (await sentinel.ausage("reports.render", "acme")).used == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (await sentinel.ausage("reports.render", "acme")).used == 0


def test_usage_is_for_quota_and_concurrency_policies_only() -> None:
    sentinel = build(
        "memory://",
        {"tb": {"algorithm": "token_bucket", "rate": "1/second", "fail_mode": "closed"}},
    )
    with pytest.raises(ValueError, match="'tb' is a token_bucket policy"):
        sentinel.usage("tb", "acme")


def test_concurrency_headers_describe_concurrent_requests(sentinel: Sentinel) -> None:
    allowed = sentinel.http.outcome(sentinel.evaluate("reports.render", "acme"), None)
    assert dict(allowed.headers)["RateLimit-Policy"].startswith(
        '"reports.render";q=2;qu="concurrent-requests";pk=:'
    )
    assert dict(allowed.headers)["RateLimit"].startswith('"reports.render";r=1;pk=:')
    sentinel.evaluate("reports.render", "acme")
    denied = sentinel.http.outcome(sentinel.evaluate("reports.render", "acme"), None)
    assert denied.status == 429
    assert dict(denied.headers)["Retry-After"] == "1"


# -- lease expiry --------------------------------------------------------------------------


def test_a_lease_never_released_expires_after_lease_seconds_on_the_injected_clock() -> None:
    now = [1_800_000_000 * MICRO]
    store = MemoryStore(lambda: now[0])
    sentinel = build("memory://")
    policy_ = sentinel.policy("reports.render")

    names = iter(range(100))

    def take() -> ScriptReply:
        call = lease_call(policy_, tenant_identity("acme"), f"lease{next(names)}")
        return ScriptReply.from_raw(store.run(call))

    assert take().allowed
    assert take().allowed
    now[0] += 29 * MICRO
    assert not take().allowed
    now[0] += MICRO  # 30 s: both expired, the next take prunes them
    assert take().remaining == 1
    key = tenant_identity("acme").bucket_keys(policy_)[0]
    assert store.get(key) is not None
    assert store.get(key).count("=") == 1


@pytest.mark.slow
def test_a_lease_expires_on_redis_time_and_is_pruned(redis_url: str) -> None:
    sentinel = build(redis_url, {"x": policy(limit=1, lease_seconds=1)})
    client = redis.Redis.from_url(redis_url)
    try:
        assert sentinel.evaluate("x", "acme").allowed  # never released: its process "died"
        assert not sentinel.evaluate("x", "acme").allowed
        key = tenant_identity("acme").bucket_keys(sentinel.policy("x"))[0]
        assert 0 < client.pttl(key) <= 1_000  # the set itself expires with its last lease
        deadline = time.monotonic() + 5
        while not sentinel.evaluate("x", "acme").allowed:
            assert time.monotonic() < deadline
            time.sleep(0.05)  # Redis TIME cannot be injected
        assert client.zcard(key) == 1  # the dead lease was pruned by the same call
    finally:
        sentinel.close()
        client.close()


# -- the script against its twin ------------------------------------------------------------


def test_the_lua_script_matches_the_reference_step_by_step(redis_url: str) -> None:
    store = RedisStore(redis_url, 2_000)
    client = redis.Redis.from_url(redis_url)
    policy_ = load_config({"redis_url": "memory://", "policies": POLICIES}).policies[
        "reports.render"
    ]
    tenant = tenant_identity("acme")
    key = tenant.bucket_keys(policy_)[0]
    steps = [
        lease_call(policy_, tenant, "a"),
        lease_call(policy_, tenant, "b"),
        lease_call(policy_, tenant, "c"),  # denied
        count_call(policy_, tenant),
        lease_call(policy_, tenant, "a", GIVE_BACK),
        lease_call(policy_, tenant, "zz", GIVE_BACK),  # unknown lease: nothing to remove
        lease_call(policy_, tenant, "c"),
        lease_call(policy_, tenant, "c", COUNT),
    ]
    try:
        client.zadd(key, {"dead": 1})  # a lease that expired long ago
        client.pexpire(key, 60_000)
        for call in steps:
            members = client.zrange(key, 0, -1, withscores=True)
            state = ",".join(f"{m.decode()}={int(s)}" for m, s in members) or None
            reply = ScriptReply.from_raw(store.run(call))
            expected, writes = run_reference(call, [state], reply.now_us)
            assert reply == expected, call
            after = {m.decode(): int(s) for m, s in client.zrange(key, 0, -1, withscores=True)}
            if writes is not None:
                assert after == leases(writes[0].value)
        assert steps[0].args[2] == TAKE
        assert steps[-1].args[2] == COUNT
    finally:
        store.close()
        client.close()


def leases(value: str) -> dict[str, int]:
    """The memory store's spelling of a sorted set, as a dict."""
    pairs = (item.split("=") for item in value.split(",") if item)
    return {name: int(expiry) for name, expiry in pairs}


def test_the_reference_of_an_empty_bucket_writes_nothing_on_a_count() -> None:
    policy_ = load_config({"redis_url": "memory://", "policies": POLICIES}).policies[
        "reports.render"
    ]
    call = count_call(policy_, tenant_identity("acme"))
    reply, writes = run_reference(call, [None], 5)
    assert reply.allowed
    assert writes is None
    reply, writes = run_reference(
        lease_call(policy_, tenant_identity("a"), "x", GIVE_BACK), [None], 5
    )
    assert writes is None


# -- Redis unavailable -----------------------------------------------------------------------


def test_failing_open_caps_requests_in_flight_per_process() -> None:
    sentinel = build(f"redis://127.0.0.1:{free_port()}/0", socket_timeout_ms=50)
    first = sentinel.evaluate("reports.open", "acme")
    assert first.allowed
    assert first.reason is DecisionReason.REDIS_CONNECTION_ERROR
    assert first.lease is not None
    over = sentinel.evaluate("reports.open", "globex")  # the cap is per process, not tenant
    assert not over.allowed
    assert over.reason is DecisionReason.EMERGENCY_LOCAL_LIMIT
    assert over.retry_after_seconds == 1
    headers = dict(sentinel.http.outcome(first, None).headers)
    assert headers["RateLimit-Policy"].startswith('"reports.open";q=1;qu="concurrent-requests"')
    sentinel.release(first)
    assert sentinel._engine.inflight.count("reports.open") == 0
    assert sentinel.evaluate("reports.open", "acme").allowed
    closed = sentinel.evaluate("reports.render", "acme")
    assert not closed.allowed
    assert closed.reason is DecisionReason.FAIL_CLOSED
    sentinel.close()


def test_local_inflight_counts_per_endpoint() -> None:
    inflight = LocalInflight()
    verdict, lease = inflight.acquire("a", 2)
    assert verdict.allowed
    assert verdict.remaining == 1
    assert lease is not None
    assert repr(lease) == "Lease('a', local, held=True)"
    assert inflight.acquire("b", 1)[0].allowed
    assert lease.end() is None
    assert not lease.held
    assert inflight.count("a") == 0


@pytest.fixture
def own_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.close()


def test_a_release_that_fails_is_logged_and_the_lease_left_to_expire(
    own_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    sentinel = build(own_server.url, socket_timeout_ms=200)
    decision = sentinel.evaluate("reports.render", "acme")
    own_server.stop()
    with caplog.at_level(logging.WARNING, logger="sentinel"):
        sentinel.release(decision)
    assert "not handed back" in caplog.text
    assert "lease_seconds=30" in caplog.text
    sentinel.close()


async def test_an_async_release_that_fails_is_logged(
    own_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    sentinel = build(own_server.url, socket_timeout_ms=200)
    decision = await sentinel.aevaluate("reports.render", "acme")
    own_server.stop()
    with caplog.at_level(logging.WARNING, logger="sentinel"):
        await sentinel.arelease(decision)
    assert "not handed back" in caplog.text
    await sentinel.aclose()


@pytest.mark.parametrize("entry", ["release", "arelease"])
async def test_no_release_call_while_the_breaker_is_open(redis_url: str, entry: str) -> None:
    sentinel = build(redis_url, breaker={"failure_threshold": 1})
    decision = sentinel.evaluate("reports.render", "acme")
    permit = sentinel._breaker.acquire()
    assert permit is not None
    sentinel._breaker.record_failure(permit)  # OPEN: Redis is left alone
    if entry == "release":
        sentinel.release(decision)
    else:
        await sentinel.arelease(decision)
    assert not decision.lease.held  # type: ignore[union-attr]
    assert sentinel.usage("reports.render", "acme").used == 1  # left to expire
    sentinel.close()
    await sentinel.aclose()


def test_release_tolerates_any_decision(sentinel: Sentinel) -> None:
    other: Callable[[Decision], None] = sentinel.release
    config = {"tb": {"algorithm": "token_bucket", "rate": "1/second", "fail_mode": "closed"}}
    plain = build("memory://", config).evaluate("tb", "acme")
    other(plain)
    assert plain.lease is None


async def test_a_decision_cancelled_in_flight_hands_back_the_lease_it_may_have_taken(
    redis_server: RedisServer, redis_url: str
) -> None:
    # Every command reaches Redis 0.3 s late: the task is cancelled while its script
    # call is on the way, then the script takes the lease anyway.
    with TcpProxy(redis_server.port, "delay", delay_seconds=0.3) as proxy:
        sentinel = build(proxy.url)
        await sentinel.acheck()
        task = asyncio.create_task(sentinel.aevaluate("reports.render", "acme"))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.7)  # both delayed calls land (a real proxy's real delay)
        await sentinel.aclose()
    reader = build(redis_url)
    assert reader.usage("reports.render", "acme").used == 0
    assert reader.evaluate("reports.render", "acme").remaining == 1
    reader.close()


async def test_a_cancelled_token_bucket_decision_needs_no_hand_back(
    redis_server: RedisServer,
) -> None:
    config = {"tb": {"algorithm": "token_bucket", "rate": "1/second", "fail_mode": "closed"}}
    with TcpProxy(redis_server.port, "delay", delay_seconds=0.3) as proxy:
        sentinel = build(proxy.url, config)
        await sentinel.acheck()
        proxy.reset_counters()
        task = asyncio.create_task(sentinel.aevaluate("tb", "acme"))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.4)
        assert len(proxy.commands) == 1  # the EVALSHA alone
        await sentinel.aclose()


async def test_a_release_cancelled_on_its_way_still_hands_the_lease_back(redis_url: str) -> None:
    # Starlette cancels a streamed response's task as soon as its client closes, which
    # may be while the lease is going back: here before the release is even sent (the
    # releasing Sentinel is still connecting).
    taker, releaser = build(redis_url), build(redis_url)
    decision = taker.evaluate("reports.render", "acme")
    task = asyncio.create_task(releaser.arelease(decision))
    await asyncio.sleep(0)  # the release starts, and waits on its first connection
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    deadline = time.monotonic() + 5
    while taker.usage("reports.render", "acme").used:
        assert time.monotonic() < deadline, "the cancelled release never reached Redis"
        await asyncio.sleep(0.01)  # the shielded release finishing on its own
    taker.close()
    await releaser.aclose()
