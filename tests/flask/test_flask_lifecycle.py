"""The completion step in Flask: a view that raises (and Flask propagates the exception)
still completes its admission, so a concurrency lease goes back."""

from __future__ import annotations

import pytest
from flask import Flask
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


def test_validate_on_an_app_without_sentinel_says_to_call_init_app() -> None:
    with pytest.raises(RuntimeError, match="init_app"):
        Sentinel().validate(Flask("bare"))
