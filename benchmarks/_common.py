"""Helpers every benchmark script shares: private Redis, fair interleaved timing, tables.

The machine the figures come from is small and shared, so no absolute number is
trusted alone: contenders run in interleaved rounds (A, B, C, A, B, C, ...) inside one
process against one server, and the scripts report ratios of medians measured side by
side. Import this module before anything from the repository: it puts the repository
root on ``sys.path`` so ``python benchmarks/<script>.py`` works as well as
``python -m benchmarks.<script>``.
"""

from __future__ import annotations

import gc
import inspect
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.support.redis_server import RedisServer  # noqa: E402  (needs the path above)

SyncCall = Callable[[], object]
AnyCall = Callable[[], object] | Callable[[], Awaitable[object]]


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (0 < q <= 100) of already sorted values."""
    if not sorted_values:
        raise ValueError("no samples")
    rank = max(1, -(-len(sorted_values) * q // 100))
    return sorted_values[int(rank) - 1]


@dataclass(frozen=True, slots=True)
class Stats:
    """Per-call latencies of one contender, in microseconds."""

    name: str
    count: int
    p50_us: float
    p99_us: float
    max_us: float
    mean_us: float

    @property
    def per_second(self) -> float:
        """Sequential calls per second on one connection: 1 / mean latency."""
        return 1_000_000 / self.mean_us if self.mean_us else float("inf")


def summarize(name: str, samples_ns: Sequence[int]) -> Stats:
    ordered = sorted(samples_ns)
    return Stats(
        name=name,
        count=len(ordered),
        p50_us=percentile(ordered, 50) / 1_000,
        p99_us=percentile(ordered, 99) / 1_000,
        max_us=ordered[-1] / 1_000,
        mean_us=sum(ordered) / len(ordered) / 1_000,
    )


def _order(names: Sequence[str], round_index: int) -> list[str]:
    # Rotate who goes first each round, so no contender always follows the same one.
    shift = round_index % len(names)
    return [*names[shift:], *names[:shift]]


def run_rounds(
    contenders: Mapping[str, SyncCall], *, rounds: int, per_round: int, warmup: int = 200
) -> dict[str, Stats]:
    """Time blocking calls, ``per_round`` calls of each contender per round, interleaved.

    Returns the stats per contender name, in the mapping's order.
    """
    samples: dict[str, list[int]] = {name: [] for name in contenders}
    for call in contenders.values():
        for _ in range(warmup):
            call()
    clock = time.perf_counter_ns
    for round_index in range(rounds):
        gc.collect()
        for name in _order(list(contenders), round_index):
            call, out = contenders[name], samples[name]
            for _ in range(per_round):
                started = clock()
                call()
                out.append(clock() - started)
    return {name: summarize(name, values) for name, values in samples.items()}


async def arun_rounds(
    contenders: Mapping[str, AnyCall], *, rounds: int, per_round: int, warmup: int = 200
) -> dict[str, Stats]:
    """`run_rounds` inside a running event loop: coroutine functions are awaited, plain
    callables are called, so sync and async contenders interleave in one run."""
    samples: dict[str, list[int]] = {name: [] for name in contenders}
    is_async = {name: inspect.iscoroutinefunction(call) for name, call in contenders.items()}
    for name, call in contenders.items():
        for _ in range(warmup):
            result = call()
            if is_async[name]:
                await cast(Awaitable[object], result)
    clock = time.perf_counter_ns
    for round_index in range(rounds):
        gc.collect()
        for name in _order(list(contenders), round_index):
            call, out = contenders[name], samples[name]
            if is_async[name]:
                acall = cast(Callable[[], Awaitable[object]], call)
                for _ in range(per_round):
                    started = clock()
                    await acall()
                    out.append(clock() - started)
            else:
                for _ in range(per_round):
                    started = clock()
                    call()
                    out.append(clock() - started)
    return {name: summarize(name, values) for name, values in samples.items()}


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub Markdown table; floats get at most one decimal (two below 10)."""

    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:,.2f}" if abs(value) < 10 else f"{value:,.1f}"
        if isinstance(value, int):
            return f"{value:,}"
        return str(value)

    lines = [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join("---" for _ in headers) + "|",
        *("| " + " | ".join(cell(value) for value in row) + " |" for row in rows),
    ]
    return "\n".join(lines)


@contextmanager
def private_redis(**options: Any) -> Iterator[RedisServer]:
    """A redis-server of our own on a free loopback port (never the shared 6379),
    killed and its directory removed on exit. ``options`` go to `RedisServer`."""
    server = RedisServer(**options).start()
    try:
        yield server
    finally:
        server.close()


def server_cpu(client: Any) -> float:
    """Seconds of CPU a redis-server has used (user + sys, every thread), read from
    ``INFO cpu`` through ``client`` (a ``redis.Redis``): the difference around a run,
    divided by its calls, is the server's CPU per call."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def machine_note() -> str:
    """One line naming what the figures were measured on."""
    binary = shutil.which("redis-server") or "redis-server"
    try:
        redis_version = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, check=False, timeout=5
        ).stdout.split()[2]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        redis_version = "unknown"
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    return (
        f"{os.cpu_count()} CPUs, load average {load}, Python {platform.python_version()}, "
        f"redis-server {redis_version.removeprefix('v=')}"
    )
