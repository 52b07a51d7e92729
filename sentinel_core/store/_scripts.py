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

from sentinel_core._models import MICRO, Algorithm, Policy, Rate
from sentinel_core.store import _reference
from sentinel_core.store._reference import ScriptReply, Write
from sentinel_core.store._reference_extra import run_extra


@dataclass(frozen=True, slots=True)
class Script:
    algorithm: Algorithm
    source: str
    sha: str


def _lua(name: str) -> str:
    return (files("sentinel_core.store") / "lua" / f"{name}.lua").read_text("utf-8")


@cache
def script(algorithm: Algorithm) -> Script:
    """The Lua source of ``algorithm`` (its file, after the shared ``integers.lua``) and
    its SHA1, which is what EVALSHA names it by."""
    source = _lua("integers") + _lua(algorithm.value)
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


def _parameters(algorithm: Algorithm, rate: Rate, burst: int, cost: int) -> tuple[int, ...]:
    if algorithm is Algorithm.TOKEN_BUCKET:
        return (burst * MICRO, rate.count, rate.period_seconds, cost * MICRO)
    return (burst, rate.period_seconds * MICRO, cost)


@cache
def script_args(policy: Policy) -> tuple[int, ...]:
    """The ARGV a policy passes to its script (see each script's header): the device's
    (or tenant's) parameter set, then the network bucket's for an anonymous policy."""
    args = _parameters(policy.algorithm, policy.rate, policy.burst, policy.cost)
    if policy.network_rate is not None and policy.network_burst is not None:
        args += _parameters(
            policy.algorithm, policy.network_rate, policy.network_burst, policy.cost
        )
    return args


def run_reference(
    call: ScriptCall, states: Sequence[str | None], now_us: int
) -> tuple[ScriptReply, list[Write] | None]:
    """What the script of ``call`` would answer given these states and this TIME.

    Like the scripts, it reads one parameter set per key when ``call.args`` holds one
    for every key, and otherwise applies the first set to every key.
    """
    if call.algorithm in (Algorithm.CONCURRENCY, Algorithm.QUOTA):
        return run_extra(call.algorithm, call.keys, call.args, states, now_us)
    width = 4 if call.algorithm is Algorithm.TOKEN_BUCKET else 3
    sets = [tuple(call.args[i : i + width]) for i in range(0, len(call.args), width)]
    per_key = len(sets) >= len(states)
    chosen = [sets[i] if per_key else sets[0] for i in range(len(states))]
    if call.algorithm is Algorithm.TOKEN_BUCKET:
        buckets = [(capacity, count, period, cost) for capacity, count, period, cost in chosen]
        return _reference.token_bucket(states, now_us, buckets)
    windows = [(limit, window, cost) for limit, window, cost in chosen]
    return _reference.sliding_window(states, now_us, windows)
