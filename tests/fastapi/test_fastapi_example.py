"""``examples/fastapi_app.py`` starts and enforces its three policies, on ``memory://`` by
default and on Redis when ``SENTINEL_REDIS_URL`` is set."""

from __future__ import annotations

import time

import httpx
import pytest
import redis
from fastapi import FastAPI

from examples import fastapi_app
from tests.fastapi.conftest import serve
from tests.support.adapter_config import bearer

AUTH = {"Authorization": bearer("acme", key=fastapi_app.DEV_JWT_KEY)}


async def statuses(
    http: httpx.AsyncClient, path: str, count: int, headers: dict[str, str] | None = None
) -> list[int]:
    return [(await http.post(path, headers=headers)).status_code for _ in range(count)]


async def until_denied(
    http: httpx.AsyncClient, path: str, most: int, headers: dict[str, str]
) -> list[int]:
    """Statuses of requests sent until the first 429 (at most ``most`` of them)."""
    sent: list[int] = []
    while len(sent) < most and 429 not in sent:
        sent.append((await http.post(path, headers=headers)).status_code)
    return sent


def test_the_module_exposes_a_guarded_app() -> None:
    assert isinstance(fastapi_app.app, FastAPI)
    assert fastapi_app.app.state.sentinel.config.routes == {"POST /v1/ingest": "pdftalk.ingest"}


async def test_example_enforces_its_three_policies_on_the_memory_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SENTINEL_REDIS_URL", raising=False)
    app = fastapi_app.create_app()
    assert app.state.sentinel.config.redis_url == "memory://"
    async with serve(app) as http:
        started = time.monotonic()
        tailor = await until_denied(http, "/v1/tailor", 40, headers=AUTH)
        refilled = int((time.monotonic() - started) * 5) + 1  # 5 tokens a second, real clock
        ingest = await statuses(http, "/v1/ingest", 11, headers=AUTH)
        login = await statuses(http, "/auth/login", 6)
        unauthorized = await http.post("/v1/tailor")
        health = await http.get("/health")

    # A burst of 20, plus what refilled while a loaded machine sent them.
    assert tailor[-1] == 429
    assert 20 <= tailor.count(200) <= 20 + refilled
    assert ingest == [200] * 10 + [429]
    assert login == [200] * 5 + [429]
    assert unauthorized.status_code == 401
    assert health.status_code == 200


async def test_example_uses_redis_when_the_url_is_set(
    monkeypatch: pytest.MonkeyPatch, redis_url: str, redis_client: redis.Redis
) -> None:
    monkeypatch.setenv("SENTINEL_REDIS_URL", redis_url)
    monkeypatch.setenv("SENTINEL_SOCKET_TIMEOUT_MS", "2000")  # a loaded machine is no outage
    async with serve(fastapi_app.create_app()) as http:
        response = await http.post("/v1/tailor", headers=AUTH, params={"job": "astronaut"})

    assert response.status_code == 200
    assert response.json() == {"job": "astronaut", "resume": "A resume tailored to: astronaut."}
    assert redis_client.dbsize() == 1
