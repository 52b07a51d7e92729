"""The FastAPI app the suite drives: every way a route can be guarded, and a lifespan.

`build_app` registers, after ``init_app`` as the README shows:

- ``POST /v1/tailor`` async, ``@rate_limited("resumint.tailor")`` (tenant, fail-open),
  with a query parameter, a dependency and a response model;
- ``POST /v1/ingest`` async and ``POST /v1/ingest-sync`` sync, both
  ``@rate_limited("pdftalk.ingest")`` (tenant sliding window, fail-closed);
- ``POST /auth/login`` ``@rate_limited("auth.login")`` (anonymous);
- ``GET /v1/report`` returning its own `Response`, ``@rate_limited("resumint.tailor")``;
- an ``APIRouter`` with prefix ``/docs`` included under ``/v1``: a decorated
  ``POST /v1/docs/{doc_id}/tailor`` and an undecorated ``POST /v1/docs/{doc_id}`` that
  the ``routes`` configuration can name;
- undecorated ``GET /v1/stream`` (a streaming response), ``GET /v1/items/{item_id}`` and
  the Starlette route ``GET /v1/plain`` for ``routes``, ``GET /health`` never guarded,
  and a websocket ``/ws``.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
from fastapi import APIRouter, Depends, FastAPI, Request, WebSocket
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from pydantic import BaseModel

from sentinel_fastapi import Sentinel, rate_limited


@dataclass
class Probe:
    """What the app saw: handler runs, lifespan events, the threads sync handlers ran on."""

    calls: dict[str, int] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)
    threads: list[int] = field(default_factory=list)
    stream_gate: anyio.Event | None = None

    def hit(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1


class Tailored(BaseModel):
    resume: str
    style: str
    user: str


def current_user() -> str:
    return "dependency-user"


def build_app(sentinel: Sentinel, probe: Probe) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
        probe.events.append("app startup")
        yield {"greeting": "from the app's lifespan"}
        probe.events.append("app shutdown")

    app = FastAPI(lifespan=lifespan)
    sentinel.init_app(app)

    @app.post("/v1/tailor", response_model=Tailored, summary="Tailor a resume")
    @rate_limited("resumint.tailor")
    async def tailor(style: str = "plain", user: str = Depends(current_user)) -> Any:
        """Tailor the resume to a job description."""
        probe.hit("tailor")
        return {"resume": "ok", "style": style, "user": user, "dropped": "by response_model"}

    @app.post("/v1/ingest")
    @rate_limited("pdftalk.ingest")
    async def ingest() -> dict[str, str]:
        probe.hit("ingest")
        return {"ingested": "yes"}

    @app.post("/v1/ingest-sync")
    @rate_limited("pdftalk.ingest")
    def ingest_sync() -> dict[str, str]:
        probe.hit("ingest-sync")
        probe.threads.append(threading.get_ident())
        return {"ingested": "sync"}

    @app.post("/auth/login")
    @rate_limited("auth.login")
    async def login() -> dict[str, str]:
        probe.hit("login")
        return {"login": "ok"}

    @app.get("/v1/report")
    @rate_limited("resumint.tailor")
    async def report() -> JSONResponse:
        probe.hit("report")
        return JSONResponse({"report": "ok"}, headers={"X-Report": "own"})

    router = APIRouter(prefix="/docs")

    @router.post("/{doc_id}/tailor")
    @rate_limited("resumint.tailor")
    async def tailor_doc(doc_id: int) -> dict[str, int]:
        probe.hit("tailor-doc")
        return {"doc_id": doc_id}

    @router.post("/{doc_id}")
    async def upload_doc(doc_id: int) -> dict[str, int]:
        probe.hit("upload-doc")
        return {"doc_id": doc_id}

    app.include_router(router, prefix="/v1")

    @app.get("/v1/items/{item_id}")
    async def item(item_id: str) -> dict[str, str]:
        probe.hit("item")
        return {"item_id": item_id}

    @app.get("/v1/stream")
    async def stream() -> StreamingResponse:
        async def chunks() -> AsyncIterator[bytes]:
            yield b"first\n"
            # Held until the client has received the first chunk: a buffering
            # middleware would deadlock here instead of streaming.
            if probe.stream_gate is not None:
                await probe.stream_gate.wait()
            yield b"second\n"

        probe.hit("stream")
        return StreamingResponse(chunks(), media_type="text/plain")

    async def plain(request: Request) -> PlainTextResponse:
        probe.hit("plain")
        return PlainTextResponse("plain")

    # A Starlette route: GET routes also answer HEAD, which a GET entry must guard.
    app.add_route("/v1/plain", plain, methods=["GET"])

    @app.get("/health")
    async def health() -> dict[str, str]:
        probe.hit("health")
        return {"status": "ok"}

    @app.websocket("/ws")
    async def websocket(socket: WebSocket) -> None:
        await socket.accept()
        await socket.send_text("hello")
        await socket.close()

    return app


MakeApp = Callable[..., FastAPI]
