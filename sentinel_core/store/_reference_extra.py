"""Pure-Python twins of ``lua/concurrency.lua`` and ``lua/quota.lua``, with the same
integer arithmetic (see each script's header for the contract).

Like `_reference`, they take the keys' states (``None`` for an absent key) and the clock
in microseconds and return the script's reply and its writes. The memory store keeps a
concurrency bucket's sorted set as one string, ``"name=expiry,name=expiry"``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from redis.exceptions import ResponseError

from sentinel_core._models import Algorithm
from sentinel_core.store._reference import ScriptReply, Write

_QUOTA_STATE = re.compile(r"([0-9]+):([0-9]+)")
TAKE, GIVE_BACK, COUNT = 1, 0, 2
"""The actions of the concurrency script (its ARGV[3])."""
QUOTA_RESET = -1
"""The cost that makes the quota script reset the period's count (an administrative
action, `Sentinel.reset`)."""


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _reply(allowed: bool, now_us: int, remaining: int, reset_us: int, wait_us: int) -> ScriptReply:
    return ScriptReply(int(allowed), now_us, remaining, reset_us, wait_us, 1)


def run_extra(
    algorithm: Algorithm,
    keys: Sequence[str],
    args: Sequence[int],
    states: Sequence[str | None],
    now_us: int,
) -> tuple[ScriptReply, list[Write] | None]:
    """The reply and writes of the concurrency or quota script for one call."""
    if algorithm is Algorithm.CONCURRENCY:
        limit, lease_us, action = args
        return concurrency(states[0], now_us, limit, lease_us, action, keys[1].rsplit(":", 1)[-1])
    limit, cost, *boundaries = args
    return quota(states[0], now_us, limit, cost, boundaries)


def concurrency(
    state: str | None, now_us: int, limit: int, lease_us: int, action: int, name: str
) -> tuple[ScriptReply, list[Write] | None]:
    """The reference of ``lua/concurrency.lua``."""
    leases = dict(_parse_leases(state))
    if action == GIVE_BACK:
        leases.pop(name, None)
    live = sorted(expiry for expiry in leases.values() if expiry > now_us)
    if action != TAKE:
        writes = None
        if action == GIVE_BACK and state:
            writes = [Write(0, _format_leases(leases), _ttl_ms(leases, now_us))]
        return _reply(True, now_us, max(0, limit - len(live)), 0, 0), writes
    if len(live) >= limit:
        return _reply(False, now_us, 0, live[0] - now_us, 1), None
    leases = {lease: expiry for lease, expiry in leases.items() if expiry > now_us}
    leases[name] = now_us + lease_us
    write = Write(0, _format_leases(leases), _ttl_ms(leases, now_us))
    return _reply(True, now_us, limit - len(live) - 1, 0, 0), [write]


def _parse_leases(state: str | None) -> list[tuple[str, int]]:
    if not state:
        return []
    return [(name, int(expiry)) for name, expiry in (item.split("=") for item in state.split(","))]


def _format_leases(leases: dict[str, int]) -> str:
    return ",".join(f"{name}={expiry}" for name, expiry in leases.items())


def _ttl_ms(leases: dict[str, int], now_us: int) -> int:
    """The sorted set's TTL: until its longest lease expires (Redis deletes an empty set)."""
    return max(1, _ceil_div(max(leases.values(), default=now_us) - now_us, 1000))


def quota(
    state: str | None, now_us: int, limit: int, cost: int, boundaries: Sequence[int]
) -> tuple[ScriptReply, list[Write] | None]:
    """The reference of ``lua/quota.lua``.

    Raises:
        ResponseError: TIME is outside the table, as the script's error reply.
    """
    at = next(
        (j for j in range(len(boundaries) - 1) if boundaries[j] <= now_us < boundaries[j + 1]),
        None,
    )
    if at is None:
        raise ResponseError(f"sentinel quota: TIME {now_us} is outside the period table")
    start, stop = boundaries[at], boundaries[at + 1]
    if cost < 0:
        return _reply(True, now_us, limit, stop - now_us, 0), [
            Write(0, f"0:{start}", _ceil_div(stop - now_us, 1000))
        ]
    count = 0
    match = _QUOTA_STATE.fullmatch(state) if state is not None else None
    if match is not None and int(match.group(2)) >= start:
        count, stored = int(match.group(1)), int(match.group(2))
        for j in range(at + 1, len(boundaries) - 1):
            if boundaries[j] == stored:
                start, stop = stored, boundaries[j + 1]
    allowed = count + cost <= limit
    if allowed:
        count += cost
    reset_us = stop - now_us
    reply = _reply(allowed, now_us, max(0, limit - count), reset_us, 0 if allowed else reset_us)
    if not allowed or cost == 0:
        return reply, None
    return reply, [Write(0, f"{count}:{start}", _ceil_div(stop - now_us, 1000))]
