"""What connecting the asyncio cluster store costs: redis-py's ``COMMAND`` table, once.

redis-py's asyncio cluster client fetches the table when it connects and offers no public
way not to; Sentinel accepts that one call per client (a private parser subclass that
skipped it was retired, issue 15), but never pays it per decision.
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


async def test_async_decisions_fetch_the_command_table_once_per_client(
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
    assert _calls(admin, "command") == 1


async def test_a_command_that_needs_its_keys_found_works(
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
