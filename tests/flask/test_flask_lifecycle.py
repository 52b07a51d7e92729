"""The completion step in Flask: a view that raises (whether Flask propagates the
exception or answers its 500), or that calls ``abort()``, still completes its admission
with its status, through the test client too (which never closes a response): a
concurrency lease goes back, and a ``count`` policy counts the ``HTTPException``'s
status."""

from __future__ import annotations

import io
from typing import Any

import pytest
from flask import (
    Flask,
    Response,
    abort,
    jsonify,
    make_response,
    request_tearing_down,
    send_file,
)
from prometheus_client import CollectorRegistry

from sentinel_flask import Sentinel, rate_limited
from tests.support.adapter_config import bearer, spec_config

AUTH = {"Authorization": bearer("acme", expires_in=3600)}


def test_a_propagated_exception_completes_the_admission_and_frees_the_lease(
    redis_url: str,
) -> None:
    config = spec_config(redis_url)
    config["policies"]["slots"] = {"algorithm": "concurrency", "limit": 1, "fail_mode": "closed"}
    app = Flask("lifecycle")
    app.config.update(TESTING=True, SENTINEL=config)

    @app.get("/fail")
    @rate_limited("slots")
    def fail() -> str:
        raise RuntimeError("the view failed")

    @app.get("/ok")
    @rate_limited("slots")
    def ok() -> str:
        return "ok"

    Sentinel(registry=CollectorRegistry()).init_app(app)
    client = app.test_client()
    with pytest.raises(RuntimeError, match="the view failed"):
        client.get("/fail", headers=AUTH)

    assert client.get("/ok", headers=AUTH).status_code == 200
    assert client.get("/ok", headers=AUTH).status_code == 200
    app.extensions["sentinel"].close()


def leased_app(redis_url: str, **flask_config: Any) -> Flask:
    """Views that fail in every way, each guarded by one concurrency slot."""
    config = spec_config(redis_url)
    config["policies"]["slots"] = {"algorithm": "concurrency", "limit": 1, "fail_mode": "closed"}
    config["policies"]["login"] = {
        "algorithm": "token_bucket",
        "rate": "1/minute",
        "burst": 2,
        "fail_mode": "closed",
        "count": [401],
    }
    app = Flask("leases")
    app.config.update(SENTINEL=config, **flask_config)

    @app.get("/abort")
    @rate_limited("slots")
    def aborted() -> str:
        abort(400)

    @app.get("/abort-response")
    @rate_limited("slots")
    def aborted_with_a_response() -> str:
        abort(make_response(jsonify(error="no"), 409))

    @app.get("/raise")
    @rate_limited("slots")
    def raised() -> str:
        raise RuntimeError("the view failed")

    @app.get("/file")
    @rate_limited("slots")
    def file() -> Response:
        return send_file(io.BytesIO(b"abc"), mimetype="text/plain")

    @app.post("/login")
    @rate_limited("login")
    def login() -> str:
        abort(401)

    @app.get("/plain")
    @rate_limited("resumint.tailor")
    def plain() -> str:
        return "ok"

    Sentinel(registry=CollectorRegistry()).init_app(app)
    return app


@pytest.mark.parametrize("path", ["/abort", "/abort-response", "/raise"])
def test_a_view_that_aborts_or_raises_hands_its_lease_back_through_the_test_client(
    redis_url: str, path: str
) -> None:
    app = leased_app(redis_url)
    client = app.test_client()

    statuses = [client.get(path, headers=AUTH).status_code for _ in range(3)]

    app.extensions["sentinel"].close()
    assert len(set(statuses)) == 1
    assert statuses[0] in {400, 409, 500}, "the view ran every time: the slot was free"


def test_a_file_hands_its_lease_back_though_its_close_callbacks_never_run(
    redis_url: str,
) -> None:
    app = leased_app(redis_url)
    client = app.test_client()

    statuses = [client.get("/file", headers=AUTH).status_code for _ in range(3)]

    app.extensions["sentinel"].close()
    assert statuses == [200, 200, 200]


def test_abort_401_is_counted_by_its_status(redis_url: str) -> None:
    app = leased_app(redis_url)
    client = app.test_client()

    statuses = [client.post("/login", headers=AUTH).status_code for _ in range(4)]

    app.extensions["sentinel"].close()
    assert statuses == [401, 401, 429, 429]


def test_the_teardown_step_is_taken_from_the_first_request_that_owes_a_completion(
    redis_url: str,
) -> None:
    app = leased_app(redis_url)
    client = app.test_client()

    plain = [client.get("/plain", headers=AUTH).status_code for _ in range(2)]
    connected_after_plain = request_tearing_down.has_receivers_for(app)
    counted = [client.post("/login", headers=AUTH).status_code for _ in range(3)]

    app.extensions["sentinel"].close()
    assert plain == [200, 200]
    assert not connected_after_plain, "a request that owes nothing needs no teardown step"
    assert counted == [401, 401, 429], "the first counted request was counted"
    assert request_tearing_down.has_receivers_for(app)


def test_validate_on_an_app_without_sentinel_says_to_call_init_app() -> None:
    with pytest.raises(RuntimeError, match="init_app"):
        Sentinel().validate(Flask("bare"))
