"""Fleet-wide fail-open (SPEC §2 ``fallback_scope: "fleet"``): the configuration, the
heartbeat's script on a real Redis, the counts each process keeps, and the emergency
limiter taking its share of ``fallback_rate`` when Redis fails. Several `Sentinel`
instances on one Redis stand for several processes (each instance is one member of the
fleet: it has its own emergency limiter); the real multi-process servers are in
tests/realserver/test_fleet_outage.py."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from sentinel_core import ConfigError, DecisionReason, Rate, Sentinel
from sentinel_core._fleet import FleetPlugin, Heartbeat, fleet_of
from sentinel_core._models import FallbackScope
from sentinel_core.config._schema import load_config
from sentinel_core.resilience._emergency import EmergencyLimiter, emergency_capacity_micro
from sentinel_core.resilience._fleet import FleetShare
from sentinel_core.store._connect import open_fleet_store
from sentinel_core.store._fleet import FLEET_SHA, fleet_key
from tests.conftest import make_config
from tests.support.redis_server import RedisServer, free_port
from tests.support.tcp_proxy import TcpProxy

SECOND = 1_000_000_000
MICRO = 1_000_000
FAIL_OPEN = {
    "algorithm": "token_bucket",
    "rate": "100/second",
    "fail_mode": "open",
    "fallback_rate": "8/second",
}
FLEET = {**FAIL_OPEN, "fallback_scope": "fleet"}


class ClockNs:
    def __init__(self) -> None:
        self.now = 10 * SECOND

    def __call__(self) -> int:
        return self.now


class Clock:
    """The seconds twin of `ClockNs` for a `Sentinel`'s ``clock``."""

    def __init__(self) -> None:
        self.now = 10.0

    def __call__(self) -> float:
        return self.now


def heartbeat_of(sentinel: Sentinel) -> Heartbeat:
    plugin = sentinel.plugin_manager.get_plugin("sentinel.fleet")
    assert isinstance(plugin, FleetPlugin)
    return plugin.heartbeat


def fleet_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "sentinel-fleet-heartbeat"]


# -- configuration -------------------------------------------------------------------


def test_fallback_scope_defaults_to_process_and_the_heartbeat_to_five_seconds() -> None:
    config = load_config(make_config("memory://", api__x=FAIL_OPEN))
    assert config.policies["api.x"].fallback_scope is FallbackScope.PROCESS
    assert config.fleet_heartbeat_seconds == 5


@pytest.mark.parametrize(
    "policy",
    [
        FLEET,
        {**FLEET, "algorithm": "sliding_window"},
        {
            "algorithm": "quota",
            "rate": "100/day",
            "fail_mode": "open",
            "fallback_rate": "1/second",
            "fallback_scope": "fleet",
        },
        {**FAIL_OPEN, "fallback_scope": "process"},
    ],
)
def test_fallback_scope_is_read_on_fail_open_policies(policy: dict[str, Any]) -> None:
    config = load_config({**make_config("memory://", api__x=policy), "fleet_heartbeat_seconds": 2})
    assert config.policies["api.x"].fallback_scope.value == policy["fallback_scope"]
    assert config.fleet_heartbeat_seconds == 2


@pytest.mark.parametrize(
    ("config", "path", "message"),
    [
        (
            make_config("memory://", api__x={**FAIL_OPEN, "fallback_scope": "cluster"}),
            "policies.api.x.fallback_scope",
            "expected 'process' or 'fleet', got 'cluster'",
        ),
        (
            make_config("memory://", api__x={**FAIL_OPEN, "fallback_scope": ["fleet"]}),
            "policies.api.x.fallback_scope",
            "expected 'process' or 'fleet'",
        ),
        (
            make_config(
                "memory://",
                api__x={
                    "algorithm": "token_bucket",
                    "rate": "1/second",
                    "fail_mode": "closed",
                    "fallback_scope": "fleet",
                },
            ),
            "policies.api.x.fallback_scope",
            "applies to fail_mode open only",
        ),
        (
            make_config(
                "memory://",
                api__x={
                    "algorithm": "quota",
                    "rate": "5/day",
                    "fail_mode": "closed",
                    "fallback_scope": "process",
                },
            ),
            "policies.api.x.fallback_scope",
            "applies to fail_mode open only",
        ),
        (
            make_config(
                "memory://",
                api__x={
                    "algorithm": "concurrency",
                    "limit": 2,
                    "fail_mode": "open",
                    "fallback_limit": 1,
                    "fallback_scope": "fleet",
                },
            ),
            "policies.api.x.fallback_scope",
            "concurrency policies fail open with `fallback_limit`",
        ),
        (
            {**make_config("memory://", api__x=FLEET), "fleet_heartbeat_seconds": 0},
            "fleet_heartbeat_seconds",
            "must be between 1 and 3600, got 0",
        ),
        (
            {**make_config("memory://", api__x=FLEET), "fleet_heartbeat_seconds": 2.5},
            "fleet_heartbeat_seconds",
            "expected an integer",
        ),
    ],
)
def test_a_bad_fleet_setting_is_a_config_error_naming_its_key(
    config: dict[str, Any], path: str, message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(config)
    assert raised.value.path == path
    assert message in str(raised.value)


def test_a_concurrency_policy_may_say_process_explicitly() -> None:
    policy = {
        "algorithm": "concurrency",
        "limit": 2,
        "fail_mode": "open",
        "fallback_limit": 1,
        "fallback_scope": "process",
    }
    config = load_config(make_config("memory://", api__x=policy))
    assert config.policies["api.x"].fallback_scope is FallbackScope.PROCESS


def test_no_heartbeat_without_a_fleet_policy_or_on_memory() -> None:
    share, plugin = fleet_of(load_config(make_config("redis://127.0.0.1:1/0", api__x=FAIL_OPEN)))
    assert (share.endpoint_ids, plugin) == ((), None)
    share, plugin = fleet_of(load_config(make_config("memory://", api__x=FLEET)))
    assert (share.endpoint_ids, plugin) == (("api.x",), None)
    assert share.divisor("api.x") == 1, "one process by definition"
    sentinel = Sentinel(make_config("memory://", api__x=FLEET), entry_points=False)
    assert sentinel.plugin_manager.get_plugin("sentinel.fleet") is None


# -- the share and the emergency limiter -------------------------------------------


def test_the_share_keeps_the_last_counts_of_its_own_endpoints_only() -> None:
    share = FleetShare(["a", "b"])
    assert (share.divisor("a"), share.divisor("b"), share.divisor("other")) == (1, 1, 1)
    share.seen({"a": 4, "b": 3, "other": 9})
    assert (share.divisor("a"), share.divisor("b"), share.divisor("other")) == (4, 3, 1)
    share.seen({"a": 2})
    assert (share.divisor("a"), share.divisor("b")) == (2, 3), "b keeps what it last saw"
    share.seen({"a": 0})
    assert share.divisor("a") == 1, "never below one process"


def test_a_fleet_share_refills_at_the_rate_divided_by_the_count() -> None:
    clock, share = ClockNs(), FleetShare(["fleet"])
    share.seen({"fleet": 4})
    limiter = EmergencyLimiter(clock, share)
    rate = Rate(8, 1)
    burst = sum(limiter.acquire("fleet", rate).allowed for _ in range(100))
    assert burst == 2, "one second of 8/second shared by 4 processes"
    admitted = 0
    for _ in range(10 * 100):  # ten seconds in 10 ms steps
        clock.now += SECOND // 100
        admitted += limiter.acquire("fleet", rate).allowed
    assert admitted == 20, "2 a second: 8/second over 4 processes"
    # A process-scoped endpoint on the same limiter keeps the whole rate.
    assert sum(limiter.acquire("own", rate).allowed for _ in range(100)) == 8


def test_a_share_smaller_than_one_request_still_admits_one() -> None:
    clock, share = ClockNs(), FleetShare(["fleet"])
    share.seen({"fleet": 4})
    limiter = EmergencyLimiter(clock, share)
    rate = Rate(2, 1)
    assert emergency_capacity_micro(rate, 1, 4) == MICRO
    assert sum(limiter.acquire("fleet", rate).allowed for _ in range(10)) == 1
    clock.now += SECOND
    assert not limiter.acquire("fleet", rate).allowed, "half a request a second"
    clock.now += SECOND
    assert limiter.acquire("fleet", rate).allowed


# -- the script and the store ------------------------------------------------------


@pytest.fixture
def client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis_server.client()
    client.flushall()
    yield client
    client.close()


def test_each_process_is_counted_once_however_often_it_beats(
    redis_server: RedisServer, client: redis.Redis
) -> None:
    store = open_fleet_store(redis_server.url, 1_000)
    keys = (fleet_key("a.x"), fleet_key("b.y"))
    assert store.announce(keys, "p1", 15_000) == [1, 1]
    assert store.announce(keys, "p2", 15_000) == [2, 2]
    for _ in range(50):
        assert store.announce(keys, "p1", 15_000) == [2, 2]
    assert client.zcard(keys[0]) == 2, "nothing grows with the beats"
    assert 0 < client.pttl(keys[0]) <= 15_000, "the key goes when the fleet stops beating"
    assert set(client.keys("sentinel:fleet:*")) == {key.encode() for key in keys}
    store.close()


def test_a_process_not_heard_from_for_a_lifetime_is_no_longer_counted(
    redis_server: RedisServer, client: redis.Redis
) -> None:
    store = open_fleet_store(redis_server.url, 1_000)
    key = fleet_key("a.x")
    seconds, micros = client.time()
    now_ms = seconds * 1000 + micros // 1000
    client.zadd(key, {"gone": now_ms - 15_001, "recent": now_ms - 14_000})
    assert store.announce((key,), "me", 15_000) == [2]
    assert set(client.zrange(key, 0, -1)) == {b"recent", b"me"}
    store.close()


def test_the_script_is_loaded_again_after_a_script_flush(
    redis_server: RedisServer, client: redis.Redis
) -> None:
    store = open_fleet_store(redis_server.url, 1_000)
    client.script_flush()
    assert store.announce((fleet_key("a.x"),), "me", 15_000) == [1]
    assert client.script_exists(FLEET_SHA) == [True]
    store.close()


def test_the_fleet_keys_share_one_cluster_slot() -> None:
    assert all("{fleet}" in fleet_key(name) for name in ("a", "b.c", "x:y"))


# -- the heartbeat -------------------------------------------------------------------


def fleet_sentinel(url: str, clock: Clock | None = None, **extra: Any) -> Sentinel:
    config = {**make_config(url, api__x=FLEET, api__own=FAIL_OPEN), **extra}
    config["breaker"] = {"failure_threshold": 1}
    return Sentinel(config, entry_points=False, clock=clock or Clock())


def test_every_process_keeps_the_count_it_last_read(redis_server: RedisServer, client: Any) -> None:
    a, b, c = (fleet_sentinel(redis_server.url) for _ in range(3))
    beats = [heartbeat_of(s) for s in (a, b, c)]
    for index, heartbeat in enumerate(beats):
        heartbeat.member = f"process-{index}"
    assert [hb.beat() for hb in beats] == [True, True, True]
    assert [hb.share.divisor("api.x") for hb in beats] == [1, 2, 3]
    assert beats[0].beat()
    assert beats[0].share.divisor("api.x") == 3
    assert beats[0].share.divisor("api.own") == 1, "a process-scoped endpoint is not shared"
    assert client.zcard(fleet_key("api.x")) == 3
    assert not client.exists(fleet_key("api.own"))
    for sentinel in (a, b, c):
        sentinel.close()


def test_when_redis_fails_each_process_admits_its_share_of_the_fallback_rate(
    redis_server: RedisServer,
) -> None:
    with TcpProxy(redis_server.port) as proxy:
        clocks = [Clock() for _ in range(4)]
        fleet = [fleet_sentinel(proxy.url, clock, socket_timeout_ms=200) for clock in clocks]
        for index, sentinel in enumerate(fleet):
            heartbeat_of(sentinel).member = f"process-{index}"
            assert heartbeat_of(sentinel).beat()
        for sentinel in fleet:
            assert heartbeat_of(sentinel).beat()  # each now knows all four
        proxy.mode = "blackhole"
        proxy.drop_connections()
        admitted = []
        for sentinel in fleet:
            decisions = [sentinel.evaluate("api.x", f"t{i}") for i in range(20)]
            admitted.append(sum(decision.allowed for decision in decisions))
            assert decisions[0].reason in {
                DecisionReason.REDIS_TIMEOUT,
                DecisionReason.REDIS_CONNECTION_ERROR,
            }
            assert decisions[-1].reason is DecisionReason.EMERGENCY_LOCAL_LIMIT
        assert admitted == [2, 2, 2, 2], "8/second for the fleet: one second's burst in all"
        assert not heartbeat_of(fleet[0]).beat(), "Redis is gone: the counts stay"
        assert heartbeat_of(fleet[0]).share.divisor("api.x") == 4
        own = [fleet[0].evaluate("api.own", f"t{i}").allowed for i in range(20)]
        assert sum(own) == 8, "fallback_scope process: the whole rate in every process"
        for sentinel in fleet:
            sentinel.close()


def test_the_first_decision_of_a_process_starts_one_heartbeat_thread(
    redis_server: RedisServer, client: Any
) -> None:
    sentinel = fleet_sentinel(redis_server.url)
    before = len(fleet_threads())
    for _ in range(5):
        sentinel.evaluate("api.x", "acme")
    assert len(fleet_threads()) == before + 1
    heartbeat = heartbeat_of(sentinel)
    deadline = threading.Event()
    for _ in range(500):  # the thread's first beat is at once: wait for it, not a period
        if client.zcard(fleet_key("api.x")) == 1:
            break
        deadline.wait(0.01)
    assert client.zscore(fleet_key("api.x"), heartbeat.member) is not None
    sentinel.close()
    assert not heartbeat.beat(), "a stopped heartbeat announces nothing more"


class CountingHeartbeat(Heartbeat):
    def __init__(self, url: str, interval: float) -> None:
        super().__init__(FleetShare(["api.x"]), url, 1_000, interval)
        self.beats = 0
        self.third = threading.Event()

    def beat(self) -> bool:
        self.beats += 1
        if self.beats == 3:
            self.third.set()
        return super().beat()


def test_the_thread_beats_once_per_interval_until_stopped(redis_server: RedisServer) -> None:
    heartbeat = CountingHeartbeat(redis_server.url, 0.02)
    before = set(fleet_threads())
    heartbeat.ensure_running()
    [thread] = set(fleet_threads()) - before
    assert heartbeat.third.wait(timeout=10)
    heartbeat.stop()
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert heartbeat.share.divisor("api.x") >= 1


def test_an_abandoned_heartbeat_ends_its_thread(redis_server: RedisServer) -> None:
    heartbeat = CountingHeartbeat(redis_server.url, 0.02)
    before = set(fleet_threads())
    heartbeat.ensure_running()
    threads = set(fleet_threads()) - before
    assert heartbeat.third.wait(timeout=10)
    del heartbeat
    gc.collect()
    for thread in threads:
        thread.join(timeout=10)
    assert not any(thread.is_alive() for thread in threads)


class HandshakeLock:
    """The first holder waits, inside, until a second thread is waiting for it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.contended = threading.Event()

    def __enter__(self) -> None:
        if self._lock.acquire(blocking=False):
            assert self.contended.wait(timeout=10)
        else:
            self.contended.set()
            self._lock.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self._lock.release()


def test_two_first_decisions_at_once_start_one_thread(redis_server: RedisServer) -> None:
    heartbeat = Heartbeat(FleetShare(["api.x"]), redis_server.url, 1_000, 60)
    heartbeat._lock = HandshakeLock()  # type: ignore[assignment]
    before = len(fleet_threads())
    racers = [threading.Thread(target=heartbeat.ensure_running) for _ in range(2)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(timeout=10)
    assert len(fleet_threads()) == before + 1
    heartbeat.stop()


def test_a_heartbeat_on_a_dead_redis_keeps_the_counts() -> None:
    share = FleetShare(["api.x"])
    share.seen({"api.x": 3})
    heartbeat = Heartbeat(share, f"redis://127.0.0.1:{free_port()}/0", 200, 5)
    heartbeat.stop()  # before any beat: nothing to close
    heartbeat = Heartbeat(share, f"redis://127.0.0.1:{free_port()}/0", 200, 5)
    assert not heartbeat.beat()
    assert share.divisor("api.x") == 3
    heartbeat.stop()


async def test_aclose_stops_the_heartbeat(redis_server: RedisServer) -> None:
    sentinel = fleet_sentinel(redis_server.url)
    heartbeat = heartbeat_of(sentinel)
    await sentinel.aclose()
    assert not heartbeat.beat()


def test_a_forked_child_beats_with_its_own_lock_and_connection(
    redis_server: RedisServer, client: Any
) -> None:
    """A child forked while its parent's heartbeat was mid-beat inherits that beat's lock
    held, with no thread to free it: the child starts afresh (stood for here by a pid
    that is not this process's)."""
    heartbeat = Heartbeat(FleetShare(["api.x"]), redis_server.url, 1_000, 60)
    heartbeat.ensure_running()
    parent = heartbeat.member
    heartbeat._io_lock.acquire()  # the parent's beat, in flight at the fork
    heartbeat._pid = -1  # this process is now "the child"
    before = set(fleet_threads())
    heartbeat.ensure_running()
    assert heartbeat.member != parent
    [thread] = set(fleet_threads()) - before
    for _ in range(500):
        if client.zscore(fleet_key("api.x"), heartbeat.member) is not None:
            break
        threading.Event().wait(0.01)
    assert client.zscore(fleet_key("api.x"), heartbeat.member) is not None
    heartbeat.stop()
    thread.join(timeout=10)
