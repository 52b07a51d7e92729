"""How a ``routes`` key is spelled (SPEC §2): ``"METHOD /template"``, the leading ``/``
optional in the configuration, or `DEFAULT_ROUTE` (``"*"``, SPEC §5: every route no
other entry and no decorator guards). `route_key` is the only spelling rule; the loader
uses it to refuse two keys naming one route, and `http._routes.RouteTable` to match
requests.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

DEFAULT_ROUTE = "*"


def route_key(method: str, template: str) -> str:
    """The canonical ``routes`` key of ``method`` on ``template``: upper-case method,
    one space, the template with exactly one leading ``/``."""
    return f"{method.upper()} /{template.strip().lstrip('/')}"


def parse_route_key(key: object) -> str | None:
    """The canonical form of a configured ``routes`` key, None when it is neither
    ``"METHOD template"`` (a method of letters, then a template) nor `DEFAULT_ROUTE`."""
    if isinstance(key, str) and key.strip() == DEFAULT_ROUTE:
        return DEFAULT_ROUTE
    parts = key.split(None, 1) if isinstance(key, str) else []
    if len(parts) != 2 or not parts[0].isalpha():
        return None
    return route_key(parts[0], parts[1])


def duplicate_route_keys(keys: Iterable[object]) -> Iterator[tuple[str, str]]:
    """``(key, earlier key)`` for every configured key that names the same route as an
    earlier one once normalised (``"POST /r/{id}"`` and ``"post r/{id}"``)."""
    seen: dict[str, str] = {}
    for key in keys:
        canonical = parse_route_key(key)
        if canonical is None:
            continue
        earlier = seen.setdefault(canonical, str(key))
        if earlier != key:
            yield str(key), earlier
