"""System checks: configuration problems reported at start-up, not on a request.

=================  =================================================================
``sentinel.E001``  ``settings.SENTINEL`` is missing or invalid (the message names the
                   key path), its ``identify`` or ``denial_view`` does not import, or
                   an endpoint cannot be guarded over HTTP as configured
``sentinel.E002``  an endpoint id used by ``@rate_limited`` (on a routed view) or by
                   ``routes`` that no policy declares
``sentinel.E003``  deploy: Redis is reachable but unfit (eviction policy, maxmemory,
                   version, script load); the start-up check's message
``sentinel.E004``  a ``routes`` entry that matches no URL pattern (a typo would leave the
                   endpoint unguarded)
``sentinel.E005``  two ``routes`` entries that name one route once normalised
                   (``"POST /r/<id>"`` and ``"POST r/<id>"``)
``sentinel.E006``  a routed DRF view throttled by ``SentinelThrottle`` whose
                   ``sentinel_endpoint`` is missing or names no policy (every request
                   to it would answer 500)
``sentinel.W001``  ``memory://`` with ``DEBUG = False``: buckets are per process
``sentinel.W002``  ``routes`` is set but ``SentinelMiddleware`` is not in ``MIDDLEWARE``
``sentinel.W003``  deploy: Redis is unreachable (the app would start and defer the check)
=================  =================================================================

The ids are stable: silence one with ``SILENCED_SYSTEM_CHECKS``. Only the deploy checks
(``manage.py check --deploy``) touch the network.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from django.conf import settings  # type: ignore[import-untyped]
from django.core.checks import (  # type: ignore[import-untyped]
    CheckMessage,
    Error,
    Tags,
    register,
)
from django.core.checks import Warning as CheckWarning
from django.core.exceptions import ImproperlyConfigured  # type: ignore[import-untyped]
from django.urls import URLPattern, URLResolver, get_resolver  # type: ignore[import-untyped]

from sentinel_core import ConfigError, StartupError, UnknownEndpointError, load_config
from sentinel_core.adapter import MEMORY_URL, duplicate_route_keys
from sentinel_core.errors import StoreError

from . import conf
from .decorators import uses_sentinel_throttle, view_endpoints

TAG = "sentinel"
MIDDLEWARE_PATH = "sentinel_django.middleware.SentinelMiddleware"


def register_checks() -> None:
    """Register the checks (from ``AppConfig.ready``): the Redis one for deploy only."""
    register(check_settings, TAG)
    register(check_decorated_views, TAG, Tags.urls)
    register(check_routes_match, TAG, Tags.urls)
    register(check_drf_throttles, TAG, Tags.urls)
    register(check_redis, TAG, deploy=True)


def check_settings(app_configs: Sequence[Any] | None = None, **kwargs: Any) -> list[CheckMessage]:
    """E001 for an invalid configuration, E002 for routes naming unknown ids, W001, W002."""
    try:
        raw = conf.load_settings()
    except ConfigError as error:
        return [_config_error(error)]
    unknown = dict(_unknown_route_ids(raw))
    unknown.update(_duplicate_routes(raw))
    messages: list[CheckMessage] = list(unknown.values())
    try:
        config = load_config(raw)
    except ConfigError as error:
        if error.path not in unknown:  # the loader stops at the first: an E002 or E005
            messages.append(_config_error(error))
        return messages
    try:
        conf.view_hooks()
    except ImproperlyConfigured as error:
        messages.append(Error(str(error), id="sentinel.E001"))
    if config.redis_url.startswith(MEMORY_URL) and not settings.DEBUG:
        messages.append(
            CheckWarning(
                "settings.SENTINEL: redis_url is memory:// with DEBUG = False: every "
                "process keeps its own buckets, so the limits multiply with the workers.",
                hint="Use Redis in production (redis://, rediss:// or redis+cluster://).",
                id="sentinel.W001",
            )
        )
    if config.routes and MIDDLEWARE_PATH not in settings.MIDDLEWARE:
        messages.append(
            CheckWarning(
                "settings.SENTINEL: routes are configured but SentinelMiddleware is not "
                "installed, so they are not rate limited.",
                hint=f"Add {MIDDLEWARE_PATH!r} to MIDDLEWARE.",
                id="sentinel.W002",
            )
        )
    return messages


def check_decorated_views(
    app_configs: Sequence[Any] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """E002 for a routed view decorated with an unknown endpoint id; E001 for an
    endpoint that cannot be guarded over HTTP (a tenant policy without ``jwt``)."""
    try:
        sentinel = conf.runtime().sentinel
    except ImproperlyConfigured:  # an invalid configuration is check_settings' E001
        return []
    messages: list[CheckMessage] = []
    seen: set[str] = set()
    for pattern, endpoint_id in _decorated_endpoints(get_resolver().url_patterns, ""):
        if endpoint_id in seen:
            continue
        seen.add(endpoint_id)
        try:
            sentinel.validate_endpoint(endpoint_id)
        except UnknownEndpointError:
            messages.append(_unknown_id(endpoint_id, f"@rate_limited on the view of {pattern!r}"))
        except ConfigError as error:
            messages.append(_config_error(error, obj=pattern))
    return messages


def check_drf_throttles(
    app_configs: Sequence[Any] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """E006 for a routed DRF view whose ``SentinelThrottle`` has no endpoint id to use
    (no ``sentinel_endpoint``, or one no policy declares); E001 for an endpoint that
    cannot be guarded over HTTP."""
    try:
        sentinel = conf.runtime().sentinel
    except ImproperlyConfigured:  # an invalid configuration is check_settings' E001
        return []
    messages: list[CheckMessage] = []
    seen: set[type] = set()
    for route, callback in _patterns(get_resolver().url_patterns, ""):
        cls = getattr(callback, "cls", None)
        if not isinstance(cls, type) or cls in seen or not uses_sentinel_throttle(cls):
            continue
        seen.add(cls)
        where = f"{cls.__name__} (the view of {route!r})"
        endpoint_id = getattr(cls, "sentinel_endpoint", None)
        if not isinstance(endpoint_id, str):
            messages.append(
                Error(
                    f"settings.SENTINEL: {where} is throttled by SentinelThrottle but has "
                    "no sentinel_endpoint attribute, so every request to it fails.",
                    hint="Set sentinel_endpoint = '<endpoint id>' on the view class.",
                    obj=cls,
                    id="sentinel.E006",
                )
            )
            continue
        try:
            sentinel.validate_endpoint(endpoint_id)
        except UnknownEndpointError:
            messages.append(
                Error(
                    f"settings.SENTINEL: endpoint id {endpoint_id!r} named by "
                    f"sentinel_endpoint on {where} has no policy, so every request to it "
                    "fails.",
                    hint=f"Declare policies[{endpoint_id!r}] or fix the id.",
                    obj=cls,
                    id="sentinel.E006",
                )
            )
        except ConfigError as error:
            messages.append(_config_error(error, obj=cls))
    return messages


def check_routes_match(
    app_configs: Sequence[Any] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """E004 for each ``routes`` entry that matches no URL pattern of the project."""
    try:
        sentinel = conf.runtime().sentinel
    except ImproperlyConfigured:  # an invalid configuration is check_settings' E001
        return []
    answered = [(route, None) for route, _ in _patterns(get_resolver().url_patterns, "")]
    return [
        Error(
            f"settings.SENTINEL: routes[{key!r}] matches no URL pattern, so nothing is "
            "rate limited by it.",
            hint="Spell the route as in urls.py, converters included (e.g. 'POST items/<int:pk>').",
            id="sentinel.E004",
        )
        for key in sentinel.route_table.unmatched(answered)
    ]


def check_redis(app_configs: Sequence[Any] | None = None, **kwargs: Any) -> list[CheckMessage]:
    """E003/W003: the start-up check against the configured Redis (deploy only)."""
    try:
        sentinel = conf.runtime().sentinel
    except ImproperlyConfigured:  # an invalid configuration is check_settings' E001
        return []
    try:
        sentinel.check()
    except StartupError as error:
        return [Error(str(error), hint=_HINT_REDIS, id="sentinel.E003")]
    except StoreError as error:
        return [
            CheckWarning(
                f"Redis is unreachable ({type(error).__name__}: {error}); the app would "
                "start, answer from the decision table and check Redis at first contact.",
                id="sentinel.W003",
            )
        ]
    return []


_HINT_REDIS = (
    "Sentinel needs Redis >= 6.2 with maxmemory-policy noeviction and a bounded maxmemory "
    "(an evicted bucket is a reset limit); see `sentinel check`."
)


def _config_error(error: ConfigError, obj: Any = None) -> Error:
    return Error(f"settings.SENTINEL: {error}", obj=obj, id="sentinel.E001")


def _unknown_id(endpoint_id: str, where: str) -> Error:
    return Error(
        f"settings.SENTINEL: endpoint id {endpoint_id!r} used by {where} has no policy.",
        hint=f"Declare policies[{endpoint_id!r}] or fix the id.",
        id="sentinel.E002",
    )


def _unknown_route_ids(raw: Mapping[str, Any]) -> Iterator[tuple[str, Error]]:
    """(key path, E002) for each route naming an id no policy declares."""
    routes, policies = raw.get("routes"), raw.get("policies")
    if not isinstance(routes, Mapping) or not isinstance(policies, Mapping):
        return
    for route, endpoint_id in routes.items():
        if isinstance(endpoint_id, str) and endpoint_id not in policies:
            yield f"routes.{route}", _unknown_id(endpoint_id, f"routes[{route!r}]")


def _duplicate_routes(raw: Mapping[str, Any]) -> Iterator[tuple[str, Error]]:
    """(key path, E005) for each ``routes`` key naming the same route as an earlier one."""
    routes = raw.get("routes")
    if not isinstance(routes, Mapping):
        return
    for key, earlier in duplicate_route_keys(routes):
        yield (
            f"routes.{key}",
            Error(
                f"settings.SENTINEL: routes[{key!r}] names the same route as "
                f"routes[{earlier!r}]; only one of them could apply.",
                hint="Keep one entry per method and route.",
                id="sentinel.E005",
            ),
        )


def _patterns(
    patterns: Sequence[URLPattern | URLResolver], prefix: str
) -> Iterator[tuple[str, Any]]:
    """(route, view callback) for every URL pattern, routes spelled as ``match.route``."""
    for pattern in patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            yield from _patterns(pattern.url_patterns, route)
        else:
            yield route, pattern.callback


def _decorated_endpoints(
    patterns: Sequence[URLPattern | URLResolver], prefix: str
) -> Iterator[tuple[str, str]]:
    """(route, endpoint id) for every endpoint id recorded on a routed view."""
    for route, callback in _patterns(patterns, prefix):
        for endpoint_id in view_endpoints(callback):
            yield route, endpoint_id
