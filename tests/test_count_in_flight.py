"""The bound on over-admission of a ``count`` policy (docs/adapters.md), with real
concurrency: requests in flight at once all pass the check before any of them is
counted, so with C of one identity in flight, at most C - 1 counted responses beyond
the limit are served; the bucket itself never goes below empty, and the next request
is denied. Shown on FastAPI (concurrent tasks on one event loop) and Flask (threads).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import anyio
import httpx
import pytest
from fastapi import FastAPI, Response
from flask import Flask
from prometheus_client import CollectorRegistry

import sentinel_fastapi
import sentinel_flask
from tests.fastapi.conftest import lifespan
from tests.support.adapter_config import JWT_KEY, bearer

AUTH = {"Authorization": bearer("mallory", expires_in=3600)}
LIMIT = 2
IN_FLIGHT = 5

pytestmark = pytest.mark.slow


def config(redis_url: str) -> dict[str, Any]:
    login = {
        "algorithm": "token_bucket",
        "rate": "1/minute",
        "burst": LIMIT,
        "fail_mode": "closed",
        "count": [401],
    }
    return {
        "redis_url": redis_url,
        "socket_timeout_ms": 2000,
        "jwt": {"algorithms": ["HS256"], "key": JWT_KEY},
        "policies": {"auth.login": login},
    }


async def test_fastapi_requests_in_flight_at_once_over_admit_by_at_most_c_minus_1(
    redis_url: str,
) -> None:
    app = FastAPI()
    sentinel_fastapi.Sentinel(config(redis_url), registry=CollectorRegistry()).init_app(app)
    inside = 0
    all_inside = anyio.Event()

    @app.post("/login")
    @sentinel_fastapi.rate_limited("auth.login")
    async def login() -> Response:
        nonlocal inside
        inside += 1
        if inside == IN_FLIGHT:
            all_inside.set()
        await all_inside.wait()  # every request passed the check before any is counted
        return Response(status_code=401)

    transport = httpx.ASGITransport(app=app, client=("203.0.113.7", 5000))
    async with lifespan(app), httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        burst = await asyncio.gather(*(http.post("/login", headers=AUTH) for _ in range(IN_FLIGHT)))
        after = await http.post("/login", headers=AUTH)

    served = [response.status_code for response in burst]
    assert served == [401] * IN_FLIGHT
    assert len(served) - LIMIT <= IN_FLIGHT - 1
    assert after.status_code == 429


def test_flask_threads_in_flight_at_once_over_admit_by_at_most_c_minus_1(redis_url: str) -> None:
    app = Flask("count")
    app.config["SENTINEL"] = config(redis_url)
    barrier = threading.Barrier(IN_FLIGHT, timeout=30)

    @app.post("/login")
    @sentinel_flask.rate_limited("auth.login")
    def login() -> tuple[str, int]:
        barrier.wait()  # every request passed the check before any is counted
        return "wrong password", 401

    sentinel_flask.Sentinel(app, registry=CollectorRegistry())
    statuses: list[int] = []

    def post() -> None:
        response = app.test_client().post("/login", headers=AUTH)
        statuses.append(response.status_code)
        response.close()

    threads = [threading.Thread(target=post) for _ in range(IN_FLIGHT)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    after = app.test_client().post("/login", headers=AUTH).status_code
    app.extensions["sentinel"].close()

    assert statuses == [401] * IN_FLIGHT
    assert len(statuses) - LIMIT <= IN_FLIGHT - 1
    assert after == 429
