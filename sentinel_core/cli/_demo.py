"""``sentinel demo``: two tenants' bursts limited, then Redis unreachable, as a table.

Requests go through `Sentinel.guard` exactly as an adapter sends them, or, with
``--framework``, through the example app of that framework and its test client.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib.util
import logging
import os
import re
import secrets
import socket
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Protocol

import jwt
from prometheus_client import REGISTRY, CollectorRegistry

from sentinel_core._models import Rate
from sentinel_core._sentinel import Sentinel
from sentinel_core.cli._console import EXIT_FAILED, EXIT_OK, describe, redact_url, say
from sentinel_core.config._schema import SentinelConfig, load_config
from sentinel_core.errors import StartupError, StoreError
from sentinel_core.http._outcome import RequestView

TENANTS = ("acme", "globex")
EXAMPLE_PATHS = {"resumint.tailor": "/v1/tailor", "pdftalk.ingest": "/v1/ingest"}
"""Where every example app (``examples/<framework>_app.py``) serves the demo's endpoints."""
_UNITS = {1: "second", 60: "minute", 3600: "hour", 86400: "day"}
_REMAINING = re.compile(r";r=(\d+)")
SOURCE_CHECKOUT = Path(__file__).resolve().parents[2]
"""Where an editable install or a source checkout keeps ``examples/``."""


@dataclasses.dataclass(frozen=True, slots=True)
class Reply:
    """What the demo shows of one response."""

    status: int
    reason: str
    remaining: int | None
    retry_after: str | None


class DemoClient(Protocol):
    """Sends one demo request as ``tenant`` to ``endpoint_id``."""

    def send(self, endpoint_id: str, tenant: str) -> Reply: ...


@dataclasses.dataclass(frozen=True, slots=True)
class Scenario:
    """The endpoints the demo bursts (``bucket``, ``window``) and breaks (``closed``,
    ``open``), and the configuration whose limits size the bursts."""

    config: SentinelConfig
    bucket: str
    window: str
    closed: str
    open: str


class Tokens:
    """Bearer tokens for the demo's tenants. The ``sub`` carries a per-run suffix so a
    rerun on a shared Redis starts from full buckets (the demo never deletes keys)."""

    def __init__(self, secret: str) -> None:
        self.secret = secret
        self._run = secrets.token_hex(4)
        self._tokens: dict[str, str] = {}

    def bearer(self, tenant: str) -> str:
        if tenant not in self._tokens:
            claims = {"sub": f"demo-{self._run}-{tenant}", "exp": int(time.time()) + 600}
            self._tokens[tenant] = jwt.encode(claims, self.secret, algorithm="HS256")
        return f"Bearer {self._tokens[tenant]}"


class CoreClient:
    """Sends the demo's requests through `Sentinel.guard`, as every adapter does:
    identity, decision and SPEC §4's outcome are the real ones."""

    def __init__(self, sentinel: Sentinel, tokens: Tokens) -> None:
        self._sentinel = sentinel
        self._tokens = tokens

    def send(self, endpoint_id: str, tenant: str) -> Reply:
        headers = {"authorization": self._tokens.bearer(tenant)}
        outcome = self._sentinel.guard(endpoint_id, RequestView("POST", None, headers, {}, None))
        decision = outcome.decision
        assert decision is not None  # the demo's tokens are valid: never a 401
        retry_after = dict(outcome.headers).get("Retry-After")
        return Reply(outcome.status, decision.reason.value, decision.remaining, retry_after)


Post = Callable[[str, Mapping[str, str]], tuple[int, Mapping[str, str]]]
"""POST ``path`` with ``headers`` through a framework's test client: status, headers."""


class ExampleClient:
    """Sends the demo's requests to an example app through its framework's test client.

    HTTP does not carry the decision reason, so it is read back from the app's
    ``sentinel_decisions_total`` (the examples use the default registry): the one
    series a request incremented names its reason.
    """

    def __init__(self, post: Post, tokens: Tokens) -> None:
        self._post = post
        self._tokens = tokens

    def send(self, endpoint_id: str, tenant: str) -> Reply:
        before = decision_counts(REGISTRY)
        status, headers = self._post(
            EXAMPLE_PATHS[endpoint_id], {"Authorization": self._tokens.bearer(tenant)}
        )
        grown = decision_counts(REGISTRY) - before
        reason = next((key[1] for key in grown if key[0] == endpoint_id), "?")
        remaining = _REMAINING.search(headers.get("RateLimit", ""))
        return Reply(
            status,
            reason,
            int(remaining.group(1)) if remaining else None,
            headers.get("Retry-After"),
        )


@contextmanager
def _flask(module: ModuleType) -> Iterator[Post]:
    client = module.create_app().test_client()

    def post(path: str, headers: Mapping[str, str]) -> tuple[int, Mapping[str, str]]:
        response = client.post(path, headers=dict(headers))
        return response.status_code, response.headers

    yield post


@contextmanager
def _fastapi(module: ModuleType) -> Iterator[Post]:
    # httpx on the ASGI transport inside the app's lifespan (startup check, store
    # closing), on one event loop of our own: the requests stay synchronous here.
    import httpx

    app = module.create_app()
    loop = asyncio.new_event_loop()
    lifespan = app.router.lifespan_context(app)
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 50000))
    client = httpx.AsyncClient(transport=transport, base_url="http://demo")

    def post(path: str, headers: Mapping[str, str]) -> tuple[int, Mapping[str, str]]:
        response = loop.run_until_complete(client.post(path, headers=dict(headers)))
        return response.status_code, response.headers

    try:
        loop.run_until_complete(lifespan.__aenter__())
        try:
            yield post
        finally:
            loop.run_until_complete(lifespan.__aexit__(None, None, None))
    finally:
        loop.run_until_complete(client.aclose())
        loop.close()


FRAMEWORK_CLIENTS: dict[str, Callable[[ModuleType], AbstractContextManager[Post]]] = {
    "flask": _flask,
    "fastapi": _fastapi,
}
"""``--framework`` drivers: serve an example app module (built by its ``create_app()``
from the environment) through the framework's test client. Django has none: its
settings are process-global, so the demo runs the core path and says so."""


def run_demo(args: argparse.Namespace) -> int:
    """``sentinel demo``: bursts limited, then Redis unreachable, as a table."""
    store_url = args.redis or "memory://"
    tokens = Tokens(secrets.token_hex(32))
    if not _store_ready(store_url, tokens.secret):
        return EXIT_FAILED
    example = _example_module(args.framework, store_url, tokens.secret)
    registry = REGISTRY if example is not None else CollectorRegistry()
    before = decision_counts(registry)
    connect: Callable[[str], AbstractContextManager[DemoClient]]
    with _collect_denial_logs() as logs:
        if example is None:
            scenario = Scenario(_core_config(store_url, tokens.secret), *_CORE_ENDPOINTS)
            connect = partial(_core_client, scenario.config, registry, tokens)
        else:
            with _example_environment(store_url, tokens.secret):
                config = load_config(example.sentinel_config())
            scenario = Scenario(config, *_EXAMPLE_ENDPOINTS)
            connect = partial(_example_client, FRAMEWORK_CLIENTS[args.framework], example, tokens)
        with connect(store_url) as client:
            _bursts(scenario, client)
        with connect(_dead_url()) as client:
            _outage(scenario, client)
    _summary(decision_counts(registry) - before, logs)
    return EXIT_OK


_CORE_ENDPOINTS = ("resumint.tailor", "pdftalk.ingest", "billing.charge", "search.query")
_EXAMPLE_ENDPOINTS = ("resumint.tailor", "pdftalk.ingest", "pdftalk.ingest", "resumint.tailor")


def _core_config(redis_url: str, secret: str) -> SentinelConfig:
    closed = {"algorithm": "token_bucket", "rate": "5/second", "fail_mode": "closed"}
    return load_config(
        {
            "redis_url": redis_url,
            "socket_timeout_ms": 50,
            "jwt": {"algorithms": ["HS256"], "key": secret},
            "breaker": {"failure_threshold": 3, "open_seconds": 30},
            "policies": {
                "resumint.tailor": {**closed, "rate": "10/minute", "burst": 3},
                "pdftalk.ingest": {**closed, "algorithm": "sliding_window", "rate": "4/minute"},
                "billing.charge": closed,
                "search.query": {**closed, "fail_mode": "open", "fallback_rate": "3/second"},
            },
        }
    )


@contextmanager
def _core_client(
    config: SentinelConfig, registry: CollectorRegistry, tokens: Tokens, url: str
) -> Iterator[DemoClient]:
    """A `CoreClient` on a Sentinel of ``config`` whose store is ``url``."""
    sentinel = Sentinel(
        dataclasses.replace(config, redis_url=url), registry=registry, entry_points=False
    )
    try:
        yield CoreClient(sentinel, tokens)
    finally:
        sentinel.close()


@contextmanager
def _example_client(
    serve: Callable[[ModuleType], AbstractContextManager[Post]],
    module: ModuleType,
    tokens: Tokens,
    url: str,
) -> Iterator[DemoClient]:
    """An `ExampleClient` on a fresh app of the example ``module`` whose store is ``url``."""
    with _example_environment(url, tokens.secret), serve(module) as post:
        yield ExampleClient(post, tokens)


def _example_module(framework: str | None, store_url: str, secret: str) -> ModuleType | None:
    """``examples/<framework>_app.py`` loaded as a module, or None (saying why)."""
    if framework is None:
        return None
    path = _example_path(framework)
    if framework not in FRAMEWORK_CLIENTS:
        problem = "has no in-process driver (Django settings are process-global)"
    elif importlib.util.find_spec(f"sentinel_{framework}") is None:
        problem = f"needs sentinel_{framework} (pip install 'sentinel-ratelimit[{framework}]')"
    elif path is None:
        problem = f"needs examples/{framework}_app.py (run it from a source checkout)"
    else:
        return _load_example(framework, path, store_url, secret)
    say(f"note: the {framework} demo {problem}.")
    say("      Running the core demo: the same requests, through Sentinel.guard.")
    return None


def _example_path(framework: str) -> Path | None:
    """The example app in the current directory's ``examples/``, or in that of the source
    checkout this package runs from (the wheel ships no examples)."""
    for root in (Path.cwd(), SOURCE_CHECKOUT):
        path = root / "examples" / f"{framework}_app.py"
        if path.is_file():
            return path
    return None


def _load_example(framework: str, path: Path, store_url: str, secret: str) -> ModuleType:
    name = f"sentinel_demo_{framework}_app"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # frameworks look their app's module up by name
    with _example_environment(store_url, secret):
        spec.loader.exec_module(module)  # the examples build an app at import
    say(f"app: {path}, in process")
    return module


@contextmanager
def _example_environment(redis_url: str, secret: str) -> Iterator[None]:
    """The environment the examples read their store and JWT key from, for a while."""
    names = {"SENTINEL_REDIS_URL": redis_url, "SENTINEL_JWT_KEY": secret}
    saved = {name: os.environ.get(name) for name in names}
    os.environ.update(names)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _dead_url() -> str:
    """A loopback port nobody listens on (bound, then released): connection refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return f"redis://127.0.0.1:{sock.getsockname()[1]}/0"


def _store_ready(url: str, secret: str) -> bool:
    """Refuse to demo on a Redis that Sentinel itself would refuse to start on."""
    shown = redact_url(url)
    config = _core_config(url, secret)
    sentinel = Sentinel(config, registry=CollectorRegistry(), entry_points=False)
    try:
        sentinel.check()
    except StartupError as error:
        say(f"{shown} is not fit for Sentinel: {error} (see `sentinel check`)")
        return False
    except StoreError as exc:
        say(f"cannot reach {shown}: {describe(exc)}")
        return False
    finally:
        sentinel.close()
    say(f"store: {shown}")
    return True


def _bursts(scenario: Scenario, client: DemoClient) -> None:
    bucket = scenario.config.policies[scenario.bucket]
    title = f"token bucket {bucket.endpoint_id} ({_rate(bucket.rate)}, burst {bucket.limit})"
    _section(f"1. Two tenants burst: {title}")
    for tenant in TENANTS:
        for _ in range(bucket.limit + 2):
            _row(tenant, bucket.endpoint_id, client.send(bucket.endpoint_id, tenant))
    window = scenario.config.policies[scenario.window]
    _section(f"2. Two tenants burst: sliding window {window.endpoint_id} ({_rate(window.rate)})")
    for tenant, count in zip(TENANTS, (window.limit + 2, 2), strict=True):
        for _ in range(count):
            _row(tenant, window.endpoint_id, client.send(window.endpoint_id, tenant))


def _outage(scenario: Scenario, client: DemoClient) -> None:
    closed, opened = scenario.closed, scenario.open
    fallback = scenario.config.policies[opened].fallback_rate
    threshold = scenario.config.breaker.failure_threshold
    _section(
        f"3. Redis unreachable: {closed} fails closed, {opened} fails open\n"
        f"   (emergency limiter: {fallback and _rate(fallback)} per process); "
        f"the breaker opens after {threshold} failures in a row"
    )
    for _ in range(-(-threshold // 2) + 2):  # alternating: open, then two rounds more
        _row("acme", closed, client.send(closed, "acme"))
        _row("acme", opened, client.send(opened, "acme"))
    for _ in range(2):
        _row("acme", opened, client.send(opened, "acme"))


def _rate(rate: Rate) -> str:
    return f"{rate.count}/{_UNITS.get(rate.period_seconds, f'{rate.period_seconds}s')}"


_COLUMNS = (("tenant", 8), ("endpoint", 16), ("status", 6), ("reason", 23), ("remaining", 9))


def _section(title: str) -> None:
    say("")
    say(title)
    say("  " + "  ".join(f"{name:<{width}}" for name, width in _COLUMNS) + "  Retry-After")


def _row(tenant: str, endpoint_id: str, reply: Reply) -> None:
    remaining = "-" if reply.remaining is None else reply.remaining
    values = (tenant, endpoint_id, reply.status, reply.reason, remaining)
    widths = (width for _, width in _COLUMNS)
    cells = "  ".join(f"{value!s:<{width}}" for value, width in zip(values, widths, strict=True))
    say(f"  {cells}  {reply.retry_after or '-'}")


DecisionKey = tuple[str, str, str]


def decision_counts(registry: CollectorRegistry) -> Counter[DecisionKey]:
    """``sentinel_decisions_total`` by (endpoint_id, decision_reason, allowed)."""
    counts: Counter[DecisionKey] = Counter()
    for metric in registry.collect():
        for sample in metric.samples:
            if sample.name == "sentinel_decisions_total":
                labels = sample.labels
                key = (labels["endpoint_id"], labels["decision_reason"], labels["allowed"])
                counts[key] += int(sample.value)
    return counts


class _DenialLogs(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if hasattr(record, "decision_reason"):
            self.records.append(record)


@contextmanager
def _collect_denial_logs() -> Iterator[_DenialLogs]:
    """Keep the ``sentinel`` logger's records for the summary instead of letting them
    interleave with the table on stderr; the logger is restored afterwards."""
    target = logging.getLogger("sentinel")
    handler, propagate = _DenialLogs(), target.propagate
    target.addHandler(handler)
    target.propagate = False
    try:
        yield handler
    finally:
        target.removeHandler(handler)
        target.propagate = propagate


def _summary(counts: Counter[DecisionKey], logs: _DenialLogs) -> None:
    say("")
    say("metrics (sentinel_decisions_total, this demo's requests):")
    for (endpoint_id, reason, allowed), value in counts.items():
        labels = f'endpoint_id="{endpoint_id}",decision_reason="{reason}",allowed="{allowed}"'
        say(f"  {{{labels}}} {value}")
    say(
        f"logs: {len(logs.records)} WARNING records on logger 'sentinel' "
        "(at most one per endpoint, identity and reason per second)"
    )
    for record in logs.records[-1:]:
        say(f"  e.g. {record.getMessage()}")
