"""Before/after at the HTTP level: what a guarded request costs, as a multiple of an
in-stack floor, for two versions of Sentinel side by side in one run.

Per framework (Flask, FastAPI, Django), each version runs in its own worker process
(``PYTHONPATH`` pointing at that version's source tree: a git worktree of the "before"
commit, and this tree) that serves three views in process, through the framework's own
test client, on one private redis-server started here:

* ``bare``: an unguarded view returning a tiny JSON body;
* ``floor``: the same view doing one bare ``EVALSHA`` of ``return 1`` (redis-py, sync for
  Flask and Django, asyncio for FastAPI): the least any Redis-backed limiter can add;
* ``sentinel``: the same view under ``@rate_limited`` with a tenant (JWT) token bucket, a
  limit far above what one process can send (the benchmark measures allowing).

Reported per version: ``(p50(sentinel) - p50(bare)) / (p50(floor) - p50(bare))``, the
added p50 over the added p50 of the floor. The driver alternates the two workers round
after round (one at a time, never concurrently), so machine noise spreads over both.

    python benchmarks/bench_http_before_after.py --before /path/to/before-worktree \\
        [--rounds 12] [--requests 300] [--frameworks flask fastapi django]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

JWT_KEY = "benchmark-jwt-key-0123456789abcdef-0123456789"
NEVER_DENY = 1_000_000
VARIANTS = ("bare", "floor", "sentinel")
ROOT = Path(__file__).resolve().parents[1]


def _token() -> str:
    import jwt

    claims = {"sub": "tenant-42", "exp": int(time.time()) + 3600}
    return f"Bearer {jwt.encode(claims, JWT_KEY, 'HS256')}"


def sentinel_config(redis_url: str) -> dict[str, Any]:
    return {
        "redis_url": redis_url,
        "socket_timeout_ms": 2_000,  # generous on a loaded machine: no fail-closed noise
        "jwt": {"algorithms": ["HS256"], "key": JWT_KEY},
        "policies": {
            "bench.work": {
                "algorithm": "token_bucket",
                "rate": f"{NEVER_DENY}/second",
                "fail_mode": "closed",
            }
        },
    }


# -- workers: one framework, one version of Sentinel --------------------------------------

Send = Callable[[str], int]
"""POST one path through the framework's test client; the status."""


def flask_sender(redis_url: str) -> Send:
    import redis
    from flask import Flask
    from prometheus_client import CollectorRegistry

    from sentinel_flask import Sentinel, rate_limited

    client = redis.Redis.from_url(redis_url)
    floor_sha = client.script_load("return 1")
    app = Flask("bench")
    app.config["SENTINEL"] = sentinel_config(redis_url)

    @app.post("/bare")
    def bare() -> dict[str, bool]:
        return {"ok": True}

    @app.post("/floor")
    def floor() -> dict[str, bool]:
        client.evalsha(floor_sha, 0)
        return {"ok": True}

    @app.post("/sentinel")
    @rate_limited("bench.work")
    def guarded() -> dict[str, bool]:
        return {"ok": True}

    Sentinel(app, registry=CollectorRegistry())
    test_client = app.test_client()
    headers = {"Authorization": _token()}
    return lambda path: test_client.post(path, headers=headers).status_code


def fastapi_sender(redis_url: str) -> tuple[Send, Callable[[], None]]:
    import httpx
    import redis.asyncio
    from fastapi import FastAPI
    from prometheus_client import CollectorRegistry

    from sentinel_fastapi import Sentinel, rate_limited

    loop = asyncio.new_event_loop()
    client = redis.asyncio.Redis.from_url(redis_url)
    floor_sha = loop.run_until_complete(client.script_load("return 1"))
    app = FastAPI()

    @app.post("/bare")
    async def bare() -> dict[str, bool]:
        return {"ok": True}

    @app.post("/floor")
    async def floor() -> dict[str, bool]:
        await client.evalsha(floor_sha, 0)
        return {"ok": True}

    @app.post("/sentinel")
    @rate_limited("bench.work")
    async def guarded() -> dict[str, bool]:
        return {"ok": True}

    Sentinel(sentinel_config(redis_url), registry=CollectorRegistry()).init_app(app)
    lifespan = app.router.lifespan_context(app)
    loop.run_until_complete(lifespan.__aenter__())
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 50000))
    http = httpx.AsyncClient(transport=transport, base_url="http://bench")
    headers = {"Authorization": _token()}

    def send(path: str) -> int:
        return loop.run_until_complete(http.post(path, headers=headers)).status_code

    def close() -> None:
        loop.run_until_complete(lifespan.__aexit__(None, None, None))
        loop.run_until_complete(http.aclose())

    return send, close


urlpatterns: list[Any] = []


def django_sender(redis_url: str) -> Send:
    import django
    import redis
    from django.conf import settings
    from django.http import HttpRequest, JsonResponse
    from django.test import Client
    from django.urls import path

    settings.configure(
        DEBUG=False,
        SECRET_KEY="benchmark-only-0123456789abcdef0123456789abcdef",
        ALLOWED_HOSTS=["testserver"],
        ROOT_URLCONF=__name__,
        INSTALLED_APPS=["sentinel_django"],
        MIDDLEWARE=[],
        SENTINEL=sentinel_config(redis_url),
    )
    django.setup()
    from sentinel_django import rate_limited

    client = redis.Redis.from_url(redis_url)
    floor_sha = client.script_load("return 1")

    def bare(request: HttpRequest) -> JsonResponse:
        return JsonResponse({"ok": True})

    def floor(request: HttpRequest) -> JsonResponse:
        client.evalsha(floor_sha, 0)
        return JsonResponse({"ok": True})

    @rate_limited("bench.work")
    def guarded(request: HttpRequest) -> JsonResponse:
        return JsonResponse({"ok": True})

    urlpatterns.extend([path("bare", bare), path("floor", floor), path("sentinel", guarded)])
    test_client = Client(HTTP_AUTHORIZATION=_token())
    return lambda route: test_client.post(route).status_code


def worker(framework: str, redis_url: str) -> None:
    """Serve rounds on stdin: each line is a request count; each answer one JSON line of
    per-variant latencies in nanoseconds (variants in a fresh order every round)."""
    close: Callable[[], None] = lambda: None  # noqa: E731
    if framework == "flask":
        send = flask_sender(redis_url)
    elif framework == "fastapi":
        send, close = fastapi_sender(redis_url)
    else:
        send = django_sender(redis_url)
    for variant in VARIANTS:  # warm up: imports, first connections, script loads
        for _ in range(50):
            assert send(f"/{variant}") == 200, variant
    import random

    for line in sys.stdin:
        count = int(line)
        order = list(VARIANTS)
        random.shuffle(order)
        timings: dict[str, list[int]] = {}
        for variant in order:
            route, samples = f"/{variant}", []
            for _ in range(count):
                started = time.perf_counter_ns()
                status = send(route)
                samples.append(time.perf_counter_ns() - started)
                assert status == 200, (variant, status)
            timings[variant] = samples
        print(json.dumps(timings), flush=True)
    close()


# -- driver ----------------------------------------------------------------------------------


def ratio(timings: dict[str, list[int]]) -> tuple[float, float, float, float]:
    """(p50 bare µs, added p50 of the floor µs, added p50 of Sentinel µs, their ratio)."""
    p50 = {variant: statistics.median(samples) / 1_000 for variant, samples in timings.items()}
    floor = p50["floor"] - p50["bare"]
    added = p50["sentinel"] - p50["bare"]
    return p50["bare"], floor, added, added / floor


def drive(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT))
    from tests.support.redis_server import RedisServer

    server = RedisServer().start()
    after = Path(args.after).resolve() if args.after else ROOT
    versions = {"before": Path(args.before).resolve(), "after": after}
    rows = []
    try:
        for framework in args.frameworks:
            workers = {
                name: subprocess.Popen(
                    [sys.executable, __file__, "--worker", framework, "--redis", server.url],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                    env={**os.environ, "PYTHONPATH": str(tree)},
                    cwd="/",
                )
                for name, tree in versions.items()
            }
            collected: dict[str, dict[str, list[int]]] = {
                name: {variant: [] for variant in VARIANTS} for name in versions
            }
            for round_index in range(args.rounds):
                names = list(workers) if round_index % 2 == 0 else list(reversed(workers))
                for name in names:
                    process = workers[name]
                    assert process.stdin is not None
                    assert process.stdout is not None
                    process.stdin.write(f"{args.requests}\n")
                    process.stdin.flush()
                    for variant, samples in json.loads(process.stdout.readline()).items():
                        collected[name][variant].extend(samples)
            for process in workers.values():
                assert process.stdin is not None
                process.stdin.close()
                process.wait(timeout=60)
            for name in versions:
                bare, floor, added, result = ratio(collected[name])
                rows.append((framework, name, bare, floor, added, result))
            print(_table(rows[-2:]), flush=True)
    finally:
        server.close()
    print()
    print(_table(rows))


def _table(rows: list[tuple[str, str, float, float, float, float]]) -> str:
    lines = [
        "| framework | version | p50 unguarded µs | floor adds µs | Sentinel adds µs"
        " | added / floor |",
        "|---|---|---|---|---|---|",
    ]
    for framework, name, bare, floor, added, result in rows:
        lines.append(
            f"| {framework} | {name} | {bare:,.0f} | {floor:,.1f} | {added:,.1f} | {result:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", help="source tree of the version to compare against")
    parser.add_argument("--after", help="source tree of the new version (default: this one)")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--requests", type=int, default=300, help="per variant and round")
    parser.add_argument("--frameworks", nargs="+", default=["flask", "fastapi", "django"])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--redis", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.redis)
    else:
        if not args.before:
            parser.error("--before is required")
        drive(args)


if __name__ == "__main__":
    main()
