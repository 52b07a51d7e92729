"""The plugin manager and the typed facade every hook call goes through.

Plugins come from two places: objects passed to `Sentinel(plugins=...)` and the
``sentinel`` entry-point group of the installed distributions. A plugin that is both
(a module passed explicitly and also advertised by its distribution) is registered
once. After registration every hook implementation is checked against the specs, so a
misspelt hook name fails at start-up instead of silently never being called.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from importlib.metadata import entry_points as installed_entry_points
from typing import Any, cast

import pluggy

from sentinel_core import hookspecs
from sentinel_core._models import MICRO, Decision, Policy
from sentinel_core.errors import ConfigError
from sentinel_core.identity._keys import Identity
from sentinel_core.resilience._breaker import BreakerState

ENTRY_POINT_GROUP = hookspecs.PROJECT_NAME


def make_plugin_manager(
    plugins: Iterable[object] = (), *, entry_points: bool = True
) -> PluginManager:
    """A plugin manager with Sentinel's hook specs, ``plugins`` registered, and the
    ``sentinel`` entry-point group loaded when ``entry_points`` is true.

    Raises:
        pluggy.PluginValidationError: a plugin implements a hook that does not exist or
            with parameters the spec does not have.
        Exception: whatever importing an entry point raised (a broken plugin is a
            deployment error, not something to skip quietly).
    """
    manager = PluginManager(hookspecs.PROJECT_NAME)
    manager.add_hookspecs(hookspecs)
    for plugin in plugins:
        if not manager.is_registered(plugin):
            manager.register(plugin)
    if entry_points:
        load_entry_points(manager)
    manager.check_pending()
    return manager


class PluginManager(pluggy.PluginManager):
    """pluggy's manager, telling its listeners when a plugin comes or goes (`register`,
    `unregister`, and `set_blocked`, which unregisters) and when hook calls start or stop
    being monitored (`add_hookcall_monitoring`, and `enable_tracing`, which uses it), so
    that what Sentinel compiled from the registered plugins stays current."""

    def __init__(self, project_name: str) -> None:
        super().__init__(project_name)
        self.listeners: list[Callable[[], None]] = []
        self.monitors = 0
        """How many hook call monitors are installed: while any is, every call goes
        through pluggy, so that the monitors see them all."""

    def add_hookcall_monitoring(
        self, before: Callable[..., None], after: Callable[..., None]
    ) -> Callable[[], None]:
        undo = super().add_hookcall_monitoring(before, after)
        self.monitors += 1
        self._changed()

        def undo_and_tell() -> None:
            undo()
            self.monitors -= 1
            self._changed()

        return undo_and_tell

    def register(self, plugin: object, name: str | None = None) -> str | None:
        registered = super().register(plugin, name)
        self._changed()
        return registered

    def unregister(self, plugin: object | None = None, name: str | None = None) -> Any | None:
        unregistered = super().unregister(plugin, name)
        self._changed()
        return unregistered

    def _changed(self) -> None:
        for listener in self.listeners:
            listener()


def load_entry_points(manager: pluggy.PluginManager) -> list[str]:
    """Register the plugins of the ``sentinel`` entry-point group; their names.

    Unlike pluggy's own loader this skips a plugin object already registered under
    another name, and an entry point whose name is taken or blocked.
    """
    loaded = []
    for entry_point in installed_entry_points(group=ENTRY_POINT_GROUP):
        name = entry_point.name
        if manager.get_plugin(name) is not None or manager.is_blocked(name):
            continue
        plugin = entry_point.load()
        if manager.is_registered(plugin):
            continue
        manager.register(plugin, name=name)
        loaded.append(name)
    return loaded


def check_resolved_policy(policy: Policy) -> None:
    """The load-time rules a policy minted by ``sentinel_resolve_policy`` must keep too: a
    cost the bucket can ever admit, positive sizes, and integers that stay exact in Lua.

    Raises:
        ConfigError: naming the hook, the endpoint id and the offending field.
    """
    path = f"sentinel_resolve_policy({policy.endpoint_id!r})"
    sizes = {"rate": policy.rate.count, "burst": policy.burst, "cost": policy.cost}
    for field, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{path}.{field}", f"must be an integer >= 1, got {value!r}")
    limits = [("burst", policy.burst), ("network_burst", policy.network_burst)]
    for field, limit in limits:
        if limit is not None and policy.cost > limit:
            raise ConfigError(
                f"{path}.cost", f"cost {policy.cost} exceeds the {field} {limit}: never admitted"
            )
    largest = (policy.burst + policy.cost) * policy.rate.period_seconds * MICRO + policy.rate.count
    if largest >= 2**53:
        raise ConfigError(f"{path}.burst", "too large: past 2**53 where Lua stops being exact")


Observer = Callable[[Decision, Any], None]


class Hooks:
    """Typed calls into the plugin manager; the only place that touches ``pm.hook``.

    Which hooks have implementations is compiled when plugins come and go, not asked on
    every call: a hook nobody implements costs one attribute read. When Sentinel's own
    observers (metrics, log) are the only implementations of `sentinel_decision`, they
    are called directly, in pluggy's order; any other plugin on that hook, or a hook
    call monitor (pluggy's tracing), puts every call back through pluggy.
    """

    def __init__(self, manager: PluginManager) -> None:
        self.manager = manager
        self._hook = manager.hook
        self._builtins: set[int] = set()
        self.identifies = self.exempts = self.resolves = False
        self._observers: tuple[Observer, ...] | None = ()
        """The observers to call directly, or None: through pluggy."""
        manager.listeners.append(self.refresh)
        self.refresh()

    def refresh(self) -> None:
        """Compile which hooks have implementations, after plugins came or went."""
        hook = self._hook
        self.identifies = bool(hook.sentinel_identify.get_hookimpls())
        self.exempts = bool(hook.sentinel_exempt.get_hookimpls())
        self.resolves = bool(hook.sentinel_resolve_policy.get_hookimpls())
        observers = hook.sentinel_decision.get_hookimpls()
        if not self.manager.monitors and all(
            id(impl.plugin) in self._builtins and not (impl.hookwrapper or impl.wrapper)
            for impl in observers
        ):
            # pluggy calls the last registered first (tryfirst/trylast already applied).
            self._observers = tuple(cast(Observer, impl.function) for impl in reversed(observers))
        else:
            self._observers = None

    def register_builtin(self, plugin: object, name: str) -> None:
        """Register one of Sentinel's own observers. It is a plugin like any other:
        unregistering ``name`` turns it off."""
        self._builtins.add(id(plugin))
        self.manager.register(plugin, name)
        self.refresh()

    def implements_identify(self) -> bool:
        """Whether some plugin can supply identities (`sentinel_identify`)."""
        return self.identifies

    def identify(self, request: Any, policy: Policy) -> str | Identity | None:
        if not self.identifies:  # the usual case: no pluggy call on the hot path
            return None
        result: str | Identity | None = self._hook.sentinel_identify(request=request, policy=policy)
        return result

    def exempt(self, request: Any, policy: Policy) -> bool | None:
        if not self.exempts:  # the usual case: no pluggy call on the hot path
            return None
        verdict: object = self._hook.sentinel_exempt(request=request, policy=policy)
        if verdict is not None and not isinstance(verdict, bool):
            raise TypeError(
                f"sentinel_exempt must return True, False or None, not {type(verdict).__name__}"
            )
        return verdict

    def resolve_policy(self, endpoint_id: str, identity: Identity, policy: Policy) -> Policy:
        """The policy a plugin resolves for ``identity``; the engine asks only while
        some plugin implements the hook (`resolves`)."""
        resolved: Policy | None = self._hook.sentinel_resolve_policy(
            endpoint_id=endpoint_id, identity=identity, policy=policy
        )
        if resolved is None:
            return policy
        if not isinstance(resolved, Policy):
            raise TypeError(
                f"sentinel_resolve_policy must return a Policy or None, not "
                f"{type(resolved).__name__}"
            )
        if resolved.endpoint_id != endpoint_id:
            # The endpoint id names buckets and metric labels: a plugin must not mint new ones.
            raise ValueError(
                f"sentinel_resolve_policy returned a policy for {resolved.endpoint_id!r} "
                f"when asked about {endpoint_id!r}"
            )
        if resolved is not policy:
            check_resolved_policy(resolved)
        return resolved

    def decision(self, decision: Decision, request: Any) -> None:
        observers = self._observers
        if observers is None:
            self._hook.sentinel_decision(decision=decision, request=request)
            return
        for observe in observers:
            observe(decision, request)

    def breaker_transition(self, previous: BreakerState, current: BreakerState) -> None:
        self._hook.sentinel_breaker_transition(previous=previous, current=current)
