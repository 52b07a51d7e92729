"""The built-in OpenTelemetry plugin (SPEC §7), registered as ``sentinel.opentelemetry``
when the configuration says ``opentelemetry = true``.

It speaks ``opentelemetry-api`` only: the application owns the SDK, its exporters and
the global providers (set before or after the Sentinel is built: the API's proxies
forward to whatever is installed). Per decision it adds one to the counter
``sentinel.decisions`` (attributes ``endpoint_id``, ``decision_reason``, ``allowed``),
records the decision's duration in seconds in the histogram ``sentinel.decision.duration``
(attribute ``endpoint_id``), and sets ``sentinel.endpoint_id`` and
``sentinel.decision_reason`` on the current span, the guarded request's. Like the
Prometheus metrics, every attribute comes from the configuration or an enum: never an
identity.

``opentelemetry`` is imported here only when the plugin is built, so a configuration
without the key never imports it.
"""

from __future__ import annotations

from typing import Any

from sentinel_core._models import Decision, DecisionReason
from sentinel_core.hookspecs import hookimpl
from sentinel_core.observability._metrics import DECISIONS_HELP, DURATION_BUCKETS, DURATION_HELP

DECISIONS = "sentinel.decisions"
DURATION = "sentinel.decision.duration"
ENDPOINT_ATTRIBUTE = "sentinel.endpoint_id"
REASON_ATTRIBUTE = "sentinel.decision_reason"


class OpenTelemetryPlugin:
    """Decisions as OpenTelemetry metrics and span attributes.

    Args:
        meter_provider: where the instruments live; OpenTelemetry's global meter
            provider when None (what ``opentelemetry = true`` registers).
    """

    def __init__(self, meter_provider: Any = None) -> None:
        from opentelemetry import metrics, trace

        meter = metrics.get_meter("sentinel", meter_provider=meter_provider)
        self._decisions = meter.create_counter(DECISIONS, "{decision}", DECISIONS_HELP)
        self._duration = meter.create_histogram(
            DURATION, "s", DURATION_HELP, explicit_bucket_boundaries_advisory=DURATION_BUCKETS
        )
        self._current_span = trace.get_current_span
        # The attribute mappings, made once per combination (bounded by the configuration).
        self._counted: dict[tuple[str, DecisionReason, bool], dict[str, Any]] = {}
        self._timed: dict[str, dict[str, Any]] = {}

    @hookimpl
    def sentinel_decision(self, decision: Decision, request: Any) -> None:
        endpoint_id, reason = decision.endpoint_id, decision.reason
        key = (endpoint_id, reason, decision.allowed)
        counted = self._counted.get(key)
        if counted is None:
            counted = self._counted[key] = {
                "endpoint_id": endpoint_id,
                "decision_reason": reason.value,
                "allowed": decision.allowed,
            }
        self._decisions.add(1, counted)
        timed = self._timed.get(endpoint_id)
        if timed is None:
            timed = self._timed[endpoint_id] = {"endpoint_id": endpoint_id}
        self._duration.record(decision.latency_us / 1_000_000, timed)
        span = self._current_span()
        if span.is_recording():
            span.set_attribute(ENDPOINT_ATTRIBUTE, endpoint_id)
            span.set_attribute(REASON_ATTRIBUTE, reason.value)
