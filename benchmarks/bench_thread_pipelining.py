"""Would threads gain from auto-pipelining? A measurement behind a design decision.

The asyncio store pipelines the calls of one event-loop turn (`store._pipelining`).
Threads have no turn: a batch would need one thread to send for others that wait
(a leader takes what is queued, writes it as one pipeline, reads the replies and wakes
each waiter). This script measures that prototype (here, not in the store) against what
the blocking store does, each thread sending its own call on its own pooled connection:
T threads making calls back to back for T seconds' worth of rounds, interleaved, on
one private redis-server. Every call is an ``EVALSHA`` of Sentinel's token bucket with
the engine's keys and arguments (the Redis work of one decision, without the engine).

Reported: calls per second (all threads), p50 and p99 latency, Redis CPU per call
(``INFO cpu``).

    python -m benchmarks.bench_thread_pipelining            # about a minute
    python -m benchmarks.bench_thread_pipelining --quick
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if not __package__:  # run as a file: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis
from prometheus_client import CollectorRegistry

from benchmarks._common import machine_note, markdown_table, percentile, private_redis, server_cpu
from sentinel_core import Sentinel
from sentinel_core.identity._keys import TenantIdentity

POLICY = {
    "algorithm": "token_bucket",
    "rate": "1000000/second",
    "burst": 10_000_000,
    "fail_mode": "closed",
}
Call = Callable[[int], Any]


class Combiner:
    """Leader/follower batching for threads: the first caller with nothing in flight
    sends alone; callers that arrive while a batch is out queue, and the leader that
    finishes takes the queue and sends it as one pipeline."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._lock = threading.Lock()
        self._queue: list[tuple[tuple[Any, ...], list[Any], threading.Event]] = []
        self._leading = False

    def execute(self, *command: Any) -> Any:
        slot: list[Any] = []
        done = threading.Event()
        with self._lock:
            self._queue.append((command, slot, done))
            if self._leading:
                lead = False
            else:
                self._leading = lead = True
        if not lead:
            done.wait()
            return slot[0]
        while True:
            with self._lock:
                batch, self._queue = self._queue, []
                if not batch:
                    self._leading = False
                    break
            pipe = self._client.pipeline(transaction=False)
            for queued, _, _ in batch:
                pipe.execute_command(*queued)
            for (_, out, event), reply in zip(batch, pipe.execute(), strict=True):
                out.append(reply)
                event.set()
        return slot[0]


def run_threads(call: Call, threads: int, calls: int) -> tuple[float, list[int]]:
    latencies: list[list[int]] = [[] for _ in range(threads)]
    barrier = threading.Barrier(threads + 1)
    clock = time.perf_counter_ns

    def worker(index: int) -> None:
        out = latencies[index]
        barrier.wait()
        for _ in range(calls):
            started = clock()
            call(index)
            out.append(clock() - started)

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for thread in workers:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in workers:
        thread.join()
    return time.perf_counter() - started, [x for out in latencies for x in out]


def measure(url: str, rounds: int, threads: int, calls: int) -> dict[str, dict[str, Any]]:
    admin = redis.Redis.from_url(url)
    config = {"redis_url": url, "policies": {"tb": POLICY}}
    sentinel = Sentinel(config, registry=CollectorRegistry(), entry_points=False)
    policy = sentinel.policy("tb")
    script_calls = [
        sentinel._engine.script_call(policy, TenantIdentity(f"tenant-{i}"))  # noqa: SLF001
        for i in range(threads)
    ]
    sha = admin.script_load(script_calls[0].script.source)
    plain = redis.Redis.from_url(url, max_connections=threads + 4)
    combiner = Combiner(redis.Redis.from_url(url))

    def own_connection(index: int) -> Any:
        call = script_calls[index]
        return plain.execute_command("EVALSHA", sha, len(call.keys), *call.keys, *call.args)

    def combined(index: int) -> Any:
        call = script_calls[index]
        return combiner.execute("EVALSHA", sha, len(call.keys), *call.keys, *call.args)

    contenders = {
        f"{threads} threads, a connection each (the blocking store)": own_connection,
        f"{threads} threads, leader/follower pipeline (prototype)": combined,
    }
    results = {name: {"rates": [], "cpu": [], "latencies": []} for name in contenders}
    try:
        for call in contenders.values():
            run_threads(call, threads, 20)
        for round_index in range(rounds):
            names = list(contenders)
            if round_index % 2:
                names.reverse()
            for name in names:
                before = server_cpu(admin)
                wall, latencies = run_threads(contenders[name], threads, calls)
                after = server_cpu(admin)
                results[name]["rates"].append(threads * calls / wall)
                results[name]["cpu"].append((after - before) * 1e6 / (threads * calls))
                results[name]["latencies"].extend(latencies)
    finally:
        sentinel.close()
        plain.close()
        admin.close()
    return results


def report(results: dict[str, dict[str, Any]], rounds: int, threads: int, calls: int) -> str:
    rows = []
    for name, result in results.items():
        latencies = sorted(result["latencies"])
        rows.append(
            (
                name,
                round(statistics.median(result["rates"])),
                percentile(latencies, 50) / 1_000,
                percentile(latencies, 99) / 1_000,
                statistics.median(result["cpu"]),
            )
        )
    return "\n\n".join(
        [
            f"Machine: {machine_note()}; {rounds} rounds, {threads} threads x {calls} calls.",
            markdown_table(
                ["contender", "calls/s (median)", "p50 µs", "p99 µs", "Redis CPU µs / call"],
                rows,
            ),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.calls = 2, 50
    with private_redis() as server:
        results = measure(server.url, args.rounds, args.threads, args.calls)
    print(report(results, args.rounds, args.threads, args.calls))


if __name__ == "__main__":
    main()
