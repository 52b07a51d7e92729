"""How routes get guarded: the decorator on sync and async handlers and on routers, and
the pure ASGI middleware for ``routes`` (resolved templates, HEAD, streaming, websockets)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import anyio
import pytest
from fastapi import APIRouter, FastAPI
from prometheus_client import CollectorRegistry
from starlette.types import Message

from sentinel_core import Decision, RequestView, hookimpl
from sentinel_fastapi import Sentinel, rate_limited
from tests.fastapi.apps import MakeApp, Probe
from tests.fastapi.conftest import PEER, client, http_scope, lifespan, serve
from tests.support.adapter_config import bearer, spec_config

AUTH = {"Authorization": bearer("acme")}
ROUTES = {
    "POST /v1/docs/{doc_id}": "pdftalk.ingest",
    "GET /v1/items/{item_id}": "resumint.tailor",
    "GET /v1/stream": "auth.login",
    "GET /v1/plain": "pdftalk.ingest",
}


class Recorder:
    """A plugin that keeps the request view of every decision."""

    def __init__(self) -> None:
        self.views: list[RequestView] = []

    @hookimpl
    def sentinel_decision(self, decision: Decision, request: Any) -> None:
        self.views.append(request)


async def test_sync_and_async_handlers_share_the_policy_and_sync_ones_run_off_the_loop(
    make_app: MakeApp, redis_url: str, probe: Probe
) -> None:
    async with serve(make_app(spec_config(redis_url))) as http:
        statuses = [
            (await http.post(path, headers=AUTH)).status_code
            for path in ("/v1/ingest", "/v1/ingest-sync", "/v1/ingest-sync", "/v1/ingest-sync")
        ]

    assert statuses == [200, 200, 200, 429]
    assert probe.calls == {"ingest": 1, "ingest-sync": 2}
    assert threading.get_ident() not in probe.threads


async def test_decorated_route_of_an_included_router_is_guarded_under_its_prefix(
    make_app: MakeApp, redis_url: str, probe: Probe
) -> None:
    recorder = Recorder()
    app = make_app(spec_config(redis_url), plugins=[recorder])
    async with serve(app) as http:
        statuses = [
            (await http.post(f"/v1/docs/{doc_id}/tailor", headers=AUTH)).status_code
            for doc_id in range(4)
        ]

    assert statuses == [200, 200, 200, 429]
    assert probe.calls == {"tailor-doc": 3}
    assert {view.route for view in recorder.views} == {"/v1/docs/{doc_id}/tailor"}
    assert {view.peer for view in recorder.views} == {PEER[0]}


async def test_requests_failing_validation_are_charged_like_any_other(
    make_app: MakeApp, redis_url: str
) -> None:
    # Admission happens before the handler, as in every adapter: a client cannot get
    # free requests past the limit by sending invalid ones.
    async with serve(make_app(spec_config(redis_url))) as http:
        invalid = [await http.post("/v1/docs/x/tailor", headers=AUTH) for _ in range(3)]
        valid = await http.post("/v1/docs/1/tailor", headers=AUTH)

    assert [response.status_code for response in invalid] == [422, 422, 422]
    assert invalid[-1].headers["ratelimit"].startswith('"resumint.tailor";r=0;')
    assert valid.status_code == 429


async def test_middleware_guards_undecorated_routes_on_their_template_not_the_url(
    make_app: MakeApp, redis_url: str, probe: Probe
) -> None:
    recorder = Recorder()
    app = make_app(spec_config(redis_url, routes=ROUTES), plugins=[recorder])
    async with serve(app) as http:
        docs = [(await http.post(f"/v1/docs/{i}", headers=AUTH)) for i in range(4)]
        items = [(await http.get(f"/v1/items/{name}", headers=AUTH)) for name in "abcd"]
        health = [(await http.get("/health")) for _ in range(5)]

    assert [response.status_code for response in docs] == [200, 200, 200, 429]
    assert docs[0].headers["ratelimit"].startswith('"pdftalk.ingest";r=2;')
    assert docs[0].json() == {"doc_id": 0}
    assert docs[3].headers["content-type"] == "application/problem+json"
    assert int(docs[3].headers["retry-after"]) >= 1
    assert [response.status_code for response in items] == [200, 200, 200, 429]
    assert [response.status_code for response in health] == [200] * 5
    assert "ratelimit" not in health[0].headers
    assert probe.calls == {"upload-doc": 3, "item": 3, "health": 5}
    assert {view.route for view in recorder.views} == {"/v1/docs/{doc_id}", "/v1/items/{item_id}"}


async def test_middleware_returns_401_for_a_tenant_route_without_a_token(
    make_app: MakeApp, redis_url: str, probe: Probe
) -> None:
    async with serve(make_app(spec_config(redis_url, routes=ROUTES))) as http:
        response = await http.post("/v1/docs/1")

    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert probe.calls == {}


@pytest.mark.security
async def test_a_get_entry_also_guards_head_requests(
    make_app: MakeApp, redis_url: str, probe: Probe
) -> None:
    async with serve(make_app(spec_config(redis_url, routes=ROUTES))) as http:
        statuses = [(await http.head("/v1/plain", headers=AUTH)).status_code for _ in range(3)]
        statuses.append((await http.get("/v1/plain", headers=AUTH)).status_code)

    assert statuses == [200, 200, 200, 429]
    assert probe.calls == {"plain": 3}


async def test_middleware_streams_the_response_and_adds_headers_to_its_start(
    make_app: MakeApp, redis_url: str, probe: Probe
) -> None:
    app = make_app(spec_config(redis_url, routes=ROUTES))
    probe.stream_gate = anyio.Event()
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()  # the client never disconnects
        raise AssertionError  # pragma: no cover

    async def send(message: Message) -> None:
        sent.append(dict(message))
        if message["type"] == "http.response.body" and message.get("body") == b"first\n":
            # Only a response that was not buffered reaches here before it completes.
            assert probe.stream_gate is not None
            probe.stream_gate.set()

    scope = http_scope("GET", "/v1/stream", [(b"host", b"testserver")])
    async with lifespan(app):
        with anyio.fail_after(5):
            await app(scope, receive, send)

    start = sent[0]
    assert start["type"] == "http.response.start"
    assert start["status"] == 200
    headers = dict(start["headers"])
    assert headers[b"ratelimit"].startswith(b'"auth.login";r=1;')
    assert headers[b"set-cookie"].startswith(b"sentinel_device=")
    bodies = [message.get("body", b"") for message in sent[1:]]
    assert bodies[:2] == [b"first\n", b"second\n"]
    assert probe.calls == {"stream": 1}


async def test_middleware_lets_websockets_through(make_app: MakeApp, redis_url: str) -> None:
    app = make_app(spec_config(redis_url, routes=ROUTES))
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    sent: list[dict[str, Any]] = []
    await inbox.put({"type": "websocket.connect"})

    async def send(message: Message) -> None:
        sent.append(dict(message))

    scope = {
        "type": "websocket",
        "asgi": {"version": "3.0"},
        "scheme": "ws",
        "path": "/ws",
        "raw_path": b"/ws",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"testserver")],
        "client": PEER,
        "server": ("testserver", 80),
        "subprotocols": [],
    }
    async with lifespan(app):
        with anyio.fail_after(5):
            await app(scope, inbox.get, send)

    assert [message["type"] for message in sent] == [
        "websocket.accept",
        "websocket.send",
        "websocket.close",
    ]
    assert sent[1]["text"] == "hello"


async def test_decorated_route_without_init_app_fails_instead_of_serving_unguarded() -> None:
    app = FastAPI()

    @app.get("/open")
    @rate_limited("pdftalk.ingest")
    async def handler() -> dict[str, str]:
        raise AssertionError("must not run")  # pragma: no cover

    async with client(app) as http:
        with pytest.raises(RuntimeError, match=r"init_app"):
            await http.get("/open")


def test_generator_handlers_and_double_decoration_are_refused() -> None:
    def stream() -> Any:
        yield b"x"  # pragma: no cover

    with pytest.raises(TypeError, match="generator"):
        rate_limited("pdftalk.ingest")(stream)

    @rate_limited("pdftalk.ingest")
    async def once() -> None: ...

    with pytest.raises(TypeError, match="already rate limited"):
        rate_limited("auth.login")(once)


async def test_a_router_included_twice_reports_each_prefix_as_its_route(redis_url: str) -> None:
    recorder = Recorder()
    sentinel = Sentinel(spec_config(redis_url), registry=CollectorRegistry(), plugins=[recorder])
    app = FastAPI()
    sentinel.init_app(app)
    router = APIRouter()

    @router.post("/ingest/{doc_id}")
    @rate_limited("pdftalk.ingest")
    async def ingest(doc_id: int) -> dict[str, int]:
        return {"doc_id": doc_id}

    app.include_router(router, prefix="/v1")
    app.include_router(router, prefix="/v2")
    async with lifespan(app), client(app) as http:
        v1 = await http.post("/v1/ingest/1", headers=AUTH)
        v2 = await http.post("/v2/ingest/2", headers=AUTH)

    assert (v1.status_code, v2.status_code) == (200, 200)
    assert [view.route for view in recorder.views] == ["/v1/ingest/{doc_id}", "/v2/ingest/{doc_id}"]
