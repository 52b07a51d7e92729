"""``sentinel demo``: two tenants' bursts limited, then Redis unreachable, as a table.

Requests go through `Sentinel.guard` exactly as an adapter sends them: the core path
every adapter shares. Nothing is loaded from the current directory (no example app is
imported or executed), so running the demo anywhere runs only the installed package.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import secrets
import socket
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Protocol

import jwt
from prometheus_client import CollectorRegistry

from sentinel_core._models import Rate
from sentinel_core._sentinel import Sentinel
from sentinel_core.cli._console import EXIT_FAILED, EXIT_OK, describe, redact_url, say
from sentinel_core.config._schema import SentinelConfig, load_config
from sentinel_core.errors import StartupError, StoreError
from sentinel_core.http._outcome import RequestView

TENANTS = ("acme", "globex")
_UNITS = {1: "second", 60: "minute", 3600: "hour", 86400: "day"}


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


def run_demo(args: argparse.Namespace) -> int:
    """``sentinel demo``: bursts limited, then Redis unreachable, as a table."""
    store_url = args.redis or "memory://"
    tokens = Tokens(secrets.token_hex(32))
    if not _store_ready(store_url, tokens.secret):
        return EXIT_FAILED
    registry = CollectorRegistry()
    before = decision_counts(registry)
    with _collect_denial_logs() as logs:
        scenario = Scenario(_core_config(store_url, tokens.secret), *_CORE_ENDPOINTS)
        connect = partial(_core_client, scenario.config, registry, tokens)
        with connect(store_url) as client:
            _bursts(scenario, client)
        with connect(_dead_url()) as client:
            _outage(scenario, client)
    _summary(decision_counts(registry) - before, logs)
    return EXIT_OK


_CORE_ENDPOINTS = ("resumint.tailor", "pdftalk.ingest", "billing.charge", "search.query")


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
        self.records.append(record)  # the demo's requests log nothing but denials


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
