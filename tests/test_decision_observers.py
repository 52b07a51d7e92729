"""The `sentinel_decision` observers: the built-in metrics and denial log are plugins like
any other, so every registration change and pluggy's hook call monitoring are honoured."""

from __future__ import annotations

import itertools
import logging
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

import sentinel_core
from sentinel_core import Decision, Sentinel
from sentinel_core.observability._logging import DecisionLogPlugin

EP = "dispatch.ep"


def make_sentinel(registry: CollectorRegistry) -> Sentinel:
    return Sentinel(
        {
            "redis_url": "memory://",
            "policies": {
                EP: {"algorithm": "token_bucket", "rate": "1/minute", "fail_mode": "closed"}
            },
        },
        registry=registry,
        entry_points=False,
    )


def counted(registry: CollectorRegistry, allowed: str) -> float:
    labels = {
        "endpoint_id": EP,
        "decision_reason": "allowed" if allowed == "true" else "rate_limited",
        "allowed": allowed,
    }
    return registry.get_sample_value("sentinel_decisions_total", labels) or 0.0


class Observer:
    def __init__(self, order: list[str] | None = None) -> None:
        self.seen: list[Decision] = []
        self.order = order

    @sentinel_core.hookimpl
    def sentinel_decision(self, decision: Decision, request: Any) -> None:
        self.seen.append(decision)
        if self.order is not None:
            self.order.append("observer")


def test_registrations_are_honoured_decision_by_decision(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = CollectorRegistry()
    sentinel = make_sentinel(registry)
    manager = sentinel.plugin_manager
    # a log clock a second further on at every reading: each denial gets its own record
    manager.unregister(name="sentinel.logging")
    ticking = itertools.count(0, 1_000_000_000).__next__
    sentinel._hooks.register_builtin(
        DecisionLogPlugin(sentinel._breaker, ticking), "sentinel.logging"
    )
    with caplog.at_level(logging.WARNING, logger="sentinel"):
        assert sentinel.evaluate(EP, "t").allowed
        assert not sentinel.evaluate(EP, "t").allowed
        assert (counted(registry, "true"), counted(registry, "false")) == (1, 1)
        assert len(caplog.records) == 1

        observer = Observer()
        manager.register(observer)
        assert not sentinel.evaluate(EP, "t").allowed
        assert len(observer.seen) == 1
        assert counted(registry, "false") == 2
        assert len(caplog.records) == 2

        manager.unregister(observer)
        metrics = manager.unregister(name="sentinel.metrics")
        assert not sentinel.evaluate(EP, "t").allowed
        assert counted(registry, "false") == 2, "unregistered: not counted"
        assert len(caplog.records) == 3
        assert len(observer.seen) == 1

        manager.register(metrics, "sentinel.metrics")  # back again
        assert not sentinel.evaluate(EP, "t").allowed
        assert counted(registry, "false") == 3
        assert len(caplog.records) == 4


def test_hook_call_monitoring_sees_the_built_ins_called() -> None:
    sentinel = make_sentinel(CollectorRegistry())
    traced: list[tuple[str, list[str]]] = []

    def before(hook_name: str, impls: list[Any], kwargs: dict[str, Any]) -> None:
        traced.append((hook_name, [sentinel.plugin_manager.get_name(i.plugin) for i in impls]))

    def after(*args: Any) -> None:
        pass

    undo = sentinel.plugin_manager.add_hookcall_monitoring(before, after)
    sentinel.evaluate(EP, "t")
    undo()
    sentinel.evaluate(EP, "t")
    assert traced == [("sentinel_decision", ["sentinel.metrics", "sentinel.logging"])]


def test_with_no_observer_at_all_nothing_is_called(caplog: pytest.LogCaptureFixture) -> None:
    registry = CollectorRegistry()
    sentinel = make_sentinel(registry)
    for name in ("sentinel.metrics", "sentinel.logging"):
        sentinel.plugin_manager.unregister(name=name)
    with caplog.at_level(logging.WARNING, logger="sentinel"):
        assert sentinel.evaluate(EP, "t").allowed
        assert not sentinel.evaluate(EP, "t").allowed
    assert caplog.records == []
    assert counted(registry, "true") == 0
