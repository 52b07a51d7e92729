"""The one boundary where redis-py's exceptions become the core's store errors.

Every store method that talks to Redis runs inside `translated()`; nothing above
`sentinel_core.store` sees a redis-py exception, and the decision engine classifies
`StoreError`s only. Anything that is not a redis-py error (a bug) passes through as is.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from redis.exceptions import RedisClusterException, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from sentinel_core.errors import (
    StoreDataError,
    StoreError,
    StoreTimeoutError,
    StoreUnavailableError,
)

_DATA_ERROR = "WRONGTYPE"
"""In a reply error, blames a stored value, not the server (Redis prefixes it, a script's
error carries it inside its message): the server is healthy."""


def translate(exc: RedisError | RedisClusterException) -> StoreError:
    """The store error standing for one redis-py exception."""
    if isinstance(exc, RedisTimeoutError):
        return StoreTimeoutError(str(exc))
    if isinstance(exc, ResponseError) and _DATA_ERROR in str(exc):
        return StoreDataError(str(exc))
    return StoreUnavailableError(str(exc) or type(exc).__name__)


@contextmanager
def translated() -> Iterator[None]:
    """Run a Redis call, re-raising any redis-py exception as a `StoreError`."""
    try:
        yield
    except (RedisError, RedisClusterException) as exc:
        raise translate(exc) from exc
