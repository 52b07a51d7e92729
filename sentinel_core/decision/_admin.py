"""Peek and reset (SPEC §3, §8): administrative reads and refills of one identity's
buckets, by script, never ``DEL`` or ``KEYS``.

A peek runs the policy's own script in mode peek: the same decision a request would get
at that instant, nothing written (no charge, no TTL change). A reset runs it in mode
reset: every bucket of the call written as full; a quota's reset writes the current
period's count as 0. Neither is a request: no breaker bookkeeping, no metrics or logs; a
store failure raises `StoreError`.

An anonymous policy's buckets belong to one device AND one network: a tenant id names
neither, so it is refused rather than peeking at (or writing) a bucket no request
would ever use.
"""

from __future__ import annotations

from typing import Any

from sentinel_core._models import Algorithm, Decision, DecisionReason, IdentityKind, Policy
from sentinel_core.decision._calendar import Calendars
from sentinel_core.identity._keys import AnonymousIdentity, Identity
from sentinel_core.store._reference import Mode, ScriptReply
from sentinel_core.store._scripts import ScriptCall, script_args

_BUCKETS = (Algorithm.TOKEN_BUCKET, Algorithm.SLIDING_WINDOW)


def admin_call(policy: Policy, identity: Identity, mode: Mode, calendars: Calendars) -> ScriptCall:
    """The script call that peeks at or resets ``identity``'s buckets under ``policy``.

    Raises:
        ValueError: a policy peek or reset does not apply to (concurrency; quota for a
            peek), or an anonymous policy given anything but an `AnonymousIdentity`.
    """
    if policy.identity is IdentityKind.ANONYMOUS and not isinstance(identity, AnonymousIdentity):
        raise ValueError(
            f"{policy.endpoint_id!r} is an anonymous policy: its buckets belong to one "
            "device AND one network, so name both (Sentinel.anonymous_identity(address, "
            "device)), not a tenant"
        )
    if policy.algorithm is Algorithm.QUOTA and mode is Mode.RESET:
        return calendars.reset_call(policy, identity)
    if policy.algorithm not in _BUCKETS:
        applies = "token_bucket and sliding_window policies"
        raise ValueError(
            f"{'reset applies to quota, ' if mode is Mode.RESET else 'peek applies to '}"
            f"{applies}; {policy.endpoint_id!r} is a {policy.algorithm.value} policy "
            "(see usage)"
        )
    keys = identity.bucket_keys(policy)
    return ScriptCall(policy.algorithm, keys, script_args(policy, mode, len(keys)))


def peeked(policy: Policy, identity: Identity, call: ScriptCall, raw_reply: Any) -> Decision:
    """The `Decision` of the reply to the peek ``call``, as `Attempt.succeeded` would
    build it."""
    reply = ScriptReply.read(raw_reply, call.algorithm, call.args, policy.cost, policy.burst)
    index = (reply.binding - 1) % len(policy.limits) if policy.layers else 0
    allowed = bool(reply.allowed)
    return Decision(
        allowed or policy.shadow,
        DecisionReason.ALLOWED if allowed else DecisionReason.RATE_LIMITED,
        policy.endpoint_id,
        policy.limits[index][1],
        reply.remaining,
        None if allowed else reply.retry_after_seconds,
        reply.reset_seconds,
        policy,
        identity.hash,
        shadow=policy.shadow,
        would_allow=allowed,
        limit_index=index,
    )
