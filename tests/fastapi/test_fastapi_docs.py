"""The FastAPI snippets of the docs (issue 27), read from the Markdown and run as this
suite runs every FastAPI app (httpx on the ASGI app, lifespan included, see `serve`;
Starlette's ``TestClient`` now warns that it wants ``httpx2``): the Quick start's app
(``"fastapi-app"``) reaches its 429 with the headers the page shows; the adapters'
guide's dependency (``"fastapi-dependency"``) and ``@exempt`` (``"fastapi-exempt"``)
do what it says."""

from __future__ import annotations

import time
from typing import Any

import jwt
import pytest

from tests.fastapi.conftest import serve
from tests.support.adapter_config import COOKIE_SECRET, JWT_KEY
from tests.support.docs_config import guide_config
from tests.support.docs_snippets import quickstart_app, snippet


def run(code: str, **names: Any) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "docs_snippet", **names}
    exec(compile(code, "<docs snippet>", "exec"), namespace)
    return namespace


@pytest.fixture
def secrets(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("SENTINEL_JWT_KEY", JWT_KEY)
    monkeypatch.setenv("SENTINEL_COOKIE_SECRET", COOKIE_SECRET)
    return JWT_KEY


async def test_the_quickstart_app_answers_the_eleventh_request_with_a_429(
    redis_url: str, secrets: str
) -> None:
    app = run(quickstart_app("fastapi-app", redis_url))["app"]
    token = jwt.encode({"sub": "tenant-42", "exp": int(time.time()) + 3600}, secrets, "HS256")
    bearer = {"Authorization": f"Bearer {token}"}
    async with serve(app) as client:
        responses = [await client.post("/v1/ingest", headers=bearer) for _ in range(11)]
        login = await client.post("/v1/login")
        anonymous = await client.post("/v1/ingest")
    assert [r.status_code for r in responses] == [200] * 10 + [429]
    assert responses[0].json() == {"status": "accepted"}
    denied = responses[-1]
    assert int(denied.headers["Retry-After"]) >= 1
    assert denied.headers["RateLimit-Policy"].startswith('"pdftalk.ingest";q=10;w=60;')
    assert denied.headers["RateLimit"].startswith('"pdftalk.ingest";r=0;')
    assert denied.headers["Content-Type"] == "application/problem+json"
    assert denied.json()["detail"] == "rate limit exceeded"
    assert login.status_code == 200
    assert login.headers["RateLimit-Policy"].startswith('"auth.login";')
    assert anonymous.status_code == 401


async def test_the_guides_dependency_guards_the_routers_operations(redis_url: str) -> None:
    app = run(snippet("adapters.md", "fastapi-dependency"), CONFIG=guide_config(redis_url))["app"]
    async with serve(app) as client:
        statuses = [(await client.get("/reports/7")).status_code for _ in range(3)]
        fields = (await client.get("/reports/7")).headers["RateLimit-Policy"]
    assert statuses == [200, 200, 429]
    assert fields.startswith('"reports.export";')


async def test_the_guides_exempt_health_check_is_never_limited(redis_url: str) -> None:
    app = run(snippet("adapters.md", "fastapi-exempt"), CONFIG=guide_config(redis_url))["app"]
    async with serve(app) as client:
        responses = [await client.get("/health") for _ in range(4)]
    assert [r.status_code for r in responses] == [200] * 4
    assert all("RateLimit" not in r.headers for r in responses)
