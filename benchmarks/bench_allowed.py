"""The allowed request against the in-stack floor, per framework, beside the peers.

One worker process per framework (and per source tree, with ``--before``) serves, in
process through the framework's own test client, on one private redis-server:

* ``bare``: an unguarded view returning a tiny JSON body;
* ``floor``: the same view doing one bare ``EVALSHA`` of ``return 1`` (redis-py, sync for
  Flask and Django, asyncio for FastAPI): the least any Redis-backed limiter can add;
* ``floor-invariants``: the same view's bare ``EVALSHA`` of the least script that keeps
  SPEC §3's invariants (``TIME``, ``GET`` of a key shaped like Sentinel's, ``SET ... PX``,
  an integer back): the least a limiter with Sentinel's guarantees can add;
* ``floor-script``: the same view's bare ``EVALSHA`` of Sentinel's own script with the
  keys and arguments Sentinel sends for the ``sentinel`` view's request (built by
  Sentinel's helpers, on the same bucket): what the script costs a view with no limiter's
  Python around it;
* ``sentinel``: the view under ``@rate_limited``, a tenant (JWT) token bucket whose limit
  is far above what one process sends: an allowed request;
* ``sentinel-denied``: the same with a limit of 1 a day: a denied request (after the
  first, answered from the process's local denials: SPEC §3);
* ``sentinel-settle``: the same policy with ``settle = true`` (usage known after the
  handler), the handler reporting nothing: a reservation settled at what it reserved,
  which costs no second script call;
* ``sentinel-stubbed``: the ``sentinel`` view with the store's Redis client replaced by
  a stub that answers "allowed" at once: Sentinel's own Python per allowed request;
* ``sentinel-settle-stubbed``: the same for the ``sentinel-settle`` view: the
  reservation's own Python beside the plain policy's;
* ``sentinel-depends`` and ``sentinel-depends-stubbed`` (FastAPI only): the
  ``sentinel`` view's policy named by ``Depends(rate_limit(...))`` in the route's
  ``dependencies`` instead of ``@rate_limited``, on an app of its own;
* ``bare-direct`` and ``sentinel-stubbed-direct``: the ``bare`` and ``sentinel-stubbed``
  requests made by calling the app through its server interface (the WSGI or ASGI
  callable, with an environ or scope built once), no test client: what Sentinel's own
  Python costs the app, without the client's work on the fields it adds to a response;
* the peers on the same app, each keyed by the same verified JWT ``sub``: Flask-Limiter
  (Flask), slowapi and fastapi-limiter (FastAPI), django-ratelimit (Django).

A worker runs every variant in each round, in a fresh random order; with ``--before``
the two trees' workers alternate round after round (never concurrently), so machine
noise spreads over all. Reported per variant: the p50 it adds over ``bare``, and that as
a multiple of what ``floor`` adds (``sentinel`` is the figure docs/benchmarks.md
quotes); for ``sentinel-stubbed`` the added p50 is Sentinel's own Python. Under the
table, ``sentinel`` again as a multiple of what ``floor-invariants`` adds (x what any
script with SPEC §3's invariants costs a bare view) and of what ``floor-script`` adds
(x what the same script costs a bare view): what Sentinel's Python and adapter add to
the Redis call a compliant decision makes.

    python benchmarks/bench_allowed.py [--rounds 10] [--requests 200]
        [--frameworks flask fastapi django] [--before /path/to/older/source/tree]
"""

import argparse
import functools
import io
import json
import logging
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

JWT_KEY = "benchmark-jwt-key-0123456789abcdef-0123456789"
TENANT = "tenant-42"
"""The JWT ``sub`` every guarded request carries: the one tenant Sentinel limits."""
NEVER_DENY = 1_000_000
ROOT = Path(__file__).resolve().parents[1]
FLOORS = ("floor", "floor-invariants", "floor-script")
"""The variants whose view does one bare ``EVALSHA`` (see `Floor`), on the unguarded app."""
INVARIANTS = """local time = redis.call('TIME')
local state = redis.pcall('GET', KEYS[1])
redis.call('SET', KEYS[1], time[1] * 1000000 + time[2], 'PX', 60000)
return 1"""
"""``floor-invariants``' script: TIME, GET and SET ... PX and nothing else, what SPEC §3
makes every decision run (bench_redis_cpu's ``TIME + GET + SET PX only``)."""
SENTINEL_VARIANTS = (
    "sentinel",
    "sentinel-settle",
    "sentinel-denied",
    "sentinel-stubbed",
    "sentinel-settle-stubbed",
)
STUBBED = "-stubbed"
"""The suffix of a variant served by its route with the store's Redis client stubbed."""
PEERS = {
    "flask": ("flask-limiter",),
    "fastapi": ("slowapi", "fastapi-limiter"),
    "django": ("django-ratelimit",),
}
EXPECTED = {"sentinel-denied": 429}
GUARDED = (
    ("sentinel", "bench.work"),
    ("sentinel-denied", "bench.denied"),
)
"""The guarded routes and the endpoint id each pays for."""
SETTLE = "bench.settle"
"""The ``sentinel-settle`` view's endpoint id. Flask and FastAPI serve it on an app of
its own at the ``sentinel`` view's path, so that the two differ in their policy alone:
a router tries its routes in order, and the test clients parse every character of a
path (FastAPI's costs a microsecond a route tried). Django's one URLconf lists it right
after the ``sentinel`` view."""


DIRECT = ("bare-direct", "sentinel-stubbed-direct")
"""The variants made through the app's server interface (`Send`'s ``direct``), each
compared with ``bare-direct``."""
DIRECT_SUFFIX = "-direct"
DEPENDS = ("sentinel-depends", "sentinel-depends-stubbed")
"""FastAPI's variants guarded by a ``rate_limit`` dependency instead of the decorator."""


def variants(framework: str) -> tuple[str, ...]:
    own = (*SENTINEL_VARIANTS, *DEPENDS) if framework == "fastapi" else SENTINEL_VARIANTS
    return ("bare", *FLOORS, *own, *PEERS[framework], *DIRECT)


def token() -> str:
    import jwt

    claims = {"sub": TENANT, "exp": int(time.time()) + 3600}
    return str(jwt.encode(claims, JWT_KEY, "HS256"))


def verified_sub(authorization: str | None) -> str:
    """The peers' key: what Sentinel does for a tenant (verify the JWT, take ``sub``)."""
    import jwt

    scheme, _, value = (authorization or "").partition(" ")
    if scheme.lower() != "bearer":
        return "anonymous"
    claims = jwt.decode(value, JWT_KEY, algorithms=["HS256"], options={"require": ["exp", "sub"]})
    return str(claims["sub"])


def sentinel_config(redis_url: str) -> dict[str, Any]:
    bucket = {"algorithm": "token_bucket", "fail_mode": "closed"}
    settle = {"settle": True} if settles() else {}
    return {
        "redis_url": redis_url,
        "socket_timeout_ms": 2_000,  # generous on a loaded machine: no fail-closed noise
        "jwt": {"algorithms": ["HS256"], "key": JWT_KEY},
        "policies": {
            "bench.work": {**bucket, "rate": f"{NEVER_DENY}/second"},
            SETTLE: {**bucket, "rate": f"{NEVER_DENY}/second", **settle},
            "bench.denied": {**bucket, "rate": "1/day"},
        },
    }


@functools.cache
def settles() -> bool:
    """Whether the Sentinel under test has ``settle`` policies (a ``--before`` tree older
    than issue 25 does not: its worker keeps the settle routes on a plain policy, so the
    apps are the same, and runs no ``*settle*`` variant)."""
    from sentinel_core import ConfigError, load_config

    policy = {"algorithm": "token_bucket", "rate": "1/second", "fail_mode": "closed"}
    try:
        load_config({"redis_url": "memory://", "policies": {"p": {**policy, "settle": True}}})
    except ConfigError:
        return False
    return True


class StubClient:
    """A Redis client that answers every script call "allowed" without any I/O (the
    ``sentinel-stubbed`` variant): what is left of a request's cost is Python. A store
    may call it (``execute_command``, ``evalsha``) or send on a connection of its pool
    (``connection_pool.get_connection()``, ``send_command``, ``read_response``,
    ``release``), as redis-py's clients allow."""

    def __init__(self, *, asynchronous: bool) -> None:
        self.asynchronous = asynchronous
        self.connection_pool = self
        self._reply: Any = None

    def get_connection(self, *args: Any) -> Any:
        return self._done(self)

    def release(self, connection: Any) -> Any:
        return self._done(None)

    def send_command(self, *args: Any, **options: Any) -> Any:
        self._reply = self.reply(args[1:])  # after "EVALSHA"
        return self._done(None)

    def read_response(self, *args: Any, **options: Any) -> Any:
        return self._done(self._reply)

    @staticmethod
    def reply(command: tuple[Any, ...]) -> Any:
        """What redis-server answers an admission of ``command`` (SHA, key count, keys,
        ARGV), the bucket full again in 1 us: to a token bucket's one key sent without
        cost and burst (mode, inc, tau and a settle policy's horizon), the integer of
        `OneKeyReply`; to a tree that sends them, the array."""
        keys = int(command[1])
        if keys == 1 and len(command) - 2 - keys < 5:
            return 1
        return [1, time.time_ns() // 1_000, NEVER_DENY - 1, 1, 0, 1]

    def execute_command(self, *args: Any, **options: Any) -> Any:
        return self._answer(args[1:])  # after "EVALSHA"

    def evalsha(self, *args: Any, **options: Any) -> Any:
        return self._answer(args)

    def _answer(self, command: tuple[Any, ...]) -> Any:
        return self._done(self.reply(command))

    def _done(self, value: Any) -> Any:
        """``value``, or for an asyncio store an awaitable of it."""
        if not self.asynchronous:
            return value

        async def answer() -> Any:
            return value

        return answer()


@contextmanager
def stubbed(*stores: Any, asynchronous: bool) -> Iterator[None]:
    """The ``stores``' Redis clients replaced by a `StubClient` while the block runs."""
    real = [store.client for store in stores]
    for store in stores:
        store.client = StubClient(asynchronous=asynchronous)
    try:
        yield
    finally:
        for store, client in zip(stores, real, strict=True):
            store.client = client


# -- the floors: one bare EVALSHA in an unguarded view -----------------------------------------


@dataclass(frozen=True, slots=True)
class Floor:
    """One script call a floor view makes: the script's source, its KEYS and ARGV."""

    source: str
    keys: tuple[str, ...] = ()
    args: tuple[int, ...] = ()

    def command(self, sha: str) -> tuple[str | int, ...]:
        """The arguments of redis-py's ``evalsha`` for this call of the script ``sha``."""
        return (sha, len(self.keys), *self.keys, *self.args)


def floors(redis_url: str) -> dict[str, Floor]:
    """Each floor variant's call. ``floor-script``'s is what Sentinel sends for the
    ``sentinel`` view's request (`TENANT` on ``bench.work``): the same key, ARGV and
    script, built by the helpers Sentinel's engine builds them with (`script_args` as an
    older ``--before`` tree spells it too: a tenant's one key, decided)."""
    from sentinel_core import load_config
    from sentinel_core.identity._keys import TenantIdentity
    from sentinel_core.store._scripts import ScriptCall, script_args

    policy = load_config(sentinel_config(redis_url)).policies["bench.work"]
    identity = TenantIdentity(TENANT)
    sentinel = ScriptCall(policy.algorithm, identity.bucket_keys(policy), script_args(policy))
    return {
        "floor": Floor("return 1"),
        "floor-invariants": Floor(INVARIANTS, (f"sentinel:v1:{{{identity.hash}}}:bench.floor:1",)),
        "floor-script": Floor(sentinel.script.source, sentinel.keys, sentinel.args),
    }


def admits(reply: Any) -> bool:
    """Whether a floor's script answered "allowed": ``return 1``, and a token bucket's
    reply (an integer above 0 to one key without cost and burst, else an array)."""
    return bool(reply[0] == 1 if isinstance(reply, list) else reply > 0)


def sync_floor_view(client: Any, floor: Floor, respond: Callable[..., Any]) -> Callable[..., Any]:
    """A view (Flask's or Django's) that makes ``floor``'s call on the blocking redis-py
    ``client``, then answers as ``respond`` does."""
    command = floor.command(client.script_load(floor.source))
    if not admits(client.evalsha(*command)):
        raise AssertionError(f"{floor.source[:20]!r}... did not admit")

    def view(*args: Any) -> Any:
        client.evalsha(*command)
        return respond(*args)

    return view


async def async_floor_view(client: Any, floor: Floor) -> Callable[[], Awaitable[dict[str, bool]]]:
    """A FastAPI view that awaits ``floor``'s call on the redis.asyncio ``client``."""
    command = floor.command(await client.script_load(floor.source))
    if not admits(await client.evalsha(*command)):
        raise AssertionError(f"{floor.source[:20]!r}... did not admit")

    async def view() -> dict[str, bool]:
        await client.evalsha(*command)
        return {"ok": True}

    return view


# -- one app per framework, every variant a route of it --------------------------------------

Send = Callable[[str, bool], int]
"""POST one route through the framework's test client, or with ``direct`` through the
app's WSGI or ASGI callable (only ``/bare`` and ``/sentinel``); the status."""


def flask_app(redis_url: str) -> tuple[Send, Callable[[], Any]]:
    import redis
    from flask import Flask, request
    from flask_limiter import Limiter
    from prometheus_client import CollectorRegistry

    from sentinel_flask import Sentinel, rate_limited

    client = redis.Redis.from_url(redis_url)
    plain = Flask("plain")  # no limiter's hooks on the unguarded and floor views

    @plain.post("/bare")
    def bare() -> dict[str, bool]:
        return {"ok": True}

    for name, floor in floors(redis_url).items():
        plain.add_url_rule(f"/{name}", name, sync_floor_view(client, floor, bare), methods=["POST"])

    guarded, settling = Flask("sentinel"), Flask("sentinel-settle")
    for app in (guarded, settling):
        app.config["SENTINEL"] = sentinel_config(redis_url)
    for route, endpoint_id in GUARDED:
        guarded.add_url_rule(f"/{route}", route, rate_limited(endpoint_id)(bare), methods=["POST"])
    settling.add_url_rule("/sentinel", "settle", rate_limited(SETTLE)(bare), methods=["POST"])
    extensions = [Sentinel(app, registry=CollectorRegistry()) for app in (guarded, settling)]

    peer = Flask("flask-limiter")
    limiter = Limiter(
        lambda: verified_sub(request.headers.get("Authorization")),
        app=peer,
        storage_uri=redis_url,
        headers_enabled=True,
    )
    peer.add_url_rule(
        "/flask-limiter", "peer", limiter.limit(f"{NEVER_DENY} per second")(bare), methods=["POST"]
    )

    clients = {app: app.test_client() for app in (plain, guarded, settling, peer)}
    by_route = {
        **{f"/{name}": (clients[plain], f"/{name}") for name in ("bare", *FLOORS)},
        "/sentinel": (clients[guarded], "/sentinel"),
        "/sentinel-denied": (clients[guarded], "/sentinel-denied"),
        "/sentinel-settle": (clients[settling], "/sentinel"),
        "/flask-limiter": (clients[peer], "/flask-limiter"),
    }
    headers = {"Authorization": f"Bearer {token()}"}
    apps = (guarded, settling)
    cores = [extension.get_core(app) for extension, app in zip(extensions, apps, strict=True)]

    direct = {
        "/bare": wsgi_caller(plain, "/bare", headers),
        "/sentinel": wsgi_caller(guarded, "/sentinel", headers),
    }

    def send(route: str, through_app: bool) -> int:
        if through_app:
            return direct[route]()
        client, path = by_route[route]
        return int(client.post(path, headers=headers).status_code)

    return send, lambda: stubbed(*(core.store for core in cores), asynchronous=False)


def wsgi_caller(app: Any, path: str, headers: dict[str, str]) -> Callable[[], int]:
    """POST ``path`` to the WSGI callable ``app`` with no client: the environ built once
    (by Werkzeug's test helper), copied per request; the response body read and closed."""
    from werkzeug.test import EnvironBuilder

    environ = EnvironBuilder(
        path=path, method="POST", headers=list(headers.items()), base_url="http://testserver"
    ).get_environ()
    statuses: list[str] = []

    def start_response(status: str, response_headers: Any, exc_info: Any = None) -> Any:
        statuses.append(status)

    def call() -> int:
        statuses.clear()
        body = app({**environ, "wsgi.input": io.BytesIO()}, start_response)
        try:
            b"".join(body)
        finally:
            if hasattr(body, "close"):
                body.close()
        return int(statuses[0].split(" ", 1)[0])

    return call


def fastapi_app(redis_url: str) -> tuple[Send, Callable[[], Any]]:
    import asyncio

    import httpx
    import redis.asyncio
    from fastapi import Depends, FastAPI, Request, Response
    from fastapi_limiter.depends import RateLimiter
    from prometheus_client import CollectorRegistry
    from pyrate_limiter import Duration, Limiter, Rate, RedisBucket
    from slowapi import Limiter as SlowLimiter

    from sentinel_fastapi import Sentinel, rate_limit, rate_limited

    loop = asyncio.new_event_loop()
    client = redis.asyncio.Redis.from_url(redis_url)
    # The unguarded, floor and peer views on one app with no middleware; Sentinel's on
    # its own app, since its middleware sees every request of the app it guards.
    plain = FastAPI()

    @plain.post("/bare")
    async def bare() -> dict[str, bool]:
        return {"ok": True}

    for name, floor in floors(redis_url).items():
        plain.post(f"/{name}")(loop.run_until_complete(async_floor_view(client, floor)))

    slow = SlowLimiter(
        key_func=lambda request: verified_sub(request.headers.get("authorization")),
        storage_uri=redis_url,
        headers_enabled=True,
    )
    plain.state.limiter = slow

    @plain.post("/slowapi")
    @slow.limit(f"{NEVER_DENY}/second")
    async def slowapi_view(request: Request, response: Response) -> dict[str, bool]:
        return {"ok": True}

    async def identifier(request: Request) -> str:
        return verified_sub(request.headers.get("authorization"))

    async def limiter_dependency() -> RateLimiter:
        # pyrate-limiter schedules its bucket's leak task: build it inside the loop.
        rates = [Rate(NEVER_DENY, Duration.SECOND)]
        bucket = await RedisBucket.init(rates, client, "bench-fastapi-limiter")
        return RateLimiter(limiter=Limiter(bucket), identifier=identifier)

    dependency = loop.run_until_complete(limiter_dependency())

    @plain.post("/fastapi-limiter", dependencies=[Depends(dependency)])
    async def fastapi_limiter_view() -> dict[str, bool]:
        return {"ok": True}

    guarded, settling, depending = FastAPI(), FastAPI(), FastAPI()
    for route, endpoint_id in GUARDED:
        guarded.post(f"/{route}")(rate_limited(endpoint_id)(bare))
    settling.post("/sentinel")(rate_limited(SETTLE)(bare))
    depending.post("/sentinel", dependencies=[Depends(rate_limit(GUARDED[0][1]))])(bare)
    # The lifespans stay referenced by `send` below: a lifespan collected is an async
    # generator finalized, which ends it, and its Sentinel closes its store (the first
    # request then failed: 503, the store closed under it).
    sentinels, lifespans = [], []
    for app in (guarded, settling, depending):
        sentinel = Sentinel(sentinel_config(redis_url), registry=CollectorRegistry())
        sentinel.init_app(app)
        lifespans.append(app.router.lifespan_context(app))
        loop.run_until_complete(lifespans[-1].__aenter__())
        sentinels.append(sentinel)
    clients = {
        app: httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app, client=("127.0.0.1", 50000)),
            base_url="http://bench",
        )
        for app in (plain, guarded, settling, depending)
    }
    headers = {"Authorization": f"Bearer {token()}"}

    direct = {"/bare": asgi_caller(plain, "/bare", headers, loop)}
    direct["/sentinel"] = asgi_caller(guarded, "/sentinel", headers, loop)

    def send(route: str, through_app: bool, _running: object = lifespans) -> int:
        if through_app:
            return direct[route]()
        if route == "/sentinel-settle":
            http, route = clients[settling], "/sentinel"
        elif route == "/sentinel-depends":
            http, route = clients[depending], "/sentinel"
        else:
            http = clients[guarded if route.startswith("/sentinel") else plain]
        return loop.run_until_complete(http.post(route, headers=headers)).status_code

    return send, lambda: stubbed(*(s.async_store for s in sentinels), asynchronous=True)


def asgi_caller(app: Any, path: str, headers: dict[str, str], loop: Any) -> Callable[[], int]:
    """POST ``path`` to the ASGI callable ``app`` with no client, in ``loop``: the scope
    built once (the headers httpx sends), copied per request."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [
            (b"host", b"bench"),
            (b"accept", b"*/*"),
            (b"content-length", b"0"),
            *((name.lower().encode(), value.encode()) for name, value in headers.items()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("bench", 80),
    }
    statuses: list[int] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    def call() -> int:
        statuses.clear()
        loop.run_until_complete(app(dict(scope), receive, send))
        return statuses[0]

    return call


urlpatterns: list[Any] = []


def django_app(redis_url: str) -> tuple[Send, Callable[[], Any]]:
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
        INSTALLED_APPS=["sentinel_django", "django_ratelimit"],
        MIDDLEWARE=[],
        CACHES={
            "default": {
                "BACKEND": "django_redis.cache.RedisCache",
                "LOCATION": redis_url,
                "OPTIONS": {"CLIENT_CLASS": "django_redis.client.DefaultClient"},
            }
        },
        SENTINEL=sentinel_config(redis_url),
    )
    django.setup()
    from django_ratelimit.decorators import ratelimit

    from sentinel_django import conf, rate_limited

    client = redis.Redis.from_url(redis_url)

    def bare(request: HttpRequest) -> JsonResponse:
        return JsonResponse({"ok": True})

    def peer_key(group: str, request: HttpRequest) -> str:
        return verified_sub(request.headers.get("Authorization"))

    urlpatterns.extend(
        [
            path("bare", bare),
            *(
                path(name, sync_floor_view(client, floor, bare))
                for name, floor in floors(redis_url).items()
            ),
            path("sentinel", rate_limited("bench.work")(bare)),
            path("sentinel-settle", rate_limited(SETTLE)(bare)),
            path("sentinel-denied", rate_limited("bench.denied")(bare)),
            path(
                "django-ratelimit",
                ratelimit(key=peer_key, rate=f"{NEVER_DENY}/s", block=True)(bare),
            ),
        ]
    )
    from django.core.handlers.wsgi import WSGIHandler

    test_client = Client(HTTP_AUTHORIZATION=f"Bearer {token()}")
    handler, headers = WSGIHandler(), {"Authorization": f"Bearer {token()}"}
    direct = {route: wsgi_caller(handler, route, headers) for route in ("/bare", "/sentinel")}

    def send(route: str, through_app: bool) -> int:
        if through_app:
            return direct[route]()
        return int(test_client.post(route).status_code)

    return send, lambda: stubbed(conf.runtime().sentinel.store, asynchronous=False)


APPS = {"flask": flask_app, "fastapi": fastapi_app, "django": django_app}


def worker(framework: str, redis_url: str) -> None:
    """Serve rounds on stdin: each line is a request count; each answer one JSON line of
    per-variant latencies in nanoseconds (variants in a fresh order every round)."""
    # The denial log stays on (it is part of a denial's cost), written nowhere.
    logging.getLogger("sentinel").addHandler(logging.NullHandler())
    logging.getLogger("sentinel").propagate = False
    send, stub = APPS[framework](redis_url)
    names = [v for v in variants(framework) if settles() or "settle" not in v]

    def batch(variant: str, count: int) -> list[int]:
        through_app = variant.endswith(DIRECT_SUFFIX)
        base = variant.removesuffix(DIRECT_SUFFIX)
        stubbed = base.endswith(STUBBED)
        route = f"/{base.removesuffix(STUBBED)}"
        expected = EXPECTED.get(variant, 200)
        samples = []
        clock = time.perf_counter_ns
        with stub() if stubbed else _nothing():
            for _ in range(count):
                started = clock()
                status = send(route, through_app)
                samples.append(clock() - started)
                if status != expected:
                    raise AssertionError(f"{framework} {variant}: status {status}")
        return samples

    # The one request the day's limit admits (429 once an earlier worker took it).
    if send("/sentinel-denied", False) not in (200, 429):
        raise AssertionError(f"{framework}: the first sentinel-denied request failed")
    for variant in names:  # warm up: imports, first connections, script loads
        batch(variant, 50)
    for line in sys.stdin:
        order = list(names)
        random.shuffle(order)
        print(json.dumps({variant: batch(variant, int(line)) for variant in order}), flush=True)


@contextmanager
def _nothing() -> Iterator[None]:
    yield


# -- driver ----------------------------------------------------------------------------------


def summary(timings: dict[str, list[int]]) -> dict[str, tuple[float, float]]:
    """Per variant: (p50 added over bare in µs, that over the floor's added p50)."""
    p50 = {
        variant: statistics.median(samples) / 1_000
        for variant, samples in timings.items()
        if samples  # a variant the tree cannot serve has none
    }
    floor = p50["floor"] - p50["bare"]
    result = {"bare": (p50["bare"], 0.0)}
    for variant, value in p50.items():
        if variant in DIRECT:  # over the unguarded request made the same way
            base = p50.get(DIRECT[0], value) if variant != DIRECT[0] else 0.0
            result[variant] = (value - base, 0.0)
        elif variant != "bare":
            result[variant] = (value - p50["bare"], (value - p50["bare"]) / floor)
    return result


def drive(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT))
    from benchmarks._common import machine_note
    from tests.support.redis_server import RedisServer

    trees = {"this tree": ROOT}
    if args.before:
        trees = {"before": Path(args.before).resolve(), "after": ROOT}
    server = RedisServer().start()
    print(f"# {machine_note()}; {args.rounds} rounds x {args.requests} requests per variant")
    try:
        for framework in args.frameworks:
            results = run_framework(framework, trees, server.url, args)
            print(table(framework, results), flush=True)
    finally:
        server.close()


def run_framework(
    framework: str, trees: dict[str, Path], redis_url: str, args: argparse.Namespace
) -> dict[str, dict[str, tuple[float, float]]]:
    server_args = [sys.executable, __file__, "--worker", framework, "--redis", redis_url]
    workers = {
        name: subprocess.Popen(
            server_args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{ROOT}"},
            cwd="/",
        )
        for name, tree in trees.items()
    }
    collected: dict[str, dict[str, list[int]]] = {
        name: {variant: [] for variant in variants(framework)} for name in trees
    }
    try:
        for round_index in range(args.rounds):
            names = list(workers) if round_index % 2 == 0 else list(reversed(workers))
            for name in names:
                process = workers[name]
                assert process.stdin is not None
                assert process.stdout is not None
                process.stdin.write(f"{args.requests}\n")
                process.stdin.flush()
                line = process.stdout.readline()
                if not line:
                    raise RuntimeError(f"{framework} worker ({name}) died")
                for variant, samples in json.loads(line).items():
                    collected[name][variant].extend(samples)
    finally:
        for process in workers.values():
            assert process.stdin is not None
            process.stdin.close()
            process.wait(timeout=60)
    return {name: summary(timings) for name, timings in collected.items()}


def table(framework: str, results: dict[str, dict[str, tuple[float, float]]]) -> str:
    names = list(results)
    lines = [
        f"\n{framework}: p50 added over the unguarded view, µs (x the floor's added p50)\n",
        "| variant | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for variant in variants(framework):
        cells = []
        for name in names:
            if variant not in results[name]:
                cells.append("-")
                continue
            added, ratio = results[name][variant]
            if variant in ("bare", DIRECT[0]):
                cells.append(f"{added:,.0f} (p50 itself)")
            elif variant in DIRECT:
                cells.append(f"{added:,.1f} (over {DIRECT[0]})")
            elif variant == "floor":
                cells.append(f"{added:,.1f}")
            else:
                cells.append(f"{added:,.1f} ({ratio:.2f} x)")
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    lines.append("")
    for floor, meaning in (
        ("floor-invariants", "the least script SPEC §3 allows costs a bare view"),
        ("floor-script", "the same script costs a bare view"),
    ):
        over = ", ".join(
            f"{name} {results[name]['sentinel'][0] / results[name][floor][0]:.2f} x"
            for name in names
        )
        lines.append(f"sentinel: {over} what {meaning} ({floor})")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--before", help="source tree of an older version to run beside")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--requests", type=int, default=200, help="per variant and round")
    parser.add_argument("--frameworks", nargs="+", default=list(APPS), choices=list(APPS))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--redis", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.redis)
    else:
        drive(args)


if __name__ == "__main__":
    main()
