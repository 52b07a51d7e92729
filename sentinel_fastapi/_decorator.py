"""`@rate_limited`: guard one path operation, keeping everything FastAPI reads from it.

FastAPI builds a route's parameters, dependencies, response model and docs from the
handler's signature. The decorator returns an ``async`` wrapper whose ``__signature__``
is the handler's own plus two hidden keyword-only parameters, a `Request` (to decide)
and a `Response` (to carry the RateLimit headers onto a response FastAPI serializes
itself). FastAPI injects both without documenting them; ``functools.wraps`` keeps the
name, docstring and ``__wrapped__``, through which FastAPI resolves the handler's
string annotations in the handler's own module.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar, cast

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from sentinel_core import Sentinel

from ._routes import ENDPOINT_ATTRIBUTE, route_index
from ._translate import add_to_response, denial_response, request_view

F = TypeVar("F", bound=Callable[..., Any])

_REQUEST = "sentinel_request__"
_RESPONSE = "sentinel_response__"
STATE_ATTRIBUTE = "sentinel"
"""The ``app.state`` attribute where `Sentinel.init_app` puts the app's Sentinel."""


def rate_limited(endpoint_id: str) -> Callable[[F], F]:
    """Guard a path operation with the policy ``endpoint_id``.

    Apply it under ``@app.get(...)`` / ``@router.post(...)``, on a sync or async
    handler; the handler needs no ``request`` parameter. The Sentinel is found at
    request time through the request's app (``sentinel.init_app(app)``), so the
    decorator can be used before the app is configured; ``init_app`` checks at
    startup that ``endpoint_id`` names a policy.

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
        if {_REQUEST, _RESPONSE} & signature.parameters.keys():
            raise TypeError(f"{handler.__name__} uses a parameter name reserved by Sentinel")
        is_async = inspect.iscoroutinefunction(handler)

        @functools.wraps(handler)
        async def guarded(*args: Any, **kwargs: Any) -> Any:
            request: Request = kwargs.pop(_REQUEST)
            sub_response: Response = kwargs.pop(_RESPONSE)
            sentinel = _sentinel_of(request, endpoint_id)
            route = route_index(request.app, sentinel.config.routes).template_of(request.scope)
            outcome = await sentinel.aguard(endpoint_id, request_view(request, route))
            if not outcome.allowed:
                return denial_response(outcome)
            if is_async:
                result = await handler(*args, **kwargs)
            else:
                result = await run_in_threadpool(handler, *args, **kwargs)
            add_to_response(result if isinstance(result, Response) else sub_response, outcome)
            return result

        guarded.__signature__ = _with_hidden_parameters(signature)  # type: ignore[attr-defined]
        setattr(guarded, ENDPOINT_ATTRIBUTE, endpoint_id)
        return cast(F, guarded)

    return decorate


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


def _with_hidden_parameters(signature: inspect.Signature) -> inspect.Signature:
    """The handler's signature plus the injected request and response, keyword-only and
    placed before any ``**kwargs`` so the signature stays valid."""
    parameters = list(signature.parameters.values())
    position = len(parameters)
    if parameters and parameters[-1].kind is inspect.Parameter.VAR_KEYWORD:
        position -= 1
    hidden = [
        inspect.Parameter(_REQUEST, inspect.Parameter.KEYWORD_ONLY, annotation=Request),
        inspect.Parameter(_RESPONSE, inspect.Parameter.KEYWORD_ONLY, annotation=Response),
    ]
    return signature.replace(parameters=parameters[:position] + hidden + parameters[position:])


def _sentinel_of(request: Request, endpoint_id: str) -> Sentinel:
    sentinel = getattr(request.app.state, STATE_ATTRIBUTE, None)
    if not isinstance(sentinel, Sentinel):
        # Failing the request beats serving it unguarded.
        raise RuntimeError(
            f"@rate_limited({endpoint_id!r}): no Sentinel on this app; call sentinel.init_app(app)"
        )
    return sentinel
