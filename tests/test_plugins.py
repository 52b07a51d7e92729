"""pluggy hooks (SPEC §6): entry-point discovery, each hook's effect, and its documentation.

The plugin under test is a real distribution (tests/support/plugin_dist) installed for
the test, discovered through the ``sentinel`` entry-point group by `importlib.metadata`:
its `sentinel_identify` turns an ``X-Api-Key`` into an account identity, its
`sentinel_resolve_policy` gives the "pro" account five times the limit, and both show
in `Sentinel.guard`'s answers and in the buckets on the private Redis.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pluggy
import pytest
import redis

from sentinel_core import (
    AnonymousIdentity,
    BreakerState,
    ConfigError,
    Policy,
    RequestView,
    Sentinel,
    hookimpl,
    hookspecs,
)
from sentinel_core._plugins import Hooks, make_plugin_manager
from sentinel_core.adapter import Outcome
from sentinel_core.identity._keys import compact_hash
from sentinel_core.resilience._breaker import CircuitBreaker
from tests.support.http import header, make_sentinel, request_view
from tests.support.plugins import ENTRY_POINT, PACKAGE, install_dist_info, pip_install
from tests.support.redis_server import RedisServer, free_port
from tests.support.tokens import HS_SECRET, bearer, hs256

ENDPOINT = "api.search"
FREE_KEY, PRO_KEY = "key-free-123", "key-pro-456"


def config(redis_url: str, *, jwt: bool = True, **policy: Any) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "redis_url": redis_url,
        "policies": {
            ENDPOINT: {
                "algorithm": "token_bucket",
                "rate": "1/hour",
                "burst": 2,
                "fail_mode": "closed",
                **policy,
            }
        },
    }
    if jwt:
        settings["jwt"] = {"key": HS_SECRET}
    return settings


def hook_names() -> list[str]:
    return sorted(
        name
        for name, function in inspect.getmembers(hookspecs, inspect.isfunction)
        if hasattr(function, f"{hookspecs.PROJECT_NAME}_spec")
    )


@pytest.fixture
def fresh_plugin_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget any earlier import of the plugin, so this test imports its own install."""
    monkeypatch.delitem(sys.modules, PACKAGE, raising=False)


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_plugin_module: None) -> Path:
    site = tmp_path / "site"
    site.mkdir()
    install_dist_info(site)
    monkeypatch.syspath_prepend(str(site))
    return site


@pytest.fixture
def client(redis_url: str, redis_server: RedisServer) -> Iterator[redis.Redis]:
    connection = redis_server.client()
    yield connection
    connection.close()


def with_key(sentinel: Sentinel, api_key: str | None, **headers: str) -> Outcome:
    if api_key is not None:
        headers["X-Api-Key"] = api_key
    return sentinel.guard(ENDPOINT, request_view(headers=headers))


def assert_plugin_identity_and_tier_are_used(sentinel: Sentinel, client: redis.Redis) -> None:
    free = [with_key(sentinel, FREE_KEY) for _ in range(3)]
    pro = [with_key(sentinel, PRO_KEY) for _ in range(11)]
    assert [o.status for o in free] == [200, 200, 429]
    assert [o.status for o in pro] == [200] * 10 + [429]
    assert (header(free[0].headers, "RateLimit-Policy") or "").startswith(f'"{ENDPOINT}";q=2;')
    assert (header(pro[0].headers, "RateLimit-Policy") or "").startswith(f'"{ENDPOINT}";q=10;')
    expected = {
        f"sentinel:v1:{{{compact_hash(account.decode())}}}:{ENDPOINT}:1"
        for account in (b"account:acme", b"account:globex")
    }
    assert {key.decode() for key in client.keys("*")} == expected


def test_an_entry_point_plugin_supplies_identity_and_tier_through_guard(
    installed: Path, redis_url: str, client: redis.Redis
) -> None:
    sentinel = make_sentinel(config(redis_url), entry_points=True)
    try:
        plugin = sentinel.plugin_manager.get_plugin(ENTRY_POINT)
        assert plugin is not None
        assert Path(plugin.__file__).is_relative_to(installed)
        assert_plugin_identity_and_tier_are_used(sentinel, client)
        # No API key: the plugin passes and the built-in JWT identity answers.
        assert with_key(sentinel, None).status == 401
        token = bearer(hs256("jwt-tenant"))
        assert with_key(sentinel, None, Authorization=token).status == 200
        assert with_key(sentinel, "not-a-known-key", Authorization=token).status == 200
    finally:
        sentinel.close()


@pytest.mark.slow
def test_a_pip_installed_plugin_distribution_is_discovered(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fresh_plugin_module: None,
    redis_url: str,
    client: redis.Redis,
) -> None:
    site = tmp_path / "site"
    pip_install(tmp_path, site)
    monkeypatch.syspath_prepend(str(site))
    sentinel = make_sentinel(config(redis_url), entry_points=True)
    try:
        assert sentinel.plugin_manager.get_plugin(ENTRY_POINT) is not None
        assert_plugin_identity_and_tier_are_used(sentinel, client)
    finally:
        sentinel.close()


def test_entry_points_false_loads_no_installed_plugin(installed: Path) -> None:
    sentinel = make_sentinel(config("memory://"), entry_points=False)
    assert sentinel.plugin_manager.get_plugin(ENTRY_POINT) is None
    assert with_key(sentinel, PRO_KEY).status == 401


def test_a_plugin_both_passed_and_installed_is_registered_once(installed: Path) -> None:
    import importlib

    module = importlib.import_module(PACKAGE)
    sentinel = make_sentinel(config("memory://"), plugins=[module], entry_points=True)
    assert [p for p in sentinel.plugin_manager.get_plugins() if p is module] == [module]
    outcomes = [with_key(sentinel, FREE_KEY) for _ in range(3)]
    assert [o.status for o in outcomes] == [200, 200, 429]


def test_a_misspelt_hook_is_refused_at_startup() -> None:
    class Typo:
        @hookimpl
        def sentinel_identfy(self, request: Any) -> None:
            """Never called: the name matches no hook."""

    with pytest.raises(pluggy.PluginValidationError, match="sentinel_identfy"):
        make_sentinel(config("memory://"), plugins=[Typo()])


def test_a_plugin_only_tenant_policy_needs_no_jwt_section() -> None:
    class ApiKeys:
        @hookimpl
        def sentinel_identify(self, request: RequestView) -> str | None:
            return request.headers.get("x-api-key")

    sentinel = make_sentinel(config("memory://", jwt=False), plugins=[ApiKeys()])
    sentinel.validate_endpoint(ENDPOINT)
    assert with_key(sentinel, "k1").status == 200
    unidentified = with_key(sentinel, None)
    assert unidentified.status == 401
    assert header(unidentified.headers, "WWW-Authenticate") == "Bearer"
    with pytest.raises(ConfigError, match="jwt"):
        make_sentinel(config("memory://", jwt=False)).validate_endpoint(ENDPOINT)


def test_identify_may_return_an_identity_and_an_empty_string_passes() -> None:
    answers: list[Any] = []

    class Fixed:
        @hookimpl
        def sentinel_identify(self) -> Any:
            return answers[-1]

    sentinel = make_sentinel(config("memory://"), plugins=[Fixed()])
    answers.append(AnonymousIdentity("app-install-1", "mobile", b"k" * 32))
    first = with_key(sentinel, None)
    assert first.decision is not None
    assert (
        first.decision.identity_hash == AnonymousIdentity("app-install-1", "mobile", b"k" * 32).hash
    )
    answers.append("")
    assert with_key(sentinel, None).status == 401  # "" is no identity: the JWT answers
    answers.append(42)
    with pytest.raises(TypeError, match="sentinel_identify must return"):
        with_key(sentinel, None)


def test_resolve_policy_may_not_rename_the_endpoint_or_return_junk() -> None:
    answers: list[Any] = []

    class Tiers:
        @hookimpl
        def sentinel_resolve_policy(self, policy: Policy) -> Any:
            return answers[-1](policy)

    sentinel = make_sentinel(config("memory://"), plugins=[Tiers()])
    answers.append(lambda policy: dataclasses.replace(policy, endpoint_id="per-tenant-123"))
    with pytest.raises(ValueError, match="per-tenant-123"):
        sentinel.evaluate(ENDPOINT, "tenant")
    answers.append(lambda policy: {"burst": 100})
    with pytest.raises(TypeError, match="must return a Policy"):
        sentinel.evaluate(ENDPOINT, "tenant")
    answers.append(lambda policy: None)
    assert sentinel.evaluate(ENDPOINT, "tenant").limit == 2


def test_decision_observers_get_the_request_view_or_none() -> None:
    seen: list[tuple[str, Any]] = []

    class Observer:
        @hookimpl
        def sentinel_decision(self, decision: Any, request: Any) -> None:
            seen.append((decision.reason.value, request))

    sentinel = make_sentinel(config("memory://"), plugins=[Observer()])
    view = request_view(headers={"Authorization": bearer(hs256())})
    sentinel.guard(ENDPOINT, view)
    sentinel.evaluate(ENDPOINT, "worker")
    sentinel.guard(ENDPOINT, request_view())  # 401: no decision, no call
    assert seen == [("allowed", view), ("allowed", None)]


def test_breaker_transitions_reach_the_hook() -> None:
    transitions: list[tuple[BreakerState, BreakerState]] = []

    class Watcher:
        @hookimpl
        def sentinel_breaker_transition(
            self, previous: BreakerState, current: BreakerState
        ) -> None:
            transitions.append((previous, current))

    dead = f"redis://127.0.0.1:{free_port()}/0"
    settings = {**config(dead), "breaker": {"failure_threshold": 2, "open_seconds": 30}}
    sentinel = make_sentinel(settings, plugins=[Watcher()])
    try:
        for _ in range(3):
            sentinel.evaluate(ENDPOINT, "tenant")
    finally:
        sentinel.close()
    assert transitions == [(BreakerState.CLOSED, BreakerState.OPEN)]

    # The rest of the cycle, on a breaker driven by a fake clock through the same facade.
    transitions.clear()
    now = [0.0]
    hooks = Hooks(make_plugin_manager([Watcher()], entry_points=False))
    breaker = CircuitBreaker(1, 10, clock=lambda: now[0], on_transition=hooks.breaker_transition)
    breaker.record_failure(breaker.acquire() or pytest.fail("closed breaker refused"))
    now[0] = 10.0
    probe = breaker.acquire()
    assert probe is not None
    breaker.record_failure(probe)
    now[0] = 20.0
    probe = breaker.acquire()
    assert probe is not None
    breaker.record_success(probe)
    closed, opened, half_open = BreakerState.CLOSED, BreakerState.OPEN, BreakerState.HALF_OPEN
    assert transitions == [
        (closed, opened),
        (opened, half_open),
        (half_open, opened),
        (opened, half_open),
        (half_open, closed),
    ]


# --- the hook spec is documented and every hook is exercised ---------------------------


def test_every_hook_has_reference_documentation() -> None:
    names = hook_names()
    assert names == [
        "sentinel_breaker_transition",
        "sentinel_decision",
        "sentinel_exempt",
        "sentinel_identify",
        "sentinel_resolve_policy",
    ]
    for name in names:
        function = getattr(hookspecs, name)
        doc = inspect.getdoc(function) or ""
        assert len(doc) > 200, f"{name} needs reference documentation"
        for parameter in inspect.signature(function).parameters:
            assert f"``{parameter}``" in doc, f"{name}'s docstring does not explain {parameter}"


def test_every_hook_is_called_by_one_guarded_request_on_a_failing_redis() -> None:
    """A recorder implementing every hook sees each one fire; a hook added to the spec
    without being wired (or without this recorder learning it) fails here."""
    called: set[str] = set()

    class Recorder:
        @hookimpl
        def sentinel_exempt(self, request: Any, policy: Any) -> None:
            called.add("sentinel_exempt")

        @hookimpl
        def sentinel_identify(self, request: Any, policy: Any) -> None:
            called.add("sentinel_identify")

        @hookimpl
        def sentinel_resolve_policy(self, endpoint_id: str, identity: Any, policy: Any) -> None:
            called.add("sentinel_resolve_policy")

        @hookimpl
        def sentinel_decision(self, decision: Any, request: Any) -> None:
            called.add("sentinel_decision")

        @hookimpl
        def sentinel_breaker_transition(self, previous: Any, current: Any) -> None:
            called.add("sentinel_breaker_transition")

    dead = f"redis://127.0.0.1:{free_port()}/0"
    settings = {**config(dead), "breaker": {"failure_threshold": 1, "open_seconds": 30}}
    sentinel = make_sentinel(settings, plugins=[Recorder()])
    try:
        outcome = sentinel.guard(ENDPOINT, request_view(headers={"Authorization": bearer(hs256())}))
    finally:
        sentinel.close()
    assert outcome.status == 503
    assert sorted(called) == hook_names()


def test_a_plugin_passed_twice_is_registered_and_called_once() -> None:
    class Counting:
        def __init__(self) -> None:
            self.decisions = 0

        @hookimpl
        def sentinel_decision(self, decision: Any, request: Any) -> None:
            self.decisions += 1

    counting = Counting()
    sentinel = make_sentinel(config("memory://"), plugins=[counting, counting])
    sentinel.evaluate(ENDPOINT, "tenant-a")

    assert [p for p in sentinel.plugin_manager.get_plugins() if p is counting] == [counting]
    assert counting.decisions == 1


def test_an_entry_point_whose_name_is_blocked_or_taken_is_not_loaded(installed: Path) -> None:
    from sentinel_core._plugins import load_entry_points

    blocked = make_plugin_manager(entry_points=False)
    blocked.set_blocked(ENTRY_POINT)
    assert load_entry_points(blocked) == []
    assert PACKAGE not in sys.modules  # not even imported

    class StandIn:
        """Another plugin registered under the entry point's name first."""

    taken = make_plugin_manager(entry_points=False)
    stand_in = StandIn()
    taken.register(stand_in, name=ENTRY_POINT)
    assert load_entry_points(taken) == []
    assert taken.get_plugin(ENTRY_POINT) is stand_in
    assert PACKAGE not in sys.modules

    loaded = make_plugin_manager(entry_points=True)
    assert loaded.get_plugin(ENTRY_POINT) is not None
    assert load_entry_points(loaded) == []  # loading again adds nothing
