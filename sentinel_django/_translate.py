"""Django request in, core request view out; core outcome in, Django response out.

Nothing here decides anything (SPEC §4 lives in `sentinel_core.http._outcome`): these helpers
only move values between Django's objects and the core's, for the decorator and the
middleware alike.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from asgiref.sync import async_to_sync, iscoroutinefunction, sync_to_async
from django.http import HttpRequest, HttpResponse, HttpResponseBase  # type: ignore[import-untyped]
from django.http.request import HttpHeaders  # type: ignore[import-untyped]

from sentinel_core.adapter import Admission, Outcome, RequestView, response_fields


class MetaHeaders(Mapping[str, str]):
    """The request's headers, case-insensitive, looked up in ``META`` on demand.

    Django's ``request.headers`` parses every ``META`` entry the first time it is read;
    the guard needs one header (``Authorization``), so it reads that one, by the same
    rules (``HTTP_<NAME>``, plus ``CONTENT_TYPE`` and ``CONTENT_LENGTH``; ``_`` and ``-``
    alike, as ``HttpHeaders`` looks names up). Iterating falls back to it.
    """

    __slots__ = ("_meta",)

    def __init__(self, meta: Mapping[str, Any]) -> None:
        self._meta = meta

    def __getitem__(self, name: str) -> str:
        value: str = self._meta[_meta_key(name)]
        return value

    def get(self, name: str, default: Any = None) -> Any:
        # Mapping.get would go through __getitem__ and a KeyError: this is the lookup
        # the core makes on every request.
        return self._meta.get(_meta_key(name), default)

    def __iter__(self) -> Iterator[str]:
        return iter(HttpHeaders(self._meta))

    def __len__(self) -> int:
        return len(HttpHeaders(self._meta))


@functools.lru_cache(maxsize=256)
def _meta_key(name: str) -> str:
    """The ``META`` key of header ``name``, made once per name (the core asks for the
    same few names on every request; they are server code's, never a client's)."""
    key = name.upper().replace("-", "_")
    return key if key in HttpHeaders.UNPREFIXED_HEADERS else HttpHeaders.HTTP_PREFIX + key


def request_view(request: HttpRequest) -> RequestView:
    """What the core needs of ``request``; the peer is ``REMOTE_ADDR`` and nothing else
    (proxies' headers are ignored: trusting them is the deployment's business)."""
    match = request.resolver_match
    meta = request.META
    return RequestView(
        method=request.method or "GET",
        route=None if match is None else _route_of_template(match.route),
        headers=MetaHeaders(meta),
        cookies=LazyCookies(request),
        peer=meta.get("REMOTE_ADDR"),
        native=request,
    )


def route_of(template: str) -> str:
    """A resolved route template (``match.route``, ``"v1/items/<int:pk>"``) as the core
    spells routes: ``"/v1/items/<int:pk>"``."""
    return "/" + template.lstrip("/")


_route_of_template = functools.lru_cache(maxsize=1024)(route_of)
"""`route_of`, made once per template (a URLconf has a fixed set of them)."""


class LazyCookies(Mapping[str, str]):
    """The request's cookies, parsed only when read: tenant policies never read them."""

    __slots__ = ("_request",)

    def __init__(self, request: HttpRequest) -> None:
        self._request = request

    def __getitem__(self, name: str) -> str:
        value: str = self._request.COOKIES[name]
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._request.COOKIES)

    def __len__(self) -> int:
        return len(self._request.COOKIES)


def django_user(request: HttpRequest) -> str | None:
    """The default ``identify``: the primary key of the request's authenticated user.

    That is ``request.user`` (Django's ``AuthenticationMiddleware``), except on a Django
    REST framework view, whose own authentication classes name the user: DRF runs them
    inside the view, after the middleware has admitted the request, so they are run here
    first (`drf_user`); a `SentinelThrottle` runs after them and finds the user set."""
    user = getattr(request, "user", None)
    if not getattr(request, DRF_AUTHENTICATED, False):
        view_class = getattr(getattr(request.resolver_match, "func", None), "cls", None)
        if hasattr(view_class, "get_authenticators"):
            user = drf_user(request, view_class)
    if user is None or not user.is_authenticated:
        return None
    return str(user.pk)


DRF_AUTHENTICATED = "_sentinel_drf_authenticated"
"""On a request: DRF has authenticated it (a `SentinelThrottle` runs after that)."""


def drf_user(request: HttpRequest, view_class: Any) -> Any:
    """The user a DRF view's authentication classes find (None when a credential is
    refused: DRF answers that request itself, with its 401 or 403). DRF is installed:
    the view is one of its views."""
    from rest_framework.exceptions import APIException  # type: ignore[import-untyped]
    from rest_framework.request import Request  # type: ignore[import-untyped]

    view = view_class(**getattr(request.resolver_match.func, "initkwargs", {}))
    try:
        return Request(request, authenticators=view.get_authenticators()).user
    except APIException:
        return None


def find_request(args: tuple[Any, ...]) -> HttpRequest:
    """The `HttpRequest` among a view's positional arguments.

    Function views and ``method_decorator`` pass it first; a method decorated without
    ``method_decorator`` gets ``self`` first. A Django REST framework ``Request`` wraps
    the Django one in ``_request``.

    Raises:
        TypeError: no argument is a request (the decorator is on something not a view).
    """
    if args and isinstance(args[0], HttpRequest):  # a function view's: the usual case
        return args[0]
    for arg in args[:2]:
        native = getattr(arg, "_request", arg)
        if isinstance(native, HttpRequest):
            return native
    raise TypeError("@rate_limited: the decorated callable was not given an HttpRequest")


def denial(outcome: Outcome) -> HttpResponse:
    """The response for a denied request: the outcome's status, headers and body."""
    response = HttpResponse(outcome.body, status=outcome.status, content_type=outcome.media_type)
    for name, value in outcome.headers:
        if name.lower() != "content-type":
            response[name] = value
    return response


def rendered_denial(
    view: Callable[..., Any] | None, request: HttpRequest, outcome: Outcome
) -> HttpResponseBase:
    """A denial as ``SENTINEL["denial_view"]`` renders it (a sync view; an async one
    through ``async_to_sync``), with the denial's headers; SPEC §4's response without a
    view, and for a refusal without a decision (a 401)."""
    if view is None or outcome.decision is None:
        return denial(outcome)
    if iscoroutinefunction(view):
        view = async_to_sync(view)
    return with_denial_headers(view(request, outcome.decision), outcome)


async def arendered_denial(
    view: Callable[..., Any] | None, request: HttpRequest, outcome: Outcome
) -> HttpResponseBase:
    """`rendered_denial` on the event loop: an async view awaited, a sync one in a thread."""
    if view is None or outcome.decision is None:
        return denial(outcome)
    if not iscoroutinefunction(view):
        view = sync_to_async(view)
    return with_denial_headers(await view(request, outcome.decision), outcome)


def with_denial_headers(response: object, outcome: Outcome) -> HttpResponseBase:
    """The denial view's response with the denial's Retry-After and RateLimit fields."""
    if not isinstance(response, HttpResponseBase):
        raise TypeError(
            f"SENTINEL['denial_view'] returned {type(response).__name__}, not an HttpResponse"
        )
    for name, value in outcome.headers:
        if name != "Content-Type":
            response[name] = value
    return response


def decorate(response: HttpResponseBase, admissions: Sequence[Admission], status: int) -> None:
    """Add the request's admissions' RateLimit fields and device cookie to the view's
    response, of status ``status``."""
    headers, cookie = response_fields(admissions, status)
    fields = response.headers  # one lookup: each `response[name] =` makes it again
    for name, value in headers:
        fields[name] = value
    if cookie is not None:
        response.set_cookie(**cookie.set_cookie_arguments())
