"""How the Redis stores use redis-py's connection pools, on a real server.

Each test names its connections (``client_name`` in the URL) and counts them with
``CLIENT LIST`` on the session's private server, so other tests' connections never
blur the count.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator

import pytest
import redis
from prometheus_client import CollectorRegistry

from sentinel_core import DecisionReason, Sentinel
from tests.conftest import make_config
from tests.support.redis_server import RedisServer

EP = "conn.tb"


@pytest.fixture
def name() -> str:
    return f"stack-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def admin(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis_server.client()
    yield client
    client.close()


@pytest.fixture
def sentinel(redis_server: RedisServer, name: str) -> Iterator[Sentinel]:
    config = make_config(
        f"{redis_server.url}?client_name={name}",
        conn__tb={"algorithm": "token_bucket", "rate": "1000/second", "fail_mode": "closed"},
    )
    config["socket_timeout_ms"] = 2_000
    sentinel = Sentinel(config, registry=CollectorRegistry(), entry_points=False)
    yield sentinel
    sentinel.close()


def connections_named(admin: redis.Redis, name: str) -> list[dict[str, object]]:
    return [client for client in admin.client_list() if client.get("name") == name]


def test_sequential_decisions_share_one_connection(
    sentinel: Sentinel, admin: redis.Redis, name: str
) -> None:
    decisions = [sentinel.evaluate(EP, f"tenant-{i}") for i in range(20)]
    assert {d.reason for d in decisions} == {DecisionReason.ALLOWED}
    assert len(connections_named(admin, name)) == 1


def test_threads_never_hold_more_connections_than_there_are_threads(
    sentinel: Sentinel, admin: redis.Redis, name: str
) -> None:
    reasons: list[DecisionReason] = []
    start = threading.Barrier(8)

    def worker(index: int) -> None:
        start.wait()
        reasons.extend(sentinel.evaluate(EP, f"t{index}-{i}").reason for i in range(50))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert reasons == [DecisionReason.ALLOWED] * 400
    assert 1 <= len(connections_named(admin, name)) <= 8


def test_a_connection_the_server_closed_is_replaced_before_it_carries_a_decision(
    sentinel: Sentinel, admin: redis.Redis, name: str
) -> None:
    assert sentinel.evaluate(EP, "t").allowed
    [before] = connections_named(admin, name)
    assert admin.client_kill_filter(_id=before["id"]) == 1
    decision = sentinel.evaluate(EP, "t")
    assert decision.reason is DecisionReason.ALLOWED, "a killed idle connection is no failure"
    [after] = connections_named(admin, name)
    assert after["id"] != before["id"]


async def test_an_async_connection_the_server_closed_is_replaced_too(
    sentinel: Sentinel, admin: redis.Redis, name: str
) -> None:
    assert (await sentinel.aevaluate(EP, "t")).allowed
    [before] = connections_named(admin, name)
    assert admin.client_kill_filter(_id=before["id"]) == 1
    await asyncio.sleep(0.05)  # the event loop reads the server's FIN
    try:
        decision = await sentinel.aevaluate(EP, "t")
        assert decision.reason is DecisionReason.ALLOWED
        [after] = connections_named(admin, name)
        assert after["id"] != before["id"]
    finally:
        await sentinel.aclose()


async def test_concurrent_coroutines_get_a_connection_each_and_reuse_them(
    sentinel: Sentinel, admin: redis.Redis, name: str
) -> None:
    try:
        for _ in range(3):
            decisions = await asyncio.gather(
                *(sentinel.aevaluate(EP, f"tenant-{i}") for i in range(10))
            )
            assert {d.reason for d in decisions} == {DecisionReason.ALLOWED}
        assert 1 <= len(connections_named(admin, name)) <= 10
    finally:
        await sentinel.aclose()
    assert connections_named(admin, name) == []


def test_close_disconnects_every_connection_and_a_later_decision_reconnects(
    sentinel: Sentinel, admin: redis.Redis, name: str
) -> None:
    assert sentinel.evaluate(EP, "t").allowed
    sentinel.close()
    assert connections_named(admin, name) == []
    assert sentinel.evaluate(EP, "t").allowed
    assert len(connections_named(admin, name)) == 1
