"""Where buckets live: Redis (sync and async shells) and the embedded memory store.

Every store answers a `ScriptCall` with the script's raw reply. The Redis shells only
move commands between a conversation of `_protocol` and redis-py; the memory store runs
the reference algorithms under a lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.exceptions import RedisClusterException, RedisError
from redis.retry import Retry

from sentinel_core.store._errors import translate, translated
from sentinel_core.store._fleet import announce
from sentinel_core.store._pipelining import AutoPipeline
from sentinel_core.store._protocol import (
    Check,
    ServerReport,
    adrive,
    arun_script,
    check_server,
    drive,
    run_script,
)
from sentinel_core.store._reference import Write
from sentinel_core.store._scripts import ScriptCall, run_reference, run_settle_reference

MEMORY_URL = "memory://"


class SyncStore(Protocol):
    def run(self, call: ScriptCall) -> Any: ...
    def check(self, require_noeviction: bool) -> ServerReport: ...
    def close(self) -> None: ...


class AsyncStore(Protocol):
    async def arun(self, call: ScriptCall) -> Any: ...
    async def acheck(self, require_noeviction: bool) -> ServerReport: ...
    async def aclose(self) -> None: ...


try:  # redis-py >= 7.1 names "no CLIENT SETINFO" driver_info=None; lib_name is deprecated
    import redis.driver_info

    _NO_CLIENT_SETINFO: dict[str, Any] = {"driver_info": None}
except ImportError:  # pragma: no cover - older redis-py
    _NO_CLIENT_SETINFO = {"lib_name": None, "lib_version": None}


UNCAPPED_CONNECTIONS = 2**31 - 1
"""No client-side cap on a pool's connections (redis-py's own default is 100)."""


def connection_options(socket_timeout_ms: int) -> dict[str, Any]:
    """redis-py options that keep every call within one ``socket_timeout_ms`` budget.

    redis-py retries timeouts and connection errors by default (3 retries with backoff
    since 6.0), which would multiply the budget: Sentinel retries nothing, the breaker
    decides. No CLIENT SETINFO on connect either: one round trip less per connection.
    RESP2, whatever redis-py's default: no HELLO round trip per connection, and under
    redis-py 8's RESP3 default the asyncio pool skips its stale-connection check, so
    after a Redis restart every pooled connection failed once and re-opened the breaker.

    No cap on connections: redis-py's pools refuse the 101st concurrent command with
    ``MaxConnectionsError``, a ``ConnectionError`` that the decision table would count as
    a Redis failure, so a spike of requests on one worker (the moment a rate limiter is
    for) answered 503s and opened the breaker with a healthy Redis. What bounds the
    connections is the work in flight in the process (its threads, or its tasks' script
    calls); Redis's own ``maxclients`` is the real limit, and its refusal is a Redis error.
    """
    seconds = socket_timeout_ms / 1000
    return {
        "socket_timeout": seconds,
        "socket_connect_timeout": seconds,
        "retry_on_error": [],
        "health_check_interval": 0,
        "protocol": 2,
        "max_connections": UNCAPPED_CONNECTIONS,
        **_NO_CLIENT_SETINFO,
    }


class RedisStore:
    """A blocking store on `redis.Redis`, for threaded servers (Flask, Django)."""

    def __init__(self, url: str, socket_timeout_ms: int) -> None:
        self.client = redis.Redis.from_url(
            url, retry=Retry(NoBackoff(), 0), **connection_options(socket_timeout_ms)
        )

    def run(self, call: ScriptCall) -> Any:
        try:
            return run_script(call, self.execute)
        except RedisError as exc:  # store._errors' boundary, inline: the hot path
            raise translate(exc) from exc

    def execute(self, *command: Any) -> Any:
        """A script call's command on a connection of the client's pool, through
        redis-py's public connection API: ``get_connection``, ``send_command``,
        ``read_response``, ``release``.

        Not `redis.Redis.execute_command`: around the same exchange it runs a retry
        wrapper (Sentinel's retries nothing), response callbacks (a script's reply has
        none) and redis-py's own observability: 11-15 µs of a guarded Flask or Django
        request, paid for nothing (docs/decisions.md). The connection's own send and read
        close it on any failure (interrupted ones too), so it goes back to the pool
        closed, never out of step.
        """
        pool = self.client.connection_pool
        connection = pool.get_connection()
        try:
            connection.send_command(*command)  # type: ignore[no-untyped-call]
            return connection.read_response()
        finally:
            pool.release(connection)

    def check(self, require_noeviction: bool) -> ServerReport:
        with translated():
            return drive(check_server(require_noeviction), self.client.execute_command)

    def announce(self, keys: Sequence[str], member: str, lifetime_ms: int) -> list[int]:
        """The fleet heartbeat: announce ``member``, return each key's live count."""
        with translated():
            return drive(announce(keys, member, lifetime_ms), self.client.execute_command)

    def close(self) -> None:
        self.client.close()


class AsyncRedisStore:
    """A non-blocking store on `redis.asyncio.Redis`, for asyncio servers (FastAPI).

    Script calls are auto-pipelined (`_pipelining`): the decisions of one event-loop
    turn share one write and one connection."""

    def __init__(self, url: str, socket_timeout_ms: int) -> None:
        self.client = self._connect(url, socket_timeout_ms)
        self.pipeline = AutoPipeline(lambda: self.client)

    def _connect(self, url: str, socket_timeout_ms: int) -> redis.asyncio.Redis:
        return redis.asyncio.Redis.from_url(
            url, retry=AsyncRetry(NoBackoff(), 0), **connection_options(socket_timeout_ms)
        )

    async def arun(self, call: ScriptCall) -> Any:
        try:
            return await arun_script(call, self.pipeline.execute)
        except (RedisError, RedisClusterException) as exc:  # store._errors' boundary, inline
            raise translate(exc) from exc

    async def acheck(self, require_noeviction: bool) -> ServerReport:
        with translated():
            return await adrive(check_server(require_noeviction), self.client.execute_command)

    async def aclose(self) -> None:
        await self.pipeline.aclose()
        await self.client.aclose()


class MemoryStore:
    """The embedded ``memory://`` store: the reference algorithms, in this process only.

    For development and for tests of user apps: it is thread-safe, but every process
    has its own buckets. Keys expire like Redis keys (PX), swept as writes accumulate.
    """

    _SWEEP_EVERY = 10_000

    def __init__(self, clock_us: Callable[[], int]) -> None:
        self._clock_us = clock_us
        self._lock = threading.Lock()
        self._data: dict[str, tuple[str, int]] = {}
        """key -> (value, expiry in unix microseconds)"""
        self._writes = 0

    def get(self, key: str) -> str | None:
        """A key's live value, like Redis GET (for tests and debugging)."""
        with self._lock:
            return self._live(key, self._clock_us())

    def run(self, call: ScriptCall) -> Any:
        with self._lock:
            now = self._clock_us()
            states = [self._live(key, now) for key in call.keys]
            raw: Any
            writes: Sequence[Write] | None
            with translated():  # the reference raises what the script would
                if call.settle:
                    raw, writes = run_settle_reference(call, states, now)
                else:
                    reply, writes = run_reference(call, states, now)
                    raw = reply if isinstance(reply, int) else list(reply)
            for write in writes or ():
                self._data[call.keys[write.index]] = (write.value, now + write.ttl_ms * 1_000)
                self._writes += 1
            if self._writes >= self._SWEEP_EVERY:
                self._sweep(now)
        return raw

    def clear(self) -> None:
        """Forget every key (between tests: the ``sentinel_reset`` fixture)."""
        with self._lock:
            self._data.clear()

    def check(self, require_noeviction: bool) -> ServerReport:
        return ServerReport((Check("store", True, "memory:// (embedded, this process only)"),))

    def close(self) -> None:
        """Nothing to release."""

    async def arun(self, call: ScriptCall) -> Any:
        return self.run(call)

    async def acheck(self, require_noeviction: bool) -> ServerReport:
        return self.check(require_noeviction)

    async def aclose(self) -> None:
        """Nothing to release."""

    def _live(self, key: str, now: int) -> str | None:
        entry = self._data.get(key)
        if entry is None or entry[1] <= now:
            return None
        return entry[0]

    def _sweep(self, now: int) -> None:
        self._writes = 0
        for key in [key for key, (_, expiry) in self._data.items() if expiry <= now]:
            del self._data[key]
