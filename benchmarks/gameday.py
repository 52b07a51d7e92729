"""Game day: kill Redis under load, bring it back, and print what the limiter did.

Load runs through two endpoints, one fail-closed and one fail-open, on a private
redis-server. After a warm-up the server is killed (SIGKILL, an outage, not a shutdown),
load continues for ``--down`` seconds, the server is restarted on the same port (empty:
no persistence, no scripts loaded), and load continues until the breaker has closed
again, plus one second. A plugin records every breaker transition
(``sentinel_breaker_transition``) and every decision (``sentinel_decision``); the script
prints the timeline, the decisions per reason in each phase, and checks the fail-open
admissions against the emergency limiter's bound, capacity + fallback_rate x elapsed.

Run from the repository root::

    python -m benchmarks.gameday              # 4 threads, evaluate
    python -m benchmarks.gameday --asyncio    # 50 tasks, aevaluate
    python -m benchmarks.gameday --plot docs/img/gameday.png
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if not __package__:  # run as a file: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client import CollectorRegistry

from benchmarks._common import machine_note, markdown_table, percentile
from benchmarks._plots import timeline_png
from sentinel_core import (
    BreakerState,
    Decision,
    DecisionReason,
    Sentinel,
    hookimpl,
)
from tests.support.redis_server import RedisServer

CLOSED_ENDPOINT, OPEN_ENDPOINT = "gameday.fail_closed", "gameday.fail_open"
FALLBACK_PER_SECOND = 50
OPEN_SECONDS = 2
REDIS_VERDICTS = frozenset({DecisionReason.ALLOWED, DecisionReason.RATE_LIMITED})


def config(url: str) -> dict[str, Any]:
    return {
        "redis_url": url,
        "socket_timeout_ms": 20,
        "breaker": {"failure_threshold": 5, "open_seconds": OPEN_SECONDS},
        "policies": {
            CLOSED_ENDPOINT: {
                "algorithm": "sliding_window",
                "rate": "600/second",
                "fail_mode": "closed",
            },
            OPEN_ENDPOINT: {
                "algorithm": "token_bucket",
                "rate": "600/second",
                "fail_mode": "open",
                "fallback_rate": f"{FALLBACK_PER_SECOND}/second",
            },
        },
    }


@dataclass(frozen=True, slots=True)
class Seen:
    at: float
    endpoint_id: str
    reason: DecisionReason
    allowed: bool
    latency_us: int


@dataclass
class Recorder:
    """A Sentinel plugin that timestamps every transition and decision (monotonic s)."""

    clock: Callable[[], float] = time.monotonic
    transitions: list[tuple[float, BreakerState, BreakerState]] = field(default_factory=list)
    decisions: list[Seen] = field(default_factory=list)

    @hookimpl
    def sentinel_breaker_transition(self, previous: BreakerState, current: BreakerState) -> None:
        self.transitions.append((self.clock(), previous, current))

    @hookimpl
    def sentinel_decision(self, decision: Decision, request: Any) -> None:
        # list.append is atomic: safe from every worker thread without a lock.
        self.decisions.append(
            Seen(
                self.clock(),
                decision.endpoint_id,
                decision.reason,
                decision.allowed,
                decision.latency_us,
            )
        )


class DenialLogCounter(logging.Handler):
    """Counts the built-in denial log's records instead of printing thousands of them."""

    def __init__(self) -> None:
        super().__init__()
        self.records = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.records += 1


@dataclass
class Load:
    """Drives decisions on both endpoints until ``stop`` is set, from threads or tasks."""

    sentinel: Sentinel
    workers: int
    pause: float
    stop: threading.Event = field(default_factory=threading.Event)

    def tenant(self, worker: int, step: int) -> str:
        return f"tenant-{worker}-{step % 8}"

    def run_threads(self) -> list[threading.Thread]:
        def work(worker: int) -> None:
            step = 0
            while not self.stop.is_set():
                tenant = self.tenant(worker, step)
                self.sentinel.evaluate(CLOSED_ENDPOINT, tenant)
                self.sentinel.evaluate(OPEN_ENDPOINT, tenant)
                step += 1
                time.sleep(self.pause)

        threads = [
            threading.Thread(target=work, args=(index,), name=f"load-{index}", daemon=True)
            for index in range(self.workers)
        ]
        for thread in threads:
            thread.start()
        return threads

    async def run_tasks(self) -> None:
        async def work(worker: int) -> None:
            step = 0
            while not self.stop.is_set():
                tenant = self.tenant(worker, step)
                await self.sentinel.aevaluate(CLOSED_ENDPOINT, tenant)
                await self.sentinel.aevaluate(OPEN_ENDPOINT, tenant)
                step += 1
                await asyncio.sleep(self.pause)

        await asyncio.gather(*(work(index) for index in range(self.workers)))


@dataclass
class Script:
    """The game day's own timestamps (monotonic seconds)."""

    load_started: float = 0.0
    killed: float = 0.0
    restarting: float = 0.0
    back: float = 0.0
    closed_again: float | None = None
    stopped: float = 0.0
    restarted_server: str = ""
    """What the restarted server saw: NOSCRIPT errors and SCRIPT LOADs (INFO)."""


def conduct(
    server: RedisServer, sentinel: Sentinel, recorder: Recorder, load: Load, args: Any
) -> Script:
    """Warm up, kill, wait, restart, wait for CLOSED; runs in a thread beside the load."""
    script = Script(load_started=time.monotonic())
    time.sleep(args.warmup)
    script.killed = time.monotonic()
    server.stop()
    time.sleep(args.down)
    script.restarting = time.monotonic()
    server.start()  # same port; returns once PING answers
    script.back = time.monotonic()
    deadline = script.back + OPEN_SECONDS + 10
    while time.monotonic() < deadline:
        closes = [at for at, _, now in recorder.transitions if now is BreakerState.CLOSED]
        if closes and closes[-1] > script.back:
            script.closed_again = closes[-1]
            break
        time.sleep(0.01)
    time.sleep(args.tail)
    script.stopped = time.monotonic()
    load.stop.set()
    script.restarted_server = restarted_server_stats(server)
    return script


def restarted_server_stats(server: RedisServer) -> str:
    client = server.client()
    try:
        errors = client.info("errorstats").get("errorstat_NOSCRIPT", {}).get("count", 0)
        loads = client.info("commandstats").get("cmdstat_script|load", {}).get("calls", 0)
    finally:
        client.close()
    return f"the restarted server answered {errors} NOSCRIPT error(s) and {loads} SCRIPT LOAD(s)"


def timeline(script: Script, recorder: Recorder) -> list[str]:
    t0 = script.killed

    def stamp(at: float) -> str:
        return f"T{at - t0:+.3f}s"

    events: list[tuple[float, str]] = [
        (script.load_started, "load starts"),
        (script.killed, "Redis down (SIGKILL)"),
        (script.restarting, "restart begins (same port, empty server)"),
        (script.back, "Redis back (PING answers)"),
        (script.stopped, "load stops"),
    ]
    down = [seen for seen in recorder.decisions if seen.at >= script.killed]
    first_failure = next((s for s in down if s.reason not in REDIS_VERDICTS), None)
    if first_failure is not None:
        events.append(
            (
                first_failure.at,
                f"first failed decision: {first_failure.endpoint_id} → "
                f"{first_failure.reason.value}",
            )
        )
    for at, previous, current in recorder.transitions:
        label = f"breaker {previous.name} → {current.name}"
        if previous is BreakerState.HALF_OPEN:
            label += " (probe succeeded)" if current is BreakerState.CLOSED else " (probe failed)"
        elif current is BreakerState.HALF_OPEN:
            label += f" ({OPEN_SECONDS} s quarantine over, next call probes)"
        events.append((at, label))
    success = next(
        (s for s in recorder.decisions if s.at >= script.back and s.reason in REDIS_VERDICTS),
        None,
    )
    if success is not None:
        events.append(
            (
                success.at,
                f"first success after restart: {success.endpoint_id} → "
                f"{success.reason.value} (the HALF_OPEN probe)",
            )
        )
    return [f"{stamp(at):>10}  {what}" for at, what in sorted(events, key=lambda e: e[0])]


def phases(script: Script) -> list[tuple[str, float, float]]:
    closed = script.closed_again if script.closed_again is not None else script.stopped
    return [
        ("before", script.load_started, script.killed),
        ("down", script.killed, script.back),
        ("back, breaker not closed", script.back, closed),
        ("closed again", closed, script.stopped + 1),
    ]


def reason_table(script: Script, recorder: Recorder) -> str:
    spans = phases(script)
    counts: dict[tuple[str, str, str], int] = Counter()
    latencies: dict[tuple[str, str], list[int]] = {}
    for seen in recorder.decisions:
        for phase, start, end in spans:
            if start <= seen.at < end:
                verdict = "admitted" if seen.allowed else "denied"
                counts[(seen.endpoint_id, f"{seen.reason.value} ({verdict})", phase)] += 1
                latencies.setdefault((seen.endpoint_id, phase), []).append(seen.latency_us)
                break
    rows: list[list[Any]] = []
    for endpoint in (CLOSED_ENDPOINT, OPEN_ENDPOINT):
        labels = sorted({label for (ep, label, _) in counts if ep == endpoint})
        for label in labels:
            rows.append([endpoint, label, *(counts[(endpoint, label, p)] for p, _, _ in spans)])
        rows.append(
            [endpoint, "p99 decision latency, ms"]
            + [_p99_ms(latencies.get((endpoint, p), [])) for p, _, _ in spans]
        )
    durations = [f"{name} ({end - start:.1f} s)" for name, start, end in spans]
    durations[-1] = f"{spans[-1][0]} ({script.stopped - spans[-1][1]:.1f} s)"
    return markdown_table(["endpoint", "reason", *durations], rows)


def _p99_ms(samples: list[int]) -> str:
    return f"{percentile(sorted(samples), 99) / 1000:.2f}" if samples else "-"


def emergency_check(script: Script, recorder: Recorder) -> tuple[str, bool]:
    """Fail-open admissions the emergency limiter granted during the outage vs its bound.

    A token bucket admits at most capacity + rate x t over any span t, whatever it held
    at the start, so the bound holds for the outage window alone.
    """
    emergency = [
        s
        for s in recorder.decisions
        if s.endpoint_id == OPEN_ENDPOINT
        and s.reason not in REDIS_VERDICTS
        and s.at >= script.killed
    ]
    if not emergency:
        return "no emergency decisions were made during the outage", False
    admitted = sum(1 for s in emergency if s.allowed)
    elapsed = emergency[-1].at - emergency[0].at
    capacity = max(1, FALLBACK_PER_SECOND)  # one second of fallback_rate
    bound = capacity + FALLBACK_PER_SECOND * elapsed
    ok = admitted <= bound
    return (
        f"Fail-open admissions from the kill on: {admitted:,} of "
        f"{len(emergency):,} emergency decisions, over {elapsed:.3f} s; bound = capacity "
        f"{capacity} + {FALLBACK_PER_SECOND}/s x {elapsed:.3f} s = {bound:.1f} → "
        f"{'within the bound' if ok else 'OVER THE BOUND'}",
        ok,
    )


def plot_timeline(path: Path, script: Script, recorder: Recorder, mode: str) -> None:
    t0 = script.load_started
    decisions = {
        endpoint: [
            (seen.at - t0, seen.reason.value)
            for seen in recorder.decisions
            if seen.endpoint_id == endpoint
        ]
        for endpoint in (CLOSED_ENDPOINT, OPEN_ENDPOINT)
    }
    markers = [(script.killed - t0, "Redis killed"), (script.back - t0, "Redis back")]
    opened = [at for at, _, now in recorder.transitions if now is BreakerState.OPEN]
    if opened:
        markers.append((opened[0] - t0, "breaker OPEN"))
    if script.closed_again is not None:
        markers.append((script.closed_again - t0, "breaker CLOSED"))
    timeline_png(path, decisions, markers, title=f"Game day ({mode})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--asyncio", action="store_true", help="asyncio tasks + aevaluate")
    parser.add_argument("--workers", type=int, help="threads (default 4) or tasks (default 50)")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds before the kill")
    parser.add_argument("--down", type=float, default=5.0, help="seconds Redis stays down")
    parser.add_argument("--tail", type=float, default=1.0, help="seconds after CLOSED")
    parser.add_argument(
        "--pause",
        type=float,
        help="seconds each worker sleeps between its two decisions and the next two "
        "(default 0.004 for threads, 0.05 for tasks: about 1,000 decisions/s per endpoint)",
    )
    parser.add_argument("--plot", type=Path, help="also draw the timeline into this PNG file")
    args = parser.parse_args(argv)
    workers = args.workers or (50 if args.asyncio else 4)

    log_counter = DenialLogCounter()
    sentinel_logger = logging.getLogger("sentinel")
    sentinel_logger.addHandler(log_counter)
    sentinel_logger.propagate = False

    server = RedisServer().start()
    recorder = Recorder()
    registry = CollectorRegistry()
    sentinel = Sentinel(
        config(server.url), registry=registry, plugins=[recorder], entry_points=False
    )
    sentinel.check()
    # Paced so the load is steady, not a CPU-bound spin that would distort the timeline.
    pause = args.pause if args.pause is not None else (0.05 if args.asyncio else 0.004)
    load = Load(sentinel, workers, pause=pause)
    outcome: dict[str, Script] = {}
    try:
        if args.asyncio:

            async def run() -> None:
                await sentinel.astartup()
                director = asyncio.create_task(
                    asyncio.to_thread(conduct, server, sentinel, recorder, load, args)
                )
                await load.run_tasks()
                outcome["script"] = await director
                await sentinel.aclose()

            asyncio.run(run())
        else:
            threads = load.run_threads()
            outcome["script"] = conduct(server, sentinel, recorder, load, args)
            for thread in threads:
                thread.join()
            sentinel.close()
    finally:
        server.close()
    script = outcome["script"]

    mode = f"{workers} asyncio tasks, aevaluate" if args.asyncio else f"{workers} threads, evaluate"
    mode += f", {pause * 1000:g} ms pause"
    print(
        f"# Game day: {mode}; socket_timeout_ms 20, failure_threshold 5, "
        f"open_seconds {OPEN_SECONDS}, fallback_rate {FALLBACK_PER_SECOND}/second"
    )
    print(f"Machine: {machine_note()}\n")
    print("```")
    print("\n".join(timeline(script, recorder)))
    print("```\n")
    print(reason_table(script, recorder))
    message, ok = emergency_check(script, recorder)
    print(f"\n{message}.")
    print(f"After the restart, {script.restarted_server}.")
    opened = registry.get_sample_value("sentinel_breaker_transitions_total", {"state": "open"})
    print(
        f'Metrics agree: sentinel_breaker_transitions_total{{state="open"}} = {opened:.0f}; '
        f"denial log records: {log_counter.records:,}."
    )
    if args.plot is not None:
        plot_timeline(args.plot, script, recorder, mode)
        print(f"\nTimeline drawn into {args.plot}.")
    recovered = script.closed_again is not None
    if not recovered:
        print("\nThe breaker did NOT close again after the restart.")
    return 0 if ok and recovered else 1


if __name__ == "__main__":
    raise SystemExit(main())
