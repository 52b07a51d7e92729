"""The ``sentinel`` command line (SPEC §8): ``sentinel check`` and ``sentinel demo``.

``check`` runs the same start-up check an adapter runs, but prints every line of it
instead of stopping at the first problem. ``demo`` sends requests through
`Sentinel.guard`, exactly as an adapter does, and prints each outcome as a table row:
two tenants' bursts on a token bucket and a sliding window, then a fail-closed and a
fail-open endpoint while Redis is unreachable.

Exit codes: 0 success, 1 a check failed or Redis is unreachable, 2 a usage or
configuration error.
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
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Protocol
from urllib.parse import urlsplit

import jwt
from prometheus_client import REGISTRY, CollectorRegistry
from redis.exceptions import RedisError

from ._config import SentinelConfig, load_config
from ._errors import ConfigError, StartupError
from ._http import RequestView
from ._models import Rate
from ._protocol import Check
from ._sentinel import Sentinel

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
CHECK_TIMEOUT_MS = 2_000
"""The check waits longer than a request would: a slow link should fail on its own line
("cannot reach"), not look like a dead server."""
_BUILTIN_PLUGINS = ("sentinel.metrics", "sentinel.logging")
_PASSWORD_PARAMETER = re.compile(r"([?&]password=)[^&#]*")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``sentinel`` command; returns the exit code."""
    args = _parser().parse_args(argv)
    command: Callable[[argparse.Namespace], int] = args.command
    try:
        return command(args)
    except BrokenPipeError:  # `sentinel demo | head`: the reader is gone, stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sentinel",
        description="Tenant-aware, endpoint-aware distributed rate limiting: operator tools.",
    )
    commands = parser.add_subparsers(title="commands", required=True, metavar="COMMAND")
    check = commands.add_parser(
        "check",
        help="validate a configuration and the Redis server it names",
        description="Validate CONFIG (a TOML file with a [sentinel] table) and check its Redis "
        "server: version, noeviction, bounded maxmemory, script load. Exit 0 when every "
        "check passes, 1 when one fails or Redis is unreachable, 2 for a configuration error.",
    )
    check.add_argument("config", metavar="CONFIG", help="path to the TOML configuration")
    check.add_argument("--redis", metavar="URL", help="check this server instead of redis_url")
    check.add_argument(
        "--timeout-ms",
        type=_positive_int,
        default=CHECK_TIMEOUT_MS,
        help=f"connect and read timeout per Redis call (default {CHECK_TIMEOUT_MS})",
    )
    check.set_defaults(command=run_check)
    demo = commands.add_parser(
        "demo",
        help="show bursts being limited and Redis failures being handled",
        description="Send requests through Sentinel and print each outcome: two tenants' "
        "bursts limited on a token bucket and a sliding window (memory:// unless --redis), "
        "then a fail-closed and a fail-open endpoint with Redis unreachable.",
    )
    demo.add_argument("--framework", choices=("fastapi", "flask", "django"))
    demo.add_argument("--redis", metavar="URL", help="run the bursts on this Redis server")
    demo.set_defaults(command=run_demo)
    return parser


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


# ---------------------------------------------------------------- sentinel check


def run_check(args: argparse.Namespace) -> int:
    """``sentinel check``: one PASS/FAIL line per check, then a verdict."""
    _say(f"sentinel check: {args.config}")
    try:
        config = load_config(args.config)
    except ConfigError as error:
        _report(Check("config", False, str(error)))
        _say(f"result: FAIL (configuration error at {error.path or args.config})")
        return EXIT_USAGE
    url = args.redis or config.redis_url
    config = dataclasses.replace(config, redis_url=url, socket_timeout_ms=args.timeout_ms)
    source = "--redis" if args.redis else "redis_url"
    _report(Check("config", True, f"{_config_summary(config)}; {source} {redact_url(url)}"))
    try:
        sentinel = Sentinel(config, registry=CollectorRegistry())
    except Exception as exc:  # a third-party plugin failed to load: say which, then stop
        _report(Check("plugins", False, f"loading the 'sentinel' entry points: {exc!r}"))
        _say("result: FAIL")
        return EXIT_FAILED
    _report(Check("plugins", True, _plugin_summary(sentinel)))
    try:
        report = sentinel.store.check(config.require_noeviction)
    except ValueError as exc:  # redis-py's verdict on a malformed URL
        _report(Check("redis", False, f"invalid URL {redact_url(url)}: {exc}"))
        _say("result: FAIL (fix the URL)")
        return EXIT_USAGE
    except RedisError as exc:
        _report(Check("redis", False, f"cannot reach {redact_url(url)}: {_describe(exc)}"))
        _say("result: FAIL (Redis unreachable)")
        return EXIT_FAILED
    finally:
        sentinel.close()
    for check in report.checks:
        _report(check)
    if not config.require_noeviction:
        _say(f"  {'skip':<4}  {'eviction, maxmemory':<22}  require_noeviction is false")
    failed = [check for check in report.checks if not check.ok]
    if failed:
        _say(f"result: FAIL ({len(failed)} of {len(report.checks)} server checks failed)")
        return EXIT_FAILED
    _say("result: PASS")
    return EXIT_OK


def _report(check: Check) -> None:
    _say(f"  {'PASS' if check.ok else 'FAIL'}  {check.name:<22}  {check.detail}")


def _config_summary(config: SentinelConfig) -> str:
    policies, routes = len(config.policies), len(config.routes)
    return (
        f"{policies} {_plural(policies, 'policy', 'policies')}, {routes} {_plural(routes, 'route')}"
    )


def _plugin_summary(sentinel: Sentinel) -> str:
    names = [
        str(name)
        for name, _ in sentinel.hooks.manager.list_name_plugin()
        if name not in _BUILTIN_PLUGINS
    ]
    return f"{len(names)} from entry points" + (f": {', '.join(sorted(names))}" if names else "")


def _plural(count: int, singular: str, plural: str | None = None) -> str:
    return singular if count == 1 else plural or singular + "s"


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def redact_url(url: str) -> str:
    """``url`` with its password (userinfo or ``?password=``) masked, for printing."""
    netloc = urlsplit(url).netloc
    userinfo, at, host = netloc.rpartition("@")
    if at and ":" in userinfo:
        url = url.replace(netloc, f"{userinfo.split(':', 1)[0]}:***@{host}", 1)
    return _PASSWORD_PARAMETER.sub(r"\1***", url)


# ----------------------------------------------------------------- sentinel demo

TENANTS = ("acme", "globex")
EXAMPLE_PATHS = {"resumint.tailor": "/v1/tailor", "pdftalk.ingest": "/v1/ingest"}
"""Where every example app (``examples/<framework>_app.py``) serves the demo's endpoints."""
_UNITS = {1: "second", 60: "minute", 3600: "hour", 86400: "day"}
_REMAINING = re.compile(r";r=(\d+)")
SOURCE_CHECKOUT = Path(__file__).resolve().parents[1]
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
    _say(f"note: the {framework} demo {problem}.")
    _say("      Running the core demo: the same requests, through Sentinel.guard.")
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
    _say(f"app: {path}, in process")
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
        _say(f"{shown} is not fit for Sentinel: {error} (see `sentinel check`)")
        return False
    except RedisError as exc:
        _say(f"cannot reach {shown}: {_describe(exc)}")
        return False
    finally:
        sentinel.close()
    _say(f"store: {shown}")
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
    _say("")
    _say(title)
    _say("  " + "  ".join(f"{name:<{width}}" for name, width in _COLUMNS) + "  Retry-After")


def _row(tenant: str, endpoint_id: str, reply: Reply) -> None:
    remaining = "-" if reply.remaining is None else reply.remaining
    values = (tenant, endpoint_id, reply.status, reply.reason, remaining)
    widths = (width for _, width in _COLUMNS)
    cells = "  ".join(f"{value!s:<{width}}" for value, width in zip(values, widths, strict=True))
    _say(f"  {cells}  {reply.retry_after or '-'}")


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
    _say("")
    _say("metrics (sentinel_decisions_total, this demo's requests):")
    for (endpoint_id, reason, allowed), value in counts.items():
        labels = f'endpoint_id="{endpoint_id}",decision_reason="{reason}",allowed="{allowed}"'
        _say(f"  {{{labels}}} {value}")
    _say(f"logs: {len(logs.records)} WARNING records on logger 'sentinel' (one per denial)")
    for record in logs.records[-1:]:
        _say(f"  e.g. {record.getMessage()}")


def _say(line: str) -> None:
    print(line, flush=True)
