"""Exemptions and trusted proxies through Django (sync views with ``Client``, async
views with ``AsyncClient``), on the store under test: exempt tenants and networks never
reach it, and a forwarded client address is believed only from a trusted proxy."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django_harness import Configure, Http

from tests.support.adapter_config import bearer, five_a_minute_login
from tests.support.exemptions import (
    EXEMPT_NETWORK,
    EXEMPT_PROXY,
    EXEMPT_TENANT,
    PROXY,
    UNREADABLE_FORWARDING,
    UNTRUSTED,
    store_untouched,
    valkey,
)
from tests.support.jwks_server import NEW_KEY, OLD_KEY, JwksServer, rotation_jwt, signed


def configure_exemptions(configure: Configure) -> dict[str, Any]:
    return configure(
        exempt={"tenants": [EXEMPT_TENANT], "networks": [EXEMPT_NETWORK]},
        trusted_proxies=[f"{PROXY}/32"],
    )


def warm_up(http: Http) -> None:
    """One limited request: Django builds Sentinel, connects and checks Redis lazily."""
    assert http.post(f"{http.prefix}/ingest", Authorization=bearer("warm-up")).status_code == 200


def assert_exempt(response: Any) -> None:
    """The view ran (an exempt request is let through, not answered by Sentinel), and
    the response says nothing about limits."""
    assert response.status_code == 200
    assert "view" in json.loads(response.content)
    assert not response.has_header("RateLimit")
    assert not response.has_header("RateLimit-Policy")


def assert_exempt_requests(http: Http, redis_url: str, count: int, **options: Any) -> None:
    """Send ``count`` requests that must be exempt, and cost the store nothing."""
    warm_up(http)
    with store_untouched(redis_url):
        responses = [http.post(f"{http.prefix}/ingest", **options) for _ in range(count)]
    for response in responses:
        assert_exempt(response)


def test_an_exempt_tenant_never_reaches_the_store(
    http: Http, configure: Configure, redis_url: str
) -> None:
    configure_exemptions(configure)
    assert_exempt_requests(http, redis_url, 6, Authorization=bearer(EXEMPT_TENANT))
    ingest = f"{http.prefix}/ingest"
    limited = [http.post(ingest, Authorization=bearer("acme")).status_code for _ in range(4)]
    assert limited == [200, 200, 200, 429]


def test_an_exempt_network_needs_no_token_and_never_reaches_the_store(
    http: Http, configure: Configure, redis_url: str
) -> None:
    configure_exemptions(configure)
    assert_exempt_requests(http, redis_url, 5, peer="198.51.100.20")
    assert http.post(f"{http.prefix}/ingest", peer=UNTRUSTED).status_code == 401


@pytest.mark.security
def test_a_forwarded_exempt_network_counts_only_through_the_trusted_proxy(
    http: Http, configure: Configure
) -> None:
    configure_exemptions(configure)
    ingest = f"{http.prefix}/ingest"
    forwarded = {"X-Forwarded-For": "198.51.100.7"}
    assert_exempt(http.post(ingest, peer=PROXY, **forwarded))
    assert http.post(ingest, peer=UNTRUSTED, **forwarded).status_code == 401


@pytest.mark.security
@pytest.mark.parametrize("unreadable", UNREADABLE_FORWARDING)
def test_an_unreadable_forwarding_header_never_inherits_an_exempt_proxys_exemption(
    http: Http, configure: Configure, unreadable: str
) -> None:
    configure(exempt=EXEMPT_PROXY, trusted_proxies=[f"{PROXY}/32"])
    ingest = f"{http.prefix}/ingest"
    honest = {"Authorization": bearer("acme"), "X-Forwarded-For": "203.0.113.7"}
    garbled = {"Authorization": bearer("mallory"), **UNREADABLE_FORWARDING[unreadable]}
    honest_statuses = [http.post(ingest, peer=PROXY, **honest).status_code for _ in range(4)]
    garbled_statuses = [http.post(ingest, peer=PROXY, **garbled).status_code for _ in range(8)]
    assert honest_statuses == [200, 200, 200, 429]
    assert garbled_statuses == [200, 200, 200] + [429] * 5  # limited, not 8 of 8


def logins(http: Http, peer: str, forwarded_for: list[str]) -> list[int]:
    """One login per forwarded address, each from a new device (cookies dropped)."""
    statuses = []
    for address in forwarded_for:
        http.cookies.clear()
        response = http.post(f"{http.prefix}/login", peer=peer, **{"X-Forwarded-For": address})
        statuses.append(response.status_code)
    return statuses


@pytest.mark.security
def test_a_client_that_drops_its_cookies_gets_one_devices_limit_not_the_networks(
    http: Http, configure: Configure, redis_url: str
) -> None:
    """Issue 26: every cookie-less request was a fresh device, so only the network bucket
    (ten devices' worth) bound it: 50 of a "5/minute" login. They share the network's
    new devices bucket, sized like one device's."""
    config = five_a_minute_login(configure())
    configure(policies=config["policies"])
    statuses = []
    for _ in range(12):
        http.cookies.clear()
        statuses.append(http.post(f"{http.prefix}/login", peer=UNTRUSTED).status_code)
    assert statuses == [200] * 5 + [429] * 7


@pytest.mark.security
def test_a_spoofed_forwarded_for_is_ignored_from_an_untrusted_peer(
    http: Http, configure: Configure
) -> None:
    configure_exemptions(configure)
    statuses = logins(http, UNTRUSTED, ["192.0.2.101", "192.0.2.102", "192.0.2.103"])
    # The network bucket (2/minute) is the peer's, whatever the header says.
    assert statuses == [200, 200, 429]


def test_a_forwarded_for_is_honoured_from_a_trusted_proxy(http: Http, configure: Configure) -> None:
    configure_exemptions(configure)
    distinct = logins(http, PROXY, ["192.0.2.101", "192.0.2.102", "192.0.2.103"])
    # The client is the rightmost untrusted hop: what it wrote further left is ignored.
    one_client = logins(
        http, PROXY, ["1.1.1.1, 192.0.2.200", "2.2.2.2, 192.0.2.200", "3.3.3.3,192.0.2.200"]
    )
    assert distinct == [200, 200, 200]
    assert one_client == [200, 200, 429]


def test_a_jwks_key_rotation_is_picked_up_without_a_restart(
    http: Http, configure: Configure
) -> None:
    ingest = f"{http.prefix}/ingest"
    with JwksServer() as jwks:
        jwks.publish({"old": OLD_KEY})
        configure(jwt=rotation_jwt(jwks.url))
        before = http.post(ingest, Authorization=signed(OLD_KEY, "old"))
        jwks.publish({"old": OLD_KEY, "new": NEW_KEY})
        after = http.post(ingest, Authorization=signed(NEW_KEY, "new"))
        jwks.fail(503)  # the provider goes down: a key it never published is a 401
        stranger = http.post(ingest, Authorization=signed(NEW_KEY, "x"))
    assert (before.status_code, after.status_code, stranger.status_code) == (200, 200, 401)


def test_a_valkey_url_names_the_same_store(
    http: Http, configure: Configure, redis_url: str
) -> None:
    configure(redis_url=valkey(redis_url))
    ingest = f"{http.prefix}/ingest"
    statuses = [http.post(ingest, Authorization=bearer("acme")).status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
