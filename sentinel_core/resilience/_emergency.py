"""The emergency limiter: what caps fail-open traffic while Redis is unavailable.

One token bucket per endpoint, in this process only, of capacity one second of the
policy's ``fallback_rate`` (at least one request). Integer arithmetic on micro-tokens
and monotonic nanoseconds. Like the Lua scripts, a denial never writes: writing the
refill on a denied call would bank it twice (the double-refill bug of the V1 seed).

A ``fallback_scope: "fleet"`` endpoint's rate is shared by the live processes this one
last saw (`FleetShare`): its bucket refills at ``fallback_rate / N`` and holds one
second of that, so the fleet together admits about ``fallback_rate`` per second plus
one second's burst. A share never drops below one request of capacity.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sentinel_core._models import MICRO, Rate
from sentinel_core.resilience._fleet import FleetShare

_NANOS_PER_MICRO = 1_000


@dataclass(frozen=True, slots=True)
class EmergencyVerdict:
    allowed: bool
    remaining: int
    retry_after_seconds: int | None
    reset_seconds: int


def emergency_capacity_micro(rate: Rate, cost: int = 1, share: int = 1) -> int:
    """One second of ``rate`` (divided among ``share`` processes), in micro-tokens, and
    never less than one request's cost."""
    return max(cost * MICRO, rate.count * MICRO // (rate.period_seconds * share))


class EmergencyLimiter:
    def __init__(
        self, clock_ns: Callable[[], int] = time.monotonic_ns, fleet: FleetShare | None = None
    ) -> None:
        self._clock_ns = clock_ns
        self._fleet = FleetShare() if fleet is None else fleet
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[int, int]] = {}
        """endpoint id -> (micro-tokens, monotonic ns of the last admission)"""

    def acquire(self, endpoint_id: str, rate: Rate, cost: int = 1) -> EmergencyVerdict:
        """Take one request's ``cost`` in tokens from ``endpoint_id``'s bucket if it has them."""
        share = self._fleet.divisor(endpoint_id)
        capacity = emergency_capacity_micro(rate, cost, share)
        price = cost * MICRO
        # micro-tokens gained in elapsed ns = elapsed * count * MICRO / (period * share * 1e9)
        divisor = rate.period_seconds * share * _NANOS_PER_MICRO
        with self._lock:
            now = self._clock_ns()
            tokens, last = self._buckets.get(endpoint_id, (capacity, now))
            tokens = min(capacity, tokens + max(0, now - last) * rate.count // divisor)
            if tokens >= price:
                tokens -= price
                self._buckets[endpoint_id] = (tokens, now)
                wait_ns = 0
            else:
                wait_ns = -(-(price - tokens) * divisor // rate.count)
        refill_ns = -(-(capacity - tokens) * divisor // rate.count)
        return EmergencyVerdict(
            allowed=wait_ns == 0,
            remaining=tokens // MICRO,
            retry_after_seconds=max(1, -(-wait_ns // 1_000_000_000)) if wait_ns else None,
            reset_seconds=-(-refill_ns // 1_000_000_000),
        )
