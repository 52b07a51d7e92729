"""What an identity has used of a quota period or of its concurrency leases: a read of
the store that counts nothing, for billing exports (``sentinel usage``) and support."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from sentinel_core._models import Algorithm, Policy
from sentinel_core.decision._calendar import USAGE_LIMIT, local_time, locate
from sentinel_core.decision._leases import count_call
from sentinel_core.identity._keys import Identity
from sentinel_core.store._reference import ScriptReply
from sentinel_core.store._scripts import ScriptCall

if TYPE_CHECKING:
    from sentinel_core.decision._engine import DecisionEngine


@dataclass(frozen=True, slots=True)
class Usage:
    """``used`` of ``limit``: requests counted in the current period of a quota policy
    (which runs from ``period_start`` to ``period_end``, in the policy's time zone), or
    leases in flight now for a concurrency policy (no period)."""

    endpoint_id: str
    limit: int
    used: int
    period_start: datetime | None = None
    period_end: datetime | None = None

    @property
    def remaining(self) -> int:
        return max(0, self.limit - self.used)


def usage_call(engine: DecisionEngine, policy: Policy, identity: Identity) -> ScriptCall:
    """The read-only script call behind `usage`.

    Raises:
        ValueError: the policy is neither a quota nor a concurrency policy.
    """
    if policy.algorithm is Algorithm.QUOTA:
        return engine.calendars.usage_call(policy, identity)
    if policy.algorithm is Algorithm.CONCURRENCY:
        return count_call(policy, identity)
    raise ValueError(
        f"usage reads quota and concurrency policies; {policy.endpoint_id!r} is a "
        f"{policy.algorithm.value} policy"
    )


def usage_of(policy: Policy, call: ScriptCall, raw_reply: Any) -> Usage:
    """The `Usage` in a read's reply (whose ``remaining`` is `USAGE_LIMIT` less the count)."""
    reply = ScriptReply(*raw_reply)
    remaining = reply.remaining
    used = USAGE_LIMIT - remaining
    if policy.algorithm is Algorithm.CONCURRENCY:
        return Usage(policy.endpoint_id, policy.limit, used)
    period = locate(call.args[2:], reply.now_us)
    assert period is not None  # the script answers an error when TIME is outside the table
    zone = ZoneInfo(policy.timezone)
    start, end = (local_time(instant, zone) for instant in period)
    return Usage(policy.endpoint_id, policy.limit, used, start, end)
