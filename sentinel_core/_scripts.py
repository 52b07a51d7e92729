"""The script protocol, free of I/O: which Lua script a policy runs, with which arguments.

Both Redis shells (sync and async) and the memory store speak it, so the rules of
"what to send and how to read the answer" live here once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib.resources import files

from . import _algorithms
from ._algorithms import ScriptReply, Write
from ._models import MICRO, Algorithm, Policy


@dataclass(frozen=True, slots=True)
class Script:
    algorithm: Algorithm
    source: str
    sha: str


@cache
def script(algorithm: Algorithm) -> Script:
    """The Lua source of ``algorithm`` and its SHA1 (what EVALSHA names it by)."""
    source = files("sentinel_core").joinpath("lua", f"{algorithm.value}.lua").read_text("utf-8")
    return Script(algorithm, source, hashlib.sha1(source.encode()).hexdigest())


def all_scripts() -> tuple[Script, ...]:
    return tuple(script(algorithm) for algorithm in Algorithm)


@dataclass(frozen=True, slots=True)
class ScriptCall:
    """One script execution: the whole of one decision's Redis traffic."""

    algorithm: Algorithm
    keys: tuple[str, ...]
    args: tuple[int, ...]

    @property
    def script(self) -> Script:
        return script(self.algorithm)


@cache
def script_args(policy: Policy) -> tuple[int, ...]:
    """The ARGV a policy passes to its script (see each script's header)."""
    if policy.algorithm is Algorithm.TOKEN_BUCKET:
        return (
            policy.burst * MICRO,
            policy.rate.count,
            policy.rate.period_seconds,
            policy.cost * MICRO,
        )
    return (policy.burst, policy.rate.period_seconds * MICRO, policy.cost)


def run_reference(
    call: ScriptCall, states: Sequence[str | None], now_us: int
) -> tuple[ScriptReply, list[Write] | None]:
    """What the script of ``call`` would answer given these states and this TIME."""
    if call.algorithm is Algorithm.TOKEN_BUCKET:
        capacity, count, period, cost = call.args
        return _algorithms.token_bucket(states, now_us, capacity, count, period, cost)
    limit, window, cost = call.args
    return _algorithms.sliding_window(states, now_us, limit, window, cost)
