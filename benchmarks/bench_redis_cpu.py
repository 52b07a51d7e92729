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
  asyncio server under load): the store auto-pipelines what the tasks send together;
- bare scripts at the same pacing: one plain redis-py ``EVALSHA`` after another, no
  limiter's Python around it, of `limits`' script, of Sentinel's two scripts (the same
  ARGV as the policies above), and of the least any script that keeps SPEC §3's
  invariants runs (``TIME``, ``GET``, ``SET ... PX``, nothing else).

One after another, the server sleeps between two commands and wakes for each, and what
it runs then runs on cold caches: the longer the client's own work between two calls,
the more each command costs the server. The bare rows take the client's speed out:
between them, only the scripts differ. Compare rows of one run. Each row also gives
``INFO commandstats``' time in the scripts themselves (and any other command the
contender sent), per decision.

``--callgrind`` counts instead the instructions redis-server runs per call of the bare
scripts (valgrind's callgrind on a redis-server of its own, user space only): exact and
deaf to the machine's load, so it tells apart Lua changes of a few percent.

Run from the repository root::

    python -m benchmarks.bench_redis_cpu            # about a minute
    python -m benchmarks.bench_redis_cpu --quick    # a smoke run
    python -m benchmarks.bench_redis_cpu --callgrind  # instructions per bare script call
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
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
from sentinel_core._models import Algorithm, Rate
from sentinel_core.store._scripts import bucket_parameters, script
from tests.support.redis_server import free_port

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
FLOOR = """local time = redis.call('TIME')
local state = redis.pcall('GET', KEYS[1])
redis.call('SET', KEYS[1], time[1] * 1000000 + time[2], 'PX', 60000)
return 1"""
"""TIME, GET and SET ... PX and nothing else: what SPEC §3 makes every decision run."""
BARE: dict[str, tuple[str, tuple[int, ...]]] = {
    # name: (script source, ARGV), each called on one existing key after another
    "`limits`' INCRBY + EXPIRE": (limits_storage.RedisStorage.SCRIPT_INCR_EXPIRE, (3_600, 1)),
    "Sentinel token bucket": (
        script(Algorithm.TOKEN_BUCKET.value).source,
        (
            0,
            *bucket_parameters(
                Algorithm.TOKEN_BUCKET, Rate(1_000_000, 1), 10_000_000, 1, alone=True
            ),
        ),
    ),
    "Sentinel sliding window": (
        script(Algorithm.SLIDING_WINDOW.value).source,
        (0, *bucket_parameters(Algorithm.SLIDING_WINDOW, Rate(1_000_000, 3_600), 1_000_000, 1)),
    ),
    "TIME + GET + SET PX only": (FLOOR, ()),
}


def bare(
    client: redis.Redis, source: str, args: tuple[int, ...], tag: str
) -> Callable[[int], None]:
    """Plain EVALSHA calls of ``source``, one after another, over TASKS keys."""
    sha = client.script_load(source)
    keys = [f"bare:{{{tag}-{index}}}" for index in range(TASKS)]

    def run(count: int) -> None:
        for index in range(count):
            client.evalsha(sha, 1, keys[index % TASKS], *args)

    return run


def bare_name(name: str) -> str:
    return f"bare EVALSHA: {name} (one after another)"


def script_time(client: redis.Redis) -> float:
    """Microseconds redis-server has spent in commands since the last CONFIG RESETSTAT
    (INFO commandstats), minus the INFO that asked for the CPU time."""
    stats = client.info("commandstats")
    return sum(float(row["usec"]) for name, row in stats.items() if name != "cmdstat_info")


def measure(url: str, rounds: int, n: int) -> dict[str, list[tuple[float, float]]]:
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
    plain = redis.Redis.from_url(url)
    for index, (name, (source, args)) in enumerate(BARE.items()):
        contenders[bare_name(name)] = bare(plain, source, args, str(index))
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in contenders}
    try:
        for run in contenders.values():  # warm-up: connections, scripts, buckets
            run(TASKS * 4)
        for round_index in range(rounds):
            names = list(contenders)
            shift = round_index % len(names)
            for name in names[shift:] + names[:shift]:
                admin.config_resetstat()
                before = server_cpu(admin)
                contenders[name](n)
                after = server_cpu(admin)
                results[name].append(((after - before) * 1e6 / n, script_time(admin) / n))
    finally:
        plain.close()
        pool.shutdown()
        sentinel.close()
        loop.run_until_complete(sentinel.aclose())
        loop.close()
        admin.close()
    return results


def report(results: dict[str, list[tuple[float, float]]], rounds: int, n: int) -> str:
    reference = statistics.median(cpu for cpu, _ in results[REFERENCE])
    bare_reference = statistics.median(cpu for cpu, _ in results[bare_name(next(iter(BARE)))])
    rows = []
    for name, samples in results.items():
        cpu = statistics.median(cpu for cpu, _ in samples)
        in_commands = statistics.median(usec for _, usec in samples)
        to_bare = f"{cpu / bare_reference:.2f}" if name.startswith("bare") else ""
        rows.append(
            (name, cpu, min(cpu for cpu, _ in samples), cpu / reference, to_bare, in_commands)
        )
    return "\n\n".join(
        [
            f"Machine: {machine_note()}; {rounds} rounds of {n:,} decisions per contender.",
            markdown_table(
                [
                    "contender",
                    "Redis CPU µs / decision (median)",
                    "min",
                    "x limits fixed window",
                    "x bare `limits` script",
                    "in commands µs (commandstats)",
                ],
                rows,
            ),
        ]
    )


@contextmanager
def callgrind_redis() -> Iterator[tuple[redis.Redis, int]]:
    """A redis-server of our own under valgrind's callgrind: a client, and its pid."""
    valgrind, binary = shutil.which("valgrind"), shutil.which("redis-server")
    if not valgrind or not binary:
        raise SystemExit("--callgrind needs valgrind and redis-server on PATH")
    with tempfile.TemporaryDirectory() as directory:
        port = free_port()
        process = subprocess.Popen(
            [
                *(valgrind, "--tool=callgrind", f"--callgrind-out-file={directory}/out", binary),
                *("--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", directory),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=port)
        try:
            for _ in range(600):  # valgrind starts slowly
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    time.sleep(0.1)
            yield client, process.pid
        finally:
            client.close()
            process.terminate()
            process.wait()


def instructions(pid: int, directory_of: str) -> int:
    """Instructions callgrind has counted since it was last zeroed (a dump, then its total)."""
    subprocess.run(["callgrind_control", "--dump", str(pid)], capture_output=True, check=True)
    latest = max(glob.glob(f"{directory_of}/out*"), key=os.path.getmtime)
    with open(latest) as dump:
        for line in dump:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise RuntimeError(f"no totals in {latest}")


def count_instructions(calls: int) -> str:
    """Instructions per call of each bare script, one after another, warm."""
    with callgrind_redis() as (client, pid):
        directory = client.config_get("dir")["dir"]
        per_call = {}
        for index, (name, (source, args)) in enumerate(BARE.items()):
            run = bare(client, source, args, str(index))
            run(TASKS * 2)  # the keys exist, the script is compiled
            subprocess.run(
                ["callgrind_control", "--zero", str(pid)], capture_output=True, check=True
            )
            run(calls)
            per_call[name] = instructions(pid, directory) / calls
    reference = next(iter(per_call.values()))
    rows = [(name, round(count), count / reference) for name, count in per_call.items()]
    return "\n\n".join(
        [
            f"Machine: {machine_note()}; {calls} calls per script, under valgrind's callgrind.",
            markdown_table(
                ["bare EVALSHA, one after another", "redis-server instructions / call", "x limits"],
                rows,
            ),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--decisions", type=int, default=TASKS * 60)
    parser.add_argument("--quick", action="store_true", help="3 rounds of 640 decisions")
    parser.add_argument(
        "--callgrind", action="store_true", help="instructions per bare script call instead"
    )
    args = parser.parse_args()
    if args.callgrind:
        print(count_instructions(400))
        return
    if args.quick:
        args.rounds, args.decisions = 3, TASKS * 10
    with private_redis() as server:
        results = measure(server.url, args.rounds, args.decisions)
    print(report(results, args.rounds, args.decisions))


if __name__ == "__main__":
    main()
