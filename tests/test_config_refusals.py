"""More of what the loader refuses, each at its key path: JWT key material, cookie secret
rotation lists, an anonymous policy's network bucket and cluster/sentinel URLs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from sentinel_core import ConfigError, load_config
from tests.support.tokens import HS_SECRET, public_pem, rsa_private_key

SECRET = "s" * 32
TENANT = {"algorithm": "token_bucket", "rate": "5/second", "fail_mode": "closed"}


def with_jwt(**section: Any) -> dict[str, Any]:
    return {"redis_url": "memory://", "jwt": section, "policies": {"api.read": TENANT}}


def with_anonymous(policy: dict[str, Any], **anonymous: Any) -> dict[str, Any]:
    return {
        "redis_url": "memory://",
        "anonymous": {"cookie_secret": SECRET, **anonymous},
        "policies": {"auth.login": {"identity": "anonymous", "fail_mode": "closed", **policy}},
    }


def refusal(config: dict[str, Any], path: str, *fragments: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    assert caught.value.path == path
    for fragment in fragments:
        assert fragment in str(caught.value)


def ed25519_pem() -> str:
    return (
        ed25519.Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


# -- JWT keys ----------------------------------------------------------------------------


def test_a_public_key_given_both_inline_and_as_a_file_is_refused(tmp_path: Path) -> None:
    pem = public_pem(rsa_private_key())
    (tmp_path / "key.pem").write_text(pem)
    config = with_jwt(
        algorithms=["RS256"], public_key=pem, public_key_file=str(tmp_path / "key.pem")
    )

    refusal(config, "jwt.public_key", "either public_key or public_key_file")


def test_an_unreadable_public_key_file_is_refused_naming_the_file_key(tmp_path: Path) -> None:
    config = with_jwt(algorithms=["RS256"], public_key_file=str(tmp_path / "missing.pem"))

    refusal(config, "jwt.public_key_file", "cannot read")


@pytest.mark.parametrize("pem", ["not a key", "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END"])
def test_a_public_key_that_is_not_pem_is_refused(pem: str) -> None:
    refusal(with_jwt(algorithms=["RS256"], public_key=pem), "jwt.public_key", "not a PEM")


def test_a_key_that_is_both_a_secret_and_a_public_key_is_refused() -> None:
    config = with_jwt(key=HS_SECRET, public_key=public_pem(rsa_private_key()))

    refusal(config, "jwt.key", "either an HMAC secret or a public key")


def test_a_key_table_with_only_a_kid_is_refused() -> None:
    refusal(with_jwt(keys=[{"kid": "k1"}]), "jwt.keys.0.key", "missing key")


@pytest.mark.parametrize("algorithms", [[], "HS256", {"HS256": True}])
def test_algorithms_must_be_a_non_empty_list(algorithms: object) -> None:
    refusal(with_jwt(algorithms=algorithms, key=HS_SECRET), "jwt.algorithms", "non-empty list")


@pytest.mark.parametrize("keys", [[], {"kid": "k1"}, "k1"])
def test_keys_must_be_a_non_empty_list(keys: object) -> None:
    refusal(with_jwt(keys=keys), "jwt.keys", "non-empty list of key tables")


def test_each_key_entry_must_be_a_table() -> None:
    refusal(with_jwt(keys=[{"kid": "k1", "key": HS_SECRET}, HS_SECRET]), "jwt.keys.1", "table")


def test_a_public_key_of_another_family_than_rsa_or_ec_is_refused() -> None:
    refusal(
        with_jwt(algorithms=["RS256"], public_key=ed25519_pem()),
        "jwt.algorithms",
        "RSA or EC",
    )


def test_an_hmac_algorithm_without_an_hmac_secret_is_refused() -> None:
    config = with_jwt(algorithms=["RS256", "HS256"], public_key=public_pem(rsa_private_key()))

    refusal(config, "jwt.algorithms", "HS256 needs an HMAC secret")


# -- anonymous cookie secrets ------------------------------------------------------------


@pytest.mark.parametrize("previous", ["s" * 40, {"old": "s" * 40}])
def test_previous_cookie_secrets_must_be_a_list(previous: object) -> None:
    config = with_anonymous({"rate": "2/minute"}, previous_cookie_secrets=previous)

    refusal(config, "anonymous.previous_cookie_secrets", "list of secrets")


@pytest.mark.parametrize("secret", ["short", 12345678901234567890123456789012345])
def test_each_previous_cookie_secret_must_be_a_long_enough_string(secret: object) -> None:
    config = with_anonymous({"rate": "2/minute"}, previous_cookie_secrets=[SECRET, secret])

    refusal(config, "anonymous.previous_cookie_secrets", "at least 32 bytes")


# -- the network bucket of anonymous policies --------------------------------------------


@pytest.mark.parametrize("key", ["network_rate", "network_burst"])
def test_network_limits_on_a_tenant_policy_are_refused(key: str) -> None:
    value = "10/minute" if key == "network_rate" else 10
    config = with_jwt(key=HS_SECRET)
    config["policies"]["api.read"] = {**TENANT, key: value}

    refusal(config, f"policies.api.read.{key}", "anonymous and user policies only")


def test_network_burst_on_a_sliding_window_is_refused() -> None:
    config = with_anonymous({"algorithm": "sliding_window", "rate": "2/minute", "network_burst": 9})

    refusal(config, "policies.auth.login.network_burst", "token_bucket policies only")


def test_a_network_burst_below_the_cost_is_refused_at_the_burst() -> None:
    config = with_anonymous(
        {"algorithm": "token_bucket", "rate": "10/minute", "cost": 5, "network_burst": 3}
    )

    refusal(config, "policies.auth.login.network_burst", "network limit 3 is below the cost 5")


def test_a_network_rate_below_the_cost_is_refused_at_the_rate() -> None:
    config = with_anonymous(
        {"algorithm": "sliding_window", "rate": "10/minute", "cost": 5, "network_rate": "2/minute"}
    )

    refusal(config, "policies.auth.login.network_rate", "network limit 2 is below the cost 5")


def test_a_network_rate_defaults_its_burst_to_its_count() -> None:
    policy = load_config(
        with_anonymous(
            {"algorithm": "token_bucket", "rate": "2/minute", "network_rate": "7/minute"}
        )
    ).policies["auth.login"]

    assert policy.network_burst == 7


# -- cluster and sentinel URLs -----------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        (
            "redis+cluster://127.0.0.1:notaport",
            "the port must be a number from 1 to 65535, got 'notaport'",
        ),
        ("redis+cluster://127.0.0.1", "expected host:port"),
        ("redis+cluster://:7000", "expected host:port in ':7000'"),
        ("redis+cluster://127.0.0.1:7000,127.0.0.1:99999", "from 1 to 65535, got '99999'"),
        ("redis+cluster:///", "no host:port"),
        ("redis+cluster://,", "no host:port"),
        ("redis+sentinel://127.0.0.1:26379", "/service[/db]"),
        ("redis+sentinel://127.0.0.1:26379/mymaster/zero", "/service[/db]"),
        ("redis+sentinel://127.0.0.1:26379/mymaster/0/1", "/service[/db]"),
        ("redis+sentinel:///mymaster", "no host:port"),
    ],
)
def test_malformed_cluster_and_sentinel_urls_are_refused(url: str, fragment: str) -> None:
    config = {"redis_url": url, "policies": {"api.read": TENANT}}
    config["jwt"] = {"key": HS_SECRET}

    refusal(config, "redis_url", fragment)


@pytest.mark.parametrize(
    "url",
    [
        "redis+cluster://127.0.0.1:7000,localhost:7001",
        "redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster",
        "redis+sentinel://127.0.0.1:26379/mymaster/2",
    ],
)
def test_well_formed_cluster_and_sentinel_urls_load(url: str) -> None:
    config = {"redis_url": url, "jwt": {"key": HS_SECRET}, "policies": {"api.read": TENANT}}

    assert load_config(config).redis_url == url


def test_an_empty_previous_cookie_secrets_list_loads_as_no_previous_secret() -> None:
    config = with_anonymous(
        {"algorithm": "token_bucket", "rate": "2/minute"}, previous_cookie_secrets=[]
    )

    anonymous = load_config(config).anonymous
    assert anonymous is not None
    assert anonymous.previous_cookie_secrets == ()
