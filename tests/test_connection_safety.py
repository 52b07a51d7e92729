"""The Redis stores on redis-py's own pools, where the retired connection stacks broke:
more than 1024 descriptors open (``select()`` raised), and a reply arriving after its
caller gave up (it must never answer the next caller)."""

from __future__ import annotations

import asyncio
import os
import resource
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from prometheus_client import CollectorRegistry

from sentinel_core import DecisionReason, Sentinel
from tests.conftest import make_config
from tests.support.redis_server import RedisServer
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.slow

POLICY = {"algorithm": "token_bucket", "rate": "1/hour", "burst": 10, "fail_mode": "closed"}
FD_SETSIZE = 1024


def make_sentinel(url: str, socket_timeout_ms: int = 2_000) -> Sentinel:
    config = {**make_config(url, api__ep=POLICY), "socket_timeout_ms": socket_timeout_ms}
    return Sentinel(config, registry=CollectorRegistry(), entry_points=False)


@pytest.fixture
def many_descriptors() -> Iterator[int]:
    """More than FD_SETSIZE descriptors open, so every socket made now is numbered past
    1024 (what a busy threaded server with database pools looks like); the soft limit
    is raised for the test and restored after it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = FD_SETSIZE + 512
    assert hard == resource.RLIM_INFINITY or hard >= wanted, f"hard limit {hard}"
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), hard))
    pipes: list[int] = []
    try:
        while len(pipes) < FD_SETSIZE + 64:
            pipes.extend(os.pipe())
        probe = os.open(os.devnull, os.O_RDONLY)
        os.close(probe)
        yield probe
    finally:
        for fd in pipes:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_threaded_decisions_with_more_than_1024_descriptors_open(
    redis_url: str, many_descriptors: int
) -> None:
    assert many_descriptors > FD_SETSIZE
    sentinel = make_sentinel(redis_url)
    reasons: list[DecisionReason] = []
    lock = threading.Lock()

    def decide(tenant: str) -> None:
        for _ in range(5):
            reason = sentinel.evaluate("api.ep", tenant).reason
            with lock:
                reasons.append(reason)

    threads = [threading.Thread(target=decide, args=(f"t{i}",)) for i in range(8)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sentinel.close()
    assert reasons == [DecisionReason.ALLOWED] * 40


async def test_asyncio_decisions_with_more_than_1024_descriptors_open(
    redis_url: str, many_descriptors: int
) -> None:
    assert many_descriptors > FD_SETSIZE
    sentinel = make_sentinel(redis_url)
    try:
        for _ in range(3):
            decisions = await asyncio.gather(
                *(sentinel.aevaluate("api.ep", f"t{i}") for i in range(8))
            )
            assert {d.reason for d in decisions} == {DecisionReason.ALLOWED}
    finally:
        await sentinel.aclose()


@pytest.fixture
def delaying_proxy(redis_server: RedisServer) -> Iterator[TcpProxy]:
    """Every command reaches Redis 0.4 s late, so its reply does too."""
    with TcpProxy(redis_server.port, "delay", delay_seconds=0.4) as proxy:
        yield proxy


def _wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert predicate()


async def test_a_reply_delayed_past_a_cancellation_never_reaches_another_caller(
    redis_server: RedisServer, delaying_proxy: TcpProxy
) -> None:
    url = delaying_proxy.url
    with redis_server.client() as admin:
        admin.flushall()
    sentinel = make_sentinel(url)
    try:
        for _ in range(6):  # tenant "spent" keeps 4 of 10: its replies say remaining <= 3
            await sentinel.aevaluate("api.ep", "spent")
        delaying_proxy.reset_counters()
        victim = asyncio.create_task(sentinel.aevaluate("api.ep", "spent"))
        await asyncio.to_thread(_wait_until, lambda: b"EVALSHA" in delaying_proxy.commands)
        victim.cancel()  # the caller is gone; its reply is still on the way
        with pytest.raises(asyncio.CancelledError):
            await victim
        fresh = await sentinel.aevaluate("api.ep", "fresh")
    finally:
        await sentinel.aclose()
    assert (fresh.reason, fresh.remaining) == (DecisionReason.ALLOWED, 9), "its own reply"
    assert sentinel.breaker_state.name == "CLOSED"


def test_a_reply_delayed_past_a_timeout_never_reaches_the_next_call(
    redis_server: RedisServer, delaying_proxy: TcpProxy
) -> None:
    with redis_server.client() as admin:
        admin.flushall()
    patient = make_sentinel(delaying_proxy.url)
    for _ in range(6):
        patient.evaluate("api.ep", "spent")
    patient.close()
    sentinel = make_sentinel(delaying_proxy.url, socket_timeout_ms=100)
    try:
        late = sentinel.evaluate("api.ep", "spent")
        delaying_proxy.mode = "forward"  # connections made from now on are prompt
        fresh = sentinel.evaluate("api.ep", "fresh")
    finally:
        sentinel.close()
    assert late.reason is DecisionReason.FAIL_CLOSED
    assert (fresh.reason, fresh.remaining) == (DecisionReason.ALLOWED, 9), "its own reply"
