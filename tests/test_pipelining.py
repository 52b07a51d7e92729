"""Auto-pipelining of the asyncio Redis store, on a real server (and a TCP proxy that
delays, blackholes or drops the store's connections).

The first command that finds nothing in flight goes alone; what comes while it is in
flight is batched, one write per event-loop turn. Each caller must get its own reply or
its own error, whatever its neighbours in the batch got.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError, NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError

from sentinel_core import DecisionReason, Sentinel
from sentinel_core.store._redis import AsyncRedisStore
from sentinel_core.store._scripts import all_scripts
from tests.conftest import make_config
from tests.support.redis_server import RedisServer, free_port
from tests.support.tcp_proxy import TcpProxy

TB = {"algorithm": "token_bucket", "rate": "1/day", "burst": 3, "fail_mode": "closed"}


@pytest.fixture
def admin(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis_server.client()
    client.flushall()
    client.config_resetstat()
    yield client
    client.close()


@pytest.fixture
async def store(redis_server: RedisServer) -> AsyncIterator[AsyncRedisStore]:
    opened = AsyncRedisStore(redis_server.url, 2_000)
    yield opened
    await opened.aclose()


@pytest.fixture
def proxy(redis_server: RedisServer) -> Iterator[TcpProxy]:
    with TcpProxy(redis_server.port) as running:
        yield running


def calls(admin: redis.Redis, command: str) -> int:
    return int(admin.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def wait_until(condition: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition never met"
        time.sleep(0.005)


async def test_concurrent_decisions_share_a_write_and_each_gets_its_own_verdict(
    redis_server: RedisServer, admin: redis.Redis
) -> None:
    name = f"pipe-{uuid.uuid4().hex[:12]}"
    config = make_config(f"{redis_server.url}?client_name={name}", tb=TB)
    sentinel = Sentinel(config, registry=CollectorRegistry(), entry_points=False)
    try:
        await sentinel.acheck()
        tenants = [f"tenant-{index % 8}" for index in range(64)]
        decisions = await asyncio.gather(*(sentinel.aevaluate("tb", t) for t in tenants))
        connections = [c for c in admin.client_list() if c.get("name") == name]
    finally:
        await sentinel.aclose()
    verdicts = Counter((t, d.allowed, d.reason) for t, d in zip(tenants, decisions, strict=True))
    for tenant in set(tenants):
        assert verdicts[(tenant, True, DecisionReason.ALLOWED)] == 3
        assert verdicts[(tenant, False, DecisionReason.RATE_LIMITED)] == 5
    assert calls(admin, "evalsha") == 64
    # the check's connection, the first decision's (alone), and the batch's
    assert len(connections) <= 3


async def test_a_script_flushed_under_a_batch_is_reloaded_for_each_caller(
    redis_server: RedisServer, admin: redis.Redis
) -> None:
    config = make_config(redis_server.url, tb=TB)
    sentinel = Sentinel(config, registry=CollectorRegistry(), entry_points=False)
    try:
        await sentinel.acheck()
        admin.script_flush()
        decisions = await asyncio.gather(
            *(sentinel.aevaluate("tb", f"tenant-{index}") for index in range(20))
        )
    finally:
        await sentinel.aclose()
    assert {(d.allowed, d.reason) for d in decisions} == {(True, DecisionReason.ALLOWED)}
    stats = admin.info("commandstats")
    evalsha, loads = stats["cmdstat_evalsha"], stats["cmdstat_script|load"]
    scripts = len(all_scripts())  # the check loaded each once
    assert evalsha["failed_calls"] >= 1, "a NOSCRIPT was answered"
    assert loads["calls"] - scripts == evalsha["failed_calls"], "one reload per NOSCRIPT"
    assert evalsha["calls"] - evalsha["failed_calls"] == 20


async def test_each_caller_of_a_batch_gets_its_own_reply_or_error(
    store: AsyncRedisStore, admin: redis.Redis
) -> None:
    pipeline = store.pipeline
    alone = pipeline.execute("ECHO", "x")
    batch = [
        pipeline.execute("EVALSHA", "0" * 40, 0),  # a reply error
        pipeline.execute("ECHO", "mine"),
        pipeline.execute("ECHO", None),  # redis-py cannot encode it
        pipeline.execute("GET", "missing"),  # a nil reply is a reply
        pipeline.execute("INCR", "counter"),
    ]
    replies = await asyncio.gather(alone, *batch, return_exceptions=True)
    assert replies[0] == b"x"
    assert isinstance(replies[1], NoScriptError)
    assert replies[2] == b"mine"
    assert isinstance(replies[3], DataError)
    assert replies[4:] == [None, 1]
    assert calls(admin, "echo") == 2, "the command that could not be encoded was not sent"


async def test_a_caller_cancelled_before_the_write_is_not_sent(
    store: AsyncRedisStore, admin: redis.Redis
) -> None:
    pipeline = store.pipeline
    alone = pipeline.execute("ECHO", "x")
    cancelled = pipeline.execute("INCR", "counter")
    kept = pipeline.execute("INCR", "counter")
    assert isinstance(cancelled, asyncio.Future)
    cancelled.cancel()
    assert await asyncio.gather(alone, kept) == [b"x", 1]
    assert admin.get("counter") == b"1"


async def test_a_caller_cancelled_after_the_write_leaves_the_connection_in_step(
    proxy: TcpProxy, admin: redis.Redis
) -> None:
    proxy.mode = "delay"
    proxy.delay_seconds = 0.2
    store = AsyncRedisStore(proxy.url, 5_000)
    try:
        pipeline = store.pipeline
        alone = asyncio.ensure_future(pipeline.execute("ECHO", "x"))
        cancelled = pipeline.execute("INCR", "counter")
        kept = pipeline.execute("ECHO", "after")
        await asyncio.to_thread(wait_until, lambda: b"INCR" in proxy.commands)
        assert isinstance(cancelled, asyncio.Future)
        cancelled.cancel()
        assert await asyncio.gather(alone, kept) == [b"x", b"after"]
        proxy.delay_seconds = 0.0
        # the connection read past the dropped reply: the next batch is in step
        again = [pipeline.execute("ECHO", "one"), pipeline.execute("ECHO", "two")]
        assert await asyncio.gather(*again) == [b"one", b"two"]
    finally:
        await store.aclose()
    assert admin.get("counter") == b"1", "the cancelled caller's command had been sent"


async def test_a_batch_with_no_reply_within_the_socket_timeout_fails_as_timeouts(
    proxy: TcpProxy,
) -> None:
    proxy.mode = "blackhole"
    store = AsyncRedisStore(proxy.url, 100)
    try:
        pipeline = store.pipeline
        started = time.monotonic()
        replies = await asyncio.gather(
            *(pipeline.execute("ECHO", str(index)) for index in range(4)),
            return_exceptions=True,
        )
        elapsed = time.monotonic() - started
    finally:
        await store.aclose()
    assert all(isinstance(reply, RedisTimeoutError) for reply in replies), replies
    assert elapsed < 1.0, "each reply is due within the budget of its write"


async def test_a_broken_connection_fails_the_commands_in_flight_on_it(
    proxy: TcpProxy,
) -> None:
    proxy.mode = "delay"
    proxy.delay_seconds = 0.3
    store = AsyncRedisStore(proxy.url, 5_000)
    try:
        pipeline = store.pipeline
        in_flight = [asyncio.ensure_future(pipeline.execute("ECHO", str(i))) for i in range(3)]
        await asyncio.to_thread(wait_until, lambda: proxy.commands.count(b"ECHO") == 3)
        proxy.drop_connections()
        replies = await asyncio.gather(*in_flight, return_exceptions=True)
        proxy.mode = "forward"
        after = await asyncio.gather(pipeline.execute("ECHO", "x"), pipeline.execute("ECHO", "x"))
    finally:
        await store.aclose()
    assert all(isinstance(reply, RedisConnectionError) for reply in replies), replies
    assert after == [b"x", b"x"], "new connections replace the broken one"


async def test_closing_the_store_fails_the_batch_in_flight(proxy: TcpProxy) -> None:
    proxy.mode = "blackhole"
    store = AsyncRedisStore(proxy.url, 500)
    pipeline = store.pipeline
    alone = asyncio.ensure_future(pipeline.execute("ECHO", "x"))
    batch = [asyncio.ensure_future(pipeline.execute("ECHO", str(i))) for i in range(2)]
    await asyncio.to_thread(wait_until, lambda: proxy.accepted == 2)
    await asyncio.sleep(0.05)  # the batch's connection is open: its write follows
    await store.aclose()
    replies = await asyncio.gather(*batch, return_exceptions=True)
    assert all(isinstance(reply, RedisConnectionError) for reply in replies), replies
    assert isinstance((await asyncio.gather(alone, return_exceptions=True))[0], Exception)


async def test_a_batch_that_cannot_connect_fails_every_caller() -> None:
    store = AsyncRedisStore(f"redis://127.0.0.1:{free_port()}/0", 500)
    try:
        replies = await asyncio.gather(
            *(store.pipeline.execute("ECHO", "x") for _ in range(3)), return_exceptions=True
        )
    finally:
        await store.aclose()
    assert all(isinstance(reply, RedisConnectionError) for reply in replies), replies


async def test_a_batch_closed_before_its_turn_fails_and_the_next_one_is_sent(
    store: AsyncRedisStore,
) -> None:
    pipeline = store.pipeline
    alone = pipeline.execute("ECHO", "x")
    unsent = pipeline.execute("ECHO", "y")
    await pipeline.aclose()  # before the loop turns: the batch's flush never ran
    assert await alone == b"x"
    with pytest.raises(RedisConnectionError, match="unsent"):
        await unsent
    assert await asyncio.gather(pipeline.execute("ECHO", "a"), pipeline.execute("ECHO", "b")) == [
        b"a",
        b"b",
    ]
