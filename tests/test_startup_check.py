"""The startup check (SPEC §3, §8): refuse a Redis that would silently reset limits.

An evicting server (``allkeys-lru``) drops buckets under memory pressure, and an
unbounded one (``maxmemory 0``) is only bounded by the machine: both are refused with a
message saying what to change. An unreachable server is not a verdict on the server:
it raises redis-py's ``ConnectionError`` for the caller (the adapters) to handle.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from sentinel_core import Sentinel, SentinelError, StartupError
from sentinel_core.errors import StoreUnavailableError
from sentinel_core.store._protocol import ServerReport
from sentinel_core.store._scripts import all_scripts
from tests.support.redis_server import RedisServer, free_port

SCRIPT_CHECKS = {f"script {script.name}" for script in all_scripts()}


@pytest.fixture
def sentinel_for() -> Iterator[Any]:
    """Builds Sentinels for a URL, closing them after the test."""
    built: list[Sentinel] = []

    def make(url: str, **top: Any) -> Sentinel:
        config = {
            "redis_url": url,
            "policies": {
                "pdftalk.ingest": {
                    "algorithm": "sliding_window",
                    "rate": "10/minute",
                    "fail_mode": "closed",
                }
            },
            **top,
        }
        sentinel = Sentinel(config, registry=CollectorRegistry(), entry_points=False)
        built.append(sentinel)
        return sentinel

    yield make
    for sentinel in built:
        sentinel.close()


def checks_by_name(report: ServerReport) -> dict[str, Any]:
    return {check.name: check for check in report.checks}


# -- refused servers -------------------------------------------------------------------------


def test_evicting_server_is_refused_naming_the_setting_to_change(
    sentinel_for: Any, lru_redis_server: RedisServer
) -> None:
    with pytest.raises(StartupError) as info:
        sentinel_for(lru_redis_server.url).check()
    message = str(info.value)
    assert "allkeys-lru" in message
    assert "maxmemory-policy noeviction" in message
    assert "bounded `maxmemory`" not in message  # its maxmemory is fine: not blamed
    assert isinstance(info.value, SentinelError)


def test_unbounded_server_is_refused_naming_the_setting_to_change(
    sentinel_for: Any, unbounded_redis_server: RedisServer
) -> None:
    with pytest.raises(StartupError) as info:
        sentinel_for(unbounded_redis_server.url).check()
    message = str(info.value)
    assert "maxmemory is 0 bytes" in message
    assert "maxmemory 256mb" in message  # an example of what to set
    assert "maxmemory-policy" not in message  # its eviction policy is fine: not blamed


def test_server_with_both_problems_is_refused_for_both(sentinel_for: Any) -> None:
    server = RedisServer(policy="volatile-lru", maxmemory=0).start()
    try:
        with pytest.raises(StartupError) as info:
            sentinel_for(server.url).check()
    finally:
        server.close()
    message = str(info.value)
    assert "volatile-lru" in message
    assert "maxmemory-policy noeviction" in message
    assert "maxmemory is 0 bytes" in message


async def test_async_check_refuses_the_evicting_server(
    sentinel_for: Any, lru_redis_server: RedisServer
) -> None:
    sentinel = sentinel_for(lru_redis_server.url)
    try:
        with pytest.raises(StartupError, match="maxmemory-policy noeviction"):
            await sentinel.acheck()
    finally:
        await sentinel.aclose()


# -- accepted servers ------------------------------------------------------------------------


def test_fit_server_passes_and_reports_each_check(
    sentinel_for: Any, redis_server: RedisServer, redis_url: str
) -> None:
    client = redis_server.client()
    try:
        client.script_flush()
        report = sentinel_for(redis_url).check()
        loaded = client.script_exists(*(script.sha for script in all_scripts()))
        version = client.info("server")["redis_version"]
    finally:
        client.close()

    assert report.ok
    checks = checks_by_name(report)
    assert set(checks) == {"redis version", "eviction policy", "maxmemory"} | SCRIPT_CHECKS
    assert all(check.ok for check in report.checks)
    assert checks["redis version"].detail == version
    assert checks["eviction policy"].detail == "maxmemory-policy is noeviction"
    assert checks["maxmemory"].detail == f"maxmemory is {redis_server.maxmemory} bytes"
    for script in all_scripts():
        assert checks[f"script {script.name}"].detail == f"loaded as {script.sha}"
    assert loaded == [True] * len(all_scripts())  # the check really loaded them


async def test_async_check_passes_on_the_fit_server(sentinel_for: Any, redis_url: str) -> None:
    sentinel = sentinel_for(redis_url)
    try:
        report = await sentinel.acheck()
    finally:
        await sentinel.aclose()
    assert report.ok
    assert set(checks_by_name(report)) >= {"redis version", "eviction policy", "maxmemory"}


@pytest.mark.parametrize("server_fixture", ["lru_redis_server", "unbounded_redis_server"])
def test_require_noeviction_false_accepts_an_evicting_or_unbounded_server(
    request: pytest.FixtureRequest, sentinel_for: Any, server_fixture: str
) -> None:
    server: RedisServer = request.getfixturevalue(server_fixture)
    report = sentinel_for(server.url, require_noeviction=False).check()
    assert report.ok
    # only the checks that still apply: version and scripts
    assert set(checks_by_name(report)) == {"redis version"} | SCRIPT_CHECKS


def test_memory_store_check_passes_without_redis(sentinel_for: Any) -> None:
    report = sentinel_for("memory://").check()
    assert report.ok
    assert [check.name for check in report.checks] == ["store"]


# -- unreachable servers ---------------------------------------------------------------------


def test_check_on_a_dead_port_raises_connection_error(sentinel_for: Any) -> None:
    sentinel = sentinel_for(f"redis://127.0.0.1:{free_port()}/0", socket_timeout_ms=500)
    with pytest.raises(StoreUnavailableError):
        sentinel.check()


async def test_async_check_on_a_dead_port_raises_connection_error(sentinel_for: Any) -> None:
    sentinel = sentinel_for(f"redis://127.0.0.1:{free_port()}/0", socket_timeout_ms=500)
    try:
        with pytest.raises(StoreUnavailableError):
            await sentinel.acheck()
    finally:
        await sentinel.aclose()


@pytest.mark.parametrize(
    ("version", "ok"),
    [("8.1.0", True), ("6.2.0", True), ("6.0.16", False), ("unknown", False), ("7.x.1", False)],
)
def test_the_version_check_needs_6_2_and_refuses_a_version_it_cannot_read(
    version: str, ok: bool
) -> None:
    from sentinel_core.store._protocol import _version_check

    check = _version_check(version)

    assert check.name == "redis version"
    assert check.ok is ok
    assert check.detail.startswith(version)
    assert ("Sentinel needs 6.2 or newer" in check.detail) is not ok
