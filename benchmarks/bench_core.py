"""Core decision speed and bucket memory, beside the floor and the `limits` library.

One run, one private redis-server started here, every contender interleaved in rounds:

- the floor: a bare ``EVALSHA`` of ``return 1`` (redis-py, sync and asyncio);
- ``Sentinel.evaluate`` / ``await Sentinel.aevaluate`` on a token bucket and a sliding
  window policy, as a user gets them (tenant id hashed per call, built-in metrics and
  denial-log plugins registered), and the sync token bucket once more without those
  plugins, to show what they cost, and Sentinel's token-bucket script sent with a bare
  ``EVALSHA`` (its real keys and arguments, none of Sentinel's Python);
- ``limits`` (FixedWindow, MovingWindow, SlidingWindowCounter rate limiters on
  ``RedisStorage``, and their ``limits.aio`` twins on redis-py's asyncio client).

All at ``100/minute``. Each contender cycles over its own pool of identities, so no key
is shared and nothing is denied (the denied column proves it): every call is an admitted
request against an existing bucket, the common case. Then ``MEMORY USAGE`` of one key
per algorithm after 100 admitted hits.

Run from the repository root::

    python -m benchmarks.bench_core               # about a minute
    python -m benchmarks.bench_core --quick       # a smoke run
    python -m benchmarks.bench_core --in-process  # the in-process work only: seconds
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import itertools
import statistics
import sys
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

if not __package__:  # run as a file: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis
import redis.asyncio
from limits import parse
from limits import storage as limits_storage
from limits import strategies as limits_strategies
from limits.aio import storage as alimits_storage
from limits.aio import strategies as alimits_strategies
from prometheus_client import CollectorRegistry

from benchmarks._common import (
    AnyCall,
    Stats,
    arun_rounds,
    machine_note,
    markdown_table,
    private_redis,
    run_rounds,
)
from sentinel_core import Sentinel, TenantIdentity

RATE = "100/minute"
LIMIT = 100
POOL = 1_000
SERVER_TIME_CALLS = 1_000
SERVER_TIME_ROUNDS = 10
"""Identities per contender: the full run makes about 20 calls per identity, far
below the limit of 100 a minute."""

TB, SW = "core.token_bucket", "core.sliding_window"
LIMITS_STRATEGIES = {
    "fixed window": (
        limits_strategies.FixedWindowRateLimiter,
        alimits_strategies.FixedWindowRateLimiter,
    ),
    "moving window": (
        limits_strategies.MovingWindowRateLimiter,
        alimits_strategies.MovingWindowRateLimiter,
    ),
    "sliding window counter": (
        limits_strategies.SlidingWindowCounterRateLimiter,
        alimits_strategies.SlidingWindowCounterRateLimiter,
    ),
}


def sentinel_config(url: str) -> dict[str, Any]:
    return {
        "redis_url": url,
        # Generous, so a scheduling hiccup on the shared box is not a timeout decision.
        "socket_timeout_ms": 500,
        "policies": {
            TB: {"algorithm": "token_bucket", "rate": RATE, "fail_mode": "closed"},
            SW: {"algorithm": "sliding_window", "rate": RATE, "fail_mode": "closed"},
        },
    }


def identities(prefix: str) -> Iterator[str]:
    return itertools.cycle([f"{prefix}-{index}" for index in range(POOL)])


class Contenders:
    """Builds the callables to time, and tallies every outcome that was not an admission."""

    def __init__(self) -> None:
        self.calls: dict[str, AnyCall] = {}
        self.denied: Counter[str] = Counter()

    def sentinel(self, name: str, sentinel: Sentinel, endpoint: str, is_async: bool) -> None:
        tenants = identities(name)
        denied = self.denied

        def decide() -> None:
            if not sentinel.evaluate(endpoint, next(tenants)).allowed:
                denied[name] += 1

        async def adecide() -> None:
            if not (await sentinel.aevaluate(endpoint, next(tenants))).allowed:
                denied[name] += 1

        self.calls[name] = adecide if is_async else decide

    def limits(self, name: str, limiter: Any, is_async: bool) -> None:
        item, tenants, denied = parse(RATE), identities(name), self.denied

        def hit() -> None:
            if not limiter.hit(item, next(tenants)):
                denied[name] += 1

        async def ahit() -> None:
            if not await limiter.hit(item, next(tenants)):
                denied[name] += 1

        self.calls[name] = ahit if is_async else hit


@dataclass(frozen=True, slots=True)
class Measured:
    stats: dict[str, Stats]
    denied: Counter[str]
    server_us: dict[str, float]
    """Redis-side µs per decision (INFO commandstats), measured apart from the timing."""


async def server_time(client: redis.Redis, call: AnyCall, calls: int) -> float:
    """Redis's own µs per call of ``call``: every command's ``usec`` from INFO
    commandstats (reset first), divided by the calls. The admin commands are excluded."""
    is_async = inspect.iscoroutinefunction(call)
    client.config_resetstat()
    for _ in range(calls):
        result = call()
        if is_async:
            await cast(Awaitable[object], result)
    stats = client.info("commandstats")
    usec = sum(
        float(value["usec"])
        for name, value in stats.items()
        if not name.startswith(("cmdstat_config", "cmdstat_info"))
    )
    return usec / calls


async def measure(url: str, rounds: int, per_round: int) -> Measured:
    sentinel = Sentinel(sentinel_config(url), registry=CollectorRegistry(), entry_points=False)
    sentinel.check()
    await sentinel.acheck()
    bare_sentinel = Sentinel(sentinel_config(url), registry=CollectorRegistry(), entry_points=False)
    for name in ("sentinel.metrics", "sentinel.logging"):
        bare_sentinel.plugin_manager.unregister(name=name)
    client = redis.Redis.from_url(url)
    aclient = redis.asyncio.Redis.from_url(url)
    floor_sha = client.script_load("return 1")
    sync_storage = limits_storage.RedisStorage(url)
    async_storage = alimits_storage.RedisStorage(f"async+{url}", implementation="redispy")

    contenders = Contenders()
    contenders.calls["sync · bare EVALSHA (floor)"] = lambda: client.evalsha(floor_sha, 0)
    # Sentinel's token-bucket script with its real keys and arguments, without any of
    # Sentinel's Python: splits Sentinel's cost into the script's and the library's.
    # (Sentinel's own private engine, as in the tests: what is measured is its parts.)
    engine = sentinel._engine  # noqa: SLF001
    script_calls = itertools.cycle(
        [engine.begin(engine.endpoint(TB), TenantIdentity(f"raw-{i}")).call for i in range(POOL)]
    )

    def raw_script() -> None:
        call = next(script_calls)
        client.evalsha(call.script.sha, len(call.keys), *call.keys, *call.args)

    contenders.calls["sync · raw EVALSHA of Sentinel's token-bucket script"] = raw_script
    contenders.sentinel("sync · Sentinel token bucket", sentinel, TB, is_async=False)
    contenders.sentinel("sync · Sentinel sliding window", sentinel, SW, is_async=False)
    # The same decision without the built-in metrics and denial-log plugins: what they cost.
    contenders.sentinel(
        "sync · Sentinel token bucket, no built-in plugins", bare_sentinel, TB, is_async=False
    )
    for label, (sync_strategy, _) in LIMITS_STRATEGIES.items():
        contenders.limits(f"sync · limits {label}", sync_strategy(sync_storage), is_async=False)

    async def floor() -> None:
        await aclient.evalsha(floor_sha, 0)

    contenders.calls["async · bare EVALSHA (floor)"] = floor
    contenders.sentinel("async · Sentinel token bucket", sentinel, TB, is_async=True)
    contenders.sentinel("async · Sentinel sliding window", sentinel, SW, is_async=True)
    for label, (_, async_strategy) in LIMITS_STRATEGIES.items():
        contenders.limits(f"async · limits {label}", async_strategy(async_storage), is_async=True)

    try:
        stats = await arun_rounds(
            contenders.calls, rounds=rounds, per_round=per_round, warmup=min(200, per_round)
        )
        # Interleaved in rounds as well, and the median round kept: the server's clock
        # runs while its process waits for a CPU, so one noisy moment must not decide.
        server_rounds: dict[str, list[float]] = {name: [] for name in contenders.calls}
        for _ in range(SERVER_TIME_ROUNDS):
            for name, call in contenders.calls.items():
                server_rounds[name].append(
                    await server_time(client, call, SERVER_TIME_CALLS // SERVER_TIME_ROUNDS)
                )
        server_us = {name: statistics.median(values) for name, values in server_rounds.items()}
    finally:
        sentinel.close()
        bare_sentinel.close()
        await sentinel.aclose()
        client.close()
        await aclient.aclose()
    return Measured(stats, contenders.denied, server_us)


class RecordedClient:
    """A Redis client that answers every command with one recorded reply, at once."""

    def __init__(self, reply: Any) -> None:
        self.reply = reply

    def execute_command(self, *args: Any, **options: Any) -> Any:
        return self.reply

    def close(self) -> None:
        """Nothing to release."""


def in_process(url: str, calls: int) -> dict[str, Stats]:
    """The decision's work in this process, without the Redis round trip.

    The engine's three steps on a recorded script reply: policy, keys and breaker
    permit (``begin``), the script call's arguments, then reply parsing, breaker
    bookkeeping, the `Decision` and the observers (``succeeded``). The tenant id is
    hashed per call as in ``evaluate``. Then the whole of ``Sentinel.evaluate`` (tenant
    identity, the call sent to the store's client, the decision), its Redis client
    answering the recorded reply at once.
    """
    shipped = Sentinel(sentinel_config(url), registry=CollectorRegistry(), entry_points=False)
    bare = Sentinel(sentinel_config(url), registry=CollectorRegistry(), entry_points=False)
    for name in ("sentinel.metrics", "sentinel.logging"):
        bare.plugin_manager.unregister(name=name)
    engine = shipped._engine  # noqa: SLF001 (our own)
    attempt = engine.begin(engine.endpoint(TB), TenantIdentity("recorded"))
    reply = shipped.store.run(attempt.call)  # what this tree's script answers an admission
    attempt.succeeded(reply)

    def work(sentinel: Sentinel) -> Callable[[], object]:
        tenants = identities("in-process")
        engine = sentinel._engine  # noqa: SLF001 (Sentinel's own engine, measured alone)
        endpoint = engine.endpoint(TB)
        return lambda: engine.begin(endpoint, TenantIdentity(next(tenants))).succeeded(reply)

    def evaluate(sentinel: Sentinel) -> Callable[[], object]:
        tenants = identities("evaluate")
        sentinel.store.client = RecordedClient(reply)  # type: ignore[attr-defined]
        return lambda: sentinel.evaluate(TB, next(tenants))

    try:
        return run_rounds(
            {
                "begin + succeeded, as shipped": work(shipped),
                "begin + succeeded, no built-in plugins": work(bare),
                "evaluate on a recorded reply, as shipped": evaluate(shipped),
                "evaluate on a recorded reply, no built-in plugins": evaluate(bare),
            },
            rounds=5,
            per_round=calls // 5,
        )
    finally:
        shipped.close()
        bare.close()


def in_process_table(local: dict[str, Stats]) -> str:
    return markdown_table(
        ["set-up", "calls", "p50 µs", "p99 µs"],
        [(name, item.count, item.p50_us, item.p99_us) for name, item in local.items()],
    )


def memory_usage(url: str) -> list[tuple[str, int, str]]:
    """``MEMORY USAGE`` (exact: SAMPLES 0) of one bucket per algorithm after 100 hits."""
    client = redis.Redis.from_url(url)
    sentinel = Sentinel(sentinel_config(url), registry=CollectorRegistry(), entry_points=False)
    probe = "memory-probe"
    rows: list[tuple[str, int, str]] = []
    try:
        for endpoint, label in ((TB, "Sentinel token bucket"), (SW, "Sentinel sliding window")):
            for _ in range(LIMIT):
                assert sentinel.evaluate(endpoint, probe).allowed
            (key,) = TenantIdentity(probe).bucket_keys(sentinel.config.policies[endpoint])
            value = client.get(key) or b""
            rows.append(
                (label, _usage(client, key), f"1 string: key {len(key)} B, value {len(value)} B")
            )
            # For scale: the same value and TTL under a 1-byte name, i.e. what the SPEC's
            # key shape (prefix, the identity's 22-character hash, endpoint id) adds.
            client.set("k", value, px=60_000)
            rows.append((f"{label}, same value under a 1-byte key", _usage(client, "k"), ""))
            client.delete("k")
        storage = limits_storage.RedisStorage(url)
        item = parse(RATE)
        for label, (strategy, _) in LIMITS_STRATEGIES.items():
            limiter = strategy(storage)
            marker = f"memory-{label.replace(' ', '-')}"
            for _ in range(LIMIT):
                assert limiter.hit(item, marker)
            keys = sorted(client.scan_iter(match=f"*{marker}*"))
            kinds = ", ".join(_text(client.type(key)) for key in keys)
            total = sum(_usage(client, key) for key in keys)
            rows.append((f"limits {label}", total, f"{len(keys)} key(s): {kinds}"))
    finally:
        sentinel.close()
        client.close()
    return rows


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _usage(client: redis.Redis, key: str | bytes) -> int:
    return int(client.memory_usage(key, samples=0) or 0)


def report(measured: Measured, local: dict[str, Stats], memory: list[tuple[str, int, str]]) -> str:
    stats, denied = measured.stats, measured.denied
    floors = {api: stats[f"{api} · bare EVALSHA (floor)"] for api in ("sync", "async")}

    def floor_of(name: str) -> Stats:
        return floors[name.split(" · ")[0]]

    rows = [
        (
            name,
            item.count,
            round(item.per_second),
            item.p50_us,
            item.p99_us,
            f"{item.p50_us / floor_of(name).p50_us:.2f}",
            measured.server_us[name],
            denied[name],
        )
        for name, item in stats.items()
    ]
    lines = [
        markdown_table(
            [
                "contender",
                "calls",
                "decisions/s",
                "p50 µs",
                "p99 µs",
                "p50 / floor p50",
                "Redis µs/call",
                "denied",
            ],
            rows,
        ),
        "",
        f"Redis µs/call: the server's own time per call (INFO commandstats; median of"
        f" {SERVER_TIME_ROUNDS} interleaved rounds of {SERVER_TIME_CALLS // SERVER_TIME_ROUNDS}"
        " calls, after the timed rounds); the rest of p50 is the network round trip and"
        " the client.",
        "",
        "Sentinel p50 / limits p50 (same API; below 1.00 means Sentinel is faster):",
        "",
    ]
    strategies = list(LIMITS_STRATEGIES)
    ratio_rows = []
    for api in ("sync", "async"):
        for algorithm in ("token bucket", "sliding window"):
            mine = stats[f"{api} · Sentinel {algorithm}"]
            ratio_rows.append(
                (
                    f"{api} · Sentinel {algorithm}",
                    f"{mine.p50_us / floor_of(api).p50_us:.2f}",
                    *(
                        f"{mine.p50_us / stats[f'{api} · limits {other}'].p50_us:.2f}"
                        for other in strategies
                    ),
                )
            )
    lines.append(
        markdown_table(
            ["", "vs bare EVALSHA (target ≤ 1.25)", *(f"vs limits {s}" for s in strategies)],
            ratio_rows,
        )
    )
    lines += [
        "",
        "In-process work of one sync token-bucket decision, no I/O (engine, keys, reply"
        " parsing, Decision, observers; the script reply is a recorded one; evaluate: the"
        " whole call, its Redis client answering that reply at once):",
        "",
        in_process_table(local),
    ]
    lines += [
        "",
        f"`MEMORY USAGE` after {LIMIT} hits at {RATE} (what one bucket holds in Redis):",
        "",
        markdown_table(["bucket", "bytes", "shape"], memory),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 short rounds: a smoke run")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--per-round", type=int, default=500)
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="only the in-process work (a recorded reply, no round trip): seconds",
    )
    args = parser.parse_args(argv)
    rounds, per_round = (3, 200) if args.quick else (args.rounds, args.per_round)
    if args.in_process:
        with private_redis() as server:
            local = in_process(server.url, 200_000)
        print(f"Machine: {machine_note()}\n")
        print(in_process_table(local))
        return 0
    with private_redis() as server:
        measured = asyncio.run(measure(server.url, rounds, per_round))
        local = in_process(server.url, 20_000)
        memory = memory_usage(server.url)
    print(f"# bench_core: {rounds} rounds x {per_round} calls per contender, interleaved")
    print(f"Machine: {machine_note()}\n")
    print(report(measured, local, memory))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
