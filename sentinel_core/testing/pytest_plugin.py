"""The pytest plugin installed with Sentinel (entry point ``pytest11``: ``sentinel``).

It only defines fixtures, so it changes nothing until a test asks for one:

* ``sentinel_clock``: freezes the clock of every ``memory://`` Sentinel in the process
  for the test; ``sentinel_clock.advance(seconds)`` moves it forward.
* ``sentinel_reset``: empties every ``memory://`` Sentinel's buckets and local denials
  before and after the test; calling it (``sentinel_reset()``) empties them again.

Disable it with ``-p no:sentinel``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from sentinel_core.testing._clock import SentinelClock, frozen_clock, reset_memory_stores


@pytest.fixture
def sentinel_clock() -> Iterator[SentinelClock]:
    """The frozen clock of every ``memory://`` Sentinel, for this test: a limit
    exhausted now refills only when ``sentinel_clock.advance(seconds)`` says so."""
    with frozen_clock() as clock:
        yield clock


@pytest.fixture
def sentinel_reset() -> Iterator[Callable[[], None]]:
    """Every ``memory://`` Sentinel emptied before (and after) this test; call the
    fixture's value to empty them again mid-test."""
    reset_memory_stores()
    yield reset_memory_stores
    reset_memory_stores()
