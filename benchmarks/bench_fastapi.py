"""FastAPI: what a guarded request costs, Sentinel against slowapi and fastapi-limiter.

The full HTTP path in process: every request goes through ``httpx.AsyncClient`` on
``httpx.ASGITransport`` (ASGI scope, middleware, routing, dependency injection, the
handler, serialization), so the figures hold everything a limiter adds to a request
and nothing of a network or a server. Every variant serves the same tiny JSON handler;
the guarded ones use limits far above what one process can send, so the benchmark
measures the cost of allowing, the common case.

Variants (all on the same private redis-server, started here):

* ``fastapi``: unguarded, the baseline.
* ``sentinel-tb`` / ``sentinel-sw``: ``@rate_limited`` with a tenant (JWT-verified)
  token bucket / sliding window on the asyncio store; RateLimit headers, metrics and
  denial logs on (they are built in).
* ``slowapi-ip``: slowapi's documented setup (``@limiter.limit``, key = remote address,
  headers off: its cheapest), on ``limits``' Redis storage. slowapi only has the
  blocking redis-py storage, so each check blocks the event loop for a round trip.
* ``slowapi-jwt``: the same, keyed by the verified JWT ``sub``; ``slowapi-jwt-headers``
  also writes its ``X-RateLimit-*`` headers (``headers_enabled=True``, a second Redis
  call per request): like for like with Sentinel.
* ``fastapi-limiter-ip``: fastapi-limiter 0.2's ``Depends(RateLimiter(...))`` with its
  default identifier (IP + path) on pyrate-limiter's ``RedisBucket`` (asyncio client).
* ``fastapi-limiter-jwt``: the same with an identifier verifying the JWT.

Two floors: one bare ``EVALSHA`` of ``return 1`` on redis-py's asyncio client, timed
alone in a loop, and ``fastapi+evalsha``, the unguarded handler awaiting that same
``EVALSHA``: what one Redis round trip costs inside the ASGI stack (an await that
suspends and resumes every frame of the request), which any limiter that asks Redis
once per request pays.

Two measurements, variants interleaved round after round so machine noise spreads over
all of them: sequential requests (one client), and 8 concurrent clients (8 tasks, each
sending its requests one after the other, on the one event loop). Reported: throughput
relative to ``fastapi`` (guarded/unguarded; higher is better) and the p50/p99 latency
each limiter adds over ``fastapi``.

Run from the repository root::

    python benchmarks/bench_fastapi.py              # about a minute
    python benchmarks/bench_fastapi.py --quick      # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if not __package__:  # run as a file: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
import jwt
import redis.asyncio
from fastapi import Depends, FastAPI, Request, Response
from fastapi_limiter.depends import RateLimiter
from prometheus_client import CollectorRegistry
from pyrate_limiter import Duration, Limiter, Rate, RedisBucket
from slowapi import Limiter as SlowLimiter
from slowapi import _rate_limit_exceeded_handler
from slowapi.errors import RateLimitExceeded
from slowapi.util import get_remote_address

from benchmarks._common import (
    machine_note,
    markdown_table,
    percentile,
    private_redis,
)
from sentinel_fastapi import Sentinel, rate_limited

JWT_KEY = "benchmark-jwt-key-0123456789abcdef-0123456789"
NEVER_DENY = 1_000_000  # per second: far above what one process can send
TOKEN = jwt.encode({"sub": "tenant-42", "exp": int(time.time()) + 3600}, JWT_KEY, "HS256")
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
CONCURRENCY = 8
BASELINE = "fastapi"
IN_STACK_FLOOR = "fastapi+evalsha"
Send = Callable[[], Awaitable[None]]


def verified_sub(request: Request) -> str:
    """The peers' JWT key function: what Sentinel does for a tenant, done by hand."""
    token = request.headers.get("authorization", "").removeprefix("Bearer ")
    claims = jwt.decode(token, JWT_KEY, algorithms=["HS256"], options={"require": ["exp", "sub"]})
    return str(claims["sub"])


def unguarded_app() -> FastAPI:
    app = FastAPI()

    @app.get("/work")
    async def work() -> dict[str, bool]:
        return {"ok": True}

    return app


def evalsha_app(client: redis.asyncio.Redis, sha: str) -> FastAPI:
    """The unguarded handler plus one bare EVALSHA: a Redis round trip's cost inside the
    ASGI stack, the floor of any limiter that asks Redis once per request."""
    app = FastAPI()

    @app.get("/work")
    async def work() -> dict[str, bool]:
        await client.evalsha(sha, 0)
        return {"ok": True}

    return app


def sentinel_app(redis_url: str, algorithm: str) -> FastAPI:
    policy: dict[str, Any] = {
        "algorithm": algorithm,
        "rate": f"{NEVER_DENY}/second",
        "fail_mode": "closed",
    }
    config = {
        "redis_url": redis_url,
        # Generous on a loaded 2-core machine: a timeout would turn into 503 noise.
        "socket_timeout_ms": 250,
        "jwt": {"algorithms": ["HS256"], "key": JWT_KEY},
        "policies": {"bench.work": policy},
    }
    app = FastAPI()
    Sentinel(config, registry=CollectorRegistry()).init_app(app)

    @app.get("/work")
    @rate_limited("bench.work")
    async def work() -> dict[str, bool]:
        return {"ok": True}

    return app


def slowapi_app(
    redis_url: str, key_func: Callable[[Request], str], *, headers: bool = False
) -> FastAPI:
    limiter = SlowLimiter(key_func=key_func, storage_uri=redis_url, headers_enabled=headers)
    app = FastAPI()
    app.state.limiter = limiter
    app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)  # type: ignore[arg-type]

    # slowapi needs the request, and the response too when it writes headers.
    @app.get("/work")
    @limiter.limit(f"{NEVER_DENY}/second")
    async def work(request: Request, response: Response) -> dict[str, bool]:
        return {"ok": True}

    return app


async def fastapi_limiter_app(
    client: redis.asyncio.Redis, name: str, identifier: Callable[[Request], Awaitable[str]] | None
) -> FastAPI:
    bucket = await RedisBucket.init([Rate(NEVER_DENY, Duration.SECOND)], client, name)
    options: dict[str, Any] = {} if identifier is None else {"identifier": identifier}
    dependency = RateLimiter(limiter=Limiter(bucket), **options)
    app = FastAPI()

    @app.get("/work", dependencies=[Depends(dependency)])
    async def work() -> dict[str, bool]:
        return {"ok": True}

    return app


async def jwt_identifier(request: Request) -> str:
    return verified_sub(request)


@dataclass
class Samples:
    sequential_ns: list[int] = field(default_factory=list)
    concurrent_ns: list[int] = field(default_factory=list)
    concurrent_wall_ns: int = 0
    concurrent_requests: int = 0
    failures: int = 0


def sender(http: httpx.AsyncClient, samples: Samples) -> Send:
    async def send() -> None:
        response = await http.get("/work", headers=HEADERS)
        if response.status_code != 200:
            samples.failures += 1

    return send


async def sequential(send: Send, out: list[int], count: int) -> None:
    clock = time.perf_counter_ns
    for _ in range(count):
        started = clock()
        await send()
        out.append(clock() - started)


async def concurrent(send: Send, samples: Samples, per_client: int) -> None:
    started = time.perf_counter_ns()
    await asyncio.gather(
        *(sequential(send, samples.concurrent_ns, per_client) for _ in range(CONCURRENCY))
    )
    samples.concurrent_wall_ns += time.perf_counter_ns() - started
    samples.concurrent_requests += CONCURRENCY * per_client


async def measure(
    redis_url: str, rounds: int, per_round: int
) -> tuple[dict[str, Samples], list[int]]:
    async with AsyncExitStack() as stack:
        client = redis.asyncio.Redis.from_url(redis_url)
        stack.push_async_callback(client.aclose)
        sha = await client.script_load("return 1")
        apps: dict[str, FastAPI] = {
            BASELINE: unguarded_app(),
            IN_STACK_FLOOR: evalsha_app(client, sha),
            "sentinel-tb": sentinel_app(redis_url, "token_bucket"),
            "sentinel-sw": sentinel_app(redis_url, "sliding_window"),
            "slowapi-ip": slowapi_app(redis_url, get_remote_address),
            "slowapi-jwt": slowapi_app(redis_url, verified_sub),
            "slowapi-jwt-headers": slowapi_app(redis_url, verified_sub, headers=True),
            "fastapi-limiter-ip": await fastapi_limiter_app(client, "fl-ip", None),
            "fastapi-limiter-jwt": await fastapi_limiter_app(client, "fl-jwt", jwt_identifier),
        }
        samples = {name: Samples() for name in apps}
        senders: dict[str, Send] = {}
        for name, app in apps.items():
            await stack.enter_async_context(app.router.lifespan_context(app))
            transport = httpx.ASGITransport(app=app)
            http = await stack.enter_async_context(
                httpx.AsyncClient(transport=transport, base_url="http://bench")
            )
            senders[name] = sender(http, samples[name])
        floor: list[int] = []

        async def evalsha() -> None:
            await client.evalsha(sha, 0)

        for send in [*senders.values(), evalsha]:  # warm up: connections, scripts, caches
            await sequential(send, [], 200)
        for name in samples:
            samples[name].failures = 0
        names = list(senders)
        for round_index in range(rounds):
            gc.collect()
            shift = round_index % len(names)
            for name in names[shift:] + names[:shift]:
                await sequential(senders[name], samples[name].sequential_ns, per_round)
                await concurrent(senders[name], samples[name], per_round // CONCURRENCY)
            await sequential(evalsha, floor, per_round)
        return samples, floor


def report(samples: dict[str, Samples], floor_ns: list[int]) -> str:
    def p(values: list[int], q: float) -> float:
        return percentile(sorted(values), q) / 1_000

    base = samples[BASELINE]
    base_seq_mean = sum(base.sequential_ns) / len(base.sequential_ns)
    base_rate = base.concurrent_requests / base.concurrent_wall_ns
    floor_p50 = p(floor_ns, 50)
    in_stack = p(samples[IN_STACK_FLOOR].sequential_ns, 50) - p(base.sequential_ns, 50)
    rows = []
    for name, sample in samples.items():
        seq_mean = sum(sample.sequential_ns) / len(sample.sequential_ns)
        rate = sample.concurrent_requests / sample.concurrent_wall_ns
        added_p50 = p(sample.sequential_ns, 50) - p(base.sequential_ns, 50)
        rows.append(
            [
                name,
                round(1e9 / seq_mean),
                base_seq_mean / seq_mean,
                p(sample.sequential_ns, 50),
                added_p50,
                p(sample.sequential_ns, 99) - p(base.sequential_ns, 99),
                added_p50 / floor_p50 if name != BASELINE else "",
                added_p50 / in_stack if name not in (BASELINE, IN_STACK_FLOOR) else "",
                round(rate * 1e9),
                rate / base_rate,
                p(sample.concurrent_ns, 50) - p(base.concurrent_ns, 50),
                p(sample.concurrent_ns, 99) - p(base.concurrent_ns, 99),
                sample.failures,
            ]
        )
    table = markdown_table(
        [
            "variant",
            "seq req/s",
            "seq ratio",
            "seq p50 µs",
            "added p50 µs",
            "added p99 µs",
            "added p50 / EVALSHA",
            "added p50 / in-stack EVALSHA",
            f"x{CONCURRENCY} req/s",
            f"x{CONCURRENCY} ratio",
            f"x{CONCURRENCY} added p50 µs",
            f"x{CONCURRENCY} added p99 µs",
            "non-200",
        ],
        rows,
    )
    floor = f"p50 {floor_p50:.1f} µs, p99 {p(floor_ns, 99):.1f} µs"
    return f"{table}\n\nOne bare EVALSHA (redis-py asyncio): {floor}."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 short rounds: a smoke run")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--per-round", type=int, default=400)
    args = parser.parse_args(argv)
    rounds, per_round = (2, 80) if args.quick else (args.rounds, args.per_round)
    with private_redis() as server:
        samples, floor = asyncio.run(measure(server.url, rounds, per_round))
    print(
        f"# bench_fastapi: {rounds} rounds x {per_round} sequential + {per_round} concurrent "
        f"requests per variant, interleaved"
    )
    print(f"Machine: {machine_note()}\n")
    print(report(samples, floor))
    return 0 if not any(sample.failures for sample in samples.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
