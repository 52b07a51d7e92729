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
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async

from sentinel_core import IdentityKind, Sentinel, StartupError
from sentinel_core.adapter import MEMORY_URL, AsyncStore, Endpoint, open_async_store

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


@dataclass(frozen=True, slots=True)
class Charged:
    """What a request pays for, compiled once for a route, a decorator or a throttle:
    the core's `Endpoint` objects, their ids (to tell what a request is already
    admitted on) and whether one of them limits per user (`Runtime.aidentify`)."""

    endpoints: tuple[Endpoint, ...]
    ids: tuple[str, ...]
    names_user: bool


def charging(endpoints: Iterable[Endpoint]) -> Charged:
    """What a request pays for when it pays for ``endpoints``."""
    kept = tuple(endpoints)
    return Charged(
        kept,
        tuple(endpoint.endpoint_id for endpoint in kept),
        names_user=any(e.policy.identity is IdentityKind.USER for e in kept),
    )


NOTHING = charging(())
"""A request that pays for nothing."""

RouteKey = tuple[str, Callable[..., Any], str]
"""(resolved route template, view, method): what a routed request pays for depends on
nothing else."""


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
        self.enabled = self.sentinel.config.enabled
        """``enabled`` (SPEC §2): false serves every request untouched."""
        self.denial_view = denial_view
        """``SENTINEL["denial_view"]``: renders a denial in the app's own way, if set."""
        self.clock = clock
        self.routes: dict[RouteKey, Charged] = {}
        """What a routed request pays for, compiled at the route's first request (the
        middleware's)."""
        self._throttled: dict[type, Charged] = {}
        """DRF view class -> its ``SentinelThrottle``'s id, compiled at its first request."""
        self._lock = threading.Lock()
        self.started = False
        """The start-up check has passed: a request looks here, and calls
        `ensure_started` (which takes a lock) only while it has not."""
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
        with self._lock:
            if self._error is not None and self.clock() - self._failed_at < RECHECK_SECONDS:
                raise self._error
            if not self.started:  # another thread may have run it while this one waited
                try:
                    self.sentinel.startup()
                except StartupError as error:
                    self._error, self._failed_at = error, self.clock()
                    raise
                self.started, self._error = True, None

    async def aensure_started(self) -> None:
        """`ensure_started` for async views: the once-only check runs on a worker thread,
        so concurrent first requests on any loop wait for one check, never block a loop."""
        await asyncio.to_thread(self.ensure_started)

    def compile(self, endpoint_ids: Iterable[str]) -> Charged:
        """``endpoint_ids`` compiled, to be kept by whoever charges them.

        Raises:
            UnknownEndpointError: no policy has one of the ids.
        """
        return charging(self.sentinel.endpoint(endpoint_id) for endpoint_id in endpoint_ids)

    def throttled(self, view_class: type, endpoint_id: str) -> Charged:
        """What a ``SentinelThrottle`` charges for a view of ``view_class`` naming
        ``endpoint_id``, compiled at the class's first request (an instance naming
        another id than its class's is compiled again)."""
        charged = self._throttled.get(view_class)
        if charged is None or charged.ids != (endpoint_id,):
            charged = self._throttled[view_class] = self.compile((endpoint_id,))
        return charged

    def _user_of(self, request: Any) -> str | None:
        """The request's user: found ahead on the event loop (`aidentify`), or now."""
        found: tuple[str | None] | None = getattr(request, _USER, None)
        return self.identify(request) if found is None else found[0]

    async def aidentify(self, request: Any) -> None:
        """Name the user ahead of an admission on the event loop (one that pays for a
        user policy): ``identify`` (``request.user`` by default) may query the database,
        which Django allows in a thread only."""
        setattr(request, _USER, (await sync_to_async(self.identify)(request),))

    def close(self) -> None:
        """Release the blocking store's connections (the loop stores close with their loops)."""
        self.sentinel.close()
