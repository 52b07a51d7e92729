"""How the Redis stores use redis-py's connection pools, on a real server.

Each test names its connections (``client_name`` in the URL) and counts them with
``CLIENT LIST`` on the session's private server, so other tests' connections never
blur the count.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
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


def assert_all_closed(admin: redis.Redis, name: str, timeout: float = 5.0) -> None:
    """The server drops a closed connection when its event loop reads the FIN, a moment
    after the client closed it: wait for that, within ``timeout``."""
    deadline = time.monotonic() + timeout
    while connections_named(admin, name) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert connections_named(admin, name) == []


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
    assert_all_closed(admin, name)


def test_close_disconnects_every_connection_and_a_later_decision_reconnects(
    sentinel: Sentinel, admin: redis.Redis, name: str
) -> None:
    assert sentinel.evaluate(EP, "t").allowed
    sentinel.close()
    assert_all_closed(admin, name)
    assert sentinel.evaluate(EP, "t").allowed
    assert len(connections_named(admin, name)) == 1


def test_a_forked_child_opens_its_own_connection_and_leaves_the_parents_alone(
    sentinel: Sentinel, admin: redis.Redis, name: str
) -> None:
    # gunicorn --preload forks workers from a process that may already hold connections
    assert sentinel.evaluate(EP, "t").allowed
    [parents] = connections_named(admin, name)
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child, which reports by exit status
        decisions = [sentinel.evaluate(EP, f"child-{i}") for i in range(20)]
        own = redis.Redis(
            connection_pool=redis.ConnectionPool(**admin.connection_pool.connection_kwargs)
        )
        apart = len(connections_named(own, name)) == 2  # the parent's and the child's
        os._exit(0 if apart and all(d.allowed for d in decisions) else 1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    decisions = [sentinel.evaluate(EP, f"parent-{i}") for i in range(20)]
    assert {d.reason for d in decisions} == {DecisionReason.ALLOWED}
    assert [c["id"] for c in connections_named(admin, name)] == [parents["id"]]


def test_a_reply_error_keeps_the_connection_it_came_on(name: str) -> None:
    # an error reply (here: over maxmemory, the script's write refused) is a whole reply:
    # the connection is clean and stays, no reconnect
    server = RedisServer().start()
    sentinel = Sentinel(
        make_config(
            f"{server.url}?client_name={name}",
            conn__tb={"algorithm": "token_bucket", "rate": "9/hour", "fail_mode": "closed"},
        ),
        registry=CollectorRegistry(),
        entry_points=False,
    )
    try:
        with server.client() as admin:
            assert sentinel.evaluate(EP, "before").allowed
            [connection] = connections_named(admin, name)
            admin.config_set("maxmemory", 1)
            refused = sentinel.evaluate(EP, "refused")
            admin.config_set("maxmemory", 64 * 1024 * 1024)
            after = sentinel.evaluate(EP, "after")
            assert [c["id"] for c in connections_named(admin, name)] == [connection["id"]]
    finally:
        sentinel.close()
        server.close()
    assert refused.reason is DecisionReason.FAIL_CLOSED
    assert after.reason is DecisionReason.ALLOWED
