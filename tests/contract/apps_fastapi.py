"""The contract app on FastAPI, served through ``httpx.ASGITransport`` with its lifespan."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

import httpx
from fastapi import FastAPI, HTTPException, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from prometheus_client import CollectorRegistry

import sentinel_core
from sentinel_core import ConfigError
from sentinel_fastapi import RateLimitExceeded, Sentinel, rate_limited
from tests.contract.harness import (
    Refused,
    Reply,
    contract_user,
    lower_headers,
    rendered,
    renders_denials,
    report_bad,
    report_midway,
    routes_for,
    spell_braces,
)
from tests.fastapi.conftest import LifespanFailed, lifespan

PEER = ("203.0.113.7", 50000)


def build_app(config: Mapping[str, Any]) -> tuple[FastAPI, Sentinel]:
    config, render = renders_denials(config)
    sentinel = Sentinel(
        routes_for(config, spell_braces),
        registry=CollectorRegistry(),
        entry_points=False,
        identify=contract_user,
    )
    app = FastAPI()
    sentinel.init_app(app)
    if render:

        @app.exception_handler(RateLimitExceeded)
        async def render_denial(request: Request, exc: RateLimitExceeded) -> JSONResponse:
            return JSONResponse(rendered(exc.decision), status_code=exc.status_code)

    @app.post("/decorated")
    @rate_limited("small")
    async def decorated() -> dict[str, bool]:
        return {"ok": True}

    @app.post("/same/{item_id}")
    @rate_limited("small")
    async def same(item_id: int) -> dict[str, int]:
        return {"item": item_id}

    @app.post("/different/{item_id}")
    @rate_limited("small")
    def different(item_id: int) -> dict[str, int]:
        return {"item": item_id}

    @app.api_route("/routed/{item_id}", methods=["GET", "HEAD"])  # FastAPI's GET is GET only
    async def routed(item_id: int) -> dict[str, int]:
        return {"item": item_id}

    @app.post("/login")
    @rate_limited("device")
    async def login() -> dict[str, bool]:
        return {"ok": True}

    @app.get("/inner/{status}")
    @rate_limited("device")
    async def inner(status: int) -> Response:
        return Response(status_code=status)

    @app.post("/count/{status}")
    @rate_limited("failures")
    async def count(status: int) -> Response:
        return Response(status_code=status)

    @app.post("/raise")
    @rate_limited("failures")
    async def fail() -> None:
        raise RuntimeError("the handler failed")

    @app.post("/refuse")
    @rate_limited("failures")
    async def refuse() -> None:
        raise HTTPException(403)

    @app.get("/slot/{kind}")
    @rate_limited("slot")
    def slot(kind: int) -> None:
        if kind == 1:
            raise RuntimeError("the handler failed")
        raise HTTPException(403)

    @app.get("/stream")
    async def stream() -> StreamingResponse:
        async def chunks() -> AsyncIterator[bytes]:
            for chunk in (b"a", b"b", b"c"):
                yield chunk

        return StreamingResponse(chunks())

    @app.post("/usage/{units}")
    @rate_limited("usage")
    async def usage(units: int) -> dict[str, int]:
        sentinel_core.settle(units)
        return {"units": units}

    @app.post("/usage-sync/{units}")
    @rate_limited("usage")
    def usage_sync(units: int) -> dict[str, int]:
        sentinel_core.settle(units)
        return {"units": units}

    @app.get("/usage-stream/{units}")
    @rate_limited("usage")
    async def usage_stream(units: int) -> StreamingResponse:
        def chunks() -> Iterator[bytes]:  # iterated in Starlette's thread pool
            for chunk in (b"a", b"b", b"c"):
                sentinel_core.settle(units)
                yield chunk

        return StreamingResponse(chunks())

    @app.get("/usage-astream/{units}")
    @rate_limited("usage")
    async def usage_astream(units: int) -> StreamingResponse:
        async def chunks() -> AsyncIterator[bytes]:
            for chunk in (b"a", b"b", b"c"):
                sentinel_core.settle(units)
                yield chunk

        return StreamingResponse(chunks())

    @app.get("/usage-download/{units}")
    @rate_limited("usage")
    async def usage_download(units: int) -> StreamingResponse:
        def chunks() -> Iterator[bytes]:
            for chunk in (b"a", b"b", b"c"):
                sentinel_core.settle(units)
                yield chunk

        return StreamingResponse(chunks(), headers={"Content-Length": "3"})

    @app.post("/usage-raise/{units}")
    @rate_limited("usage")
    async def usage_raise(units: int) -> None:
        sentinel_core.settle(units)
        raise RuntimeError("the handler failed")

    @app.post("/usage-count/{status}")
    @rate_limited("usage.count")
    async def usage_count(status: int) -> Response:
        sentinel_core.settle(7)
        return Response(status_code=status)

    @app.post("/report/{units}")
    def report(units: int) -> dict[str, int]:
        sentinel_core.settle(units)
        return {"units": units}

    @app.post("/report-bad/{kind}")
    def report_bad_(kind: int) -> None:
        report_bad(kind)

    @app.post("/report-midway/{units}")
    async def report_midway_(units: int) -> dict[str, int]:
        report_midway(units)
        return {"units": units}

    @app.get("/user")
    @rate_limited("user")
    async def user() -> dict[str, bool]:
        return {"ok": True}

    @app.get("/open")
    async def open_() -> dict[str, bool]:
        return {"ok": True}

    return app, sentinel


class FastApiClient:
    def __init__(self, app: FastAPI, core: Sentinel) -> None:
        self.core = core
        self.loop = asyncio.new_event_loop()
        self._stack = contextlib.AsyncExitStack()
        transport = httpx.ASGITransport(app=app, client=PEER, raise_app_exceptions=False)
        self._http = httpx.AsyncClient(transport=transport, base_url="http://testserver")
        try:
            self.loop.run_until_complete(self._stack.enter_async_context(lifespan(app)))
        except LifespanFailed as exc:
            self.close()
            raise Refused(str(exc)) from exc

    def request(self, method: str, path: str, *, headers: Mapping[str, str] | None = None) -> Reply:
        response = self.loop.run_until_complete(
            self._http.request(method, path, headers=dict(headers or {}))
        )
        return self._reply(response)

    def concurrently(
        self, requests: Sequence[tuple[str, str]], *, headers: Mapping[str, str] | None = None
    ) -> list[Reply]:
        """The requests as concurrent tasks of the app's event loop (an ASGI server's)."""

        async def send() -> list[httpx.Response]:
            return await asyncio.gather(
                *(self._http.request(m, p, headers=dict(headers or {})) for m, p in requests)
            )

        return [self._reply(response) for response in self.loop.run_until_complete(send())]

    @staticmethod
    def _reply(response: httpx.Response) -> Reply:
        return Reply(
            response.status_code,
            lower_headers(list(response.headers.multi_items())),
            response.content,
            response.headers.get_list("set-cookie"),
        )

    def close(self) -> None:
        try:
            self.loop.run_until_complete(self._http.aclose())
            self.loop.run_until_complete(self._stack.aclose())
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        finally:
            self.loop.close()


class FastApiFactory:
    name = "fastapi"

    def build(self, config: Mapping[str, Any]) -> FastApiClient:
        try:
            app, sentinel = build_app(config)
        except ConfigError as exc:
            raise Refused(str(exc)) from exc
        return FastApiClient(app, sentinel)
