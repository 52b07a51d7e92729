"""The pure ASGI middleware that guards the routes named in the configuration's ``routes``.

Pure ASGI rather than ``BaseHTTPMiddleware``: the response is never buffered, so
streaming responses stream, and an allowed response only has its
``http.response.start`` message touched (RateLimit headers, device cookie).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sentinel_core import Sentinel

from ._routes import route_index
from ._translate import denial_response, raw_headers, request_view


class SentinelMiddleware:
    """Guard each request whose resolved route template and method appear in ``routes``.

    Matching is on the route the router will pick (its template, such as
    ``/v1/items/{item_id}``), never on the raw URL, so every item shares the route's
    policy and no spelling of the path gets around it. Non-HTTP scopes (lifespan,
    websockets) pass through untouched.

    `Sentinel.init_app` installs it innermost, right before routing, when ``routes``
    is not empty; it holds no per-request state.
    """

    def __init__(self, app: ASGIApp, *, sentinel: Sentinel) -> None:
        self.app = app
        self.sentinel = sentinel

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        index = route_index(scope["app"], self.sentinel.config.routes)
        entry = index.resolve(scope)
        endpoint_id = None if entry is None else entry.guards.get(scope["method"])
        if entry is None or endpoint_id is None:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        outcome = await self.sentinel.aguard(endpoint_id, request_view(request, entry.template))
        if not outcome.allowed:
            await denial_response(outcome)(scope, receive, send)
            return
        extra = raw_headers(outcome)
        if not extra:
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_headers)
