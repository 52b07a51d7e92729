"""At most one denial record per (endpoint, identity, reason) per second (SPEC §7).

A flood of denied requests must not flood the logs: the first denial of a key logs,
the ones within the next second are only counted, and the count travels in the next
record of that key (its ``suppressed`` field). Every denial is still counted in the
metrics; the log is the sample a human reads.

Memory is bounded: at most `MAX_KEYS` keys, the least recently logged quarter dropped
when full (a count held by a dropped key is lost from the logs, never from the metrics).
The clock is monotonic nanoseconds, injected so tests drive it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable

MAX_KEYS = 16_384
INTERVAL_NS = 1_000_000_000


class LogThrottle:
    """Decides which denial records are written and how many each one stands for.

    Args:
        clock_ns: a monotonic clock in nanoseconds.
        max_keys: the most keys remembered at once.
    """

    def __init__(
        self, clock_ns: Callable[[], int] = time.monotonic_ns, max_keys: int = MAX_KEYS
    ) -> None:
        self._clock_ns = clock_ns
        self._max_keys = max_keys
        self._lock = threading.Lock()
        self._keys: dict[Hashable, tuple[int, int]] = {}
        """key -> (when its last record was written, denials held back since)"""

    def admit(self, key: Hashable) -> int | None:
        """None when this denial's record is held back (and counted); otherwise the
        number held back since the key's previous record, to write in this one."""
        now = self._clock_ns()
        with self._lock:
            keys = self._keys
            entry = keys.get(key)
            if entry is not None and now - entry[0] < INTERVAL_NS:
                keys[key] = (entry[0], entry[1] + 1)
                return None
            if entry is not None:
                del keys[key]  # re-inserted at the end: the dict's order is age
            elif len(keys) >= self._max_keys:
                for old in list(keys)[: max(1, len(keys) // 4)]:
                    del keys[old]
            keys[key] = (now, 0)
        return 0 if entry is None else entry[1]
