"""Flask: what a guarded request costs, Sentinel against Flask-Limiter, on one local Redis.

The full HTTP path in process: each request goes through the Flask test client (WSGI
environ, routing, hooks, the view, the response), so the figures include everything a
limiter adds to a request and nothing of a network or server. Every variant serves the
same tiny JSON view; the guarded ones use limits high enough never to deny, so the
benchmark measures the cost of allowing.

Variants (all but the first on the same private redis-server, started here):

* ``flask``: unguarded, the baseline.
* ``sentinel-sw`` / ``sentinel-tb``: ``@rate_limited`` with a tenant (JWT) sliding window
  / token bucket; RateLimit headers on; metrics and denial logs on (they are built in).
* ``limiter-swc-jwt`` / ``limiter-mw-jwt``: Flask-Limiter with its Redis storage, the
  sliding-window-counter (closest to Sentinel's sliding window) and moving-window
  strategies, keyed by the same verified JWT ``sub``, headers on: like for like.
* ``limiter-swc-ip``: Flask-Limiter's default key (remote address), headers off: its
  cheapest configuration, for reference.

Variants run interleaved, round after round, so machine noise spreads over all of them.
Reported: throughput relative to ``flask`` (guarded/unguarded; higher is better) and the
p50/p99 latency each limiter adds over ``flask``.

    python benchmarks/bench_flask.py [--requests 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

import jwt
from flask import Flask, request
from flask_limiter import Limiter
from flask_limiter.util import get_remote_address
from prometheus_client import CollectorRegistry

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sentinel_flask import Sentinel, rate_limited
from tests.support.redis_server import RedisServer

JWT_KEY = "benchmark-jwt-key-0123456789abcdef-0123456789"
NEVER_DENY = 1_000_000  # per second: far above what one process can send
TOKEN = jwt.encode({"sub": "tenant-42", "exp": int(time.time()) + 3600}, JWT_KEY, "HS256")
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
THREADS = 8


def unguarded_app() -> Flask:
    app = Flask("flask")

    @app.post("/work")
    def work() -> dict[str, bool]:
        return {"ok": True}

    return app


def sentinel_app(redis_url: str, algorithm: str) -> Flask:
    app = Flask(f"sentinel-{algorithm}")
    app.config["SENTINEL"] = {
        "redis_url": redis_url,
        # Generous on a loaded 2-core machine: a timeout would turn into fail-open noise.
        "socket_timeout_ms": 250,
        "jwt": {"algorithms": ["HS256"], "key": JWT_KEY},
        "policies": {
            "bench.work": {
                "algorithm": algorithm,
                "rate": f"{NEVER_DENY}/second",
                "fail_mode": "closed",
            }
        },
    }

    @app.post("/work")
    @rate_limited("bench.work")
    def work() -> dict[str, bool]:
        return {"ok": True}

    Sentinel(app, registry=CollectorRegistry())
    return app


def tenant_from_jwt() -> str:
    """Flask-Limiter key function doing what Sentinel's tenant identity does."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return "anonymous"
    claims = jwt.decode(token, JWT_KEY, algorithms=["HS256"], options={"require": ["exp", "sub"]})
    return str(claims["sub"])


def limiter_app(
    redis_url: str, strategy: str, key_func: Callable[[], str], *, headers: bool
) -> Flask:
    app = Flask(f"limiter-{strategy}")
    limiter = Limiter(
        key_func,
        app=app,
        storage_uri=redis_url,
        strategy=strategy,
        headers_enabled=headers,
    )

    @app.post("/work")
    @limiter.limit(f"{NEVER_DENY} per second")
    def work() -> dict[str, bool]:
        return {"ok": True}

    return app


@dataclass
class Samples:
    """Per-request latencies and the wall time they took, for one variant."""

    latencies_ns: list[int] = field(default_factory=list)
    elapsed_ns: int = 0
    failures: int = 0

    def throughput(self) -> float:
        return len(self.latencies_ns) / (self.elapsed_ns / 1e9)

    def percentile(self, q: float) -> float:
        """The ``q`` quantile in microseconds."""
        ordered = sorted(self.latencies_ns)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1_000


def timed(send: Callable[[], int], count: int, latencies: list[int]) -> int:
    """Call ``send`` ``count`` times, appending each latency; the number of non-200s."""
    perf = time.perf_counter_ns
    failures = 0
    for _ in range(count):
        before = perf()
        status = send()
        latencies.append(perf() - before)
        failures += status != 200
    return failures


def sequential(send: Callable[[], int], count: int, samples: Samples) -> None:
    gc.collect()
    started = time.perf_counter_ns()
    samples.failures += timed(send, count, samples.latencies_ns)
    samples.elapsed_ns += time.perf_counter_ns() - started


def threaded(senders: list[Callable[[], int]], per_thread: int, samples: Samples) -> None:
    """One thread per sender (each with its own test client), started together."""
    gc.collect()
    start = threading.Barrier(len(senders) + 1)
    results: list[tuple[list[int], int]] = []

    def worker(send: Callable[[], int]) -> None:
        latencies: list[int] = []
        start.wait()
        failures = timed(send, per_thread, latencies)
        results.append((latencies, failures))

    threads = [threading.Thread(target=worker, args=(send,)) for send in senders]
    for thread in threads:
        thread.start()
    start.wait()
    started = time.perf_counter_ns()
    for thread in threads:
        thread.join()
    samples.elapsed_ns += time.perf_counter_ns() - started
    for latencies, failures in results:
        samples.latencies_ns += latencies
        samples.failures += failures


def poster(app: Flask) -> Callable[[], int]:
    """A sender on a new test client of ``app``."""
    client = app.test_client()

    def send() -> int:
        status: int = client.post("/work", headers=HEADERS).status_code
        return status

    return send


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="per variant per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 200 x 1")
    args = parser.parse_args()
    if args.quick:
        args.requests, args.rounds = 200, 1
    per_thread = max(1, args.requests // THREADS)

    server = RedisServer().start()
    client = server.client()
    try:
        url = server.url
        apps = {
            "flask": unguarded_app(),
            "sentinel-sw": sentinel_app(url, "sliding_window"),
            "sentinel-tb": sentinel_app(url, "token_bucket"),
            "limiter-swc-jwt": limiter_app(
                url, "sliding-window-counter", tenant_from_jwt, headers=True
            ),
            "limiter-mw-jwt": limiter_app(url, "moving-window", tenant_from_jwt, headers=True),
            "limiter-swc-ip": limiter_app(
                url, "sliding-window-counter", get_remote_address, headers=False
            ),
        }
        sha = client.script_load("return 1")

        def evalsha() -> int:
            client.evalsha(sha, 0)
            return 200

        senders = {name: poster(app) for name, app in apps.items()}
        pools = {name: [poster(app) for _ in range(THREADS)] for name, app in apps.items()}
        seq = {name: Samples() for name in apps}
        par = {name: Samples() for name in apps}
        floor = Samples()
        for send in [*senders.values(), evalsha]:  # warm-up: connections, scripts, caches
            sequential(send, 200, Samples())
        for _ in range(args.rounds):
            for name in apps:
                sequential(senders[name], args.requests, seq[name])
                threaded(pools[name], per_thread, par[name])
            sequential(evalsha, args.requests, floor)
        for app in apps.values():
            core = app.extensions.get("sentinel")
            if core is not None:
                core.close()
    finally:
        client.close()
        server.close()

    print(report(seq, par, floor, args))


def report(
    seq: dict[str, Samples], par: dict[str, Samples], floor: Samples, args: argparse.Namespace
) -> str:
    base, base_par = seq["flask"], par["flask"]
    lines = [
        f"Python {sys.version.split()[0]}, Flask {version('flask')}, "
        f"Flask-Limiter {version('flask-limiter')}, redis-py {version('redis')}; "
        f"{args.rounds} interleaved rounds of {args.requests} requests per variant, "
        f"sequential and in {THREADS} threads; Flask test client, local redis-server",
        f"{'variant':<17}{'seq req/s':>10}{'ratio':>8}{'p50 µs':>8}{'p99 µs':>8}"
        f"{'+p50 µs':>9}{'+p99 µs':>9}{f'x{THREADS} req/s':>11}{'ratio':>8}{'non-200':>9}",
    ]
    for name, sample in seq.items():
        p50, p99 = sample.percentile(0.50), sample.percentile(0.99)
        threads = par[name]
        lines.append(
            f"{name:<17}{sample.throughput():>10.0f}"
            f"{sample.throughput() / base.throughput():>8.3f}{p50:>8.0f}{p99:>8.0f}"
            f"{p50 - base.percentile(0.50):>9.0f}{p99 - base.percentile(0.99):>9.0f}"
            f"{threads.throughput():>11.0f}{threads.throughput() / base_par.throughput():>8.3f}"
            f"{sample.failures + threads.failures:>9}"
        )
    lines.append(
        f"floor: one bare EVALSHA on redis-py, p50 {floor.percentile(0.50):.0f} µs, "
        f"p99 {floor.percentile(0.99):.0f} µs; unguarded Flask median "
        f"{statistics.median(base.latencies_ns) / 1e3:.0f} µs per request"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
