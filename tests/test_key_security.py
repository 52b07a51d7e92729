"""Bucket keys reveal no identity and stay small (SPEC §3, issue 16).

Anonymous keys are keyed with a secret derived from ``anonymous.cookie_secret``: a test
reads every key a real server holds after requests from IPv4 and IPv6 clients and finds
no SHA-256 of any form of their addresses, in any encoding a key could carry. Tenant
keys use 128 bits of SHA-256 in 22 characters, so one bucket's ``MEMORY USAGE`` stays
within 100 bytes (token bucket) and 120 bytes (sliding window) for a 4-character id.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress

import pytest
import redis
from prometheus_client import CollectorRegistry

from sentinel_core import Sentinel
from sentinel_core.http._outcome import RequestView
from sentinel_core.identity._keys import (
    AnonymousIdentity,
    TenantIdentity,
    anonymous_key_secret,
    compact_hash,
    keyed_hash,
)
from tests.conftest import make_config
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.security

SECRET = "a-cookie-secret-of-at-least-32-bytes!"
PEERS = ["192.0.2.7", "198.51.100.23", "2001:db8:1234:5678:abcd::1", "::ffff:203.0.113.9"]


def address_forms(peer: str) -> set[str]:
    """Every spelling of ``peer`` a key could have hashed: the address, its network
    (IPv4 itself, IPv6 /64), with and without the ``ipv4:``/``ipv6:`` prefixes."""
    address = ipaddress.ip_address(peer)
    forms = {peer, str(address), address.exploded}
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            forms.add(str(address.ipv4_mapped))
        network = ipaddress.IPv6Network((address, 64), strict=False)
        forms |= {str(network), str(network.network_address), network.exploded}
        forms |= {f"{network.network_address!s}/64"}
    return forms | {f"{kind}:{form}" for form in set(forms) for kind in ("ipv4", "ipv6", "ip")}


def hash_spellings(text: str) -> set[str]:
    """SHA-256 of ``text`` as a key could carry it: hex, base64, base64url, base32 and
    their truncations to 128 bits (the compact encodings), upper or lower case."""
    digest = hashlib.sha256(text.encode()).digest()
    spellings = set()
    for raw in (digest, digest[:16]):
        spellings |= {
            raw.hex(),
            base64.b64encode(raw).decode().rstrip("="),
            base64.urlsafe_b64encode(raw).decode().rstrip("="),
            base64.b32encode(raw).decode().rstrip("="),
        }
    return spellings | {spelling.lower() for spelling in spellings}


@pytest.fixture
def client(flushed_client: redis.Redis) -> redis.Redis:
    return flushed_client


def test_no_anonymous_key_holds_an_unkeyed_hash_of_the_client_address(
    redis_server: RedisServer, client: redis.Redis
) -> None:
    config = make_config(
        redis_server.url,
        login={
            "algorithm": "token_bucket",
            "rate": "5/minute",
            "fail_mode": "closed",
            "identity": "anonymous",
        },
    )
    config["anonymous"] = {"cookie_secret": SECRET}
    sentinel = Sentinel(config, registry=CollectorRegistry(), entry_points=False)
    try:
        for peer in PEERS:
            request = RequestView("POST", "/login", {}, {}, peer)
            assert sentinel.guard("login", request).allowed
    finally:
        sentinel.close()
    keys = [key.decode() for key in client.scan_iter("sentinel:*")]
    # Per client: its network's new devices, the device minted for it, its network.
    assert len(keys) == 3 * len(PEERS)
    assert all(key.startswith("sentinel:v2:{") for key in keys)
    for peer in PEERS:
        for form in address_forms(peer):
            for spelling in hash_spellings(form):
                assert not any(spelling in key for key in keys), (peer, form)
                # not even the first 16 characters of one
                assert not any(spelling[:16] in key for key in keys), (peer, form)


def test_anonymous_hashes_depend_on_the_secret_and_keep_one_slot() -> None:
    policy = Sentinel(
        {
            **make_config(
                "memory://",
                login={"algorithm": "token_bucket", "rate": "5/minute", "fail_mode": "closed"},
            )
        },
        registry=CollectorRegistry(),
        entry_points=False,
    ).policy("login")
    one = AnonymousIdentity("device", "ipv4:192.0.2.7", anonymous_key_secret(SECRET))
    other = AnonymousIdentity("device", "ipv4:192.0.2.7", anonymous_key_secret(SECRET + "2"))
    assert set(one.bucket_keys(policy)).isdisjoint(other.bucket_keys(policy))
    assert one.hash != other.hash
    device, network = one.bucket_keys(policy)
    tag = network.split("{", 1)[1].split("}", 1)[0]
    assert device.split("{", 1)[1].split("}", 1)[0] == tag  # one Cluster slot
    assert "secret" not in repr(one)
    # a rotation keeps the buckets while the old secret is still accepted
    assert anonymous_key_secret(SECRET + "2", (SECRET,)) == anonymous_key_secret(SECRET)
    # the derived secret is neither the cookie secret nor its plain hash
    derived = anonymous_key_secret(SECRET)
    assert derived not in (SECRET.encode(), hashlib.sha256(SECRET.encode()).digest())


def test_a_tenant_key_carries_128_bits_of_sha256_in_22_characters() -> None:
    identity = TenantIdentity("tenant-a")
    digest = hashlib.sha256(b"tenant-a").digest()[:16]
    assert identity.hash == compact_hash("tenant-a")
    assert identity.hash == base64.urlsafe_b64encode(digest).decode().rstrip("=")
    assert len(identity.hash) == 22


@pytest.mark.parametrize(("algorithm", "most"), [("token_bucket", 100), ("sliding_window", 120)])
def test_memory_usage_of_one_bucket(
    redis_server: RedisServer, client: redis.Redis, algorithm: str, most: int
) -> None:
    config = make_config(
        redis_server.url,
        ping={"algorithm": algorithm, "rate": "100000/hour", "fail_mode": "closed"},
    )
    sentinel = Sentinel(config, registry=CollectorRegistry(), entry_points=False)
    try:
        for _ in range(3):
            assert sentinel.evaluate("ping", "tenant-with-a-long-name@example.com").allowed
        (key,) = TenantIdentity("tenant-with-a-long-name@example.com").bucket_keys(
            sentinel.policy("ping")
        )
    finally:
        sentinel.close()
    assert len(key) <= 44
    usage = client.memory_usage(key)
    assert usage is not None
    assert usage <= most, f"{algorithm}: {usage} B for {key!r} = {client.get(key)!r}"


def test_a_keyed_hash_is_the_hmac_sha256_of_the_value_under_its_own_secret() -> None:
    """Hashes under two secrets, interleaved (each secret's keyed state is kept and
    copied): each is HMAC-SHA256 under its own secret, 128 bits in base64url."""
    secrets = [anonymous_key_secret(SECRET), anonymous_key_secret("another-" + SECRET)]
    values = ["192.0.2.7", "device-1|192.0.2.7", "2001:db8:1234:5678::/64"]

    for value in values:
        for secret in secrets:
            expected = hmac.new(secret, value.encode(), hashlib.sha256).digest()[:16]
            assert keyed_hash(secret, value) == base64.urlsafe_b64encode(expected).decode()[:22]
    assert keyed_hash(secrets[0], values[0]) != keyed_hash(secrets[1], values[0])
