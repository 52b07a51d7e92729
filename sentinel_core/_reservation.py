"""Reservations and their settlement (SPEC §2 ``settle``, §3 ``reserve``): the I/O
shells around `decision._settle`.

`Settlement` makes the one script call that settles a reservation, on the stores of one
`Sentinel`; `Reservation` is what `Sentinel.reserve` returns to code outside a web
request. A settlement comes after the work it charges for (a response may already be on
its way): a store failure there is counted (``sentinel_unsettled_units_total``) and
logged, never raised, and the bucket keeps the reservation.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from types import TracebackType

from sentinel_core._models import Decision, check_units
from sentinel_core.decision._engine import DecisionEngine
from sentinel_core.decision._settle import charged, settle_call
from sentinel_core.errors import StoreError
from sentinel_core.identity._keys import Identity
from sentinel_core.observability._log_throttle import LogThrottle
from sentinel_core.observability._metrics import MetricsPlugin
from sentinel_core.resilience._breaker import BreakerState
from sentinel_core.store._redis import AsyncStore, SyncStore
from sentinel_core.store._scripts import ScriptCall

logger = logging.getLogger("sentinel")


class Settlement:
    """Settles the reservations of one `Sentinel` (its engine, breaker and stores)."""

    def __init__(
        self,
        engine: DecisionEngine,
        store: Callable[[], SyncStore],
        async_store: Callable[[], AsyncStore],
        metrics: MetricsPlugin,
        clock_ns: Callable[[], int],
    ) -> None:
        self._engine = engine
        self._store = store
        self._async_store = async_store
        self._metrics = metrics
        self._log = LogThrottle(clock_ns)

    def _call(
        self, decision: Decision, identity: Identity, used: int | None
    ) -> tuple[ScriptCall, int] | None:
        """The settlement to send and the units it charges, or None: nothing to send,
        counted as settled already."""
        if not charged(decision):
            return None
        reserved = decision.policy.cost
        if used is None or used == reserved:  # exact: nothing to send (the usual case)
            self._metrics.settled(decision.endpoint_id, reserved)
            return None
        if self._engine.breaker.state is BreakerState.OPEN:
            self._failed(decision, used, "the circuit breaker is open")
            return None
        return settle_call(decision.policy, identity, used, self._engine.calendars), used

    def settle(self, decision: Decision, identity: Identity, used: int | None) -> None:
        """Charge ``used`` units instead of the reservation ``decision`` made (None:
        what it reserved)."""
        planned = self._call(decision, identity, used)
        if planned is None:
            return
        call, units = planned
        try:
            self._store().run(call)
        except StoreError as exc:
            self._failed(decision, units, f"{type(exc).__name__}: {exc}")
            return
        self._done(decision, call, units)

    async def asettle(self, decision: Decision, identity: Identity, used: int | None) -> None:
        """`settle` on the asyncio store; shielded, so a caller cancelled meanwhile (a
        client gone as its stream ended) does not cancel the settlement."""
        planned = self._call(decision, identity, used)
        if planned is not None:
            await asyncio.shield(self._asend(decision, *planned))

    async def _asend(self, decision: Decision, call: ScriptCall, used: int) -> None:
        try:
            await self._async_store().arun(call)
        except StoreError as exc:
            self._failed(decision, used, f"{type(exc).__name__}: {exc}")
            return
        self._done(decision, call, used)

    def keep(self, decision: Decision) -> None:
        """A reservation left unsettled: it stays charged as reserved."""
        if charged(decision):
            self._metrics.settled(decision.endpoint_id, decision.policy.cost)

    def _done(self, decision: Decision, call: ScriptCall, used: int) -> None:
        self._metrics.settled(decision.endpoint_id, used)
        if used < decision.policy.cost:
            # A refund may admit what this process remembers as denied (like a reset).
            self._engine.local_denials.forget(call.keys)

    def _failed(self, decision: Decision, used: int, cause: str) -> None:
        endpoint_id, reserved = decision.endpoint_id, decision.policy.cost
        self._metrics.settled(endpoint_id, reserved)
        self._metrics.unsettled(endpoint_id, abs(used - reserved))
        suppressed = self._log.admit(("settle", endpoint_id))
        if suppressed is not None:
            logger.warning(
                "settlement on %s not made (%s): %d units used, %d reserved stay charged",
                endpoint_id,
                cause,
                used,
                reserved,
                extra={"endpoint_id": endpoint_id, "suppressed": suppressed},
            )


class Reservation:
    """Units of a ``settle`` policy reserved by `Sentinel.reserve`, to settle once the
    work is done: ``reservation.settle(units_used)`` (or ``await asettle``), once.

    As a context manager (``with`` or ``async with``), a reservation left unsettled
    stays charged as reserved. A denied reservation charged nothing: settling it does
    nothing either.
    """

    __slots__ = ("_identity", "_lock", "_settled", "_settlement", "decision")

    def __init__(self, settlement: Settlement, decision: Decision, identity: Identity) -> None:
        self._settlement = settlement
        self._identity = identity
        self._lock = threading.Lock()
        self._settled = False
        self.decision = decision
        """The reservation's `Decision`: whether the work may run, and the RateLimit view."""

    @property
    def reserved(self) -> int:
        """The units reserved."""
        return self.decision.policy.cost

    def _claim(self, units: object) -> int:
        used = check_units(units)
        with self._lock:
            if self._settled:
                raise RuntimeError("this reservation is already settled: settle it once")
            self._settled = True
        return used

    def settle(self, units: int) -> None:
        """Charge ``units`` (an int, 0 or more) instead of the reservation: refund the
        rest, or charge the excess, into debt if need be (SPEC §2).

        Raises:
            TypeError: ``units`` is not an int (a float, a string, a bool).
            ValueError: ``units`` is negative.
            RuntimeError: the reservation is already settled.
        """
        self._settlement.settle(self.decision, self._identity, self._claim(units))

    async def asettle(self, units: int) -> None:
        """`settle` on the asyncio store."""
        await self._settlement.asettle(self.decision, self._identity, self._claim(units))

    def _leave(self) -> None:
        with self._lock:
            kept, self._settled = not self._settled, True
        if kept:
            self._settlement.keep(self.decision)

    def __enter__(self) -> Reservation:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._leave()

    async def __aenter__(self) -> Reservation:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._leave()
