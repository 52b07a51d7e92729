"""The Flask extension: `Sentinel` with ``init_app``, and the ``routes`` middleware.

Flask's extension conventions: the extension object holds no app. ``init_app`` builds
one core `sentinel_core.Sentinel` per app from that app's config, stores it in
``app.extensions["sentinel"]`` and registers the per-app request hooks, so one
module-level ``Sentinel()`` serves an app factory and several apps with different
configurations in one process.

When things are checked:

* ``init_app``: the configuration (``ConfigError`` naming the key path), the endpoint
  ids of ``routes`` and of the decorated views registered so far, then the Redis
  start-up check and script load (``StartupError`` for a reachable but unfit Redis; an
  unreachable one is logged and checked at the first successful contact).
* Views are usually registered *after* ``init_app`` (``Sentinel(app)`` at the top of the
  module, or a factory that registers blueprints later), and Flask has no "app ready"
  signal since 2.3 removed ``before_first_request``. So the full validation, which also
  checks that every ``routes`` entry names a method and rule the app really has, runs
  once per app on its first request, and again on every request until it passes: a
  misconfigured app answers 500 with the error logged rather than serving unguarded
  routes. Call ``sentinel.validate(app)`` at the end of your factory to fail at import
  time instead.

The ``routes`` middleware matches ``"METHOD rule"`` with the rule as ``app.url_map``
spells it (``/items/<int:item_id>``, blueprint prefix included), never the raw path; a
HEAD request falls back to the GET entry, as Flask serves it with the GET view. Routing
failures (404, 405) are not guarded. A view that ``@rate_limited`` guards is left to its
decorator even when ``routes`` names it too: each request is decided once.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from flask import Flask, Response, current_app, request

import sentinel_core
from sentinel_core import ConfigError

from ._decorator import all_endpoints, handler_endpoints
from ._guard import EXTENSION_KEY, core_of, finish_response, guard_request

CONFIG_KEY = "SENTINEL"
CONFIG_FILE_KEY = "SENTINEL_CONFIG_FILE"


class Sentinel:
    """Rate limiting for Flask apps.

    Args:
        app: initialise this app at once (``Sentinel(app)``), or later with `init_app`.
        registry: the ``prometheus_client.CollectorRegistry`` of every app's metrics;
            the default registry when None.
        plugins: plugin objects registered on every app's core besides entry points.
    """

    def __init__(
        self,
        app: Flask | None = None,
        *,
        registry: Any = None,
        plugins: Iterable[object] = (),
    ) -> None:
        self._registry = registry
        self._plugins = tuple(plugins)
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        """Configure ``app`` from ``app.config["SENTINEL"]`` (a mapping) or
        ``app.config["SENTINEL_CONFIG_FILE"]`` (a TOML file with a ``[sentinel]``
        table, relative paths from ``app.root_path`` as in ``app.config.from_file``).

        Raises:
            ConfigError: a missing or invalid configuration (the message names the key).
            UnknownEndpointError: ``routes`` or a decorated view names no policy.
            StartupError: Redis is reachable but unfit (eviction policy, maxmemory).
            RuntimeError: ``app`` already has a Sentinel.
        """
        if EXTENSION_KEY in app.extensions:
            raise RuntimeError(f"sentinel_flask: app {app.name!r} already has a Sentinel")
        core = sentinel_core.Sentinel(
            _config_source(app), registry=self._registry, plugins=self._plugins
        )
        try:
            _check_endpoint_ids(app, core)
            core.startup()
        except BaseException:
            core.close()
            raise
        app.extensions[EXTENSION_KEY] = core
        hooks = _AppHooks(core.config.routes)
        app.before_request(hooks.before_request)
        app.after_request(finish_response)

    def validate(self, app: Flask | None = None) -> None:
        """Check ``app`` (the current app by default) as it is now: every endpoint id
        used by ``@rate_limited`` or ``routes`` has a policy guardable over HTTP, and
        every ``routes`` entry matches a method and rule of the app.

        Raises:
            UnknownEndpointError: an endpoint id no policy declares.
            ConfigError: a ``routes`` entry no route matches, or a tenant policy
                without the ``jwt`` section.
        """
        validate_app(current_app if app is None else app)

    def get_core(self, app: Flask | None = None) -> sentinel_core.Sentinel:
        """The framework-neutral core of ``app`` (the current app by default), e.g. to
        `~sentinel_core.Sentinel.evaluate` a tenant outside a guarded view."""
        return core_of(current_app if app is None else app)


def validate_app(app: Flask) -> None:
    """`Sentinel.validate` for an app given explicitly (the first-request check)."""
    core = core_of(app)
    _check_endpoint_ids(app, core)
    answered = {
        f"{method} {rule.rule}"
        for rule in app.url_map.iter_rules()
        for method in rule.methods or ()
    }
    for route in core.config.routes:
        if route not in answered:
            raise ConfigError(
                f"routes.{route}",
                "no route of the app has this method and rule; spell the template as "
                "app.url_map does, converters included (e.g. 'GET /items/<int:item_id>')",
            )


def _check_endpoint_ids(app: Flask, core: sentinel_core.Sentinel) -> None:
    for endpoint_id in core.config.routes.values():
        core.validate_endpoint(endpoint_id)
    for view_function in app.view_functions.values():
        for endpoint_id in all_endpoints(view_function):
            core.validate_endpoint(endpoint_id)


def _config_source(app: Flask) -> Mapping[str, Any] | str:
    mapping = app.config.get(CONFIG_KEY)
    path = app.config.get(CONFIG_FILE_KEY)
    if mapping is not None and path is not None:
        raise ConfigError(CONFIG_FILE_KEY, f"set app.config[{CONFIG_KEY!r}] or this key, not both")
    if mapping is not None:
        if not isinstance(mapping, Mapping):
            raise ConfigError(CONFIG_KEY, f"expected a mapping, got {type(mapping).__name__}")
        return mapping
    if path is not None:
        return os.path.join(app.root_path, os.fspath(path))
    raise ConfigError(
        CONFIG_KEY,
        f"missing: set app.config[{CONFIG_KEY!r}] (a mapping) or "
        f"app.config[{CONFIG_FILE_KEY!r}] (a TOML file with a [sentinel] table)",
    )


class _AppHooks:
    """One app's ``before_request`` hook: the first-request validation and the
    ``routes`` middleware. It lives on the app (registered as its hook), not on the
    extension, so apps never share it."""

    def __init__(self, routes: Mapping[str, str]) -> None:
        self._routes = dict(routes)
        self._validated = False
        self._lock = threading.Lock()

    def before_request(self) -> Response | None:
        if not self._validated:
            self._validate_once()
        if not self._routes:
            return None
        rule = request.url_rule
        if rule is None:
            # Routing failed (404, 405): not a route of the app, nothing to guard.
            return None
        method = request.method
        endpoint_id = self._routes.get(f"{method} {rule.rule}")
        if endpoint_id is None and method == "HEAD":
            # Flask answers HEAD with the GET view: guard it like GET.
            endpoint_id = self._routes.get(f"GET {rule.rule}")
        if endpoint_id is None:
            return None
        view_function = current_app.view_functions.get(rule.endpoint)
        if handler_endpoints(view_function, method):
            # The decorator wins: it guards this request itself, and a request is
            # decided once, on the endpoint id written next to the code.
            return None
        return guard_request(endpoint_id)

    def _validate_once(self) -> None:
        with self._lock:
            if not self._validated:
                validate_app(current_app._get_current_object())  # type: ignore[attr-defined]
                self._validated = True
