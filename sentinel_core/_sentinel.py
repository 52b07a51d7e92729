"""`Sentinel`: the framework-neutral facade (SPEC §3) the adapters build on.

It owns one configuration, one circuit breaker, one emergency limiter and the stores;
`evaluate` (threads) and `aevaluate` (asyncio) are the thin I/O shells around the
decision engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import pluggy

from sentinel_core import _embedded
from sentinel_core._fleet import fleet_of
from sentinel_core._models import Algorithm, Decision, Policy, Slot
from sentinel_core._plugins import Hooks, make_plugin_manager
from sentinel_core._reservation import Reservation, Settlement
from sentinel_core.config._schema import SentinelConfig, load_config
from sentinel_core.decision._admin import admin_call, peeked
from sentinel_core.decision._calendar import Calendars
from sentinel_core.decision._endpoint import Endpoint
from sentinel_core.decision._engine import Attempt, DecisionEngine
from sentinel_core.decision._leases import release_call, store_lease
from sentinel_core.decision._local_denials import LocalDenials
from sentinel_core.decision._settle import reservation_units
from sentinel_core.decision._usage import Usage, usage_call, usage_of
from sentinel_core.errors import StoreError
from sentinel_core.http._lifecycle import (
    Admission,
    admission,
    adrive,
    answered,
    decided,
    drive,
    make_runner,
)
from sentinel_core.http._outcome import HttpLayer, Outcome, Prepared, RequestView
from sentinel_core.http._routes import RouteTable
from sentinel_core.identity._anonymous import named_identity
from sentinel_core.identity._keys import AnonymousIdentity, Identity, tenant_identity
from sentinel_core.observability._logging import DecisionLogPlugin
from sentinel_core.observability._metrics import MetricsPlugin
from sentinel_core.observability._otel import OpenTelemetryPlugin
from sentinel_core.resilience._breaker import BreakerState, CircuitBreaker
from sentinel_core.resilience._emergency import EmergencyLimiter
from sentinel_core.store._connect import open_async_store, open_sync_store
from sentinel_core.store._protocol import ServerReport
from sentinel_core.store._redis import MEMORY_URL, AsyncStore, MemoryStore, SyncStore
from sentinel_core.store._reference import Mode
from sentinel_core.store._scripts import ScriptCall

logger = logging.getLogger("sentinel")


class Sentinel:
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

    @property
    def store(self) -> SyncStore:
        """The blocking store, connected on first use."""
        if self._sync_store is None:
            self._sync_store = open_sync_store(self.config.redis_url, self.config.socket_timeout_ms)
        return self._sync_store

    @property
    def async_store(self) -> AsyncStore:
        """The asyncio store, connected on first use (inside the running event loop)."""
        if self._async_store is None:
            self._async_store = open_async_store(
                self.config.redis_url, self.config.socket_timeout_ms
            )
        return self._async_store

    def check(self) -> ServerReport:
        """Run the startup check and load the scripts.

        Raises:
            StartupError: Redis is reachable but unfit (eviction policy, maxmemory, ...).
            StoreError: Redis is unreachable.
        """
        report = self.store.check(self.config.require_noeviction)
        report.raise_for_problems()
        return report

    async def acheck(self) -> ServerReport:
        """`check` on the asyncio store."""
        report = await self.async_store.acheck(self.config.require_noeviction)
        report.raise_for_problems()
        return report

    def startup(self) -> ServerReport | None:
        """The adapters' start-up step (SPEC §5): `check`, except that an unreachable
        Redis only logs an error; the check then runs at the first successful contact.

        The JWKS keys (``jwt.jwks_url``) are fetched here too; a provider that does not
        answer only logs a warning.

        With ``enabled = false`` it does nothing: the guards never contact the store.

        Raises:
            StartupError: Redis is reachable but unfit; the app must not start.
        """
        if not self.config.enabled:
            return None
        self.http.load_keys()
        try:
            return self.check()
        except StoreError as exc:
            self._defer_check(exc)
            return None

    async def astartup(self) -> ServerReport | None:
        """`startup` on the asyncio store (the JWKS fetch in a worker thread)."""
        if not self.config.enabled:
            return None
        if self.config.jwt is not None and self.config.jwt.jwks is not None:
            await asyncio.to_thread(self.http.load_keys)
        try:
            return await self.acheck()
        except StoreError as exc:
            self._defer_check(exc)
            return None

    def _defer_check(self, exc: StoreError) -> None:
        self._check_deferred = True
        logger.error(
            "Redis unreachable at start-up (%s: %s); starting anyway, the decision table "
            "answers until Redis is back, and the start-up check runs then",
            type(exc).__name__,
            exc,
        )

    def _run_deferred_check(self, report: ServerReport) -> None:
        """The start-up check at the first successful contact, after that decision (so a
        failure of the check never turns a decided request into a Redis failure)."""
        self._check_deferred = False
        if not report.ok:
            logger.critical("deferred start-up check failed: %s", report)

    def evaluate(self, endpoint_id: str, identity: str | Identity, request: Any = None) -> Decision:
        """Decide one request of ``identity`` (a tenant id, or an `Identity`) on ``endpoint_id``."""
        return self._decide(
            self._engine.begin(self._engine.endpoint(endpoint_id), _identity(identity), request)
        )

    def precheck(self, endpoint_id: str, identity: str | Identity, request: Any = None) -> Decision:
        """The `Decision` a request would get now, consuming nothing, made like
        `evaluate`'s (circuit breaker, local denials, and the decision table when the
        store fails), unlike `peek`: the check before the handler of a ``count`` policy,
        whose `evaluate` comes after it, by status. A denial is reported to the
        observers; the store's admission is not (the `evaluate` after it is)."""
        return self._decide(
            self._engine.begin(
                self._engine.endpoint(endpoint_id), _identity(identity), request, check=True
            )
        )

    def _decide(self, attempt: Attempt) -> Decision:
        if attempt.permit is None:
            return attempt.short_circuit()
        with attempt:
            try:
                reply = self.store.run(attempt.call)
            except StoreError as exc:
                return attempt.failed(exc)
            decision = attempt.succeeded(reply)
        if self._check_deferred and self._deferred_check_lock.acquire(blocking=False):
            # A Redis error leaves it deferred: the next successful contact tries again.
            try:
                with contextlib.suppress(StoreError):
                    self._run_deferred_check(self.store.check(self.config.require_noeviction))
            finally:
                self._deferred_check_lock.release()
        return decision

    async def aevaluate(
        self, endpoint_id: str, identity: str | Identity, request: Any = None
    ) -> Decision:
        """`evaluate` for asyncio code: the same rules, on the asyncio store."""
        return await self._adecide(
            self._engine.begin(self._engine.endpoint(endpoint_id), _identity(identity), request)
        )

    async def aprecheck(
        self, endpoint_id: str, identity: str | Identity, request: Any = None
    ) -> Decision:
        """`precheck` on the asyncio store."""
        return await self._adecide(
            self._engine.begin(
                self._engine.endpoint(endpoint_id), _identity(identity), request, check=True
            )
        )

    async def _adecide(self, attempt: Attempt) -> Decision:
        if attempt.permit is None:
            return attempt.short_circuit()
        with attempt:
            try:
                reply = await self.async_store.arun(attempt.call)
            except StoreError as exc:
                return attempt.failed(exc)
            except asyncio.CancelledError:
                if attempt.policy.algorithm is Algorithm.CONCURRENCY:
                    # The script may have run: a lease no caller will ever release.
                    lease = store_lease(attempt.policy.endpoint_id, attempt.call)
                    await self._hand_back(lease, attempt.policy)
                raise
            decision = attempt.succeeded(reply)
        if self._check_deferred and self._deferred_check_lock.acquire(blocking=False):
            try:
                with contextlib.suppress(StoreError):  # still deferred: tried at the next contact
                    report = await self.async_store.acheck(self.config.require_noeviction)
                    self._run_deferred_check(report)
            finally:
                self._deferred_check_lock.release()
        return decision

    def release(self, decision: Decision) -> None:
        """Hand back the concurrency lease ``decision`` holds, if any, once the request
        is done (returned, raised, cancelled or disconnected). Safe to call twice or on
        any decision. A Redis failure here is logged, not raised: the lease then expires
        after ``lease_seconds``; while the breaker is OPEN no call is made at all."""
        call = release_call(decision.lease)
        if call is None or self._breaker.state is BreakerState.OPEN:
            return
        try:
            self.store.run(call)
        except StoreError as exc:
            _release_failed(decision.policy, exc)

    async def arelease(self, decision: Decision) -> None:
        """`release` on the asyncio store. Shielded: a caller cancelled while the lease
        goes back (a streamed body whose client closed as it ended) still hands it back."""
        await self._hand_back(decision.lease, decision.policy)

    async def _hand_back(self, lease: Slot | None, policy: Policy) -> None:
        call = release_call(lease)
        if call is None or self._breaker.state is BreakerState.OPEN:
            return
        await asyncio.shield(self._send_release(call, policy))

    async def _send_release(self, call: ScriptCall, policy: Policy) -> None:
        try:
            await self.async_store.arun(call)
        except StoreError as exc:
            _release_failed(policy, exc)

    def reserve(
        self, endpoint_id: str, identity: str | Identity, units: int | None = None
    ) -> Reservation:
        """Reserve ``units`` (default: the policy's ``cost``) of a ``settle`` policy for
        work whose usage is known only once it is done (SPEC §3): admitted or denied
        like `evaluate`, in one script call. Settle it with what the work used,
        ``reservation.settle(units)``, once; as a context manager, a reservation left
        unsettled stays charged as reserved.

        Raises:
            ValueError: the policy is not a settle policy, or ``units`` is not from 1 to
                its smallest limit.
            TypeError: ``units`` is not an int.
        """
        who, endpoint = _identity(identity), self._engine.endpoint(endpoint_id)
        reserved = reservation_units(endpoint.policy, units)
        decision = self._decide(self._engine.begin(endpoint, who, units=reserved))
        return Reservation(self._settlement, decision, who)

    async def areserve(
        self, endpoint_id: str, identity: str | Identity, units: int | None = None
    ) -> Reservation:
        """`reserve` on the asyncio store; settle it with ``await reservation.asettle(units)``."""
        who, endpoint = _identity(identity), self._engine.endpoint(endpoint_id)
        reserved = reservation_units(endpoint.policy, units)
        decision = await self._adecide(self._engine.begin(endpoint, who, units=reserved))
        return Reservation(self._settlement, decision, who)

    @contextlib.contextmanager
    def lease(self, endpoint_id: str, identity: str | Identity) -> Iterator[Decision]:
        """`evaluate` for a block of work, released when the block is left however it
        is left: ``with sentinel.lease("reports.render", tenant) as decision:``."""
        decision = self.evaluate(endpoint_id, identity)
        try:
            yield decision
        finally:
            self.release(decision)

    @contextlib.asynccontextmanager
    async def alease(self, endpoint_id: str, identity: str | Identity) -> AsyncIterator[Decision]:
        """`lease` for asyncio code; the release survives the task being cancelled."""
        decision = await self.aevaluate(endpoint_id, identity)
        try:
            yield decision
        finally:
            await self.arelease(decision)

    def usage(self, endpoint_id: str, identity: str | Identity) -> Usage:
        """What ``identity`` has used of a quota policy's current period (or of a
        concurrency policy's leases), read by the store without counting anything.

        Raises:
            StoreError: the store is unavailable.
        """
        policy = self._engine.policy(endpoint_id)
        call = usage_call(self._engine, policy, _identity(identity))
        return usage_of(policy, call, self.store.run(call))

    async def ausage(self, endpoint_id: str, identity: str | Identity) -> Usage:
        """`usage` on the asyncio store."""
        policy = self._engine.policy(endpoint_id)
        call = usage_call(self._engine, policy, _identity(identity))
        return usage_of(policy, call, await self.async_store.arun(call))

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

    def peek(self, endpoint_id: str, identity: str | Identity) -> Decision:
        """The `Decision` a request of ``identity`` would get now, without consuming
        anything: the store writes nothing, and no metric or log is made.

        Raises:
            StoreError: the store is unavailable.
            ValueError: the policy is a quota or concurrency one (see `usage`), or an
                anonymous one and ``identity`` is not an `anonymous_identity`.
        """
        policy, who = self._engine.policy(endpoint_id), _identity(identity)
        call = admin_call(policy, who, Mode.PEEK, self._engine.calendars)
        return peeked(policy, who, self.store.run(call))

    async def apeek(self, endpoint_id: str, identity: str | Identity) -> Decision:
        """`peek` on the asyncio store."""
        policy, who = self._engine.policy(endpoint_id), _identity(identity)
        call = admin_call(policy, who, Mode.PEEK, self._engine.calendars)
        return peeked(policy, who, await self.async_store.arun(call))

    def reset(self, endpoint_id: str, identity: str | Identity) -> None:
        """Refill ``identity``'s buckets of ``endpoint_id`` (an administrative action:
        support, tests), by script; for a quota policy, the current period's count
        starts again from 0. This process forgets its local denials of them at once;
        other processes within ``local_denials_ms``.

        Raises:
            StoreError: the store is unavailable.
            ValueError: the policy is a concurrency one, or an anonymous one and
                ``identity`` is not an `anonymous_identity`.
        """
        call = self._admin_call(endpoint_id, identity, Mode.RESET)
        self.store.run(call)
        self._engine.local_denials.forget(call.keys)

    async def areset(self, endpoint_id: str, identity: str | Identity) -> None:
        """`reset` on the asyncio store."""
        call = self._admin_call(endpoint_id, identity, Mode.RESET)
        await self.async_store.arun(call)
        self._engine.local_denials.forget(call.keys)

    def _admin_call(self, endpoint_id: str, identity: str | Identity, mode: Mode) -> ScriptCall:
        policy = self._engine.policy(endpoint_id)
        return admin_call(policy, _identity(identity), mode, self._engine.calendars)

    def validate_endpoint(self, endpoint_id: str) -> Policy:
        """Raise at startup, not on the first request, for an id that cannot be guarded
        over HTTP (`UnknownEndpointError`, or `ConfigError` for a tenant policy without
        the ``jwt`` section)."""
        return self.http.validate_endpoint(endpoint_id)

    def guard(self, endpoint_id: str, request: RequestView) -> Outcome:
        """Decide an HTTP request: identity, decision, and SPEC §4's outcome."""
        prepared = self.http.prepare(self._engine.policy(endpoint_id), request)
        if not isinstance(prepared, Prepared):
            return prepared
        decision = self.evaluate(endpoint_id, prepared.identity, request)
        return self.http.outcome(decision, prepared.cookie)

    async def aguard(self, endpoint_id: str, request: RequestView) -> Outcome:
        """`guard` for asyncio servers."""
        await self.http.aprefetch_keys(request)  # a JWKS fetch never runs on the loop
        prepared = self.http.prepare(self._engine.policy(endpoint_id), request)
        if not isinstance(prepared, Prepared):
            return prepared
        decision = await self.aevaluate(endpoint_id, prepared.identity, request)
        return self.http.outcome(decision, prepared.cookie)

    def endpoint(self, endpoint_id: str) -> Endpoint:
        """``endpoint_id`` compiled (its policy and what the policy fixes), for an
        adapter to keep per route and hand to `admit`.

        Raises:
            UnknownEndpointError: no policy has that id.
        """
        return self._engine.endpoint(endpoint_id)

    def admit(self, request: RequestView, endpoints: Sequence[Endpoint | str]) -> Admission:
        """Admit an HTTP request that pays for ``endpoints`` (`endpoint` objects, or ids:
        see `RouteTable.charged`): the `Admission` says whether the handler may run;
        call its ``complete`` with the final status once the response is over."""
        compiled = self._compiled(endpoints)
        if len(compiled) == 1 and compiled[0].straight:  # identity, key, one call, outcome
            endpoint = compiled[0]
            prepared = self.http.prepare(endpoint.policy, request)
            if not isinstance(prepared, Prepared):
                return answered(request, prepared, self._runner)
            decision = self._decide(self._engine.begin(endpoint, prepared.identity, request))
            outcome = self.http.outcome(decision, prepared.cookie)
            return decided(request, endpoint.policy, prepared.identity, outcome, self._runner)
        charges, denial = drive(admission(self.http, request, compiled), self._runner.sync)
        return Admission(request, charges, denial, self._runner)

    async def aadmit(self, request: RequestView, endpoints: Sequence[Endpoint | str]) -> Admission:
        """`admit` for asyncio servers; complete it with ``acomplete``."""
        await self.http.aprefetch_keys(request)  # a JWKS fetch never runs on the loop
        compiled = self._compiled(endpoints)
        if len(compiled) == 1 and compiled[0].straight:
            endpoint = compiled[0]
            prepared = self.http.prepare(endpoint.policy, request)
            if not isinstance(prepared, Prepared):
                return answered(request, prepared, self._runner)
            attempt = self._engine.begin(endpoint, prepared.identity, request)
            outcome = self.http.outcome(await self._adecide(attempt), prepared.cookie)
            return decided(request, endpoint.policy, prepared.identity, outcome, self._runner)
        conversation = admission(self.http, request, compiled)
        charges, denial = await adrive(conversation, self._runner.async_)
        return Admission(request, charges, denial, self._runner)

    def _compiled(self, endpoints: Sequence[Endpoint | str]) -> list[Endpoint]:
        return [e if isinstance(e, Endpoint) else self._engine.endpoint(e) for e in endpoints]

    def close(self) -> None:
        if self._fleet is not None:
            self._fleet.heartbeat.stop()
        if self._sync_store is not None:
            self._sync_store.close()

    async def aclose(self) -> None:
        if self._fleet is not None:
            self._fleet.heartbeat.stop()
        if self._async_store is not None:
            await self._async_store.aclose()


def _release_failed(policy: Policy, exc: StoreError) -> None:
    logger.warning(
        "lease on %s not handed back (%s: %s); it expires after lease_seconds=%d",
        policy.endpoint_id,
        type(exc).__name__,
        exc,
        policy.lease_seconds,
    )


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


def _identity(identity: str | Identity) -> Identity:
    if isinstance(identity, str):
        return tenant_identity(identity)
    if isinstance(identity, Identity):
        return identity
    raise TypeError(
        f"identity must be a tenant id (str) or an Identity, not {type(identity).__name__}"
    )
