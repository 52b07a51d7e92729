"""Per-user limits from the app's own auth (a login kept in Flask's session, Flask-Login,
an API key), all through ``Sentinel(identify=fn)``, the anonymous fallback, and denials
rendered by the app's ``@app.errorhandler(429)`` / ``(503)`` (SPEC §2 ``identity: "user"``,
SPEC §5)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from flask import Flask, Request, jsonify, session
from flask.testing import FlaskClient
from flask_login import LoginManager, UserMixin, current_user, login_user, logout_user
from jinja2 import DictLoader
from prometheus_client import CollectorRegistry
from werkzeug.exceptions import HTTPException
from werkzeug.test import TestResponse

from sentinel_core import ConfigError, DecisionReason
from sentinel_core.testing import ratelimit_headers
from sentinel_flask import RateLimiterUnavailable, RateLimitExceeded, Sentinel, rate_limited
from tests.support.docs import snippets
from tests.support.users import USER_POLICY, api_key_user, user_config


def session_user(request: Request) -> str | None:
    """What an app keeping its login in Flask's session would write."""
    user: str | None = session.get("user_id")
    return user


Identify = Callable[[Request], "str | None"]


@pytest.fixture
def make() -> Iterator[Callable[..., Flask]]:
    apps: list[Flask] = []

    def build(config: dict[str, Any], identify: Identify | None = session_user) -> Flask:
        app = Flask(f"users_{len(apps)}")
        app.config.update(TESTING=True, SECRET_KEY="flask-tests-only", SENTINEL=config)

        @app.post("/login/<name>")
        def login(name: str) -> str:
            session["user_id"] = name
            return "welcome"

        @app.post("/logout")
        def logout() -> str:
            session.clear()
            return "bye"

        @app.get("/search")
        @rate_limited(USER_POLICY)
        def search() -> dict[str, str]:
            return {"user": session.get("user_id", "")}

        @app.get("/tenant")
        @rate_limited("pdftalk.ingest")
        def tenant() -> str:
            return "ok"

        Sentinel(app, registry=CollectorRegistry(), identify=identify)
        apps.append(app)
        return app

    yield build
    for app in apps:
        app.extensions["sentinel"].close()


def statuses(client: FlaskClient, times: int, **headers: str) -> list[int]:
    return [client.get("/search", headers=headers).status_code for _ in range(times)]


def alice_on_two_devices_bob_on_a_third(app: Flask) -> tuple[FlaskClient, TestResponse]:
    """Alice spends her limit of 3 from her laptop and her phone, Bob keeps his own:
    Alice's laptop, and her phone's first response (a user, so no device cookie)."""
    laptop, phone, other = app.test_client(), app.test_client(), app.test_client()
    laptop.post("/login/alice")
    phone.post("/login/alice")
    other.post("/login/bob")
    assert statuses(laptop, 2) == [200, 200]
    first = phone.get("/search")
    assert (first.status_code, first.json) == (200, {"user": "alice"})
    assert "sentinel_device=" not in first.headers.get("Set-Cookie", "")  # a user is no device
    assert statuses(phone, 1) == [429]  # alice's 3, from either device
    assert statuses(other, 1) == [200]  # bob's own 3
    return laptop, first


def device_then_login_then_logout(client: FlaskClient, user: str) -> TestResponse:
    """A visitor spends their device's 3, logs in as ``user`` (that user's own limit),
    logs out (the device's, spent, again); the visitor's first response."""
    first = client.get("/search")
    assert first.status_code == 200
    assert "sentinel_device=" in first.headers["Set-Cookie"]
    assert statuses(client, 3) == [200, 200, 429]  # the device's 3
    client.post(f"/login/{user}")
    assert statuses(client, 1) == [200]  # logged in: the user's own limit
    client.post("/logout")
    assert statuses(client, 1) == [429]  # logged out: the device again
    return first


def test_a_logged_in_user_has_their_own_limit_across_sessions(
    make: Callable[..., Flask], redis_url: str
) -> None:
    app = make(user_config(redis_url))
    _, first = alice_on_two_devices_bob_on_a_third(app)
    assert first.headers.get("Set-Cookie") is None  # no cookie of any kind


def test_a_request_without_a_login_is_an_anonymous_client_never_a_401(
    make: Callable[..., Flask], redis_url: str
) -> None:
    app = make(user_config(redis_url))
    device_then_login_then_logout(app.test_client(), "carol")


def test_an_api_key_names_the_user(make: Callable[..., Flask], redis_url: str) -> None:
    app = make(user_config(redis_url), identify=lambda request: api_key_user(request.headers))
    client = app.test_client()
    assert statuses(client, 4, **{"X-API-Key": "key-of-acme-0123"}) == [200, 200, 200, 429]
    assert statuses(client, 1, **{"X-API-Key": "key-of-globex-45"}) == [200]
    unknown = client.get("/search", headers={"X-API-Key": "stolen"})
    assert "sentinel_device=" in unknown.headers["Set-Cookie"]


def test_a_user_policy_without_identify_is_refused_at_init_app(
    make: Callable[..., Flask], redis_url: str
) -> None:
    with pytest.raises(ConfigError, match="identify callable"):
        make(user_config(redis_url), identify=None)


# --- denials rendered by the app -----------------------------------------------------------


def test_errorhandler_429_renders_the_denial_with_its_decision_and_headers(
    make: Callable[..., Flask], redis_url: str
) -> None:
    app = make(user_config(redis_url))
    seen: list[RateLimitExceeded] = []

    @app.errorhandler(429)
    def too_many(error: RateLimitExceeded) -> Any:
        seen.append(error)
        return jsonify(error="slow down", retry_in=error.decision.retry_after_seconds), 429

    client = app.test_client()
    client.post("/login/dave")
    statuses(client, 3)
    denied = client.get("/search")

    (error,) = seen
    assert isinstance(error, HTTPException)
    assert error.decision.reason is DecisionReason.RATE_LIMITED
    assert error.decision.endpoint_id == USER_POLICY
    assert denied.status_code == 429
    assert denied.json == {"error": "slow down", "retry_in": error.decision.retry_after_seconds}
    assert denied.headers["Content-Type"] == "application/json"
    assert denied.headers["Retry-After"] == str(error.decision.retry_after_seconds)
    fields = ratelimit_headers(denied.headers)
    assert fields["state"][USER_POLICY]["r"] == 0
    assert fields["policy"][USER_POLICY]["q"] == 3
    assert denied.headers.getlist("RateLimit") == [denied.headers["RateLimit"]]


def test_errorhandler_503_renders_a_store_failure_and_a_401_stays_sentinels(
    make: Callable[..., Flask], dead_redis_url: str
) -> None:
    app = make(user_config(dead_redis_url))

    @app.errorhandler(503)
    def unavailable(error: RateLimiterUnavailable) -> tuple[str, int]:
        return f"down: {error.decision.reason}", 503

    @app.errorhandler(401)
    def unauthorized(error: HTTPException) -> tuple[str, int]:
        return "not Sentinel's", 401

    client = app.test_client()
    denied = client.get("/search")
    refused = client.get("/tenant")

    assert (denied.status_code, denied.text) == (503, "down: fail_closed")
    assert denied.headers["Content-Type"].startswith("text/html")
    assert refused.status_code == 401  # no decision: Sentinel's own answer
    assert refused.headers["Content-Type"] == "application/problem+json"


def test_a_generic_http_exception_handler_sees_sentinels_denials_too(
    make: Callable[..., Flask], redis_url: str
) -> None:
    app = make(user_config(redis_url))

    @app.errorhandler(HTTPException)
    def any_error(error: HTTPException) -> tuple[dict[str, Any], int]:
        return {"code": error.code, "name": error.name}, error.code or 500

    client = app.test_client()
    statuses(client, 3)
    denied = client.get("/search")
    assert (denied.status_code, denied.json) == (429, {"code": 429, "name": "Too Many Requests"})
    assert int(denied.headers["Retry-After"]) >= 1


def test_without_a_handler_the_denial_is_spec_4s(
    make: Callable[..., Flask], redis_url: str
) -> None:
    app = make(user_config(redis_url))

    @app.errorhandler(404)
    def not_found(error: HTTPException) -> tuple[str, int]:
        return "not here", 404

    client = app.test_client()
    statuses(client, 3)
    denied = client.get("/search")
    assert denied.status_code == 429
    assert denied.headers["Content-Type"] == "application/problem+json"
    assert denied.json is not None
    assert denied.json["detail"] == "rate limit exceeded"
    assert len(denied.headers.getlist("Retry-After")) == 1


# --- docs/users.md, run as written -------------------------------------------------------


def test_the_docs_flask_error_handlers_run_as_written(
    make: Callable[..., Flask], redis_url: str
) -> None:
    app = make(user_config(redis_url))
    app.jinja_loader = DictLoader({"429.html": "<p>wait {{ wait }}s</p>"})
    namespace: dict[str, Any] = {"app": app}
    for block in snippets("users.md", "Flask: `@app.errorhandler(429)` and `(503)`"):
        exec(block, namespace)
    client = app.test_client()
    statuses(client, 3)
    denied = client.get("/search")
    assert denied.status_code == 429
    assert denied.text == f"<p>wait {denied.headers['Retry-After']}s</p>"


def test_the_docs_flask_503_handler_runs_as_written(
    make: Callable[..., Flask], dead_redis_url: str
) -> None:
    app = make(user_config(dead_redis_url))
    namespace: dict[str, Any] = {"app": app}
    for block in snippets("users.md", "Flask: `@app.errorhandler(429)` and `(503)`"):
        exec(block, namespace)
    denied = app.test_client().get("/search")
    assert (denied.status_code, denied.json) == (
        503,
        {"error": "try again later", "reason": "fail_closed"},
    )


# --- Flask-Login, with the identify of docs/users.md as written ----------------------------


class Account(UserMixin):
    """An app's user, as Flask-Login's ``user_loader`` returns it."""

    def __init__(self, name: str) -> None:
        self.id = name


@pytest.fixture
def flask_login_app(redis_url: str) -> Iterator[tuple[Flask, set[str]]]:
    """An app authenticating with Flask-Login (a ``LoginManager``, its ``user_loader``,
    ``login_user`` in the login view), with Sentinel initialised by the users page's
    "Flask and Flask-Login" snippet run as written; and the accounts the loader knows."""
    accounts = {"alice", "bob"}
    app = Flask("users_flask_login")
    app.config.update(TESTING=True, SECRET_KEY="flask-tests-only", SENTINEL=user_config(redis_url))
    login_manager = LoginManager(app)

    @login_manager.user_loader
    def load_user(user_id: str) -> Account | None:
        return Account(user_id) if user_id in accounts else None

    @app.post("/login/<name>")
    def login(name: str) -> str:
        login_user(Account(name))
        return "welcome"

    @app.post("/logout")
    def logout() -> str:
        logout_user()
        return "bye"

    @app.get("/search")
    @rate_limited(USER_POLICY)
    def search() -> dict[str, str | None]:
        return {"user": current_user.get_id()}

    (block,) = snippets("users.md", "Flask and Flask-Login")
    exec(compile(block, "docs/users.md", "exec"), {"app": app})
    yield app, accounts
    app.extensions["sentinel"].close()


def test_flask_login_a_user_has_their_own_limit_across_devices(
    flask_login_app: tuple[Flask, set[str]],
) -> None:
    app, _ = flask_login_app
    laptop, _ = alice_on_two_devices_bob_on_a_third(app)
    assert statuses(laptop, 1) == [429]


def test_flask_login_an_anonymous_visitor_is_an_anonymous_client_never_a_401(
    flask_login_app: tuple[Flask, set[str]],
) -> None:
    app, accounts = flask_login_app
    client = app.test_client()
    first = device_then_login_then_logout(client, "alice")
    assert first.json == {"user": None}
    client.post("/login/bob")
    accounts.discard("bob")  # the session names a user the loader no longer knows
    assert statuses(client, 1) == [429]  # so the request is the device's
