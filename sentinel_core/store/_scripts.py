"""The script protocol, free of I/O: which Lua script a policy runs, with which arguments.

Both Redis shells (sync and async) and the memory store speak it, so the rules of
"what to send and how to read the answer" live here once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib.resources import files

from sentinel_core._models import MICRO, Algorithm, Policy, Rate
from sentinel_core.store import _reference
from sentinel_core.store._reference import Mode, ScriptReply, State, Write
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
    """ARGV: the `Mode`, then one parameter set per key (see the scripts' headers)."""

    @property
    def script(self) -> Script:
        return script(self.algorithm)


def bucket_parameters(algorithm: Algorithm, rate: Rate, burst: int, cost: int) -> tuple[int, ...]:
    """One bucket's parameter set in ARGV (see the scripts' headers)."""
    period_us = rate.period_seconds * MICRO
    if algorithm is Algorithm.TOKEN_BUCKET:
        # GCRA: a request's cost refills in inc us (rounded up: never faster than the
        # rate), and floor(burst / cost) requests fit in a burst.
        inc = -(-cost * period_us // rate.count)
        return (inc, (burst // cost - 1) * inc, cost, burst)
    return (burst, period_us, cost)


@lru_cache(maxsize=1_024)  # bounded: a plugin may mint a policy per request
def script_args(policy: Policy, mode: Mode = Mode.DECIDE, keys: int = 1) -> tuple[int, ...]:
    """The ARGV of a call of ``policy`` over ``keys`` buckets (see each script's header):
    the mode, then one set per limit of a layered policy, the device's sets then the
    network's for the anonymous AND (a new device's: the network's new devices' sets,
    its own, then the network's), or else the policy's own set for every key."""
    limits = policy.limits
    groups, rest = divmod(keys, len(limits))
    if policy.network_limits and not rest and groups in (2, 3):
        limits = limits * (groups - 1) + policy.network_limits
    elif not (policy.layers and keys == len(limits)):
        own = bucket_parameters(policy.algorithm, policy.rate, policy.burst, policy.cost)
        return (int(mode), *own * keys)
    sets = (bucket_parameters(policy.algorithm, rate, burst, policy.cost) for rate, burst in limits)
    return (int(mode), *(arg for parameters in sets for arg in parameters))


def run_reference(
    call: ScriptCall, states: Sequence[State], now_us: int
) -> tuple[ScriptReply, list[Write] | None]:
    """What the script of ``call`` would answer given these states and this TIME."""
    if call.algorithm in (Algorithm.CONCURRENCY, Algorithm.QUOTA):
        strings = [state if isinstance(state, str) else None for state in states]
        return run_extra(call.algorithm, call.keys, call.args, strings, now_us)
    mode, p = Mode(call.args[0]), call.args[1:]
    if call.algorithm is Algorithm.TOKEN_BUCKET:
        buckets = [(p[i], p[i + 1], p[i + 2], p[i + 3]) for i in range(0, len(p), 4)]
        return _reference.token_bucket(states, now_us, buckets, mode)
    windows = [(p[i], p[i + 1], p[i + 2]) for i in range(0, len(p), 3)]
    return _reference.sliding_window(states, now_us, windows, mode)
