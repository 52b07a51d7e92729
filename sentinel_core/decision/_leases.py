"""Concurrency leases: the slot an admitted request holds until it is done.

A lease is taken by the decision itself (one script call, ``lua/concurrency.lua``) and
handed back with `Sentinel.release` (another call) after the handler, whatever it did.
Should the process die first, the lease expires after the policy's ``lease_seconds``.
While Redis is unavailable, a fail-open policy admits at most ``fallback_limit``
requests in flight per process instead, counted by `LocalInflight`.
"""

from __future__ import annotations

import dataclasses
import os
import threading

from sentinel_core._models import MICRO, Policy, Slot
from sentinel_core.decision._calendar import USAGE_LIMIT
from sentinel_core.identity._keys import Identity
from sentinel_core.resilience._emergency import EmergencyVerdict
from sentinel_core.store._reference_extra import COUNT, GIVE_BACK, TAKE
from sentinel_core.store._scripts import ScriptCall


def lease_name() -> str:
    """A fresh lease name: 64 random bits, so no two processes ever pick the same."""
    return os.urandom(8).hex()


def lease_call(policy: Policy, identity: Identity, name: str, action: int = TAKE) -> ScriptCall:
    """The concurrency script call that takes (or hands back, or counts) lease ``name``."""
    bucket = identity.bucket_keys(policy)[0]
    args = (policy.burst, policy.lease_seconds * MICRO, action)
    return ScriptCall(policy.algorithm, (bucket, f"{bucket}:lease:{name}"), args)


def count_call(policy: Policy, identity: Identity) -> ScriptCall:
    """A call that only counts ``identity``'s live leases: its ``remaining`` is
    `USAGE_LIMIT` less their number."""
    bucket = identity.bucket_keys(policy)[0]
    args = (USAGE_LIMIT, policy.lease_seconds * MICRO, COUNT)
    return ScriptCall(policy.algorithm, (bucket, f"{bucket}:lease:-"), args)


class Lease:
    """One admitted request's slot. `end` hands it back exactly once, however many
    times it is called and from whichever thread or task."""

    __slots__ = ("_held", "_inflight", "_release", "endpoint_id")

    def __init__(
        self, endpoint_id: str, release: ScriptCall | None, inflight: LocalInflight | None
    ) -> None:
        self.endpoint_id = endpoint_id
        self._release = release
        self._inflight = inflight
        self._held = [True]

    def __repr__(self) -> str:
        where = "local" if self._inflight is not None else "store"
        return f"Lease({self.endpoint_id!r}, {where}, held={bool(self._held)})"

    @property
    def held(self) -> bool:
        return bool(self._held)

    def end(self) -> ScriptCall | None:
        """Mark the lease handed back. Returns the store call that does it, or None when
        there is nothing left to send: a local slot (freed here) or a second call."""
        try:
            self._held.pop()  # atomic: of two racing calls, exactly one gets the item
        except IndexError:
            return None
        if self._inflight is not None:
            self._inflight.release(self.endpoint_id)
            return None
        return self._release


def release_call(lease: Slot | None) -> ScriptCall | None:
    """The store call that hands ``lease`` back, marking it handed back; None when there
    is nothing to send (no lease, a local slot, or a lease already handed back)."""
    return lease.end() if isinstance(lease, Lease) else None


def store_lease(endpoint_id: str, taken: ScriptCall) -> Lease:
    """The lease that ``taken`` (an admitted call of `lease_call`) holds."""
    return Lease(endpoint_id, dataclasses.replace(taken, args=(*taken.args[:2], GIVE_BACK)), None)


class LocalInflight:
    """Requests in flight per endpoint in this process: the fail-open cap of concurrency
    policies while Redis is unavailable (a semaphore that never waits)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def count(self, endpoint_id: str) -> int:
        return self._counts.get(endpoint_id, 0)

    def acquire(self, endpoint_id: str, limit: int) -> tuple[EmergencyVerdict, Lease | None]:
        with self._lock:
            held = self._counts.get(endpoint_id, 0)
            if held < limit:
                self._counts[endpoint_id] = held + 1
        if held >= limit:
            return EmergencyVerdict(False, 0, 1, 0), None
        return EmergencyVerdict(True, limit - held - 1, None, 0), Lease(endpoint_id, None, self)

    def release(self, endpoint_id: str) -> None:
        with self._lock:
            self._counts[endpoint_id] -= 1
