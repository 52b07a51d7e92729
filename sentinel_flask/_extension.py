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
* When the app already has views at ``init_app`` (``Sentinel(app)`` at the end of a
  factory), the full validation runs there too: every ``routes`` entry must name a
  method and rule of the app. Views registered *after* ``init_app`` (a factory that
  registers blueprints later) cannot be seen then, and Flask has no "app ready" signal
  since 2.3 removed ``before_first_request``; the first request, where Flask itself
  considers setup finished, validates them. A view naming an endpoint id it cannot be
  guarded by (a typo, a policy removed) is logged there as an error and answers 500,
  each time with the reason in the log, while every other route is served: one typo
  never takes ``/health`` down with it. A ``routes`` entry that matches no route of
  the app makes it refuse to serve, rather than serve a route it believes guarded.
  Call ``sentinel.validate(app)`` at the end of such a factory (or run
  ``flask sentinel check``) to fail before serving instead.

``before_request`` matches ``"METHOD rule"`` with the rule as ``app.url_map`` spells it
(``/items/<int:item_id>``, blueprint prefix included), never the raw path, and asks the
core which endpoint ids the request pays for (HEAD falling back to GET, a decorator and
a ``routes`` entry naming one id charged once). Routing failures (404, 405) are not
guarded. ``routes["*"]`` charges every other route, except ``@exempt`` views and
Flask's own ``static`` endpoint (as Flask-Limiter's ``default_limits`` do).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from flask import Flask, Request, Response, current_app, g, request
from werkzeug.routing import Rule

import sentinel_core
from sentinel_core import ConfigError, SentinelError
from sentinel_core.adapter import Endpoint

from ._cli import sentinel_commands
from ._config import config_source
from ._decorator import EXEMPT_ATTRIBUTE, all_endpoints, handler_endpoints, is_exempt
from ._guard import (
    ADMISSION,
    ADMITTED,
    EXTENSION_KEY,
    Route,
    complete_on_teardown,
    core_of,
    deny,
    finish_response,
    pass_through,
)
from ._translate import request_view

logger = logging.getLogger("sentinel")


class Sentinel:
    """Rate limiting for Flask apps.

    Args:
        app: initialise this app at once (``Sentinel(app)``), or later with `init_app`.
        registry: the ``prometheus_client.CollectorRegistry`` of every app's metrics;
            the default registry when None.
        plugins: plugin objects registered on every app's core besides entry points.
        identify: ``identify(request)``, the id (a str) of the user the app
            authenticated, or None, for ``identity: "user"`` policies (Flask-Login:
            ``current_user.get_id()`` when ``current_user.is_authenticated``).
    """

    def __init__(
        self,
        app: Flask | None = None,
        *,
        registry: Any = None,
        plugins: Iterable[object] = (),
        identify: Callable[[Request], str | None] | None = None,
    ) -> None:
        self._registry = registry
        self._plugins = tuple(plugins)
        self._identify = identify
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
            config_source(app),
            registry=self._registry,
            plugins=self._plugins,
            identify=self._identify,
        )
        try:
            _check_endpoint_ids(app, core)
            core.startup()
        except BaseException:
            core.close()
            raise
        app.extensions[EXTENSION_KEY] = core
        if _has_views(app):
            validate_app(app)
        # `enabled = false`: a pass-through that decides nothing (no per-request check).
        app.before_request(
            _AppHooks(app, core).before_request if core.config.enabled else pass_through
        )
        app.after_request(finish_response)
        app.cli.add_command(sentinel_commands(validate_app))

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
    _check_routes(app, core)


def _check_routes(app: Flask, core: sentinel_core.Sentinel) -> None:
    """Every ``routes`` entry matches a method and rule of ``app``."""
    answered = [(rule.rule, rule.methods) for rule in app.url_map.iter_rules()]
    for route in core.route_table.unmatched(answered):
        raise ConfigError(
            f"routes.{route}",
            "no route of the app has this method and rule; spell the template as "
            "app.url_map does, converters included (e.g. 'GET /items/<int:item_id>')",
        )


def _has_views(app: Flask) -> bool:
    """Whether views other than Flask's own ``static`` are registered yet."""
    return any(endpoint != "static" for endpoint in app.view_functions)


def _check_endpoint_ids(app: Flask, core: sentinel_core.Sentinel) -> None:
    for endpoint_id in core.config.routes.values():
        core.validate_endpoint(endpoint_id)
    for view_function in app.view_functions.values():
        _check_view(core, view_function)


def _check_view(core: sentinel_core.Sentinel, view_function: object) -> None:
    for endpoint_id in all_endpoints(view_function):
        core.validate_endpoint(endpoint_id)


def _unguardable_views(app: Flask, core: sentinel_core.Sentinel) -> frozenset[str]:
    """The Flask endpoints whose views name an id they cannot be guarded by, each
    logged as an error: those views fail alone, the others are served."""
    broken = set()
    for endpoint, view_function in app.view_functions.items():
        try:
            _check_view(core, view_function)
        except SentinelError as exc:
            logger.error(
                "sentinel_flask: view %r of app %r cannot be guarded (%s); it answers 500 "
                "until that is fixed, the app's other routes are served",
                endpoint,
                app.name,
                exc,
            )
            broken.add(endpoint)
    return frozenset(broken)


def _takes_default(app: Flask, native: Request, view: object) -> bool:
    """Whether ``routes["*"]`` may charge the request: not for static files (the app's
    or a blueprint's, as Flask-Limiter), an ``@exempt`` view, or a view of an
    ``@exempt`` blueprint."""
    endpoint = native.endpoint or ""
    if endpoint == "static" or endpoint.endswith(".static") or is_exempt(view, native.method):
        return False
    blueprints = (app.blueprints.get(name) for name in native.blueprints)
    return not any(getattr(blueprint, EXEMPT_ATTRIBUTE, False) for blueprint in blueprints)


def _charged(
    app: Flask, core: sentinel_core.Sentinel, native: Request, view: object
) -> tuple[Endpoint, ...]:
    """The compiled endpoints a request to ``native``'s rule and method pays for (the
    core's rule: the view's ``@rate_limited`` ids, the ``routes`` entry, the default)."""
    rule, method = native.url_rule, native.method
    assert rule is not None
    decorated = handler_endpoints(view, method)
    default = core.route_table.default is not None and _takes_default(app, native, view)
    ids = core.route_table.charged(method, (rule.rule,), decorated, default=default)
    return tuple(core.endpoint(endpoint_id) for endpoint_id in ids)


class _AppHooks:
    """One app's ``before_request`` hook: the first-request validation and the
    admission. It lives on the app (registered as its hook), not on the extension, so
    apps never share it; it holds the app and its core, which every request needs."""

    def __init__(self, app: Flask, core: sentinel_core.Sentinel) -> None:
        self._app = app
        self._core = core
        self._admit = core.admit
        # Views registered after init_app are first seen here, on the first request.
        self.validated = False
        self.unguardable: frozenset[str] = frozenset()
        """Flask endpoints whose views name an id no policy guards: they fail alone."""
        self.completes = False
        """Whether the app's requests are completed at teardown (`_complete_from_now_on`)."""
        self._lock = threading.Lock()
        self._routes: dict[tuple[int, str], Route] = {}
        """(``id`` of the URL rule, method) -> what a request pays for, worked out at
        the rule's first request on that method (Flask adds no rule after that). Keyed
        by the rule object, which Flask hands over already matched: no string is looked
        up per request."""

    def before_request(self) -> Response | None:
        """Admit the request on what its rule and method pay for: the denial's
        response, or None (the admission waits on `flask.g` for ``after_request``).

        Raises:
            RateLimitExceeded, RateLimiterUnavailable: see `deny`.
        """
        if not self.validated:
            self._validate_once()
        # Each proxy resolved once: every access through one costs a context lookup.
        native = request._get_current_object()  # type: ignore[attr-defined]
        rule = native.url_rule
        if rule is None:
            # Routing failed (404, 405): not a route of the app, nothing to guard.
            return None
        route = self._routes.get((id(rule), native.method)) or self._route(native, rule)
        if not route.endpoints:
            return None
        admission = self._admit(request_view(native, route.template), route.endpoints)
        if admission.denial is not None:
            return deny(self._app, admission.denial)
        # The namespace's own dict: `g`'s __setattr__ is a Python-level wrapper of it.
        state = vars(g._get_current_object())
        state[ADMISSION] = admission
        state[ADMITTED] = route.admitted
        if admission.owes_completion and not self.completes:
            self._complete_from_now_on()
        return None

    def _route(self, native: Request, rule: Rule) -> Route:
        app, core = self._app, self._core
        view = app.view_functions.get(rule.endpoint)
        if rule.endpoint in self.unguardable:
            _check_view(core, view)  # raises its error again: a 500, logged
        route = Route(rule, _charged(app, core, native, view))
        self._routes[id(rule), native.method] = route
        return route

    def _complete_from_now_on(self) -> None:
        """At the first request that owes the store a completion step (a ``count``,
        ``settle`` or concurrency policy, maybe one a plugin resolved): every request of
        the app is completed at its teardown from then on. Before that no request owed
        one, and none paid for Flask calling a teardown step that had nothing to do."""
        complete_on_teardown(self._app)  # connecting twice is harmless: one receiver
        self.completes = True

    def _validate_once(self) -> None:
        with self._lock:
            if not self.validated:
                app = self._app
                _check_routes(app, self._core)
                self.unguardable = _unguardable_views(app, self._core)
                self.validated = True
