"""Framework-free requests for the core's HTTP layer, and Redis counters to check it.

`request_view` builds the `RequestView` an adapter would build; `Headers` is the
case-insensitive mapping every framework provides. `script_calls` reads the private
server's ``INFO commandstats`` so a test can count the script executions a request cost.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import redis
from prometheus_client import CollectorRegistry

from sentinel_core import RequestView, Sentinel


class Headers(Mapping[str, str]):
    """A case-insensitive, read-only header mapping (like Starlette's or Werkzeug's)."""

    def __init__(self, items: Mapping[str, str] | None = None) -> None:
        self._items = {name.lower(): value for name, value in (items or {}).items()}

    def __getitem__(self, name: str) -> str:
        return self._items[name.lower()]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


def request_view(
    *,
    headers: Mapping[str, str] | None = None,
    cookies: Mapping[str, str] | None = None,
    peer: str | None = "203.0.113.7",
    method: str = "POST",
    route: str | None = "/v1/things",
) -> RequestView:
    return RequestView(method, route, Headers(headers), dict(cookies or {}), peer)


def make_sentinel(config: Mapping[str, Any], **options: Any) -> Sentinel:
    """A `Sentinel` with its own metrics registry and no entry-point plugins, unless
    the test asks for them, and a generous Redis budget unless the config sets one: a
    loaded CI machine must not turn a first contact (connect, NOSCRIPT, SCRIPT LOAD,
    EVALSHA) into a redis_timeout. Failure paths set their own budgets."""
    options.setdefault("registry", CollectorRegistry())
    options.setdefault("entry_points", False)
    return Sentinel({"socket_timeout_ms": 2000, **config}, **options)


def script_calls(client: redis.Redis) -> int:
    """Script executions (EVALSHA + EVAL) the server has run since it started."""
    stats: dict[str, Any] = client.info("commandstats")
    return sum(
        int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("evalsha", "eval")
    )


def header(outcome_headers: tuple[tuple[str, str], ...], name: str) -> str | None:
    """The value of header ``name`` in an `Outcome`'s headers (None when absent)."""
    values = [value for key, value in outcome_headers if key.lower() == name.lower()]
    assert len(values) <= 1, f"{name} appears {len(values)} times"
    return values[0] if values else None
