"""The pure-Python twin of ``lua/settle.lua``, with the same integer arithmetic (see the
script's header for the contract): the memory store runs it, the parity tests hold the
script to it.

Like `_reference`, it takes the keys' states (``None`` for an absent key, `WRONG_TYPE`
for a key of another type), the clock in microseconds and the call's ARGV, and returns
the script's reply (its ``TIME``) and its writes.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from redis.exceptions import ResponseError

from sentinel_core.store._reference import (
    _TAT_STATE,
    WRONG_TYPE,
    State,
    Write,
    _window_counts,
    window_state,
)


class Settled(enum.IntEnum):
    """ARGV[1] of ``lua/settle.lua``: which admission script's state it settles."""

    TOKEN_BUCKET = 1
    SLIDING_WINDOW = 2
    QUOTA = 3


def settle(states: Sequence[State], now_us: int, args: Sequence[int]) -> tuple[int, list[Write]]:
    """The reference of ``lua/settle.lua``: its reply (TIME) and its writes.

    Raises:
        ResponseError: a quota's TIME is outside the table, as the script's error reply.
    """
    kind, p = Settled(args[0]), args[1:]
    if kind is Settled.QUOTA:
        return now_us, _quota(states[0], now_us, p[0], p[1], p[2:])
    writes: list[Write] = []
    for i, state in enumerate(states):
        delta, second, third = p[3 * i : 3 * i + 3]
        if kind is Settled.TOKEN_BUCKET:
            write = _token_bucket(i, state, now_us, delta, second, third)
        else:
            write = _sliding_window(i, state, now_us, delta, second, third)
        if write is not None:
            writes.append(write)
    return now_us, writes


def _moved(old: int, delta: int, most: int) -> int:
    """``old + delta``, an excess stopping at ``most`` (never below ``old``), a refund at 0."""
    if delta > 0:
        return max(old, min(old + delta, most))
    return max(0, old + delta)


def _token_bucket(
    index: int, state: State, now_us: int, delta: int, bound: int, horizon: int
) -> Write | None:
    tat = now_us
    if isinstance(state, str) and _TAT_STATE.fullmatch(state):
        stored = int(state)
        if now_us < stored <= now_us + horizon:
            tat = stored
    ahead = _moved(tat - now_us, delta, bound)
    if ahead == tat - now_us:
        return None
    if ahead > 0:
        return Write(index, str(now_us + ahead), -(-ahead // 1000))
    return Write(index, str(now_us), 1)  # refunded to full


def _sliding_window(
    index: int, state: State, now_us: int, delta: int, window: int, ceiling: int
) -> Write | None:
    current_index, elapsed = divmod(now_us, window)
    current, previous, stored_index = _window_counts(state, current_index, ceiling)
    ahead = 0
    if stored_index > current_index:  # a window ahead of TIME: the one settled
        current_index, ahead, elapsed = stored_index, stored_index * window - now_us, 0
    most = (ceiling * window - previous * (window - elapsed)) // window
    new = _moved(current, delta, most)
    if new == current:
        return None
    ttl_ms = -(-(ahead + 2 * window - elapsed) // 1000)
    return Write(index, window_state(new, previous, current_index), ttl_ms)


def _quota(
    state: State, now_us: int, delta: int, ceiling: int, boundaries: Sequence[int]
) -> list[Write]:
    at = next(
        (j for j in range(len(boundaries) - 1) if boundaries[j] <= now_us < boundaries[j + 1]),
        None,
    )
    if at is None:
        raise ResponseError(f"sentinel quota: TIME {now_us} is outside the period table")
    if state is WRONG_TYPE:  # quota.lua reads with redis.call: the error is the reply
        raise ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value")
    start, stop = boundaries[at], boundaries[at + 1]
    count = 0
    parts = state.split(":") if isinstance(state, str) else []
    digits = len(parts) == 2 and all(part.isascii() and part.isdigit() for part in parts)
    if digits and int(parts[1]) >= start:
        count, stored = int(parts[0]), int(parts[1])
        for j in range(at + 1, len(boundaries) - 1):
            if boundaries[j] == stored:
                start, stop = stored, boundaries[j + 1]
    new = _moved(count, delta, ceiling)
    if new == count:
        return []
    return [Write(0, f"{new}:{start}", -(-(stop - now_us) // 1000))]
