"""Peek and reset on a real Redis Cluster: one script call per identity, in its slot."""

from __future__ import annotations

import redis
from prometheus_client import CollectorRegistry

from sentinel_core import Sentinel
from sentinel_core.identity._keys import TenantIdentity
from tests.conftest import make_config
from tests.support.redis_cluster import RedisCluster

POLICY = {"algorithm": "token_bucket", "rates": ["2/minute", "3/day"], "fail_mode": "closed"}


def test_peek_writes_nothing_and_reset_refills_on_the_cluster(
    cluster_url: str, redis_cluster: RedisCluster
) -> None:
    sentinel = Sentinel(
        make_config(cluster_url, api=POLICY), registry=CollectorRegistry(), entry_points=False
    )
    client = redis.RedisCluster(host="127.0.0.1", port=redis_cluster.nodes[0].port)
    try:
        tenants = [f"tenant-{i}" for i in range(8)]  # over several primaries
        for tenant in tenants:
            assert [sentinel.evaluate("api", tenant).allowed for _ in range(3)] == [
                True,
                True,
                False,
            ]
            keys = TenantIdentity(tenant).bucket_keys(sentinel.policy("api"))
            before = [(client.get(key), client.pttl(key)) for key in keys]
            assert not sentinel.peek("api", tenant).allowed
            after = [(client.get(key), client.pttl(key)) for key in keys]
            assert [value for value, _ in after] == [value for value, _ in before]
            assert all(0 <= b - a <= 1_000 for (_, b), (_, a) in zip(before, after, strict=True))
            sentinel.reset("api", tenant)
            assert sentinel.peek("api", tenant).allowed
            assert [sentinel.evaluate("api", tenant).allowed for _ in range(3)] == [
                True,
                True,
                False,
            ]
    finally:
        client.close()
        sentinel.close()
