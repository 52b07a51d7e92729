"""The built-in structured denial log (SPEC §7): a plugin on `sentinel_decision`.

One WARNING on the ``sentinel`` logger per denial, and one per request a shadow-mode
policy would have denied (its message says "shadow"); nothing for allowed requests. The
fields travel as `logging` ``extra`` attributes, so a JSON formatter emits them as
keys; the message repeats the useful ones for plain-text logs. The identity appears
only as its SHA-256 hash, as in the bucket keys.
"""

from __future__ import annotations

import logging
from typing import Any

from sentinel_core._models import Decision
from sentinel_core.hookspecs import hookimpl
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
)
"""The ``extra`` attributes every denial record carries."""

_HASH_PREFIX = 12


def denial_fields(decision: Decision, breaker_state: BreakerState) -> dict[str, Any]:
    """The structured fields of a denial record, named as in `LOG_FIELDS`."""
    return {
        "endpoint_id": decision.endpoint_id,
        "decision_reason": decision.reason.value,
        "identity_hash": decision.identity_hash,
        "identity_kind": decision.policy.identity.value,
        "latency_us": decision.latency_us,
        "breaker_state": str(breaker_state),
        "shadow": decision.shadow,
        "retry_after_seconds": decision.retry_after_seconds,
    }


class DecisionLogPlugin:
    """The built-in denial log of one `Sentinel`, registered as ``sentinel.logging``.

    Args:
        breaker: the Sentinel's breaker, whose state each denial record reports.
    """

    def __init__(self, breaker: CircuitBreaker) -> None:
        self._breaker = breaker

    @hookimpl
    def sentinel_decision(self, decision: Decision, request: Any) -> None:
        if decision.would_allow or not logger.isEnabledFor(logging.WARNING):
            return
        fields = denial_fields(decision, self._breaker.state)
        retry = decision.retry_after_seconds
        logger.warning(
            "%s on %s: %s (identity %s..., %s, breaker %s)",
            "shadow policy would deny" if decision.shadow else "request denied",
            decision.endpoint_id,
            fields["decision_reason"],
            decision.identity_hash[:_HASH_PREFIX],
            "no retry hint" if retry is None else f"retry after {retry}s",
            fields["breaker_state"],
            extra=fields,
        )
