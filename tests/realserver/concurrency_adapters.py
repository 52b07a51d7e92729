"""The real-server concurrency apps written with the adapters: FastAPI (served by uvicorn)
and Flask (served by gunicorn), one concurrency policy guarding three routes through the
``routes`` table, tenants from bearer tokens. The adapters' completion step hands each
lease back: after the response, an exception (500), a streamed body's end, or a client
that went away mid-stream.

Configured like `concurrency_app` by the environment (``SENTINEL_REDIS_URL``,
``OVERLAP_REDIS_URL``, ``CONCURRENCY_LIMIT``, ``LEASE_SECONDS``).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from fastapi import FastAPI
from fastapi.responses import StreamingResponse
from flask import Flask, Response, request

import sentinel_fastapi
import sentinel_flask
from tests.realserver.overlap import running
from tests.support.tokens import HS_SECRET


def config() -> dict[str, Any]:
    return {
        "redis_url": os.environ.get("SENTINEL_REDIS_URL", "memory://"),
        "socket_timeout_ms": 2000,
        "require_noeviction": False,
        "jwt": {"algorithms": ["HS256"], "key": HS_SECRET},
        "policies": {
            "render": {
                "algorithm": "concurrency",
                "limit": int(os.environ.get("CONCURRENCY_LIMIT", "5")),
                "lease_seconds": int(os.environ.get("LEASE_SECONDS", "30")),
                "fail_mode": "closed",
            }
        },
        "routes": {"GET /slow": "render", "GET /boom": "render", "GET /stream": "render"},
    }


# -- FastAPI --------------------------------------------------------------------------------

fastapi_app = FastAPI()
sentinel_fastapi.Sentinel(config()).init_app(fastapi_app)


@fastapi_app.get("/health")
async def fastapi_health() -> dict[str, str]:
    return {"status": "ok"}


@fastapi_app.get("/slow")
async def fastapi_slow(ms: int = 0) -> dict[str, str]:
    with running():
        await asyncio.sleep(ms / 1000)
    return {"status": "done"}


@fastapi_app.get("/boom")
async def fastapi_boom() -> dict[str, str]:
    with running():
        raise RuntimeError("the handler failed")


@fastapi_app.get("/stream")
async def fastapi_stream(chunks: int = 3, ms: int = 100) -> StreamingResponse:
    async def body() -> AsyncIterator[bytes]:
        with running():
            for index in range(chunks):
                yield b"chunk\n"
                if index < chunks - 1:
                    await asyncio.sleep(ms / 1000)

    return StreamingResponse(body(), media_type="text/plain")


# -- Flask ----------------------------------------------------------------------------------

flask_app = Flask(__name__)
flask_app.config["SENTINEL"] = config()
sentinel_flask.Sentinel().init_app(flask_app)


@flask_app.get("/health")
def flask_health() -> str:
    return "ok"


@flask_app.get("/slow")
def flask_slow() -> str:
    with running():
        time.sleep(int(request.args.get("ms", "0")) / 1000)
    return "done"


@flask_app.get("/boom")
def flask_boom() -> str:
    with running():
        raise RuntimeError("the handler failed")


@flask_app.get("/stream")
def flask_stream() -> Response:
    chunks, ms = int(request.args.get("chunks", "3")), int(request.args.get("ms", "100"))

    def body() -> Iterator[bytes]:
        with running():
            for index in range(chunks):
                yield b"chunk\n"
                if index < chunks - 1:
                    time.sleep(ms / 1000)

    return Response(body(), mimetype="text/plain")
