"""The facade's calls that talk to the store, written once, for asyncio.

This is the one source of `Sentinel`'s sync/async twins: ``tools/unasync.py`` turns it
into `_calls_sync` (blocking: ``await`` dropped, ``aevaluate`` named ``evaluate``,
the asyncio store the blocking one), and a test fails when the two differ. A line
marked ``# unasync: async only`` (or a block between ``# unasync: begin async only``
and ``# unasync: end``) has no blocking twin; the line after a comment
``# unasync: sync: CODE`` becomes CODE.
"""

from __future__ import annotations

import asyncio  # unasync: async only
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

from sentinel_core._calls_base import CallsBase, as_identity, leaked_lease, release_failed
from sentinel_core._models import Decision, Policy, Slot
from sentinel_core._reservation import Reservation
from sentinel_core.decision._admin import admin_call, peeked
from sentinel_core.decision._endpoint import Endpoint
from sentinel_core.decision._engine import Attempt
from sentinel_core.decision._leases import release_call
from sentinel_core.decision._settle import reservation_units
from sentinel_core.decision._usage import Usage, usage_call, usage_of
from sentinel_core.errors import StoreError
from sentinel_core.http._lifecycle import Admission, admission, adrive, answered, decided
from sentinel_core.http._outcome import Outcome, Prepared, RequestView
from sentinel_core.identity._keys import Identity
from sentinel_core.resilience._breaker import BreakerState
from sentinel_core.store._connect import open_async_store
from sentinel_core.store._protocol import ServerReport
from sentinel_core.store._redis import AsyncStore
from sentinel_core.store._reference import Mode
from sentinel_core.store._scripts import ScriptCall


class AsyncCalls(CallsBase):
    # unasync: sync: """`Sentinel`'s blocking calls, on the blocking store (threads)."""
    """`Sentinel`'s asyncio calls (``a``-prefixed), on the asyncio store."""

    @property
    def async_store(self) -> AsyncStore:
        # unasync: sync: """The blocking store, connected on first use."""
        """The asyncio store, connected on first use (inside the running event loop)."""
        if self._async_store is None:
            self._async_store = open_async_store(
                self.config.redis_url, self.config.socket_timeout_ms
            )
        return self._async_store

    async def acheck(self) -> ServerReport:
        """Run the startup check and load the scripts.

        Raises:
            StartupError: Redis is reachable but unfit (eviction policy, maxmemory, ...).
            StoreError: Redis is unreachable.
        """
        report = await self.async_store.acheck(self.config.require_noeviction)
        report.raise_for_problems()
        return report

    async def astartup(self) -> ServerReport | None:
        """The adapters' start-up step: `acheck`, except that an unreachable Redis only
        logs an error; the check then runs at the first successful contact.

        The JWKS keys (``jwt.jwks_url``) are fetched here too (asyncio: in a worker
        thread); a provider that does not answer only logs a warning. With ``enabled =
        false`` it does nothing: the guards never contact the store.

        Raises:
            StartupError: Redis is reachable but unfit; the app must not start.
        """
        if not self.config.enabled:
            return None
        # unasync: sync: self.http.load_keys()
        await self._aload_keys()
        try:
            return await self.acheck()
        except StoreError as exc:
            self._defer_check(exc)
            return None

    # unasync: begin async only
    async def _aload_keys(self) -> None:
        """The JWKS keys fetched in a worker thread: never on the event loop."""
        if self.config.jwt is not None and self.config.jwt.jwks is not None:
            await asyncio.to_thread(self.http.load_keys)

    # unasync: end
    async def aevaluate(
        self, endpoint_id: str, identity: str | Identity, request: Any = None
    ) -> Decision:
        """Decide one request of ``identity`` (a tenant id, or an `Identity`) on
        ``endpoint_id``."""
        endpoint = self._engine.endpoint(endpoint_id)
        return await self._adecide(self._engine.begin(endpoint, as_identity(identity), request))

    async def aprecheck(
        self, endpoint_id: str, identity: str | Identity, request: Any = None
    ) -> Decision:
        """The `Decision` a request would get now, consuming nothing, made like
        `aevaluate`'s (circuit breaker, local denials, and the decision table when the
        store fails), unlike `apeek`: the check before the handler of a ``count``
        policy, whose `aevaluate` comes after it, by status. A denial is reported to the
        observers; the store's admission is not (the `aevaluate` after it is)."""
        endpoint, who = self._engine.endpoint(endpoint_id), as_identity(identity)
        return await self._adecide(self._engine.begin(endpoint, who, request, check=True))

    async def _adecide(self, attempt: Attempt) -> Decision:
        if attempt.permit is None:
            return attempt.short_circuit()
        with attempt:
            try:
                reply = await self.async_store.arun(attempt.call)
            except StoreError as exc:
                return attempt.failed(exc)
            # unasync: begin async only
            except asyncio.CancelledError:
                lease = leaked_lease(attempt)
                if lease is not None:
                    await self._ahand_back(lease, attempt.policy)
                raise
            # unasync: end
            decision = attempt.succeeded(reply)
        if self._check_deferred and self._deferred_check_lock.acquire(blocking=False):
            # A Redis error leaves it deferred: the next successful contact tries again.
            try:
                with contextlib.suppress(StoreError):
                    report = await self.async_store.acheck(self.config.require_noeviction)
                    self._run_deferred_check(report)
            finally:
                self._deferred_check_lock.release()
        return decision

    async def arelease(self, decision: Decision) -> None:
        """Hand back the concurrency lease ``decision`` holds, if any, once the request
        is done (returned, raised, cancelled or disconnected). Safe to call twice or on
        any decision. A Redis failure here is logged, not raised: the lease then expires
        after ``lease_seconds``; while the breaker is OPEN no call is made at all. In
        asyncio code the call is shielded: a caller cancelled while the lease goes back
        (a streamed body whose client closed as it ended) still hands it back."""
        await self._ahand_back(decision.lease, decision.policy)

    async def _ahand_back(self, lease: Slot | None, policy: Policy) -> None:
        call = release_call(lease)
        if call is None or self._breaker.state is BreakerState.OPEN:
            return
        # unasync: sync: self._send_release(call, policy)
        await asyncio.shield(self._asend_release(call, policy))

    async def _asend_release(self, call: ScriptCall, policy: Policy) -> None:
        try:
            await self.async_store.arun(call)
        except StoreError as exc:
            release_failed(policy, exc)

    async def areserve(
        self, endpoint_id: str, identity: str | Identity, units: int | None = None
    ) -> Reservation:
        """Reserve ``units`` (default: the policy's ``cost``) of a ``settle`` policy for
        work whose usage is known only once it is done: admitted or denied like
        `aevaluate`, in one script call. Settle it with what the work used,
        ``await reservation.asettle(units)``, once; as a context manager, a reservation
        left unsettled stays charged as reserved.

        Raises:
            ValueError: the policy is not a settle policy, or ``units`` is not from 1 to
                its smallest limit.
            TypeError: ``units`` is not an int.
        """
        who, endpoint = as_identity(identity), self._engine.endpoint(endpoint_id)
        reserved = reservation_units(endpoint.policy, units)
        decision = await self._adecide(self._engine.begin(endpoint, who, units=reserved))
        return Reservation(self._settlement, decision, who)

    @contextlib.asynccontextmanager
    async def alease(self, endpoint_id: str, identity: str | Identity) -> AsyncIterator[Decision]:
        """`aevaluate` for a block of work, released when the block is left however it
        is left (in asyncio code, even when the task is cancelled):
        ``async with sentinel.alease("reports.render", tenant) as decision:``."""
        decision = await self.aevaluate(endpoint_id, identity)
        try:
            yield decision
        finally:
            await self.arelease(decision)

    async def ausage(self, endpoint_id: str, identity: str | Identity) -> Usage:
        """What ``identity`` has used of a quota policy's current period (or of a
        concurrency policy's leases), read by the store without counting anything.

        Raises:
            StoreError: the store is unavailable.
        """
        policy = self._engine.policy(endpoint_id)
        call = usage_call(self._engine, policy, as_identity(identity))
        return usage_of(policy, call, await self.async_store.arun(call))

    async def apeek(self, endpoint_id: str, identity: str | Identity) -> Decision:
        """The `Decision` a request of ``identity`` would get now, without consuming
        anything: the store writes nothing, and no metric or log is made.

        Raises:
            StoreError: the store is unavailable.
            ValueError: the policy is a quota or concurrency one (see `ausage`), or an
                anonymous one and ``identity`` is not an `anonymous_identity`.
        """
        policy, who = self._engine.policy(endpoint_id), as_identity(identity)
        call = admin_call(policy, who, Mode.PEEK, self._engine.calendars)
        return peeked(policy, who, call, await self.async_store.arun(call))

    async def areset(self, endpoint_id: str, identity: str | Identity) -> None:
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
        await self.async_store.arun(call)
        self._engine.local_denials.forget(call.keys)

    async def aguard(self, endpoint_id: str, request: RequestView) -> Outcome:
        """Decide an HTTP request: identity, decision, and its HTTP outcome."""
        # unasync: begin async only
        if self.http.prefetches:  # a JWKS fetch never runs on the event loop
            await self.http.aprefetch_keys(request)
        # unasync: end
        prepared = self.http.prepare(self._engine.policy(endpoint_id), request)
        if not isinstance(prepared, Prepared):
            return prepared
        decision = await self.aevaluate(endpoint_id, prepared.identity, request)
        return self.http.outcome(decision, prepared.cookie)

    async def aadmit(self, request: RequestView, endpoints: Sequence[Endpoint | str]) -> Admission:
        """Admit an HTTP request that pays for ``endpoints`` (`endpoint` objects, or ids:
        see `RouteTable.charged`): the `Admission` says whether the handler may run;
        call its ``acomplete`` with the final status once the response is over."""
        # unasync: begin async only
        if self.http.prefetches:  # a JWKS fetch never runs on the event loop
            await self.http.aprefetch_keys(request)
        # unasync: end
        compiled = self._compiled(endpoints)
        if len(compiled) == 1 and compiled[0].straight:  # identity, key, one call, outcome
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

    async def aclose(self) -> None:
        """Release the store's connections (and stop the fleet heartbeat)."""
        if self._fleet is not None:
            self._fleet.heartbeat.stop()
        if self._async_store is not None:
            await self._async_store.aclose()
