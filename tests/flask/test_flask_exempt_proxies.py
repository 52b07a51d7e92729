"""Flask's test client with ``REMOTE_ADDR`` chosen per request: what exemptions and
``trusted_proxies`` do to a WSGI app's requests, on the store under test."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask

from tests.flask.apps import MakeApp
from tests.support.adapter_config import bearer, five_a_minute_login
from tests.support.exemptions import (
    EXEMPT_PROXY,
    EXEMPT_TENANT,
    PROXY,
    UNREADABLE_FORWARDING,
    UNTRUSTED,
    exemptions_config,
    store_untouched,
    valkey,
)
from tests.support.jwks_server import NEW_KEY, OLD_KEY, JwksServer, rotation_jwt, signed


def post(app: Flask, path: str, peer: str = UNTRUSTED, **headers: str) -> Any:
    """``POST path`` from ``peer`` on a new client: no cookie kept between requests."""
    client = app.test_client()
    return client.post(path, environ_base={"REMOTE_ADDR": peer}, headers=headers)


def assert_exempt(response: Any) -> None:
    """The view ran (an exempt request is let through, not answered by Sentinel), and
    the response says nothing about limits."""
    assert response.status_code == 200
    assert response.get_json() == {"view": "ingest"}
    assert "RateLimit" not in response.headers
    assert "RateLimit-Policy" not in response.headers


def test_an_exempt_tenant_never_reaches_the_store(make_app: MakeApp, redis_url: str) -> None:
    app = make_app(exemptions_config(redis_url))
    with store_untouched(redis_url):  # six: twice the policy's limit of 3
        exempt = [post(app, "/v1/ingest", Authorization=bearer(EXEMPT_TENANT)) for _ in range(6)]
    limited = [post(app, "/v1/ingest", Authorization=bearer("acme")).status_code for _ in range(4)]

    for response in exempt:
        assert_exempt(response)
    assert limited == [200, 200, 200, 429]


def test_an_exempt_network_needs_no_token_and_never_reaches_the_store(
    make_app: MakeApp, redis_url: str
) -> None:
    app = make_app(exemptions_config(redis_url))
    with store_untouched(redis_url):
        exempt = [post(app, "/v1/ingest", peer="198.51.100.20") for _ in range(5)]

    for response in exempt:
        assert_exempt(response)
    assert post(app, "/v1/ingest").status_code == 401


@pytest.mark.security
def test_a_forwarded_exempt_network_counts_only_through_the_trusted_proxy(
    make_app: MakeApp, redis_url: str
) -> None:
    app = make_app(exemptions_config(redis_url))
    forwarded = {"X-Forwarded-For": "198.51.100.7"}
    assert_exempt(post(app, "/v1/ingest", peer=PROXY, **forwarded))
    assert post(app, "/v1/ingest", peer=UNTRUSTED, **forwarded).status_code == 401


@pytest.mark.security
@pytest.mark.parametrize("unreadable", UNREADABLE_FORWARDING)
def test_an_unreadable_forwarding_header_never_inherits_an_exempt_proxys_exemption(
    make_app: MakeApp, redis_url: str, unreadable: str
) -> None:
    app = make_app(exemptions_config(redis_url, exempt=EXEMPT_PROXY))
    honest = {"Authorization": bearer("acme"), "X-Forwarded-For": "203.0.113.7"}
    garbled = {"Authorization": bearer("mallory"), **UNREADABLE_FORWARDING[unreadable]}
    honest_statuses = [post(app, "/v1/ingest", PROXY, **honest).status_code for _ in range(4)]
    garbled_statuses = [post(app, "/v1/ingest", PROXY, **garbled).status_code for _ in range(8)]
    assert honest_statuses == [200, 200, 200, 429]
    assert garbled_statuses == [200, 200, 200] + [429] * 5  # limited, not 8 of 8


def logins(app: Flask, peer: str, forwarded_for: list[str]) -> list[int]:
    """One login per forwarded address, each from a new device."""
    return [
        post(app, "/auth/login", peer=peer, **{"X-Forwarded-For": address}).status_code
        for address in forwarded_for
    ]


@pytest.mark.security
def test_a_client_that_drops_its_cookies_gets_one_devices_limit_not_the_networks(
    make_app: MakeApp, redis_url: str
) -> None:
    """Issue 26: every cookie-less request was a fresh device, so only the network bucket
    (ten devices' worth) bound it: 50 of a "5/minute" login. They share the network's
    new devices bucket, sized like one device's."""
    app = make_app(five_a_minute_login(exemptions_config(redis_url)))
    statuses = [post(app, "/auth/login").status_code for _ in range(12)]  # a new client each
    assert statuses == [200] * 5 + [429] * 7


@pytest.mark.security
def test_a_spoofed_forwarded_for_is_ignored_from_an_untrusted_peer(
    make_app: MakeApp, redis_url: str
) -> None:
    app = make_app(exemptions_config(redis_url))
    statuses = logins(app, UNTRUSTED, ["192.0.2.101", "192.0.2.102", "192.0.2.103"])
    # The network bucket (2/minute) is the peer's, whatever the header says.
    assert statuses == [200, 200, 429]


def test_a_forwarded_for_is_honoured_from_a_trusted_proxy(
    make_app: MakeApp, redis_url: str
) -> None:
    app = make_app(exemptions_config(redis_url))
    distinct = logins(app, PROXY, ["192.0.2.101", "192.0.2.102", "192.0.2.103"])
    # The client is the rightmost untrusted hop: what it wrote further left is ignored.
    one_client = logins(
        app, PROXY, ["1.1.1.1, 192.0.2.200", "2.2.2.2, 192.0.2.200", "3.3.3.3,192.0.2.200"]
    )
    assert distinct == [200, 200, 200]
    assert one_client == [200, 200, 429]


def test_a_forwarded_header_is_honoured_from_a_trusted_proxy(
    make_app: MakeApp, redis_url: str
) -> None:
    app = make_app(exemptions_config(redis_url))
    statuses = [
        post(app, "/auth/login", peer=PROXY, Forwarded=value).status_code
        for value in (
            'for="[2001:db8:cafe::17]:4711"',
            "for=192.0.2.43;proto=https, for=192.0.2.60",
            'For="[2001:db8:cafe::99]";by=192.0.2.10',  # the same /64 as the first
            'for="[2001:db8:cafe::17]"',
        )
    ]
    assert statuses == [200, 200, 200, 429]


def test_a_jwks_key_rotation_is_picked_up_without_a_restart(
    make_app: MakeApp, redis_url: str
) -> None:
    with JwksServer() as jwks:
        jwks.publish({"old": OLD_KEY})
        app = make_app(exemptions_config(redis_url, jwt=rotation_jwt(jwks.url)))
        before = post(app, "/v1/ingest", Authorization=signed(OLD_KEY, "old"))
        jwks.publish({"old": OLD_KEY, "new": NEW_KEY})
        after = post(app, "/v1/ingest", Authorization=signed(NEW_KEY, "new"))
        jwks.fail(503)  # the provider goes down: a key it never published is a 401
        stranger = post(app, "/v1/ingest", Authorization=signed(NEW_KEY, "x"))
    assert (before.status_code, after.status_code, stranger.status_code) == (200, 200, 401)


def test_a_valkey_url_names_the_same_store(make_app: MakeApp, redis_url: str) -> None:
    app = make_app(exemptions_config(valkey(redis_url)))
    statuses = [post(app, "/v1/ingest", Authorization=bearer("acme")).status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
