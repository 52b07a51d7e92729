"""redis-py's exceptions become the core's store errors at the store boundary, and a data
error (a bucket value nobody can use) is never taken for an outage."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import redis
from prometheus_client import CollectorRegistry

from sentinel_core import DecisionReason, Sentinel
from sentinel_core.errors import (
    ScriptMissingError,
    StoreDataError,
    StoreError,
    StoreTimeoutError,
    StoreUnavailableError,
)
from sentinel_core.identity._keys import tenant_identity
from sentinel_core.resilience._breaker import BreakerState
from sentinel_core.store._errors import translate
from tests.conftest import make_config
from tests.support.redis_server import free_port

PACKAGE = Path(__file__).resolve().parents[1] / "sentinel_core"
CLOSED = {"algorithm": "token_bucket", "rate": "100/second", "fail_mode": "closed"}
OPEN = {**CLOSED, "fail_mode": "open", "fallback_rate": "100/second"}


@pytest.mark.parametrize(
    ("error", "translated"),
    [
        (redis.TimeoutError("Timeout reading from socket"), StoreTimeoutError),
        (redis.ConnectionError("Connection refused"), StoreUnavailableError),
        (redis.exceptions.ClusterDownError("CLUSTERDOWN"), StoreUnavailableError),
        (redis.exceptions.RedisClusterException("no route"), StoreUnavailableError),
        (redis.ResponseError("LOADING Redis is loading"), StoreUnavailableError),
        (redis.ResponseError("WRONGTYPE Operation against a key"), StoreDataError),
        (redis.ResponseError("ERR user_script:1: WRONGTYPE Operation"), StoreDataError),
        (redis.exceptions.BusyLoadingError(""), StoreUnavailableError),
    ],
)
def test_each_redis_error_becomes_one_store_error(
    error: Exception, translated: type[StoreError]
) -> None:
    store_error = translate(error)  # type: ignore[arg-type]
    assert type(store_error) is translated
    assert str(store_error)


def test_store_errors_are_not_redis_errors_and_script_missing_is_unavailability() -> None:
    assert not issubclass(StoreError, redis.RedisError)
    assert issubclass(ScriptMissingError, StoreUnavailableError)
    assert issubclass(StoreTimeoutError, StoreUnavailableError)
    assert not issubclass(StoreDataError, StoreUnavailableError)


def _imported_modules(path: Path) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
    return modules


@pytest.mark.parametrize(
    "path",
    [
        *sorted((PACKAGE / "decision").glob("*.py")),
        PACKAGE / "errors.py",
        PACKAGE / "_sentinel.py",
    ],
    ids=lambda path: path.name,
)
def test_nothing_above_the_store_imports_redis(path: Path) -> None:
    assert not {m for m in _imported_modules(path) if m.split(".")[0] == "redis"}


def test_an_unreachable_store_raises_store_unavailable_from_check() -> None:
    sentinel = Sentinel(
        make_config(f"redis://127.0.0.1:{free_port()}/0", api__closed=CLOSED),
        registry=CollectorRegistry(),
        entry_points=False,
    )
    with pytest.raises(StoreUnavailableError) as caught:
        sentinel.check()
    assert isinstance(caught.value.__cause__, redis.ConnectionError)


class DataErrors:
    """A store stand-in whose every call meets a bucket of the wrong type."""

    def run(self, call: object) -> object:
        raise StoreDataError("WRONGTYPE Operation against a key holding the wrong kind of value")


@pytest.mark.parametrize("policy", [CLOSED, OPEN], ids=["fail-closed", "fail-open"])
def test_data_errors_never_open_the_breaker(policy: dict[str, str]) -> None:
    sentinel = Sentinel(
        {**make_config("memory://", api__ep=policy), "breaker": {"failure_threshold": 2}},
        registry=CollectorRegistry(),
        entry_points=False,
    )
    memory = sentinel.store
    sentinel._sync_store = DataErrors()  # type: ignore[assignment]
    decisions = [sentinel.evaluate("api.ep", "broken") for _ in range(5)]
    assert sentinel.breaker_state is BreakerState.CLOSED
    expected = (
        DecisionReason.FAIL_CLOSED if policy is CLOSED else DecisionReason.REDIS_CONNECTION_ERROR
    )
    assert {d.reason for d in decisions} == {expected}
    sentinel._sync_store = memory
    assert sentinel.evaluate("api.ep", "other").reason is DecisionReason.ALLOWED


def test_a_wrongtype_bucket_on_redis_does_not_open_the_breaker(redis_url: str) -> None:
    sentinel = Sentinel(
        {**make_config(redis_url, api__ep=CLOSED), "breaker": {"failure_threshold": 2}},
        registry=CollectorRegistry(),
        entry_points=False,
    )
    admin = redis.Redis.from_url(redis_url)
    try:
        policy = sentinel.policy("api.ep")
        for key in sentinel._engine.script_call(policy, tenant_identity("broken")).keys:
            admin.rpush(key, "not", "a", "bucket")
        broken = [sentinel.evaluate("api.ep", "broken") for _ in range(4)]
        others = [sentinel.evaluate("api.ep", f"tenant-{i}") for i in range(4)]
    finally:
        sentinel.close()
        admin.close()
    assert sentinel.breaker_state is BreakerState.CLOSED
    assert {d.reason for d in broken} <= {DecisionReason.ALLOWED, DecisionReason.FAIL_CLOSED}
    assert {d.reason for d in others} == {DecisionReason.ALLOWED}
