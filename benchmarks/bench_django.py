"""Django: what a guarded request costs, Sentinel against django-ratelimit, on one local Redis.

The full HTTP path in process: every request goes through Django's test client (request
construction, the handler, URL resolution, the view, the response), so the figures
hold everything a limiter adds to a request and nothing of a network or a server.
Every variant serves the same tiny JSON view; the guarded ones use limits far above
what one process can send, so the benchmark measures the cost of allowing, the common
case.

Variants (all on one private redis-server, started here):

* ``django``: unguarded, the baseline.
* ``sentinel-tb`` / ``sentinel-sw``: ``@rate_limited`` with a tenant (JWT-verified) token
  bucket / sliding window on the blocking store; RateLimit headers, metrics and denial
  logs on (they are built in).
* ``sentinel-anon``: ``@rate_limited`` with an anonymous token bucket (the signed device
  cookie AND the client IP, two buckets decided by one script): no JWT to verify.
* ``ratelimit-ip``: django-ratelimit's documented setup (``@ratelimit(key="ip")``,
  ``block=True``) on a django-redis cache: a fixed window, no failure semantics, no
  headers; its cheapest configuration.
* ``ratelimit-jwt``: the same keyed by the verified JWT ``sub``: like for like.

And, on one event loop with ``AsyncClient`` (django-ratelimit has no async support):
``django-async`` (unguarded async view) and ``sentinel-async-tb`` (the async view guarded
on the asyncio store).

Variants run interleaved, round after round (``benchmarks/_common.py``), so machine
noise spreads over all of them. Reported: throughput relative to the unguarded baseline
(guarded/unguarded; higher is better) and the p50/p99 latency each limiter adds.

Run from the repository root::

    python benchmarks/bench_django.py              # about a minute
    python benchmarks/bench_django.py --quick      # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable, Mapping
from importlib.metadata import version
from pathlib import Path
from typing import Any

if not __package__:  # run as a file: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import django
import jwt
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path

from benchmarks._common import (
    Stats,
    arun_rounds,
    machine_note,
    markdown_table,
    private_redis,
    run_rounds,
)

JWT_KEY = "benchmark-jwt-key-0123456789abcdef-0123456789"
COOKIE_SECRET = "benchmark-cookie-secret-0123456789abcdef-01"
NEVER_DENY = 1_000_000  # per second: far above what one process can send
TOKEN = jwt.encode({"sub": "tenant-42", "exp": int(time.time()) + 3600}, JWT_KEY, "HS256")
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
SYNC_VARIANTS = (
    "django",
    "sentinel-tb",
    "sentinel-sw",
    "sentinel-anon",
    "ratelimit-ip",
    "ratelimit-jwt",
)
ASYNC_VARIANTS = ("django-async", "sentinel-async-tb")

urlpatterns: list[Any] = []  # filled by `configure`: this module is the ROOT_URLCONF


def configure(redis_url: str) -> None:
    """Configure Django: Sentinel and django-ratelimit on one Redis, no middleware, so
    the baseline is Django alone."""
    settings.configure(
        DEBUG=False,
        SECRET_KEY="benchmark-only-0123456789abcdef0123456789abcdef",
        ALLOWED_HOSTS=["testserver"],
        ROOT_URLCONF=__name__,
        INSTALLED_APPS=["sentinel_django", "django_ratelimit"],
        MIDDLEWARE=[],
        CACHES={
            "default": {
                "BACKEND": "django_redis.cache.RedisCache",
                "LOCATION": redis_url,
                "OPTIONS": {"CLIENT_CLASS": "django_redis.client.DefaultClient"},
            }
        },
        SENTINEL={
            "redis_url": redis_url,
            # Generous on a loaded 2-core machine: a timeout would turn into 503 noise.
            "socket_timeout_ms": 250,
            "jwt": {"algorithms": ["HS256"], "key": JWT_KEY},
            "anonymous": {"cookie_secret": COOKIE_SECRET, "secure": False},
            "policies": {
                **{
                    f"bench.{algorithm}": {
                        "algorithm": algorithm,
                        "rate": f"{NEVER_DENY}/second",
                        "fail_mode": "closed",
                    }
                    for algorithm in ("token_bucket", "sliding_window")
                },
                "bench.anonymous": {
                    "algorithm": "token_bucket",
                    "rate": f"{NEVER_DENY}/second",
                    "identity": "anonymous",
                    "fail_mode": "closed",
                },
            },
        },
    )
    django.setup()
    urlpatterns.extend(_urlpatterns())


def tenant_from_jwt(group: str, request: HttpRequest) -> str:
    """A django-ratelimit key doing what Sentinel's tenant identity does."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return "anonymous"
    claims = jwt.decode(token, JWT_KEY, algorithms=["HS256"], options={"require": ["exp", "sub"]})
    return str(claims["sub"])


def _urlpatterns() -> list[Any]:
    from django_ratelimit.decorators import ratelimit

    from sentinel_django import rate_limited

    def work(request: HttpRequest) -> HttpResponse:
        return JsonResponse({"ok": True})

    async def awork(request: HttpRequest) -> HttpResponse:
        return JsonResponse({"ok": True})

    limit = f"{NEVER_DENY}/s"
    views: Mapping[str, Callable[..., Any]] = {
        "django": work,
        "sentinel-tb": rate_limited("bench.token_bucket")(work),
        "sentinel-sw": rate_limited("bench.sliding_window")(work),
        "sentinel-anon": rate_limited("bench.anonymous")(work),
        "ratelimit-ip": ratelimit(key="ip", rate=limit, block=True)(work),
        "ratelimit-jwt": ratelimit(key=tenant_from_jwt, rate=limit, block=True)(work),
        "django-async": awork,
        "sentinel-async-tb": rate_limited("bench.token_bucket")(awork),
    }
    return [path(name, view) for name, view in views.items()]


def _failures() -> dict[str, int]:
    return dict.fromkeys((*SYNC_VARIANTS, *ASYNC_VARIANTS), 0)


def measure_sync(rounds: int, per_round: int, failures: dict[str, int]) -> dict[str, Stats]:
    from django.test import Client

    client = Client()

    def contender(name: str) -> Callable[[], object]:
        def call() -> object:
            response = client.post(f"/{name}", headers=HEADERS)
            if response.status_code != 200:
                failures[name] += 1
            return response

        return call

    contenders = {name: contender(name) for name in SYNC_VARIANTS}
    return run_rounds(contenders, rounds=rounds, per_round=per_round)


async def measure_async(rounds: int, per_round: int, failures: dict[str, int]) -> dict[str, Stats]:
    from django.test import AsyncClient

    client = AsyncClient()

    def contender(name: str) -> Callable[[], Any]:
        async def call() -> object:
            response = await client.post(f"/{name}", headers=HEADERS)
            if response.status_code != 200:
                failures[name] += 1
            return response

        return call

    contenders = {name: contender(name) for name in ASYNC_VARIANTS}
    return await arun_rounds(contenders, rounds=rounds, per_round=per_round)


def report(stats: dict[str, Stats], baseline: str, failures: dict[str, int]) -> str:
    base = stats[baseline]
    rows = [
        [
            name,
            round(sample.per_second),
            base.mean_us / sample.mean_us,
            sample.p50_us,
            sample.p50_us - base.p50_us,
            sample.p99_us - base.p99_us,
            failures[name],
        ]
        for name, sample in stats.items()
    ]
    headers = ["variant", "req/s", "ratio", "p50 µs", "added p50 µs", "added p99 µs", "non-200"]
    return markdown_table(headers, rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 short rounds: a smoke run")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--per-round", type=int, default=500)
    args = parser.parse_args(argv)
    rounds, per_round = (2, 100) if args.quick else (args.rounds, args.per_round)
    failures = _failures()
    with private_redis() as server:
        configure(server.url)
        sync_stats = measure_sync(rounds, per_round, failures)
        async_stats = asyncio.run(measure_async(rounds, per_round, failures))
    print(
        f"# bench_django: {rounds} rounds x {per_round} requests per variant, interleaved; "
        f"Django {version('django')}, django-ratelimit {version('django-ratelimit')}, "
        f"django-redis {version('django-redis')}"
    )
    print(f"Machine: {machine_note()}\n")
    print("Sync views, django.test.Client:\n")
    print(report(sync_stats, "django", failures))
    print("\nAsync views, django.test.AsyncClient on one event loop:\n")
    print(report(async_stats, "django-async", failures))
    return 0 if not any(failures.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
