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
import dataclasses
import logging
import re
import secrets
import socket
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Protocol
from urllib.parse import urlsplit

import jwt
from prometheus_client import CollectorRegistry
from redis.exceptions import RedisError

from ._config import SentinelConfig, load_config
from ._errors import ConfigError, StartupError
from ._http import Outcome, RequestView
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
    return command(args)


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


@dataclasses.dataclass(frozen=True, slots=True)
class Reply:
    """What the demo shows of one response."""

    status: int
    reason: str
    remaining: int
    retry_after: str | None


class DemoClient(Protocol):
    """Sends one demo request as ``tenant`` to ``endpoint_id``."""

    def send(self, endpoint_id: str, tenant: str) -> Reply: ...


class CoreClient:
    """Sends the demo's requests through `Sentinel.guard` with a bearer token, as an
    adapter does: identity, decision and SPEC §4's outcome are the real ones."""

    def __init__(self, sentinel: Sentinel, secret: str) -> None:
        self._sentinel = sentinel
        self._secret = secret
        self._tokens: dict[str, str] = {}

    def send(self, endpoint_id: str, tenant: str) -> Reply:
        request = RequestView(
            "POST", None, {"authorization": f"Bearer {self._token(tenant)}"}, {}, "127.0.0.1"
        )
        return _reply(self._sentinel.guard(endpoint_id, request))

    def _token(self, tenant: str) -> str:
        if tenant not in self._tokens:
            claims = {"sub": tenant, "exp": int(time.time()) + 600}
            self._tokens[tenant] = jwt.encode(claims, self._secret, algorithm="HS256")
        return self._tokens[tenant]


def _reply(outcome: Outcome) -> Reply:
    decision = outcome.decision
    assert decision is not None  # the demo's tokens are valid: never a 401
    retry_after = dict(outcome.headers).get("Retry-After")
    return Reply(outcome.status, decision.reason.value, decision.remaining, retry_after)


FRAMEWORK_CLIENTS: dict[str, Callable[[Mapping[str, Any]], DemoClient]] = {}
"""``--framework`` drivers: each builds its framework's example app (``examples/``) from
the demo configuration and returns a `DemoClient` on the framework's test client. A
framework without a driver here runs the core demo, saying so."""


def run_demo(args: argparse.Namespace) -> int:
    """``sentinel demo``: bursts limited, then Redis unreachable, as a table."""
    secret = secrets.token_hex(32)
    bursts_config = _bursts_config(args.redis or "memory://", secret)
    framework = args.framework
    if framework is not None and framework not in FRAMEWORK_CLIENTS:
        _say(
            f"note: the {framework} demo (driving examples/{framework}_app.py through "
            f"{framework}'s test client) is not available yet; running the core demo, which "
            "sends the same requests through Sentinel.guard as every adapter does."
        )
    with _collect_denial_logs() as logs:
        registry = CollectorRegistry()
        sentinel = Sentinel(bursts_config, registry=registry, entry_points=False)
        try:
            if not _demo_store_ready(sentinel):
                return EXIT_FAILED
            client = (
                FRAMEWORK_CLIENTS[framework](bursts_config)
                if framework in FRAMEWORK_CLIENTS
                else CoreClient(sentinel, secret)
            )
            _bursts(client)
        finally:
            sentinel.close()
        outage = Sentinel(_outage_config(secret), registry=registry, entry_points=False)
        try:
            _outage(CoreClient(outage, secret))
        finally:
            outage.close()
    _summary(registry, logs)
    return EXIT_OK


def _bursts_config(redis_url: str, secret: str) -> dict[str, Any]:
    # A fresh policy version per run: a shared Redis may still hold the last run's buckets
    # (they expire by themselves; the demo never deletes keys).
    version = secrets.randbelow(1_000_000_000) + 1
    return {
        "redis_url": redis_url,
        "jwt": {"algorithms": ["HS256"], "key": secret},
        "policies": {
            "resumint.tailor": {
                "algorithm": "token_bucket",
                "rate": "10/minute",
                "burst": 3,
                "fail_mode": "closed",
                "version": version,
            },
            "pdftalk.ingest": {
                "algorithm": "sliding_window",
                "rate": "4/minute",
                "fail_mode": "closed",
                "version": version,
            },
        },
    }


def _outage_config(secret: str) -> dict[str, Any]:
    return {
        "redis_url": f"redis://127.0.0.1:{_dead_port()}/0",
        "socket_timeout_ms": 50,
        "jwt": {"algorithms": ["HS256"], "key": secret},
        "breaker": {"failure_threshold": 3, "open_seconds": 30},
        "policies": {
            "billing.charge": {
                "algorithm": "token_bucket",
                "rate": "5/second",
                "fail_mode": "closed",
            },
            "search.query": {
                "algorithm": "token_bucket",
                "rate": "5/second",
                "fail_mode": "open",
                "fallback_rate": "3/second",
            },
        },
    }


def _dead_port() -> int:
    """A loopback port nobody listens on (bound, then released): connection refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _demo_store_ready(sentinel: Sentinel) -> bool:
    url = redact_url(sentinel.config.redis_url)
    try:
        sentinel.check()
    except StartupError as error:
        _say(f"{url} is not fit for Sentinel: {error} (see `sentinel check`)")
        return False
    except RedisError as exc:
        _say(f"cannot reach {url}: {_describe(exc)}")
        return False
    _say(f"store: {url}")
    return True


def _bursts(client: DemoClient) -> None:
    _section("1. Two tenants burst: token bucket resumint.tailor (10/minute, burst 3)")
    for tenant in TENANTS:
        for _ in range(5):
            _row(tenant, "resumint.tailor", client.send("resumint.tailor", tenant))
    _section("2. Two tenants burst: sliding window pdftalk.ingest (4/minute)")
    for tenant, count in zip(TENANTS, (6, 2), strict=True):
        for _ in range(count):
            _row(tenant, "pdftalk.ingest", client.send("pdftalk.ingest", tenant))


def _outage(client: DemoClient) -> None:
    _section(
        "3. Redis unreachable: billing.charge fails closed, search.query fails open\n"
        "   (emergency limiter: fallback 3/second per process); the breaker opens after 3 failures"
    )
    for _ in range(4):
        _row("acme", "billing.charge", client.send("billing.charge", "acme"))
        _row("acme", "search.query", client.send("search.query", "acme"))
    for _ in range(2):
        _row("acme", "search.query", client.send("search.query", "acme"))


_COLUMNS = (("tenant", 8), ("endpoint", 16), ("status", 6), ("reason", 23), ("remaining", 9))


def _section(title: str) -> None:
    _say("")
    _say(title)
    _say("  " + "  ".join(f"{name:<{width}}" for name, width in _COLUMNS) + "  Retry-After")


def _row(tenant: str, endpoint_id: str, reply: Reply) -> None:
    values = (tenant, endpoint_id, reply.status, reply.reason, reply.remaining)
    cells = "  ".join(
        f"{value!s:<{width}}" for value, (_, width) in zip(values, _COLUMNS, strict=True)
    )
    _say(f"  {cells}  {reply.retry_after or '-'}")


class _DenialLogs(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
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


def _summary(registry: CollectorRegistry, logs: _DenialLogs) -> None:
    _say("")
    _say("metrics (sentinel_decisions_total):")
    for metric in registry.collect():
        for sample in metric.samples:
            if sample.name == "sentinel_decisions_total":
                labels = ",".join(f'{key}="{value}"' for key, value in sample.labels.items())
                _say(f"  {{{labels}}} {sample.value:g}")
    _say(f"logs: {len(logs.records)} WARNING records on logger 'sentinel' (one per denial)")
    if logs.records:
        _say(f"  e.g. {logs.records[-1].getMessage()}")


def _say(line: str) -> None:
    print(line, flush=True)
