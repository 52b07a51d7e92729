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

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import fastapi.routing
from starlette.applications import Starlette
from starlette.routing import BaseRoute, Match
from starlette.types import Scope

from sentinel_core.adapter import Endpoint, RouteTable

ENDPOINT_ATTRIBUTE = "__sentinel_endpoint_id__"
"""Where `rate_limited` and `rate_limit` record their endpoint id on their function."""
EXEMPT_ATTRIBUTE = "__sentinel_exempt__"
"""Where `exempt` marks a handler that ``routes["*"]`` passes by."""

_STATE_KEY = "sentinel_route_index"


@dataclass(frozen=True, slots=True)
class RouteEntry:
    """One route of the app, as the router resolves it.

    ``template`` is the full path template as FastAPI spells it in OpenAPI
    (``/v1/items/{id}``) and ``path`` the same with its converters (``{id:int}``);
    ``decorated`` the endpoint ids of its ``@rate_limited`` handler and its
    ``rate_limit`` dependencies (the router's included); ``exempt`` whether its handler
    is marked ``@exempt`` (``routes["*"]`` passes it by).
    """

    template: str
    path: str
    methods: frozenset[str]
    decorated: tuple[str, ...]
    route: BaseRoute
    matches: Callable[[Scope], tuple[Match, Scope]]
    exempt: bool = False
    compiled: dict[str, tuple[Endpoint, ...]] = field(
        default_factory=dict, compare=False, repr=False
    )
    """Method -> the compiled endpoints a request pays for, made at its first request."""


class RouteIndex:
    """The routes of one app, in the router's order, for the middleware and startup."""

    def __init__(self, entries: Sequence[RouteEntry], table: RouteTable, size: int) -> None:
        self.entries = tuple(entries)
        self.table = table
        self.size = size
        """How many routes the app had when this index was built."""

    @classmethod
    def build(
        cls, routes: Sequence[BaseRoute], table: RouteTable, *, documentation: Collection[str] = ()
    ) -> RouteIndex:
        """The index of ``routes``; those at the ``documentation`` paths (FastAPI's own
        pages) are left out of ``routes["*"]``, like Flask's static files."""
        entries: list[RouteEntry] = []
        for context in _contexts(routes):
            path = getattr(context, "path", None)
            path_format = getattr(context, "path_format", None) or path
            if not isinstance(path, str) or not isinstance(path_format, str):
                continue
            endpoint = getattr(context, "endpoint", None)
            decorated = _endpoint_ids(endpoint)
            decorated += _dependency_ids(getattr(context, "dependant", None))
            entries.append(
                RouteEntry(
                    template=path_format,
                    path=path,
                    methods=frozenset(getattr(context, "methods", None) or ()),
                    decorated=tuple(dict.fromkeys(decorated)),
                    route=getattr(context, "original_route", context),
                    matches=context.matches,
                    exempt=bool(getattr(endpoint, EXEMPT_ATTRIBUTE, False))
                    or path in documentation,
                )
            )
        return cls(entries, table, len(routes))

    def resolve(self, scope: Scope) -> RouteEntry | None:
        """The route the router will pick for ``scope``: the first full match."""
        for entry in self.entries:
            if entry.matches(scope)[0] is Match.FULL:
                return entry
        return None

    def charged(self, entry: RouteEntry, method: str) -> tuple[str, ...]:
        """The endpoint ids a ``method`` request to ``entry`` pays for (the core's rule)."""
        return self.table.charged(
            method, (entry.template, entry.path), entry.decorated, default=not entry.exempt
        )

    def endpoints(
        self, entry: RouteEntry, method: str, compile_id: Callable[[str], Endpoint]
    ) -> tuple[Endpoint, ...]:
        """`charged`, compiled with ``compile_id``, once per route and method."""
        endpoints = entry.compiled.get(method)
        if endpoints is None:
            ids = self.charged(entry, method)
            endpoints = entry.compiled[method] = tuple(map(compile_id, ids))
        return endpoints

    def unmatched(self) -> list[str]:
        """The ``routes`` keys that name no route of the app."""
        answered = [
            (template, entry.methods)
            for entry in self.entries
            for template in (entry.template, entry.path)
        ]
        return self.table.unmatched(answered)


def route_index(app: Starlette, table: RouteTable) -> RouteIndex:
    """The app's index, kept on ``app.state`` and rebuilt when routes were added since
    (a route declared after startup is guarded like the others)."""
    index: RouteIndex | None = getattr(app.state, _STATE_KEY, None)
    if index is None or index.size != len(app.routes):
        index = RouteIndex.build(app.routes, table, documentation=_documentation_paths(app))
        setattr(app.state, _STATE_KEY, index)
    return index


def reset_route_index(app: Starlette) -> None:
    """Forget the index, so startup sees the routes as they are when the app starts."""
    setattr(app.state, _STATE_KEY, None)


def _documentation_paths(app: Starlette) -> frozenset[str]:
    """The paths of FastAPI's own pages: the OpenAPI schema, Swagger UI (and its OAuth2
    redirect) and ReDoc (None when turned off; a Starlette app has none)."""
    names = ("openapi_url", "docs_url", "swagger_ui_oauth2_redirect_url", "redoc_url")
    return frozenset(
        url for url in (getattr(app, name, None) for name in names) if isinstance(url, str)
    )


def _endpoint_ids(function: object) -> tuple[str, ...]:
    endpoint_id = getattr(function, ENDPOINT_ATTRIBUTE, None)
    return (endpoint_id,) if isinstance(endpoint_id, str) else ()


def _dependency_ids(dependant: Any) -> tuple[str, ...]:
    """The ids of the ``rate_limit`` dependencies anywhere in a route's dependency tree."""
    ids: tuple[str, ...] = ()
    for dependency in getattr(dependant, "dependencies", ()):
        ids += _endpoint_ids(dependency.call) + _dependency_ids(dependency)
    return ids


def _contexts(routes: Sequence[BaseRoute]) -> Iterable[Any]:
    iterate = getattr(fastapi.routing, "iter_route_contexts", None)
    return routes if iterate is None else iterate(routes)
