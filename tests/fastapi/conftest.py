"""The FastAPI suite's fixtures: the ``make_app(config)`` factory and an ASGI server stand-in.

Requests go through ``httpx.AsyncClient`` on ``httpx.ASGITransport`` (the full ASGI
path, in the test's event loop); `serve` also drives the ASGI lifespan protocol the
way uvicorn does, since ``ASGITransport`` does not, so startup and shutdown are real.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client import CollectorRegistry
from starlette.types import Message

from sentinel_fastapi import Sentinel
from tests.fastapi.apps import MakeApp, Probe, build_app
from tests.support.redis_admin import RedisAdmin
from tests.support.redis_server import free_port

PEER = ("203.0.113.7", 50000)


class LifespanFailed(Exception):
    """The app refused to start: ``lifespan.startup.failed`` with its message."""


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
    """Run the app's ASGI lifespan like a server: startup, then shutdown on exit.

    Yields the lifespan state the app returned. Raises `LifespanFailed` with the
    message the app reported when startup fails.
    """
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    state: dict[str, Any] = {}
    scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": state}

    async def send(message: Message) -> None:
        await outbox.put(dict(message))

    task = asyncio.create_task(app(scope, inbox.get, send))
    await inbox.put({"type": "lifespan.startup"})
    message = await outbox.get()
    if message["type"] == "lifespan.startup.failed":
        # Starlette re-raises after reporting; the report is what a server shows.
        await asyncio.gather(task, return_exceptions=True)
        raise LifespanFailed(message.get("message", ""))
    assert message["type"] == "lifespan.startup.complete", message
    try:
        yield state
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        message = await outbox.get()
        await task
        assert message["type"] == "lifespan.shutdown.complete", message


@asynccontextmanager
async def serve(
    app: FastAPI, *, peer: tuple[str, int] = PEER, state: dict[str, Any] | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    """The app started, and a client whose requests come from ``peer``."""
    async with lifespan(app) as started:
        if state is not None:
            state.update(started)
        async with client(app, peer=peer) as http:
            yield http


def client(app: FastAPI, *, peer: tuple[str, int] = PEER) -> httpx.AsyncClient:
    """A client of ``app`` without lifespan (requests only)."""
    transport = httpx.ASGITransport(app=app, client=peer)
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


def http_scope(method: str, path: str, headers: Sequence[tuple[bytes, bytes]]) -> dict[str, Any]:
    """The ASGI scope of one HTTP request from `PEER`, for tests that drive the app
    without an HTTP client (to see every message it sends, or one no client accepts)."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": list(headers),
        "client": PEER,
        "server": ("testserver", 80),
    }


@pytest.fixture
def probe() -> Probe:
    return Probe()


@pytest.fixture
def make_app(probe: Probe) -> MakeApp:
    """``make_app(config, *, plugins=())``: the suite's app (`tests.fastapi.apps`) with
    a fresh Sentinel on ``config``, its own metrics registry and ``plugins``."""

    def make(config: dict[str, Any], *, plugins: Sequence[object] = ()) -> FastAPI:
        sentinel = Sentinel(config, registry=CollectorRegistry(), plugins=plugins)
        return build_app(sentinel, probe)

    return make


@pytest.fixture
def dead_redis_url() -> str:
    """A Redis URL nothing listens on: every call is a connection error."""
    return f"redis://127.0.0.1:{free_port()}/0"


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[RedisAdmin]:
    """The store under test, seen whole (every primary of a cluster), emptied for this test."""
    admin = RedisAdmin(redis_url)
    yield admin
    admin.close()
