"""The Flask snippets of the docs (issue 27), read from the Markdown and run under
Flask's test client: the Quick start's app (``"flask-app"``) reaches its 429 with the
headers the page shows; the adapters' guide's ``@exempt`` (``"flask-exempt"``) leaves
the health check out of ``routes["*"]``."""

from __future__ import annotations

import time
from typing import Any

import jwt
import pytest

from tests.support.adapter_config import COOKIE_SECRET, JWT_KEY
from tests.support.docs_config import guide_config
from tests.support.docs_snippets import quickstart_app, snippet


def run(code: str, **names: Any) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "docs_snippet", **names}
    exec(compile(code, "<docs snippet>", "exec"), namespace)
    return namespace


def test_the_quickstart_app_answers_the_eleventh_request_with_a_429(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SENTINEL_JWT_KEY", JWT_KEY)
    monkeypatch.setenv("SENTINEL_COOKIE_SECRET", COOKIE_SECRET)
    namespace = run(quickstart_app("flask-app", redis_url))
    token = jwt.encode({"sub": "tenant-42", "exp": int(time.time()) + 3600}, JWT_KEY, "HS256")
    client = namespace["app"].test_client()
    try:
        responses = [
            client.post("/v1/ingest", headers={"Authorization": f"Bearer {token}"})
            for _ in range(11)
        ]
        login = client.post("/v1/login")
        anonymous = client.post("/v1/ingest")
    finally:
        namespace["sentinel"].get_core(namespace["app"]).close()
    assert [r.status_code for r in responses] == [200] * 10 + [429]
    assert responses[0].get_json() == {"status": "accepted"}
    denied = responses[-1]
    assert int(denied.headers["Retry-After"]) >= 1
    assert denied.headers["RateLimit-Policy"].startswith('"pdftalk.ingest";q=10;w=60;')
    assert denied.headers["RateLimit"].startswith('"pdftalk.ingest";r=0;')
    assert denied.headers["Content-Type"] == "application/problem+json"
    assert login.status_code == 200
    assert login.headers["RateLimit-Policy"].startswith('"auth.login";')
    assert anonymous.status_code == 401


def test_the_guides_exempt_health_check_is_never_limited(redis_url: str) -> None:
    app = run(snippet("adapters.md", "flask-exempt"), CONFIG=guide_config(redis_url))["app"]
    client = app.test_client()
    try:
        health = [client.get("/health") for _ in range(4)]
        items = [client.get("/v1/items").status_code for _ in range(3)]
    finally:
        app.extensions["sentinel"].close()
    assert [r.status_code for r in health] == [200] * 4
    assert all("RateLimit" not in r.headers for r in health)
    assert items == [200, 200, 429]
