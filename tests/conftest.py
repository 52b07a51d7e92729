"""Shared fixtures: real Redis servers started by the tests, and configurations."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from sentinel_core.testing import pytest_plugin
from tests.support.redis_admin import RedisAdmin
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import RedisServer


def pytest_configure(config: pytest.Config) -> None:
    # The distribution's `pytest11` entry point registers Sentinel's plugin wherever the
    # package is installed (tox, a user's venv: tests/packaging proves it); an editable
    # install made before that entry point existed lacks it, so register it here then.
    if not config.pluginmanager.has_plugin("sentinel"):
        config.pluginmanager.register(pytest_plugin, "sentinel")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--redis-store",
        choices=("single", "cluster"),
        default="single",
        help="what `redis_url` points at: our private redis-server (single, the default) "
        "or our local Redis Cluster, 3 primaries + 3 replicas (cluster)",
    )


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A private redis-server fit for Sentinel: noeviction, bounded maxmemory."""
    server = RedisServer().start()
    yield server
    server.close()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    """Our local Redis Cluster (3 primaries + 3 replicas), started on first use."""
    cluster = RedisCluster().start()
    yield cluster
    cluster.close()


@pytest.fixture
def redis_url(request: pytest.FixtureRequest) -> str:
    """The store chosen by ``--redis-store``, emptied for this test (it is ours alone to
    flush): the private server's ``redis://`` URL, or the cluster's ``redis+cluster://``
    one with every primary flushed. Inspect it with `RedisAdmin`, which sees it whole."""
    store = request.getfixturevalue(
        "redis_cluster" if request.config.getoption("redis_store") == "cluster" else "redis_server"
    )
    admin = RedisAdmin(store.url)
    admin.flushall()
    admin.close()
    return str(store.url)


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


@pytest.fixture
def flushed_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A client of the session's server, emptied first."""
    client = redis_server.client()
    client.flushall()
    yield client
    client.close()


def make_config(redis_url: str, **policies: dict[str, Any]) -> dict[str, Any]:
    """A minimal valid configuration with the given policies (endpoint id -> policy)."""
    return {
        "redis_url": redis_url,
        "policies": {name.replace("__", "."): policy for name, policy in policies.items()},
    }
