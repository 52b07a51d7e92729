"""Security regressions of the identity layer (SPEC §3, §4), on the private Redis.

Client headers never choose an identity: ``X-Tenant-ID``, ``X-Forwarded-For``,
``Forwarded`` and ``X-Real-IP`` leave bucket keys and decision sequences exactly as
they are without them. Raw identities (tenant ids, device ids, addresses) never appear
in a key or a response. Rotating what a client controls (cookies, addresses inside its
/64) does not buy a fresh quota.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from sentinel_core import Sentinel
from sentinel_core.adapter import Outcome
from sentinel_core.identity._keys import compact_hash
from tests.support.http import make_sentinel, request_view
from tests.support.redis_server import RedisServer
from tests.support.tokens import COOKIE_SECRET, HS_SECRET, bearer, hs256

pytestmark = pytest.mark.security

TENANT = "tenant.read"
ANONYMOUS = "auth.login"
SPOOFS: list[dict[str, str]] = [
    {},
    {"X-Tenant-ID": "victim"},
    {"X-Tenant-Id": "tenant-b", "X-Forwarded-For": "198.51.100.1"},
    {"X-Forwarded-For": "198.51.100.2, 10.0.0.1"},
    {"Forwarded": 'for="[2001:db8::1]";proto=https, for=198.51.100.3'},
    {"X-Real-IP": "198.51.100.4"},
    {"X-Client-IP": "198.51.100.5", "True-Client-IP": "198.51.100.6"},
    {"X-Tenant-ID": "", "X-Forwarded-For": "unknown"},
]


def config(redis_url: str) -> dict[str, Any]:
    bucket = {"algorithm": "token_bucket", "rate": "1/hour", "burst": 4, "fail_mode": "closed"}
    return {
        "redis_url": redis_url,
        # The tests flush Redis between runs: an outside reset, which a process answering
        # denials locally would only see after local_denials_ms.
        "local_denials_ms": 0,
        "jwt": {"key": HS_SECRET},
        "anonymous": {"cookie_secret": COOKIE_SECRET},
        "policies": {
            TENANT: bucket,
            # the network bucket holds as much as one device, so escapes show at once
            ANONYMOUS: {
                **bucket,
                "identity": "anonymous",
                "network_rate": "1/hour",
                "network_burst": 4,
            },
        },
    }


@pytest.fixture
def client(redis_url: str, redis_server: RedisServer) -> Iterator[redis.Redis]:
    connection = redis_server.client()
    yield connection
    connection.close()


@pytest.fixture
def sentinel(redis_url: str) -> Iterator[Sentinel]:
    instance = make_sentinel(config(redis_url))
    yield instance
    instance.close()


def keys(client: redis.Redis) -> list[str]:
    return sorted(key.decode() for key in client.keys("*"))


def trace(outcomes: list[Outcome]) -> list[tuple[int, int | None]]:
    return [(o.status, o.decision.remaining if o.decision else None) for o in outcomes]


def tenant_requests(sentinel: Sentinel, spoofs: list[dict[str, str]]) -> list[Outcome]:
    token = bearer(hs256("tenant-a"))
    return [
        sentinel.guard(TENANT, request_view(headers={**spoof, "Authorization": token}))
        for spoof in spoofs
    ]


def test_spoofed_headers_never_change_a_tenants_bucket(
    sentinel: Sentinel, client: redis.Redis
) -> None:
    plain = trace(tenant_requests(sentinel, [{}] * len(SPOOFS)))
    plain_keys = keys(client)
    client.flushall()
    spoofed = trace(tenant_requests(sentinel, SPOOFS))
    assert spoofed == plain
    assert keys(client) == plain_keys
    digest = compact_hash("tenant-a")
    assert plain_keys == [f"sentinel:v1:{{{digest}}}:{TENANT}:1"]
    assert plain[4:] == [(429, 0)] * (len(SPOOFS) - 4)


def test_x_tenant_id_without_a_token_is_401_and_touches_nothing(
    sentinel: Sentinel, client: redis.Redis
) -> None:
    for spoof in SPOOFS:
        outcome = sentinel.guard(TENANT, request_view(headers=spoof))
        assert outcome.status == 401
    assert keys(client) == []


def anonymous_requests(
    sentinel: Sentinel, spoofs: list[dict[str, str]], peer: str = "203.0.113.9"
) -> list[Outcome]:
    first = sentinel.guard(ANONYMOUS, request_view(peer=peer))
    assert first.cookie is not None
    jar = {"sentinel_device": first.cookie.value}
    return [first] + [
        sentinel.guard(ANONYMOUS, request_view(peer=peer, cookies=jar, headers=spoof))
        for spoof in spoofs
    ]


def test_spoofed_forwarding_headers_never_change_an_anonymous_clients_buckets(
    sentinel: Sentinel, client: redis.Redis
) -> None:
    plain = trace(anonymous_requests(sentinel, [{}] * len(SPOOFS)))
    plain_keys = [key.split(":d:")[0] for key in keys(client)]
    client.flushall()
    spoofed = trace(anonymous_requests(sentinel, SPOOFS))
    assert spoofed == plain
    # Same network bucket (the device id is new per run, so compare the network part).
    assert [key.split(":d:")[0] for key in keys(client)] == plain_keys
    assert len([key for key in keys(client) if ":n:" in key]) == 1


def test_the_peer_address_decides_even_when_forwarding_headers_agree(
    sentinel: Sentinel, client: redis.Redis
) -> None:
    same_claim = {"X-Forwarded-For": "198.51.100.77", "X-Real-IP": "198.51.100.77"}
    for peer in ("203.0.113.1", "203.0.113.2", "203.0.113.3"):
        sentinel.guard(ANONYMOUS, request_view(peer=peer, headers=same_claim))
    assert len([key for key in keys(client) if ":n:" in key]) == 3


def test_raw_identities_never_appear_in_keys_or_responses(
    sentinel: Sentinel, client: redis.Redis
) -> None:
    tenant = "alice@example.com"
    peer = "2001:db8:abcd:12::99"
    seen: list[str] = []
    for _ in range(5):
        outcome = sentinel.guard(
            TENANT, request_view(headers={"Authorization": bearer(hs256(tenant))})
        )
        seen += [value for _, value in outcome.headers] + [outcome.body.decode()]
        anonymous = sentinel.guard(ANONYMOUS, request_view(peer=peer))
        seen += [value for _, value in anonymous.headers] + [anonymous.body.decode()]
        if anonymous.cookie is not None:
            device_id = anonymous.cookie.value.split(".")[1]
            assert all(device_id not in key for key in keys(client))
    stored = " ".join(keys(client))
    for raw in (tenant, "alice", peer, "2001:db8:abcd:12", "ipv6:"):
        assert raw not in stored
        assert all(raw not in text for text in seen)


def test_dropping_the_cookie_does_not_escape_the_network_bucket(
    sentinel: Sentinel, client: redis.Redis
) -> None:
    # Every request without a cookie is charged to the network's new devices (and the
    # device minted for it, never seen again): one device's burst, then 429.
    statuses = [sentinel.guard(ANONYMOUS, request_view(peer="192.0.2.1")).status for _ in range(6)]
    assert statuses == [200] * 4 + [429] * 2
    # The new devices' bucket and the four minted devices'; denials wrote none.
    assert len([key for key in keys(client) if ":d:" in key]) == 5


def test_rotating_addresses_inside_a_64_does_not_escape(
    sentinel: Sentinel, client: redis.Redis
) -> None:
    statuses = [
        sentinel.guard(ANONYMOUS, request_view(peer=f"2001:db8:5:5:{n:x}::{n + 1:x}")).status
        for n in range(6)
    ]
    assert statuses == [200] * 4 + [429] * 2


def test_client_headers_never_change_what_a_request_costs(
    sentinel: Sentinel, client: redis.Redis
) -> None:
    greedy = {"X-Sentinel-Cost": "0", "X-RateLimit-Cost": "0", "Cost": "-5"}
    outcomes = tenant_requests(sentinel, [greedy] * 3)
    assert trace(outcomes) == [(200, 3), (200, 2), (200, 1)]


def test_an_oversized_authorization_header_is_a_plain_401(
    sentinel: Sentinel, client: redis.Redis
) -> None:
    for value in ("Bearer " + "a" * 1_000_000, "Bearer " + "a." * 500_000 + "a"):
        outcome = sentinel.guard(TENANT, request_view(headers={"Authorization": value}))
        assert outcome.status == 401
    assert keys(client) == []
