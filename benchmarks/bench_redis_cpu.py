"""Redis CPU per decision, ``INFO cpu`` before and after: Sentinel beside `limits`' counter.

``INFO commandstats`` (`bench_redis`) times a script's execution alone; the server also
reads each command from its socket, parses it and writes the reply, and that is often
most of what a decision costs it. Here the server's whole CPU time (``used_cpu_user`` +
``used_cpu_sys``) is read before and after N decisions and divided by N, every
contender in one interleaved run against one private redis-server (which serves nothing
else). Contenders, each admitted, on buckets that already exist:

- `limits` 5.x fixed window (``FixedWindowRateLimiter.hit`` on ``RedisStorage``: one
  ``EVALSHA`` of ``INCRBY`` + ``EXPIRE``): the cheapest counter of the Python peers, and
  the reference; called one after another, and from 64 threads (its API is blocking);
- Sentinel's token bucket and sliding window through ``Sentinel.evaluate``, one after
  another (one decision per round trip, like `limits`), and the token bucket from 64
  threads (the blocking store: a connection per thread, no pipelining);
- the same through ``await Sentinel.aevaluate`` from 64 tasks in one event loop (an
  asyncio server under load): the store auto-pipelines what the tasks send together.

One after another, the server sleeps between two commands and wakes for each, and what
it runs then runs on cold caches: the longer the client's own work between two calls,
the more each command costs the server. Compare rows of one run.

Run from the repository root::

    python -m benchmarks.bench_redis_cpu            # about a minute
    python -m benchmarks.bench_redis_cpu --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

if not __package__:  # run as a file: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis
from limits import parse
from limits import storage as limits_storage
from limits import strategies as limits_strategies
from prometheus_client import CollectorRegistry

from benchmarks._common import machine_note, markdown_table, private_redis, server_cpu
from sentinel_core import Sentinel

TASKS = 64
POLICIES: dict[str, dict[str, Any]] = {
    "tb": {
        "algorithm": "token_bucket",
        "rate": "1000000/second",
        "burst": 10_000_000,
        "fail_mode": "closed",
    },
    "sw": {"algorithm": "sliding_window", "rate": "1000000/hour", "fail_mode": "closed"},
}
REFERENCE = "limits fixed window (one call after another)"


def measure(url: str, rounds: int, n: int) -> dict[str, list[float]]:
    admin = redis.Redis.from_url(url)
    config = {"redis_url": url, "socket_timeout_ms": 5_000, "policies": POLICIES}
    sentinel = Sentinel(config, registry=CollectorRegistry(), entry_points=False)
    limiter = limits_strategies.FixedWindowRateLimiter(limits_storage.RedisStorage(url))
    item = parse("100000000/hour")
    loop = asyncio.new_event_loop()
    tenants = [f"tenant-{index}" for index in range(TASKS)]

    def blocking(endpoint: str) -> Callable[[int], None]:
        def run(count: int) -> None:
            for index in range(count):
                sentinel.evaluate(endpoint, tenants[index % TASKS])

        return run

    def concurrent(endpoint: str) -> Callable[[int], None]:
        async def task(tenant: str, count: int) -> None:
            for _ in range(count):
                await sentinel.aevaluate(endpoint, tenant)

        async def gathered(count: int) -> None:
            await asyncio.gather(*(task(tenant, count // TASKS) for tenant in tenants))

        return lambda count: loop.run_until_complete(gathered(count))

    def counter(count: int) -> None:
        for index in range(count):
            limiter.hit(item, tenants[index % TASKS])

    pool = ThreadPoolExecutor(TASKS)

    def threaded(decide: Callable[[str], object]) -> Callable[[int], None]:
        def worker(tenant: str, count: int) -> None:
            for _ in range(count):
                decide(tenant)

        def run(count: int) -> None:
            futures = [pool.submit(worker, tenant, count // TASKS) for tenant in tenants]
            for future in futures:
                future.result()

        return run

    contenders: dict[str, Callable[[int], None]] = {
        REFERENCE: counter,
        f"limits fixed window ({TASKS} threads)": threaded(lambda t: limiter.hit(item, t)),
        "Sentinel token bucket, evaluate (one after another)": blocking("tb"),
        f"Sentinel token bucket, evaluate ({TASKS} threads)": threaded(
            lambda t: sentinel.evaluate("tb", t)
        ),
        "Sentinel sliding window, evaluate (one after another)": blocking("sw"),
        f"Sentinel token bucket, aevaluate ({TASKS} tasks, auto-pipelined)": concurrent("tb"),
        f"Sentinel sliding window, aevaluate ({TASKS} tasks, auto-pipelined)": concurrent("sw"),
    }
    results: dict[str, list[float]] = {name: [] for name in contenders}
    try:
        for run in contenders.values():  # warm-up: connections, scripts, buckets
            run(TASKS * 4)
        for round_index in range(rounds):
            names = list(contenders)
            shift = round_index % len(names)
            for name in names[shift:] + names[:shift]:
                before = server_cpu(admin)
                contenders[name](n)
                after = server_cpu(admin)
                results[name].append((after - before) * 1e6 / n)
    finally:
        pool.shutdown()
        sentinel.close()
        loop.run_until_complete(sentinel.aclose())
        loop.close()
        admin.close()
    return results


def report(results: dict[str, list[float]], rounds: int, n: int) -> str:
    reference = statistics.median(results[REFERENCE])
    rows = [
        (name, statistics.median(samples), min(samples), statistics.median(samples) / reference)
        for name, samples in results.items()
    ]
    return "\n\n".join(
        [
            f"Machine: {machine_note()}; {rounds} rounds of {n:,} decisions per contender.",
            markdown_table(
                ["contender", "Redis CPU µs / decision (median)", "min", "x limits fixed window"],
                rows,
            ),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--decisions", type=int, default=TASKS * 60)
    parser.add_argument("--quick", action="store_true", help="3 rounds of 640 decisions")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.decisions = 3, TASKS * 10
    with private_redis() as server:
        results = measure(server.url, args.rounds, args.decisions)
    print(report(results, args.rounds, args.decisions))


if __name__ == "__main__":
    main()
