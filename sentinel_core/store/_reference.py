"""Pure-Python twins of the Lua scripts, with the same integer arithmetic.

They serve two purposes: the embedded ``memory://`` store runs them, and the parity
tests feed them the ``TIME`` and prior state a script saw and compare the results.
Each function takes the buckets' current states (``None`` for an absent key) and the
clock in microseconds, and returns the reply the script would return plus the writes
it would make (``None`` when it denies: a denial never writes).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from sentinel_core._models import MICRO

# Lua's '^(%d+):(%d+)$': ASCII digits only, no trailing newline (use with fullmatch).
_TOKEN_STATE = re.compile(r"([0-9]+):([0-9]+)")
_WINDOW_STATE = re.compile(r"([0-9]+):([0-9]+):([0-9]+)")


@dataclass(frozen=True, slots=True)
class ScriptReply:
    """What a script returns, in the order the Lua scripts return it."""

    allowed: bool
    time_seconds: int
    time_microseconds: int
    remaining: int
    retry_after_seconds: int
    reset_seconds: int

    @classmethod
    def from_raw(cls, raw: Sequence[int]) -> ScriptReply:
        allowed, seconds, microseconds, remaining, retry_after, reset = (int(v) for v in raw)
        return cls(allowed == 1, seconds, microseconds, remaining, retry_after, reset)

    @property
    def now_us(self) -> int:
        return self.time_seconds * MICRO + self.time_microseconds


@dataclass(frozen=True, slots=True)
class Write:
    """``SET index value PX ttl_ms``: the write a script makes to its ``index``-th key."""

    index: int
    value: str
    ttl_ms: int


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _reply(allowed: bool, now_us: int, remaining: int, retry_us: int, reset_s: int) -> ScriptReply:
    retry_after = max(1, _ceil_div(retry_us, MICRO)) if not allowed else 0
    return ScriptReply(allowed, now_us // MICRO, now_us % MICRO, remaining, retry_after, reset_s)


TokenBucketParams = tuple[int, int, int, int]
"""(capacity in micro-tokens, refill count, refill period in seconds, cost in micro-tokens)"""
SlidingWindowParams = tuple[int, int, int]
"""(limit per window, window length in microseconds, cost)"""


def token_bucket(
    states: Sequence[str | None], now_us: int, params: Sequence[TokenBucketParams]
) -> tuple[ScriptReply, list[Write] | None]:
    """The reference of ``lua/token_bucket.lua`` (see its header for the contract);
    ``params[i]`` are the parameters of the bucket whose state is ``states[i]``."""
    allowed = True
    retry_us = 0
    after: list[int] = []
    ahead: list[int] = []  # per bucket: how far its refill time is ahead of TIME
    for state, (capacity_micro, count, period_seconds, cost_micro) in zip(
        states, params, strict=True
    ):
        fill_us = _ceil_div(capacity_micro * period_seconds, count)
        tokens = capacity_micro
        ahead.append(0)
        match = _TOKEN_STATE.fullmatch(state) if state is not None else None
        if match is not None:
            last = int(match.group(2))
            ahead[-1] = max(0, last - now_us)
            elapsed = min(max(0, now_us - last), fill_us)
            tokens = min(capacity_micro, int(match.group(1)) + elapsed * count // period_seconds)
        if tokens >= cost_micro:
            after.append(tokens - cost_micro)
        else:
            allowed = False
            after.append(tokens)
            wait = ahead[-1] + _ceil_div((cost_micro - tokens) * period_seconds, count)
            retry_us = max(retry_us, wait)
    refill_us = [
        wait + _ceil_div((capacity - left) * period, count)
        for left, wait, (capacity, count, period, _) in zip(after, ahead, params, strict=True)
    ]
    reply = _reply(allowed, now_us, min(after) // MICRO, retry_us, _ceil_div(max(refill_us), MICRO))
    if not allowed:
        return reply, None
    writes = [
        Write(i, f"{left}:{now_us + wait}", max(1, _ceil_div(refill, 1000)))
        for i, (left, wait, refill) in enumerate(zip(after, ahead, refill_us, strict=True))
    ]
    return reply, writes


def sliding_window(
    states: Sequence[str | None], now_us: int, params: Sequence[SlidingWindowParams]
) -> tuple[ScriptReply, list[Write] | None]:
    """The reference of ``lua/sliding_window.lua`` (see its header for the contract);
    ``params[i]`` are the parameters of the bucket whose state is ``states[i]``."""
    allowed = True
    remaining: list[int] = []
    retry_us = 0
    reset_us = 0
    buckets: list[tuple[int, int, int, int]] = []
    for state, (limit, window_us, cost) in zip(states, params, strict=True):
        start = now_us // window_us * window_us
        current = previous = 0
        match = _WINDOW_STATE.fullmatch(state) if state is not None else None
        if match is not None:
            stored_current, stored_previous, stored_start = (int(g) for g in match.groups())
            if stored_start == start:
                current, previous = stored_current, stored_previous
            elif stored_start == start - window_us:
                previous = stored_current
            elif stored_start > start:
                start, current, previous = stored_start, stored_current, stored_previous
        ahead = max(0, start - now_us)  # a window that starts ahead of TIME (TIME went back)
        elapsed = max(0, now_us - start)
        weighted_previous = previous * (window_us - elapsed)
        if weighted_previous + (current + cost) * window_us <= limit * window_us:
            current += cost
        else:
            allowed = False
            if current + cost <= limit:
                budget = (limit - current - cost) * window_us
                wait = window_us - budget // previous - elapsed
            else:
                wait = 2 * window_us - elapsed - (limit - cost) * window_us // current
            retry_us = max(retry_us, ahead + wait)
        buckets.append((current, previous, start, window_us))
        left = max(0, limit * window_us - weighted_previous - current * window_us) // window_us
        remaining.append(left)
        reset_us = max(reset_us, ahead + window_us - elapsed)
    reply = _reply(allowed, now_us, min(remaining), retry_us, max(1, _ceil_div(reset_us, MICRO)))
    if not allowed:
        return reply, None
    writes = [
        Write(i, f"{c}:{p}:{s}", max(1, _ceil_div(s + 2 * w - now_us, 1000)))
        for i, (c, p, s, w) in enumerate(buckets)
    ]
    return reply, writes
