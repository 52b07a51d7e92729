"""Local denials (SPEC §3): a bucket the store just denied is denied in-process until it
can admit again, without a Redis call.

Why it is exact: other clients can only consume a bucket, never refill it early, so a
bucket the store denied at instant T cannot admit the same cost before T + wait (the
reply's wait). The process only knows its own monotonic clock, and the script ran at
some instant between sending the request (``sent_ns``) and reading the reply, so the
entry runs out at ``sent_ns + wait``: never later than the store's own answer. The
Retry-After a local denial gives is counted the other way, from the reply's arrival,
so it is never earlier than the store's either.

Which key the entry is filed under says who it covers. A tenant's bucket covers that
tenant. For an anonymous policy the call's first key is the device's bucket, which only
that device on that network pays into: the AND's wait covers it. The network's bucket
(the call's last key) is shared by every device behind the address; it is remembered
only when the reply gives that bucket's own wait, so no device is denied longer than
the network bucket itself denies it.

An administrative ``reset`` refills a bucket in the store; the process that resets
forgets its entry at once (`forget`), other processes within ``local_denials_ms``.

When ``local_denials_ms`` cuts an entry short of the bucket's own wait (a long wait: the
store would still deny at its end), the requests that arrive as it runs out would all
ask the store at once: a flood keeps many in flight, under asyncio especially. So in the
last quarter of its life the first request that finds the entry asks the store ahead of
its end (its denial renews the entry), and the others keep being answered locally
meanwhile. An entry that ends with the bucket's wait is never renewed ahead: there the
bucket may admit again.

Memory is bounded: at most `MAX_ENTRIES` buckets; when full, the oldest quarter of the
entries goes (an entry lost only costs one Redis call), so a flood over many identities
costs amortized O(1) per denial.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

MAX_ENTRIES = 16_384
_NS_PER_US = 1_000
_NS_PER_S = 1_000_000_000


class Remembered(NamedTuple):
    """A bucket the store denied, as remembered by this process (monotonic ns)."""

    until_ns: int
    """Until then the bucket cannot admit this cost: answer locally."""
    retry_at_ns: int
    """The latest instant the store said it may admit again (what Retry-After counts to)."""
    reset_at_ns: int
    args: tuple[int, ...]
    """The script arguments (rates, cost) the denial was decided with: a request with
    other arguments (a plugin resolved another policy) asks the store."""
    limit_index: int = 0
    """Layered limits: which limit denied (`Decision.limit_index`)."""
    renew_from_ns: int | None = None
    """From then on, one request renews the entry from the store ahead of its end; None:
    the entry ends with the bucket's own wait, or its renewal is under way."""

    def renewing(self) -> Remembered:
        """This entry while one request renews it: valid as before, not due again."""
        return Remembered(
            self.until_ns, self.retry_at_ns, self.reset_at_ns, self.args, self.limit_index
        )

    def retry_after_seconds(self, now_ns: int) -> int:
        """Whole seconds until ``retry_at_ns``, at least 1: counts down."""
        return max(1, -(-(self.retry_at_ns - now_ns) // _NS_PER_S))

    def reset_seconds(self, now_ns: int) -> int:
        return max(1, -(-(self.reset_at_ns - now_ns) // _NS_PER_S))


class LocalDenials:
    """The buckets this process currently denies by itself.

    Args:
        max_ms: ``local_denials_ms``: the longest an entry is trusted; 0 disables.
        clock_ns: a monotonic clock in nanoseconds (tests drive it).
        max_entries: the most buckets remembered at once.
    """

    def __init__(
        self,
        max_ms: int,
        clock_ns: Callable[[], int] = time.monotonic_ns,
        max_entries: int = MAX_ENTRIES,
    ) -> None:
        self.enabled = max_ms > 0
        self.clock_ns = clock_ns
        self._max_ns = max_ms * 1_000_000
        self._renew_ahead_ns = self._max_ns // 4
        self._max_entries = max_entries
        self._lock = threading.Lock()  # writers only; readers rely on dict.get being atomic
        self._entries: dict[str, Remembered] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, keys: Sequence[str], args: tuple[int, ...], now_ns: int) -> Remembered | None:
        """The entry that denies a request on ``keys`` with ``args`` at ``now_ns``, if any;
        None also for the one request that renews an entry ahead of its end."""
        entries = self._entries
        due: tuple[str, Remembered] | None = None
        for key in keys:
            entry = entries.get(key)
            if entry is None or now_ns >= entry.until_ns or entry.args != args:
                continue
            if entry.renew_from_ns is None or now_ns < entry.renew_from_ns:
                return entry
            due = due or (key, entry)
        if due is None:
            return None
        key, entry = due
        with self._lock:
            if entries.get(key) is not entry:
                return entry  # another request renews it: still valid until its end
            entries[key] = entry.renewing()
        return None

    def remember(
        self,
        waits: Sequence[tuple[str, int]],
        args: tuple[int, ...],
        sent_ns: int,
        received_ns: int,
        retry_us: int,
        reset_us: int,
        limit_index: int = 0,
    ) -> None:
        """File a store denial: ``waits`` pairs a bucket key with the microseconds from
        the script's TIME until that key can admit ``args``' cost again (a lower bound);
        ``retry_us`` and ``reset_us`` are the reply's Retry-After and reset (upper bounds)."""
        entries = []
        for key, wait_us in waits:
            wait_ns = wait_us * _NS_PER_US
            until = sent_ns + min(wait_ns, self._max_ns)
            if until > sent_ns:
                retry_at = received_ns + retry_us * _NS_PER_US
                reset_at = received_ns + reset_us * _NS_PER_US
                renew_from = until - self._renew_ahead_ns if wait_ns > self._max_ns else None
                entry = Remembered(until, retry_at, reset_at, args, limit_index, renew_from)
                entries.append((key, entry))
        if not entries:
            return
        with self._lock:
            table = self._entries
            for key, entry in entries:
                table.pop(key, None)  # re-inserted at the end: the dict's order is age
                table[key] = entry
            if len(table) > self._max_entries:
                for old in list(table)[: max(1, len(table) // 4)]:
                    del table[old]

    def clear(self) -> None:
        """Drop every entry (between tests: the ``sentinel_reset`` fixture)."""
        with self._lock:
            self._entries.clear()

    def forget(self, keys: Sequence[str]) -> None:
        """Drop the entries of ``keys`` (their buckets were reset)."""
        with self._lock:
            for key in keys:
                self._entries.pop(key, None)
