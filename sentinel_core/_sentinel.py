"""`Sentinel`: the framework-neutral facade the adapters build on.

It builds one configuration's circuit breaker, emergency limiter, engine, HTTP layer and
plugins, and answers for them; its calls to the store come from `_calls_async` (asyncio)
and its generated blocking twin `_calls_sync`, so the two cannot drift.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pluggy

from sentinel_core import _embedded
from sentinel_core._calls_async import AsyncCalls
from sentinel_core._calls_sync import SyncCalls
from sentinel_core._fleet import fleet_of
from sentinel_core._models import Policy
from sentinel_core._plugins import Hooks, make_plugin_manager
from sentinel_core._reservation import Settlement
from sentinel_core.config._schema import SentinelConfig, load_config
from sentinel_core.decision._calendar import Calendars
from sentinel_core.decision._endpoint import Endpoint
from sentinel_core.decision._engine import DecisionEngine
from sentinel_core.decision._local_denials import LocalDenials
from sentinel_core.http._lifecycle import make_runner
from sentinel_core.http._outcome import HttpLayer
from sentinel_core.http._routes import RouteTable
from sentinel_core.identity._anonymous import named_identity
from sentinel_core.identity._keys import AnonymousIdentity
from sentinel_core.observability._logging import DecisionLogPlugin
from sentinel_core.observability._metrics import MetricsPlugin
from sentinel_core.observability._otel import OpenTelemetryPlugin
from sentinel_core.resilience._breaker import BreakerState, CircuitBreaker
from sentinel_core.resilience._emergency import EmergencyLimiter
from sentinel_core.store._redis import MEMORY_URL, AsyncStore, MemoryStore, SyncStore


class Sentinel(SyncCalls, AsyncCalls):
    """Rate limiting decisions for the policies of one configuration.

    Args:
        config: a mapping, a path to a TOML file with a ``[sentinel]`` table, or a
            loaded `SentinelConfig`.
        registry: the ``prometheus_client.CollectorRegistry`` for the metrics; the
            default registry when None.
        plugins: plugin objects registered besides the entry-point plugins.
        entry_points: load plugins from the ``sentinel`` entry-point group.
        clock: the monotonic clock, in seconds, of the breaker, the emergency limiter,
            the local denials and the ``memory://`` store (tests drive it instead of
            sleeping). Redis keeps its own clock (``TIME``). On ``memory://`` the
            default is the process clock that the ``sentinel_clock`` fixture drives.
        identify: ``identify(request)``, the user the application authenticated for
            ``identity: "user"`` policies: the framework's request in, the user's id
            (a str) or None out (the adapters pass their framework's default).

    Besides the decisions (`evaluate`, `peek`, `usage`, `lease`, ... and their
    ``a``-prefixed twins), it answers `policy` (an endpoint's configured policy),
    `breaker_state` and `plugin_manager`; the engine, breaker and hooks behind them are
    private.
    """

    def __init__(
        self,
        config: Mapping[str, Any] | str | os.PathLike[str] | SentinelConfig,
        *,
        registry: Any = None,
        plugins: Iterable[object] = (),
        entry_points: bool = True,
        clock: Callable[[], float] = time.monotonic,
        identify: Callable[[Any], str | None] | None = None,
    ) -> None:
        self.config = load_config(config)
        memory = self.config.redis_url.startswith(MEMORY_URL)
        if memory and clock is time.monotonic:
            clock = _embedded.monotonic  # the clock a test suite drives (SPEC §9)
        clock_ns = _nanoseconds(clock)
        self.registry = registry
        self._hooks = Hooks(make_plugin_manager(plugins, entry_points=entry_points))
        breaker = self.config.breaker
        self._breaker = CircuitBreaker(
            breaker.failure_threshold,
            breaker.open_seconds,
            half_open_max_probes=breaker.half_open_max_probes,
            clock=clock,
            on_transition=self._hooks.breaker_transition,
        )
        # The built-in observers are plain plugins: unregister them by name to opt out.
        metrics = MetricsPlugin(registry, self._breaker)
        metrics.bind(self.config.policies)
        self._hooks.register_builtin(metrics, "sentinel.metrics")
        self._hooks.register_builtin(DecisionLogPlugin(self._breaker, clock_ns), "sentinel.logging")
        if self.config.opentelemetry:
            self._hooks.register_builtin(OpenTelemetryPlugin(), "sentinel.opentelemetry")
        local_denials = LocalDenials(self.config.local_denials_ms, clock_ns=clock_ns)
        fleet, self._fleet = fleet_of(self.config)
        if self._fleet is not None:
            self._hooks.register_builtin(self._fleet, "sentinel.fleet")
        self._engine = DecisionEngine(
            self.config.policies,
            self._breaker,
            EmergencyLimiter(clock_ns, fleet),
            self._hooks,
            local_denials,
        )
        self.http = HttpLayer(
            self.config, self._hooks, on_exempt=metrics.exempted, identify=identify
        )
        self.route_table = RouteTable(self.config.routes)
        unix_us = _unix_microseconds(clock)
        if clock is not time.monotonic:  # quota periods follow the injected clock too
            self._engine.calendars = Calendars(unix_us)
        self._memory = MemoryStore(unix_us) if memory else None
        if self._memory is not None:
            _embedded.track(self._memory, local_denials)
        self._sync_store: SyncStore | None = self._memory
        self._async_store: AsyncStore | None = self._memory
        self._check_deferred = False
        self._deferred_check_lock = threading.Lock()
        """Held by the one caller running the deferred check; the others never wait."""
        self._settlement = Settlement(
            self._engine, lambda: self.store, lambda: self.async_store, metrics, clock_ns
        )
        self._runner = make_runner(self, self._settlement)

    def policy(self, endpoint_id: str) -> Policy:
        """The configured `Policy` of ``endpoint_id``, as loaded: before any
        ``sentinel_resolve_policy`` plugin tiers it for an identity.

        Raises:
            UnknownEndpointError: no policy has that id.
        """
        return self._engine.policy(endpoint_id)

    def endpoint(self, endpoint_id: str) -> Endpoint:
        """``endpoint_id`` compiled (its policy and what the policy fixes), for an
        adapter to keep per route and hand to `admit`.

        Raises:
            UnknownEndpointError: no policy has that id.
        """
        return self._engine.endpoint(endpoint_id)

    def validate_endpoint(self, endpoint_id: str) -> Policy:
        """Raise at startup, not on the first request, for an id that cannot be guarded
        over HTTP (`UnknownEndpointError`, or `ConfigError` for a tenant policy without
        the ``jwt`` section)."""
        return self.http.validate_endpoint(endpoint_id)

    @property
    def breaker_state(self) -> BreakerState:
        """The state of this instance's circuit breaker: `CLOSED` while the store
        answers, `OPEN` for ``open_seconds`` after it failed, then `HALF_OPEN` (with or
        without traffic) until a request probes the store. For alerts and dashboards,
        not for a readiness check (docs/operating.md says why)."""
        return self._breaker.state

    @property
    def plugin_manager(self) -> pluggy.PluginManager:
        """The pluggy `PluginManager` this instance calls its hooks through: register
        a plugin at runtime, or turn off a built-in observer by unregistering its name
        (``sentinel.metrics``, ``sentinel.logging``, ``sentinel.opentelemetry`` with
        ``opentelemetry = true``, and ``sentinel.fleet`` with a ``fallback_scope =
        "fleet"`` policy)."""
        return self._hooks.manager

    def anonymous_identity(self, address: str, device: str) -> AnonymousIdentity:
        """The identity of one anonymous client, for `peek` and `reset` on an anonymous
        policy (whose buckets belong to a device AND a network) or on a user policy's
        clients without a user: its IP address, and its device as the device cookie's
        value (verified with the configured secrets) or the bare device id.

        Raises:
            ValueError: no ``anonymous`` section, an ``address`` that is not an IP
                address, or a ``device`` that is neither a genuine cookie nor a device id.
        """
        if self.config.anonymous is None:
            raise ValueError("the configuration has no anonymous section")
        return named_identity(self.config.anonymous, address, device)


def _nanoseconds(clock: Callable[[], float]) -> Callable[[], int]:
    """``clock`` (seconds) in whole nanoseconds, for the limiters' integer arithmetic."""
    if clock is time.monotonic:
        return time.monotonic_ns
    if clock is _embedded.monotonic:
        return _embedded.monotonic_ns
    return lambda: round(clock() * 1_000_000_000)


def _unix_microseconds(clock: Callable[[], float]) -> Callable[[], int]:
    """Unix time in microseconds (what Redis ``TIME`` gives the scripts) advancing with
    ``clock``: the memory store's buckets expire on the injected clock too."""
    offset = time.time_ns() // 1_000 - round(clock() * 1_000_000)
    return lambda: offset + round(clock() * 1_000_000)
