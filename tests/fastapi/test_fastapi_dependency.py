"""The dependency idiom (``Depends(rate_limit("id"))``, on an operation or a router) and
the completion step: a cancelled request (the client went away), or one whose app
returns before its last body chunk, hands back its lease."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import anyio
import pytest
from fastapi import APIRouter, Depends, FastAPI
from prometheus_client import CollectorRegistry
from starlette.types import Message, Receive, Scope, Send

from sentinel_fastapi import Sentinel, rate_limit, rate_limited
from tests.fastapi.conftest import client, http_scope, lifespan
from tests.support.adapter_config import bearer, spec_config

AUTH = {"Authorization": bearer("acme", expires_in=3600)}


def app_with(config: dict[str, Any]) -> FastAPI:
    app = FastAPI()
    Sentinel(config, registry=CollectorRegistry(), entry_points=False).init_app(app)
    return app


async def test_a_dependency_guards_its_operation(redis_url: str) -> None:
    app = app_with(spec_config(redis_url))

    @app.post("/export", dependencies=[Depends(rate_limit("pdftalk.ingest"))])
    async def export() -> dict[str, bool]:
        return {"ok": True}

    async with lifespan(app), client(app) as http:
        statuses = [(await http.post("/export", headers=AUTH)).status_code for _ in range(4)]

    assert statuses == [200, 200, 200, 429]


async def test_a_router_dependency_guards_every_operation_once_with_a_same_id_decorator(
    redis_url: str,
) -> None:
    app = app_with(spec_config(redis_url))
    router = APIRouter(prefix="/docs", dependencies=[Depends(rate_limit("pdftalk.ingest"))])

    @router.post("/a")
    async def a() -> dict[str, str]:
        return {"doc": "a"}

    @router.post("/b")
    @rate_limited("pdftalk.ingest")
    async def b() -> dict[str, str]:
        return {"doc": "b"}

    app.include_router(router)
    async with lifespan(app), client(app) as http:
        first = await http.post("/docs/b", headers=AUTH)
        rest = [(await http.post(f"/docs/{d}", headers=AUTH)).status_code for d in "aab"]

    assert first.headers["RateLimit"].startswith('"pdftalk.ingest";r=2;')
    assert ", " not in first.headers["RateLimit"]  # one id, charged once
    assert rest == [200, 200, 429]


def test_the_dependency_runs_on_the_event_loop() -> None:
    # FastAPI runs a plain function dependency in its thread pool: a thread hop for
    # every request, to look up one scope key.
    assert inspect.iscoroutinefunction(rate_limit("pdftalk.ingest"))


async def test_a_dependency_without_init_app_fails_instead_of_serving_unguarded() -> None:
    app = FastAPI()

    @app.get("/open", dependencies=[Depends(rate_limit("pdftalk.ingest"))])
    async def handler() -> None:
        raise AssertionError("must not run")  # pragma: no cover

    async with client(app) as http:
        with pytest.raises(RuntimeError, match=r"init_app"):
            await http.get("/open")


async def test_a_cancelled_request_hands_its_concurrency_lease_back(redis_url: str) -> None:
    config = spec_config(redis_url)
    config["policies"]["slots"] = {"algorithm": "concurrency", "limit": 1, "fail_mode": "closed"}
    app = app_with(config)
    started = anyio.Event()

    @app.get("/slow")
    @rate_limited("slots")
    async def slow() -> None:
        started.set()
        await anyio.sleep_forever()

    @app.get("/quick")
    @rate_limited("slots")
    async def quick() -> dict[str, bool]:
        return {"ok": True}

    async with lifespan(app), client(app) as http:
        request = asyncio.create_task(http.get("/slow", headers=AUTH))
        await started.wait()
        busy = await http.get("/quick", headers=AUTH)
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request
        freed = await http.get("/quick", headers=AUTH)

    assert busy.status_code == 429
    assert freed.status_code == 200


class HalfAnswer:
    """A raw ASGI endpoint that starts its response and returns without its last body
    chunk, as an app does whose client went away mid-response."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"part", "more_body": True})


async def test_an_app_returning_before_its_last_body_chunk_hands_its_lease_back(
    redis_url: str,
) -> None:
    config = spec_config(redis_url)
    config["policies"]["slots"] = {"algorithm": "concurrency", "limit": 1, "fail_mode": "closed"}
    config["routes"] = {"GET /half": "slots"}
    app = app_with(config)
    app.add_route("/half", HalfAnswer(), methods=["GET"])

    scope = http_scope("GET", "/half", [(b"authorization", AUTH["Authorization"].encode())])
    statuses = []

    async def receive() -> Message:
        raise AssertionError("the endpoint reads no body")  # pragma: no cover

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    async with lifespan(app):
        for _ in range(3):
            await app(dict(scope), receive, send)

    assert statuses == [200, 200, 200]  # each request's lease came back when it returned
