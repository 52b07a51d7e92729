"""The decision engine: SPEC §3's decision table, free of I/O.

A decision is made in three steps, the middle one being the only I/O and living in the
sync and async shells (`Sentinel.evaluate` / `Sentinel.aevaluate`)::

    attempt = engine.begin(endpoint, identity, request)   # policy, keys, breaker permit
    reply = store.run(attempt.call)                           # one script execution
    decision = attempt.succeeded(reply)  # or attempt.failed(exc), or attempt.short_circuit()

so both shells share every rule: classification, breaker bookkeeping, the fail-open and
fail-closed rows, shadow mode, and reporting the decision to the observers.

A bucket the store denied a moment ago is answered by `begin` itself (`LocalDenials`):
such an attempt has no permit, and ``short_circuit`` gives the remembered denial.

A check (``begin(..., check=True)``: the look before the handler of a ``count`` policy)
is a decision like any other, breaker, local denials and decision table included; only
its script runs in peek mode (nothing consumed), and an admission by the store is not
reported to the observers: the consumption after the handler is.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from sentinel_core._models import (
    STORE_VERDICTS,
    Algorithm,
    Decision,
    DecisionReason,
    FailMode,
    Policy,
    build_decision,
)
from sentinel_core._plugins import Hooks
from sentinel_core.decision._calendar import Calendars
from sentinel_core.decision._endpoint import Endpoint
from sentinel_core.decision._leases import Lease, LocalInflight, lease_call, lease_name, store_lease
from sentinel_core.decision._local_denials import LocalDenials, Remembered
from sentinel_core.errors import (
    ScriptMissingError,
    StoreDataError,
    StoreError,
    StoreTimeoutError,
    UnknownEndpointError,
)
from sentinel_core.identity._keys import Identity
from sentinel_core.resilience._breaker import CircuitBreaker, Permit
from sentinel_core.resilience._emergency import EmergencyLimiter
from sentinel_core.store._reference import Mode, ScriptReply, one_key_admission, whole_seconds
from sentinel_core.store._scripts import ScriptCall, script_args


def classify(exc: StoreError) -> DecisionReason:
    """The decision reason of a store failure. Only `StoreError`s are ever classified."""
    if isinstance(exc, ScriptMissingError):
        return DecisionReason.REDIS_NOSCRIPT_RETRY
    if isinstance(exc, StoreTimeoutError):
        return DecisionReason.REDIS_TIMEOUT
    return DecisionReason.REDIS_CONNECTION_ERROR


class DecisionEngine:
    def __init__(
        self,
        policies: Mapping[str, Policy],
        breaker: CircuitBreaker,
        emergency: EmergencyLimiter,
        hooks: Hooks,
        local_denials: LocalDenials | None = None,
    ) -> None:
        self.policies = policies
        self.endpoints = {endpoint_id: Endpoint(policy) for endpoint_id, policy in policies.items()}
        """Every endpoint id, compiled once."""
        self.local_denials = LocalDenials(0) if local_denials is None else local_denials
        self.breaker = breaker
        self.emergency = emergency
        self.hooks = hooks
        self.calendars = Calendars()
        self.inflight = LocalInflight()

    def endpoint(self, endpoint_id: str) -> Endpoint:
        try:
            return self.endpoints[endpoint_id]
        except KeyError:
            raise UnknownEndpointError(endpoint_id) from None

    def policy(self, endpoint_id: str) -> Policy:
        return self.endpoint(endpoint_id).policy

    def begin(
        self,
        endpoint: Endpoint,
        identity: Identity,
        request: Any = None,
        *,
        check: bool = False,
        units: int | None = None,
    ) -> Attempt:
        """The decision of one request (a check: nothing consumed; see the module's doc),
        costing ``units`` instead of the policy's ``cost`` (a settle policy's reservation)."""
        started = time.perf_counter_ns()
        policy = endpoint.policy
        if self.hooks.resolves:
            policy = self.hooks.resolve_policy(endpoint.endpoint_id, identity, policy)
        if units is not None and units != policy.cost:
            policy = dataclasses.replace(policy, cost=units)
        local = self.local_denials
        # A concurrency slot frees up when another request ends: a denial of one says
        # nothing about the next instant, so those always ask the store.
        if not local.enabled or policy.algorithm is Algorithm.CONCURRENCY:
            permit = self.breaker.acquire()
            return Attempt(self, policy, identity, permit, request, started, check=check)
        # A check files and finds its denials under the decision's own call: the same
        # bucket, cost and rates, whichever of the two the store denied.
        call = self.script_call(policy, identity, endpoint)
        now = local.clock_ns()  # before the request is sent: see _local_denials
        remembered = local.lookup(call.keys, call.args, now)
        permit = None if remembered is not None else self.breaker.acquire()
        return Attempt(
            self, policy, identity, permit, request, started, call, now, remembered, check
        )

    def script_call(
        self, policy: Policy, identity: Identity, endpoint: Endpoint | None = None
    ) -> ScriptCall:
        """The script execution that decides ``identity`` under ``policy`` (for a
        concurrency policy, one that takes a lease of a new name: build it once per
        decision, and release what it took with `store_lease`). ``endpoint``, when the
        caller holds it, is ``policy``'s compiled endpoint."""
        # Hashing a Policy (for script_args' cache) costs more than building the keys:
        # the configured policy, nearly always the one resolved, has its call compiled
        # on its endpoint.
        if endpoint is None:
            endpoint = self.endpoints.get(policy.endpoint_id)
        if endpoint is not None and endpoint.policy is policy and endpoint.bucket_call:
            return endpoint.decide_call(identity)  # nearly every request
        if policy.algorithm is Algorithm.CONCURRENCY:
            return lease_call(policy, identity, lease_name())
        if policy.algorithm is Algorithm.QUOTA:
            return self.calendars.quota_call(policy, identity)
        keys = identity.bucket_keys(policy)
        return ScriptCall(policy.algorithm, keys, script_args(policy, Mode.DECIDE, len(keys)))


class Attempt:
    """One decision in flight. Use it as a context manager around the Redis call, so a
    call that ends in a bug (not a `StoreError`) hands its breaker permit back."""

    __slots__ = (
        "_call",
        "_check",
        "_engine",
        "_remembered",
        "_sent_ns",
        "_started",
        "identity",
        "permit",
        "policy",
        "request",
    )

    def __init__(
        self,
        engine: DecisionEngine,
        policy: Policy,
        identity: Identity,
        permit: Permit | None,
        request: Any,
        started: int,
        call: ScriptCall | None = None,
        sent_ns: int | None = None,
        remembered: Remembered | None = None,
        check: bool = False,
    ) -> None:
        self._engine = engine
        self._started = started
        self._call = call
        self._sent_ns = sent_ns
        """The local-denials clock before the call was sent; None: no local denials."""
        self._remembered = remembered
        self._check = check
        """A check: the script peeks, and the store's admission is not reported."""
        self.policy = policy
        self.identity = identity
        self.permit = permit
        self.request = request

    @property
    def call(self) -> ScriptCall:
        """The Redis call to make. Built on demand: a short circuit never needs it."""
        call = self._call
        if call is None:  # once: a concurrency call names a new lease each time it is built
            call = self._call = self._engine.script_call(self.policy, self.identity)
        if self._check:
            return ScriptCall(call.algorithm, call.keys, (int(Mode.PEEK), *call.args[1:]))
        return call

    def __enter__(self) -> Attempt:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None and self.permit is not None:
            self._engine.breaker.release(self.permit)

    def short_circuit(self) -> Decision:
        """No Redis traffic at all: a remembered denial answers, or the breaker refused."""
        remembered = self._remembered
        if remembered is None:
            return self._unavailable(DecisionReason.CIRCUIT_OPEN)
        now = self._sent_ns
        assert now is not None
        return self._finish(
            False,
            DecisionReason.RATE_LIMITED,
            0,
            remembered.retry_after_seconds(now),
            remembered.reset_seconds(now),
            local=True,
            index=remembered.limit_index,
        )

    def succeeded(self, raw_reply: Any) -> Decision:
        """Redis answered: the script's verdict is the decision."""
        assert self.permit is not None
        self._engine.breaker.record_success(self.permit)
        policy = self.policy
        call = self._call  # sent (the decision's, or its peek: the same parameters)
        assert call is not None
        if raw_reply.__class__ is int and raw_reply > 0:  # a one-key call admits: the
            # straight line (a OneKeyReply or a WindowAdmission), no ScriptReply to build
            left, reset_us = one_key_admission(
                raw_reply, call.algorithm, call.args, policy.cost, policy.burst
            )
            return self._finish(True, DecisionReason.ALLOWED, left, None, whole_seconds(reset_us))
        reply = ScriptReply.read(raw_reply, call.algorithm, call.args, policy.cost, policy.burst)
        # Layered limits: the bucket closest to binding is the reply's binding key.
        index = (reply.binding - 1) % len(policy.limits) if policy.layers else 0
        if reply.allowed:
            return self._finish(
                True,
                DecisionReason.ALLOWED,
                reply.remaining,
                None,
                reply.reset_seconds,
                index=index,
            )
        retry_after, reset = reply.retry_after_seconds, reply.reset_seconds
        if self._sent_ns is not None:
            self._remember(self._sent_ns, reply, retry_after, reset, index)
        return self._finish(
            False, DecisionReason.RATE_LIMITED, reply.remaining, retry_after, reset, index=index
        )

    def _remember(
        self, sent_ns: int, reply: ScriptReply, retry_after: int, reset: int, index: int
    ) -> None:
        call = self._call  # the decision's call, even for a check: see `begin`
        assert call is not None
        local = self._engine.local_denials
        # wait_us counts from the script's TIME, which is after sent_ns: counted from
        # sent_ns, the local denial ends no later than the store's. The whole call's wait
        # covers its first key (only this identity pays into it); the last key (the
        # network's, shared by every device behind it) gets its own wait.
        waits = [(call.keys[0], reply.wait_us)]
        if len(call.keys) > 1:
            waits.append((call.keys[-1], reply.last_wait_us))
        local.remember(
            waits,
            call.args,
            sent_ns,
            local.clock_ns(),
            retry_after * 1_000_000,
            reset * 1_000_000,
            index,
        )

    def failed(self, exc: StoreError) -> Decision:
        """The store failed: classify, count it against the breaker, apply the fail mode.

        A data error (a bucket value the script could not use) is no verdict on the
        store's health: its permit is handed back uncounted, so it never opens the
        breaker and never closes it either."""
        assert self.permit is not None
        if isinstance(exc, StoreDataError):
            self._engine.breaker.release(self.permit)
        else:
            self._engine.breaker.record_failure(self.permit)
        return self._unavailable(classify(exc))

    def _unavailable(self, cause: DecisionReason) -> Decision:
        policy = self.policy
        lease = None
        # The Redis failure behind the decision, whatever its reason says (an open breaker
        # made no call): what the store-failure metric and its alerts count.
        failure = None if cause is DecisionReason.CIRCUIT_OPEN else cause
        if policy.fail_mode is FailMode.OPEN and policy.fallback_limit is not None:
            verdict, lease = self._engine.inflight.acquire(
                policy.endpoint_id, policy.fallback_limit
            )
        elif policy.fail_mode is FailMode.CLOSED or policy.fallback_rate is None:
            reason = cause if cause is DecisionReason.CIRCUIT_OPEN else DecisionReason.FAIL_CLOSED
            retry_after = self._engine.breaker.retry_after_seconds()
            return self._finish(
                False, reason, 0, retry_after, retry_after or 0, store_failure=failure
            )
        else:
            verdict = self._engine.emergency.acquire(
                policy.endpoint_id, policy.fallback_rate, policy.cost
            )
        return self._finish(
            verdict.allowed,
            cause if verdict.allowed else DecisionReason.EMERGENCY_LOCAL_LIMIT,
            verdict.remaining,
            verdict.retry_after_seconds,
            verdict.reset_seconds,
            lease,
            store_failure=failure,
        )

    def _finish(
        self,
        allowed: bool,
        reason: DecisionReason,
        remaining: int,
        retry_after: int | None,
        reset: int,
        lease: Lease | None = None,
        *,
        local: bool = False,
        index: int = 0,
        store_failure: DecisionReason | None = None,
    ) -> Decision:
        policy = self.policy
        if policy.algorithm is Algorithm.CONCURRENCY and reason is DecisionReason.ALLOWED:
            lease = store_lease(policy.endpoint_id, self.call)
        # Positional (Decision's field order): a third cheaper than keywords.
        decision = build_decision(
            allowed or policy.shadow,
            reason,
            policy.endpoint_id,
            policy.limits[index][1] if index else policy.limit,
            remaining,
            None if allowed else retry_after,
            reset,
            policy,
            self.identity.hash,
            (time.perf_counter_ns() - self._started) // 1_000,
            policy.shadow,
            allowed,
            lease,
            local,
            index,
            store_failure,
        )
        if self._check and decision.allowed and reason in STORE_VERDICTS:
            return decision  # the handler runs: its consumption, if counted, is reported
        self._engine.hooks.decision(decision, self.request)
        return decision
