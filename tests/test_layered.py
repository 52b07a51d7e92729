"""Layered limits (SPEC §2, issue 17): ``rates = [...]`` on a token bucket or sliding
window policy. Every limit must allow, all are decided in one script call, the
RateLimit headers list each limit and report the one closest to binding, and
Retry-After is the latest of the limits that deny."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry

from sentinel_core import ConfigError, Rate, Sentinel, load_config
from sentinel_core.adapter import Outcome
from sentinel_core.http._outcome import ratelimit_headers
from sentinel_core.identity._keys import TenantIdentity
from sentinel_core.testing import ratelimit_headers as parse_fields
from tests.conftest import make_config
from tests.support.http import make_sentinel, request_view
from tests.support.tokens import COOKIE_SECRET

ALGORITHMS = ["token_bucket", "sliding_window"]


def policy(algorithm: str, rates: list[str], **fields: Any) -> dict[str, Any]:
    return {"algorithm": algorithm, "rates": rates, "fail_mode": "closed", **fields}


@pytest.fixture(params=["memory", "redis"])
def store_url(request: pytest.FixtureRequest) -> str:
    if request.param == "memory":
        return "memory://"
    url: str = request.getfixturevalue("redis_url")
    client = redis.Redis.from_url(url)
    client.flushall()
    client.close()
    return url


@pytest.fixture
def make(store_url: str) -> Iterator[Any]:
    made: list[Sentinel] = []

    def build(**policies: dict[str, Any]) -> Sentinel:
        sentinel = Sentinel(
            make_config(store_url, **policies), registry=CollectorRegistry(), entry_points=False
        )
        made.append(sentinel)
        return sentinel

    yield build
    for sentinel in made:
        sentinel.close()


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_the_smaller_limit_binds(make: Any, algorithm: str) -> None:
    sentinel = make(api=policy(algorithm, ["5/minute", "3/hour"]))
    decisions = [sentinel.evaluate("api", "tenant-a") for _ in range(5)]
    assert [d.allowed for d in decisions] == [True, True, True, False, False]
    assert [d.remaining for d in decisions[:3]] == [2, 1, 0]
    assert {d.limit_index for d in decisions} == {1}
    assert {d.limit for d in decisions} == {3}
    assert sentinel.evaluate("api", "tenant-b").allowed  # per tenant


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_retry_after_is_the_latest_of_the_denying_limits(make: Any, algorithm: str) -> None:
    sentinel = make(
        one=policy(algorithm, ["1/minute", "2/hour"]),
        both=policy(algorithm, ["1/minute", "1/hour"]),
    )
    assert sentinel.evaluate("one", "t").allowed
    minute_only = sentinel.evaluate("one", "t")
    assert not minute_only.allowed
    assert minute_only.retry_after_seconds is not None
    assert 1 <= minute_only.retry_after_seconds <= 120
    assert sentinel.evaluate("both", "t").allowed
    both = sentinel.evaluate("both", "t")
    assert both.retry_after_seconds is not None
    assert 3_000 <= both.retry_after_seconds <= 3 * 3_600


def test_headers_list_every_limit_and_report_the_binding_one(make: Any) -> None:
    sentinel = make(api=policy("token_bucket", ["10/second", "1000/day"]))
    decision = sentinel.evaluate("api", "tenant-a")
    fields = parse_fields(ratelimit_headers(decision))
    assert {name: member["q"] for name, member in fields["policy"].items()} == {
        "api/second": 10,
        "api/day": 1000,
    }
    assert list(fields["policy"]) == ["api/second", "api/day"]
    assert list(fields["state"]) == ["api/second"]
    assert fields["state"]["api/second"]["r"] == 9
    for _ in range(9):
        decision = sentinel.evaluate("api", "tenant-a")
    assert not sentinel.evaluate("api", "tenant-a").allowed
    assert parse_fields(ratelimit_headers(decision))["state"]["api/second"]["r"] == 0


def test_one_evalsha_per_decision_and_a_key_per_limit_in_one_slot(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    client.flushall()
    sentinel = Sentinel(
        make_config(redis_url, api=policy("sliding_window", ["2/second", "3/minute", "4/hour"])),
        registry=CollectorRegistry(),
        entry_points=False,
    )
    try:
        sentinel.evaluate("api", "warm-up")  # loads the script
        client.config_resetstat()
        decisions = [sentinel.evaluate("api", "tenant-a") for _ in range(4)]
        keys = TenantIdentity("tenant-a").bucket_keys(sentinel.policy("api"))
    finally:
        sentinel.close()
    stats = client.info("commandstats")
    client.close()
    assert [d.allowed for d in decisions] == [True, True, False, False]
    # one EVALSHA for each decision the store made (the last one is a local denial)
    assert [d.local for d in decisions] == [False, False, False, True]
    assert stats["cmdstat_evalsha"]["calls"] == 3
    assert len(keys) == 3
    assert len({key.split("{")[1].split("}")[0] for key in keys}) == 1
    assert keys[1:] == (f"{keys[0]}:1", f"{keys[0]}:2")


@pytest.mark.parametrize(
    ("fields", "path", "fragment"),
    [
        ({"rate": "1/second"}, "rates", "either rate or rates"),
        ({"burst": 3}, "burst", "does not combine"),
        ({"rates": []}, "rates", "non-empty list"),
        ({"rates": "1/second"}, "rates", "non-empty list"),
        ({"rates": ["1/second", "x"]}, "rates[1]", "expected"),
        ({"rates": ["1/second", "2/second"]}, "rates", "two limits per unit"),
        ({"cost": 3, "rates": ["10/second", "2/day"]}, "cost", "exceeds the limit 2"),
        ({"rates": ["1/second", "200000/day"], "algorithm": "sliding_window"}, "rates", "2**53"),
    ],
)
def test_layered_config_errors_name_their_key(
    fields: dict[str, Any], path: str, fragment: str
) -> None:
    config = make_config("memory://", api=policy("token_bucket", ["10/second", "1000/day"]))
    config["policies"]["api"].update(fields)
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert info.value.path == f"policies.api.{path}"
    assert fragment in str(info.value)


# --- anonymous policies: the device's bucket and the network's, layered alike ---------


def anonymous_config(store_url: str, algorithm: str, **fields: Any) -> dict[str, Any]:
    config = make_config(
        store_url, login=policy(algorithm, ["5/minute", "3/hour"], identity="anonymous", **fields)
    )
    config["anonymous"] = {"cookie_secret": COOKIE_SECRET, "secure": False}
    return config


def test_an_anonymous_policy_layers_the_network_bucket_like_the_device_one() -> None:
    default = load_config(anonymous_config("memory://", "token_bucket")).policies["login"]
    assert default.network_limits == ((Rate(50, 60), 50), (Rate(30, 3600), 30))
    strict = load_config(
        anonymous_config("memory://", "sliding_window", network_rates=["5/minute", "3/hour"])
    ).policies["login"]
    assert strict.network_limits == strict.limits


@pytest.mark.parametrize(
    ("fields", "path", "fragment"),
    [
        ({"network_rates": ["5/minute"]}, "network_rates", "a list of 2 limits"),
        ({"network_rates": "5/minute"}, "network_rates", "a list of 2 limits"),
        ({"network_rates": ["5/minute", "3/day"]}, "network_rates[1]", "the unit of rates[1]"),
        ({"network_rates": ["5/minute", "x"]}, "network_rates[1]", "expected"),
        ({"network_rates": ["5/minute", "1/hour"], "cost": 2}, "network_rates", "below the cost"),
        ({"network_rate": "5/minute"}, "network_rate", "does not combine"),
    ],
)
def test_layered_network_errors_name_their_key(
    fields: dict[str, Any], path: str, fragment: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(anonymous_config("memory://", "token_bucket", **fields))
    assert info.value.path == f"policies.login.{path}"
    assert fragment in str(info.value)


def test_network_rates_need_rates_and_an_anonymous_or_user_policy() -> None:
    config = anonymous_config("memory://", "token_bucket")
    login = config["policies"]["login"]
    del login["rates"]
    login |= {"rate": "5/minute", "network_rates": ["5/minute"]}
    with pytest.raises(ConfigError, match="applies with rates; give network_rate"):
        load_config(config)
    config = make_config(
        "memory://", api=policy("token_bucket", ["5/minute", "3/hour"], network_rates=["1/minute"])
    )
    with pytest.raises(ConfigError, match="anonymous and user policies only"):
        load_config(config)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_device_meets_each_of_its_own_limits(make_anonymous: Any, algorithm: str) -> None:
    sentinel = make_anonymous(algorithm)
    outcomes = login_as(sentinel, None, 4)
    assert [o.status for o in outcomes] == [200, 200, 200, 429]
    denied = outcomes[-1].decision
    assert denied is not None
    assert (denied.limit_index, denied.limit) == (1, 3)  # the hour's limit denies
    assert denied.retry_after_seconds is not None
    assert denied.retry_after_seconds > 60
    policy_field = dict(outcomes[0].headers)["RateLimit-Policy"]
    assert [item.split(";")[0] for item in policy_field.split(", ")] == [
        '"login/minute"',
        '"login/hour"',
    ]
    # another device on another network is not limited by this one
    assert login_as(sentinel, None, 1, peer="198.51.100.9")[0].allowed


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_the_network_meets_each_of_its_limits_whatever_the_devices(
    make_anonymous: Any, algorithm: str
) -> None:
    sentinel = make_anonymous(algorithm, network_rates=["50/minute", "4/hour"])
    first = login_as(sentinel, None, 3)
    assert [o.status for o in first] == [200, 200, 200]
    second = login_as(sentinel, None, 2)  # a second device behind the same address
    assert [o.status for o in second] == [200, 429]  # the network's hour is spent
    denied = second[-1].decision
    assert denied is not None
    assert (denied.limit_index, denied.remaining) == (1, 0)


def test_a_layered_anonymous_call_keeps_its_first_keys_and_shares_one_slot(
    redis_url: str,
) -> None:
    sentinel = make_sentinel(anonymous_config(redis_url, "token_bucket"))
    try:
        outcome = sentinel.guard("login", request_view(peer="203.0.113.5"))
    finally:
        sentinel.close()
    client = redis.Redis.from_url(redis_url)
    keys = sorted(key.decode() for key in client.keys("sentinel:v2:*"))
    client.close()
    assert outcome.allowed
    device = [key for key in keys if ":d:" in key]
    network = [key for key in keys if ":n:" in key]
    # No cookie: the network's new devices and the device minted for it, each layered.
    bases = [key for key in device if f"{key}:1" in device]
    assert len(bases) == 2
    assert device == sorted([*bases, *(f"{base}:1" for base in bases)])
    assert network[1:] == [f"{network[0]}:1"]
    assert len({key.split("{")[1].split("}")[0] for key in keys}) == 1


@pytest.fixture
def make_anonymous(store_url: str) -> Iterator[Any]:
    made: list[Sentinel] = []

    def build(algorithm: str, **fields: Any) -> Sentinel:
        sentinel = make_sentinel(anonymous_config(store_url, algorithm, **fields))
        made.append(sentinel)
        return sentinel

    yield build
    for sentinel in made:
        sentinel.close()


def login_as(
    sentinel: Sentinel, cookie: str | None, times: int, *, peer: str = "203.0.113.5"
) -> list[Outcome]:
    """``times`` requests of one device (a new one when ``cookie`` is None, kept after)."""
    outcomes = []
    for _ in range(times):
        jar = {} if cookie is None else {"sentinel_device": cookie}
        outcome = sentinel.guard("login", request_view(peer=peer, cookies=jar))
        if outcome.cookie is not None:
            cookie = outcome.cookie.value
        outcomes.append(outcome)
    return outcomes


def test_a_single_entry_is_a_plain_rate() -> None:
    config = make_config("memory://", api=policy("token_bucket", ["10/second"]))
    loaded = load_config(config).policies["api"]
    assert (loaded.rate.count, loaded.layers) == (10, ())
