"""What the core sees of a Flask request: headers and cookies as read-only mappings."""

from __future__ import annotations

from flask import Flask, request

from sentinel_flask._translate import request_view


def test_headers_iterate_by_name_and_look_up_case_insensitively() -> None:
    app = Flask("headers")
    headers = {"Authorization": "Bearer x", "X-Trace": "t-1", "Content-Type": "text/plain"}
    with app.test_request_context("/", headers=headers, environ_base={"REMOTE_ADDR": "192.0.2.1"}):
        view = request_view(request, "/")

        assert view.headers["authorization"] == "Bearer x"
        assert view.headers.get("x-TRACE") == "t-1"
        assert view.headers.get("content-type") == "text/plain"
        assert view.headers.get("x-missing", "none") == "none"
        assert {name.lower() for name in view.headers} >= {"authorization", "x-trace"}
        assert len(view.headers) == len(request.headers)
        assert dict(view.headers)["X-Trace"] == "t-1"
        assert "x-missing" not in view.headers
        assert view.peer == "192.0.2.1"


def test_cookies_iterate_by_name_and_count_like_the_requests_cookies() -> None:
    app = Flask("cookies")
    cookie = "sentinel_device=abc; theme=dark"
    with app.test_request_context("/", headers={"Cookie": cookie}):
        view = request_view(request, "/")

        assert sorted(view.cookies) == ["sentinel_device", "theme"]
        assert len(view.cookies) == 2
        assert dict(view.cookies) == {"sentinel_device": "abc", "theme": "dark"}


def test_a_request_without_cookies_has_an_empty_cookie_mapping() -> None:
    app = Flask("no-cookies")
    with app.test_request_context("/items/7"):
        view = request_view(request, "/items/<int:item_id>")

        assert list(view.cookies) == []
        assert len(view.cookies) == 0
        assert view.route == "/items/<int:item_id>"
