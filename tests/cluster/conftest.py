"""A real Redis Cluster (3 primaries + 3 replicas) and a Sentinel-managed pair.

The shared cluster, `redis_cluster`, is tests/conftest.py's: ``--redis-store=cluster``
runs the adapter suites on the same one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sentinel_core import Sentinel
from tests.support.redis_cluster import RedisCluster, SentinelDeployment


@pytest.fixture
def cluster_url(redis_cluster: RedisCluster) -> str:
    """The shared cluster's URL, every primary emptied for this test."""
    for node in redis_cluster.primaries():
        node.client().flushall()
    return redis_cluster.url


@pytest.fixture
def fresh_cluster() -> Iterator[RedisCluster]:
    """A cluster of the test's own, for tests that kill nodes."""
    cluster = RedisCluster().start()
    yield cluster
    cluster.close()


@pytest.fixture
def sentinel_deployment() -> Iterator[SentinelDeployment]:
    deployment = SentinelDeployment().start()
    yield deployment
    deployment.close()


MakeSentinel = Callable[[dict[str, Any]], Sentinel]


@pytest.fixture
def make_sentinel() -> Iterator[MakeSentinel]:
    """Build Sentinels that are closed after the test (their sync store's sockets)."""
    built: list[Sentinel] = []

    def make(config: dict[str, Any]) -> Sentinel:
        built.append(Sentinel(config, entry_points=False))
        return built[-1]

    yield make
    for sentinel in built:
        sentinel.close()
