"""`@rate_limited` and `rate_limit`: name the endpoint id of a path operation.

Neither decides anything: the guard that `Sentinel.init_app` puts on the route finds
their ids on it (the handler's, and every dependency's in its tree) and admits the
request once for all of them (SPEC §5). The wrapper only makes sure that
happened, so a route served without Sentinel fails instead of running unguarded.

FastAPI builds a route's parameters, dependencies, response model and docs from the
handler's signature. The decorator returns an ``async`` wrapper whose ``__signature__``
is the handler's own plus a hidden keyword-only `Request` parameter, which FastAPI
injects without documenting; ``functools.wraps`` keeps the name, docstring and
``__wrapped__``, through which FastAPI resolves the handler's string annotations in
the handler's own module.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from ._routes import ENDPOINT_ATTRIBUTE, EXEMPT_ATTRIBUTE
from ._translate import ADMITTED

F = TypeVar("F", bound=Callable[..., Any])

_REQUEST = "sentinel_request__"
STATE_ATTRIBUTE = "sentinel"
"""The ``app.state`` attribute where `Sentinel.init_app` puts the app's Sentinel."""


def rate_limited(endpoint_id: str) -> Callable[[F], F]:
    """Guard a path operation with the policy ``endpoint_id``.

    Apply it under ``@app.get(...)`` / ``@router.post(...)``, on a sync or async
    handler; the handler needs no ``request`` parameter. The decorator only names
    the id: the route guard of ``sentinel.init_app(app)`` admits the request, so it
    can be used before the app is configured; startup checks that ``endpoint_id``
    names a policy.

    Raises:
        TypeError: the handler is a generator (a streaming endpoint FastAPI drives
            itself; guard it through ``routes`` instead), or is already rate limited.
    """

    def decorate(handler: F) -> F:
        if inspect.isgeneratorfunction(handler) or inspect.isasyncgenfunction(handler):
            raise TypeError(
                f"@rate_limited({endpoint_id!r}) cannot wrap the generator {handler.__name__}: "
                "guard it with a `routes` entry instead"
            )
        if getattr(handler, ENDPOINT_ATTRIBUTE, None) is not None:
            raise TypeError(f"{handler.__name__} is already rate limited: use one @rate_limited")
        signature = _evaluated_signature(handler)
        if _REQUEST in signature.parameters:
            raise TypeError(f"{handler.__name__} uses a parameter name reserved by Sentinel")
        is_async = inspect.iscoroutinefunction(handler)
        # FastAPI hands the request to one parameter only: the handler's own, if it has one.
        own = _request_parameter(signature)

        @functools.wraps(handler)
        async def guarded(*args: Any, **kwargs: Any) -> Any:
            request = kwargs[own] if own is not None else kwargs.pop(_REQUEST)
            require_admitted(request, endpoint_id)
            if is_async:
                return await handler(*args, **kwargs)
            return await run_in_threadpool(handler, *args, **kwargs)

        if own is None:
            signature = _with_hidden_parameters(signature)
        guarded.__signature__ = signature  # type: ignore[attr-defined]
        setattr(guarded, ENDPOINT_ATTRIBUTE, endpoint_id)
        return cast(F, guarded)

    return decorate


def exempt(handler: F) -> F:
    """Leave a path operation out of ``routes["*"]``, the default limit (SPEC §5): a
    health check, a webhook with its own protection. Over or under ``@app.get(...)``.
    ``@rate_limited``, ``rate_limit`` dependencies and ``routes`` entries naming the
    operation still apply: only the default passes it by."""
    setattr(handler, EXEMPT_ATTRIBUTE, True)
    return handler


def _evaluated_signature(handler: Callable[..., Any]) -> inspect.Signature:
    """The handler's signature with string annotations (``from __future__ import
    annotations``) evaluated in the handler's own module.

    Older FastAPI releases (0.115 among them) evaluate them in the globals of the
    function they are given, here the wrapper's module, where the handler's types do
    not exist. A name that cannot be evaluated yet (defined after the handler) stays a
    string.
    """
    try:
        return inspect.signature(handler, eval_str=True)
    except NameError:
        return inspect.signature(handler)


def rate_limit(endpoint_id: str) -> Callable[[Request], Awaitable[None]]:
    """A dependency guarding the path operations it is given to with ``endpoint_id``:
    ``Depends(rate_limit("id"))`` on one operation, or in an ``APIRouter``'s (or the
    app's) ``dependencies=[...]`` for all of them. Charged once with a decorator or a
    ``routes`` entry naming the same id."""

    # async although it never awaits: FastAPI runs a plain function dependency in its
    # thread pool, a thread hop per request for one lookup.
    async def dependency(request: Request) -> None:
        require_admitted(request, endpoint_id)

    setattr(dependency, ENDPOINT_ATTRIBUTE, endpoint_id)
    return dependency


def require_admitted(request: Request, endpoint_id: str) -> None:
    """Raise unless Sentinel admitted this request on ``endpoint_id``: failing the
    request beats serving it unguarded."""
    if endpoint_id not in request.scope.get(ADMITTED, ()):
        raise RuntimeError(
            f"{endpoint_id!r}: this request did not pass Sentinel; call sentinel.init_app(app)"
        )


def _request_parameter(signature: inspect.Signature) -> str | None:
    """The name of the handler's own `Request` parameter, if it has one."""
    for name, parameter in signature.parameters.items():
        annotation = parameter.annotation
        if isinstance(annotation, type) and issubclass(annotation, Request):
            return name
    return None


def _with_hidden_parameters(signature: inspect.Signature) -> inspect.Signature:
    """The handler's signature plus the injected request, keyword-only and placed
    before any ``**kwargs`` so the signature stays valid."""
    parameters = list(signature.parameters.values())
    position = len(parameters)
    if parameters and parameters[-1].kind is inspect.Parameter.VAR_KEYWORD:
        position -= 1
    hidden = [inspect.Parameter(_REQUEST, inspect.Parameter.KEYWORD_ONLY, annotation=Request)]
    return signature.replace(parameters=parameters[:position] + hidden + parameters[position:])
