"""One process of the local-denial exactness test: threads sending a schedule of
requests at one bucket through their own `Sentinel`, recording what happened when.

Times are wall-clock microseconds (``time.time_ns``), the clock Redis ``TIME`` reads on
the same host, so the parent can line up the process's decisions with the store's.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from sentinel_core import Sentinel
from sentinel_core.store._reference import ScriptReply
from sentinel_core.store._scripts import ScriptCall

_sentinels: dict[str, Sentinel] = {}


def _wall_us() -> int:
    return time.time_ns() // 1_000


def _sentinel(config: dict[str, Any]) -> Sentinel:
    """This process's Sentinel for ``config`` (one per process, as a worker has)."""
    key = repr(sorted(config.items()))
    sentinel = _sentinels.get(key)
    if sentinel is None:
        sentinel = _sentinels[key] = Sentinel(config, entry_points=False)
    return sentinel


class Recorded:
    """What one process saw: the store's admissions (its TIME) and the local denials
    (the wall-clock window around each)."""

    def __init__(self) -> None:
        self.admitted_at: list[int] = []
        self.local: list[tuple[int, int]] = []
        self.store_denials = 0


def run_schedule(
    config: dict[str, Any], endpoint_id: str, tenant: str, schedules: list[list[int]]
) -> tuple[list[int], list[tuple[int, int]], int]:
    """Run one thread per schedule (a list of pauses in ms, one request after each).

    Returns the TIME (us) of every admission the store made for this process, the
    (before, after) wall-clock window of every locally answered denial, and how many
    denials the store itself gave."""
    sentinel = _sentinel(config)
    store = sentinel.store
    recorded = Recorded()
    lock = threading.Lock()
    plain_run = store.run

    def run(call: ScriptCall) -> Any:
        reply = plain_run(call)
        parsed = ScriptReply(*reply)
        with lock:
            if parsed.allowed:
                recorded.admitted_at.append(parsed.now_us)
            else:
                recorded.store_denials += 1
        return reply

    store.run = run  # type: ignore[method-assign]
    barrier = threading.Barrier(len(schedules))

    def worker(pauses: list[int]) -> None:
        barrier.wait()
        for pause in pauses:
            time.sleep(pause / 1_000)
            before = _wall_us()
            decision = sentinel.evaluate(endpoint_id, tenant)
            after = _wall_us()
            if decision.local:
                with lock:
                    recorded.local.append((before, after))

    try:
        threads = [threading.Thread(target=worker, args=(s,)) for s in schedules]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        store.run = plain_run  # type: ignore[method-assign]
    return recorded.admitted_at, recorded.local, recorded.store_denials
