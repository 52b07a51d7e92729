"""One process of the local-denial exactness test: threads sending a schedule of
requests at one bucket through their own `Sentinel`, recording what happened when.

Times are wall-clock microseconds (``time.time_ns``), the clock Redis ``TIME`` reads on
the same host, so the parent can line up the process's decisions with the store's. The
local denials run on that clock too (injected), and each thread notes the reading its
last lookup was decided at: the instant a local denial is checked at.

A one-key call's integer reply (a token bucket's `OneKeyReply`, a sliding window's
admission) leaves the store's TIME out: such a call is sent with its full parameter set
(a token bucket's cost and burst, a sliding window's ceiling), whose array reply carries
it, and the engine is handed the integer that array stands for.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from sentinel_core import AnonymousIdentity, Identity, IdentityKind, Sentinel, TenantIdentity
from sentinel_core._models import Algorithm, Policy
from sentinel_core.store._reference import ScriptReply
from sentinel_core.store._scripts import ScriptCall, bucket_parameters

_sentinels: dict[str, Sentinel] = {}


_lookups = threading.local()


def _lookup_clock_ns() -> int:
    """The local denials' clock: wall-clock ns, noted per thread."""
    now = _lookups.last_ns = time.time_ns()
    return now


def _sentinel(config: dict[str, Any]) -> Sentinel:
    """This process's Sentinel for ``config`` (one per process, as a worker has)."""
    key = repr(sorted(config.items()))
    sentinel = _sentinels.get(key)
    if sentinel is None:
        sentinel = _sentinels[key] = Sentinel(config, entry_points=False)
        sentinel._engine.local_denials.clock_ns = _lookup_clock_ns
    return sentinel


def with_time(call: ScriptCall, policy: Policy) -> ScriptCall:
    """``call``, asking for a reply that carries the store's TIME (an array): a token
    bucket's one key with cost and burst, a sliding window's with its ceiling."""
    if len(call.keys) > 1:
        return call
    if call.algorithm is Algorithm.TOKEN_BUCKET:
        bucket = bucket_parameters(call.algorithm, policy.rate, policy.burst, policy.cost)
        return ScriptCall(call.algorithm, call.keys, (call.args[0], *bucket))
    if call.algorithm is Algorithm.SLIDING_WINDOW and len(call.args) == 4:
        return ScriptCall(call.algorithm, call.keys, (*call.args, policy.burst))
    return call


def as_sent(reply: Any, parsed: ScriptReply, call: ScriptCall) -> Any:
    """The reply to ``call`` that ``reply`` (``parsed``), the array `with_time` asked
    for, stands for: a `OneKeyReply`, or a sliding window's admission as an integer."""
    if call.algorithm is Algorithm.TOKEN_BUCKET:
        return parsed.one_key()
    return parsed.window_admission(call.args[1]) if parsed.allowed else reply


Admission = tuple[int, ScriptCall]
"""The store's TIME (us) of an admission, and the call it admitted."""
LocalDenial = tuple[int, ScriptCall]
"""The wall-clock instant (us) a denial was answered locally at, and its call."""


def run_schedule(
    config: dict[str, Any], endpoint_id: str, name: str, schedules: list[list[tuple[int, int]]]
) -> tuple[list[Admission], list[LocalDenial]]:
    """Run one thread per schedule: (pause in ms, device) pairs, one request after each
    pause. A tenant policy's requests all come from tenant ``name``; an anonymous
    policy's from device ``device`` behind network ``name``.

    Returns every admission the store made for this process and every denial the
    process answered locally."""
    sentinel = _sentinel(config)
    store = sentinel.store
    policy = sentinel.policy(endpoint_id)
    anonymous = policy.identity is IdentityKind.ANONYMOUS
    admitted: list[Admission] = []
    local: list[LocalDenial] = []
    plain_run = store.run

    def run(call: ScriptCall) -> Any:
        sent = with_time(call, policy)
        reply = plain_run(sent)
        parsed = ScriptReply(*reply)
        if parsed.allowed:
            admitted.append((parsed.now_us, sent))
        return reply if sent is call else as_sent(reply, parsed, call)

    def identity(device: int) -> Identity:
        return (
            AnonymousIdentity(f"device-{device}", name, b"k" * 32)
            if anonymous
            else TenantIdentity(name)
        )

    store.run = run  # type: ignore[method-assign]
    barrier = threading.Barrier(len(schedules))

    def worker(schedule: list[tuple[int, int]]) -> None:
        barrier.wait()
        for pause, device in schedule:
            time.sleep(pause / 1_000)
            who = identity(device)
            decision = sentinel.evaluate(endpoint_id, who)
            if decision.local:
                call = sentinel._engine.script_call(decision.policy, who)
                local.append((_lookups.last_ns // 1_000, with_time(call, policy)))

    try:
        threads = [threading.Thread(target=worker, args=(s,)) for s in schedules]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        store.run = plain_run  # type: ignore[method-assign]
    return admitted, local
