"""The app's routes as Sentinel sees them: full templates, methods and guards.

Recent FastAPI no longer copies an included router's routes into ``app.routes`` with
their prefix: the router serves them through the included router's own route objects,
whose ``path`` lacks the ``include_router`` prefix. So the adapter builds one index per
app of the routes with their full templates (``fastapi.routing.iter_route_contexts``
where it exists, ``app.routes`` on older FastAPI), each with the route object whose
``handle`` the router calls for it, where `_guard` puts the route's guard. Requests
are never resolved here: Starlette's router alone does that.
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
class Guarded:
    """What one method of one route pays for: the compiled endpoints, and their ids
    (what the request is recorded as admitted on)."""

    endpoints: tuple[Endpoint, ...]
    ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RouteEntry:
    """One route of the app, with its full template.

    ``template`` is the full path template as FastAPI spells it in OpenAPI
    (``/v1/items/{id}``) and ``path`` the same with its converters (``{id:int}``);
    ``decorated`` the endpoint ids of its ``@rate_limited`` handler and its
    ``rate_limit`` dependencies (the router's included); ``serving`` the route whose
    ``handle`` the router calls (one route serves every inclusion of a router included
    twice; ``matches`` tells them apart); ``exempt`` whether its handler is marked
    ``@exempt`` (``routes["*"]`` passes it by).
    """

    template: str
    path: str
    methods: frozenset[str]
    decorated: tuple[str, ...]
    serving: BaseRoute
    matches: Callable[[Scope], tuple[Match, Scope]]
    exempt: bool = False
    compiled: dict[str, Guarded] = field(default_factory=dict, compare=False, repr=False)
    """Method -> what a request pays for, compiled at the route's first such request."""


class RouteIndex:
    """The routes of one app, in the router's order, for the guards, startup and docs."""

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
                    serving=_serving_route(context),
                    matches=context.matches,
                    exempt=bool(getattr(endpoint, EXEMPT_ATTRIBUTE, False))
                    or path in documentation,
                )
            )
        return cls(entries, table, len(routes))

    def charged(self, entry: RouteEntry, method: str) -> tuple[str, ...]:
        """The endpoint ids a ``method`` request to ``entry`` pays for (the core's rule)."""
        return self.table.charged(
            method, (entry.template, entry.path), entry.decorated, default=not entry.exempt
        )

    def may_charge(self, entry: RouteEntry) -> bool:
        """Whether some request to ``entry`` may pay for an endpoint: one of its methods
        does, or it answers every method (a mount)."""
        return not entry.methods or any(self.charged(entry, method) for method in entry.methods)

    def compile(
        self, entry: RouteEntry, method: str, compile_id: Callable[[str], Endpoint]
    ) -> Guarded:
        """`charged`, compiled with ``compile_id`` and kept in ``entry.compiled``: the
        guard's first request to ``entry`` with ``method``. A method the route does
        not answer pays nothing: the router picked the route for its 405."""
        answered = not entry.methods or method in entry.methods
        ids = self.charged(entry, method) if answered else ()
        guarded = entry.compiled[method] = Guarded(tuple(map(compile_id, ids)), ids)
        return guarded

    def unmatched(self) -> list[str]:
        """The ``routes`` keys that name no route of the app."""
        answered = [
            (template, entry.methods)
            for entry in self.entries
            for template in (entry.template, entry.path)
        ]
        return self.table.unmatched(answered)


def route_index(app: Starlette, table: RouteTable) -> tuple[RouteIndex, bool]:
    """The app's index, kept on ``app.state`` and rebuilt when routes were added since
    (a route declared after startup is guarded like the others); and whether it was
    (re)built by this call."""
    index: RouteIndex | None = getattr(app.state, _STATE_KEY, None)
    if index is not None and index.size == len(app.routes):
        return index, False
    index = RouteIndex.build(app.routes, table, documentation=_documentation_paths(app))
    setattr(app.state, _STATE_KEY, index)
    return index, True


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


def _serving_route(context: Any) -> BaseRoute:
    """The route object whose ``handle`` the router calls for ``context``.

    A FastAPI operation is always served by its own `APIRoute`, included or not; any
    other route of an included router by the copy FastAPI made of it with the prefix,
    which the context's ``handle`` belongs to (a plain route's is its own), unless
    that ``handle`` is already a guard, which names the route it guards ``serving``.
    """
    original = getattr(context, "original_route", context)
    if isinstance(original, fastapi.routing.APIRoute):
        return original
    handle = context.handle
    route: BaseRoute = getattr(handle, "serving", None) or getattr(handle, "__self__", original)
    return route


def _contexts(routes: Sequence[BaseRoute]) -> Iterable[Any]:
    iterate = getattr(fastapi.routing, "iter_route_contexts", None)
    return routes if iterate is None else iterate(routes)
