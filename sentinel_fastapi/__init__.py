"""Sentinel for FastAPI: ``Sentinel(config).init_app(app)`` and ``@rate_limited(endpoint_id)``.

A thin adapter: it builds the core's `RequestView` from the ASGI request, asks the core
which endpoint ids the request pays for and for its `Admission`, and turns that into
Starlette responses (SPEC §5). ``Depends(rate_limit("id"))`` is the dependency idiom;
``@exempt`` leaves a path operation out of the ``routes["*"]`` default.
"""

from ._decorator import exempt, rate_limit, rate_limited
from ._extension import Sentinel
from ._middleware import SentinelMiddleware
from ._translate import RateLimitExceeded

__all__ = [
    "RateLimitExceeded",
    "Sentinel",
    "SentinelMiddleware",
    "exempt",
    "rate_limit",
    "rate_limited",
]
