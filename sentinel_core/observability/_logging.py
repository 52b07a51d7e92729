"""The built-in structured denial log (SPEC §7): a plugin on `sentinel_decision`.

One WARNING on the ``sentinel`` logger per denial, and one per request a shadow-mode
policy would have denied (its message says "shadow"); nothing for allowed requests.
At most one per (endpoint, identity, reason) per second (`LogThrottle`): the repeats
held back are counted into the next record's ``suppressed`` field. The
fields travel as `logging` ``extra`` attributes, so a JSON formatter emits them as
keys; the message repeats the useful ones for plain-text logs. The identity appears
only as its SHA-256 hash, as in the bucket keys.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from sentinel_core._models import Decision
from sentinel_core.hookspecs import hookimpl
from sentinel_core.observability._log_throttle import LogThrottle
from sentinel_core.resilience._breaker import BreakerState, CircuitBreaker

logger = logging.getLogger("sentinel")

LOG_FIELDS = (
    "endpoint_id",
    "decision_reason",
    "identity_hash",
    "identity_kind",
    "latency_us",
    "breaker_state",
    "shadow",
    "retry_after_seconds",
    "suppressed",
)
"""The ``extra`` attributes every denial record carries."""

_HASH_PREFIX = 12


def denial_fields(
    decision: Decision, breaker_state: BreakerState, suppressed: int = 0
) -> dict[str, Any]:
    """The structured fields of a denial record, named as in `LOG_FIELDS`; ``suppressed``
    counts the same key's denials held back since its previous record."""
    return {
        "endpoint_id": decision.endpoint_id,
        "decision_reason": decision.reason.value,
        "identity_hash": decision.identity_hash,
        "identity_kind": decision.policy.identity.value,
        "latency_us": decision.latency_us,
        "breaker_state": str(breaker_state),
        "shadow": decision.shadow,
        "retry_after_seconds": decision.retry_after_seconds,
        "suppressed": suppressed,
    }


class DecisionLogPlugin:
    """The built-in denial log of one `Sentinel`, registered as ``sentinel.logging``.

    Args:
        breaker: the Sentinel's breaker, whose state each denial record reports.
        clock_ns: the monotonic clock (nanoseconds) of the once-a-second rule.
    """

    def __init__(
        self, breaker: CircuitBreaker, clock_ns: Callable[[], int] = time.monotonic_ns
    ) -> None:
        self._breaker = breaker
        self._throttle = LogThrottle(clock_ns)

    @hookimpl
    def sentinel_decision(self, decision: Decision, request: Any) -> None:
        if decision.would_allow or not logger.isEnabledFor(logging.WARNING):
            return
        suppressed = self._throttle.admit(
            (decision.endpoint_id, decision.identity_hash, decision.reason)
        )
        if suppressed is None:
            return
        fields = denial_fields(decision, self._breaker.state, suppressed)
        retry = decision.retry_after_seconds
        logger.warning(
            "%s on %s: %s (identity %s..., %s, breaker %s%s)",
            "shadow policy would deny" if decision.shadow else "request denied",
            decision.endpoint_id,
            fields["decision_reason"],
            decision.identity_hash[:_HASH_PREFIX],
            "no retry hint" if retry is None else f"retry after {retry}s",
            fields["breaker_state"],
            f"; {suppressed} more since the last record" if suppressed else "",
            extra=fields,
        )
