"""Sentinel for FastAPI: ``Sentinel(config).init_app(app)`` and ``@rate_limited(endpoint_id)``.

A thin adapter: it builds the core's `RequestView` from the ASGI request, asks the core
for an `Outcome`, and turns that into a Starlette response (SPEC §5).
"""

from ._decorator import rate_limited
from ._extension import Sentinel
from ._middleware import SentinelMiddleware

__all__ = ["Sentinel", "SentinelMiddleware", "rate_limited"]
