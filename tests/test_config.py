"""The strict configuration loader (SPEC §2): every error names its full key path.

Pure unit tests: no Redis, no network. Each failing case asserts both ``.path`` and the
message, because the message is what a user reads and the path is what tools read.
"""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path
from typing import Any

import pytest

from sentinel_core import (
    Algorithm,
    ConfigError,
    FailMode,
    IdentityKind,
    Policy,
    Rate,
    Sentinel,
    SentinelConfig,
    load_config,
)
from sentinel_core.config._schema import LUA_EXACT_LIMIT, LUA_TIME_BOUND_US

ENDPOINT = "pdftalk.ingest"
POLICY_PATH = f"policies.{ENDPOINT}"
SECRET = "s" * 32
SHORT_SECRET = "s" * 31
DROP = object()
"""Marks a key to remove from the base policy."""


def make_config(**top: Any) -> dict[str, Any]:
    """A valid configuration (one token bucket policy) with top-level keys replaced."""
    config: dict[str, Any] = {
        "redis_url": "memory://",
        "policies": {
            ENDPOINT: {"algorithm": "token_bucket", "rate": "5/second", "fail_mode": "closed"}
        },
    }
    config.update(top)
    return config


def policy_config(**fields: Any) -> dict[str, Any]:
    """`make_config` with fields of the ``pdftalk.ingest`` policy replaced (or dropped)."""
    config = make_config()
    policy = config["policies"][ENDPOINT]
    for key, value in fields.items():
        if value is DROP:
            policy.pop(key, None)
        else:
            policy[key] = value
    return config


def assert_config_error(source: Any, path: str, *fragments: str) -> ConfigError:
    """Load ``source`` and check the error names ``path`` in both ``.path`` and the message."""
    with pytest.raises(ConfigError) as info:
        load_config(source)
    error = info.value
    assert error.path == path
    assert str(error).startswith(f"{path}: ")
    for fragment in fragments:
        assert fragment in str(error)
    return error


# -- a valid configuration ---------------------------------------------------------------


def test_spec_example_loads_with_documented_defaults() -> None:
    config = load_config(
        {
            "redis_url": "redis://127.0.0.1:1/0",
            "socket_timeout_ms": 20,
            "require_noeviction": True,
            "jwt": {"algorithms": ["HS256"], "key": SECRET, "leeway_seconds": 0},
            "anonymous": {"cookie_secret": SECRET, "cookie_name": "sentinel_device"},
            "breaker": {"failure_threshold": 5, "open_seconds": 30},
            "headers": {"ratelimit": True},
            "policies": {
                "pdftalk.ingest": {
                    "algorithm": "sliding_window",
                    "rate": "10/minute",
                    "fail_mode": "closed",
                },
                "resumint.tailor": {
                    "algorithm": "token_bucket",
                    "rate": "5/second",
                    "burst": 20,
                    "fail_mode": "open",
                    "fallback_rate": "2/second",
                },
                "auth.login": {
                    "algorithm": "token_bucket",
                    "rate": "5/minute",
                    "identity": "anonymous",
                    "fail_mode": "closed",
                },
            },
            "routes": {"POST /v1/ingest": "pdftalk.ingest"},
        }
    )
    ingest = config.policies["pdftalk.ingest"]
    assert ingest == Policy(
        endpoint_id="pdftalk.ingest",
        algorithm=Algorithm.SLIDING_WINDOW,
        rate=Rate(10, 60),
        burst=10,
        fail_mode=FailMode.CLOSED,
    )
    assert (ingest.version, ingest.cost, ingest.shadow) == (1, 1, False)
    assert ingest.identity is IdentityKind.TENANT
    tailor = config.policies["resumint.tailor"]
    assert (tailor.burst, tailor.fallback_rate) == (20, Rate(2, 1))
    assert config.enabled is True
    assert config.policies["auth.login"].burst == 5  # burst defaults to the rate's count
    assert config.policies["auth.login"].identity is IdentityKind.ANONYMOUS
    assert dict(config.routes) == {"POST /v1/ingest": "pdftalk.ingest"}


@pytest.mark.parametrize(
    ("text", "rate"),
    [
        ("1/second", Rate(1, 1)),
        ("7/minute", Rate(7, 60)),
        ("30/hour", Rate(30, 3600)),
        ("1000/day", Rate(1000, 86400)),
        (" 12 / minute ", Rate(12, 60)),
        ("007/second", Rate(7, 1)),
    ],
)
def test_rate_strings_parse_to_integer_count_and_period(text: str, rate: Rate) -> None:
    assert load_config(policy_config(rate=text)).policies[ENDPOINT].rate == rate


# -- unknown keys at every level ---------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "path"),
    [
        (make_config(redis_uri="redis://x"), "redis_uri"),
        (policy_config(burts=10), f"{POLICY_PATH}.burts"),
        (make_config(jwt={"key": SECRET, "audiense": "x"}), "jwt.audiense"),
        (make_config(jwt={"keys": [{"kid": "a", "key": SECRET, "kd": 1}]}), "jwt.keys.0.kd"),
        (
            make_config(anonymous={"cookie_secret": SECRET, "cookie_nam": "x"}),
            "anonymous.cookie_nam",
        ),
        (make_config(breaker={"open_second": 5}), "breaker.open_second"),
        (make_config(headers={"rate_limit": True}), "headers.rate_limit"),
    ],
)
def test_unknown_key_is_named_by_its_full_path(config: dict[str, Any], path: str) -> None:
    assert_config_error(config, path, "unknown key")


def test_unknown_key_message_matches_the_spec_example() -> None:
    error = assert_config_error(policy_config(burts=10), "policies.pdftalk.ingest.burts")
    assert str(error) == "policies.pdftalk.ingest.burts: unknown key"


# -- rates -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rate",
    [
        "1.5/second",
        "0/second",
        "-1/second",
        "-5/minute",
        "10/week",
        "10/seconds",
        "10/Second",
        "10 per second",
        "10",
        "/second",
        "",
        "ten/second",
        "1e3/second",
        "\u0663/second",  # ARABIC-INDIC DIGIT THREE: a Unicode digit, not an ASCII one
        "10/second\n",
        "1" + "0" * 5000 + "/second",  # a digit bomb: no int() of it, still a path
        10,
        1.5,
        True,
        None,
        ["10/second"],
    ],
)
def test_bad_rate_is_a_config_error_at_the_rate_path(rate: object) -> None:
    assert_config_error(policy_config(rate=rate), f"{POLICY_PATH}.rate")


@pytest.mark.parametrize("rate", ["0/second", "2.5/second", "-2/second", 2])
def test_bad_fallback_rate_is_a_config_error_at_its_path(rate: object) -> None:
    config = policy_config(fail_mode="open", fallback_rate=rate)
    assert_config_error(config, f"{POLICY_PATH}.fallback_rate")


# -- missing keys, choices, fail modes ---------------------------------------------------


@pytest.mark.parametrize("key", ["fail_mode", "algorithm", "rate"])
def test_missing_policy_key_is_named(key: str) -> None:
    assert_config_error(policy_config(**{key: DROP}), f"{POLICY_PATH}.{key}", "missing key")


def test_missing_redis_url_and_policies_are_named() -> None:
    config = make_config()
    del config["redis_url"]
    assert_config_error(config, "redis_url", "missing key")
    config = make_config()
    del config["policies"]
    assert_config_error(config, "policies", "missing key")


def test_empty_policies_table_is_refused_at_policies() -> None:
    assert_config_error(make_config(policies={}), "policies", "at least one")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("fail_mode", "half-open"),
        ("fail_mode", True),
        ("algorithm", "leaky_bucket"),
        ("algorithm", ["token_bucket"]),
        ("identity", "ip"),
    ],
)
def test_invalid_choice_lists_the_allowed_values(key: str, value: object) -> None:
    assert_config_error(policy_config(**{key: value}), f"{POLICY_PATH}.{key}", "expected '")


def test_fail_open_without_fallback_rate_is_refused() -> None:
    assert_config_error(
        policy_config(fail_mode="open"), f"{POLICY_PATH}.fallback_rate", "fallback_rate"
    )


def test_fallback_rate_on_fail_closed_is_refused() -> None:
    assert_config_error(
        policy_config(fallback_rate="2/second"), f"{POLICY_PATH}.fallback_rate", "open"
    )


def test_fail_open_with_fallback_rate_loads() -> None:
    policy = load_config(policy_config(fail_mode="open", fallback_rate="3/minute")).policies[
        ENDPOINT
    ]
    assert (policy.fail_mode, policy.fallback_rate) == (FailMode.OPEN, Rate(3, 60))


@pytest.mark.parametrize("redis_url", ["http://127.0.0.1", "127.0.0.1:6379", "", 6379])
def test_unsupported_redis_url_is_refused(redis_url: object) -> None:
    assert_config_error(make_config(redis_url=redis_url), "redis_url")


@pytest.mark.parametrize("endpoint_id", ["has space", "tab\there", ""])
def test_endpoint_ids_with_whitespace_or_empty_are_refused(endpoint_id: str) -> None:
    policy = {"algorithm": "token_bucket", "rate": "1/second", "fail_mode": "closed"}
    assert_config_error(make_config(policies={endpoint_id: policy}), f"policies.{endpoint_id}")


def test_policy_that_is_not_a_table_is_refused() -> None:
    assert_config_error(make_config(policies={ENDPOINT: "10/second"}), POLICY_PATH, "table")


# -- burst and cost ------------------------------------------------------------------------


def test_burst_on_sliding_window_is_refused() -> None:
    config = policy_config(algorithm="sliding_window", burst=10)
    assert_config_error(config, f"{POLICY_PATH}.burst", "token_bucket")


@pytest.mark.parametrize(
    ("fields", "limit"),
    [
        ({"burst": 4, "cost": 5}, 4),
        ({"cost": 6}, 5),  # the burst defaults to the rate's count, 5
        ({"algorithm": "sliding_window", "rate": "3/minute", "cost": 4}, 3),
    ],
)
def test_cost_above_the_limit_is_refused(fields: dict[str, Any], limit: int) -> None:
    assert_config_error(
        policy_config(**fields), f"{POLICY_PATH}.cost", f"exceeds the limit {limit}"
    )


@pytest.mark.parametrize("algorithm", ["token_bucket", "sliding_window"])
def test_cost_equal_to_the_limit_is_accepted(algorithm: str) -> None:
    policy = load_config(policy_config(algorithm=algorithm, cost=5)).policies[ENDPOINT]
    assert (policy.cost, policy.limit) == (5, 5)


@pytest.mark.parametrize(("key", "value"), [("cost", 0), ("cost", -1), ("burst", 0), ("burst", -3)])
def test_non_positive_cost_or_burst_is_refused(key: str, value: int) -> None:
    assert_config_error(policy_config(**{key: value}), f"{POLICY_PATH}.{key}", ">= 1")


# -- types: bool is not an int, int is not a bool ---------------------------------------


@pytest.mark.parametrize(
    ("config", "path"),
    [
        (policy_config(burst=True), f"{POLICY_PATH}.burst"),
        (policy_config(cost=True), f"{POLICY_PATH}.cost"),
        (policy_config(version=False), f"{POLICY_PATH}.version"),
        (policy_config(burst=5.0), f"{POLICY_PATH}.burst"),
        (policy_config(version="2"), f"{POLICY_PATH}.version"),
        (make_config(socket_timeout_ms=True), "socket_timeout_ms"),
        (make_config(socket_timeout_ms=2.5), "socket_timeout_ms"),
        (make_config(breaker={"failure_threshold": True}), "breaker.failure_threshold"),
        (make_config(jwt={"key": SECRET, "leeway_seconds": True}), "jwt.leeway_seconds"),
        (
            make_config(anonymous={"cookie_secret": SECRET, "cookie_max_age_seconds": False}),
            "anonymous.cookie_max_age_seconds",
        ),
    ],
)
def test_non_integer_where_an_integer_is_expected_is_refused(
    config: dict[str, Any], path: str
) -> None:
    assert_config_error(config, path, "expected an integer")


@pytest.mark.parametrize(
    ("config", "path"),
    [
        (policy_config(shadow="yes"), f"{POLICY_PATH}.shadow"),
        (policy_config(shadow=1), f"{POLICY_PATH}.shadow"),
        (make_config(require_noeviction=0), "require_noeviction"),
        (make_config(enabled="false"), "enabled"),
        (make_config(headers={"ratelimit": "true"}), "headers.ratelimit"),
    ],
)
def test_non_boolean_where_a_boolean_is_expected_is_refused(
    config: dict[str, Any], path: str
) -> None:
    assert_config_error(config, path, "true or false")


@pytest.mark.parametrize(
    ("config", "path"),
    [
        (make_config(jwt="secret"), "jwt"),
        (make_config(anonymous=[SECRET]), "anonymous"),
        (make_config(breaker=5), "breaker"),
        (make_config(policies=["pdftalk.ingest"]), "policies"),
        (make_config(routes=["POST /x"]), "routes"),
    ],
)
def test_section_that_is_not_a_table_is_refused(config: dict[str, Any], path: str) -> None:
    assert_config_error(config, path, "table")


# -- secrets -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "path"),
    [
        (make_config(jwt={"key": SHORT_SECRET}), "jwt.key"),
        (make_config(jwt={"keys": [{"kid": "k1", "key": SHORT_SECRET}]}), "jwt.keys.0.key"),
        (make_config(anonymous={"cookie_secret": SHORT_SECRET}), "anonymous.cookie_secret"),
        # 31 bytes of UTF-8 in 16 characters: the rule counts bytes
        (make_config(jwt={"key": "\u00e9" * 15 + "x"}), "jwt.key"),
    ],
)
def test_inline_secret_shorter_than_32_bytes_is_refused(config: dict[str, Any], path: str) -> None:
    assert_config_error(config, path, "32 bytes")


def test_secrets_of_exactly_32_bytes_are_accepted() -> None:
    multibyte = "\u00e9" * 16  # 16 characters, 32 bytes
    config = load_config(make_config(jwt={"key": SECRET}, anonymous={"cookie_secret": multibyte}))
    assert config.jwt is not None
    assert config.jwt.keys[0].material == SECRET
    assert config.anonymous is not None
    assert config.anonymous.cookie_secret == multibyte


@pytest.mark.parametrize(
    ("section", "env_key"), [("jwt", "key_env"), ("anonymous", "cookie_secret_env")]
)
def test_secret_from_environment_is_read_and_length_checked(
    monkeypatch: pytest.MonkeyPatch, section: str, env_key: str
) -> None:
    monkeypatch.setenv("SENTINEL_TEST_SECRET", "e" * 40)
    config = load_config(make_config(**{section: {env_key: "SENTINEL_TEST_SECRET"}}))
    if section == "jwt":
        assert config.jwt is not None
        assert config.jwt.keys[0].material == "e" * 40
    else:
        assert config.anonymous is not None
        assert config.anonymous.cookie_secret == "e" * 40

    monkeypatch.setenv("SENTINEL_TEST_SECRET", SHORT_SECRET)
    assert_config_error(
        make_config(**{section: {env_key: "SENTINEL_TEST_SECRET"}}),
        f"{section}.{env_key}",
        "32 bytes",
    )


@pytest.mark.parametrize(
    ("section", "env_key"), [("jwt", "key_env"), ("anonymous", "cookie_secret_env")]
)
@pytest.mark.parametrize("value", [None, ""])
def test_missing_or_empty_secret_environment_variable_is_refused(
    monkeypatch: pytest.MonkeyPatch, section: str, env_key: str, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv("SENTINEL_TEST_ABSENT", raising=False)
    else:
        monkeypatch.setenv("SENTINEL_TEST_ABSENT", value)
    assert_config_error(
        make_config(**{section: {env_key: "SENTINEL_TEST_ABSENT"}}),
        f"{section}.{env_key}",
        "SENTINEL_TEST_ABSENT",
    )


def test_secret_given_both_inline_and_by_environment_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SENTINEL_TEST_SECRET", "e" * 40)
    assert_config_error(
        make_config(jwt={"key": SECRET, "key_env": "SENTINEL_TEST_SECRET"}), "jwt.key", "either"
    )


def test_jwt_without_any_key_is_refused() -> None:
    assert_config_error(make_config(jwt={"algorithms": ["HS256"]}), "jwt.key", "missing key")


def test_anonymous_without_cookie_secret_is_refused() -> None:
    assert_config_error(
        make_config(anonymous={"cookie_name": "device"}), "anonymous.cookie_secret", "missing"
    )


# -- exact integer arithmetic inside Lua -------------------------------------------------

# A token bucket's largest intermediate is TIME + burst * 1e6 * period / count (SPEC §2).
_LARGEST_DAILY_BURST = (LUA_EXACT_LIMIT - 1 - LUA_TIME_BOUND_US) // (1_000_000 * 86_400)


def test_token_bucket_burst_just_below_two_to_the_53_is_accepted() -> None:
    config = policy_config(rate="1/day", burst=_LARGEST_DAILY_BURST)
    assert load_config(config).policies[ENDPOINT].burst == _LARGEST_DAILY_BURST


@pytest.mark.parametrize("burst", [_LARGEST_DAILY_BURST + 1, 10**6, 10**12, 2**53])
def test_token_bucket_burst_overflowing_lua_is_refused(burst: int) -> None:
    assert_config_error(policy_config(rate="1/day", burst=burst), f"{POLICY_PATH}.burst", "2**53")


@pytest.mark.parametrize(
    "fields",
    [
        {"algorithm": "sliding_window", "rate": "1000000/day"},
        {"algorithm": "sliding_window", "rate": "104249/day", "cost": 2},  # (limit + cost)
    ],
)
def test_rate_overflowing_lua_is_refused_at_the_rate(fields: dict[str, Any]) -> None:
    assert_config_error(policy_config(**fields), f"{POLICY_PATH}.rate", "2**53")


def test_sliding_window_just_below_two_to_the_53_is_accepted() -> None:
    limit = LUA_EXACT_LIMIT // (86_400 * 1_000_000) - 1  # (limit + 1) * window < 2**53
    policy = load_config(policy_config(algorithm="sliding_window", rate=f"{limit}/day"))
    assert policy.policies[ENDPOINT].limit == limit


def test_version_at_two_to_the_53_is_refused() -> None:
    assert_config_error(policy_config(version=2**53), f"{POLICY_PATH}.version")
    assert load_config(policy_config(version=2**53 - 1)).policies[ENDPOINT].version == 2**53 - 1


# -- identity --------------------------------------------------------------------------------


def test_anonymous_identity_without_anonymous_section_is_refused() -> None:
    assert_config_error(
        policy_config(identity="anonymous"), f"{POLICY_PATH}.identity", "anonymous section"
    )


def test_anonymous_identity_with_anonymous_section_loads() -> None:
    config = policy_config(identity="anonymous")
    config["anonymous"] = {"cookie_secret": SECRET}
    assert load_config(config).policies[ENDPOINT].identity is IdentityKind.ANONYMOUS


# -- routes ----------------------------------------------------------------------------------


def test_route_naming_an_unknown_endpoint_is_refused() -> None:
    config = make_config(routes={"POST /v1/ingest": "pdftalk.ingets"})
    assert_config_error(config, "routes.POST /v1/ingest", "pdftalk.ingets", "unknown endpoint")


@pytest.mark.parametrize("route", ["/v1/ingest", "POST", "P0ST /v1/ingest", "", "   "])
def test_malformed_route_key_is_refused(route: str) -> None:
    assert_config_error(make_config(routes={route: ENDPOINT}), f"routes.{route}", "METHOD")


def test_route_key_that_is_not_a_string_is_refused() -> None:
    assert_config_error(make_config(routes={42: ENDPOINT}), "routes.42")


def test_route_keys_are_normalised_to_upper_method_and_leading_slash() -> None:
    config = load_config(make_config(routes={"post v1/ingest": ENDPOINT, "GET /x/<id>": ENDPOINT}))
    assert dict(config.routes) == {"POST /v1/ingest": ENDPOINT, "GET /x/<id>": ENDPOINT}


# -- TOML ------------------------------------------------------------------------------------

_TOML = """
    [sentinel]
    redis_url = "memory://"
    require_noeviction = false

    [sentinel.policies."pdftalk.ingest"]
    algorithm = "sliding_window"
    rate = "10/minute"
    fail_mode = "closed"

    [sentinel.routes]
    "POST /v1/ingest" = "pdftalk.ingest"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sentinel.toml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


@pytest.mark.parametrize("as_text", [True, False])
def test_toml_file_with_sentinel_table_loads(tmp_path: Path, as_text: bool) -> None:
    path = write(tmp_path, _TOML)
    config = load_config(str(path) if as_text else path)
    assert config.require_noeviction is False
    assert config.policies["pdftalk.ingest"].rate == Rate(10, 60)
    assert dict(config.routes) == {"POST /v1/ingest": "pdftalk.ingest"}


def test_sentinel_facade_accepts_a_toml_path(tmp_path: Path) -> None:
    sentinel = Sentinel(write(tmp_path, _TOML), entry_points=False)
    assert sentinel.config.policies["pdftalk.ingest"].algorithm is Algorithm.SLIDING_WINDOW


def test_toml_errors_name_the_key_path_inside_the_sentinel_table(tmp_path: Path) -> None:
    path = write(tmp_path, _TOML.replace('rate = "10/minute"', 'rate = "10/minute"\n    burts = 3'))
    assert_config_error(path, "policies.pdftalk.ingest.burts", "unknown key")


def test_toml_file_without_sentinel_table_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, '[tool.sentinel]\nredis_url = "memory://"\n')
    assert_config_error(path, "sentinel", "[sentinel]", str(path))


def test_toml_file_whose_sentinel_key_is_not_a_table_is_refused(tmp_path: Path) -> None:
    assert_config_error(write(tmp_path, 'sentinel = "memory://"\n'), "sentinel", "[sentinel]")


def test_invalid_toml_is_a_config_error_naming_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "[sentinel\nredis_url = memory://\n")
    with pytest.raises(ConfigError, match="not valid TOML") as info:
        load_config(path)
    assert str(path) in str(info.value)


def test_missing_toml_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "absent.toml"
    with pytest.raises(ConfigError, match="cannot read") as info:
        load_config(path)
    assert str(path) in str(info.value)


def test_source_that_is_neither_mapping_nor_path_is_refused() -> None:
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_config(42)  # type: ignore[arg-type]


# -- immutability ----------------------------------------------------------------------------


def test_loaded_policy_is_frozen() -> None:
    policy = load_config(make_config()).policies[ENDPOINT]
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.burst = 1_000  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.rate.count = 1_000  # type: ignore[misc]


def test_loaded_config_is_frozen_and_its_mappings_read_only() -> None:
    config = load_config(make_config(routes={"POST /v1/ingest": ENDPOINT}))
    assert isinstance(config, SentinelConfig)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.redis_url = "redis://elsewhere"  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.policies["other"] = config.policies[ENDPOINT]  # type: ignore[index]
    with pytest.raises(TypeError):
        config.routes["GET /"] = ENDPOINT  # type: ignore[index]


def test_loaded_config_does_not_follow_later_changes_to_its_source() -> None:
    source = make_config(routes={"POST /v1/ingest": ENDPOINT})
    config = load_config(source)
    source["policies"][ENDPOINT]["rate"] = "1/day"
    source["policies"]["other"] = {"algorithm": "token_bucket"}
    source["routes"]["GET /"] = ENDPOINT
    assert config.policies[ENDPOINT].rate == Rate(5, 1)
    assert set(config.policies) == {ENDPOINT}
    assert set(config.routes) == {"POST /v1/ingest"}


def test_loading_a_loaded_config_returns_it_unchanged() -> None:
    config = load_config(make_config())
    assert load_config(config) is config
