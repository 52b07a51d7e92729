"""Real concurrency against one bucket: processes x threads, each process its own Sentinel."""

from __future__ import annotations

import multiprocessing
import threading
from typing import Any

from sentinel_core import Sentinel


def _threads(
    config: dict[str, Any], endpoint_id: str, tenant: str, threads: int, calls: int
) -> int:
    sentinel = Sentinel(config, entry_points=False)
    barrier = threading.Barrier(threads)
    allowed = [0] * threads

    def worker(index: int) -> None:
        barrier.wait()
        for _ in range(calls):
            allowed[index] += sentinel.evaluate(endpoint_id, tenant).allowed

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    sentinel.close()
    return sum(allowed)


def race_processes(
    config: dict[str, Any],
    endpoint_id: str,
    tenant: str,
    *,
    processes: int,
    threads: int,
    calls: int,
) -> int:
    """Total admissions of ``processes`` spawned processes x ``threads`` threads, each
    thread making ``calls`` decisions for ``tenant`` on ``endpoint_id``."""
    context = multiprocessing.get_context("spawn")
    with context.Pool(processes) as pool:
        results = [
            pool.apply_async(_threads, (config, endpoint_id, tenant, threads, calls))
            for _ in range(processes)
        ]
        return sum(result.get(timeout=120) for result in results)
