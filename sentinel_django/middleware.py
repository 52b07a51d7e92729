"""``SentinelMiddleware``: guards the views that ``SENTINEL["routes"]`` names.

Routes are matched on the resolved route template (``request.resolver_match.route``,
spelled as in ``urls.py``: ``"POST v1/items/<int:pk>"``), never on the raw URL, so
``/v1/items/1`` and ``/v1/items/01`` are one route. The guard runs in
``process_view``, the first hook where the match exists; an allowed outcome is kept
on the request and its headers and cookie added to the response on the way out.

The middleware is sync and async capable. In async mode ``process_view`` is a
coroutine function, so Django awaits it on the event loop with the asyncio store
instead of sending it to a thread.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponseBase  # type: ignore[import-untyped]

from sentinel_core import Outcome

from . import conf
from ._translate import allow, denial, request_view
from .decorators import view_endpoints

_OUTCOME_ATTR = "_sentinel_middleware_outcome"

GetResponse = Callable[[HttpRequest], Any]


class SentinelMiddleware:
    """Rate limit the routes of ``settings.SENTINEL["routes"]``.

    A view whose ``@rate_limited`` decorator already names the route's endpoint id is
    left to the decorator (one request, one token). ``HEAD`` falls back to the ``GET``
    entry of a route, because Django answers ``HEAD`` with the ``GET`` view.
    """

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response
        self.async_mode = iscoroutinefunction(get_response)
        self.process_view: Callable[..., Any]
        if self.async_mode:
            markcoroutinefunction(self)
            self.process_view = self._aprocess_view
        else:
            self.process_view = self._process_view

    def __call__(self, request: HttpRequest) -> Any:
        if self.async_mode:
            return self.__acall__(request)
        response = self.get_response(request)
        _finish(request, response)
        return response

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        get_response: Callable[[HttpRequest], Awaitable[HttpResponseBase]] = self.get_response
        response = await get_response(request)
        _finish(request, response)
        return response

    def _process_view(
        self,
        request: HttpRequest,
        view_func: Callable[..., Any],
        view_args: tuple[Any, ...],
        view_kwargs: dict[str, Any],
    ) -> HttpResponseBase | None:
        endpoint_id = _endpoint_for(request, view_func)
        if endpoint_id is None:
            return None
        runtime = conf.runtime()
        runtime.ensure_started()
        return _settle(request, runtime.sentinel.guard(endpoint_id, request_view(request)))

    async def _aprocess_view(
        self,
        request: HttpRequest,
        view_func: Callable[..., Any],
        view_args: tuple[Any, ...],
        view_kwargs: dict[str, Any],
    ) -> HttpResponseBase | None:
        endpoint_id = _endpoint_for(request, view_func)
        if endpoint_id is None:
            return None
        runtime = conf.runtime()
        await runtime.aensure_started()
        outcome = await runtime.sentinel.aguard(endpoint_id, request_view(request))
        return _settle(request, outcome)


def _endpoint_for(request: HttpRequest, view_func: Callable[..., Any]) -> str | None:
    match = request.resolver_match
    if match is None:
        return None
    routes = conf.runtime().sentinel.config.routes
    if not routes:
        return None
    template = "/" + match.route.lstrip("/")
    method = request.method or "GET"
    endpoint_id = routes.get(f"{method} {template}")
    if endpoint_id is None and method == "HEAD":
        endpoint_id = routes.get(f"GET {template}")
    if endpoint_id is None or endpoint_id in view_endpoints(view_func):
        return None
    return endpoint_id


def _settle(request: HttpRequest, outcome: Outcome) -> HttpResponseBase | None:
    if not outcome.allowed:
        return denial(outcome)
    setattr(request, _OUTCOME_ATTR, outcome)
    return None


def _finish(request: HttpRequest, response: HttpResponseBase) -> None:
    outcome: Outcome | None = getattr(request, _OUTCOME_ATTR, None)
    if outcome is not None:
        allow(outcome, response)
