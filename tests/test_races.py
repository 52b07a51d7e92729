"""Exact capacity under real concurrency: one bucket, many racers, exactly its burst admitted.

A bucket of 40 with a negligible refill (one request a day) is raced by coroutines, by
threads, and by threads in several processes, each process with its own `Sentinel` and
connection pool, as a multi-worker deployment runs. Anything but exactly 40 admissions
means a check-then-write race (over-admission) or a lost update (under-admission).
Every loser must be a genuine ``rate_limited`` denial, not a timeout in disguise.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from sentinel_core import Sentinel
from tests.support.race import (
    ENDPOINTS,
    TENANT,
    assert_exact_capacity,
    assert_processes_admit_exactly_the_burst,
    outcome,
    race_coroutines_in_process,
    race_in_process,
    race_threads,
    racing_sentinel,
)

pytestmark = pytest.mark.slow


@pytest.fixture(params=ENDPOINTS)
def endpoint_id(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def memory_sentinel() -> Iterator[Sentinel]:
    sentinel = racing_sentinel("memory://")
    yield sentinel
    sentinel.close()


@pytest.mark.parametrize("store", ["memory", "redis"])
async def test_fifty_coroutines_admit_exactly_the_burst(
    request: pytest.FixtureRequest, store: str, endpoint_id: str
) -> None:
    url = "memory://" if store == "memory" else request.getfixturevalue("redis_url")
    sentinel = racing_sentinel(url)
    try:
        decisions = await asyncio.gather(
            *(sentinel.aevaluate(endpoint_id, TENANT) for _ in range(50))
        )
    finally:
        sentinel.close()
        await sentinel.aclose()
    assert_exact_capacity([outcome(d) for d in decisions], 50)


def test_sixteen_threads_on_the_memory_store_admit_exactly_the_burst(
    memory_sentinel: Sentinel, endpoint_id: str
) -> None:
    outcomes = race_threads(memory_sentinel, endpoint_id, threads=16, calls=5)
    assert_exact_capacity(outcomes, 16 * 5)


def test_threads_on_one_redis_sentinel_admit_exactly_the_burst(
    redis_url: str, endpoint_id: str
) -> None:
    sentinel = racing_sentinel(redis_url)
    try:
        outcomes = race_threads(sentinel, endpoint_id, threads=16, calls=5)
    finally:
        sentinel.close()
    assert_exact_capacity(outcomes, 16 * 5)


def test_three_processes_of_eight_threads_admit_exactly_the_burst(
    redis_url: str, endpoint_id: str
) -> None:
    processes, threads, calls = 3, 8, 4
    assert_processes_admit_exactly_the_burst(
        race_in_process,
        (redis_url, endpoint_id, threads, calls),
        processes,
        processes * threads * calls,
    )


def test_three_processes_of_twenty_pipelined_coroutines_admit_exactly_the_burst(
    redis_url: str, endpoint_id: str
) -> None:
    processes, coroutines = 3, 20
    assert_processes_admit_exactly_the_burst(
        race_coroutines_in_process,
        (redis_url, endpoint_id, coroutines),
        processes,
        processes * coroutines,
    )
