"""The fleet heartbeat (SPEC §2, ``fallback_scope: "fleet"``): each process announces
itself in Redis while Redis answers, and keeps the live process count it last read, so
that its emergency limiter can take its share of ``fallback_rate`` when Redis fails.

Design:

- One daemon thread per `Sentinel` per process, with a blocking store of its own: one
  script call per ``fleet_heartbeat_seconds`` (`store._fleet.announce`), whatever the
  traffic and whatever the framework (the request path never waits for it, and an
  asyncio server's loop never blocks on it).
- Started by the first decision made in a process (the built-in ``sentinel.fleet``
  plugin checks the pid): a server that imports the app and then forks its workers
  (gunicorn ``--preload``) starts one heartbeat per worker, none in the supervisor,
  and a forked child never reuses its parent's connection or name.
- A process's name is its pid and a random part: never an identity, unique per
  `Sentinel` instance, so two instances in one process count as the two emergency
  limiters they are.
- A failed heartbeat changes nothing: the counts last read stay in force; that is the
  point of keeping them.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import weakref
from typing import Any

from sentinel_core._models import Decision, FallbackScope
from sentinel_core.config._schema import SentinelConfig
from sentinel_core.errors import StoreError
from sentinel_core.hookspecs import hookimpl
from sentinel_core.resilience._fleet import FleetShare
from sentinel_core.store._connect import open_fleet_store
from sentinel_core.store._fleet import LIVE_HEARTBEATS, FleetStore, fleet_key
from sentinel_core.store._redis import MEMORY_URL

logger = logging.getLogger("sentinel")


class Heartbeat:
    """Announces this process for the fleet-scoped endpoints of `share` and hands the
    live counts it reads to `share`.

    Args:
        share: the counts the emergency limiter divides by.
        redis_url: the store to announce in (its own connection).
        socket_timeout_ms: the budget of each announcement.
        interval_seconds: the time between two announcements.
    """

    def __init__(
        self, share: FleetShare, redis_url: str, socket_timeout_ms: int, interval_seconds: float
    ) -> None:
        self.share = share
        self.interval_seconds = interval_seconds
        self._url = redis_url
        self._timeout_ms = socket_timeout_ms
        self._endpoint_ids = share.endpoint_ids
        self._keys = tuple(fleet_key(endpoint_id) for endpoint_id in self._endpoint_ids)
        self._lifetime_ms = int(LIVE_HEARTBEATS * interval_seconds * 1000)
        self._lock = threading.Lock()
        self._io_lock = threading.Lock()
        """Held by a beat while it uses the store, so `stop` never closes it mid-call."""
        self._pid: int | None = None
        self.member = ""
        self._store: FleetStore | None = None
        self._stop = threading.Event()

    def ensure_running(self) -> None:
        """Start the thread in this process unless it runs here already (cheap: a pid
        comparison on every call but the first of each process)."""
        pid = os.getpid()
        if self._pid == pid:
            return
        with self._lock:
            if self._pid == pid:
                return
            self._pid = pid
            self.member = f"{pid}:{secrets.token_hex(8)}"
            # Nothing inherited from a parent process: not its connection, nor a lock
            # its heartbeat thread held when the process forked (no thread here frees it).
            self._store = None
            self._io_lock = threading.Lock()
            self._stop = threading.Event()
            threading.Thread(
                target=_beat_until_stopped,
                args=(weakref.ref(self), self._stop, self.interval_seconds),
                name="sentinel-fleet-heartbeat",
                daemon=True,
            ).start()

    def beat(self) -> bool:
        """One announcement; True when Redis answered and the counts were updated."""
        with self._io_lock:
            if self._stop.is_set():
                return False
            try:
                if self._store is None:
                    self._store = open_fleet_store(self._url, self._timeout_ms)
                counts = self._store.announce(self._keys, self.member, self._lifetime_ms)
            except StoreError as exc:
                logger.debug("fleet heartbeat failed, keeping the last counts: %s", exc)
                return False
        self.share.seen(dict(zip(self._endpoint_ids, counts, strict=True)))
        return True

    def stop(self) -> None:
        """End the thread (at its next wake-up) and close the connection, once a beat in
        flight is over (at most one ``socket_timeout_ms``)."""
        self._stop.set()
        with self._io_lock:
            store, self._store = self._store, None
        if store is not None:
            store.close()


def _beat_until_stopped(
    ref: weakref.ReferenceType[Heartbeat], stop: threading.Event, interval: float
) -> None:
    """The thread: beat now, then once per interval, until stopped, or until it wakes
    to find the heartbeat collected: it holds the heartbeat only while beating, so an
    abandoned `Sentinel` can be collected (its thread ends within one interval)."""
    while True:
        heartbeat = ref()
        if heartbeat is None:
            return
        heartbeat.beat()
        del heartbeat
        if stop.wait(interval):
            return


class FleetPlugin:
    """The built-in ``sentinel.fleet`` plugin: starts the heartbeat in a process when the
    process makes its first decision. Unregister it to keep every process on its own
    count of 1 (``fallback_rate`` per process)."""

    def __init__(self, heartbeat: Heartbeat) -> None:
        self.heartbeat = heartbeat

    @hookimpl
    def sentinel_decision(self, decision: Decision, request: Any) -> None:
        self.heartbeat.ensure_running()


def fleet_of(config: SentinelConfig) -> tuple[FleetShare, FleetPlugin | None]:
    """The counts of ``config``'s fleet-scoped endpoints, and the plugin that keeps them
    current; no plugin when no policy is fleet-scoped or the store is ``memory://``
    (one process by definition: its count stays 1)."""
    share = FleetShare(
        policy.endpoint_id
        for policy in config.policies.values()
        if policy.fallback_scope is FallbackScope.FLEET
    )
    if not share.endpoint_ids or config.redis_url.startswith(MEMORY_URL):
        return share, None
    heartbeat = Heartbeat(
        share, config.redis_url, config.socket_timeout_ms, config.fleet_heartbeat_seconds
    )
    return share, FleetPlugin(heartbeat)
