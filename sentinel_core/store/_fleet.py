"""The fleet heartbeat's Redis side (SPEC §2, ``fallback_scope: "fleet"``): the keys,
and the conversation that announces one process and reads the live counts.

One script call per heartbeat announces the process for every fleet-scoped endpoint at
once: their keys share one hash tag, so the call is one slot's on Redis Cluster too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from importlib.resources import files
from typing import Protocol

from redis.exceptions import NoScriptError

from sentinel_core.store._protocol import Conversation

FLEET_SOURCE = (files("sentinel_core.store") / "lua" / "fleet.lua").read_text("utf-8")
FLEET_SHA = hashlib.sha1(FLEET_SOURCE.encode()).hexdigest()
LIVE_HEARTBEATS = 3
"""A process not heard from for this many heartbeats is no longer counted (it missed
two: it died, or lost Redis)."""


def fleet_key(endpoint_id: str) -> str:
    """The sorted set of the processes announcing themselves for ``endpoint_id``."""
    return f"sentinel:fleet:{{fleet}}:{endpoint_id}"


def announce(keys: Sequence[str], member: str, lifetime_ms: int) -> Conversation[list[int]]:
    """Announce ``member`` in every key and return each key's live count (EVALSHA, and
    one SCRIPT LOAD on NOSCRIPT: a second NOSCRIPT is a Redis error like any other)."""
    evalsha = ("EVALSHA", FLEET_SHA, len(keys), *keys, member, lifetime_ms)
    try:
        counts = yield evalsha
    except NoScriptError:
        yield ("SCRIPT LOAD", FLEET_SOURCE)
        counts = yield evalsha
    return [int(count) for count in counts]


class FleetStore(Protocol):
    """A store the heartbeat can announce through (the Redis stores, not ``memory://``)."""

    def announce(self, keys: Sequence[str], member: str, lifetime_ms: int) -> list[int]: ...
    def close(self) -> None: ...
