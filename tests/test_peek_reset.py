"""Peek and reset (SPEC §3, §8; issue 17): `Sentinel.peek`/`apeek` give the decision a
request would get and write nothing (the bucket's value and PTTL untouched);
`reset`/`areset` refill one identity's buckets by script; ``sentinel peek`` and
``sentinel reset`` do the same from a shell."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry

from sentinel_core import RequestView, Sentinel
from sentinel_core.cli._main import main
from sentinel_core.errors import UnknownEndpointError
from sentinel_core.identity._keys import TenantIdentity
from tests.conftest import make_config
from tests.support.redis_server import free_port
from tests.support.tokens import COOKIE_SECRET

POLICIES: dict[str, dict[str, Any]] = {
    "tb": {"algorithm": "token_bucket", "rate": "1/hour", "burst": 3, "fail_mode": "closed"},
    "sw": {"algorithm": "sliding_window", "rate": "3/hour", "fail_mode": "closed"},
    "layered": {"algorithm": "token_bucket", "rates": ["3/minute", "5/day"], "fail_mode": "closed"},
    "leases": {"algorithm": "concurrency", "limit": 2, "fail_mode": "closed"},
}
BUCKETS = ["tb", "sw", "layered"]


@pytest.fixture
def sentinel(redis_url: str) -> Iterator[Sentinel]:
    client = redis.Redis.from_url(redis_url)
    client.flushall()
    client.close()
    sentinel = Sentinel(
        make_config(redis_url, **POLICIES), registry=CollectorRegistry(), entry_points=False
    )
    yield sentinel
    sentinel.close()


def state(sentinel: Sentinel, client: redis.Redis, endpoint_id: str) -> list[Any]:
    keys = TenantIdentity("t").bucket_keys(sentinel.policy(endpoint_id))
    return [(client.get(key), client.pttl(key)) for key in keys]


@pytest.mark.parametrize("endpoint_id", BUCKETS)
def test_peek_leaves_the_value_and_the_ttl_untouched(
    sentinel: Sentinel, redis_url: str, endpoint_id: str
) -> None:
    client = redis.Redis.from_url(redis_url)
    try:
        assert sentinel.peek(endpoint_id, "t").remaining == 2  # a fresh bucket: nothing written
        assert all(value is None for value, _ in state(sentinel, client, endpoint_id))
        sentinel.evaluate(endpoint_id, "t")
        before = state(sentinel, client, endpoint_id)
        peeks = [sentinel.peek(endpoint_id, "t") for _ in range(5)]
        after = state(sentinel, client, endpoint_id)
    finally:
        client.close()
    assert {(d.allowed, d.remaining) for d in peeks} == {(True, 1)}
    for (value, ttl), (value_after, ttl_after) in zip(before, after, strict=True):
        assert value_after == value
        assert 0 <= ttl - ttl_after <= 1_000  # only time passed: never extended
    assert sentinel.evaluate(endpoint_id, "t").remaining == 1  # the peeks took nothing


@pytest.mark.parametrize("endpoint_id", BUCKETS)
def test_reset_restores_the_full_burst(sentinel: Sentinel, endpoint_id: str) -> None:
    assert [sentinel.evaluate(endpoint_id, "t").allowed for _ in range(4)] == [True] * 3 + [False]
    denied = sentinel.peek(endpoint_id, "t")
    assert not denied.allowed
    assert denied.retry_after_seconds is not None
    sentinel.reset(endpoint_id, "t")
    # the local denial this process remembered is gone too
    assert [sentinel.evaluate(endpoint_id, "t").allowed for _ in range(4)] == [True] * 3 + [False]


@pytest.mark.parametrize("endpoint_id", BUCKETS)
async def test_the_async_twins(sentinel: Sentinel, endpoint_id: str) -> None:
    try:
        for _ in range(3):
            await sentinel.aevaluate(endpoint_id, "t")
        assert not (await sentinel.apeek(endpoint_id, "t")).allowed
        await sentinel.areset(endpoint_id, "t")
        assert (await sentinel.apeek(endpoint_id, "t")).remaining == 2
        assert (await sentinel.aevaluate(endpoint_id, "t")).allowed
    finally:
        await sentinel.aclose()


def test_peek_on_the_memory_store_and_a_shadow_policy() -> None:
    policy = {**POLICIES["tb"], "shadow": True}
    sentinel = Sentinel(
        make_config("memory://", tb=policy), registry=CollectorRegistry(), entry_points=False
    )
    for _ in range(3):
        sentinel.evaluate("tb", "t")
    peek = sentinel.peek("tb", "t")
    assert (peek.allowed, peek.would_allow, peek.shadow) == (True, False, True)


def test_peek_and_reset_refuse_what_they_do_not_apply_to(sentinel: Sentinel) -> None:
    with pytest.raises(ValueError, match="concurrency"):
        sentinel.peek("leases", "t")
    with pytest.raises(ValueError, match="usage"):
        sentinel.reset("leases", "t")
    with pytest.raises(UnknownEndpointError):
        sentinel.peek("nope", "t")


# -- the command line ------------------------------------------------------------------


def write(tmp_path: Path, url: str) -> str:
    path = tmp_path / "sentinel.toml"
    path.write_text(
        f'[sentinel]\nredis_url = "{url}"\n'
        '[sentinel.policies."api.tb"]\nalgorithm = "token_bucket"\nrate = "1/hour"\n'
        'burst = 2\nfail_mode = "closed"\n'
        '[sentinel.policies."api.leases"]\nalgorithm = "concurrency"\nlimit = 2\n'
        'fail_mode = "closed"\n',
        encoding="utf-8",
    )
    return str(path)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_the_cli_peeks_and_resets(
    redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(tmp_path, redis_url)
    client = redis.Redis.from_url(redis_url)
    client.flushall()
    client.close()
    sentinel = Sentinel(config, registry=CollectorRegistry(), entry_points=False)
    try:
        assert run(capsys, "peek", config, "api.tb", "acme") == (
            0,
            "sentinel peek: api.tb: allowed (1 of 2 would remain, full in 3600s)\n",
        )
        sentinel.evaluate("api.tb", "acme")
        sentinel.evaluate("api.tb", "acme")
        code, out = run(capsys, "peek", config, "api.tb", "acme")
        assert code == 0
        assert out.startswith("sentinel peek: api.tb: rate_limited (0 of 2 would remain")
        assert "retry after" in out
        assert run(capsys, "reset", config, "api.tb", "acme") == (
            0,
            "sentinel reset: api.tb: acme's buckets are full again\n",
        )
        assert sentinel.peek("api.tb", "acme").remaining == 1
    finally:
        sentinel.close()


def test_the_cli_prints_a_tenant_argument_escaped_and_refuses_an_empty_one(
    redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(tmp_path, redis_url)
    hostile = "acme\x1b[2J\x1b]0;owned\x07\r\u202e"
    code, out = run(capsys, "reset", config, "api.tb", hostile)
    assert code == 0
    assert out == (
        "sentinel reset: api.tb: acme\\x1b[2J\\x1b]0;owned\\x07\\r\\u202e's buckets are full "
        "again\n"
    )
    assert run(capsys, "reset", config, "api.tb", "caf\u00e9") == (
        0,
        "sentinel reset: api.tb: caf\u00e9's buckets are full again\n",  # printable: as is
    )
    code, out = run(capsys, "peek", config, "api.tb", "")
    assert (code, out) == (2, "sentinel peek: a tenant id must be a non-empty string\n")


def test_the_cli_says_what_is_wrong(
    redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(tmp_path, redis_url)
    code, out = run(capsys, "reset", config, "api.leases", "acme")
    assert (code, "token_bucket and sliding_window" in out) == (2, True)
    code, out = run(capsys, "peek", config, "api.nope", "acme")
    assert (code, "api.nope" in out) == (2, True)
    code, out = run(capsys, "peek", str(tmp_path / "absent.toml"), "api.tb", "acme")
    assert (code, "configuration error" in out) == (2, True)
    dead = f"redis://127.0.0.1:{free_port()}/0"
    code, out = run(capsys, "reset", config, "api.tb", "acme", "--redis", dead)
    assert (code, "cannot reach" in out) == (1, True)


# -- anonymous policies and quotas (issue 26, issue 27) ----------------------------------

ANONYMOUS = {
    "login": {
        "algorithm": "token_bucket",
        "rate": "1/hour",
        "burst": 2,
        "identity": "anonymous",
        "fail_mode": "closed",
    },
    "plan": {"algorithm": "quota", "rate": "2/day", "fail_mode": "closed"},
}


@pytest.fixture
def anonymous(redis_url: str) -> Iterator[Sentinel]:
    client = redis.Redis.from_url(redis_url)
    client.flushall()
    client.close()
    config = {
        **make_config(redis_url, **ANONYMOUS),
        "anonymous": {"cookie_secret": COOKIE_SECRET, "secure": False},
    }
    sentinel = Sentinel(config, registry=CollectorRegistry(), entry_points=False)
    yield sentinel
    sentinel.close()


def login_request(cookie: str | None = None) -> RequestView:
    cookies = {} if cookie is None else {"sentinel_device": cookie}
    return RequestView("POST", "/login", {}, cookies, "203.0.113.9")


def test_an_anonymous_policy_refuses_a_tenant_id_instead_of_writing_a_useless_key(
    anonymous: Sentinel, redis_url: str
) -> None:
    for admin in (anonymous.peek, anonymous.reset):
        with pytest.raises(ValueError, match=r"anonymous policy.*device AND one network"):
            admin("login", "1.2.3.4")
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.dbsize() == 0
    finally:
        client.close()


def test_peek_and_reset_reach_the_buckets_a_request_of_that_client_uses(
    anonymous: Sentinel,
) -> None:
    first = anonymous.guard("login", login_request())
    assert first.cookie is not None
    cookie = first.cookie.value
    assert anonymous.guard("login", login_request(cookie)).allowed
    assert not anonymous.guard("login", login_request(cookie)).allowed
    client = anonymous.anonymous_identity("203.0.113.9", cookie)
    assert not anonymous.peek("login", client).allowed
    device_id = cookie.split(".")[1]  # the bare device id names the same device
    assert anonymous.anonymous_identity("203.0.113.9", device_id).hash == client.hash
    anonymous.reset("login", client)
    assert anonymous.peek("login", client).remaining == 1
    assert anonymous.guard("login", login_request(cookie)).allowed


@pytest.mark.parametrize(
    ("address", "device", "problem"),
    [
        ("not-an-address", "A" * 22, "not an IP address"),
        ("203.0.113.9", "v1.forged.cookie", "neither a device cookie"),
    ],
)
def test_anonymous_identity_says_what_is_wrong(
    anonymous: Sentinel, address: str, device: str, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        anonymous.anonymous_identity(address, device)


def test_anonymous_identity_needs_the_anonymous_section(sentinel: Sentinel) -> None:
    with pytest.raises(ValueError, match="no anonymous section"):
        sentinel.anonymous_identity("203.0.113.9", "A" * 22)


async def test_reset_starts_a_quota_period_again_from_zero(anonymous: Sentinel) -> None:
    try:
        assert [anonymous.evaluate("plan", "acme").allowed for _ in range(3)] == [
            True,
            True,
            False,
        ]
        anonymous.reset("plan", "acme")
        assert anonymous.usage("plan", "acme").used == 0
        assert anonymous.evaluate("plan", "acme").allowed
        await anonymous.areset("plan", "acme")
        assert (await anonymous.ausage("plan", "acme")).used == 0
        with pytest.raises(ValueError, match="peek applies to token_bucket"):
            anonymous.peek("plan", "acme")
    finally:
        await anonymous.aclose()


def test_a_quota_reset_on_the_memory_store() -> None:
    sentinel = Sentinel(
        make_config("memory://", plan=ANONYMOUS["plan"]),
        registry=CollectorRegistry(),
        entry_points=False,
    )
    for _ in range(2):
        sentinel.evaluate("plan", "acme")
    assert not sentinel.evaluate("plan", "acme").allowed
    sentinel.reset("plan", "acme")
    assert sentinel.evaluate("plan", "acme").allowed


ADMIN_CONFIG = """
[sentinel]
redis_url = "{url}"
[sentinel.jwt]
key_env = "SENTINEL_TEST_UNSET_JWT_KEY"
[sentinel.anonymous]
cookie_secret_env = "SENTINEL_TEST_COOKIE_SECRET"
secure = false
[sentinel.policies."api.tb"]
algorithm = "token_bucket"
rate = "1/hour"
burst = 2
fail_mode = "closed"
[sentinel.policies.login]
algorithm = "token_bucket"
rate = "1/hour"
burst = 2
identity = "anonymous"
fail_mode = "closed"
[sentinel.policies.member]
algorithm = "token_bucket"
rate = "1/hour"
burst = 2
identity = "user"
fail_mode = "closed"
[sentinel.policies.plan]
algorithm = "quota"
rate = "2/day"
fail_mode = "closed"
[sentinel.routes]
"POST /login" = "login"
"""


@pytest.fixture
def admin_config(tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.delenv("SENTINEL_TEST_UNSET_JWT_KEY", raising=False)
    monkeypatch.delenv("SENTINEL_TEST_COOKIE_SECRET", raising=False)
    client = redis.Redis.from_url(redis_url)
    client.flushall()
    client.close()
    path = tmp_path / "sentinel.toml"
    path.write_text(ADMIN_CONFIG.format(url=redis_url), encoding="utf-8")
    return str(path)


def test_peek_reset_and_usage_need_neither_secret_for_a_tenant_policy(
    admin_config: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = run(capsys, "check", admin_config)
    assert (code, "SENTINEL_TEST_UNSET_JWT_KEY is not set" in out) == (2, True)
    assert run(capsys, "peek", admin_config, "api.tb", "acme")[0] == 0
    assert run(capsys, "reset", admin_config, "api.tb", "acme")[0] == 0
    assert run(capsys, "usage", admin_config, "plan", "acme")[0] == 0


def test_the_cli_resets_a_quota(admin_config: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "reset", admin_config, "plan", "acme") == (
        0,
        "sentinel reset: plan: acme's count in the current period is 0 again\n",
    )


def test_the_cli_asks_for_the_device_and_network_of_an_anonymous_policy(
    admin_config: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SENTINEL_TEST_COOKIE_SECRET", COOKIE_SECRET)
    code, out = run(capsys, "reset", admin_config, "login", "1.2.3.4")
    assert code == 2
    assert "anonymous policy" in out
    assert "--device" in out
    device = "A" * 22
    assert run(capsys, "reset", admin_config, "login", "1.2.3.4", "--device", device) == (
        0,
        "sentinel reset: login: 1.2.3.4's buckets are full again\n",
    )
    code, out = run(capsys, "peek", admin_config, "login", "1.2.3.4", "--device", device)
    assert (code, out.startswith("sentinel peek: login: allowed (1 of 2")) == (0, True)
    code, out = run(capsys, "peek", admin_config, "login", "nowhere", "--device", device)
    assert (code, "not an IP address" in out) == (2, True)
    code, out = run(capsys, "peek", admin_config, "login", "1.2.3.4", "--device", "v1.x.y")
    assert (code, "neither a device cookie" in out) == (2, True)
    code, out = run(capsys, "peek", admin_config, "api.tb", "acme", "--device", device)
    assert (code, "--device applies to anonymous and user policies" in out) == (2, True)


def test_an_anonymous_policy_without_its_secret_is_a_configuration_error(
    admin_config: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = run(capsys, "peek", admin_config, "login", "1.2.3.4", "--device", "A" * 22)
    assert (code, "anonymous.cookie_secret_env" in out) == (2, True)


def test_the_cli_escapes_what_it_echoes(
    admin_config: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = run(capsys, "reset", admin_config, "api.tb", "\x1b[31mred")
    assert code == 0
    assert "\x1b" not in out
    assert "\\x1b[31mred's buckets" in out


def test_a_user_policy_takes_the_user_id_or_an_anonymous_client(
    admin_config: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SENTINEL_TEST_COOKIE_SECRET", COOKIE_SECRET)
    assert run(capsys, "reset", admin_config, "member", "user-42") == (
        0,
        "sentinel reset: member: user-42's buckets are full again\n",
    )
    code, out = run(capsys, "peek", admin_config, "member", "1.2.3.4", "--device", "A" * 22)
    assert (code, out.startswith("sentinel peek: member: allowed (1 of 2")) == (0, True)
