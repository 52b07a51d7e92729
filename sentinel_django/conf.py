"""Settings, read lazily, and the Sentinel instance built from them.

``settings.SENTINEL`` is read when first needed, never at import, so the app can be
imported before settings are configured. The built instance is cached and rebuilt
when ``SENTINEL``, ``SENTINEL_METRICS_REGISTRY`` or ``SENTINEL_PLUGINS`` changes
(``override_settings`` sends ``setting_changed``), so tests can swap policies or Redis
servers per test.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from django.conf import settings  # type: ignore[import-untyped]
from django.core.exceptions import ImproperlyConfigured  # type: ignore[import-untyped]
from django.core.signals import setting_changed  # type: ignore[import-untyped]
from django.utils.module_loading import import_string  # type: ignore[import-untyped]

from sentinel_core import ConfigError, Sentinel

from ._runtime import Runtime

SETTING = "SENTINEL"
REGISTRY_SETTING = "SENTINEL_METRICS_REGISTRY"
"""The ``prometheus_client.CollectorRegistry`` for the metrics, or its dotted path
(default: prometheus_client's default registry)."""
PLUGINS_SETTING = "SENTINEL_PLUGINS"
"""Plugin objects (or their dotted paths) registered besides the entry-point plugins."""
_SETTINGS = frozenset({SETTING, REGISTRY_SETTING, PLUGINS_SETTING})
IDENTIFY_KEY = "identify"
"""``SENTINEL["identify"]``: the dotted path of ``identify(request)``, the id of the user
the app authenticated for ``identity: "user"`` policies (default: ``request.user``'s
primary key when authenticated)."""
DENIAL_VIEW_KEY = "denial_view"
"""``SENTINEL["denial_view"]``: the dotted path of ``view(request, decision)``, which
renders a 429 or 503 in the app's own way (SPEC §5)."""
_ADAPTER_KEYS = frozenset({IDENTIFY_KEY, DENIAL_VIEW_KEY})
"""Keys of ``settings.SENTINEL`` that this adapter reads, not the core."""


_lock = threading.Lock()
_runtime: Runtime | None = None


def runtime() -> Runtime:
    """The Runtime for the current settings, built on first use (no network I/O).

    Raises:
        ImproperlyConfigured: ``SENTINEL`` is missing or invalid (the message names
            the key path, as the ``sentinel.E001`` system check does).
    """
    current = _runtime
    if current is not None:
        return current
    return _build()


def get_sentinel() -> Sentinel:
    """The `sentinel_core.Sentinel` built from ``settings.SENTINEL``, for code outside a
    view (workers, management commands) that wants the same policies and breaker."""
    return runtime().sentinel


def load_settings() -> Mapping[str, Any]:
    """``settings.SENTINEL`` as a mapping, read now (settings may have changed).

    Raises:
        ConfigError: the setting is missing or not a mapping.
    """
    value = getattr(settings, SETTING, None)
    if value is None:
        raise ConfigError("", "missing setting: a dict with redis_url and policies")
    if not isinstance(value, Mapping):
        raise ConfigError("", f"expected a dict, got {type(value).__name__}")
    return {key: item for key, item in value.items() if key not in _ADAPTER_KEYS}


def view_hooks() -> tuple[Callable[..., Any] | None, Callable[..., Any] | None]:
    """``(identify, denial_view)`` from ``settings.SENTINEL``, imported (None when unset).

    Raises:
        ImproperlyConfigured: a dotted path that does not import, or not a callable.
    """
    value = getattr(settings, SETTING, None)
    found = value if isinstance(value, Mapping) else {}
    hooks = []
    for key in (IDENTIFY_KEY, DENIAL_VIEW_KEY):
        hook = _imported(f"{SETTING}.{key}", found.get(key))
        if hook is not None and not callable(hook):
            raise ImproperlyConfigured(f"settings.{SETTING}.{key}: expected a callable")
        hooks.append(hook)
    return hooks[0], hooks[1]


def _build() -> Runtime:
    global _runtime
    with _lock:
        if _runtime is None:
            try:
                config = load_settings()
            except ConfigError as error:
                raise ImproperlyConfigured(f"settings.{SETTING}: {error}") from error
            registry = _imported(REGISTRY_SETTING, getattr(settings, REGISTRY_SETTING, None))
            plugins = [
                _imported(PLUGINS_SETTING, plugin)
                for plugin in getattr(settings, PLUGINS_SETTING, ())
            ]
            identify, denial_view = view_hooks()
            try:
                _runtime = Runtime(
                    config,
                    registry=registry,
                    plugins=plugins,
                    identify=identify,
                    denial_view=denial_view,
                )
            except ConfigError as error:
                raise ImproperlyConfigured(f"settings.{SETTING}: {error}") from error
        return _runtime


def _imported(setting: str, value: Any) -> Any:
    """``value``, or the object its dotted path names.

    Raises:
        ImproperlyConfigured: a dotted path that does not import.
    """
    if not isinstance(value, str):
        return value
    try:
        return import_string(value)
    except ImportError as error:
        raise ImproperlyConfigured(f"settings.{setting}: {error}") from error


def reset() -> None:
    """Forget the built instance; the next request builds one from current settings."""
    global _runtime
    with _lock:
        previous, _runtime = _runtime, None
    if previous is not None:
        previous.close()


def _on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    if setting in _SETTINGS:
        reset()


setting_changed.connect(_on_setting_changed, dispatch_uid="sentinel_django.conf")
