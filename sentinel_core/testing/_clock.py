"""The frozen clock and the reset of ``memory://`` Sentinels, for tests (SPEC §9)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from sentinel_core import _embedded


class SentinelClock:
    """The frozen clock of every ``memory://`` Sentinel in the process.

    Their token buckets refill, windows slide, quota periods turn, local denials and
    the emergency limiter run out only as `advance` moves it; Redis-backed Sentinels
    are not affected (Redis keeps its own time).
    """

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds`` (floats allowed).

        Raises:
            ValueError: ``seconds`` is negative or not finite (time never goes back).
            RuntimeError: the clock is no longer frozen (used after its test ended).
        """
        _embedded.advance(seconds)

    def monotonic(self) -> float:
        """The clock's reading in seconds (only differences between readings mean anything)."""
        return _embedded.monotonic()


@contextlib.contextmanager
def frozen_clock() -> Iterator[SentinelClock]:
    """Freeze the ``memory://`` Sentinels' clock for the block; it runs on afterwards
    from where it stood. Not re-entrant across threads: one test at a time.

    Raises:
        RuntimeError: the clock is already frozen (another ``frozen_clock`` is active).
    """
    _embedded.freeze()
    try:
        yield SentinelClock()
    finally:
        _embedded.thaw()


def reset_memory_stores() -> None:
    """Empty every ``memory://`` Sentinel of the process: all their buckets, leases and
    quota counts, and the denials each remembers locally. A test starts from full
    limits whichever tests ran before it in the same process."""
    _embedded.clear()
