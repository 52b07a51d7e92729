"""Exact capacity under real concurrency: one bucket, many racers, exactly its burst admitted.

A bucket of 40 with a negligible refill (one request a day) is raced by coroutines, by
threads, and by threads in several processes, each process with its own `Sentinel` and
connection pool, as a multi-worker deployment runs. Anything but exactly 40 admissions
means a check-then-write race (over-admission) or a lost update (under-admission).
Every loser must be a genuine ``rate_limited`` denial, not a timeout in disguise.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from sentinel_core import Decision, DecisionReason, Sentinel

pytestmark = pytest.mark.slow

CAPACITY = 40
TENANT = "racing-tenant"
POLICIES = {
    "race.token_bucket": {
        "algorithm": "token_bucket",
        "rate": "1/day",
        "burst": CAPACITY,
        "fail_mode": "closed",
    },
    "race.sliding_window": {
        "algorithm": "sliding_window",
        "rate": f"{CAPACITY}/day",
        "fail_mode": "closed",
    },
}
ENDPOINTS = list(POLICIES)
WAIT_SECONDS = 60
"""Upper bound for barriers and joins: a hung racer fails the test instead of hanging it."""


def make_sentinel(url: str) -> Sentinel:
    # A generous socket budget: the test is about atomicity, not about latency, and a
    # timeout would turn an admission into a fail_closed denial.
    config = {"redis_url": url, "socket_timeout_ms": 10_000, "policies": POLICIES}
    return Sentinel(config, registry=CollectorRegistry(), entry_points=False)


def assert_exact_capacity(outcomes: list[tuple[bool, str]], attempts: int) -> None:
    assert len(outcomes) == attempts
    assert Counter(outcomes) == {
        (True, DecisionReason.ALLOWED.value): CAPACITY,
        (False, DecisionReason.RATE_LIMITED.value): attempts - CAPACITY,
    }


def outcome(decision: Decision) -> tuple[bool, str]:
    return decision.allowed, decision.reason.value


def race_threads(
    sentinel: Sentinel, endpoint_id: str, threads: int, calls: int
) -> list[tuple[bool, str]]:
    """``threads`` threads released together by a barrier, ``calls`` decisions each."""
    barrier = threading.Barrier(threads)

    def racer() -> list[tuple[bool, str]]:
        barrier.wait(timeout=WAIT_SECONDS)
        return [outcome(sentinel.evaluate(endpoint_id, TENANT)) for _ in range(calls)]

    with ThreadPoolExecutor(max_workers=threads) as pool:
        futures = [pool.submit(racer) for _ in range(threads)]
        return [result for future in futures for result in future.result(WAIT_SECONDS)]


def race_in_process(
    url: str,
    endpoint_id: str,
    threads: int,
    calls: int,
    start: Any,
    results: Any,
) -> None:
    """One worker process: its own Sentinel, ``threads`` racing threads; reports outcomes."""
    sentinel = make_sentinel(url)
    try:
        sentinel.check()  # connect and load the scripts before the start line
        start.wait(WAIT_SECONDS)  # every process ready: release them together
        results.put(race_threads(sentinel, endpoint_id, threads, calls))
    except BaseException as exc:
        results.put(repr(exc))
        raise
    finally:
        sentinel.close()


def race_coroutines_in_process(
    url: str, endpoint_id: str, coroutines: int, start: Any, results: Any
) -> None:
    """One worker process: its own Sentinel, ``coroutines`` concurrent ``aevaluate``
    calls in one event loop (auto-pipelined by the asyncio store); reports outcomes."""

    async def race() -> list[tuple[bool, str]]:
        sentinel = make_sentinel(url)
        try:
            await sentinel.acheck()  # connect and load the scripts before the start line
            start.wait(WAIT_SECONDS)
            decisions = await asyncio.gather(
                *(sentinel.aevaluate(endpoint_id, TENANT) for _ in range(coroutines))
            )
        finally:
            await sentinel.aclose()
        return [outcome(decision) for decision in decisions]

    try:
        results.put(asyncio.run(race()))
    except BaseException as exc:
        results.put(repr(exc))
        raise


def run_processes(target: Any, args: tuple[Any, ...], processes: int) -> list[Any]:
    """``target(*args, start, results)`` in ``processes`` spawned processes released
    together; each one's report, in the order they came."""
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(processes)
    results = context.Queue()
    workers = [
        context.Process(target=target, args=(*args, start, results), daemon=True)
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    try:
        reports = [results.get(timeout=WAIT_SECONDS) for _ in workers]
    finally:
        for worker in workers:
            worker.join(WAIT_SECONDS)
            if worker.is_alive():  # only our own children, by handle
                worker.kill()
                worker.join()
        results.close()
        results.join_thread()
    for report in reports:
        assert isinstance(report, list), f"a worker process failed: {report}"
    assert [worker.exitcode for worker in workers] == [0] * processes
    return reports


@pytest.fixture(params=ENDPOINTS)
def endpoint_id(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def memory_sentinel() -> Iterator[Sentinel]:
    sentinel = make_sentinel("memory://")
    yield sentinel
    sentinel.close()


@pytest.mark.parametrize("store", ["memory", "redis"])
async def test_fifty_coroutines_admit_exactly_the_burst(
    request: pytest.FixtureRequest, store: str, endpoint_id: str
) -> None:
    url = "memory://" if store == "memory" else request.getfixturevalue("redis_url")
    sentinel = make_sentinel(url)
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
    sentinel = make_sentinel(redis_url)
    try:
        outcomes = race_threads(sentinel, endpoint_id, threads=16, calls=5)
    finally:
        sentinel.close()
    assert_exact_capacity(outcomes, 16 * 5)


def test_three_processes_of_eight_threads_admit_exactly_the_burst(
    redis_url: str, endpoint_id: str
) -> None:
    processes, threads, calls = 3, 8, 4
    reports = run_processes(race_in_process, (redis_url, endpoint_id, threads, calls), processes)
    outcomes = [(bool(allowed), str(reason)) for report in reports for allowed, reason in report]
    assert_exact_capacity(outcomes, processes * threads * calls)


def test_three_processes_of_twenty_pipelined_coroutines_admit_exactly_the_burst(
    redis_url: str, endpoint_id: str
) -> None:
    processes, coroutines = 3, 20
    reports = run_processes(
        race_coroutines_in_process, (redis_url, endpoint_id, coroutines), processes
    )
    outcomes = [(bool(allowed), str(reason)) for report in reports for allowed, reason in report]
    assert_exact_capacity(outcomes, processes * coroutines)
