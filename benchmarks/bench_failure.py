"""The failure path's speed: breaker-open short circuit, dead port, blackhole.

Three measurements, in one process, on loopback only:

1. **Short circuit.** The breaker is tripped once against a dead port (nothing
   listening), then ``Sentinel.evaluate`` answers ``circuit_open`` without touching the
   network. Timed for a fail-closed policy (a denial) and a fail-open one (admitted by
   the emergency limiter, whose ``fallback_rate`` is set high enough never to bind), in
   three set-ups interleaved in rounds: the engine alone (built-in plugins
   unregistered), with the built-in metrics plugin, and as shipped (metrics plus the
   denial log, whose records go to a `logging.NullHandler`: the cost of building a
   record, not of writing it). Target: >= 200,000 decisions/s, <= 5 µs each.
2. **Dead port before the breaker trips** (``failure_threshold`` 1,000,000,
   ``socket_timeout_ms`` 20): every call tries to connect and is refused.
3. **Blackhole**: a TCP server in this script accepts and never answers, so every call
   waits out the 20 ms read budget (``redis_timeout``).

Run from the repository root::

    python -m benchmarks.bench_failure
    python -m benchmarks.bench_failure --quick
    python -m benchmarks.bench_failure --profile   # where the µs go
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import logging
import pstats
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

if not __package__:  # run as a file: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client import CollectorRegistry

from benchmarks._common import (
    AnyCall,
    Stats,
    arun_rounds,
    machine_note,
    markdown_table,
    summarize,
)
from sentinel_core import BreakerState, Decision, DecisionReason, Sentinel
from tests.support.redis_server import free_port

ENDPOINT = "failure.bench"
BUDGET_MS = 20
BUILTINS = ("sentinel.metrics", "sentinel.logging")
SETUPS = {
    "engine only": BUILTINS,
    "+ metrics": ("sentinel.logging",),
    "as shipped (metrics + denial log)": (),
}
"""Set-up name -> built-in plugins unregistered for it."""


def make_sentinel(
    url: str,
    fail_mode: str,
    *,
    failure_threshold: int,
    unregister: tuple[str, ...] = (),
) -> Sentinel:
    policy: dict[str, Any] = {"algorithm": "token_bucket", "rate": "100/second"}
    policy["fail_mode"] = fail_mode
    if fail_mode == "open":
        policy["fallback_rate"] = "1000000000/second"  # never binds: every call admitted
    sentinel = Sentinel(
        {
            "redis_url": url,
            "socket_timeout_ms": BUDGET_MS,
            "breaker": {"failure_threshold": failure_threshold, "open_seconds": 86_400},
            "policies": {ENDPOINT: policy},
        },
        registry=CollectorRegistry(),
        entry_points=False,
    )
    for name in unregister:
        sentinel.plugin_manager.unregister(name=name)
    return sentinel


class Tally:
    """Counts decision reasons per contender, so each table row can say what it timed."""

    def __init__(self) -> None:
        self.reasons: dict[str, Counter[DecisionReason]] = {}

    def wrap(self, name: str, decide: Callable[[], Decision]) -> Callable[[], None]:
        counts = self.reasons.setdefault(name, Counter())

        def call() -> None:
            counts[decide().reason] += 1

        return call

    def awrap(self, name: str, sentinel: Sentinel) -> AnyCall:
        counts = self.reasons.setdefault(name, Counter())

        async def call() -> None:
            counts[(await sentinel.aevaluate(ENDPOINT, "tenant")).reason] += 1

        return call

    def describe(self, name: str) -> str:
        return ", ".join(
            f"{reason.value} {count:,}" for reason, count in self.reasons[name].items()
        )


def short_circuit(rounds: int, per_round: int) -> tuple[dict[str, Stats], Tally]:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    tally = Tally()
    contenders: dict[str, AnyCall] = {}
    sentinels = []
    for fail_mode in ("closed", "open"):
        for setup, unregister in SETUPS.items():
            sentinel = make_sentinel(dead, fail_mode, failure_threshold=1, unregister=unregister)
            sentinel.evaluate(ENDPOINT, "tenant")  # refused: trips the breaker
            assert sentinel.breaker_state is BreakerState.OPEN, sentinel.breaker_state
            sentinels.append(sentinel)
            name = f"fail-{fail_mode} · {setup}"
            contenders[name] = tally.wrap(name, partial(sentinel.evaluate, ENDPOINT, "tenant"))
        contenders[f"fail-{fail_mode} · as shipped, aevaluate"] = tally.awrap(
            f"fail-{fail_mode} · as shipped, aevaluate", sentinel
        )
    stats = asyncio.run(arun_rounds(contenders, rounds=rounds, per_round=per_round, warmup=1_000))
    for sentinel in sentinels:
        sentinel.close()
    return stats, tally


def profile_short_circuit(calls: int) -> str:
    """cProfile of the as-shipped fail-closed short circuit: the top functions by own time."""
    sentinel = make_sentinel(f"redis://127.0.0.1:{free_port()}/0", "closed", failure_threshold=1)
    sentinel.evaluate(ENDPOINT, "tenant")
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        sentinel.evaluate(ENDPOINT, "tenant")
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(18)
    sentinel.close()
    return out.getvalue()


class Blackhole:
    """A TCP server that accepts connections and never answers (it reads and drops
    whatever arrives until the client gives up and closes)."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.port = self._listener.getsockname()[1]
        self._stopping = threading.Event()
        threading.Thread(target=self._accept, name="blackhole", daemon=True).start()

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._swallow, args=(conn,), daemon=True).start()

    @staticmethod
    def _swallow(conn: socket.socket) -> None:
        with conn:
            while conn.recv(65536):
                pass

    def close(self) -> None:
        self._stopping.set()
        self._listener.close()


@contextmanager
def blackhole() -> Iterator[Blackhole]:
    server = Blackhole()
    try:
        yield server
    finally:
        server.close()


def failing_calls(url: str, calls: int) -> tuple[Stats, Stats, Counter[DecisionReason]]:
    """Sync and async calls against ``url`` with a breaker that never trips."""
    reasons: Counter[DecisionReason] = Counter()
    sentinel = make_sentinel(url, "closed", failure_threshold=1_000_000, unregister=BUILTINS)
    sync_samples = []
    for _ in range(calls):
        started = time.perf_counter_ns()
        reasons[sentinel.evaluate(ENDPOINT, "tenant").reason] += 1
        sync_samples.append(time.perf_counter_ns() - started)
    sentinel.close()

    async def run_async() -> list[int]:
        asentinel = make_sentinel(url, "closed", failure_threshold=1_000_000, unregister=BUILTINS)
        samples = []
        for _ in range(calls):
            started = time.perf_counter_ns()
            reasons[(await asentinel.aevaluate(ENDPOINT, "tenant")).reason] += 1
            samples.append(time.perf_counter_ns() - started)
        await asentinel.aclose()
        return samples

    async_samples = asyncio.run(run_async())
    return summarize("evaluate", sync_samples), summarize("aevaluate", async_samples), reasons


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--profile", action="store_true", help="also print a cProfile")
    args = parser.parse_args(argv)
    rounds, per_round, failing = (3, 2_000, 50) if args.quick else (10, 10_000, 200)

    # As shipped, every fail-closed short circuit is a denial, and every denial logs a
    # WARNING; a NullHandler keeps the record's cost and drops the output.
    sentinel_logger = logging.getLogger("sentinel")
    sentinel_logger.addHandler(logging.NullHandler())
    sentinel_logger.propagate = False

    print(f"# bench_failure: {BUDGET_MS} ms socket budget")
    print(f"Machine: {machine_note()}\n")

    stats, tally = short_circuit(rounds, per_round)
    print(f"## Breaker OPEN short circuit ({rounds} rounds x {per_round:,} calls, interleaved)\n")
    rows = [
        (
            name,
            round(item.per_second),
            item.mean_us,
            item.p50_us,
            item.p99_us,
            tally.describe(name),
        )
        for name, item in stats.items()
    ]
    print(markdown_table(["set-up", "decisions/s", "mean µs", "p50 µs", "p99 µs", "reasons"], rows))
    print(
        "\nTarget ≥ 200,000 decisions/s (≤ 5 µs each); each figure includes ~0.1 µs of"
        " per-call timer overhead.\n"
    )

    print(f"## Redis unreachable, breaker never trips ({failing} calls each)\n")
    dead_sync, dead_async, dead_reasons = failing_calls(
        f"redis://127.0.0.1:{free_port()}/0", failing
    )
    with blackhole() as hole:
        hole_sync, hole_async, hole_reasons = failing_calls(
            f"redis://127.0.0.1:{hole.port}/0", failing
        )
    failure_rows = [
        ("dead port (connection refused)", "evaluate", dead_sync),
        ("dead port (connection refused)", "aevaluate", dead_async),
        ("blackhole (accepts, never answers)", "evaluate", hole_sync),
        ("blackhole (accepts, never answers)", "aevaluate", hole_async),
    ]
    print(
        markdown_table(
            ["failure", "call", "p50 ms", "p99 ms", "max ms"],
            [
                (what, call, item.p50_us / 1000, item.p99_us / 1000, item.max_us / 1000)
                for what, call, item in failure_rows
            ],
        )
    )
    print(
        f"\nReasons: dead port {_reasons(dead_reasons)}; blackhole {_reasons(hole_reasons)}."
        f" Budget: socket_timeout_ms = {BUDGET_MS}.\n"
    )

    if args.profile:
        print("## cProfile: fail-closed short circuit, as shipped (100,000 calls)\n")
        print("```\n" + profile_short_circuit(100_000).strip() + "\n```")
    return 0


def _reasons(counts: Counter[DecisionReason]) -> str:
    return ", ".join(f"{reason.value} {count}" for reason, count in counts.items())


if __name__ == "__main__":
    raise SystemExit(main())
