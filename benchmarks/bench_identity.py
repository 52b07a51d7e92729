"""What identity and the HTTP outcome add per request, beside the bare decision.

One run, every contender interleaved in rounds (see `benchmarks._common`), on two
stores: a private redis-server started here and the embedded ``memory://`` store.

- ``evaluate``: `Sentinel.evaluate(endpoint, tenant)`, the decision alone (the tenant id
  is hashed per call; built-in metrics and denial-log plugins registered);
- ``guard HS256`` / ``guard RS256``: `Sentinel.guard(endpoint, RequestView)` with a
  bearer token: JWT verification, the same decision, and the outcome with its
  ``RateLimit-Policy``/``RateLimit`` headers, i.e. all an adapter asks of the core.
  *first sight*: every token is new to the verifier (a pool larger than its cache of
  verified tokens), so each call pays PyJWT's full verification; *repeat*: tokens the
  verifier has seen, the common case of a client reusing its token until it expires;
- ``guard anonymous``: device cookie verification AND client network, decided on two
  buckets in one script call;
- ``verify HS256`` / ``verify RS256``: `JwtVerifier` alone (no cache, no store), to
  split the cost.

Each contender cycles over its own pool of identities (tokens minted before timing), on
a policy generous enough that nothing is denied (the denied column proves it).

Run from the repository root::

    python -m benchmarks.bench_identity            # about a minute
    python -m benchmarks.bench_identity --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

if not __package__:  # run as a file: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from prometheus_client import CollectorRegistry

from benchmarks._common import Stats, machine_note, markdown_table, private_redis, run_rounds
from sentinel_core import RequestView, Sentinel
from sentinel_core.identity._jwt import JwtVerifier

POOL = 500
FIRST_SIGHT_POOL = 4_500
"""Above the verifier's 4096 remembered tokens: cycling it, every token is a miss."""
HS_KEY = "bench-hs256-secret-0123456789-abcdefghijklmnopqrstuvwxyz"
COOKIE_SECRET = "bench-cookie-secret-0123456789-abcdefghijklmnop"
TENANT, ANONYMOUS = "bench.tenant", "bench.anonymous"
RATE = "100000/second"
"""Far above what one process can send: every timed call is an admission."""


class Headers(dict[str, str]):
    """Case-insensitive enough for the benchmark: every name is stored lowercase."""

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        return super().get(name.lower(), default)


def config(url: str, public_pem: str) -> dict[str, Any]:
    policy = {"algorithm": "token_bucket", "rate": RATE, "fail_mode": "closed"}
    return {
        "redis_url": url,
        "socket_timeout_ms": 500,  # a scheduling hiccup on the shared box is not a timeout
        "jwt": {
            "algorithms": ["HS256", "RS256"],
            "keys": [{"kid": "hs", "key": HS_KEY}, {"kid": "rs", "public_key": public_pem}],
        },
        "anonymous": {"cookie_secret": COOKIE_SECRET},
        "policies": {TENANT: policy, ANONYMOUS: {**policy, "identity": "anonymous"}},
    }


def tokens(prefix: str, key: Any, algorithm: str, kid: str, count: int) -> list[str]:
    expires = int(time.time()) + 3600
    return [
        "Bearer "
        + jwt.encode(
            {"sub": f"{prefix}-{index}", "exp": expires}, key, algorithm, headers={"kid": kid}
        )
        for index in range(count)
    ]


class Contenders:
    """The callables to time, and a tally of anything that was not an admission."""

    def __init__(self, pools: dict[str, list[str]]) -> None:
        self.calls: dict[str, Callable[[], object]] = {}
        self.denied: Counter[str] = Counter()
        self.pools = pools
        """"HS256 repeat", "HS256 first sight", ... -> Authorization header values."""

    def add(self, store: str, sentinel: Sentinel) -> None:
        denied = self.denied
        tenants = itertools.cycle([f"{store}-tenant-{index}" for index in range(POOL)])
        name = f"{store} · evaluate (bare decision)"

        def evaluate() -> None:
            if not sentinel.evaluate(TENANT, next(tenants)).allowed:
                denied[name] += 1

        self.calls[name] = evaluate
        for label, pool in self.pools.items():
            name = f"{store} · guard {label}"
            self.calls[name] = self._guard(name, sentinel, pool)
        name = f"{store} · guard anonymous (cookie + IP, 2 buckets)"
        self.calls[name] = self._anonymous(name, sentinel)

    def _guard(self, name: str, sentinel: Sentinel, pool: list[str]) -> Callable[[], None]:
        views = itertools.cycle(
            [
                RequestView("POST", "/v1/x", Headers(authorization=token), {}, "203.0.113.1")
                for token in pool
            ]
        )
        denied = self.denied

        def guard() -> None:
            if not sentinel.guard(TENANT, next(views)).allowed:
                denied[name] += 1

        return guard

    def _anonymous(self, name: str, sentinel: Sentinel) -> Callable[[], None]:
        views = []
        for index in range(POOL):
            peer = f"198.51.{index // 250}.{index % 250}"
            first = sentinel.guard(ANONYMOUS, RequestView("POST", "/login", Headers(), {}, peer))
            assert first.cookie is not None
            jar = {first.cookie.name: first.cookie.value}
            views.append(RequestView("POST", "/login", Headers(), jar, peer))
        cycle, denied = itertools.cycle(views), self.denied

        def guard() -> None:
            outcome = sentinel.guard(ANONYMOUS, next(cycle))
            if not outcome.allowed or outcome.cookie is not None:
                denied[name] += 1

        return guard

    def add_verifiers(self, sentinel: Sentinel) -> None:
        assert sentinel.config.jwt is not None
        verifier = JwtVerifier(sentinel.config.jwt, cache_size=0)
        for label in ("HS256", "RS256"):
            cycle = itertools.cycle(self.pools[f"{label} first sight"])
            self.calls[f"no store · verify {label} only (no cache)"] = lambda cycle=cycle: (
                verifier.tenant_from_authorization(next(cycle))
            )


def overhead_rows(stats: dict[str, Stats]) -> list[list[Any]]:
    rows = []
    for store in ("redis", "memory"):
        base = stats[f"{store} · evaluate (bare decision)"]
        for name, stat in stats.items():
            if name.startswith(f"{store} · guard"):
                label = name.removeprefix(f"{store} · ")
                rows.append(
                    [
                        store,
                        label,
                        stat.p50_us - base.p50_us,
                        stat.p50_us / base.p50_us,
                        stat.p99_us - base.p99_us,
                    ]
                )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run, not figures")
    args = parser.parse_args()
    rounds, per_round = (3, 100) if args.quick else (20, 400)

    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public_pem = (
        rsa_key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    pools = {}
    for label, key in (("HS256", HS_KEY), ("RS256", rsa_key)):
        kid = label[:2].lower()
        pools[f"{label} repeat"] = tokens(f"{kid}-repeat", key, label, kid, POOL)
        pools[f"{label} first sight"] = tokens(f"{kid}-new", key, label, kid, FIRST_SIGHT_POOL)
    contenders = Contenders(pools)
    with private_redis() as server:
        sentinels = {
            store: Sentinel(
                config(url, public_pem), registry=CollectorRegistry(), entry_points=False
            )
            for store, url in (("redis", server.url), ("memory", "memory://"))
        }
        try:
            sentinels["redis"].check()
            for store, sentinel in sentinels.items():
                contenders.add(store, sentinel)
            contenders.add_verifiers(sentinels["memory"])
            stats = run_rounds(contenders.calls, rounds=rounds, per_round=per_round)
        finally:
            for sentinel in sentinels.values():
                sentinel.close()

    print(f"# bench_identity ({'quick' if args.quick else 'full'} run)\n")
    print(machine_note() + f"; {rounds} rounds x {per_round} calls per contender\n")
    print(
        markdown_table(
            ["contender", "p50 µs", "p99 µs", "mean µs", "calls", "denied"],
            [
                [s.name, s.p50_us, s.p99_us, s.mean_us, s.count, contenders.denied[s.name]]
                for s in stats.values()
            ],
        )
    )
    print()
    print(
        markdown_table(
            ["store", "guard", "+p50 µs vs evaluate", "p50 ratio", "+p99 µs vs evaluate"],
            overhead_rows(stats),
        )
    )


if __name__ == "__main__":
    main()
