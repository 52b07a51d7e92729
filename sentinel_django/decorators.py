"""``@rate_limited(endpoint_id)`` for function, class-based and async views.

The decorator finds the Sentinel instance through the settings at request time, so it
can decorate views before settings are configured, and keeps its endpoint compiled for
that instance (compiled again only when the settings build another). Sync views are guarded with the
blocking Redis store and async views with the asyncio store: no ``async_to_sync``
round trip on the hot path. The endpoint ids are recorded on the decorated view
(``sentinel_endpoints``) so that the system checks can find them by walking the URL
resolver, and the middleware admits a request on them together with its ``routes``
entry; a decorator only admits what the request has not been admitted on yet.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from asgiref.sync import iscoroutinefunction

from . import conf
from ._lifecycle import aserve, serve
from ._runtime import Charged, Runtime
from ._translate import find_request

ENDPOINTS_ATTR = "sentinel_endpoints"
"""The tuple of endpoint ids guarding a view, set on its wrapper (and on a class)."""
EXEMPT_ATTR = "sentinel_exempt"
"""True on a view (function or class) that ``routes["*"]`` passes by."""

V = TypeVar("V")


def rate_limited(endpoint_id: str) -> Callable[[V], V]:
    """Guard a view with the policy ``endpoint_id`` of ``settings.SENTINEL``.

    Works on a function view (sync or async), on a class-based view class (its
    ``dispatch`` is guarded; Django REST framework ``APIView`` subclasses included), on
    a handler method directly or through ``method_decorator`` (for an ``async`` method,
    ``method_decorator`` needs Django 5.0; decorating it directly works on every
    version), and stacked (every guard must allow).
    """

    def decorate(view: V) -> V:
        if isinstance(view, type):
            return cast(V, _guard_class(view, endpoint_id))
        if not callable(view):
            raise TypeError(f"@rate_limited({endpoint_id!r}) needs a view, got {view!r}")
        if _is_async(view):
            return cast(V, _async_view(view, endpoint_id))
        return cast(V, _sync_view(view, endpoint_id))

    return decorate


def exempt(view: V) -> V:
    """Leave a view out of ``routes["*"]``, the default limit (SPEC §5): a health check,
    a webhook with its own protection. On a function view (sync or async) or a
    class-based view class (DRF's included). ``@rate_limited``, ``SentinelThrottle``
    and ``routes`` entries naming the view still apply: only the default passes it by."""
    setattr(view, EXEMPT_ATTR, True)
    return view


def takes_default(callback: Callable[..., Any]) -> bool:
    """Whether ``routes["*"]`` may charge a routed view: not when it is ``@exempt``,
    nor when it names its own id to ``SentinelThrottle`` (DRF's throttle guards it,
    as a decorator would)."""
    cls = getattr(callback, "view_class", None) or getattr(callback, "cls", None)
    if getattr(callback, EXEMPT_ATTR, False) or getattr(cls, EXEMPT_ATTR, False):
        return False
    return not _throttled_by_sentinel(cls)


def answers_any_method(callback: Callable[..., Any]) -> bool:
    """Whether a routed view answers every method with one body: a function view, not
    a class-based one (Django's ``View`` and DRF's answer 405 to a method they do not
    define)."""
    return getattr(callback, "view_class", None) is None and getattr(callback, "cls", None) is None


def _throttled_by_sentinel(cls: object) -> bool:
    return isinstance(getattr(cls, "sentinel_endpoint", None), str) and uses_sentinel_throttle(cls)


def uses_sentinel_throttle(cls: object) -> bool:
    """Whether a view class lists ``SentinelThrottle`` (or a subclass) among its DRF
    ``throttle_classes``."""
    throttles = getattr(cls, "throttle_classes", None)
    if not throttles:
        return False
    from .throttling import SentinelThrottle  # DRF is there: the view is an APIView

    return any(isinstance(t, type) and issubclass(t, SentinelThrottle) for t in throttles)


def endpoints_of(view: object) -> tuple[str, ...]:
    """The endpoint ids recorded on ``view`` by `rate_limited`."""
    ids = getattr(view, ENDPOINTS_ATTR, ())
    return tuple(ids) if isinstance(ids, tuple) else ()


def view_endpoints(callback: Callable[..., Any]) -> tuple[str, ...]:
    """Every endpoint id guarding a routed view: on the callback, and for a class-based
    view on its class (Django ``view_class``, DRF ``cls``), its handler methods and a DRF
    viewset's actions."""
    ids = list(endpoints_of(callback))
    cls = getattr(callback, "view_class", None) or getattr(callback, "cls", None)
    if isinstance(cls, type):
        ids += endpoints_of(cls)
        actions = getattr(callback, "actions", None) or {}
        names = {"dispatch", *getattr(cls, "http_method_names", ()), *actions.values()}
        for name in sorted(names):
            ids += endpoints_of(getattr(cls, name, None))
    return tuple(dict.fromkeys(ids))


def method_endpoints(callback: Callable[..., Any], method: str) -> tuple[str, ...]:
    """The endpoint ids guarding a ``method`` request to a routed view: the callback's,
    and for a class-based view its class's, its ``dispatch``'s and the handler that
    answers ``method`` (HEAD falling back to ``get`` as Django's `View` does; a DRF
    viewset's action for the method)."""
    ids = list(endpoints_of(callback))
    cls = getattr(callback, "view_class", None) or getattr(callback, "cls", None)
    if isinstance(cls, type):
        actions = getattr(callback, "actions", None) or {}
        name = actions.get(method.lower(), method.lower())
        handler = getattr(cls, name, None)
        if handler is None and method == "HEAD":
            handler = getattr(cls, actions.get("get", "get"), None)
        ids += endpoints_of(cls) + endpoints_of(getattr(cls, "dispatch", None))
        ids += endpoints_of(handler)
    return tuple(dict.fromkeys(ids))


def _record(wrapper: Any, view: object, endpoint_id: str) -> None:
    setattr(wrapper, ENDPOINTS_ATTR, (*endpoints_of(view), endpoint_id))


def _is_async(view: Callable[..., Any]) -> bool:
    """True for a coroutine function, and for the ``dispatch`` of an async class-based
    view as ``method_decorator`` hands it over: a partial of the bound method, itself
    sync but returning the async handler's coroutine."""
    if iscoroutinefunction(view):
        return True
    bound = getattr(view, "func", None)
    instance = getattr(bound, "__self__", None)
    return getattr(bound, "__name__", None) == "dispatch" and _view_class_is_async(type(instance))


def _view_class_is_async(cls: type) -> bool:
    return bool(getattr(cls, "view_is_async", False))


class _Guard:
    """One ``@rate_limited(endpoint_id)``: its id, compiled for the current `Runtime`."""

    __slots__ = ("_compiled", "endpoint_id")

    def __init__(self, endpoint_id: str) -> None:
        self.endpoint_id = endpoint_id
        self._compiled: tuple[Runtime | None, Charged | None] = (None, None)

    def charged(self, runtime: Runtime) -> Charged:
        """What a request pays for: compiled at the first request `runtime` serves
        (one tuple, read and replaced whole, so threads never see half of it)."""
        owner, charged = self._compiled
        if owner is not runtime or charged is None:
            charged = runtime.compile((self.endpoint_id,))
            self._compiled = (runtime, charged)
        return charged


def _sync_view(view: Callable[..., Any], endpoint_id: str) -> Callable[..., Any]:
    guard = _Guard(endpoint_id)

    @functools.wraps(view)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        return _call(view, guard, args, kwargs)

    _record(guarded, view, endpoint_id)
    return guarded


def _async_view(view: Callable[..., Any], endpoint_id: str) -> Callable[..., Any]:
    guard = _Guard(endpoint_id)

    @functools.wraps(view)
    async def guarded(*args: Any, **kwargs: Any) -> Any:
        return await _acall(view, guard, args, kwargs)

    _record(guarded, view, endpoint_id)
    return guarded


def _guard_class(cls: type, endpoint_id: str) -> type:
    """Guard a view class by wrapping its ``dispatch``, sync or async per request as the
    class's handlers are (Django's ``View.view_is_async``)."""
    dispatch = getattr(cls, "dispatch", None)
    if not callable(dispatch):
        raise TypeError(f"@rate_limited({endpoint_id!r}): {cls.__name__} has no dispatch()")
    guard = _Guard(endpoint_id)

    @functools.wraps(dispatch)
    def guarded_dispatch(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _view_class_is_async(type(self)):
            return _acall(dispatch, guard, (self, *args), kwargs)
        return _call(dispatch, guard, (self, *args), kwargs)

    _record(guarded_dispatch, dispatch, endpoint_id)
    cls.dispatch = guarded_dispatch  # type: ignore[attr-defined]
    _record(cls, cls, endpoint_id)
    return cls


def _call(
    view: Callable[..., Any], guard: _Guard, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    request = find_request(args)
    runtime = conf.runtime()
    if not runtime.enabled:  # SPEC §2: served untouched
        return view(*args, **kwargs)
    return serve(request, runtime, guard.charged(runtime), view, args, kwargs)


async def _acall(
    view: Callable[..., Awaitable[Any]],
    guard: _Guard,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    request = find_request(args)
    runtime = conf.runtime()
    if not runtime.enabled:
        return await view(*args, **kwargs)
    return await aserve(request, runtime, guard.charged(runtime), view, args, kwargs)
