"""Every bad input of issue 15 is a clear error at the right moment: a `ConfigError` naming
its key path at load, a `TypeError` from the facade, never a silent default or a 500."""

from __future__ import annotations

import dataclasses
import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry

from sentinel_core import ConfigError, DecisionReason, Sentinel, hookimpl, load_config
from sentinel_core._models import Policy, Rate
from sentinel_core.cli._main import main as cli_main
from sentinel_core.resilience._emergency import EmergencyLimiter
from sentinel_core.store._protocol import ServerReport
from sentinel_core.store._scripts import script_args
from sentinel_core.store._url import resolve

SECRET = "s" * 40
POLICY = {"algorithm": "token_bucket", "rate": "5/second", "fail_mode": "closed"}


def config(redis_url: str = "memory://", **extra: Any) -> dict[str, Any]:
    return {"redis_url": redis_url, "policies": {"api.ep": POLICY}, **extra}


def refused(source: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(source)
    return str(caught.value)


FAILING_AT_CONNECT = [
    # (URL, the message naming the part, what redis-py says when it builds a connection)
    (
        "redis://h:27301:6379",
        "redis_url: the port must be a number from 1 to 65535, got '27301:6379'",
        "Port could not be cast",
    ),
    (
        "redis://h:\u0666\u0663\u0667\u0669",
        "redis_url: the port must be a number from 1 to 65535, got '\u0666\u0663\u0667\u0669'",
        "Port could not be cast",
    ),
    (
        "redis://h/0?db=\u00b2",
        "redis_url: invalid value '\u00b2' for the option 'db'",
        "Invalid value for 'db'",
    ),
    (
        "redis://h?db=\u00b2",
        "redis_url: invalid value '\u00b2' for the option 'db'",
        "Invalid value for 'db'",
    ),
    ("redis://h/\u00b2", "redis_url: the database must be a number, got '\u00b2'", "db 0"),
    (
        "redis://h?ssl_cert_reqs=none",
        "redis_url: the option 'ssl_cert_reqs' needs a TLS URL (rediss:// or valkeys://)",
        "unexpected keyword argument 'ssl_cert_reqs'",
    ),
    (
        "redis://h?ssl_check_hostname=false",
        "redis_url: the option 'ssl_check_hostname' needs a TLS URL",
        "unexpected keyword argument 'ssl_check_hostname'",
    ),
    (
        "unix:///tmp/r.sock?ssl_certfile=c.pem",
        "redis_url: the option 'ssl_certfile' needs a TLS URL",
        "unexpected keyword argument 'ssl_certfile'",
    ),
    (
        "unix:///tmp/r.sock?db=\u00b2",
        "redis_url: invalid value '\u00b2' for the option 'db'",
        "Invalid value for 'db'",
    ),
    ("redis://[::1", "redis_url: '[::1' is not a bracketed IPv6 address", "Invalid IPv6 URL"),
    (
        "redis://[zz]:1",
        "redis_url: '[zz]:1' is not a bracketed IPv6 address",
        # Python 3.11.4+ refuses the host while parsing; older ones look up "zz" at connect.
        "does not appear to be an IPv4 or IPv6 address|connecting to zz:1",
    ),
]


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://h/1?db=2", "redis_url: the database is given twice: /1 and ?db=2"),
        ("redis://h?db=1&db=2", "redis_url: the option 'db' is given twice"),
        ("redis://h x", "redis_url: 'h x' is not a host name"),
        ("redis://h%20x", "redis_url: 'h%20x' is not a host name"),
        ("redis+cluster://h:27301:6379", "redis_url: the port must be a number from 1 to 65535"),
        ("redis+cluster://h:\u0661", "redis_url: the port must be a number from 1 to 65535"),
        ("redis+cluster://[::1:7000", "redis_url: '[::1:7000' is not a bracketed IPv6 address"),
        ("redis+cluster://h:1/\u00b2", "redis_url: nothing may follow the hosts of a cluster URL"),
        ("redis+cluster://h:1?db=1", "redis_url: nothing may follow the hosts of a cluster URL"),
        ("redis+sentinel://h:27301:6379/s", "redis_url: the port must be a number from 1 to"),
        ("redis+sentinel://h:1/s/\u00b2", "redis_url: expected redis+sentinel://host:port"),
        ("redis+sentinel://h:1/s?db=1", "redis_url: expected redis+sentinel://host:port"),
    ],
)
def test_cluster_sentinel_and_ambiguous_urls_are_refused_naming_the_part(
    url: str, message: str
) -> None:
    assert refused(config(url)).startswith(message)


@pytest.mark.parametrize("url", [url for url, _, _ in FAILING_AT_CONNECT])
def test_sentinel_check_says_what_is_wrong_with_the_url_without_a_traceback(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "sentinel.toml"
    path.write_text(f"[sentinel]\nredis_url = {json.dumps(url)}\n[sentinel.policies]\n")
    assert cli_main(["check", str(path)]) == 2
    printed = capsys.readouterr()
    assert "redis_url: " in printed.out + printed.err
    assert "Traceback" not in printed.out + printed.err
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["check", str(path), "--redis", url])
    assert exit_info.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://", "redis_url: no host in the URL; expected redis://host[:port][/db]"),
        ("redis://:@", "redis_url: no host in the URL; expected redis://host[:port][/db]"),
        ("redis://127.0.0.1:0", "redis_url: the port must be a number from 1 to 65535, got '0'"),
        ("redis://h:99999", "redis_url: the port must be a number from 1 to 65535, got '99999'"),
        ("redis://h/zero", "redis_url: the database must be a number, got 'zero'"),
        ("redis://h/0?db=x", "redis_url: invalid value 'x' for the option 'db'"),
        ("rediss://h/0?ssl_cert_reqs=maybe", "redis_url: invalid value 'maybe' for the option"),
        ("redis://h/0?client_name=", "redis_url: invalid value '' for the option 'client_name'"),
        ("redis://h/0?socket_timeout=5", "redis_url: unknown option 'socket_timeout' (allowed:"),
        ("redis://h/0?db", "redis_url: the query 'db' does not parse"),
        ("redis://h/0#x", "redis_url: a fragment (#...) has no meaning in a Redis URL"),
        ("unix://", "redis_url: expected unix:///path/to/redis.sock"),
        ("memory://here", "redis_url: memory:// takes nothing after the scheme"),
        ("http://x", "redis_url: unsupported scheme in 'http://x'; expected one of redis://"),
        ("redis+cluster://h:0", "redis_url: the port must be a number from 1 to 65535, got '0'"),
        *[(url, message) for url, message, _ in FAILING_AT_CONNECT],
    ],
)
def test_a_redis_url_that_does_not_parse_completely_is_refused(url: str, message: str) -> None:
    assert refused(config(url)).startswith(message)


@pytest.mark.parametrize(("url", "message", "cause"), FAILING_AT_CONNECT)
def test_each_url_refused_at_load_would_have_failed_at_connect(
    url: str, message: str, cause: str
) -> None:
    """The table above is not stricter than redis-py: each of its URLs fails (or, for
    ``/²``, quietly means db 0) when redis-py builds a connection from it."""
    if cause == "db 0":
        assert redis.ConnectionPool.from_url(url).make_connection().db == 0
        return
    with pytest.raises((ValueError, TypeError, redis.ConnectionError), match=_alternatives(cause)):
        redis.ConnectionPool.from_url(url, socket_connect_timeout=5).make_connection().connect()


def _alternatives(causes: str) -> str:
    """A pattern matching any of the ``|``-separated texts, each taken literally."""
    return "|".join(re.escape(cause) for cause in causes.split("|"))


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
        "redis+cluster://h:7000,[::1]:7001/",
        "rediss://h?ssl_ca_certs=/etc/ca.pem&ssl_certfile=c.pem&ssl_keyfile=k.pem",
        "redis://u:p@[2001:db8::1]:6380?db=3&client_name=a%20b",
    ],
)
def test_complete_redis_urls_load(url: str) -> None:
    assert load_config(config(url)).redis_url == url


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379/0",
        "REDIS://h:1/15?client_name=web",
        "rediss://user:pw@h:6380/2?ssl_cert_reqs=none&ssl_check_hostname=false",
        "redis://[::1]:6379?db=2",
        "unix:///tmp/redis.sock?db=1",
        "valkeys://h?ssl_cert_reqs=required",
    ],
)
def test_redis_py_builds_a_connection_from_every_url_the_loader_accepts(url: str) -> None:
    canonical = resolve(load_config(config(url)).redis_url)[1]
    redis.ConnectionPool.from_url(canonical).make_connection()


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


async def test_an_empty_tenant_id_is_refused_by_every_call_of_the_facade() -> None:
    """``""`` would be one bucket for every caller whose id came out empty."""
    facade = sentinel()
    calls = [
        lambda: facade.evaluate("api.ep", ""),
        lambda: facade.peek("api.ep", ""),
        lambda: facade.reset("api.ep", ""),
    ]
    for call in calls:
        with pytest.raises(ValueError, match="a tenant id must be a non-empty string"):
            call()
    for acall in (facade.aevaluate, facade.apeek, facade.areset):
        with pytest.raises(ValueError, match="a tenant id must be a non-empty string"):
            await acall("api.ep", "")


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
