"""The built-in Prometheus metrics (SPEC §7): a plugin on `sentinel_decision` and
`sentinel_breaker_transition`, like any third-party observer.

Collectors are shared per registry. prometheus_client refuses to register a metric name
twice in one `CollectorRegistry` ("Duplicated timeseries"), yet several `Sentinel`
instances may live in one process (an app and a worker, tests, two adapters). So the
collectors of a registry are created once, kept in a cache keyed (weakly) by the
registry, and every `MetricsPlugin` on that registry writes to them: counters and the
histogram simply add up. The unlabeled breaker gauge cannot add up; it shows the least
healthy breaker among the live instances sharing the registry (open, then half-open,
then closed), so "is any breaker open?" stays answerable from one series. Its value is
computed when the registry is collected (`Gauge.set_function`), after each breaker has
been read: a breaker whose quarantine ended while its process was idle reports
half-open at the next scrape (SPEC §3), not "open" until a request comes. Transitions
still `set` the gauge as well: under multiprocess mode that value, written to the
worker's file, is the one a `MultiProcessCollector` reads (the breaker's own wake-up
timer keeps it current in an idle worker).

Label values come only from the configuration and from enums (endpoint ids, decision
reasons, breaker states): never an identity, so the number of series is bounded by the
configuration, not by traffic.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Iterable
from typing import Any, Final, Literal

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from sentinel_core._models import Decision, DecisionReason
from sentinel_core.hookspecs import hookimpl
from sentinel_core.resilience._breaker import BreakerState, CircuitBreaker

DECISIONS = "sentinel_decisions_total"
DECISIONS_HELP = "Rate limiting decisions, by endpoint, reason and whether the request passed."
DECISIONS_LABELS = ("endpoint_id", "decision_reason", "allowed")
DURATION = "sentinel_decision_duration_seconds"
DURATION_HELP = "Time to decide one request, Redis round trip included."

DURATION_BUCKETS = (
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
)
"""Seconds: from a 50 µs in-process decision to a 100 ms Redis call (far past any sane
``socket_timeout_ms``), about three buckets per decade."""

BREAKER_MULTIPROCESS_MODE: Final[Literal["liveall"]] = "liveall"
"""Each process has its own breaker (SPEC §3), so under a multiprocess collector every
live worker keeps its own series (a ``pid`` label); a dead worker's series goes away
with it instead of reporting a stale OPEN forever."""

_SEVERITY = {BreakerState.CLOSED: 0, BreakerState.HALF_OPEN: 1, BreakerState.OPEN: 2}


class SentinelMetrics:
    """The SPEC §7 collectors of one registry, and the breaker states feeding its gauge."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.decisions = Counter(DECISIONS, DECISIONS_HELP, DECISIONS_LABELS, registry=registry)
        self.duration = Histogram(
            DURATION, DURATION_HELP, ["endpoint_id"], buckets=DURATION_BUCKETS, registry=registry
        )
        self.breaker_state = Gauge(
            "sentinel_breaker_state",
            "Circuit breaker state: 0 closed, 1 open, 2 half-open "
            "(the least healthy breaker when several Sentinels share the registry).",
            registry=registry,
            multiprocess_mode=BREAKER_MULTIPROCESS_MODE,
        )
        self.transitions = Counter(
            "sentinel_breaker_transitions_total",
            "Circuit breaker transitions, by the state entered.",
            ["state"],
            registry=registry,
        )
        self.shadow_denials = Counter(
            "sentinel_shadow_denials_total",
            "Requests a shadow-mode policy would have denied (and let through).",
            ["endpoint_id", "decision_reason"],
            registry=registry,
        )
        self.local_denials = Counter(
            "sentinel_local_denials_total",
            "Denials answered in the process from a denial the store gave moments ago, "
            "without a Redis call (also counted in sentinel_decisions_total).",
            ["endpoint_id"],
            registry=registry,
        )
        self.store_failures = Counter(
            "sentinel_store_failures_total",
            "Redis calls of a decision that failed, by cause (redis_timeout, "
            "redis_connection_error, redis_noscript_retry), whatever the fail mode made of "
            "them (a fail-closed denial's decision_reason is fail_closed).",
            ["endpoint_id", "cause"],
            registry=registry,
        )
        self.exempt = Counter(
            "sentinel_exempt",
            "Requests exempt from limiting (the exempt section or a sentinel_exempt plugin).",
            ["endpoint_id"],
            registry=registry,
        )
        self.units = Counter(
            "sentinel_units",
            "Units charged by settle policies after settlement: what each request used, "
            "or its reservation when it reported nothing or could not be settled.",
            ["endpoint_id"],
            registry=registry,
        )
        self.unsettled_units = Counter(
            "sentinel_unsettled_units",
            "Units a settlement could not refund or charge (the store failed or the "
            "breaker was open): the difference between used and reserved.",
            ["endpoint_id"],
            registry=registry,
        )
        for state in BreakerState:
            # Every state's series exists from the start, so rate() and alerts see a 0.
            self.transitions.labels(state=str(state))
        self._lock = threading.RLock()  # re-entrant: `forget` may run from a GC finalizer
        self._states: dict[int, BreakerState] = {}
        self._breakers: dict[int, weakref.ReferenceType[CircuitBreaker]] = {}
        """The breakers read at each collection (weakly: a gauge keeps no Sentinel alive)."""
        self.breaker_state.set_function(self._current)
        self._tokens = itertools.count()
        self._decision_children: dict[tuple[str, DecisionReason, bool], Any] = {}
        self._duration_children: dict[str, Any] = {}
        self._allowed_children: dict[str, tuple[Any, Any]] = {}
        """Endpoint id -> its allowed decisions' counter and duration children (`bind`)."""
        self._shadow_children: dict[tuple[str, DecisionReason], Any] = {}
        self._local_children: dict[str, Any] = {}
        self._units_children: dict[str, Any] = {}
        self._failure_children: dict[tuple[str, DecisionReason], Any] = {}

    def track(self, state: BreakerState, breaker: CircuitBreaker | None = None) -> int:
        """Start following one breaker, in ``state`` now; returns the token its updates
        are filed under. A ``breaker`` given is also read at every collection."""
        with self._lock:
            token = next(self._tokens)
            self._states[token] = state
            if breaker is not None:
                self._breakers[token] = weakref.ref(breaker)
            self._publish()
        return token

    def set_state(self, token: int, state: BreakerState) -> None:
        with self._lock:
            self._states[token] = state
            self._publish()

    def forget(self, token: int) -> None:
        """Stop following a breaker whose Sentinel is gone."""
        with self._lock:
            self._states.pop(token, None)
            self._breakers.pop(token, None)
            self._publish()

    def bind(self, endpoint_ids: Iterable[str]) -> None:
        """Make the series of the endpoints' allowed decisions now (start-up): they read
        0 before the first request, and `record` finds them with one lookup."""
        for endpoint_id in endpoint_ids:
            if endpoint_id not in self._allowed_children:
                self._allowed_children[endpoint_id] = (
                    self._decision_child(endpoint_id, DecisionReason.ALLOWED, True),
                    self._duration_child(endpoint_id),
                )

    def record(self, decision: Decision) -> None:
        """Count and time one decision (this is the hot path: label children are cached)."""
        if decision.reason is DecisionReason.ALLOWED:  # nearly every decision
            bound = self._allowed_children.get(decision.endpoint_id)
            if bound is not None:
                bound[0].inc()
                bound[1].observe(decision.latency_us / 1_000_000)
                return
        counter = self._decision_child(decision.endpoint_id, decision.reason, decision.allowed)
        counter.inc()
        histogram = self._duration_child(decision.endpoint_id)
        histogram.observe(decision.latency_us / 1_000_000)
        if decision.shadow and not decision.would_allow:
            shadow_key = (decision.endpoint_id, decision.reason)
            shadow = self._shadow_children.get(shadow_key)
            if shadow is None:
                shadow = self._shadow_children[shadow_key] = self.shadow_denials.labels(
                    decision.endpoint_id, decision.reason.value
                )
            shadow.inc()
        if decision.store_failure is not None:
            failure_key = (decision.endpoint_id, decision.store_failure)
            failures = self._failure_children.get(failure_key)
            if failures is None:
                failures = self._failure_children[failure_key] = self.store_failures.labels(
                    decision.endpoint_id, decision.store_failure.value
                )
            failures.inc()
        if decision.local:
            local = self._local_children.get(decision.endpoint_id)
            if local is None:
                local = self._local_children[decision.endpoint_id] = self.local_denials.labels(
                    decision.endpoint_id
                )
            local.inc()

    def _decision_child(self, endpoint_id: str, reason: DecisionReason, allowed: bool) -> Any:
        key = (endpoint_id, reason, allowed)
        counter = self._decision_children.get(key)
        if counter is None:
            counter = self._decision_children[key] = self.decisions.labels(
                endpoint_id, reason.value, "true" if allowed else "false"
            )
        return counter

    def _duration_child(self, endpoint_id: str) -> Any:
        histogram = self._duration_children.get(endpoint_id)
        if histogram is None:
            histogram = self._duration_children[endpoint_id] = self.duration.labels(endpoint_id)
        return histogram

    def count_units(self, endpoint_id: str, units: int) -> None:
        """``sentinel_units_total``: the child per endpoint kept (``labels()`` on every
        request would cost more than the rest of the count)."""
        child = self._units_children.get(endpoint_id)
        if child is None:
            child = self._units_children[endpoint_id] = self.units.labels(endpoint_id)
        child.inc(units)

    def _current(self) -> float:
        """The gauge's value at collection: every breaker is read first, so one whose
        quarantine ended unobserved moves to HALF_OPEN now, and its transition, delivered
        through the hooks to `set_state`, is counted before the worst state is taken."""
        with self._lock:
            refs = list(self._breakers.values())
        for breaker in filter(None, [ref() for ref in refs]):  # a collected one is skipped
            breaker.refresh()
        with self._lock:
            return float(self._worst())

    def _worst(self) -> BreakerState:
        states = self._states.values()
        return max(states, key=_SEVERITY.__getitem__, default=BreakerState.CLOSED)

    def _publish(self) -> None:
        self.breaker_state.set(int(self._worst()))


_by_registry: weakref.WeakKeyDictionary[CollectorRegistry, SentinelMetrics] = (
    weakref.WeakKeyDictionary()
)
_by_registry_lock = threading.Lock()


def metrics_for(registry: CollectorRegistry | None = None) -> SentinelMetrics:
    """The collectors of ``registry`` (prometheus_client's default REGISTRY when None),
    created and registered on first use, shared afterwards."""
    target = REGISTRY if registry is None else registry
    with _by_registry_lock:
        metrics = _by_registry.get(target)
        if metrics is None:
            metrics = _by_registry[target] = SentinelMetrics(target)
    return metrics


class MetricsPlugin:
    """The built-in metrics plugin of one `Sentinel`, registered as ``sentinel.metrics``.

    Args:
        registry: where the collectors live; prometheus_client's default REGISTRY when None.
        breaker: this Sentinel's breaker: its state now is published at once, so the
            gauge is current before the first transition, and it is read again at every
            collection (an idle breaker's quarantine ends without a request).
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        self.metrics = metrics_for(registry)
        state = BreakerState.CLOSED if breaker is None else breaker.state
        self._token = self.metrics.track(state, breaker)
        # Forget this breaker when its Sentinel is collected; not at interpreter exit,
        # where nothing reads the gauge any more.
        weakref.finalize(self, self.metrics.forget, self._token).atexit = False

    def bind(self, endpoint_ids: Iterable[str]) -> None:
        """Make the configured endpoints' series at start-up (`SentinelMetrics.bind`)."""
        self.metrics.bind(endpoint_ids)

    @hookimpl
    def sentinel_decision(self, decision: Decision, request: Any) -> None:
        self.metrics.record(decision)

    def exempted(self, endpoint_id: str) -> None:
        """Count one exempt request (they produce no decision to observe)."""
        self.metrics.exempt.labels(endpoint_id=endpoint_id).inc()

    def settled(self, endpoint_id: str, units: int) -> None:
        """Count ``units`` charged by one settled (or kept) reservation."""
        self.metrics.count_units(endpoint_id, units)

    def unsettled(self, endpoint_id: str, units: int) -> None:
        """Count ``units`` a failed settlement left refunded or charged wrongly."""
        self.metrics.unsettled_units.labels(endpoint_id=endpoint_id).inc(units)

    @hookimpl
    def sentinel_breaker_transition(self, previous: BreakerState, current: BreakerState) -> None:
        self.metrics.transitions.labels(state=str(current)).inc()
        self.metrics.set_state(self._token, current)
