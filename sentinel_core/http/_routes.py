"""Which endpoint ids a request pays for (SPEC §5): the one rule every adapter calls.

A request may be named by decorators (``@rate_limited``, a FastAPI dependency, a DRF
throttle) and by a ``routes`` entry matched on its method and resolved route
template. It pays once per distinct endpoint id: a decorator and a route naming the
same id charge it once, different ids both apply. ``HEAD`` falls back to the ``GET``
entry, since every framework answers HEAD with the GET handler (otherwise HEAD would
be a way around the limit). How a ``routes`` key is spelled is the configuration's
rule (`config._routes.route_key`), which the loader also refuses duplicate keys with.

A view that answers every method with one body (a Django function view: Django's URL
patterns carry no method) has no method a ``routes`` entry could leave out: a request
of a method the route has no entry for pays every entry of that route, so PUT, DELETE,
OPTIONS or an invented method never reach a view guarded for POST unguarded. Views
that answer only the methods they define (FastAPI and Flask routes, class-based views)
answer the others with 405 and pass ``any_method=False``.

``routes["*"]`` (SPEC §5) is the default: a route of the app that no other entry and
no decorator guards is charged to it, unless its view opts out (the adapters'
``@exempt``, passed here as ``default=False``). A decorated route pays for its own ids
only; a request that matched no route of the app (a 404) pays for nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from types import MappingProxyType

from sentinel_core.config._routes import DEFAULT_ROUTE, route_key


class RouteTable:
    """The configuration's ``routes`` (canonical keys -> endpoint id), asked by the
    adapters which ids a request pays for and which entries name no route of the app."""

    __slots__ = ("_by_template", "_routes", "default")

    def __init__(self, routes: Mapping[str, str]) -> None:
        self.default = routes.get(DEFAULT_ROUTE)
        """The endpoint id of ``routes["*"]``, if any."""
        self._routes = MappingProxyType(
            {route_key(*k.split(" ", 1)): v for k, v in routes.items() if k != DEFAULT_ROUTE}
        )
        by_template: dict[str, list[str]] = {}
        for key, endpoint_id in self._routes.items():
            by_template.setdefault(key.split(" ", 1)[1], []).append(endpoint_id)
        self._by_template = {
            template: tuple(dict.fromkeys(ids)) for template, ids in by_template.items()
        }
        """Canonical template -> the ids of every entry of that route, in order."""

    def __bool__(self) -> bool:
        return bool(self._routes) or self.default is not None

    def endpoint_for(self, method: str, *templates: str) -> str | None:
        """The endpoint id a ``routes`` entry assigns to ``method`` on the route known
        by ``templates`` (a framework may spell one route two ways), HEAD falling back
        to GET."""
        routes = self._routes
        for candidate in (method, "GET") if method == "HEAD" else (method,):
            for template in templates:
                endpoint_id = routes.get(route_key(candidate, template))
                if endpoint_id is not None:
                    return endpoint_id
        return None

    def charged(
        self,
        method: str,
        templates: Iterable[str | None],
        decorated: Iterable[str] = (),
        *,
        default: bool = True,
        any_method: bool = False,
    ) -> tuple[str, ...]:
        """The endpoint ids one request pays for, each once, decorators' ids first.

        Args:
            method: the request method.
            templates: the resolved route's template(s); None entries (routing failed)
                are skipped.
            decorated: the ids the handler's decorators and dependencies name.
            default: whether ``routes["*"]`` may apply (False for an ``@exempt`` view,
                or one a framework idiom the core does not see guards, as DRF's
                throttle does).
            any_method: the view answers every method with one body (a Django function
                view): a method without an entry of its own pays every entry of the
                route.
        """
        spelled = [template for template in templates if template is not None]
        route_id = self.endpoint_for(method, *spelled) if spelled else None
        if route_id is not None:
            ids = [*decorated, route_id]
        elif any_method and spelled:
            ids = [*decorated, *self._every_entry(spelled)]
        else:
            ids = list(decorated)
        if not ids and default and spelled and self.default is not None:
            return (self.default,)
        return tuple(dict.fromkeys(ids))

    def _every_entry(self, templates: Iterable[str]) -> tuple[str, ...]:
        for template in templates:
            ids = self._by_template.get(route_key("GET", template).split(" ", 1)[1])
            if ids is not None:
                return ids
        return ()

    def unmatched(self, answered: Iterable[tuple[str, Collection[str] | None]]) -> list[str]:
        """The ``routes`` keys that no route of the app answers, in configuration order.

        Args:
            answered: ``(template, methods)`` for every route of the app; ``methods``
                None means any method (Django's URL patterns). A route answering GET
                answers HEAD too.
        """
        keys: set[str] = set()
        anything: set[str] = set()
        for template, methods in answered:
            if methods is None:
                anything.add(route_key("GET", template).split(" ", 1)[1])
                continue
            for method in (*methods, "HEAD") if "GET" in methods else methods:
                keys.add(route_key(method, template))
        return [
            key for key in self._routes if key not in keys and key.split(" ", 1)[1] not in anything
        ]

    def items(self) -> Iterable[tuple[str, str]]:
        return self._routes.items()
