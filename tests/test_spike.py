"""A spike is never a Redis failure: more concurrent decisions in one process than any
connection pool default (redis-py's is 100) are all answered by Redis.

redis-py's pools refuse the 101st concurrent command with ``MaxConnectionsError`` (a
``ConnectionError``); counted as a Redis failure, a spike of 300 requests on one worker
was answered 503 and opened the breaker while Redis was healthy.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client import CollectorRegistry

from sentinel_core import BreakerState, DecisionReason, Sentinel

pytestmark = pytest.mark.slow

SPIKE = 300
POLICIES = {
    "spike.bucket": {
        "algorithm": "token_bucket",
        "rate": "1000/second",
        "burst": 10_000,
        "fail_mode": "closed",
    },
}


def make_sentinel(url: str) -> Sentinel:
    # A loaded machine is no outage: the budget is wide, the pool is what is tested.
    config = {"redis_url": url, "socket_timeout_ms": 10_000, "policies": POLICIES}
    return Sentinel(config, registry=CollectorRegistry(), entry_points=False)


async def test_a_spike_of_coroutines_is_answered_by_redis(redis_url: str) -> None:
    sentinel = make_sentinel(redis_url)
    start = asyncio.Event()

    async def decide(i: int) -> str:
        await start.wait()  # every coroutine asks at once
        return (await sentinel.aevaluate("spike.bucket", f"tenant-{i}")).reason.value

    tasks = [asyncio.create_task(decide(i)) for i in range(SPIKE)]
    await asyncio.sleep(0)
    start.set()
    reasons = Counter(await asyncio.gather(*tasks))
    await sentinel.aclose()

    assert reasons == {DecisionReason.ALLOWED.value: SPIKE}
    assert sentinel.breaker_state is BreakerState.CLOSED


def test_a_spike_of_threads_is_answered_by_redis(redis_url: str) -> None:
    sentinel = make_sentinel(redis_url)
    barrier = threading.Barrier(SPIKE, timeout=60)

    def decide(i: int) -> str:
        barrier.wait()
        return sentinel.evaluate("spike.bucket", f"tenant-{i}").reason.value

    with ThreadPoolExecutor(max_workers=SPIKE) as pool:
        reasons = Counter(pool.map(decide, range(SPIKE)))
    sentinel.close()

    assert reasons == {DecisionReason.ALLOWED.value: SPIKE}
    assert sentinel.breaker_state is BreakerState.CLOSED
