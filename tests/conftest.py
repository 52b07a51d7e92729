"""Shared fixtures: real Redis servers started by the tests, and configurations."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.redis_server import RedisServer


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A private redis-server fit for Sentinel: noeviction, bounded maxmemory."""
    server = RedisServer().start()
    yield server
    server.close()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The private server's URL, emptied for this test (it is ours alone to flush)."""
    client = redis_server.client()
    client.flushall()
    client.close()
    return redis_server.url


@pytest.fixture(scope="session")
def lru_redis_server() -> Iterator[RedisServer]:
    server = RedisServer(policy="allkeys-lru").start()
    yield server
    server.close()


@pytest.fixture(scope="session")
def unbounded_redis_server() -> Iterator[RedisServer]:
    server = RedisServer(maxmemory=0).start()
    yield server
    server.close()


def make_config(redis_url: str, **policies: dict[str, Any]) -> dict[str, Any]:
    """A minimal valid configuration with the given policies (endpoint id -> policy)."""
    return {
        "redis_url": redis_url,
        "policies": {name.replace("__", "."): policy for name, policy in policies.items()},
    }
