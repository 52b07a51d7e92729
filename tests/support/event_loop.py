"""Whether the event loop kept running while a block awaited something."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass


@dataclass
class Ticks:
    count: int = 0


@contextlib.asynccontextmanager
async def loop_ticks(interval: float = 0.02) -> AsyncIterator[Ticks]:
    """Count the wake-ups of a task sleeping ``interval`` seconds at a time while the
    block runs: a block that holds the event loop leaves the count at 0."""
    ticks = Ticks()

    async def ticker() -> None:
        while True:
            await asyncio.sleep(interval)
            ticks.count += 1

    beat = asyncio.create_task(ticker())
    try:
        yield ticks
    finally:
        beat.cancel()
