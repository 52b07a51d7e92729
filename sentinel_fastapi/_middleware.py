"""The pure ASGI middleware in front of the router: it keeps the route guards current.

It never resolves a request: Starlette's router does, and the `RouteGuard` of the route
it picks admits the request (`_guard`). The middleware only notices routes added since
the guards were placed (``app.routes`` grew: a route declared after startup is guarded
like the others) and, with ``enabled = false``, records every request as admitted so
that decorated handlers run unguarded.
"""

from __future__ import annotations

from collections.abc import Awaitable

from starlette.applications import Starlette
from starlette.types import ASGIApp, Receive, Scope, Send

from sentinel_core import Sentinel
from sentinel_core.adapter import PASS_THROUGH

from ._guard import guard_routes
from ._routes import route_index
from ._translate import ADMITTED


class SentinelMiddleware:
    """Keep the app's route guards current; pass everything else through.

    Non-HTTP scopes (lifespan, websockets) pass through untouched. `Sentinel.init_app`
    installs it innermost, right before routing; it holds no per-request state.
    """

    def __init__(self, app: ASGIApp, *, sentinel: Sentinel) -> None:
        self.app = app
        self.sentinel = sentinel
        self.enabled = sentinel.config.enabled
        self.size = -1
        """How many routes the app had when its guards were last checked."""

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        # A plain function handing back the app's awaitable: no coroutine of its own
        # on every request's path (the caller awaits what it returns, as for any app).
        if scope["type"] == "http":
            if not self.enabled:  # `enabled = false`: a pass-through, nothing decided
                scope[ADMITTED] = PASS_THROUGH
            elif len(scope["app"].router.routes) != self.size:
                self.size = guard_app(scope["app"], self.sentinel)
        return self.app(scope, receive, send)


def guard_app(app: Starlette, sentinel: Sentinel) -> int:
    """Guard ``app``'s routes unless they already are, as they are now; how many there are."""
    index, built = route_index(app, sentinel.route_table)
    if built:
        guard_routes(app, sentinel, index)
    return index.size
