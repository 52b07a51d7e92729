"""Helpers for testing an application that Sentinel guards (SPEC §9).

* `ratelimit_headers`: a response's ``RateLimit-Policy`` and ``RateLimit`` fields as
  plain Python values, parsed as Structured Field Values (RFC 9651).
* `frozen_clock`: freeze the clock of every ``memory://`` Sentinel in the process and
  move it with ``advance(seconds)``; `reset_memory_stores`: empty their buckets. The
  pytest plugin (``sentinel_core.testing.pytest_plugin``, registered as ``sentinel``)
  offers both as the ``sentinel_clock`` and ``sentinel_reset`` fixtures.

Nothing here runs unless a test calls it: importing this module changes nothing.

May import: `sentinel_core._embedded`.
"""

from sentinel_core.testing._clock import SentinelClock, frozen_clock, reset_memory_stores
from sentinel_core.testing._headers import ratelimit_headers

__all__ = ["SentinelClock", "frozen_clock", "ratelimit_headers", "reset_memory_stores"]
