"""``identity: "user"`` (SPEC §2): the user the application authenticated, named by the
adapter's ``identify(request)``; a request without one is limited as an anonymous client
(device cookie AND network), never answered 401. The rule lives in the core: these tests
drive it without a framework (each adapter's suite drives it through its own auth)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from sentinel_core import ConfigError, Rate, RequestView, Sentinel, TenantIdentity, load_config
from sentinel_core.adapter import Outcome
from tests.support.docs import snippets
from tests.support.http import Headers, make_sentinel
from tests.support.tokens import COOKIE_SECRET

ENDPOINT = "api.search"


def config(redis_url: str = "memory://", **fields: Any) -> dict[str, Any]:
    """A user policy of 3 requests a minute per user; 2 per device, 4 per network."""
    policy = {
        "algorithm": "sliding_window",
        "rate": "3/minute",
        "identity": "user",
        "fail_mode": "closed",
        "network_rate": "4/minute",
        **fields,
    }
    return {
        "redis_url": redis_url,
        "anonymous": {"cookie_secret": COOKIE_SECRET, "secure": False},
        "policies": {ENDPOINT: policy},
    }


class App:
    """Stands for a framework's request: the user its auth attached, if any."""

    def __init__(self, user: object = None, cookie: str | None = None) -> None:
        self.user = user
        self.cookie = cookie


def identify(request: App) -> Any:
    return request.user


def send(sentinel: Sentinel, user: object = None, *, peer: str = "203.0.113.7") -> Outcome:
    native = App(user)
    view = RequestView("GET", "/search", Headers(), {}, peer, native)
    return sentinel.guard(ENDPOINT, view)


@pytest.fixture(params=["memory", "redis"])
def store_url(request: pytest.FixtureRequest) -> str:
    return "memory://" if request.param == "memory" else str(request.getfixturevalue("redis_url"))


@pytest.fixture
def sentinel(store_url: str) -> Iterator[Sentinel]:
    instance = make_sentinel(config(store_url), identify=identify)
    yield instance
    instance.close()


def test_each_user_has_their_own_limit_wherever_they_come_from(sentinel: Sentinel) -> None:
    alice = [send(sentinel, "alice", peer=f"198.51.100.{n}") for n in range(4)]
    assert [o.status for o in alice] == [200, 200, 200, 429]
    assert all(o.cookie is None for o in alice)  # a user is no device: no cookie
    assert send(sentinel, "bob").allowed  # same network as nobody; bob's own bucket
    denied = alice[-1].decision
    assert denied is not None
    assert denied.identity_hash == TenantIdentity("alice").hash  # hashed like a tenant


def test_a_request_without_a_user_is_limited_as_an_anonymous_client(sentinel: Sentinel) -> None:
    first = send(sentinel)
    assert (first.status, first.cookie is not None) == (200, True)
    for nobody in (None, ""):
        assert send(sentinel, nobody).status == 200  # the network's new devices
    # Without a cookie, a device's 3 a minute for all new devices: 429, never 401.
    assert send(sentinel).status == 429
    assert send(sentinel, "carol").allowed  # a user behind that network is not


def test_the_facade_and_the_http_layer_share_a_users_bucket(sentinel: Sentinel) -> None:
    for _ in range(3):
        assert send(sentinel, "dave").allowed
    assert not sentinel.peek(ENDPOINT, "dave").allowed
    sentinel.reset(ENDPOINT, "dave")
    assert send(sentinel, "dave").allowed
    assert sentinel.evaluate(ENDPOINT, "erin").allowed


def test_a_user_policy_layers_the_user_and_the_anonymous_fallback(redis_url: str) -> None:
    layered = config(redis_url, rates=["3/minute", "2/hour"])
    del layered["policies"][ENDPOINT]["rate"], layered["policies"][ENDPOINT]["network_rate"]
    sentinel = make_sentinel(layered, identify=identify)
    try:
        user = [send(sentinel, "frank").status for _ in range(3)]
        device = [send(sentinel, peer="192.0.2.1") for _ in range(3)]
    finally:
        sentinel.close()
    assert user == [200, 200, 429]  # the hour binds
    # Without a cookie: the network's new devices, layered like a device (2 an hour).
    assert [o.status for o in device] == [200, 200, 429]
    client = redis.Redis.from_url(redis_url)
    keys = sorted(key.decode() for key in client.keys("sentinel:*"))
    client.close()
    user_key = TenantIdentity("frank").bucket_keys(load_config(layered).policies[ENDPOINT])
    assert set(user_key) <= set(keys)
    assert len(user_key) == 2
    assert len([key for key in keys if ":n:" in key]) == 2  # the network's two limits


def test_a_listed_tenant_id_exempts_that_user(store_url: str) -> None:
    exempt = config(store_url, rate="1/minute")
    exempt["exempt"] = {"tenants": ["ops"]}
    sentinel = make_sentinel(exempt, identify=identify)
    try:
        assert [send(sentinel, "ops").headers for _ in range(3)] == [(), (), ()]
        assert [send(sentinel, "ann").status for _ in range(2)] == [200, 429]
    finally:
        sentinel.close()


def test_identify_must_name_a_user_with_a_string(sentinel: Sentinel) -> None:
    with pytest.raises(TypeError, match="identify must return a str or None, not int"):
        send(sentinel, 42)


def test_a_user_policy_needs_identify_over_http() -> None:
    sentinel = make_sentinel(config())
    try:
        with pytest.raises(ConfigError, match="identify callable") as info:
            sentinel.validate_endpoint(ENDPOINT)
        assert info.value.path == f"policies.{ENDPOINT}.identity"
        assert sentinel.evaluate(ENDPOINT, "gail").allowed  # the facade needs none
        assert send(sentinel, "gail").cookie is not None  # no identify: nobody is a user
    finally:
        sentinel.close()


def test_a_user_policy_needs_the_anonymous_section() -> None:
    without = config()
    del without["anonymous"]
    with pytest.raises(ConfigError, match="user policies need the anonymous section"):
        load_config(without)


def test_the_anonymous_fallback_takes_the_network_limits() -> None:
    fallback = config(rate="5/minute")
    del fallback["policies"][ENDPOINT]["network_rate"]
    loaded = load_config(fallback)
    assert loaded.policies[ENDPOINT].network_rate == Rate(50, 60)


def test_every_snippet_of_the_users_page_is_valid_python() -> None:
    """The pages' framework suites run the snippets they can; the rest must parse."""
    blocks = snippets("users.md")
    assert len(blocks) >= 10
    for block in blocks:
        compile(block, "docs/users.md", "exec")
