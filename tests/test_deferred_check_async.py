"""The deferred start-up check on the asyncio path (SPEC §5): a Redis unreachable at
`astartup` is checked at the first successful `aevaluate`, after that decision."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry

from sentinel_core import DecisionReason, Sentinel
from tests.support.redis_server import RedisServer

POLICY = {"algorithm": "sliding_window", "rate": "10/minute", "fail_mode": "closed"}


def _sentinel(url: str) -> Sentinel:
    config = {"redis_url": url, "socket_timeout_ms": 1000, "policies": {"pdftalk.ingest": POLICY}}
    return Sentinel(config, registry=CollectorRegistry(), entry_points=False)


def _info_calls(server: RedisServer) -> int:
    client = server.client()
    try:
        stats = client.info("commandstats").get("cmdstat_info", {})
        return int(stats.get("calls", 0))
    finally:
        client.close()


@pytest.mark.slow
async def test_async_first_contact_runs_the_deferred_check_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = RedisServer().start()
    server.stop()
    sentinel = _sentinel(server.url)
    try:
        with caplog.at_level(logging.ERROR, logger="sentinel"):
            assert await sentinel.astartup() is None
        down = await sentinel.aevaluate("pdftalk.ingest", "tenant-a")
        server.start()  # same port
        first = await sentinel.aevaluate("pdftalk.ingest", "tenant-a")
        after_first = _info_calls(server)
        second = await sentinel.aevaluate("pdftalk.ingest", "tenant-a")
        after_second = _info_calls(server)
    finally:
        await sentinel.aclose()
        server.close()

    assert "Redis unreachable at start-up" in caplog.text
    assert not down.allowed
    assert down.reason in {DecisionReason.FAIL_CLOSED, DecisionReason.REDIS_CONNECTION_ERROR}
    assert (first.allowed, second.allowed) == (True, True)
    assert first.remaining == 9
    # The deferred check's INFO ran at the first contact and not at the second: between
    # the two readings only the first reading's own INFO commandstats was counted.
    assert after_first >= 1
    assert after_second == after_first + 1


@pytest.mark.slow
async def test_async_first_contact_with_an_unfit_redis_is_reported_critical(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = RedisServer(policy="allkeys-lru").start()
    server.stop()
    sentinel = _sentinel(server.url)
    try:
        assert await sentinel.astartup() is None
        server.start()
        with caplog.at_level(logging.CRITICAL, logger="sentinel"):
            decision = await sentinel.aevaluate("pdftalk.ingest", "tenant-a")
    finally:
        await sentinel.aclose()
        server.close()

    assert decision.allowed  # the decision stands; the check's verdict is logged
    assert any(
        record.levelno == logging.CRITICAL and "allkeys-lru" in record.getMessage()
        for record in caplog.records
    )
