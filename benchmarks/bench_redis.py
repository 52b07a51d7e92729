"""Redis server time per decision and memory per bucket, beside `limits` and the floor.

Redis runs scripts on one core, so the server time a decision costs caps what one Redis
(or one cluster shard) can decide. One private redis-server, every contender in the
same run, interleaved in rounds; each round resets ``INFO commandstats``, makes N
decisions, and divides the server's total ``usec`` (every command the contender sent)
by N. Reported: the median over rounds, and the decisions per second one Redis core
could serve at that cost (1e6 / µs).

- the floor: ``EVALSHA`` of ``return 1``;
- Sentinel's scripts with the keys and arguments the engine builds: token bucket and
  sliding window (admitted, and denied), the anonymous AND (two buckets in one call),
  layered limits (two), sent as pipelined ``EVALSHA`` so the client is not the limit;
- `limits` 5.x on ``RedisStorage``: fixed window, moving window, sliding window
  counter, called through their public rate limiters.

Then ``MEMORY USAGE`` (SAMPLES 0) of one bucket per algorithm: Sentinel's with a
4-character endpoint id, `limits`' after 100 hits.

Run from the repository root::

    python -m benchmarks.bench_redis             # about a minute
    python -m benchmarks.bench_redis --fifo      # redis-server under SCHED_FIFO (root):
                                                 # the scripts' own cost, without the
                                                 # preemption a loaded machine adds
    python -m benchmarks.bench_redis --former 3ad11ce   # with the scripts of a git ref
    python -m benchmarks.bench_redis --quick     # a smoke run
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

if not __package__:  # run as a file: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis
from limits import parse
from limits import storage as limits_storage
from limits import strategies as limits_strategies
from prometheus_client import CollectorRegistry

from benchmarks._common import machine_note, markdown_table, private_redis
from sentinel_core import Sentinel
from sentinel_core.identity._keys import AnonymousIdentity, TenantIdentity, anonymous_key_secret

SECRET = "bench-cookie-secret-of-32-bytes-or-more"
# Nothing is denied, and every bucket stays in Redis between two calls (its TTL runs to
# the instant it is full again: these bursts outlast the run), so each call is an
# admitted request against an existing bucket, the common case.
BIG, BURST = "1000/second", 10_000_000
POLICIES: dict[str, dict[str, Any]] = {
    "tb": {"algorithm": "token_bucket", "rate": BIG, "burst": BURST, "fail_mode": "closed"},
    "sw": {"algorithm": "sliding_window", "rate": "1000000/hour", "fail_mode": "closed"},
    "tbd": {"algorithm": "token_bucket", "rate": "1/hour", "fail_mode": "closed"},
    "swd": {"algorithm": "sliding_window", "rate": "1/hour", "fail_mode": "closed"},
    "anon": {
        "algorithm": "token_bucket",
        "rate": BIG,
        "burst": BURST,
        "fail_mode": "closed",
        "identity": "anonymous",
    },
    "lay": {
        "algorithm": "token_bucket",
        "rates": ["100000/minute", "10000000/day"],
        "fail_mode": "closed",
    },
    "ping": {"algorithm": "token_bucket", "rate": "100/minute", "fail_mode": "closed"},
    "pong": {"algorithm": "sliding_window", "rate": "100/minute", "fail_mode": "closed"},
}
LIMITS_RATE = "1000000/hour"
LIMITS = {
    "limits fixed window": limits_strategies.FixedWindowRateLimiter,
    "limits moving window": limits_strategies.MovingWindowRateLimiter,
    "limits sliding window counter": limits_strategies.SlidingWindowCounterRateLimiter,
}


def server_usec(client: redis.Redis) -> tuple[float, int]:
    """(total usec, total calls) over every command since the last CONFIG RESETSTAT."""
    stats = client.info("commandstats")
    usec = sum(float(v["usec"]) for k, v in stats.items() if k != "cmdstat_config")
    calls = sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_config")
    return usec, calls


def script_contender(client: redis.Redis, sentinel: Sentinel, name: str, identity: Any) -> Any:
    policy = sentinel.policy(name)
    call = sentinel._engine.script_call(policy, identity)  # noqa: SLF001 (Sentinel's own)
    sha = client.script_load(call.script.source)
    return lambda n: pipelined(client, n, sha, call.keys, call.args)


def pipelined(client: redis.Redis, n: int, sha: str, keys: Any, args: Any) -> None:
    pipe = client.pipeline(transaction=False)
    for i in range(n):
        pipe.evalsha(sha, len(keys), *keys, *args)
        if i % 500 == 499:
            pipe.execute()
    pipe.execute()


def limits_contender(url: str, strategy: Any, label: str) -> Callable[[int], None]:
    limiter = strategy(limits_storage.RedisStorage(url))
    item = parse(LIMITS_RATE)

    def run(n: int) -> None:
        for _ in range(n):
            limiter.hit(item, label)

    return run


FORMER_ARGS = {
    # the layouts before GCRA (ARGV without a mode): token bucket (capacity in
    # micro-tokens, count, period s, cost in micro-tokens); sliding window (limit,
    # window us, cost), at the same rates as the admitted contenders
    "token_bucket": [BURST * 1_000_000, 1_000, 1, 1_000_000],
    "sliding_window": [1_000_000, 3_600_000_000, 1],
}


def former_contenders(client: redis.Redis, ref: str) -> dict[str, Callable[[int], None]]:
    """The scripts as they were at git ``ref`` (before this round's rewrite: 3ad11ce)."""

    def source(name: str) -> str:
        path = f"sentinel_core/store/lua/{name}.lua"
        return subprocess.run(
            ["git", "show", f"{ref}:{path}"], capture_output=True, text=True, check=True
        ).stdout

    contenders: dict[str, Callable[[int], None]] = {}
    for name, args in FORMER_ARGS.items():
        sha = client.script_load(source("integers") + source(name))
        key = f"sentinel:v1:{{{'f' * 64}}}:former-{name}:1"  # its 64-hex-digit key
        label = f"former {name.replace('_', ' ')} ({ref}, admitted)"
        contenders[label] = lambda k, sha=sha, key=key, args=args: pipelined(
            client, k, sha, [key], args
        )
    return contenders


def measure(url: str, rounds: int, n: int, former: str | None) -> dict[str, list[float]]:
    client = redis.Redis.from_url(url)
    config = {"redis_url": url, "policies": POLICIES, "anonymous": {"cookie_secret": SECRET}}
    sentinel = Sentinel(config, registry=CollectorRegistry(), entry_points=False)
    tenant = TenantIdentity("bench-tenant")
    anonymous = AnonymousIdentity("bench-device", "ipv4:192.0.2.1", anonymous_key_secret(SECRET))
    floor = client.script_load("return 1")
    contenders: dict[str, Callable[[int], None]] = {
        "floor: EVALSHA of `return 1`": lambda k: pipelined(client, k, floor, ["k"], []),
        "Sentinel token bucket (admitted)": script_contender(client, sentinel, "tb", tenant),
        "Sentinel token bucket (denied)": script_contender(client, sentinel, "tbd", tenant),
        "Sentinel sliding window (admitted)": script_contender(client, sentinel, "sw", tenant),
        "Sentinel sliding window (denied)": script_contender(client, sentinel, "swd", tenant),
        "Sentinel anonymous AND (2 buckets)": script_contender(client, sentinel, "anon", anonymous),
        "Sentinel layered limits (2 buckets)": script_contender(client, sentinel, "lay", tenant),
        **{label: limits_contender(url, strategy, label) for label, strategy in LIMITS.items()},
        **(former_contenders(client, former) if former else {}),
    }
    # Denied contenders start from a spent bucket.
    sentinel.evaluate("tbd", tenant)
    sentinel.evaluate("swd", tenant)
    results: dict[str, list[float]] = {name: [] for name in contenders}
    try:
        for round_index in range(rounds):
            names = list(contenders)
            names = names[round_index % len(names) :] + names[: round_index % len(names)]
            for name in names:
                client.config_resetstat()
                contenders[name](n)
                usec, calls = server_usec(client)
                assert calls >= n, (name, calls)
                results[name].append(usec / n)
    finally:
        sentinel.close()
        client.close()
    return results


def memory(url: str) -> list[tuple[str, int, str]]:
    client = redis.Redis.from_url(url)
    client.flushall()
    config = {"redis_url": url, "policies": POLICIES, "anonymous": {"cookie_secret": SECRET}}
    sentinel = Sentinel(config, registry=CollectorRegistry(), entry_points=False)
    rows: list[tuple[str, int, str]] = []
    try:
        for name, label in (("ping", "Sentinel token bucket"), ("pong", "Sentinel sliding window")):
            for _ in range(3):
                sentinel.evaluate(name, "tenant-a")
            (key,) = TenantIdentity("tenant-a").bucket_keys(sentinel.policy(name))
            value = client.get(key) or b""
            encoding = client.object("encoding", key)
            detail = f"key {len(key)} B, value {len(value)} B ({_text(encoding)})"
            rows.append((label, int(client.memory_usage(key, samples=0) or 0), detail))
        storage = limits_storage.RedisStorage(url)
        item = parse("100/minute")
        for label, strategy in LIMITS.items():
            limiter = strategy(storage)
            marker = f"mem-{label.replace(' ', '-')}"
            for _ in range(100):
                limiter.hit(item, marker)
            keys = sorted(client.scan_iter(match=f"*{marker}*"))
            total = sum(int(client.memory_usage(key, samples=0) or 0) for key in keys)
            kinds = ", ".join(_text(client.type(key)) for key in keys)
            rows.append((f"{label} (100 hits)", total, f"{len(keys)} key(s): {kinds}"))
    finally:
        sentinel.close()
        client.close()
    return rows


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def report(results: dict[str, list[float]], mem: list[tuple[str, int, str]], fifo: bool) -> str:
    floor = statistics.median(results["floor: EVALSHA of `return 1`"])
    rows = []
    for name, samples in results.items():
        median = statistics.median(samples)
        rows.append((name, median, min(samples), median / floor, round(1e6 / median)))
    priority = "SCHED_FIFO" if fifo else "normal priority"
    return "\n\n".join(
        [
            f"Machine: {machine_note()}; redis-server at {priority}.",
            markdown_table(
                [
                    "contender",
                    "Redis µs / decision (median)",
                    "min",
                    "x floor",
                    "decisions/s per Redis core",
                ],
                rows,
            ),
            markdown_table(
                ["bucket", "MEMORY USAGE (B)", "layout"], [(a, b, c) for a, b, c in mem]
            ),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    parser.add_argument("--fifo", action="store_true", help="redis-server under SCHED_FIFO")
    parser.add_argument(
        "--former", metavar="REF", help="also run the scripts as they were at git REF"
    )
    args = parser.parse_args()
    rounds, n = (2, 200) if args.quick else (11, 2_000)
    with private_redis(maxmemory=256 * 1024 * 1024) as server:
        if args.fifo:
            pid = int(server.client().info("server")["process_id"])
            os.sched_setscheduler(pid, os.SCHED_FIFO, os.sched_param(10))
        results = measure(server.url, rounds, n, args.former)
        print(report(results, memory(server.url), args.fifo))


if __name__ == "__main__":
    main()
