"""Many decisions in one asyncio loop: Sentinel's auto-pipelining against bare EVALSHAs.

One private redis-server, one event loop, every contender in the same run, interleaved
in rounds. A contender is C tasks, each making decisions back to back (a new one as
soon as the last returned), for its own tenant; reported per contender: decisions per
second (all tasks together), each call's latency (p50, p99) and Redis CPU per decision
(``INFO cpu``: user + sys of the server, before and after each round, divided by the
decisions, so reading and answering each command counts).

- bare EVALSHA: each task awaits ``redis.asyncio.Redis.evalsha`` of Sentinel's token
  bucket script with the keys and arguments the engine builds (the same script and
  the same Redis work as a decision, without Sentinel's own work);
- Sentinel ``aevaluate`` (token bucket), auto-pipelined (the store's default);
- the same with the pipeline bypassed (each call through ``execute_command``, as before
  auto-pipelining), to show what the pipeline changes, at C tasks and at one task.

Run from the repository root::

    python -m benchmarks.bench_pipelining                 # about a minute
    python -m benchmarks.bench_pipelining --quick         # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

if not __package__:  # run as a file: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis
import redis.asyncio
from prometheus_client import CollectorRegistry

from benchmarks._common import machine_note, markdown_table, percentile, private_redis, server_cpu
from sentinel_core import Sentinel
from sentinel_core.identity._keys import TenantIdentity
from sentinel_core.store._redis import AsyncRedisStore

POLICY = {
    "algorithm": "token_bucket",
    "rate": "1000/second",
    "burst": 10_000_000,
    "fail_mode": "closed",
}
Decide = Callable[[int], Awaitable[object]]


async def one_round(decide: Decide, tasks: int, calls: int) -> tuple[float, list[int]]:
    """(wall seconds, each call's latency in ns) of ``tasks`` tasks x ``calls`` calls."""
    latencies: list[int] = []
    clock = time.perf_counter_ns

    async def worker(index: int) -> None:
        for _ in range(calls):
            started = clock()
            await decide(index)
            latencies.append(clock() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker(index) for index in range(tasks)))
    return time.perf_counter() - started, latencies


async def measure(url: str, rounds: int, tasks: int, calls: int) -> dict[str, dict[str, Any]]:
    admin = redis.Redis.from_url(url)
    config = {"redis_url": url, "socket_timeout_ms": 5_000, "policies": {"tb": POLICY}}
    piped = Sentinel(config, registry=CollectorRegistry(), entry_points=False)
    plain = Sentinel(config, registry=CollectorRegistry(), entry_points=False)
    await piped.acheck()
    store = plain.async_store
    assert isinstance(store, AsyncRedisStore)
    store.pipeline.execute = store.client.execute_command  # type: ignore[method-assign]
    bare_client = redis.asyncio.Redis.from_url(url)
    policy = piped.policy("tb")
    tenants = [f"tenant-{index}" for index in range(tasks)]
    calls_of = [
        piped._engine.script_call(policy, TenantIdentity(t))  # noqa: SLF001 (Sentinel's own)
        for t in tenants
    ]
    sha = calls_of[0].script.sha

    async def bare(index: int) -> object:
        call = calls_of[index]
        return await bare_client.evalsha(sha, len(call.keys), *call.keys, *call.args)

    contenders: dict[str, tuple[Decide, int]] = {
        f"bare EVALSHA, {tasks} tasks": (bare, tasks),
        f"Sentinel aevaluate, {tasks} tasks": (lambda i: piped.aevaluate("tb", tenants[i]), tasks),
        f"Sentinel aevaluate, {tasks} tasks, no pipelining": (
            lambda i: plain.aevaluate("tb", tenants[i]),
            tasks,
        ),
        "bare EVALSHA, 1 task": (bare, 1),
        "Sentinel aevaluate, 1 task": (lambda i: piped.aevaluate("tb", tenants[i]), 1),
        "Sentinel aevaluate, 1 task, no pipelining": (
            lambda i: plain.aevaluate("tb", tenants[i]),
            1,
        ),
    }
    results: dict[str, dict[str, Any]] = {
        name: {"rates": [], "cpu": [], "latencies": []} for name in contenders
    }
    try:
        for decide, width in contenders.values():  # warm-up: connections, scripts
            await one_round(decide, width, 20)
        for round_index in range(rounds):
            names = list(contenders)
            shift = round_index % len(names)
            for name in names[shift:] + names[:shift]:
                decide, width = contenders[name]
                n = calls if width > 1 else calls * 4
                before = server_cpu(admin)
                wall, latencies = await one_round(decide, width, n)
                after = server_cpu(admin)
                decisions = width * n
                results[name]["rates"].append(decisions / wall)
                results[name]["cpu"].append((after - before) * 1e6 / decisions)
                results[name]["latencies"].extend(latencies)
    finally:
        await piped.aclose()
        await plain.aclose()
        await bare_client.aclose()
        admin.close()
    return results


def report(results: dict[str, dict[str, Any]], rounds: int, tasks: int, calls: int) -> str:
    rows = []
    floor_rate: dict[bool, float] = {}
    for name, result in results.items():
        rate = statistics.median(result["rates"])
        many = not name.endswith(("1 task", "1 task, no pipelining"))
        if name.startswith("bare"):
            floor_rate[many] = rate
        latencies = sorted(result["latencies"])
        rows.append(
            (
                name,
                round(rate),
                rate / floor_rate[many],
                percentile(latencies, 50) / 1_000,
                percentile(latencies, 99) / 1_000,
                statistics.median(result["cpu"]),
            )
        )
    return "\n\n".join(
        [
            f"Machine: {machine_note()}; {rounds} rounds, {tasks} tasks x {calls} calls "
            f"(1 task x {calls * 4}) per contender and round.",
            markdown_table(
                [
                    "contender",
                    "decisions/s (median)",
                    "x bare EVALSHA",
                    "p50 µs",
                    "p99 µs",
                    "Redis CPU µs / decision",
                ],
                rows,
            ),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--calls", type=int, default=50, help="decisions per task per round")
    parser.add_argument("--quick", action="store_true", help="3 rounds of 10 calls")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.calls = 3, 10
    with private_redis() as server:
        results = asyncio.run(measure(server.url, args.rounds, args.tasks, args.calls))
    print(report(results, args.rounds, args.tasks, args.calls))


if __name__ == "__main__":
    main()
