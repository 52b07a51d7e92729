"""The request view the adapter hands to the core reads what Django would read."""

from __future__ import annotations

import pytest
from django.test import AsyncRequestFactory, RequestFactory

from sentinel_django._translate import MetaHeaders, request_view

HEADERS = {"Authorization": "Bearer abc", "X-Custom-Thing": "1", "Content-Type": "text/plain"}
NAMES = [
    "authorization",
    "AUTHORIZATION",
    "Authorization",
    "x-custom-thing",
    "X-Custom-Thing",
    "content-type",
    "x_custom_thing",  # HttpHeaders reads "_" as "-"
    "missing",
    "",
]


@pytest.mark.parametrize("factory", [RequestFactory(), AsyncRequestFactory()], ids=["wsgi", "asgi"])
def test_meta_headers_look_up_like_django_request_headers(factory: RequestFactory) -> None:
    request = factory.post("/x", data="body", content_type="text/plain", headers=HEADERS)
    headers = MetaHeaders(request.META)

    for name in NAMES:
        assert headers.get(name) == request.headers.get(name), name
    assert dict(headers) == dict(request.headers)
    assert len(headers) == len(request.headers)


def test_request_view_takes_the_peer_from_remote_addr_only() -> None:
    request = RequestFactory().get(
        "/x", REMOTE_ADDR="192.0.2.1", headers={"X-Forwarded-For": "198.51.100.9"}
    )
    view = request_view(request)

    assert view.peer == "192.0.2.1"
    assert view.method == "GET"
    assert view.route is None  # not resolved: a decorator outside the URLconf


def test_request_view_parses_the_cookies_only_when_they_are_read() -> None:
    request = RequestFactory().get("/x", headers={"Cookie": "sentinel_device=abc; theme=dark"})
    view = request_view(request)

    assert "COOKIES" not in vars(request)  # Django's cached_property: not parsed yet
    assert view.cookies.get("sentinel_device") == "abc"
    assert view.cookies.get("missing") is None
    assert dict(view.cookies) == request.COOKIES
    assert len(view.cookies) == 2
