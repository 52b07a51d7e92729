"""Anonymous identity (SPEC §4): signed device cookie AND client network, one script call.

The cookie half is pure (mint, verify, rotation, forgeries, fuzzing). The network half
is pure too (IPv4, IPv6 /64, IPv4-mapped, garbage). The AND is checked on the private
Redis: the bucket that did not deny keeps its stored value byte for byte, and each
decision costs exactly one script execution and one command.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from sentinel_core import Rate, Sentinel, load_config
from sentinel_core.adapter import Outcome
from sentinel_core.identity._anonymous import DeviceCookies, client_network
from sentinel_core.identity._keys import anonymous_key_secret, keyed_hash
from tests.support.http import make_sentinel, request_view
from tests.support.redis_server import RedisServer
from tests.support.tokens import COOKIE_SECRET, OLD_COOKIE_SECRET

ENDPOINT = "auth.login"
COOKIE = "sentinel_device"


ALGORITHMS = ["token_bucket", "sliding_window"]


def config(
    redis_url: str = "memory://",
    *,
    burst: int = 2,
    algorithm: str = "token_bucket",
    network: int | None = None,
    **anonymous: Any,
) -> dict[str, Any]:
    """An anonymous policy admitting ``burst`` requests an hour per device and
    ``network`` (default: the same) per network, on either algorithm."""
    network = burst if network is None else network
    policy: dict[str, Any] = {"algorithm": algorithm, "identity": "anonymous"}
    if algorithm == "token_bucket":
        policy |= {
            "rate": "1/hour",
            "burst": burst,
            "network_rate": "1/hour",
            "network_burst": network,
        }
    else:
        policy |= {"rate": f"{burst}/hour", "network_rate": f"{network}/hour"}
    return {
        "redis_url": redis_url,
        "anonymous": {"cookie_secret": COOKIE_SECRET, **anonymous},
        "policies": {ENDPOINT: {**policy, "fail_mode": "closed"}},
    }


def cookies(**anonymous: Any) -> DeviceCookies:
    loaded = load_config(config(**anonymous)).anonymous
    assert loaded is not None
    return DeviceCookies(loaded)


# --- the device cookie ------------------------------------------------------------------


def test_a_minted_cookie_verifies_to_its_device_id() -> None:
    jar = cookies()
    device_id, value = jar.mint()
    assert jar.verify(value) == device_id
    version, minted_id, signature = value.split(".")
    assert (version, minted_id, len(device_id), len(signature)) == ("v1", device_id, 22, 43)
    assert jar.mint()[0] != device_id


def test_forged_cookies_are_treated_as_absent() -> None:
    jar = cookies()
    device_id, value = jar.mint()
    _, _, signature = value.split(".")
    other_id, other_value = jar.mint()
    forged = [
        f"v1.{other_id}.{signature}",  # someone else's id under my signature
        f"v1.{device_id}.{'A' * 43}",  # a made-up signature of the right shape
        f"v2.{device_id}.{signature}",  # an unknown version
        value[:-1],  # truncated
        value[:30],
        value + "A",  # extended
        value.replace(".", "", 1),
        other_value.upper(),
        f"{value}; {COOKIE}={other_value}",
        "",
        "v1..",
    ]
    for candidate in forged:
        assert jar.verify(candidate) is None, candidate
    assert jar.verify(None) is None


def test_a_cookie_signed_by_another_server_is_absent() -> None:
    _, foreign = cookies(cookie_secret=OLD_COOKIE_SECRET).mint()
    assert cookies().verify(foreign) is None


def test_cookies_signed_with_a_previous_secret_survive_the_rotation() -> None:
    device_id, old_value = cookies(cookie_secret=OLD_COOKIE_SECRET).mint()
    rotated = cookies(previous_cookie_secrets=[OLD_COOKIE_SECRET])
    assert rotated.verify(old_value) == device_id
    # New cookies are signed with the current secret, which the old server cannot check.
    _, new_value = rotated.mint()
    assert cookies(cookie_secret=OLD_COOKIE_SECRET).verify(new_value) is None
    assert rotated.verify(new_value) is not None


_cookie_values = (
    st.text(max_size=120)
    | st.binary(max_size=120).map(lambda raw: raw.decode("latin-1"))
    | st.builds(
        lambda a, b: f"v1.{a}.{b}",
        st.text(min_size=22, max_size=22),
        st.text(min_size=43, max_size=43),
    )
    | st.builds(
        lambda a, b: f"v1.{a}.{b}",
        st.from_regex(r"[A-Za-z0-9_-]{22}", fullmatch=True),
        st.from_regex(r"[A-Za-z0-9_-]{43}", fullmatch=True),
    )
)


@settings(max_examples=300, deadline=None)
@given(value=_cookie_values)
def test_random_cookie_values_never_raise_and_never_verify(value: str) -> None:
    assert _JAR.verify(value) is None


_JAR = cookies()


# --- the client network ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("peer", "network"),
    [
        ("203.0.113.7", "ipv4:203.0.113.7"),
        (" 203.0.113.7 ", "ipv4:203.0.113.7"),
        ("::ffff:203.0.113.7", "ipv4:203.0.113.7"),
        ("2001:db8:1:2:3:4:5:6", "ipv6:2001:db8:1:2::/64"),
        ("2001:0db8:0001:0002:ffff:ffff:ffff:ffff", "ipv6:2001:db8:1:2::/64"),
        ("[2001:db8:1:2::9]", "ipv6:2001:db8:1:2::/64"),
        ("fe80::1%eth0", "ipv6:fe80::/64"),
        ("::1", "ipv6:::/64"),
        (None, "unknown"),
        ("", "unknown"),
        ("unix:/run/app.sock", "unknown"),
        ("203.0.113.7:443", "unknown"),
        ("999.0.0.1", "unknown"),
        ("localhost", "unknown"),
        ("1" * 1000, "unknown"),
    ],
)
def test_client_network_of_a_peer(peer: str | None, network: str) -> None:
    assert client_network(peer) == network


def test_ipv6_addresses_share_a_bucket_per_64_and_ipv4_per_address() -> None:
    same_64 = {client_network(f"2001:db8:aa:bb:{n:x}::{n:x}") for n in range(1, 200)}
    assert len(same_64) == 1
    neighbours = {client_network(f"2001:db8:aa:{n:x}::1") for n in range(1, 200)}
    assert len(neighbours) == 199
    ipv4 = {client_network(f"198.51.100.{n}") for n in range(1, 200)}
    assert len(ipv4) == 199


@settings(max_examples=300, deadline=None)
@given(peer=st.text(max_size=80) | st.binary(max_size=40).map(lambda raw: raw.decode("latin-1")))
def test_random_peers_never_raise(peer: str) -> None:
    network = client_network(peer)
    assert network == "unknown" or network.startswith(("ipv4:", "ipv6:"))


# --- through Sentinel.guard, on the private Redis --------------------------------------


@pytest.fixture
def client(redis_url: str, redis_server: RedisServer) -> Iterator[redis.Redis]:
    connection = redis_server.client()
    yield connection
    connection.close()


@pytest.fixture(params=ALGORITHMS)
def sentinel(redis_url: str, request: pytest.FixtureRequest) -> Iterator[Sentinel]:
    instance = make_sentinel(config(redis_url, algorithm=request.param))
    instance.startup()  # loads the scripts: every later decision is one EVALSHA
    yield instance
    instance.close()


def login(sentinel: Sentinel, peer: str, cookie: str | None = None, **headers: str) -> Outcome:
    jar = {COOKIE: cookie} if cookie is not None else {}
    return sentinel.guard(ENDPOINT, request_view(peer=peer, cookies=jar, headers=headers))


def keys_of(client: redis.Redis, kind: str) -> list[str]:
    """The device (``d``) or network (``n``) bucket keys."""
    return sorted(key.decode() for key in client.keys(f"sentinel:v2:*:{kind}:*"))


def device_key(client: redis.Redis, device_id: str) -> str:
    digest = keyed_hash(anonymous_key_secret(COOKIE_SECRET), device_id)
    (key,) = [key for key in keys_of(client, "d") if f":d:{digest}:" in key]
    return key


def test_ipv6_clients_of_one_64_share_the_network_bucket(
    sentinel: Sentinel, client: redis.Redis
) -> None:
    first = login(sentinel, "2001:db8:7:7::1")
    second = login(sentinel, "2001:db8:7:7:ffff:ffff:ffff:fffe")
    assert (first.allowed, second.allowed) == (True, True)
    assert len(keys_of(client, "n")) == 1
    # The /64 has spent its burst of 2, whichever address and device asks next.
    third = login(sentinel, "2001:db8:7:7:1234::5")
    assert (third.status, third.cookie) == (429, None)
    other_64 = login(sentinel, "2001:db8:7:8::1")
    assert other_64.allowed
    assert len(keys_of(client, "n")) == 2


def test_ipv4_clients_are_bucketed_per_address(sentinel: Sentinel, client: redis.Redis) -> None:
    for _ in range(2):
        assert login(sentinel, "198.51.100.1").allowed
    assert login(sentinel, "198.51.100.1").status == 429
    assert login(sentinel, "198.51.100.2").allowed
    assert login(sentinel, "::ffff:198.51.100.1").status == 429


def test_when_the_network_denies_the_device_bucket_is_untouched(
    sentinel: Sentinel, client: redis.Redis
) -> None:
    peer = "203.0.113.50"
    first = login(sentinel, peer)
    assert first.allowed
    assert first.cookie is not None
    device_id = first.cookie.value.split(".")[1]
    assert login(sentinel, peer).allowed  # another device spends the network's last token
    key = device_key(client, device_id)
    device_before, ip_before = client.get(key), client.get(keys_of(client, "n")[0])

    denied = login(sentinel, peer, first.cookie.value)

    assert denied.status == 429
    assert denied.decision is not None
    assert denied.decision.remaining == 0
    assert client.get(key) == device_before  # the device still had a token: not spent
    assert client.get(keys_of(client, "n")[0]) == ip_before


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_when_the_device_denies_the_network_bucket_is_untouched(
    redis_url: str, client: redis.Redis, algorithm: str
) -> None:
    sentinel = make_sentinel(config(redis_url, algorithm=algorithm, network=10))
    try:
        peer = "203.0.113.60"
        first = login(sentinel, peer)
        assert first.cookie is not None
        value = first.cookie.value
        assert login(sentinel, peer, value).allowed
        (ip_key,) = keys_of(client, "n")
        device_before = client.get(device_key(client, value.split(".")[1]))
        ip_before = client.get(ip_key)

        denied = login(sentinel, peer, value)  # the device's 2 are spent; the network has 8

        assert (denied.status, denied.cookie) == (429, None)
        assert client.get(ip_key) == ip_before  # the network's token was not spent
        assert client.get(device_key(client, value.split(".")[1])) == device_before
    finally:
        sentinel.close()


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_devices_behind_one_nat_each_get_their_own_burst_until_the_network_is_spent(
    redis_url: str, algorithm: str
) -> None:
    sentinel = make_sentinel(config(redis_url, algorithm=algorithm, burst=3, network=7))
    try:
        nat = "198.51.100.77"
        devices = [login(sentinel, nat).cookie for _ in range(3)]  # three devices, one each
        assert all(cookie is not None for cookie in devices)
        values = [cookie.value for cookie in devices if cookie is not None]
        assert [login(sentinel, nat, values[0]).status for _ in range(3)] == [200, 200, 429]
        assert login(sentinel, nat, values[1]).allowed  # device 1 is not spent: 6 of 7
        assert login(sentinel, nat, values[1]).allowed  # 7 of 7
        assert login(sentinel, nat, values[2]).status == 429  # now the network is spent
    finally:
        sentinel.close()


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_requests_without_a_cookie_share_one_new_devices_bucket_per_network(
    redis_url: str, algorithm: str
) -> None:
    """Issue 26: each cookie-less request was a fresh device, so only the network bucket
    (ten devices' worth) bound a client that drops its cookies: 50 of a "5/minute"
    login. They share one bucket per network, sized like a device's."""
    sentinel = make_sentinel(config(redis_url, algorithm=algorithm, burst=5, network=50))
    try:
        outcomes = [login(sentinel, "203.0.113.80") for _ in range(50)]
        assert [outcome.status for outcome in outcomes] == [200] * 5 + [429] * 45
        # The new devices' bucket leads the call: the rest of the flood is answered here.
        assert all(outcome.decision and outcome.decision.local for outcome in outcomes[6:])
        assert login(sentinel, "203.0.113.81").allowed  # another network's new devices
        # A device that keeps its cookie has its own bucket, first request included.
        kept = login(sentinel, "203.0.113.82").cookie
        assert kept is not None
        assert [login(sentinel, "203.0.113.82", kept.value).status for _ in range(5)] == (
            [200] * 4 + [429]
        )
    finally:
        sentinel.close()


def test_the_network_bucket_defaults_to_ten_devices() -> None:
    loaded = load_config(
        {
            "redis_url": "memory://",
            "anonymous": {"cookie_secret": COOKIE_SECRET},
            "policies": {
                ENDPOINT: {
                    "algorithm": "token_bucket",
                    "rate": "5/minute",
                    "burst": 3,
                    "identity": "anonymous",
                    "fail_mode": "closed",
                }
            },
        }
    )
    policy = loaded.policies[ENDPOINT]
    assert (policy.network_rate, policy.network_burst) == (Rate(50, 60), 30)


def test_each_anonymous_decision_is_one_script_call_reading_both_buckets(
    sentinel: Sentinel, client: redis.Redis
) -> None:
    def calls() -> dict[str, int]:
        stats = client.info("commandstats")
        return {name.removeprefix("cmdstat_"): int(stat["calls"]) for name, stat in stats.items()}

    before = calls()
    outcomes = [login(sentinel, f"192.0.2.{n % 3}") for n in range(9)]
    after = calls()
    delta = {name: after[name] - before.get(name, 0) for name in after}
    changed = {name: count for name, count in delta.items() if count and name != "info"}
    assert [o.status for o in outcomes] == [200] * 6 + [429] * 3
    # One EVALSHA per decision; inside it one TIME, a GET of each of its buckets (no
    # cookie: the network's new devices, the device minted for it, the network), and a
    # SET of each only when all admitted (denials write nothing).
    assert changed == {"evalsha": 9, "time": 9, "get": 27, "set": 18}


def test_an_unknown_or_forged_cookie_gets_a_new_device_on_allowed_responses_only(
    sentinel: Sentinel, client: redis.Redis
) -> None:
    _, foreign = cookies(cookie_secret=OLD_COOKIE_SECRET).mint()
    outcome = login(sentinel, "192.0.2.200", foreign)
    assert outcome.allowed
    assert outcome.cookie is not None
    assert outcome.cookie.value != foreign
    assert cookies().verify(outcome.cookie.value) is not None
    # The genuine cookie is kept: no new one is set.
    assert login(sentinel, "192.0.2.200", outcome.cookie.value).cookie is None
    # Denied: whatever the cookie, nothing is set.
    assert login(sentinel, "192.0.2.200", foreign).cookie is None


def test_a_cookie_from_before_the_rotation_keeps_its_bucket(redis_url: str) -> None:
    before = make_sentinel(config(redis_url, cookie_secret=OLD_COOKIE_SECRET))
    after = make_sentinel(config(redis_url, previous_cookie_secrets=[OLD_COOKIE_SECRET]))
    try:
        minted = login(before, "192.0.2.9").cookie
        assert minted is not None
        outcome = login(after, "192.0.2.9", minted.value)
        assert (outcome.allowed, outcome.cookie) == (True, None)
        assert outcome.decision is not None
        assert outcome.decision.remaining == 0  # the same device and network buckets
    finally:
        before.close()
        after.close()


def test_random_cookies_through_guard_never_raise(redis_url: str) -> None:
    sentinel = make_sentinel(config(redis_url, burst=1000))

    @settings(max_examples=150, deadline=None)
    @given(value=_cookie_values)
    def check(value: str) -> None:
        outcome = login(sentinel, "192.0.2.77", value)
        assert outcome.allowed
        assert outcome.cookie is not None  # never verified: a new device every time

    try:
        check()
    finally:
        sentinel.close()
