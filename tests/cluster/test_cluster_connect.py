"""What connecting the asyncio cluster store costs: no ``COMMAND`` table.

Django's async views under WSGI run on a fresh event loop per request, so each request
opens its own asyncio store; fetching and parsing redis-py's ``COMMAND`` table at every
connect cost some 30 ms a request here, enough to miss a 20 ms socket budget.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sentinel_core.store._cluster import AsyncClusterStore
from tests.cluster.conftest import MakeSentinel
from tests.conftest import make_config
from tests.support.redis_admin import RedisAdmin

pytestmark = pytest.mark.cluster

HOT = {"algorithm": "token_bucket", "rate": "1/day", "burst": 5, "fail_mode": "closed"}


@pytest.fixture
def admin(cluster_url: str) -> Iterator[RedisAdmin]:
    """Every primary, its command statistics reset (after the admin's own connect)."""
    client = RedisAdmin(cluster_url)
    client.config_resetstat()
    yield client
    client.close()


def _calls(admin: RedisAdmin, command: str) -> int:
    stats = admin.info("commandstats").get(f"cmdstat_{command}", {})
    return int(stats.get("calls", 0))


async def test_async_decisions_never_fetch_the_command_table(
    make_sentinel: MakeSentinel, cluster_url: str, admin: RedisAdmin
) -> None:
    config = make_config(cluster_url, hot=HOT)
    config["socket_timeout_ms"] = 2000  # the machine is shared
    sentinel = make_sentinel(config)
    await sentinel.acheck()
    decisions = [await sentinel.aevaluate("hot", f"tenant-{index}") for index in range(20)]
    await sentinel.aclose()

    assert all(decision.allowed for decision in decisions)
    assert _calls(admin, "evalsha") + _calls(admin, "eval") == 20
    assert _calls(admin, "command") == 0


async def test_a_command_that_needs_its_keys_found_fetches_the_table_then(
    cluster_url: str, admin: RedisAdmin
) -> None:
    store = AsyncClusterStore(cluster_url, 2000)
    try:
        await store.client.execute_command("SET", "connect-test", "1")
        value = await store.client.execute_command("GET", "connect-test")
    finally:
        await store.aclose()

    assert value == b"1"
    assert _calls(admin, "command") == 1
