"""``@rate_limited(endpoint_id)``: the endpoint ids a view pays for, recorded on it.

The decorator is applied under ``@app.route`` (or ``@bp.route``, or on a `MethodView`
method). It records its endpoint ids on the view function; the extension's
``before_request`` reads them there, with the ``routes`` entry of the matched rule,
and admits the request once for all of them (SPEC §5). The wrapper only checks that
this happened, so it can decorate views before any app exists (the app-factory
pattern), and a view served without Sentinel fails instead of running unguarded.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar, cast

from flask import g

from ._guard import ADMITTED, not_admitted

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

ENDPOINTS_ATTRIBUTE = "__sentinel_endpoints__"
EXEMPT_ATTRIBUTE = "__sentinel_exempt__"


def rate_limited(endpoint_id: str) -> Callable[[F], F]:
    """Guard a view with the policy ``endpoint_id``.

    A denied request gets the 401/429/503 response of SPEC §4 and the view does not
    run; an allowed one runs the view and its response gains the RateLimit fields
    (and, for anonymous policies, the device cookie). Works on sync and async views;
    keeps the view's name and docstring. Stacked decorators all apply.
    """
    if not isinstance(endpoint_id, str) or not endpoint_id:
        raise TypeError(
            "rate_limited() takes the endpoint id, e.g. @rate_limited('pdftalk.ingest')"
        )

    def decorate(view: F) -> F:
        if inspect.iscoroutinefunction(view):

            @functools.wraps(view)
            async def guarded_async(*args: Any, **kwargs: Any) -> Any:
                if endpoint_id not in getattr(g._get_current_object(), ADMITTED, ()):
                    raise not_admitted(endpoint_id)
                return await view(*args, **kwargs)

            guarded: Callable[..., Any] = guarded_async
        else:

            @functools.wraps(view)
            def guarded_sync(*args: Any, **kwargs: Any) -> Any:
                if endpoint_id not in getattr(g._get_current_object(), ADMITTED, ()):
                    raise not_admitted(endpoint_id)
                return view(*args, **kwargs)

            guarded = guarded_sync
        # functools.wraps copied the inner view's ids (stacked decorators); add ours.
        setattr(guarded, ENDPOINTS_ATTRIBUTE, (*endpoints_of(view), endpoint_id))
        return cast(F, guarded)

    return decorate


def exempt(view: T) -> T:
    """Leave a view out of ``routes["*"]``, the default limit (SPEC §5): a health check,
    a webhook with its own protection. Under or over ``@app.route``, on a view function,
    a `MethodView` (class or method), or a `Blueprint` (every view it serves), as
    Flask-Limiter's ``exempt`` does. ``@rate_limited`` and ``routes`` entries naming
    the view still apply: only the default passes it by."""
    setattr(view, EXEMPT_ATTRIBUTE, True)
    return view


def is_exempt(view_function: object, method: str) -> bool:
    """Whether ``@exempt`` marks the view answering ``method`` (for a class-based view:
    the class, or the method handler that answers)."""
    if getattr(view_function, EXEMPT_ATTRIBUTE, False):
        return True
    view_class = getattr(view_function, "view_class", None)
    if view_class is None:
        return False
    handler = getattr(view_class, method.lower(), None)
    if handler is None and method == "HEAD":
        handler = getattr(view_class, "get", None)
    return bool(getattr(view_class, EXEMPT_ATTRIBUTE, False)) or bool(
        getattr(handler, EXEMPT_ATTRIBUTE, False)
    )


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
