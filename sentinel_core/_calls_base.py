"""What the facade's blocking and asyncio calls share: the state `Sentinel` builds, and
the helpers both twins use (`_calls_async` is the one source of the twins; `_calls_sync`
is generated from it by ``tools/unasync.py``)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from sentinel_core._fleet import FleetPlugin
from sentinel_core._models import Algorithm, Policy
from sentinel_core._plugins import Hooks
from sentinel_core._reservation import Settlement
from sentinel_core.config._schema import SentinelConfig
from sentinel_core.decision._admin import admin_call
from sentinel_core.decision._endpoint import Endpoint
from sentinel_core.decision._engine import Attempt, DecisionEngine
from sentinel_core.decision._leases import Lease, store_lease
from sentinel_core.errors import StoreError
from sentinel_core.http._lifecycle import _Runner
from sentinel_core.http._outcome import HttpLayer
from sentinel_core.identity._keys import Identity, tenant_identity
from sentinel_core.resilience._breaker import CircuitBreaker
from sentinel_core.store._protocol import ServerReport
from sentinel_core.store._redis import AsyncStore, SyncStore
from sentinel_core.store._reference import Mode
from sentinel_core.store._scripts import ScriptCall

logger = logging.getLogger("sentinel")


class CallsBase:
    """The state of one `Sentinel` that its calls read (set by ``Sentinel.__init__``)."""

    config: SentinelConfig
    http: HttpLayer
    _engine: DecisionEngine
    _breaker: CircuitBreaker
    _hooks: Hooks
    _runner: _Runner
    _fleet: FleetPlugin | None
    _settlement: Settlement
    _sync_store: SyncStore | None
    _async_store: AsyncStore | None
    _check_deferred: bool
    _deferred_check_lock: threading.Lock

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

    def _admin_call(self, endpoint_id: str, identity: str | Identity, mode: Mode) -> ScriptCall:
        policy = self._engine.policy(endpoint_id)
        return admin_call(policy, as_identity(identity), mode, self._engine.calendars)

    def _compiled(self, endpoints: Sequence[Endpoint | str]) -> list[Endpoint]:
        return [e if isinstance(e, Endpoint) else self._engine.endpoint(e) for e in endpoints]


def leaked_lease(attempt: Attempt) -> Lease | None:
    """The lease a concurrency call cancelled in flight may have taken (the script may
    have run), which no caller will ever release."""
    policy = attempt.policy
    if policy.algorithm is not Algorithm.CONCURRENCY:
        return None
    return store_lease(policy.endpoint_id, attempt.call)


def release_failed(policy: Policy, exc: StoreError) -> None:
    logger.warning(
        "lease on %s not handed back (%s: %s); it expires after lease_seconds=%d",
        policy.endpoint_id,
        type(exc).__name__,
        exc,
        policy.lease_seconds,
    )


def as_identity(identity: str | Identity) -> Identity:
    if isinstance(identity, str):
        return tenant_identity(identity)
    if isinstance(identity, Identity):
        return identity
    raise TypeError(
        f"identity must be a tenant id (str) or an Identity, not {type(identity).__name__}"
    )
