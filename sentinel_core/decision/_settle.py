"""Settlement (SPEC §2 ``settle``), free of I/O: the units checked, and the one script
call that turns what a request reserved into what it used.

A ``settle`` policy's request is admitted like any other, its ``cost`` (or the units a
`Sentinel.reserve` names) standing for the usage it cannot know yet: the reservation.
Once the usage is known, `settle_call` builds the ``lua/settle.lua`` call that refunds
what was reserved and not used, or charges the excess, in every bucket the reservation
charged; no call at all when the two are equal (an exact reservation costs no second call).
"""

from __future__ import annotations

from sentinel_core._models import (
    MICRO,
    Algorithm,
    Decision,
    DecisionReason,
    Policy,
    check_units,
)
from sentinel_core.decision._calendar import Calendars
from sentinel_core.identity._keys import Identity
from sentinel_core.store._reference_settle import Settled
from sentinel_core.store._scripts import ScriptCall, capacity_us, debt_horizon, key_limits

SETTLED = {
    Algorithm.TOKEN_BUCKET: Settled.TOKEN_BUCKET,
    Algorithm.SLIDING_WINDOW: Settled.SLIDING_WINDOW,
    Algorithm.QUOTA: Settled.QUOTA,
}
"""The algorithms a ``settle`` policy may use (SPEC §2), as ``lua/settle.lua`` names them."""


def reservation_units(policy: Policy, units: object) -> int:
    """What a `Sentinel.reserve` of ``units`` reserves on ``policy``: its ``cost`` when
    None, else ``units`` (an int from 1 to the policy's smallest limit).

    Raises:
        ValueError: ``policy`` is not a settle policy, or ``units`` is 0 or more than a
            limit holds (never admitted).
        TypeError: ``units`` is not an int.
    """
    if not policy.settle:
        raise ValueError(
            f"{policy.endpoint_id!r} is not a settle policy: set `settle = true` on it to "
            "reserve and settle (SPEC §2)"
        )
    if units is None:
        return policy.cost
    reserved = check_units(units)
    smallest = min(capacity for _, capacity in (*policy.limits, *policy.network_limits))
    if reserved < 1 or reserved > smallest:
        raise ValueError(
            f"a reservation is from 1 to the limit {smallest} of {policy.endpoint_id!r} "
            f"(more is never admitted), got {reserved}"
        )
    return reserved


def charged(decision: Decision) -> bool:
    """Whether the store charged ``decision``'s reservation: only then is there anything
    to settle (a denial wrote nothing; the decision table's admissions, while the store
    was unavailable, were never the store's)."""
    return decision.reason is DecisionReason.ALLOWED and decision.policy.settle


def settle_call(policy: Policy, identity: Identity, used: int, calendars: Calendars) -> ScriptCall:
    """The call that settles at ``used`` units a reservation of ``policy.cost`` units
    (the policy the decision was made with) by ``identity``, when the two differ (when
    they are equal there is nothing to send)."""
    reserved = policy.cost
    keys = identity.bucket_keys(policy)
    kind = SETTLED[policy.algorithm]
    if kind is Settled.QUOTA:
        assert policy.calendar is not None
        table = calendars.boundaries(policy.calendar, policy.timezone)
        ceiling = 2 * policy.burst
        return ScriptCall(
            policy.algorithm,
            keys,
            (int(kind), min(used - reserved, ceiling), ceiling, *table),
            settle=True,
        )
    args = [int(kind)]
    for rate, burst in key_limits(policy, len(keys)):
        period_us = rate.period_seconds * MICRO
        if kind is Settled.TOKEN_BUCKET:
            # the refill time of the units used less that of the units reserved, each
            # rounded up as an admission rounds it (never faster than the rate)
            reserved_us = -(-reserved * period_us // rate.count)
            used_us = -(-used * period_us // rate.count)
            bound = burst // reserved * reserved_us + capacity_us(rate, burst)
            args += (min(used_us - reserved_us, bound), bound, debt_horizon(rate, burst))
        else:
            args += (min(used - reserved, 2 * burst), period_us, 2 * burst)
    return ScriptCall(policy.algorithm, keys, tuple(args), settle=True)
