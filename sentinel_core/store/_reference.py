"""Pure-Python twins of the Lua scripts, with the same integer arithmetic, and the one
definition of the scripts' replies (`ScriptReply`, and the one-key calls' integers:
a token bucket's `OneKeyReply`, a sliding window's `WindowAdmission`).

The twins serve two purposes: the embedded ``memory://`` store runs them, and the parity
tests feed them the ``TIME`` and prior state a script saw and compare the results.
Each function takes the buckets' current states (``None`` for an absent key, `WRONG_TYPE`
for a key holding another type), the clock in microseconds and the mode, and returns
the reply the script would return plus the writes it would make (``None`` when it
writes nothing: a denial, a peek).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from sentinel_core._models import MICRO, Algorithm

# Lua's '^%d+$' and '^([1-9]%d*)(%d)(%d)$': ASCII digits only, no trailing newline
# (use with fullmatch).
_TAT_STATE = re.compile(r"[0-9]+")
_WINDOW_STATE = re.compile(r"([1-9][0-9]*)([0-9])([0-9])")


class WrongType:
    """A key holding a list, hash, ...: GET fails with WRONGTYPE (``pcall`` in Lua)."""

    def __repr__(self) -> str:
        return "WRONG_TYPE"


WRONG_TYPE = WrongType()
State = str | WrongType | None


class Mode(enum.IntEnum):
    """ARGV[1] of every script."""

    DECIDE = 0
    PEEK = 1
    """Decide, write nothing: the decision a request would get."""
    RESET = 2
    """Write every bucket as full (or empty windows), whatever it held."""


OneKeyReply = int
"""What a token-bucket call of one key answers when its parameter set leaves out cost
and burst (``lua/token_bucket.lua``): admitted, the microseconds until the bucket is full
(at least 1); denied, minus the microseconds until the same cost can be admitted again
(the bucket is full that plus tau later). Redis writes an integer for less than a table,
and the caller, which knows cost and burst, computes the tokens left (`tokens_left`)."""


WindowAdmission = int
"""What a sliding-window call of one key answers when it admits, its parameter set
leaving out the ceiling (``lua/sliding_window.lua``): ``ceil(us until the window ends /
1000) * (limit + 1) + requests left``, all an admission reports (`window_admission`);
a denial answers the array. Redis writes an integer for less than a table."""


def window_admission(raw: WindowAdmission, limit: int) -> tuple[int, int]:
    """(requests left, us until the window ends rounded up to a whole ms) of a
    `WindowAdmission`: whole seconds of the latter are those of the exact time."""
    reset_ms, left = divmod(raw, limit + 1)
    return left, reset_ms * 1_000


def one_key_admission(
    raw: OneKeyReply | WindowAdmission,
    algorithm: Algorithm,
    args: Sequence[int],
    cost: int,
    burst: int,
) -> tuple[int, int]:
    """(tokens or requests left, us until full or the window's end) of an admission
    answered by one integer (positive) to an ``algorithm`` call with ARGV ``args``."""
    if algorithm is Algorithm.SLIDING_WINDOW:
        return window_admission(raw, args[1])
    return tokens_left(raw, args[1], cost, burst), raw


def tokens_left(debt_us: int, inc: int, cost: int, burst: int) -> int:
    """The tokens left in a token bucket full in ``debt_us``: burst - ceil(debt_us / inc)
    * cost, at least 0 (a settle policy's bucket may be in debt)."""
    return max(0, burst + debt_us // -inc * cost)


def whole_seconds(us: int) -> int:
    """Microseconds rounded up to whole seconds: never before the instant they count to."""
    return -(-us // MICRO)


class ScriptReply(NamedTuple):
    """What a script returns, field for field in the order the Lua scripts return it.

    ``ScriptReply(*raw)`` reads a raw array reply (`read` any reply, the one-key
    integers too); this field order is the one definition of the layout. ``binding``
    (0-based here, 1-based in Lua's reply and read as is, so subtract 1) names the bucket whose
    ``remaining`` and ``reset_us`` are reported: the one with the fewest requests left,
    ties going to the longest until it is full.
    """

    allowed: int
    """1 admitted (and charged, unless peeking), 0 denied (nothing written)."""
    now_us: int
    """The script's ``TIME``, microseconds since the epoch (0 when read from a
    `OneKeyReply`, which leaves it out)."""
    remaining: int
    """Tokens (token bucket) or requests (sliding window) left in the binding bucket."""
    reset_us: int
    """Microseconds from ``now_us`` until the binding bucket is full again / its window ends."""
    wait_us: int
    """Denied: microseconds from ``now_us`` until every bucket admits the same cost again
    (the earliest instant a retry can pass). Allowed: 0."""
    binding: int
    """1-based index of the binding bucket among the call's keys."""
    last_wait_us: int = 0
    """Denied: microseconds from ``now_us`` until the call's last bucket alone admits the
    same cost again (the network's, in an anonymous AND), 0 if it admits now; what a
    process may remember for every call that pays into that bucket. Allowed: 0."""

    @classmethod
    def from_raw(cls, raw: Sequence[int]) -> ScriptReply:
        """A raw reply whose numbers may come as strings or floats (tests, tools)."""
        return cls(*(int(value) for value in raw))

    @classmethod
    def read(
        cls, raw: Any, algorithm: Algorithm, args: Sequence[int], cost: int, burst: int
    ) -> ScriptReply:
        """The reply ``raw`` to an ``algorithm`` call with ARGV ``args`` of a policy of
        ``cost`` and ``burst``: a `OneKeyReply` or a `WindowAdmission` (``now_us`` 0:
        they leave TIME out; a window's ``reset_us`` is rounded up to a whole ms), or
        the array."""
        if not isinstance(raw, int):
            return cls(*raw)
        if raw > 0:
            left, reset_us = one_key_admission(raw, algorithm, args, cost, burst)
            return cls(1, 0, left, reset_us, 0, 1)
        inc, tau = args[1], args[2]  # a token bucket's denial (a window's is an array)
        wait = -raw
        return cls(0, 0, tokens_left(wait + tau, inc, cost, burst), wait + tau, wait, 1, wait)

    def one_key(self) -> OneKeyReply:
        """This reply as a `OneKeyReply` (what `read` reads back, TIME and the tokens
        left aside)."""
        return self.reset_us if self.allowed else -self.wait_us

    def window_admission(self, limit: int) -> WindowAdmission:
        """This admission, of a sliding window of ``limit``, as a `WindowAdmission`."""
        return -(-self.reset_us // 1_000) * (limit + 1) + self.remaining

    @property
    def retry_after_seconds(self) -> int:
        """Retry-After: whole seconds, at least 1, never before ``wait_us``; 0 when allowed."""
        return max(1, whole_seconds(self.wait_us)) if not self.allowed else 0

    @property
    def reset_seconds(self) -> int:
        """RateLimit's ``t``: whole seconds until the binding bucket is full again or its
        window ends; on a denial never less than `retry_after_seconds` (SPEC §4: a
        client that waits ``t`` is not denied again for the same reason). A full sliding
        window ends before it admits again, while the previous window still weighs; a
        layered call waits for its slowest limit, not only the binding one."""
        reset = whole_seconds(self.reset_us)
        return reset if self.allowed else max(reset, self.retry_after_seconds)


@dataclass(frozen=True, slots=True)
class Write:
    """``SET index value PX ttl_ms``: the write a script makes to its ``index``-th key."""

    index: int
    value: str
    ttl_ms: int


TokenBucketParams = tuple[int, ...]
"""(inc: us one request's cost takes to refill, tau: tolerance in us, cost, burst), and
for a settle policy the horizon: how far ahead of the clock a TAT is read"""
SlidingWindowParams = tuple[int, ...]
"""(limit per window, window length in microseconds, cost), and for a settle policy the
ceiling: the highest count read"""


def _binding(lefts: Sequence[int], resets: Sequence[int]) -> int:
    """The first bucket with the fewest left, ties going to the longest reset (1-based)."""
    best = 0
    for i in range(1, len(lefts)):
        if lefts[i] < lefts[best] or (lefts[i] == lefts[best] and resets[i] > resets[best]):
            best = i
    return best + 1


def _finish(
    mode: Mode,
    allowed: bool,
    now_us: int,
    lefts: list[int],
    resets: list[int],
    wait_us: int,
    writes: list[Write],
    last_wait_us: int = 0,
) -> tuple[ScriptReply, list[Write] | None]:
    binding = _binding(lefts, resets)
    left, reset = lefts[binding - 1], resets[binding - 1]
    if mode is Mode.RESET or allowed:
        reply = ScriptReply(1, now_us, left, reset, 0, binding)
        return reply, None if mode is Mode.PEEK else writes
    return ScriptReply(0, now_us, left, reset, wait_us, binding, last_wait_us), None


def token_bucket(
    states: Sequence[State],
    now_us: int,
    params: Sequence[TokenBucketParams],
    mode: Mode = Mode.DECIDE,
) -> tuple[ScriptReply | OneKeyReply, list[Write] | None]:
    """The reference of ``lua/token_bucket.lua`` (see its header for the contract);
    ``params[i]`` are the parameters of the bucket whose state is ``states[i]``: a
    `OneKeyReply` when they leave out cost and burst (one key), else a `ScriptReply`."""
    allowed = True
    wait_us = 0
    lefts: list[int] = []
    resets: list[int] = []
    writes: list[Write] = []
    reports_left = len(params[0]) > 3
    for index, (state, bucket) in enumerate(zip(states, params, strict=True)):
        inc, tau = bucket[:2]
        horizon = bucket[-1] if len(bucket) % 2 else tau + inc
        tat = now_us
        if mode is not Mode.RESET and isinstance(state, str) and _TAT_STATE.fullmatch(state):
            stored = int(state)
            if now_us < stored <= now_us + horizon:
                tat = stored
        debt = tat - now_us
        last_wait_us = max(0, debt - tau)
        if debt > tau:
            allowed = False
            wait_us = max(wait_us, debt - tau)
        else:
            debt += inc
            if mode is Mode.RESET:
                writes.append(Write(index, str(now_us), 1))
            else:
                writes.append(Write(index, str(tat + inc), -(-debt // 1000)))
        resets.append(debt)
        lefts.append(tokens_left(debt, inc, *bucket[2:4]) if reports_left else 0)
    reply, written = _finish(mode, allowed, now_us, lefts, resets, wait_us, writes, last_wait_us)
    return (reply if reports_left else reply.one_key()), written


def _window_counts(state: State, index: int, ceiling: int) -> tuple[int, int, int]:
    """(current, previous, window index) of a sliding-window state read in ``index``:
    ``"<current + 1><previous><digits of previous - 1><index mod 10>"``, each count at
    most ``ceiling``."""
    match = _WINDOW_STATE.fullmatch(state) if isinstance(state, str) else None
    if match is None or len(match[1]) <= int(match[2]) + 1:
        return 0, 0, index
    counts, width = match[1], int(match[2]) + 1
    stored_current, stored_previous = int(counts[:-width]) - 1, int(counts[-width:])
    current = previous = 0
    distance = (index - int(match[3])) % 10
    if distance == 0:
        current, previous = stored_current, stored_previous
    elif distance == 1:
        previous = stored_current
    elif distance == 9:  # TIME went back across a window edge
        current, previous, index = stored_current, stored_previous, index + 1
    return min(current, ceiling), min(previous, ceiling), index


def window_state(current: int, previous: int, index: int) -> str:
    """The state ``lua/sliding_window.lua`` writes for these counts in window ``index``."""
    return f"{current + 1}{previous}{len(str(previous)) - 1}{index % 10}"


def sliding_window(
    states: Sequence[State],
    now_us: int,
    params: Sequence[SlidingWindowParams],
    mode: Mode = Mode.DECIDE,
) -> tuple[ScriptReply | WindowAdmission, list[Write] | None]:
    """The reference of ``lua/sliding_window.lua`` (see its header for the contract);
    ``params[i]`` are the parameters of the bucket whose state is ``states[i]``: a
    `WindowAdmission` when one key without the ceiling admits, else a `ScriptReply`."""
    allowed = True
    wait_us = 0
    lefts: list[int] = []
    resets: list[int] = []
    writes: list[Write] = []
    for i, (state, bucket) in enumerate(zip(states, params, strict=True)):
        limit, window, cost = bucket[:3]
        ceiling = bucket[3] if len(bucket) > 3 else limit
        index, elapsed = divmod(now_us, window)
        current, previous, ahead = 0, 0, 0
        if mode is not Mode.RESET:
            current, previous, stored_index = _window_counts(state, index, ceiling)
            if stored_index > index:  # a window ahead of TIME: wait for it
                index, ahead, elapsed = stored_index, stored_index * window - now_us, 0
        room = limit * window - previous * (window - elapsed) - current * window
        ttl_ms = -(-(ahead + 2 * window - elapsed) // 1000)
        last_wait_us = 0
        if room >= cost * window:
            lefts.append(room // window - cost)
            value = (
                window_state(0, 0, index)
                if mode is Mode.RESET
                else window_state(current + cost, previous, index)
            )
            writes.append(Write(i, value, ttl_ms))
        else:
            allowed = False
            lefts.append(max(0, room) // window)
            if current + cost <= limit:
                budget = (limit - current - cost) * window
                delay = window - budget // previous - elapsed
            else:
                delay = 2 * window - elapsed - (limit - cost) * window // current
            last_wait_us = ahead + delay
            wait_us = max(wait_us, last_wait_us)
        resets.append(ahead + window - elapsed)
    reply, written = _finish(mode, allowed, now_us, lefts, resets, wait_us, writes, last_wait_us)
    if allowed and mode is not Mode.RESET and len(params) == 1 and len(params[0]) == 3:
        return reply.window_admission(params[0][0]), written
    return reply, written
