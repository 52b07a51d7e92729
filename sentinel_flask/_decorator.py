"""``@rate_limited(endpoint_id)`` and the marker that lets the extension find guarded views.

The decorator is applied under ``@app.route`` (or ``@bp.route``, or on a `MethodView`
method) and looks the app's Sentinel up through `flask.current_app` at request time,
so it can decorate views before any app exists (the app-factory pattern). It records
its endpoint ids on the view function, which is how the extension validates them at
start-up and how the ``routes`` middleware knows to leave a decorated view alone.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar, cast

from ._guard import guard_request

F = TypeVar("F", bound=Callable[..., Any])

ENDPOINTS_ATTRIBUTE = "__sentinel_endpoints__"


def rate_limited(endpoint_id: str) -> Callable[[F], F]:
    """Guard a view with the policy ``endpoint_id``.

    A denied request gets the 401/429/503 response of SPEC §4 and the view does not
    run; an allowed one runs the view and its response gains the RateLimit headers
    (and, for anonymous policies, the device cookie). Works on sync and async views;
    keeps the view's name and docstring.
    """
    if not isinstance(endpoint_id, str) or not endpoint_id:
        raise TypeError(
            "rate_limited() takes the endpoint id, e.g. @rate_limited('pdftalk.ingest')"
        )

    def decorate(view: F) -> F:
        if inspect.iscoroutinefunction(view):

            @functools.wraps(view)
            async def guarded_async(*args: Any, **kwargs: Any) -> Any:
                denial = guard_request(endpoint_id)
                if denial is not None:
                    return denial
                return await view(*args, **kwargs)

            guarded: Callable[..., Any] = guarded_async
        else:

            @functools.wraps(view)
            def guarded_sync(*args: Any, **kwargs: Any) -> Any:
                denial = guard_request(endpoint_id)
                if denial is not None:
                    return denial
                return view(*args, **kwargs)

            guarded = guarded_sync
        # functools.wraps copied the inner view's ids (stacked decorators); add ours.
        setattr(guarded, ENDPOINTS_ATTRIBUTE, (*endpoints_of(view), endpoint_id))
        return cast(F, guarded)

    return decorate


def endpoints_of(function: object) -> tuple[str, ...]:
    """The endpoint ids ``@rate_limited`` put on ``function`` (empty when undecorated)."""
    endpoints = getattr(function, ENDPOINTS_ATTRIBUTE, ())
    return endpoints if isinstance(endpoints, tuple) else ()


def handler_endpoints(view_function: object, method: str) -> tuple[str, ...]:
    """The endpoint ids guarding ``method`` on a registered view function.

    A class-based view (``View.as_view``) is the function Flask registered, but the
    decorated code is the class's method handler: look there too, resolving HEAD to
    GET as `MethodView.dispatch_request` does.
    """
    endpoints = endpoints_of(view_function)
    view_class = getattr(view_function, "view_class", None)
    if view_class is None:
        return endpoints
    handler = getattr(view_class, method.lower(), None)
    if handler is None and method == "HEAD":
        handler = getattr(view_class, "get", None)
    if handler is None:
        # A plain `View` (not a MethodView) answers every method in dispatch_request.
        handler = getattr(view_class, "dispatch_request", None)
    return endpoints + endpoints_of(handler)


def all_endpoints(view_function: object) -> tuple[str, ...]:
    """Every endpoint id used on a registered view function or its class's handlers."""
    endpoints = endpoints_of(view_function)
    view_class = getattr(view_function, "view_class", None)
    if view_class is None:
        return endpoints
    for name in dir(view_class):
        endpoints += endpoints_of(getattr(view_class, name, None))
    return endpoints
