"""Peek and reset (SPEC §3, §8): administrative reads and refills of one identity's
buckets, by script, never ``DEL`` or ``KEYS``.

A peek runs the policy's own script in mode peek: the same decision a request would get
at that instant, nothing written (no charge, no TTL change). A reset runs it in mode
reset: every bucket of the call written as full. Neither is a request: no breaker
bookkeeping, no metrics or logs; a store failure raises `StoreError`.
"""

from __future__ import annotations

from typing import Any

from sentinel_core._models import Algorithm, Decision, DecisionReason, Policy
from sentinel_core.identity._keys import Identity
from sentinel_core.store._reference import Mode, ScriptReply
from sentinel_core.store._scripts import ScriptCall, script_args

_BUCKETS = (Algorithm.TOKEN_BUCKET, Algorithm.SLIDING_WINDOW)


def admin_call(policy: Policy, identity: Identity, mode: Mode) -> ScriptCall:
    """The script call that peeks at or resets ``identity``'s buckets under ``policy``."""
    if policy.algorithm not in _BUCKETS:
        raise ValueError(
            f"peek and reset apply to token_bucket and sliding_window policies; "
            f"{policy.endpoint_id!r} is a {policy.algorithm.value} policy (see usage)"
        )
    keys = identity.bucket_keys(policy)
    return ScriptCall(policy.algorithm, keys, script_args(policy, mode, len(keys)))


def peeked(policy: Policy, identity: Identity, raw_reply: Any) -> Decision:
    """The `Decision` of a peek's reply, as `Attempt.succeeded` would build it."""
    reply = ScriptReply(*raw_reply)
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
