"""The Sentinel instance built from ``settings.SENTINEL`` and its once-only start-up.

Django has no start-up hook that may do network I/O (``AppConfig.ready`` must not), so
the Redis check and script load run before the first guarded request is served: once
per built instance, under a lock, whichever thread or event loop gets there first.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sentinel_core import Sentinel, StartupError
from sentinel_core.adapter import MEMORY_URL, AsyncStore, open_async_store

from . import _loops


class DjangoSentinel(Sentinel):
    """`sentinel_core.Sentinel` whose asyncio store follows the running event loop.

    Django runs async views on more than one loop (see `_loops`), so each loop gets its
    own Redis connections; the breaker, emergency limiter and memory store stay shared
    by every thread and loop of the process.
    """

    @property
    def async_store(self) -> AsyncStore:
        url, timeout = self.config.redis_url, self.config.socket_timeout_ms
        if url.startswith(MEMORY_URL):
            return super().async_store
        return _loops.store_for(url, timeout, lambda: open_async_store(url, timeout))


RECHECK_SECONDS = 5.0
"""How long an unfit Redis's start-up error is answered before the check runs again."""


class Runtime:
    """A built Sentinel and whether its start-up check has passed."""

    def __init__(
        self,
        config: Mapping[str, Any],
        *,
        registry: Any = None,
        plugins: Iterable[object] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sentinel = DjangoSentinel(config, registry=registry, plugins=plugins)
        self.clock = clock
        self._lock = threading.Lock()
        self._started = False
        self._error: StartupError | None = None
        self._failed_at = 0.0

    def ensure_started(self) -> None:
        """Run the start-up check until it passes (SPEC §5): an unreachable Redis is
        logged and the check deferred to the first contact; an unfit one fails guarded
        requests with the check's message, as a failed start-up would, and is checked
        again every `RECHECK_SECONDS`, so fixing Redis needs no restart.

        Raises:
            StartupError: Redis is reachable but unfit for Sentinel.
        """
        if self._started:
            return
        with self._lock:
            if self._error is not None and self.clock() - self._failed_at < RECHECK_SECONDS:
                raise self._error
            if not self._started:  # another thread may have run it while this one waited
                try:
                    self.sentinel.startup()
                except StartupError as error:
                    self._error, self._failed_at = error, self.clock()
                    raise
                self._started, self._error = True, None

    async def aensure_started(self) -> None:
        """`ensure_started` for async views: the once-only check runs on a worker thread,
        so concurrent first requests on any loop wait for one check, never block a loop."""
        if not self._started:
            await asyncio.to_thread(self.ensure_started)

    def close(self) -> None:
        """Release the blocking store's connections (the loop stores close with their loops)."""
        self.sentinel.close()
