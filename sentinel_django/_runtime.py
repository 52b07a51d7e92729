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

from asgiref.sync import sync_to_async

from sentinel_core import IdentityKind, Sentinel, StartupError
from sentinel_core.adapter import MEMORY_URL, AsyncStore, open_async_store

from . import _loops
from ._translate import django_user


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


_USER = "_sentinel_user"
"""On a request: ``(user id or None,)`` as `Runtime.aidentify` found it."""

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
        identify: Callable[[Any], str | None] | None = None,
        denial_view: Callable[..., Any] | None = None,
    ) -> None:
        self.identify = identify or django_user
        self.sentinel = DjangoSentinel(
            config, registry=registry, plugins=plugins, identify=self._user_of
        )
        self.denial_view = denial_view
        """``SENTINEL["denial_view"]``: renders a denial in the app's own way, if set."""
        self._user_policies = frozenset(
            endpoint_id
            for endpoint_id, policy in self.sentinel.config.policies.items()
            if policy.identity is IdentityKind.USER
        )
        self.clock = clock
        self.routes: dict[tuple[str, Callable[..., Any], str], tuple[str, ...]] = {}
        """(resolved route, view, method) -> the endpoint ids a request pays for, worked
        out at the route's first request (the middleware's)."""
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

    def _user_of(self, request: Any) -> str | None:
        """The request's user: found ahead on the event loop (`aidentify`), or now."""
        found: tuple[str | None] | None = getattr(request, _USER, None)
        return self.identify(request) if found is None else found[0]

    async def aidentify(self, request: Any, endpoint_ids: Iterable[str]) -> None:
        """Name the user ahead of an admission on the event loop, when a user policy is
        among ``endpoint_ids``: ``identify`` (``request.user`` by default) may query the
        database, which Django allows in a thread only."""
        if not self._user_policies.isdisjoint(endpoint_ids):
            setattr(request, _USER, (await sync_to_async(self.identify)(request),))

    def close(self) -> None:
        """Release the blocking store's connections (the loop stores close with their loops)."""
        self.sentinel.close()
