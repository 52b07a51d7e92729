"""`Sentinel` for FastAPI: the core facade plus ``init_app``.

``init_app`` keeps nothing of the app on the Sentinel (one Sentinel may serve several
apps): it puts the Sentinel on ``app.state``, installs the middleware that keeps the
guards of the app's routes current (`_guard`: each guarded route admits its requests
after Starlette's routing picked it), wraps ``app.openapi``, and composes Sentinel's
startup with the app's own lifespan instead of replacing it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

from fastapi import FastAPI
from starlette.middleware import Middleware

import sentinel_core
from sentinel_core import ConfigError, StartupError, UnknownEndpointError

from ._decorator import STATE_ATTRIBUTE
from ._guard import guard_routes
from ._middleware import SentinelMiddleware
from ._openapi import install_openapi
from ._routes import RouteIndex, reset_route_index, route_index
from ._translate import starlette_user

Lifespan = Callable[[Any], AbstractAsyncContextManager[Any]]


class Sentinel(sentinel_core.Sentinel):
    """Rate limiting for FastAPI apps (SPEC §5).

    Args:
        config: a mapping, a path to a TOML file with a ``[sentinel]`` table, or a
            loaded `sentinel_core.SentinelConfig`.
        registry: the ``prometheus_client.CollectorRegistry`` for the metrics.
        identify: ``identify(request)``, the id (a str) of the user the app
            authenticated, or None, for ``identity: "user"`` policies; by default
            ``request.user.identity`` as Starlette's ``AuthenticationMiddleware`` sets it.

    Example::

        sentinel = Sentinel({"redis_url": ..., "policies": {...}})
        app = FastAPI(lifespan=my_lifespan)
        sentinel.init_app(app)

        @app.post("/v1/ingest")
        @rate_limited("pdftalk.ingest")
        async def ingest() -> dict[str, str]: ...
    """

    def __init__(
        self,
        config: Mapping[str, Any] | str | os.PathLike[str] | sentinel_core.SentinelConfig,
        *,
        identify: Callable[[Any], str | None] = starlette_user,
        **options: Any,
    ) -> None:
        super().__init__(config, identify=identify, **options)

    def init_app(self, app: FastAPI) -> None:
        """Attach this Sentinel to ``app``.

        At startup (the app's lifespan, which still runs, inside Sentinel's) every
        endpoint id used by a decorated route or a ``routes`` entry is validated and the
        Redis check runs; a failure stops startup with a message naming the problem.
        Call it before the app starts; add middleware that must see Sentinel's 429s
        (CORS) as usual: Sentinel's middleware sits innermost, right before routing.

        Raises:
            RuntimeError: the app already has a Sentinel, or has already started.
        """
        if getattr(app.state, STATE_ATTRIBUTE, None) is not None:
            raise RuntimeError("this app already has a Sentinel")
        if app.middleware_stack is not None:
            raise RuntimeError("init_app must be called before the app starts")
        app.user_middleware.append(Middleware(SentinelMiddleware, sentinel=self))
        setattr(app.state, STATE_ATTRIBUTE, self)
        app.router.lifespan_context = self._lifespan(app, app.router.lifespan_context)
        install_openapi(app, self)

    def _lifespan(self, app: FastAPI, inner: Lifespan) -> Lifespan:
        @contextlib.asynccontextmanager
        async def lifespan(server_app: Any) -> AsyncIterator[Any]:
            try:
                await self.start_app(app)
                async with inner(server_app) as state:
                    yield state
            finally:
                await self.aclose()

        return lifespan

    async def start_app(self, app: FastAPI) -> None:
        """Sentinel's startup for ``app``: validate its guarded routes and put their
        guards on them, then check Redis.

        Raises:
            StartupError: an unknown endpoint id (naming the route and the id), a
                ``routes`` entry that matches no route of the app, or a reachable
                Redis unfit for Sentinel (the check's message).
        """
        reset_route_index(app)
        index, _ = route_index(app, self.route_table)
        self.validate_routes(index)
        if self.config.enabled:
            guard_routes(app, self, index)
        await self.astartup()

    def validate_routes(self, index: RouteIndex) -> None:
        """Raise `StartupError` for a route whose endpoint id cannot be guarded, or a
        ``routes`` entry that names no route of the app."""
        for entry in index.entries:
            for method in sorted(entry.methods):
                for endpoint_id in index.charged(entry, method):
                    self._validate(f"route {method} {entry.template}", endpoint_id)
        unmatched = index.unmatched()
        if unmatched:
            entries = ", ".join(f"{key!r} -> {self.config.routes[key]!r}" for key in unmatched)
            raise StartupError(f"routes entries that match no route of the app: {entries}")

    def _validate(self, where: str, endpoint_id: str) -> None:
        try:
            self.validate_endpoint(endpoint_id)
        except (UnknownEndpointError, ConfigError) as exc:
            raise StartupError(f"{where} uses endpoint id {endpoint_id!r}: {exc}") from exc
