"""The plugin manager and the typed facade every hook call goes through."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pluggy

from . import hookspecs
from ._breaker import BreakerState
from ._keys import Identity
from ._models import Decision, Policy


def make_plugin_manager(
    plugins: Iterable[object] = (), *, entry_points: bool = True
) -> pluggy.PluginManager:
    """A plugin manager with Sentinel's hook specs, ``plugins`` registered, and the
    ``sentinel`` entry-point group loaded when ``entry_points`` is true."""
    manager = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    manager.add_hookspecs(hookspecs)
    for plugin in plugins:
        manager.register(plugin)
    if entry_points:
        manager.load_setuptools_entrypoints(hookspecs.PROJECT_NAME)
    return manager


class Hooks:
    """Typed calls into the plugin manager; the only place that touches ``pm.hook``."""

    def __init__(self, manager: pluggy.PluginManager) -> None:
        self.manager = manager
        self._hook = manager.hook

    def identify(self, request: Any, policy: Policy) -> str | Identity | None:
        result: str | Identity | None = self._hook.sentinel_identify(request=request, policy=policy)
        return result

    def resolve_policy(self, endpoint_id: str, identity: Identity, policy: Policy) -> Policy:
        resolved: Policy | None = self._hook.sentinel_resolve_policy(
            endpoint_id=endpoint_id, identity=identity, policy=policy
        )
        return policy if resolved is None else resolved

    def decision(self, decision: Decision, request: Any) -> None:
        self._hook.sentinel_decision(decision=decision, request=request)

    def breaker_transition(self, previous: BreakerState, current: BreakerState) -> None:
        self._hook.sentinel_breaker_transition(previous=previous, current=current)
