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

from sentinel_core._models import MICRO, Algorithm, Policy, Rate, frozen_builder
from sentinel_core.store import _reference
from sentinel_core.store._reference import (
    Mode,
    OneKeyReply,
    ScriptReply,
    State,
    WindowAdmission,
    Write,
)
from sentinel_core.store._reference_extra import run_extra
from sentinel_core.store._reference_settle import settle


@dataclass(frozen=True, slots=True)
class Script:
    name: str
    """The file's name: an `Algorithm`'s value, or `SETTLE`."""
    source: str
    sha: str


SETTLE = "settle"
"""The settlement script (``lua/settle.lua``), shared by the settle policies' algorithms."""


def _lua(name: str) -> str:
    return (files("sentinel_core.store") / "lua" / f"{name}.lua").read_text("utf-8")


PRELUDES: dict[str, tuple[str, ...]] = {
    "token_bucket": (),
    "sliding_window": ("window_state",),
    "concurrency": ("integers",),
    "quota": ("integers", "quota_state"),
    SETTLE: ("integers", "window_state", "quota_state"),
}
"""The shared files of local functions each script is prepended with, so that a rule two
scripts follow (a state decoder, exact division) is written once. A script gets only
those it calls: each is a closure Redis creates again on every execution."""


@cache
def script(name: str) -> Script:
    """The Lua source of script ``name`` (an `Algorithm`'s, or `SETTLE`: its file, after
    its `PRELUDES`) and its SHA1, which is what EVALSHA names it by. The SHA is the whole
    source's, preludes included, so a changed prelude is a new script (NOSCRIPT, loaded)."""
    source = "".join(_lua(prelude) for prelude in (*PRELUDES[name], name))
    return Script(name, source, hashlib.sha1(source.encode()).hexdigest())


def all_scripts() -> tuple[Script, ...]:
    return (*(script(algorithm.value) for algorithm in Algorithm), script(SETTLE))


@dataclass(frozen=True, slots=True)
class ScriptCall:
    """One script execution: the whole of one decision's Redis traffic."""

    algorithm: Algorithm
    keys: tuple[str, ...]
    args: tuple[int, ...]
    """ARGV: the `Mode`, then one parameter set per key (see the scripts' headers)."""
    settle: bool = False
    """A settlement (``lua/settle.lua``) of ``algorithm``'s buckets, not a decision."""

    @property
    def script(self) -> Script:
        return script(SETTLE if self.settle else self.algorithm.value)


build_script_call = frozen_builder(ScriptCall)
"""`ScriptCall`, built as fast as a plain class (one per decision)."""


def bucket_parameters(
    algorithm: Algorithm,
    rate: Rate,
    burst: int,
    cost: int,
    settle: bool = False,
    *,
    alone: bool = False,
) -> tuple[int, ...]:
    """One bucket's parameter set in ARGV (see the scripts' headers); a settle policy's
    ends with the horizon (token bucket) or the ceiling (sliding window) of its debt. A
    token bucket ``alone`` in its call leaves out cost and burst: its reply is then a
    `OneKeyReply`, read with the policy's own. A sliding window's set never carries a
    ceiling but a settle policy's, so alone in its call it admits with a
    `WindowAdmission`."""
    period_us = rate.period_seconds * MICRO
    if algorithm is Algorithm.TOKEN_BUCKET:
        # GCRA: a request's cost refills in inc us (rounded up: never faster than the
        # rate), and floor(burst / cost) requests fit in a burst.
        inc = -(-cost * period_us // rate.count)
        own = (
            (inc, (burst // cost - 1) * inc)
            if alone
            else (inc, (burst // cost - 1) * inc, cost, burst)
        )
        return (*own, debt_horizon(rate, burst)) if settle else own
    return (burst, period_us, cost, 2 * burst) if settle else (burst, period_us, cost)


def capacity_us(rate: Rate, burst: int) -> int:
    """Microseconds a token bucket of ``burst`` at ``rate`` takes to refill from empty."""
    return -(-burst * rate.period_seconds * MICRO // rate.count)


def debt_horizon(rate: Rate, burst: int) -> int:
    """How far ahead of the clock a settle policy's token bucket reads a TAT: an empty
    bucket's (for any cost: at most the capacity plus a microsecond per token of
    rounding) plus one capacity of debt."""
    return 2 * capacity_us(rate, burst) + burst


def key_limits(policy: Policy, keys: int) -> tuple[tuple[Rate, int], ...]:
    """The (rate, capacity) of each of ``keys`` buckets of a call of ``policy``: one per
    limit of a layered policy, the device's then the network's for the anonymous AND
    (a new device's: the network's new devices', its own, then the network's), or else
    the policy's own for every key."""
    limits = policy.limits
    groups, rest = divmod(keys, len(limits))
    if policy.network_limits and not rest and groups in (2, 3):
        return limits * (groups - 1) + policy.network_limits
    if policy.layers and keys == len(limits):
        return limits
    return ((policy.rate, policy.burst),) * keys


@lru_cache(maxsize=1_024)  # bounded: a plugin may mint a policy per request
def script_args(policy: Policy, mode: Mode = Mode.DECIDE, keys: int = 1) -> tuple[int, ...]:
    """The ARGV of a call of ``policy`` over ``keys`` buckets (see each script's header):
    the mode, then each bucket's parameters (see `key_limits`; a token bucket's one key
    without cost and burst: `OneKeyReply`)."""
    algorithm, cost, settle = policy.algorithm, policy.cost, policy.settle
    sets = (
        bucket_parameters(algorithm, rate, burst, cost, settle, alone=keys == 1)
        for rate, burst in key_limits(policy, keys)
    )
    return (int(mode), *(arg for parameters in sets for arg in parameters))


def run_reference(
    call: ScriptCall, states: Sequence[State], now_us: int
) -> tuple[ScriptReply | OneKeyReply | WindowAdmission, list[Write] | None]:
    """What the script of ``call`` would answer given these states and this TIME."""
    if call.algorithm in (Algorithm.CONCURRENCY, Algorithm.QUOTA):
        strings = [state if isinstance(state, str) else None for state in states]
        return run_extra(call.algorithm, call.keys, call.args, strings, now_us)
    mode, p = Mode(call.args[0]), call.args[1:]
    stride = len(p) // len(call.keys)  # a settle policy's sets are one longer
    sets = [tuple(p[i : i + stride]) for i in range(0, len(p), stride)]
    if call.algorithm is Algorithm.TOKEN_BUCKET:
        return _reference.token_bucket(states, now_us, sets, mode)
    return _reference.sliding_window(states, now_us, sets, mode)


def run_settle_reference(
    call: ScriptCall, states: Sequence[State], now_us: int
) -> tuple[int, list[Write]]:
    """What ``lua/settle.lua`` would answer (its TIME) and write for the settlement ``call``."""
    return settle(states, now_us, call.args)
