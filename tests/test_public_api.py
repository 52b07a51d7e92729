"""The curated public API: what users import from ``sentinel_core``, what adapters
import from ``sentinel_core.adapter``, and nothing of the machinery: the facade's engine,
hooks and breaker are private, reached through `policy`, `breaker_state` and
`plugin_manager`."""

from __future__ import annotations

import pluggy
import pytest
from prometheus_client import CollectorRegistry

import sentinel_core
import sentinel_core.adapter
from tests.conftest import make_config
from tests.support.redis_server import free_port


def test_the_public_api_is_the_curated_list_and_adapters_have_their_own_module() -> None:
    assert len(sentinel_core.__all__) <= 25
    assert {"Sentinel", "Decision", "DecisionReason", "ConfigError", "hookimpl"} <= set(
        sentinel_core.__all__
    )
    assert not {"CircuitBreaker", "EmergencyLimiter", "Outcome", "AsyncStore"} & set(
        sentinel_core.__all__
    )
    assert all(hasattr(sentinel_core, name) for name in sentinel_core.__all__)
    assert all(hasattr(sentinel_core.adapter, name) for name in sentinel_core.adapter.__all__)


def memory_sentinel() -> sentinel_core.Sentinel:
    policy = {"algorithm": "token_bucket", "rate": "5/second", "fail_mode": "closed"}
    config = make_config("memory://", api__ep=policy)
    return sentinel_core.Sentinel(config, registry=CollectorRegistry(), entry_points=False)


def test_the_facade_keeps_its_engine_hooks_and_breaker_private() -> None:
    sentinel = memory_sentinel()
    public = {name for name in dir(sentinel) if not name.startswith("_")}
    assert not {"engine", "hooks", "breaker"} & public
    assert {"policy", "breaker_state", "plugin_manager"} <= public


def test_policy_is_the_configured_policy_and_unknown_ids_raise() -> None:
    sentinel = memory_sentinel()
    policy = sentinel.policy("api.ep")
    assert isinstance(policy, sentinel_core.Policy)
    assert (policy.endpoint_id, policy.rate) == ("api.ep", sentinel_core.Rate(5, 1))
    with pytest.raises(sentinel_core.UnknownEndpointError):
        sentinel.policy("api.missing")


def test_breaker_state_is_a_read_only_view_of_the_breaker() -> None:
    policy = {"algorithm": "token_bucket", "rate": "5/second", "fail_mode": "closed"}
    config = {
        **make_config(f"redis://127.0.0.1:{free_port()}/0", api__ep=policy),
        "breaker": {"failure_threshold": 1},
    }
    sentinel = sentinel_core.Sentinel(config, registry=CollectorRegistry(), entry_points=False)
    assert sentinel.breaker_state is sentinel_core.BreakerState.CLOSED
    assert sentinel.evaluate("api.ep", "t").reason is sentinel_core.DecisionReason.FAIL_CLOSED
    assert sentinel.breaker_state is sentinel_core.BreakerState.OPEN
    with pytest.raises(AttributeError):
        sentinel.breaker_state = sentinel_core.BreakerState.CLOSED  # type: ignore[misc]


def test_plugin_manager_registers_plugins_at_run_time() -> None:
    sentinel = memory_sentinel()
    manager = sentinel.plugin_manager
    assert isinstance(manager, pluggy.PluginManager)
    seen: list[sentinel_core.DecisionReason] = []

    class Observer:
        @sentinel_core.hookimpl
        def sentinel_decision(self, decision: sentinel_core.Decision, request: object) -> None:
            seen.append(decision.reason)

    manager.register(Observer(), name="observer")
    sentinel.evaluate("api.ep", "t")
    manager.unregister(name="observer")
    sentinel.evaluate("api.ep", "t")
    assert seen == [sentinel_core.DecisionReason.ALLOWED]
