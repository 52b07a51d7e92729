"""What a test suite drives in every ``memory://`` Sentinel of the process (SPEC §9).

The clock: a `Sentinel` on ``memory://`` built with the default clock reads this one,
which is the system's monotonic clock until a test freezes it (`freeze`); from then on
only `advance` moves it, so a test exhausts a limit and sees it refill without sleeping.
Its buckets, local denials, emergency limiter, breaker and quota calendars all follow it.
`thaw` lets it run again from where it stood: it never goes back, so no bucket ever
sees time reversed. Sentinels on Redis keep the system clock (Redis ``TIME`` decides).

The state: such a Sentinel also files what it keeps between requests (its store, its
local denials) here, weakly, so `clear` empties them all between tests.

Reading the clock while it runs costs one global lookup over ``time.monotonic_ns``,
and only for ``memory://`` Sentinels.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from typing import Protocol

_lock = threading.Lock()
_frozen_ns: int | None = None
"""The frozen reading, or None while the clock runs."""
_offset_ns = 0
"""Added to the system's monotonic clock while running: how far tests advanced it."""


class Clearable(Protocol):
    def clear(self) -> None: ...


_state: weakref.WeakSet[Clearable] = weakref.WeakSet()


def monotonic_ns() -> int:
    """The clock of ``memory://`` Sentinels, in nanoseconds."""
    frozen = _frozen_ns
    return time.monotonic_ns() + _offset_ns if frozen is None else frozen


def monotonic() -> float:
    """`monotonic_ns` in seconds."""
    return monotonic_ns() / 1_000_000_000


def freeze() -> None:
    """Stop the clock where it is; only `advance` moves it until `thaw`.

    Raises:
        RuntimeError: it is frozen already (one frozen clock at a time).
    """
    global _frozen_ns
    with _lock:
        if _frozen_ns is not None:
            raise RuntimeError("the memory:// clock is already frozen by another frozen_clock")
        _frozen_ns = time.monotonic_ns() + _offset_ns


def advance(seconds: float) -> None:
    """Move the frozen clock forward by ``seconds`` (floats allowed).

    Raises:
        ValueError: ``seconds`` is negative (time never goes back) or not finite.
        RuntimeError: the clock is not frozen.
    """
    global _frozen_ns
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"advance() takes seconds >= 0, got {seconds!r}: time never goes back")
    nanoseconds = round(seconds * 1_000_000_000)
    with _lock:
        if _frozen_ns is None:
            raise RuntimeError("advance() needs the frozen clock (the sentinel_clock fixture)")
        _frozen_ns += nanoseconds


def thaw() -> None:
    """Let the clock run again from its frozen reading (never back to the system's)."""
    global _frozen_ns, _offset_ns
    with _lock:
        assert _frozen_ns is not None, "thaw() without freeze()"
        _offset_ns = _frozen_ns - time.monotonic_ns()
        _frozen_ns = None


def track(*parts: Clearable) -> None:
    """File a ``memory://`` Sentinel's state for `clear` (weakly: it dies with its owner)."""
    for part in parts:
        _state.add(part)


def clear() -> None:
    """Empty every tracked store and local-denial table of the process."""
    for part in list(_state):
        part.clear()
