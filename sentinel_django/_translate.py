"""Django request in, core request view out; core outcome in, Django response out.

Nothing here decides anything (SPEC §4 lives in `sentinel_core.http._outcome`): these helpers
only move values between Django's objects and the core's, for the decorator and the
middleware alike.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

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
        key = name.upper().replace("-", "_")
        if key not in HttpHeaders.UNPREFIXED_HEADERS:
            key = HttpHeaders.HTTP_PREFIX + key
        value: str = self._meta[key]
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(HttpHeaders(self._meta))

    def __len__(self) -> int:
        return len(HttpHeaders(self._meta))


def request_view(request: HttpRequest) -> RequestView:
    """What the core needs of ``request``; the peer is ``REMOTE_ADDR`` and nothing else
    (proxies' headers are ignored: trusting them is the deployment's business)."""
    match = request.resolver_match
    route = None if match is None else "/" + match.route.lstrip("/")
    return RequestView(
        method=request.method or "GET",
        route=route,
        headers=MetaHeaders(request.META),
        cookies=request.COOKIES,
        peer=request.META.get("REMOTE_ADDR"),
        native=request,
    )


def find_request(args: tuple[Any, ...]) -> HttpRequest:
    """The `HttpRequest` among a view's positional arguments.

    Function views and ``method_decorator`` pass it first; a method decorated without
    ``method_decorator`` gets ``self`` first. A Django REST framework ``Request`` wraps
    the Django one in ``_request``.

    Raises:
        TypeError: no argument is a request (the decorator is on something not a view).
    """
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


def decorate(response: HttpResponseBase, admissions: Sequence[Admission]) -> None:
    """Add the request's admissions' RateLimit fields and device cookie to the view's
    response."""
    headers, cookie = response_fields(admissions, response.status_code)
    for name, value in headers:
        response[name] = value
    if cookie is not None:
        response.set_cookie(**cookie.set_cookie_arguments())
