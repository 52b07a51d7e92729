"""The asyncio store on a Redis Sentinel-managed primary: the same decisions, in the
primary that the Sentinels designate."""

from __future__ import annotations

import pytest

from sentinel_core import Sentinel
from tests.conftest import make_config
from tests.support.redis_cluster import SentinelDeployment

pytestmark = pytest.mark.cluster

POLICY = {"algorithm": "token_bucket", "rate": "1/day", "burst": 3, "fail_mode": "closed"}


async def test_async_decisions_run_on_the_sentinel_designated_primary(
    sentinel_deployment: SentinelDeployment,
) -> None:
    config = make_config(sentinel_deployment.url, hot=POLICY)
    config["socket_timeout_ms"] = 2000
    sentinel = Sentinel(config, entry_points=False)
    try:
        report = await sentinel.acheck()
        decisions = [await sentinel.aevaluate("hot", "tenant-a") for _ in range(4)]
    finally:
        await sentinel.aclose()
        sentinel.close()

    assert report.ok
    assert [decision.allowed for decision in decisions] == [True, True, True, False]
    assert [decision.remaining for decision in decisions[:3]] == [2, 1, 0]
    primary = sentinel_deployment.primary.client()
    try:
        assert primary.dbsize() >= 1  # the bucket lives on the primary
    finally:
        primary.close()
