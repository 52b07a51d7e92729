"""The limiter's behaviour, one suite for every store (SPEC §2, §3).

Every behavioural test runs on the embedded ``memory://`` store and on a private
redis-server, and through both entry points: ``evaluate`` (threads) and ``aevaluate``
(asyncio). The Redis-only tests at the end look at the keys themselves.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry

from sentinel_core import (
    Decision,
    DecisionReason,
    Policy,
    Sentinel,
    TenantIdentity,
    UnknownEndpointError,
    hookimpl,
)
from sentinel_core.identity._keys import compact_hash

HOUR = 3_600


def _policy(algorithm: str, rate: str, **extra: Any) -> dict[str, Any]:
    return {"algorithm": algorithm, "rate": rate, "fail_mode": "closed", **extra}


POLICIES: dict[str, dict[str, Any]] = {
    # five per hour: nothing refills while a test runs
    "tb.burst": _policy("token_bucket", "1/hour", burst=5),
    "sw.burst": _policy("sliding_window", "5/hour"),
    # fast ones: a denial's wait is well under a second, Retry-After must still be >= 1
    "tb.fast": _policy("token_bucket", "10/second", burst=1),
    "sw.fast": _policy("sliding_window", "1/second"),
    "tb.cost": _policy("token_bucket", "1/hour", burst=10, cost=3),
    "sw.cost": _policy("sliding_window", "10/hour", cost=3),
    "tb.shadow": _policy("token_bucket", "1/hour", burst=2, shadow=True),
    "sw.shadow": _policy("sliding_window", "2/hour", shadow=True),
}
ALGORITHMS = ["tb", "sw"]

Decide = Callable[[str, str], Awaitable[Decision]]


# -- fixtures ----------------------------------------------------------------------------


@pytest.fixture(params=["memory", "redis"])
def store_url(request: pytest.FixtureRequest) -> str:
    """``memory://``, or the private redis-server (emptied for this test)."""
    if request.param == "memory":
        return "memory://"
    url: str = request.getfixturevalue("redis_url")
    return url


def build(url: str, policies: dict[str, dict[str, Any]], **options: Any) -> Sentinel:
    # A generous budget: these tests are about Redis's answers, and a loaded CI machine
    # must not turn one into a redis_timeout (failure paths have their own tests).
    return Sentinel(
        {"redis_url": url, "socket_timeout_ms": 2000, "policies": policies},
        registry=CollectorRegistry(),
        entry_points=False,
        **options,
    )


@pytest.fixture
async def make_sentinel(store_url: str) -> AsyncIterator[Callable[..., Sentinel]]:
    """Builds Sentinels on this test's store, and closes them (sync and async clients)."""
    built: list[Sentinel] = []

    def make(policies: dict[str, dict[str, Any]] = POLICIES, **options: Any) -> Sentinel:
        sentinel = build(store_url, policies, **options)
        built.append(sentinel)
        return sentinel

    yield make
    for sentinel in built:
        sentinel.close()
        await sentinel.aclose()


@pytest.fixture
def sentinel(make_sentinel: Callable[..., Sentinel]) -> Sentinel:
    return make_sentinel()


@pytest.fixture(params=["evaluate", "aevaluate"])
def decide(request: pytest.FixtureRequest, sentinel: Sentinel) -> Decide:
    """One decision through ``evaluate`` or ``aevaluate``, awaited the same way."""
    if request.param == "evaluate":

        async def call(endpoint_id: str, tenant: str) -> Decision:
            return sentinel.evaluate(endpoint_id, tenant)

    else:

        async def call(endpoint_id: str, tenant: str) -> Decision:
            return await sentinel.aevaluate(endpoint_id, tenant)

    return call


async def decide_many(decide: Decide, endpoint_id: str, tenant: str, times: int) -> list[Decision]:
    return [await decide(endpoint_id, tenant) for _ in range(times)]


def assert_denied(decision: Decision) -> None:
    """A rate-limited denial, with the fields SPEC §3/§4 promise on every denial."""
    assert decision.allowed is False
    assert decision.would_allow is False
    assert decision.reason is DecisionReason.RATE_LIMITED
    assert decision.remaining == 0
    assert type(decision.retry_after_seconds) is int
    assert decision.retry_after_seconds >= 1
    assert type(decision.reset_seconds) is int
    assert decision.reset_seconds >= 1


def assert_allowed(decision: Decision) -> None:
    assert decision.allowed is True
    assert decision.would_allow is True
    assert decision.reason is DecisionReason.ALLOWED
    assert decision.retry_after_seconds is None
    assert type(decision.remaining) is int
    assert type(decision.reset_seconds) is int


# -- bursts --------------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ALGORITHMS)
async def test_burst_is_admitted_then_denied(decide: Decide, algorithm: str) -> None:
    endpoint_id = f"{algorithm}.burst"
    decisions = await decide_many(decide, endpoint_id, "tenant-a", 8)

    for decision in decisions[:5]:
        assert_allowed(decision)
    for decision in decisions[5:]:
        assert_denied(decision)
    assert [d.remaining for d in decisions[:5]] == [4, 3, 2, 1, 0]
    assert {d.limit for d in decisions} == {5}
    assert {d.endpoint_id for d in decisions} == {endpoint_id}
    assert {d.policy.endpoint_id for d in decisions} == {endpoint_id}

    if algorithm == "tb":
        # one token an hour: full again after one hour per missing token
        assert [d.reset_seconds for d in decisions[:5]] == [k * HOUR for k in range(1, 6)]
        assert {d.retry_after_seconds for d in decisions[5:]} == {HOUR}
    else:
        # the window ends within the hour; a full window of 5 fades to admit within 1.2 h
        assert all(1 <= d.reset_seconds <= HOUR for d in decisions[:5])
        retry_afters = [d.retry_after_seconds or 0 for d in decisions[5:]]
        assert all(HOUR // 5 <= seconds <= 6 * HOUR // 5 for seconds in retry_afters)
        # a denial's reset is never earlier than its Retry-After (RateLimit's t, SPEC §4)
        assert all(d.reset_seconds >= (d.retry_after_seconds or 0) for d in decisions[5:])


@pytest.mark.parametrize("algorithm", ALGORITHMS)
async def test_retry_after_is_a_whole_second_or_more_even_when_the_wait_is_shorter(
    decide: Decide, algorithm: str
) -> None:
    decisions = await decide_many(decide, f"{algorithm}.fast", "tenant-a", 40)
    denials = [d for d in decisions if not d.allowed]
    assert denials, "40 calls in a row never exhausted a 1-request bucket"
    for decision in denials:
        assert_denied(decision)
        assert decision.retry_after_seconds is not None
        assert decision.retry_after_seconds <= 2  # and not absurdly long either


# -- isolation -----------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ALGORITHMS)
async def test_tenants_have_separate_buckets(decide: Decide, algorithm: str) -> None:
    endpoint_id = f"{algorithm}.burst"
    await decide_many(decide, endpoint_id, "tenant-a", 5)
    assert_denied(await decide(endpoint_id, "tenant-a"))

    other = await decide(endpoint_id, "tenant-b")
    assert_allowed(other)
    assert other.remaining == 4
    assert other.identity_hash != (await decide(endpoint_id, "tenant-a")).identity_hash


async def test_endpoints_have_separate_buckets(decide: Decide) -> None:
    await decide_many(decide, "tb.burst", "tenant-a", 5)
    assert_denied(await decide("tb.burst", "tenant-a"))
    assert_allowed(await decide("sw.burst", "tenant-a"))
    assert_allowed(await decide("tb.cost", "tenant-a"))


@pytest.mark.parametrize("algorithm", ALGORITHMS)
async def test_evaluate_and_aevaluate_share_one_bucket(sentinel: Sentinel, algorithm: str) -> None:
    endpoint_id = f"{algorithm}.burst"
    for _ in range(3):
        assert_allowed(sentinel.evaluate(endpoint_id, "tenant-a"))
    for _ in range(2):
        assert_allowed(await sentinel.aevaluate(endpoint_id, "tenant-a"))
    assert_denied(sentinel.evaluate(endpoint_id, "tenant-a"))
    assert_denied(await sentinel.aevaluate(endpoint_id, "tenant-a"))


# -- policy version --------------------------------------------------------------------------


class VersionPlugin:
    """Resolves every policy at ``version``: what bumping it in the config does."""

    def __init__(self) -> None:
        self.version = 1

    @hookimpl
    def sentinel_resolve_policy(
        self, endpoint_id: str, identity: object, policy: Policy
    ) -> Policy | None:
        return dataclasses.replace(policy, version=self.version)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("asynchronous", [False, True])
async def test_bumping_the_policy_version_gives_a_fresh_bucket(
    make_sentinel: Callable[..., Sentinel], algorithm: str, asynchronous: bool
) -> None:
    plugin = VersionPlugin()
    sentinel = make_sentinel(plugins=[plugin])
    endpoint_id = f"{algorithm}.burst"

    async def decide() -> Decision:
        if asynchronous:
            return await sentinel.aevaluate(endpoint_id, "tenant-a")
        return sentinel.evaluate(endpoint_id, "tenant-a")

    for _ in range(5):
        assert_allowed(await decide())
    assert_denied(await decide())

    plugin.version = 2
    fresh = await decide()
    assert_allowed(fresh)
    assert (fresh.remaining, fresh.policy.version) == (4, 2)

    plugin.version = 1  # the old bucket is still there, still empty
    assert_denied(await decide())


# -- cost ------------------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ALGORITHMS)
async def test_cost_three_admits_floor_of_limit_over_three(decide: Decide, algorithm: str) -> None:
    decisions = await decide_many(decide, f"{algorithm}.cost", "tenant-a", 6)
    assert [d.allowed for d in decisions] == [True, True, True, False, False, False]
    assert [d.remaining for d in decisions[:3]] == [7, 4, 1]
    assert {d.limit for d in decisions} == {10}
    for decision in decisions[3:]:
        assert decision.reason is DecisionReason.RATE_LIMITED
        assert decision.retry_after_seconds is not None
        assert decision.retry_after_seconds >= 1


# -- shadow mode -----------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ALGORITHMS)
async def test_shadow_policy_never_denies_but_reports_the_verdict(
    decide: Decide, algorithm: str
) -> None:
    endpoint_id = f"{algorithm}.shadow"
    decisions = await decide_many(decide, endpoint_id, "tenant-a", 5)

    for decision in decisions[:2]:
        assert decision.allowed is True
        assert decision.would_allow is True
        assert decision.reason is DecisionReason.ALLOWED
        assert decision.shadow is True
    for decision in decisions[2:]:
        assert decision.allowed is True  # the request goes through...
        assert decision.would_allow is False  # ...but enforcing would have denied it
        assert decision.reason is DecisionReason.RATE_LIMITED
        assert decision.shadow is True
        assert decision.remaining == 0
        assert decision.retry_after_seconds is not None
        assert decision.retry_after_seconds >= 1


async def test_enforcing_policy_reports_shadow_false(decide: Decide) -> None:
    decision = await decide("tb.burst", "tenant-a")
    assert decision.shadow is False


# -- unknown endpoints -----------------------------------------------------------------------


async def test_unknown_endpoint_id_raises(decide: Decide) -> None:
    with pytest.raises(UnknownEndpointError) as info:
        await decide("tb.brust", "tenant-a")
    assert info.value.endpoint_id == "tb.brust"
    assert "tb.brust" in str(info.value)
    assert isinstance(info.value, KeyError)


# -- Redis only: what the keys look like -----------------------------------------------------

KEY_FORMAT = re.compile(
    r"sentinel:v1:\{(?P<hash>[A-Za-z0-9_-]{22})\}:(?P<endpoint>[^:]+):(?P<version>\d+)"
)


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
async def redis_sentinel(redis_url: str) -> AsyncIterator[Sentinel]:
    sentinel = build(redis_url, POLICIES)
    yield sentinel
    sentinel.close()
    await sentinel.aclose()


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("asynchronous", [False, True])
async def test_denied_call_leaves_the_key_and_its_ttl_untouched(
    redis_sentinel: Sentinel, redis_client: redis.Redis, algorithm: str, asynchronous: bool
) -> None:
    endpoint_id = f"{algorithm}.burst"
    for _ in range(5):
        assert_allowed(redis_sentinel.evaluate(endpoint_id, "tenant-a"))
    (key,) = TenantIdentity("tenant-a").bucket_keys(redis_sentinel.policy(endpoint_id))
    value_before, pttl_before = redis_client.get(key), redis_client.pttl(key)
    assert value_before is not None
    assert pttl_before > 0

    for _ in range(3):
        if asynchronous:
            assert_denied(await redis_sentinel.aevaluate(endpoint_id, "tenant-a"))
        else:
            assert_denied(redis_sentinel.evaluate(endpoint_id, "tenant-a"))

    assert redis_client.get(key) == value_before
    assert 0 < redis_client.pttl(key) <= pttl_before  # only time passed: never extended


async def test_every_key_has_a_ttl(redis_sentinel: Sentinel, redis_client: redis.Redis) -> None:
    tenants = ["tenant-a", "tenant-b", "tenant-c"]
    endpoints = [name for name in POLICIES if not name.endswith(".fast")]
    for tenant in tenants:
        for endpoint_id in endpoints:
            redis_sentinel.evaluate(endpoint_id, tenant)
            await redis_sentinel.aevaluate(endpoint_id, tenant)

    keys = list(redis_client.scan_iter("*"))
    assert len(keys) == len(tenants) * len(endpoints)
    for key in keys:
        assert redis_client.pttl(key) > 0, key


async def test_no_key_or_value_contains_the_raw_identity(
    redis_sentinel: Sentinel, redis_client: redis.Redis
) -> None:
    tenant = "Quokka-Tenant-7781@example.org"
    for endpoint_id in POLICIES:
        redis_sentinel.evaluate(endpoint_id, tenant)
        await redis_sentinel.aevaluate(endpoint_id, tenant)

    keys = list(redis_client.scan_iter("*"))
    assert keys
    for key in keys:
        assert "quokka" not in key.lower()
        assert "7781" not in key
        value = redis_client.get(key)
        assert value is not None
        assert "quokka" not in value.lower()


@pytest.mark.parametrize("version", [1, 7])
def test_tenant_key_format(redis_url: str, redis_client: redis.Redis, version: int) -> None:
    tenant = "Quokka-Tenant-7781@example.org"
    policies = {"pdftalk.ingest": _policy("sliding_window", "10/minute", version=version)}
    sentinel = build(redis_url, policies)
    try:
        sentinel.evaluate("pdftalk.ingest", tenant)
    finally:
        sentinel.close()

    (key,) = redis_client.scan_iter("*")
    assert key == (f"sentinel:v1:{{{compact_hash(tenant)}}}:pdftalk.ingest:{version}")
    match = KEY_FORMAT.fullmatch(key)
    assert match is not None
    assert match["endpoint"] == "pdftalk.ingest"
    assert match["version"] == str(version)


async def test_version_bump_in_the_config_moves_to_a_new_key(
    redis_url: str, redis_client: redis.Redis
) -> None:
    old = build(redis_url, {"tb.burst": POLICIES["tb.burst"]})
    new = build(redis_url, {"tb.burst": {**POLICIES["tb.burst"], "version": 2}})
    try:
        for _ in range(5):
            assert_allowed(old.evaluate("tb.burst", "tenant-a"))
        assert_denied(old.evaluate("tb.burst", "tenant-a"))

        assert_allowed(new.evaluate("tb.burst", "tenant-a"))
        assert_allowed(await new.aevaluate("tb.burst", "tenant-a"))
        assert_denied(old.evaluate("tb.burst", "tenant-a"))
    finally:
        for sentinel in (old, new):
            sentinel.close()
            await sentinel.aclose()

    versions = sorted(key.rsplit(":", 1)[1] for key in redis_client.scan_iter("*"))
    assert versions == ["1", "2"]
