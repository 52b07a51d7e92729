"""What a framework adapter needs from the core, and nothing a user's code needs.

An adapter translates (SPEC §5, STYLE 8): it builds a `RequestView` from its
framework's request, asks `RouteTable.charged` which endpoint ids a route pays for and
keeps them compiled (`Sentinel.endpoint` gives the `Endpoint` of an id) per route, calls
`Sentinel.admit`/`aadmit` with them, answers the `Admission`'s denial or runs the
handler, adds ``headers(status)`` and ``cookie(status)`` to the response, and calls
``complete``/``acomplete`` with the final status (a streamed body it iterates itself,
elsewhere than the admission's context, goes through `metered` / `ametered` with the
admission's ``meter``, so that its ``sentinel_core.settle`` calls count), or
``withdraw``/``awithdraw`` when a later guard of the same request refused it. An
admission whose ``owes_completion`` is false (a denial, or the usual allowed request)
has nothing left to do there: an adapter may skip that step. No rule of
SPEC §4 and §5 lives in an adapter; a fourth adapter is written against this module
alone.

With ``sentinel.config.enabled`` false (SPEC §2) an adapter checks that once, early, at
each entry point, and then serves the request untouched: no admission, so no decision,
field, cookie or store connection; its decorators' "did this request pass?" check
finds the request admitted on `PASS_THROUGH`, which contains every endpoint id.
"""

from sentinel_core.config._routes import duplicate_route_keys, route_key
from sentinel_core.decision._endpoint import Endpoint
from sentinel_core.http._lifecycle import CANCELLED, SERVER_ERROR, Admission, response_fields
from sentinel_core.http._meter import ametered, metered
from sentinel_core.http._outcome import PROBLEM_JSON, Cookie, Outcome, RequestView
from sentinel_core.http._routes import RouteTable
from sentinel_core.store._connect import open_async_store
from sentinel_core.store._redis import MEMORY_URL, AsyncStore


class _PassThrough:
    """Contains every endpoint id and lists none."""

    def __contains__(self, endpoint_id: object) -> bool:
        return True


PASS_THROUGH = _PassThrough()
"""What a request counts as admitted on when ``enabled`` is false (SPEC §2): every
endpoint id, so a decorator's "did this request pass Sentinel?" check lets it through
although nothing was decided."""

__all__ = [
    "CANCELLED",
    "MEMORY_URL",
    "PASS_THROUGH",
    "PROBLEM_JSON",
    "SERVER_ERROR",
    "Admission",
    "AsyncStore",
    "Cookie",
    "Endpoint",
    "Outcome",
    "RequestView",
    "RouteTable",
    "ametered",
    "duplicate_route_keys",
    "metered",
    "open_async_store",
    "response_fields",
    "route_key",
]
