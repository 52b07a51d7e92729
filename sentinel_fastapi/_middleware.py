"""The pure ASGI middleware through which every guarded request passes.

Pure ASGI rather than ``BaseHTTPMiddleware``: the response is never buffered, so
streaming responses stream, and only the ``http.response.start`` message is touched
(RateLimit fields, device cookie). The middleware resolves the route the router will
pick, asks the core which endpoint ids it pays for (``@rate_limited``, ``rate_limit``
dependencies and ``routes`` alike), admits it once, and completes the admission when
the response body is done, when the app raises (500) or when the request is
cancelled (the client went away).
"""

from __future__ import annotations

import inspect

import anyio
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sentinel_core import Sentinel
from sentinel_core.adapter import CANCELLED, PASS_THROUGH, SERVER_ERROR, Admission, Outcome

from ._routes import route_index
from ._translate import (
    ADMITTED,
    RateLimitExceeded,
    denial_exception,
    denial_response,
    handled_denial,
    raw_headers,
    request_view,
)


class SentinelMiddleware:
    """Admit each request on the endpoint ids its resolved route pays for.

    Matching is on the route the router will pick (its template, such as
    ``/v1/items/{item_id}``), never on the raw URL. Non-HTTP scopes (lifespan,
    websockets) pass through untouched. `Sentinel.init_app` installs it innermost,
    right before routing; it holds no per-request state.
    """

    def __init__(self, app: ASGIApp, *, sentinel: Sentinel) -> None:
        self.app = app
        self.sentinel = sentinel
        self.enabled = sentinel.config.enabled
        self._compile = sentinel.endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if not self.enabled:  # `enabled = false`: a pass-through, nothing decided
            scope[ADMITTED] = PASS_THROUGH
            await self.app(scope, receive, send)
            return
        index = route_index(scope["app"], self.sentinel.route_table)
        entry = index.resolve(scope)
        endpoints = () if entry is None else index.endpoints(entry, scope["method"], self._compile)
        if entry is None or not endpoints:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        admission = await self.sentinel.aadmit(request_view(request, entry.template), endpoints)
        if admission.denial is not None:
            response = await render_denial(request, admission.denial)
            await response(scope, receive, send)
            return
        scope[ADMITTED] = tuple(endpoint.endpoint_id for endpoint in endpoints)
        await _serve(self.app, admission, scope, receive, send)


async def render_denial(request: Request, outcome: Outcome) -> Response:
    """A denial as the app renders it, with ``app.exception_handler(RateLimitExceeded)``
    (sync or async), plus the denial's headers; SPEC §4's response without a handler.

    The middleware sits outside Starlette's exception middleware, so it calls the
    handler itself, the way that middleware would."""
    handler = request.scope["app"].exception_handlers.get(RateLimitExceeded)
    exc = denial_exception(outcome) if handler is not None else None
    if exc is None:
        return denial_response(outcome)
    if inspect.iscoroutinefunction(handler):
        response = await handler(request, exc)
    else:
        response = await run_in_threadpool(handler, request, exc)
    return handled_denial(response, outcome)


async def _serve(
    app: ASGIApp, admission: Admission, scope: Scope, receive: Receive, send: Send
) -> None:
    status = SERVER_ERROR

    async def send_decorated(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
            extra = raw_headers(admission.headers(status), admission.cookie(status))
            message = {**message, "headers": [*message.get("headers", ()), *extra]}
        await send(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            await admission.acomplete(status)

    try:
        await app(scope, receive, send_decorated)
    except BaseException as exc:
        cancelled = isinstance(exc, anyio.get_cancelled_exc_class())
        # Shielded: a cancelled task's next await would be cancelled again.
        with anyio.CancelScope(shield=True):
            await admission.acomplete(CANCELLED if cancelled else SERVER_ERROR)
        raise
    # An app that returns without finishing its body (the client went away).
    await admission.acomplete(CANCELLED)
