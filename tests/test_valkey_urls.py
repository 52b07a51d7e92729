"""``valkey://``-family ``redis_url`` schemes (SPEC §2): aliases of the ``redis`` ones,
parsed by the same rules, and connected to the same stores (a real redis-server and our
local Redis Cluster stand in for Valkey, which speaks the same protocol)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from sentinel_core import ConfigError, DecisionReason, load_config
from sentinel_core.store._url import StoreKind, resolve
from tests.support.exemptions import valkey
from tests.support.http import make_sentinel
from tests.support.redis_admin import RedisAdmin
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import RedisServer

POLICY = {"algorithm": "token_bucket", "rate": "1/hour", "burst": 2, "fail_mode": "closed"}


def config(redis_url: str) -> dict[str, Any]:
    return {"redis_url": redis_url, "policies": {"api.ep": POLICY}}


@pytest.mark.parametrize(
    ("url", "kind", "canonical"),
    [
        ("valkey://h:6379/0", StoreKind.REDIS, "redis://h:6379/0"),
        ("VALKEY://h", StoreKind.REDIS, "redis://h"),
        (
            "valkeys://u:pw@h:6380/1?ssl_cert_reqs=none",
            StoreKind.REDIS,
            "rediss://u:pw@h:6380/1?ssl_cert_reqs=none",
        ),
        ("valkey+cluster://a:7000,b:7001", StoreKind.CLUSTER, "redis+cluster://a:7000,b:7001"),
        (
            "valkey+sentinel://h:26379/primary/1",
            StoreKind.SENTINEL,
            "redis+sentinel://h:26379/primary/1",
        ),
    ],
)
def test_valkey_schemes_are_aliases_of_the_redis_ones(
    url: str, kind: StoreKind, canonical: str
) -> None:
    assert resolve(url) == (kind, canonical)
    assert load_config(config(url)).redis_url == url


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("valkey://h:0", "the port must be a number from 1 to 65535"),
        ("valkeys://", "no host in the URL"),
        ("valkey://h/zero", "the database must be a number"),
        ("valkey+cluster://h:99999", "the port must be a number from 1 to 65535"),
        ("valkey+sentinel://h:26379", "expected redis+sentinel://host:port"),
        ("valkey+unix:///tmp/x.sock", "unsupported scheme"),
    ],
)
def test_valkey_urls_are_parsed_as_strictly(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)) as caught:
        load_config(config(url))
    assert caught.value.path == "redis_url"


def test_a_valkey_url_reaches_the_server(redis_server: RedisServer) -> None:
    admin = RedisAdmin(str(redis_server.url))
    admin.flushall()
    sentinel = make_sentinel(config(valkey(str(redis_server.url))))
    try:
        sentinel.check()
        reasons = [sentinel.evaluate("api.ep", "tenant-v").reason for _ in range(3)]
        assert admin.dbsize() == 1
    finally:
        sentinel.close()
        admin.close()
    assert reasons == [DecisionReason.ALLOWED] * 2 + [DecisionReason.RATE_LIMITED]


async def test_a_valkey_cluster_url_reaches_the_cluster(redis_cluster: RedisCluster) -> None:
    admin = RedisAdmin(str(redis_cluster.url))
    admin.flushall()
    sentinel = make_sentinel(config(valkey(str(redis_cluster.url))))
    try:
        await sentinel.acheck()
        reasons = [(await sentinel.aevaluate("api.ep", "tenant-v")).reason for _ in range(3)]
        assert admin.dbsize() == 1
    finally:
        await sentinel.aclose()
        admin.close()
    assert reasons == [DecisionReason.ALLOWED] * 2 + [DecisionReason.RATE_LIMITED]
