"""The app of the real-server concurrency tests: one concurrency policy, guarded through
the framework-neutral facade (`aevaluate`/`arelease` in ASGI, `evaluate`/`release` in
WSGI), whose handlers record how many of them run at once.

Each worker process imports this module and builds its own Sentinel; the leases are
shared through Redis. Configured by the environment: ``SENTINEL_REDIS_URL`` (the
store), ``OVERLAP_REDIS_URL`` (a plain server where handlers count themselves),
``CONCURRENCY_LIMIT`` and ``LEASE_SECONDS``.

Routes (tenant ``?t=``, default ``acme``): ``/slow?ms=N`` sleeps; ``/boom`` raises;
``/stream?chunks=N&ms=M`` streams N chunks M ms apart (the lease is handed back when the
body is done); ``/health`` is not guarded. In ASGI a client that disconnects cancels the
handler, as Starlette does; the lease is handed back whatever ends the handler.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any
from urllib.parse import parse_qs

from prometheus_client import CollectorRegistry

from sentinel_core import Decision, Sentinel
from tests.realserver.overlap import running

ENDPOINT = "render"
CONFIG = {
    "redis_url": os.environ.get("SENTINEL_REDIS_URL", "memory://"),
    "socket_timeout_ms": 2000,
    "require_noeviction": False,
    "policies": {
        ENDPOINT: {
            "algorithm": "concurrency",
            "limit": int(os.environ.get("CONCURRENCY_LIMIT", "5")),
            "lease_seconds": int(os.environ.get("LEASE_SECONDS", "30")),
            "fail_mode": "closed",
        }
    },
}
sentinel = Sentinel(CONFIG, registry=CollectorRegistry(), entry_points=False)
sentinel.startup()  # the blocking store's start-up check (WSGI); ASGI runs astartup too
Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]


def _params(query: bytes | str) -> tuple[str, int, int]:
    values = parse_qs(query.decode() if isinstance(query, bytes) else query)
    return (
        values.get("t", ["acme"])[0],
        int(values.get("ms", ["0"])[0]),
        int(values.get("chunks", ["3"])[0]),
    )


def _denial(decision: Decision) -> tuple[int, list[tuple[str, str]], bytes]:
    outcome = sentinel.http.outcome(decision, None)
    return outcome.status, list(outcome.headers), outcome.body


# -- ASGI (uvicorn) -------------------------------------------------------------------------


async def asgi_app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await sentinel.astartup()  # as the adapters do: loads the cluster's topology
            await send({"type": "lifespan.startup.complete"})
        await sentinel.aclose()
        await send({"type": "lifespan.shutdown.complete"})
        return
    path = scope["path"]
    if path == "/health":
        await _respond(send, 200, [], b"ok")
        return
    tenant, ms, chunks = _params(scope["query_string"])
    decision = await sentinel.aevaluate(ENDPOINT, tenant)
    if not decision.allowed:
        await _respond(send, *_denial(decision))
        return
    try:
        handler = asyncio.ensure_future(_handle(path, ms, chunks, send))
        watcher = asyncio.ensure_future(_disconnected(receive))
        await asyncio.wait({handler, watcher}, return_when=asyncio.FIRST_COMPLETED)
        watcher.cancel()
        if not handler.done():  # the client went away: cancel the handler, as Starlette does
            handler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await handler  # re-raises the handler's own exception (uvicorn answers 500)
    finally:
        await asyncio.shield(sentinel.arelease(decision))


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _handle(path: str, ms: int, chunks: int, send: Send) -> None:
    with running():
        if path == "/boom":
            raise RuntimeError("the handler failed")
        if path == "/stream":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            for index in range(chunks):
                await send({"type": "http.response.body", "body": b"chunk\n", "more_body": True})
                if index < chunks - 1:
                    await asyncio.sleep(ms / 1000)
            await send({"type": "http.response.body", "body": b""})
            return
        await asyncio.sleep(ms / 1000)
    await _respond(send, 200, [], b"done")


async def _respond(send: Send, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
    raw = [(name.lower().encode(), value.encode()) for name, value in headers]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


# -- WSGI (gunicorn) ------------------------------------------------------------------------


def wsgi_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    path = environ["PATH_INFO"]
    if path == "/health":
        start_response("200 OK", [])
        return [b"ok"]
    tenant, ms, chunks = _params(environ.get("QUERY_STRING", ""))
    decision = sentinel.evaluate(ENDPOINT, tenant)
    if not decision.allowed:
        status, headers, body = _denial(decision)
        start_response(f"{status} Too Many Requests", headers)
        return [body]
    if path == "/stream":
        start_response("200 OK", [])
        return _Releasing(_stream(chunks, ms), decision)
    try:
        with running():
            if path == "/boom":
                raise RuntimeError("the handler failed")
            time.sleep(ms / 1000)
    finally:
        sentinel.release(decision)
    start_response("200 OK", [])
    return [b"done"]


def _stream(chunks: int, ms: int) -> Iterator[bytes]:
    with running():
        for index in range(chunks):
            yield b"chunk\n"
            if index < chunks - 1:
                time.sleep(ms / 1000)


class _Releasing:
    """A WSGI body that hands the lease back when the server closes it: after the last
    chunk, or when writing to a client that went away failed (PEP 3333 ``close``)."""

    def __init__(self, body: Iterator[bytes], decision: Decision) -> None:
        self._body = body
        self._decision = decision

    def __iter__(self) -> Iterator[bytes]:
        return self._body

    def close(self) -> None:
        try:
            self._body.close()  # type: ignore[attr-defined]
        finally:
            sentinel.release(self._decision)
