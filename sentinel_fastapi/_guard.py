"""The guard of each guarded route, run by Starlette's router once it picked the route.

Sentinel never resolves a request itself (no second router in front of Starlette's):
when the app starts, and again when routes were added since, the ``handle`` of every
route object that serves a guarded route is replaced by a `RouteGuard` holding that
route's index entries, whose compiled endpoints it keeps per method. The router calls
``handle`` only for the route it picked (its first full match, or a method mismatch
that ends in a 405), so a 404 never reaches a guard and a 405 passes through one.

The guard admits the request once on every endpoint id the route pays for
(``@rate_limited``, ``rate_limit`` dependencies and ``routes`` alike), before the
route's own app parses a body or solves a dependency, and completes the admission when
the response body is done, when the app raises (500) or when the request is cancelled
(the client went away). Only the ``http.response.start`` message is touched (RateLimit
fields, device cookie): the response is never buffered, so streaming responses stream.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Iterable
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sentinel_core import Sentinel
from sentinel_core.adapter import CANCELLED, SERVER_ERROR, Admission, Outcome

from ._routes import RouteEntry, RouteIndex
from ._translate import (
    ADMITTED,
    RateLimitExceeded,
    denial_exception,
    denial_response,
    handled_denial,
    raw_headers,
    request_view,
)


class RouteGuard:
    """A guarded route's ``handle``: admit, then call the route's own ``handle``.

    It guards requests of the app it was made for only (``scope["app"]``): a router
    included in two apps has one route object for both. ``entries`` are the index
    entries the route serves, one per inclusion of its router.
    """

    __slots__ = ("app", "entries", "index", "inner", "sentinel", "serving")

    def __init__(
        self,
        serving: Any,
        app: Starlette,
        sentinel: Sentinel,
        index: RouteIndex,
        entries: tuple[RouteEntry, ...],
    ) -> None:
        self.serving = serving
        """The route whose ``handle`` this guard is."""
        self.inner: ASGIApp = serving.handle
        self.app = app
        self.sentinel = sentinel
        self.index = index
        self.entries = entries

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("app") is not self.app:
            await self.inner(scope, receive, send)
            return
        entries = self.entries
        entry = entries[0] if len(entries) == 1 else _inclusion(entries, scope)
        method = scope["method"]
        guarded = entry.compiled.get(method)
        if guarded is None:
            guarded = self.index.compile(entry, method, self.sentinel.endpoint)
        if not guarded.endpoints:
            await self.inner(scope, receive, send)
            return
        request = Request(scope, receive)
        admission = await self.sentinel.aadmit(
            request_view(request, entry.template), guarded.endpoints
        )
        if admission.denial is not None:
            response = await render_denial(request, admission.denial)
            await response(scope, receive, send)
            return
        scope[ADMITTED] = guarded.ids
        if not admission.owes_completion:  # the usual request: its end needs no watching
            await self.inner(scope, receive, _WithFields(send, admission).send)
            return
        respond = _Respond(send, admission)
        try:
            await self.inner(scope, receive, respond.send)
        except BaseException as exc:
            cancelled = isinstance(exc, anyio.get_cancelled_exc_class())
            # Shielded: a cancelled task's next await would be cancelled again.
            with anyio.CancelScope(shield=True):
                await admission.acomplete(CANCELLED if cancelled else SERVER_ERROR)
            raise
        if not respond.done:  # the app returned without finishing its body (client gone)
            await admission.acomplete(CANCELLED)


def _with_fields(start: Message, admission: Admission) -> Message:
    """The ``http.response.start`` message with the admission's fields (and device
    cookie) added to its headers."""
    status = start["status"]
    extra = raw_headers(admission.headers(status), admission.cookie(status))
    return {**start, "headers": [*start.get("headers", ()), *extra]}


class _WithFields:
    """The ``send`` of an admitted request that owes the store nothing after the
    handler: only the ``http.response.start`` message changes. A plain function that
    hands back the downstream ``send``'s awaitable: no coroutine of its own per message."""

    __slots__ = ("admission", "downstream")

    def __init__(self, downstream: Send, admission: Admission) -> None:
        self.downstream = downstream
        self.admission = admission

    def send(self, message: Message) -> Awaitable[None]:
        if message["type"] == "http.response.start":
            message = _with_fields(message, self.admission)
        return self.downstream(message)


class _Respond:
    """The ``send`` an admitted request's route answers through when its admission
    owes the store a completion: the admission's fields join the
    ``http.response.start`` message, and the admission completes with the response's
    status after the last body chunk."""

    __slots__ = ("admission", "done", "downstream", "status")

    def __init__(self, downstream: Send, admission: Admission) -> None:
        self.downstream = downstream
        self.admission = admission
        self.status = SERVER_ERROR
        self.done = False

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self.status = message["status"]
            await self.downstream(_with_fields(message, self.admission))
            return
        await self.downstream(message)
        if kind == "http.response.body" and not message.get("more_body", False):
            self.done = True
            await self.admission.acomplete(self.status)


def _inclusion(entries: Iterable[RouteEntry], scope: Scope) -> RouteEntry:
    """Which inclusion of a router included more than once the router picked: the one
    whose template matches the path (the only case where a guard matches a path; the
    router picked one of them, so one matches)."""
    return next(entry for entry in entries if entry.matches(scope)[0] is not Match.NONE)


def guard_routes(app: Starlette, sentinel: Sentinel, index: RouteIndex) -> None:
    """Put a `RouteGuard` on the route serving each entry of ``index`` that may pay for
    an endpoint, or hand an existing guard of ``app`` the new entries."""
    serving: dict[int, tuple[Any, list[RouteEntry]]] = {}
    for entry in index.entries:
        serving.setdefault(id(entry.serving), (entry.serving, []))[1].append(entry)
    for route, entries in serving.values():
        guard = _guard_of(route.handle, app)
        if guard is not None:
            guard.index, guard.entries = index, tuple(entries)
        elif any(index.may_charge(entry) for entry in entries):
            route.handle = RouteGuard(route, app, sentinel, index, tuple(entries))


def _guard_of(handle: Any, app: Starlette) -> RouteGuard | None:
    """``app``'s guard among the guards wrapped around a route's ``handle``."""
    while isinstance(handle, RouteGuard):
        if handle.app is app:
            return handle
        handle = handle.inner
    return None


async def render_denial(request: Request, outcome: Outcome) -> Response:
    """A denial as the app renders it, with ``app.exception_handler(RateLimitExceeded)``
    (sync or async), plus the denial's headers; SPEC §4's response without a handler.

    The guard runs before the route's own exception handling, so it calls the
    handler itself, the way Starlette would."""
    handler = request.scope["app"].exception_handlers.get(RateLimitExceeded)
    exc = denial_exception(outcome) if handler is not None else None
    if exc is None:
        return denial_response(outcome)
    if inspect.iscoroutinefunction(handler):
        response = await handler(request, exc)
    else:
        response = await run_in_threadpool(handler, request, exc)
    return handled_denial(response, outcome)
