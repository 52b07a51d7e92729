"""``SentinelMiddleware``: admits every request on the endpoint ids it pays for.

Routes are matched on the resolved route template (``request.resolver_match.route``,
spelled as in ``urls.py``: ``"POST v1/items/<int:pk>"``), never on the raw URL, so
``/v1/items/1`` and ``/v1/items/01`` are one route. Admission runs in
``process_view``, the first hook where the match exists, on the ids of the ``routes``
entry and of the view's ``@rate_limited`` decorators together (the core's rule: one
id is charged once); the admission is completed on the way out. A function view
answers every method with one body, so a ``routes`` entry guards all of them: a
method the route has no entry for pays every entry of that route (a class-based view
answers only the methods it defines, 405 for the others, and keeps one entry per
method). ``routes["*"]`` charges every other routed view (DRF's included), except
``@exempt`` ones and DRF views that name their own id to ``SentinelThrottle``.

The middleware is sync and async capable. In async mode ``process_view`` is a
coroutine function, so Django awaits it on the event loop with the asyncio store
instead of sending it to a thread.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponseBase  # type: ignore[import-untyped]

from . import conf
from ._lifecycle import aadmit, admit, afinish, enter_middleware, finish, passage_of
from ._runtime import NOTHING, Charged, Runtime
from ._translate import route_of
from .decorators import answers_any_method, method_endpoints, takes_default

GetResponse = Callable[[HttpRequest], Any]


class SentinelMiddleware:
    """Rate limit the routes of ``settings.SENTINEL["routes"]`` and the decorated views.

    ``HEAD`` falls back to the ``GET`` entry of a route, because Django answers ``HEAD``
    with the ``GET`` view.
    """

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: GetResponse) -> None:
        # An invalid SENTINEL (a redis_url that does not parse, say) stops the handler
        # from loading (a server's worker boot, runserver): a load-time error, never a
        # 500 on every guarded request. ``manage.py check`` reports it as sentinel.E001.
        conf.runtime()
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
        passage = enter_middleware(request)
        response = passage.answer(self.get_response(request))
        if passage.admissions:  # a request admitted on nothing has nothing to finish
            finish(passage, response)
        return response

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        get_response: Callable[[HttpRequest], Awaitable[HttpResponseBase]] = self.get_response
        passage = enter_middleware(request)
        response = passage.answer(await get_response(request))
        if passage.admissions:
            await afinish(passage, response)
        return response

    def _process_view(
        self,
        request: HttpRequest,
        view_func: Callable[..., Any],
        view_args: tuple[Any, ...],
        view_kwargs: dict[str, Any],
    ) -> HttpResponseBase | None:
        runtime = conf.runtime()
        if not runtime.enabled:  # SPEC §2: served untouched
            return None
        charged = _charged(runtime, request, view_func)
        if charged.endpoints:
            return admit(request, passage_of(request), runtime, charged)
        return None

    async def _aprocess_view(
        self,
        request: HttpRequest,
        view_func: Callable[..., Any],
        view_args: tuple[Any, ...],
        view_kwargs: dict[str, Any],
    ) -> HttpResponseBase | None:
        runtime = conf.runtime()
        if not runtime.enabled:
            return None
        charged = _charged(runtime, request, view_func)
        if charged.endpoints:
            return await aadmit(request, passage_of(request), runtime, charged)
        return None


def _charged(runtime: Runtime, request: HttpRequest, view_func: Callable[..., Any]) -> Charged:
    """What a request pays for, compiled once per resolved route, view and method (it
    depends on nothing else)."""
    match = request.resolver_match
    if match is None:
        return NOTHING
    method = request.method or "GET"
    key = (match.route, view_func, method)
    charged = runtime.routes.get(key)
    if charged is None:
        ids = runtime.sentinel.route_table.charged(
            method,
            (route_of(match.route),),
            method_endpoints(view_func, method),
            default=takes_default(view_func),
            any_method=answers_any_method(view_func),
        )
        charged = runtime.routes[key] = runtime.compile(ids)
    return charged
