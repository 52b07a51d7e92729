"""Local denials (SPEC §3): a bucket the store denied is denied in-process, without a
Redis call, until it can admit again (at most ``local_denials_ms``).

The process's clock is injected, so the countdown is driven, never slept through; the
store is a private redis-server, whose ``INFO commandstats`` counts the calls made.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry

from sentinel_core import (
    AnonymousIdentity,
    ConfigError,
    Decision,
    DecisionReason,
    Policy,
    Sentinel,
    TenantIdentity,
    hookimpl,
)
from sentinel_core.config._schema import load_config
from sentinel_core.decision._local_denials import LocalDenials, Remembered
from tests.conftest import make_config

MS = 1_000_000
SECOND = 1_000 * MS
TENANT = "flooding-tenant"
HOURLY = {"algorithm": "token_bucket", "rate": "1/hour", "burst": 2, "fail_mode": "closed"}


class Clock:
    """A monotonic clock in nanoseconds that moves only when told to."""

    def __init__(self) -> None:
        self.now = 10 * SECOND

    def __call__(self) -> int:
        return self.now

    def advance(self, ns: int) -> None:
        self.now += ns


# -- the table of remembered buckets, on its own ------------------------------------------


def test_an_entry_denies_until_its_wait_measured_from_before_the_request_was_sent() -> None:
    table = LocalDenials(1_000, Clock())
    table.remember((("k", 300_000),), (1,), sent_ns=0, received_ns=5 * MS, retry_us=0, reset_us=0)
    assert table.lookup(("k",), (1,), 300 * MS - 1) is not None
    assert table.lookup(("k",), (1,), 300 * MS) is None


def test_an_entry_is_trusted_for_local_denials_ms_at_most() -> None:
    table = LocalDenials(1_000, Clock())
    table.remember((("k", 3_600 * 10**6),), (1,), 0, 1, 0, 0)
    assert table.lookup(("k",), (1,), 750 * MS - 1) is not None
    assert table.lookup(("k",), (1,), 1_000 * MS) is None


def test_an_entry_cut_short_is_renewed_ahead_of_its_end_by_one_request() -> None:
    # the bucket's wait (an hour) outlasts local_denials_ms: in the entry's last quarter
    # the first request asks the store (None), the others are still answered locally
    table = LocalDenials(1_000, Clock())
    table.remember((("k", 3_600 * 10**6),), (1,), 0, 1, 0, 0)
    assert table.lookup(("k",), (1,), 750 * MS) is None
    assert [table.lookup(("k",), (1,), 750 * MS + i) is not None for i in range(5)] == [True] * 5
    assert table.lookup(("k",), (1,), 1_000 * MS - 1) is not None
    assert table.lookup(("k",), (1,), 1_000 * MS) is None, "a renewal that never came back"
    # the renewing request's own denial replaces the entry
    table.remember((("k", 3_600 * 10**6),), (1,), 750 * MS, 751 * MS, 0, 0)
    assert table.lookup(("k",), (1,), 1_400 * MS) is not None


class SignallingLock:
    """A lock that tells when a thread starts waiting for it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.waiting = threading.Event()

    def __enter__(self) -> None:
        self.waiting.set()
        self.lock.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.lock.release()


def test_of_two_requests_due_at_once_one_renews_and_the_other_is_answered_locally() -> None:
    table = LocalDenials(1_000, Clock())
    table.remember((("k", 3_600 * 10**6),), (1,), 0, 1, 0, 0)
    lock = table._lock = SignallingLock()  # type: ignore[assignment]
    second: list[Remembered | None] = []
    with lock.lock:  # the second request found the entry due and waits to renew it ...
        thread = threading.Thread(
            target=lambda: second.append(table.lookup(("k",), (1,), 800 * MS))
        )
        thread.start()
        assert lock.waiting.wait(timeout=10)
        table._entries["k"] = table._entries["k"].renewing()  # ... the first did
    thread.join(timeout=10)
    assert second[0] is not None, "the entry is still valid: answered locally"


def test_an_entry_that_ends_with_the_buckets_wait_is_not_renewed_ahead() -> None:
    # there the bucket may admit again: every request asks the store, none early
    table = LocalDenials(1_000, Clock())
    table.remember((("k", 400_000),), (1,), 0, 1, 0, 0)
    assert [table.lookup(("k",), (1,), 400 * MS - 1 - i) is not None for i in range(3)] == [
        True
    ] * 3
    assert table.lookup(("k",), (1,), 400 * MS) is None


def test_a_renewal_due_on_one_key_leaves_another_keys_denial_in_force() -> None:
    # anonymous: the network's entry is due for renewal, the device's is not
    table = LocalDenials(1_000, Clock())
    table.remember((("device", 3_600 * 10**6),), (1,), 500 * MS, 501 * MS, 0, 0)
    table.remember((("network", 3_600 * 10**6),), (1,), 0, 1, 0, 0)
    entry = table.lookup(("device", "network"), (1,), 800 * MS)
    assert entry is not None
    assert entry.until_ns == 1_500 * MS


def test_other_script_arguments_or_a_zero_wait_are_not_answered_locally() -> None:
    table = LocalDenials(1_000, Clock())
    table.remember((("k", 500_000), ("z", 0)), (1, 2), 0, 0, 0, 0)
    assert table.lookup(("k",), (1, 3), 1) is None
    assert table.lookup(("z",), (1, 2), 0) is None
    assert len(table) == 1
    table.remember((("z", 0),), (1, 2), 0, 0, 0, 0)
    assert len(table) == 1


def test_retry_after_and_reset_count_down_from_the_reply_and_stay_at_least_one() -> None:
    entry = Remembered(until_ns=SECOND, retry_at_ns=5 * SECOND, reset_at_ns=7 * SECOND, args=())
    assert [entry.retry_after_seconds(t * SECOND) for t in (0, 1, 4, 5, 6)] == [5, 4, 1, 1, 1]
    assert entry.retry_after_seconds(SECOND // 2) == 5
    assert [entry.reset_seconds(t * SECOND) for t in (0, 6, 9)] == [7, 1, 1]


def test_memory_is_bounded_the_oldest_entries_going_first() -> None:
    table = LocalDenials(1_000, Clock(), max_entries=8)
    for i in range(9):
        table.remember(((f"k{i}", 10**6),), (), 0, 0, 0, 0)
    assert len(table) == 7  # the oldest quarter of 9 (two entries) went
    assert table.lookup(("k0",), (), 1) is None
    assert table.lookup(("k1",), (), 1) is None
    assert table.lookup(("k8",), (), 1) is not None
    table.remember((("k2", 10**6),), (), 0, 0, 0, 0)  # renewed: now the youngest
    for i in range(9, 11):
        table.remember(((f"k{i}", 10**6),), (), 0, 0, 0, 0)
    assert table.lookup(("k3",), (), 1) is None
    assert table.lookup(("k2",), (), 1) is not None


def test_forget_drops_an_entry() -> None:
    table = LocalDenials(1_000, Clock())
    table.remember((("k", 10**6),), (), 0, 0, 0, 0)
    table.forget(("k", "absent"))
    assert table.lookup(("k",), (), 1) is None


# -- configuration -------------------------------------------------------------------------


def test_local_denials_ms_defaults_to_one_second_and_zero_disables() -> None:
    assert load_config(make_config("memory://", a=HOURLY)).local_denials_ms == 1_000
    config = {**make_config("memory://", a=HOURLY), "local_denials_ms": 0}
    assert load_config(config).local_denials_ms == 0
    assert not LocalDenials(0).enabled


@pytest.mark.parametrize("value", [-1, 1.5, True, 86_400_001])
def test_a_bad_local_denials_ms_is_a_config_error(value: Any) -> None:
    config = {**make_config("memory://", a=HOURLY), "local_denials_ms": value}
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert info.value.path == "local_denials_ms"


# -- through Sentinel, on a real redis-server ----------------------------------------------


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def admin(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def build(url: str, clock: Clock, local_denials_ms: int = 1_000, **policies: Any) -> Sentinel:
    config = make_config(url, **(policies or {"api__hourly": HOURLY}))
    config["local_denials_ms"] = local_denials_ms
    config["socket_timeout_ms"] = 2_000
    registry = CollectorRegistry()
    sentinel = Sentinel(config, registry=registry, entry_points=False)
    sentinel._engine.local_denials = LocalDenials(local_denials_ms, clock)
    return sentinel


def script_calls(admin: redis.Redis) -> int:
    stats = admin.info("commandstats")
    return sum(
        int(stats.get(name, {}).get("calls", 0)) for name in ("cmdstat_evalsha", "cmdstat_eval")
    )


def sample(sentinel: Sentinel, name: str, labels: dict[str, str]) -> float:
    value = sentinel_registry(sentinel).get_sample_value(name, labels)
    return 0.0 if value is None else value


def sentinel_registry(sentinel: Sentinel) -> CollectorRegistry:
    registry = sentinel.registry
    assert isinstance(registry, CollectorRegistry)
    return registry


def test_after_a_store_denial_the_flood_is_answered_without_redis(
    redis_url: str, admin: redis.Redis, clock: Clock
) -> None:
    sentinel = build(redis_url, clock)
    try:
        first = [sentinel.evaluate("api.hourly", TENANT) for _ in range(3)]
        assert [d.allowed for d in first] == [True, True, False]
        assert not first[2].local
        calls = script_calls(admin)
        flood = [sentinel.evaluate("api.hourly", TENANT) for _ in range(50)]
        assert script_calls(admin) == calls
        assert {(d.allowed, d.reason, d.remaining, d.local) for d in flood} == {
            (False, DecisionReason.RATE_LIMITED, 0, True)
        }
        assert {d.retry_after_seconds for d in flood} == {first[2].retry_after_seconds}
        assert {d.limit for d in flood} == {2}
        labels = {"endpoint_id": "api.hourly"}
        assert sample(sentinel, "sentinel_local_denials_total", labels) == 50
        denied = {**labels, "decision_reason": "rate_limited", "allowed": "false"}
        assert sample(sentinel, "sentinel_decisions_total", denied) == 51
        # Retry-After counts down with the process clock ...
        clock.advance(749 * MS)
        later = sentinel.evaluate("api.hourly", TENANT)
        assert later.local
        assert later.retry_after_seconds == first[2].retry_after_seconds
        # ... and in the last quarter of local_denials_ms one request asks the store again
        # (the hour's wait outlasts the entry), the others still answered locally.
        clock.advance(1 * MS)
        renewal = [sentinel.evaluate("api.hourly", TENANT) for _ in range(5)]
        assert [(d.local, d.allowed) for d in renewal] == [(False, False)] + [(True, False)] * 4
        assert script_calls(admin) == calls + 1
        # The store's denial renewed the entry: it answers past the old end.
        clock.advance(700 * MS)
        assert sentinel.evaluate("api.hourly", TENANT).local
        assert script_calls(admin) == calls + 1
    finally:
        sentinel.close()


def test_the_countdown_of_a_long_wait(redis_url: str, clock: Clock) -> None:
    sentinel = build(redis_url, clock, local_denials_ms=86_400_000)
    try:
        denial = [sentinel.evaluate("api.hourly", TENANT) for _ in range(3)][-1]
        assert denial.retry_after_seconds is not None
        clock.advance(1_200 * SECOND)
        local = sentinel.evaluate("api.hourly", TENANT)
        assert local.local
        assert local.retry_after_seconds == denial.retry_after_seconds - 1_200
        assert local.reset_seconds == denial.reset_seconds - 1_200
    finally:
        sentinel.close()


async def test_concurrent_coroutines_renew_an_entry_with_one_store_call(
    redis_url: str, admin: redis.Redis, clock: Clock
) -> None:
    # a flood keeps many requests in flight as an entry runs out: one asks the store
    sentinel = build(redis_url, clock)
    try:
        for _ in range(3):
            await sentinel.aevaluate("api.hourly", TENANT)
        calls = script_calls(admin)
        clock.advance(800 * MS)
        flood = await asyncio.gather(*(sentinel.aevaluate("api.hourly", TENANT) for _ in range(20)))
        assert sorted(d.local for d in flood) == [False] + [True] * 19
        assert not any(d.allowed for d in flood)
        assert script_calls(admin) == calls + 1
    finally:
        await sentinel.aclose()


async def test_aevaluate_answers_locally_too(
    redis_url: str, admin: redis.Redis, clock: Clock
) -> None:
    sentinel = build(redis_url, clock)
    try:
        first = [await sentinel.aevaluate("api.hourly", TENANT) for _ in range(3)]
        assert not first[2].allowed
        calls = script_calls(admin)
        flood = [await sentinel.aevaluate("api.hourly", TENANT) for _ in range(10)]
        assert all(d.local and not d.allowed for d in flood)
        assert script_calls(admin) == calls
    finally:
        await sentinel.aclose()


def test_zero_local_denials_ms_sends_every_denial_to_the_store(
    redis_url: str, admin: redis.Redis, clock: Clock
) -> None:
    sentinel = build(redis_url, clock, local_denials_ms=0)
    before = script_calls(admin)
    try:
        decisions = [sentinel.evaluate("api.hourly", TENANT) for _ in range(10)]
        assert [d.allowed for d in decisions] == [True, True] + [False] * 8
        assert not any(d.local for d in decisions)
        assert script_calls(admin) == before + 10
    finally:
        sentinel.close()


def test_other_tenants_and_endpoints_still_ask_the_store(redis_url: str, clock: Clock) -> None:
    sentinel = build(redis_url, clock, api__hourly=HOURLY, api__other=HOURLY)
    try:
        for _ in range(3):
            sentinel.evaluate("api.hourly", TENANT)
        assert sentinel.evaluate("api.hourly", TENANT).local
        assert sentinel.evaluate("api.hourly", "another").allowed
        assert sentinel.evaluate("api.other", TENANT).allowed
    finally:
        sentinel.close()


def test_a_shadow_policy_answered_locally_still_lets_the_request_through(
    redis_url: str, clock: Clock
) -> None:
    sentinel = build(redis_url, clock, api__hourly={**HOURLY, "shadow": True})
    try:
        decisions = [sentinel.evaluate("api.hourly", TENANT) for _ in range(5)]
        assert all(d.allowed for d in decisions)
        assert [d.would_allow for d in decisions] == [True, True, False, False, False]
        assert [d.local for d in decisions] == [False, False, False, True, True]
        assert {d.reason for d in decisions[2:]} == {DecisionReason.RATE_LIMITED}
    finally:
        sentinel.close()


class CostlierTier:
    """Resolves the policy to a cost of 2 while ``active``."""

    def __init__(self) -> None:
        self.active = False

    @hookimpl
    def sentinel_resolve_policy(
        self, endpoint_id: str, identity: Any, policy: Policy
    ) -> Policy | None:
        return dataclasses.replace(policy, cost=2) if self.active else None


def test_a_request_decided_with_other_arguments_asks_the_store(
    redis_url: str, admin: redis.Redis, clock: Clock
) -> None:
    tier = CostlierTier()
    sentinel = build(redis_url, clock)
    sentinel.plugin_manager.register(tier)
    try:
        for _ in range(3):
            sentinel.evaluate("api.hourly", TENANT)
        calls = script_calls(admin)
        tier.active = True
        assert not sentinel.evaluate("api.hourly", TENANT).local
        assert script_calls(admin) == calls + 1
    finally:
        sentinel.close()


def test_a_local_denial_takes_no_breaker_permit(redis_url: str, clock: Clock) -> None:
    sentinel = build(redis_url, clock)
    try:
        for _ in range(3):
            sentinel.evaluate("api.hourly", TENANT)
        attempt = sentinel._engine.begin(sentinel.endpoint("api.hourly"), TenantIdentity(TENANT))
        assert attempt.permit is None
        decision: Decision = attempt.short_circuit()
        assert decision.local
        assert decision.reason is DecisionReason.RATE_LIMITED
    finally:
        sentinel.close()


ANONYMOUS = {
    "algorithm": "token_bucket",
    "rate": "1/hour",
    "burst": 1,
    "identity": "anonymous",
    "network_rate": "1/hour",
    "network_burst": 3,
    "fail_mode": "closed",
}


def test_an_anonymous_device_denied_by_the_store_is_answered_locally(
    redis_url: str, clock: Clock
) -> None:
    config = make_config(redis_url, anon__login=ANONYMOUS)
    config["anonymous"] = {"cookie_secret": "c" * 32}
    config["socket_timeout_ms"] = 2_000
    sentinel = Sentinel(config, registry=CollectorRegistry(), entry_points=False)
    sentinel._engine.local_denials = LocalDenials(1_000, clock)
    device = AnonymousIdentity("device-1", "198.51.100.7", b"k" * 32)
    neighbour = AnonymousIdentity("device-2", "198.51.100.7", b"k" * 32)
    try:
        decisions = [sentinel.evaluate("anon.login", device) for _ in range(3)]
        assert [(d.allowed, d.local) for d in decisions] == [
            (True, False),
            (False, False),
            (False, True),
        ]
        # the network bucket still has room: the neighbour is admitted by the store
        assert sentinel.evaluate("anon.login", neighbour).allowed
    finally:
        sentinel.close()


def test_a_concurrency_denial_is_never_answered_locally(redis_url: str, clock: Clock) -> None:
    slots = {"algorithm": "concurrency", "limit": 1, "fail_mode": "closed"}
    sentinel = build(redis_url, clock, api__render=slots)
    try:
        held = sentinel.evaluate("api.render", TENANT)
        denials = [sentinel.evaluate("api.render", TENANT) for _ in range(3)]
        assert held.allowed
        assert [(d.allowed, d.local) for d in denials] == [(False, False)] * 3
        # the slot comes back the moment the request holding it ends
        sentinel.release(held)
        assert sentinel.evaluate("api.render", TENANT).allowed
    finally:
        sentinel.close()


def test_a_network_denied_by_the_store_is_answered_locally_for_every_device_behind_it(
    redis_url: str, admin: redis.Redis, clock: Clock
) -> None:
    config = make_config(
        redis_url,
        anon__login={**ANONYMOUS, "burst": 5, "network_rate": "1/hour", "network_burst": 2},
    )
    config["anonymous"] = {"cookie_secret": "c" * 32}
    config["socket_timeout_ms"] = 2_000
    sentinel = Sentinel(config, registry=CollectorRegistry(), entry_points=False)
    sentinel._engine.local_denials = LocalDenials(1_000, clock)
    network = "198.51.100.8"
    try:
        first = [
            sentinel.evaluate("anon.login", AnonymousIdentity("d1", network, b"k" * 32))
            for _ in range(3)
        ]
        assert [(d.allowed, d.local) for d in first] == [
            (True, False),
            (True, False),
            (False, False),
        ]
        calls = script_calls(admin)
        # a fresh device (a bot dropping its cookie) behind the same address
        fresh = sentinel.evaluate("anon.login", AnonymousIdentity("d2", network, b"k" * 32))
        assert (fresh.allowed, fresh.local) == (False, True)
        assert script_calls(admin) == calls
        # another network is not concerned
        assert sentinel.evaluate(
            "anon.login", AnonymousIdentity("d2", "198.51.100.9", b"k" * 32)
        ).allowed
    finally:
        sentinel.close()
