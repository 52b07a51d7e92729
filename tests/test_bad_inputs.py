"""Every bad input of issue 15 is a clear error at the right moment: a `ConfigError` naming
its key path at load, a `TypeError` from the facade, never a silent default or a 500."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from sentinel_core import ConfigError, DecisionReason, Sentinel, hookimpl, load_config
from sentinel_core._models import Policy, Rate
from sentinel_core.resilience._emergency import EmergencyLimiter
from sentinel_core.store._protocol import ServerReport
from sentinel_core.store._scripts import script_args

SECRET = "s" * 40
POLICY = {"algorithm": "token_bucket", "rate": "5/second", "fail_mode": "closed"}


def config(redis_url: str = "memory://", **extra: Any) -> dict[str, Any]:
    return {"redis_url": redis_url, "policies": {"api.ep": POLICY}, **extra}


def refused(source: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(source)
    return str(caught.value)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://", "redis_url: no host in the URL; expected redis://host[:port][/db]"),
        ("redis://:@", "redis_url: no host in the URL; expected redis://host[:port][/db]"),
        ("redis://127.0.0.1:0", "redis_url: the port must be a number from 1 to 65535, got '0'"),
        ("redis://h:99999", "redis_url: the port must be a number from 1 to 65535, got '99999'"),
        ("redis://h/zero", "redis_url: the database must be a number, got 'zero'"),
        ("redis://h/0?db=x", "redis_url: invalid value 'x' for the option 'db'"),
        ("redis://h/0?ssl_cert_reqs=maybe", "redis_url: invalid value 'maybe' for the option"),
        ("redis://h/0?client_name=", "redis_url: invalid value '' for the option 'client_name'"),
        ("redis://h/0?socket_timeout=5", "redis_url: unknown option 'socket_timeout' (allowed:"),
        ("redis://h/0?db", "redis_url: the query 'db' does not parse"),
        ("redis://h/0#x", "redis_url: a fragment (#...) has no meaning in a Redis URL"),
        ("unix://", "redis_url: expected unix:///path/to/redis.sock"),
        ("memory://here", "redis_url: memory:// takes nothing after the scheme"),
        ("http://x", "redis_url: unsupported scheme in 'http://x'; expected one of redis://"),
        ("redis+cluster://h:0", "redis_url: the port must be a number from 1 to 65535, got '0'"),
    ],
)
def test_a_redis_url_that_does_not_parse_completely_is_refused(url: str, message: str) -> None:
    assert refused(config(url)).startswith(message)


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379/0",
        "redis://h",
        "REDIS://h:1/15?client_name=web",
        "rediss://user:pw@h:6380/2?ssl_cert_reqs=none&ssl_check_hostname=false",
        "redis://[::1]:6379/0",
        "unix:///tmp/redis.sock?db=1",
        "redis+sentinel://h:26379/primary/1",
    ],
)
def test_complete_redis_urls_load(url: str) -> None:
    assert load_config(config(url)).redis_url == url


def anonymous(**section: Any) -> dict[str, Any]:
    return config(anonymous={"cookie_secret": SECRET, **section})


def test_a_cookie_lifetime_past_400_days_is_refused() -> None:
    assert refused(anonymous(cookie_max_age_seconds=10**12)) == (
        "anonymous.cookie_max_age_seconds: must be between 1 and 34560000, got 1000000000000"
    )


@pytest.mark.parametrize("name", ["a b", "a;b", "a\r\nSet-Cookie: x=1", "é", "a=b", ""])
def test_a_cookie_name_that_is_not_an_rfc6265_token_is_refused(name: str) -> None:
    message = refused(anonymous(cookie_name=name))
    if name:
        assert message == (
            f"anonymous.cookie_name: {name!r} is not a cookie name: letters, digits and "
            "!#$%&'*+-.^_`|~ only"
        )
    else:
        assert message == "anonymous.cookie_name: expected a non-empty string, got ''"


def test_a_secret_that_is_not_utf8_text_is_refused_inline_and_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broken = "\udcff" * 40  # how Python decodes undecodable bytes of an environment
    assert refused(anonymous(cookie_secret=broken)) == (
        "anonymous.cookie_secret: secrets must be valid UTF-8 text"
    )
    monkeypatch.setenv("SENTINEL_TEST_BROKEN_KEY", broken)
    jwt_config = config(jwt={"key_env": "SENTINEL_TEST_BROKEN_KEY"})
    assert refused(jwt_config) == "jwt.key_env: secrets must be valid UTF-8 text"
    previous = anonymous(previous_cookie_secrets=[broken])
    assert (
        refused(previous) == "anonymous.previous_cookie_secrets: secrets must be valid UTF-8 text"
    )


def test_a_binary_file_is_not_a_toml_configuration(tmp_path: Path) -> None:
    path = tmp_path / "sentinel.toml"
    path.write_bytes(b"\xff\xfe\x00binary")
    assert refused(path) == f"{path} is not UTF-8 text, so not a TOML file"


def sentinel(*plugins: object) -> Sentinel:
    return Sentinel(config(), registry=CollectorRegistry(), plugins=plugins, entry_points=False)


@pytest.mark.parametrize("identity", [None, b"tenant", 42])
def test_evaluate_refuses_an_identity_that_is_neither_a_tenant_id_nor_an_identity(
    identity: Any,
) -> None:
    with pytest.raises(TypeError) as caught:
        sentinel().evaluate("api.ep", identity)
    name = type(identity).__name__
    assert str(caught.value) == f"identity must be a tenant id (str) or an Identity, not {name}"


async def test_aevaluate_refuses_it_too() -> None:
    with pytest.raises(TypeError, match="not NoneType"):
        await sentinel().aevaluate("api.ep", None)  # type: ignore[arg-type]


class Tiered:
    def __init__(self, **changes: Any) -> None:
        self.changes = changes

    @hookimpl
    def sentinel_resolve_policy(self, endpoint_id: str, identity: Any, policy: Policy) -> Policy:
        return dataclasses.replace(policy, **self.changes)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"cost": 9}, "sentinel_resolve_policy('api.ep').cost: cost 9 exceeds the burst 5"),
        ({"cost": 0}, "sentinel_resolve_policy('api.ep').cost: must be an integer >= 1, got 0"),
        ({"burst": 0}, "sentinel_resolve_policy('api.ep').burst: must be an integer >= 1"),
        ({"rate": Rate(0, 1)}, "sentinel_resolve_policy('api.ep').rate: must be an integer >= 1"),
        ({"burst": 2**40}, "sentinel_resolve_policy('api.ep').burst: too large: past 2**53"),
        (
            {"network_burst": 1, "cost": 2},
            "sentinel_resolve_policy('api.ep').cost: cost 2 exceeds the network_burst 1",
        ),
    ],
)
def test_a_policy_a_plugin_returns_is_validated(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        sentinel(Tiered(**changes)).evaluate("api.ep", "tenant")
    assert str(caught.value).startswith(message)


def test_a_valid_policy_from_a_plugin_decides() -> None:
    decision = sentinel(Tiered(burst=50)).evaluate("api.ep", "tenant")
    assert (decision.allowed, decision.limit) == (True, 50)
    unchanged = sentinel(Unchanged()).evaluate("api.ep", "tenant")
    assert (unchanged.allowed, unchanged.limit) == (True, 5)


class Unchanged:
    @hookimpl
    def sentinel_resolve_policy(self, endpoint_id: str, identity: Any, policy: Policy) -> Policy:
        return policy  # the configured policy itself: nothing to check again


def test_the_script_args_cache_is_bounded() -> None:
    assert script_args.cache_info().maxsize == 1_024


def test_the_emergency_limiter_charges_the_policys_cost() -> None:
    now = [0]
    limiter = EmergencyLimiter(clock_ns=lambda: now[0])
    rate = Rate(10, 1)  # capacity: one second, 10 tokens
    verdicts = [limiter.acquire("ep", rate, cost=4) for _ in range(3)]
    assert [v.allowed for v in verdicts] == [True, True, False]
    assert verdicts[2].remaining == 2
    now[0] = 200_000_000  # 0.2 s refill 2 tokens: 4 again
    assert limiter.acquire("ep", rate, cost=4).allowed
    assert limiter.acquire("slow", Rate(1, 60), cost=2).allowed, "capacity covers one cost"


class SlowCheck:
    """A memory store whose start-up check is slow and counts how many run at once."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.running = 0
        self.most = 0
        self.calls = 0
        self.lock = threading.Lock()
        self.release = threading.Event()

    def run(self, call: Any) -> Any:
        return self.store.run(call)

    def check(self, require_noeviction: bool) -> ServerReport:
        with self.lock:
            self.calls += 1
            self.running += 1
            self.most = max(self.most, self.running)
        self.release.wait(5)
        with self.lock:
            self.running -= 1
        return self.store.check(require_noeviction)


def test_the_deferred_check_runs_on_one_request_thread_at_a_time() -> None:
    limiter = Sentinel(
        {"redis_url": "memory://", "policies": {"api.ep": {**POLICY, "rate": "100/second"}}},
        registry=CollectorRegistry(),
        entry_points=False,
    )
    slow = SlowCheck(limiter.store)
    limiter._sync_store = slow  # type: ignore[assignment]
    limiter._check_deferred = True
    results: list[DecisionReason] = []
    threads = [
        threading.Thread(target=lambda: results.append(limiter.evaluate("api.ep", "t").reason))
        for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    while len(results) < 7:  # seven threads decide without waiting for the one checking
        threading.Event().wait(0.001)
    slow.release.set()
    for thread in threads:
        thread.join()
    assert results == [DecisionReason.ALLOWED] * 8
    assert (slow.calls, slow.most) == (1, 1)
    assert not limiter._check_deferred
