"""Real concurrency against one bucket: processes x threads (or coroutines), each
process its own Sentinel. `race_processes` counts admissions on any configuration; the
racers below it report every outcome on `POLICIES`, a bucket of `CAPACITY`, for the
exact-capacity tests (tests/test_races.py, tests/cluster/test_cluster_pipelining.py)."""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from prometheus_client import CollectorRegistry

from sentinel_core import Decision, DecisionReason, Sentinel


def _threads(
    config: dict[str, Any], endpoint_id: str, tenant: str, threads: int, calls: int
) -> int:
    sentinel = Sentinel(config, entry_points=False)
    barrier = threading.Barrier(threads)
    allowed = [0] * threads

    def worker(index: int) -> None:
        barrier.wait()
        for _ in range(calls):
            allowed[index] += sentinel.evaluate(endpoint_id, tenant).allowed

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    sentinel.close()
    return sum(allowed)


def race_processes(
    config: dict[str, Any],
    endpoint_id: str,
    tenant: str,
    *,
    processes: int,
    threads: int,
    calls: int,
) -> int:
    """Total admissions of ``processes`` spawned processes x ``threads`` threads, each
    thread making ``calls`` decisions for ``tenant`` on ``endpoint_id``."""
    context = multiprocessing.get_context("spawn")
    with context.Pool(processes) as pool:
        results = [
            pool.apply_async(_threads, (config, endpoint_id, tenant, threads, calls))
            for _ in range(processes)
        ]
        return sum(result.get(timeout=120) for result in results)


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


def racing_sentinel(url: str) -> Sentinel:
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
    sentinel = racing_sentinel(url)
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
        sentinel = racing_sentinel(url)
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


def assert_processes_admit_exactly_the_burst(
    target: Any, args: tuple[Any, ...], processes: int, attempts: int
) -> None:
    """Run ``target`` in ``processes`` processes (`run_processes`): their ``attempts``
    decisions together admit exactly `CAPACITY`, every other one a genuine denial."""
    reports = run_processes(target, args, processes)
    outcomes = [(bool(allowed), str(reason)) for report in reports for allowed, reason in report]
    assert_exact_capacity(outcomes, attempts)
