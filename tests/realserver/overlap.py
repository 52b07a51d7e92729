"""How the real-server concurrency apps' handlers count themselves: in a plain Redis of
the test's own (``OVERLAP_REDIS_URL``), apart from Sentinel's store, so the tests see the
overlap the servers really had."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import redis

overlap = redis.Redis.from_url(os.environ.get("OVERLAP_REDIS_URL", "redis://127.0.0.1:1/0"))
_ENTER = overlap.register_script(
    "local now = redis.call('INCR', KEYS[1]) "
    "if now > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], now) end "
    "redis.call('RPUSH', KEYS[3], ARGV[1]) "
    "return now"
)


@contextlib.contextmanager
def running() -> Iterator[None]:
    """Count this handler in ``running`` (and the high-water mark ``most``) while it runs,
    and note its worker's pid in ``pids`` (the SIGKILL test kills it)."""
    _ENTER(keys=["running", "most", "pids"], args=[os.getpid()])
    try:
        yield
    finally:
        overlap.decr("running")
