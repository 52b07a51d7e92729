"""Concurrency leases and calendar quotas on a real Redis Cluster: every call's keys
(the bucket, and the lease named as a key of the same hash tag) share one slot, while
tenants spread over the primaries."""

from __future__ import annotations

import pytest

from sentinel_core import TenantIdentity
from tests.cluster.conftest import MakeSentinel
from tests.conftest import make_config
from tests.support.race import race_processes
from tests.support.redis_cluster import RedisCluster

pytestmark = pytest.mark.cluster

LEASES = {"algorithm": "concurrency", "limit": 3, "lease_seconds": 60, "fail_mode": "closed"}
QUOTA = {"algorithm": "quota", "rate": "5/month", "timezone": "Asia/Kolkata", "fail_mode": "closed"}
TENANTS = [f"tenant-{n}" for n in range(12)]


def config(url: str) -> dict[str, object]:
    built = make_config(url, leases=LEASES, quota=QUOTA)
    built["socket_timeout_ms"] = 2000
    return built


def test_leases_are_taken_and_released_on_every_primary(
    make_sentinel: MakeSentinel, cluster_url: str, redis_cluster: RedisCluster
) -> None:
    sentinel = make_sentinel(config(cluster_url))
    held = {tenant: [sentinel.evaluate("leases", tenant) for _ in range(4)] for tenant in TENANTS}
    for decisions in held.values():
        assert [d.allowed for d in decisions] == [True, True, True, False]
    policy = sentinel.policy("leases")
    nodes = {
        redis_cluster.node_for_key(TenantIdentity(tenant).bucket_keys(policy)[0]).port
        for tenant in TENANTS
    }
    assert len(nodes) == 3  # twelve tenants' buckets spread over the three primaries
    for tenant, decisions in held.items():
        for decision in decisions:
            sentinel.release(decision)
        assert sentinel.usage("leases", tenant).used == 0


async def test_async_leases_and_quota_on_the_cluster(
    make_sentinel: MakeSentinel, cluster_url: str
) -> None:
    sentinel = make_sentinel(config(cluster_url))
    await sentinel.acheck()
    async with sentinel.alease("leases", "acme") as decision:
        assert decision.allowed
        assert (await sentinel.ausage("leases", "acme")).used == 1
    assert (await sentinel.ausage("leases", "acme")).used == 0
    answers = [(await sentinel.aevaluate("quota", "acme")).allowed for _ in range(6)]
    assert answers == [True] * 5 + [False]
    usage = await sentinel.ausage("quota", "acme")
    assert usage.used == 5
    assert usage.period_start is not None
    assert usage.period_start.utcoffset().total_seconds() == 5.5 * 3600  # type: ignore[union-attr]
    await sentinel.aclose()


@pytest.mark.slow
def test_exactly_limit_leases_under_3_processes_of_8_threads(cluster_url: str) -> None:
    # Leases are never released here: exactly `limit` of the 120 attempts get one.
    allowed = race_processes(
        config(cluster_url), "leases", "tenant-race", processes=3, threads=8, calls=5
    )
    assert allowed == LEASES["limit"]
