"""The app's routes as Sentinel sees them: full templates, methods and guards.

FastAPI resolves a request's route inside its router, after every middleware has run,
and recent FastAPI no longer copies an included router's routes into ``app.routes``
with their prefix: ``scope["route"]`` is then the router's own route, whose ``path``
lacks the ``include_router`` prefix. So the adapter builds one index per
app of the routes with their full templates (``fastapi.routing.iter_route_contexts``
where it exists, ``app.routes`` on older FastAPI) and resolves a request the way the
router does: the first route whose ``matches(scope)`` is a full match.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import fastapi.routing
from starlette.applications import Starlette
from starlette.routing import BaseRoute, Match
from starlette.types import Scope

ENDPOINT_ATTRIBUTE = "__sentinel_endpoint_id__"
"""Where `rate_limited` records its endpoint id on the function it returns."""

_STATE_KEY = "sentinel_route_index"


@dataclass(frozen=True, slots=True)
class RouteEntry:
    """One route of the app, as the router resolves it.

    ``template`` is the full path template as FastAPI spells it in OpenAPI (``/v1/items/{id}``);
    ``guards`` maps a request method to the endpoint id that ``routes`` assigns to it.
    """

    template: str
    methods: frozenset[str]
    decorated: str | None
    guards: Mapping[str, str]
    route: BaseRoute
    matches: Callable[[Scope], tuple[Match, Scope]]


class RouteIndex:
    """The routes of one app, in the router's order, for the middleware and the decorator."""

    def __init__(self, entries: Sequence[RouteEntry], unmatched: Mapping[str, str]) -> None:
        self.entries = tuple(entries)
        self.unmatched = unmatched
        """``routes`` entries ("METHOD /template" -> endpoint id) that name no route."""
        self._by_route: dict[int, list[RouteEntry]] = {}
        for entry in self.entries:
            self._by_route.setdefault(id(entry.route), []).append(entry)

    @classmethod
    def build(cls, routes: Sequence[BaseRoute], config_routes: Mapping[str, str]) -> RouteIndex:
        entries: list[RouteEntry] = []
        used: set[str] = set()
        for context in _contexts(routes):
            path = getattr(context, "path", None)
            path_format = getattr(context, "path_format", None) or path
            if not isinstance(path, str) or not isinstance(path_format, str):
                continue
            methods = frozenset(getattr(context, "methods", None) or ())
            guards = _guards(config_routes, methods, {path, path_format}, used)
            original = getattr(context, "original_route", context)
            entries.append(
                RouteEntry(
                    template=path_format,
                    methods=methods,
                    decorated=getattr(getattr(context, "endpoint", None), ENDPOINT_ATTRIBUTE, None),
                    guards=guards,
                    route=original,
                    matches=context.matches,
                )
            )
        unmatched = {key: value for key, value in config_routes.items() if key not in used}
        return cls(entries, unmatched)

    def resolve(self, scope: Scope) -> RouteEntry | None:
        """The route the router will pick for ``scope``: the first full match."""
        for entry in self.entries:
            if entry.matches(scope)[0] is Match.FULL:
                return entry
        return None

    def template_of(self, scope: Scope) -> str | None:
        """The full template of the route the router picked (``scope["route"]``)."""
        route = scope.get("route")
        candidates = self._by_route.get(id(route), ())
        if len(candidates) == 1:
            return candidates[0].template
        # The same router included twice: tell its copies apart by their prefixes.
        for entry in candidates:
            if entry.matches(scope)[0] is Match.FULL:
                return entry.template
        path = getattr(route, "path_format", None)
        return path if isinstance(path, str) else None


def route_index(app: Starlette, config_routes: Mapping[str, str]) -> RouteIndex:
    """The app's index, built on first use and kept on ``app.state``.

    Built at startup by `Sentinel.init_app`'s lifespan; a request served without
    lifespan (some test clients) builds it on first use.
    """
    index: RouteIndex | None = getattr(app.state, _STATE_KEY, None)
    if index is None:
        index = RouteIndex.build(app.routes, config_routes)
        setattr(app.state, _STATE_KEY, index)
    return index


def reset_route_index(app: Starlette) -> None:
    """Forget the index, so startup sees the routes as they are when the app starts."""
    setattr(app.state, _STATE_KEY, None)


def _contexts(routes: Sequence[BaseRoute]) -> Iterable[Any]:
    iterate = getattr(fastapi.routing, "iter_route_contexts", None)
    return routes if iterate is None else iterate(routes)


def _guards(
    config_routes: Mapping[str, str],
    methods: frozenset[str],
    templates: set[str],
    used: set[str],
) -> dict[str, str]:
    """Method -> endpoint id for the ``routes`` entries naming this route.

    A HEAD request runs the GET handler wherever the framework accepts it, so an entry
    for ``GET`` guards ``HEAD`` too unless ``HEAD`` has its own entry: otherwise HEAD
    would be a way around the limit.
    """
    guards: dict[str, str] = {}
    for method in methods | ({"HEAD"} if "GET" in methods else set()):
        for template in templates:
            key = f"{method} /{template.lstrip('/')}"
            if key in config_routes:
                guards[method] = config_routes[key]
                used.add(key)
    if "GET" in guards and "HEAD" not in guards:
        guards["HEAD"] = guards["GET"]
    return guards
