"""Where buckets live: Redis (sync and async shells) and the embedded memory store.

Every store answers a `ScriptCall` with the script's raw reply. The Redis shells only
move commands between a conversation of `_protocol` and redis-py; the memory store runs
the reference algorithms under a lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import MethodType
from typing import Any, Protocol

import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

from sentinel_core.store._connections import (
    AsyncConnectionStack,
    AsyncPoolConnections,
    ConnectionStack,
    PoolConnections,
)
from sentinel_core.store._protocol import (
    Check,
    Command,
    ServerReport,
    adrive,
    check_server,
    drive,
    pack_evalsha,
    run_script,
)
from sentinel_core.store._scripts import ScriptCall, run_reference

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


def connection_options(socket_timeout_ms: int) -> dict[str, Any]:
    """redis-py options that keep every call within one ``socket_timeout_ms`` budget.

    redis-py retries timeouts and connection errors by default (3 retries with backoff
    since 6.0), which would multiply the budget: Sentinel retries nothing, the breaker
    decides. No CLIENT SETINFO on connect either: one round trip less per connection.
    RESP2, whatever redis-py's default: no HELLO round trip per connection, and under
    redis-py 8's RESP3 default the asyncio pool skips its stale-connection check, so
    after a Redis restart every pooled connection failed once and re-opened the breaker.
    """
    seconds = socket_timeout_ms / 1000
    return {
        "socket_timeout": seconds,
        "socket_connect_timeout": seconds,
        "retry_on_error": [],
        "health_check_interval": 0,
        "protocol": 2,
        **_NO_CLIENT_SETINFO,
    }


def sends_directly(client: redis.Redis | redis.asyncio.Redis) -> bool:
    """Whether a script call may go straight to an idle connection of ``client``.

    Only when ``execute_command`` is redis-py's own, neither replaced on the instance
    or the class nor wrapped (tracing instrumentation wraps it, and its spans must not
    vanish), and the client is not a single-connection one. What the direct path
    skips is bookkeeping that Sentinel's options make inert (retries: none; health
    checks: none; response callbacks: none for EVALSHA); what it keeps is a stale-
    connection check and fork safety (`ConnectionStack`) and the connection's own
    handling of errors (a failed socket is disconnected).
    """
    method = client.execute_command
    return (
        type(method) is MethodType
        and method.__func__ in _REDIS_PY_EXECUTE
        and not hasattr(method.__func__, "__wrapped__")
        and client.connection is None
    )


_REDIS_PY_EXECUTE = frozenset({redis.Redis.execute_command, redis.asyncio.Redis.execute_command})


def _packed(connection: Any, command: Command) -> list[bytes]:
    if command[0] != "EVALSHA":
        packed: list[bytes] = connection.pack_command(*command)
        return packed
    encoder = connection.encoder
    return [pack_evalsha(command, encoder.encoding, encoder.encoding_errors)]


class RedisStore:
    """A blocking store on `redis.Redis`, for threaded servers (Flask, Django)."""

    def __init__(self, url: str, socket_timeout_ms: int) -> None:
        self.client = redis.Redis.from_url(
            url, retry=Retry(NoBackoff(), 0), **connection_options(socket_timeout_ms)
        )
        self.connections: ConnectionStack | PoolConnections = ConnectionStack(
            self.client.connection_pool
        )

    def run(self, call: ScriptCall) -> Any:
        client = self.client
        return drive(
            run_script(call), self._send if sends_directly(client) else client.execute_command
        )

    def _send(self, *command: Any) -> Any:
        """One command on an idle connection, as ``execute_command`` would send it."""
        connections = self.connections
        connection = connections.acquire()
        try:
            connection.send_packed_command(_packed(connection, command))
            return connection.read_response()
        finally:
            connections.release(connection)

    def check(self, require_noeviction: bool) -> ServerReport:
        return drive(check_server(require_noeviction), self.client.execute_command)

    def close(self) -> None:
        self.connections.close()
        self.client.close()


class AsyncRedisStore:
    """A non-blocking store on `redis.asyncio.Redis`, for asyncio servers (FastAPI)."""

    def __init__(self, url: str, socket_timeout_ms: int) -> None:
        self.client = redis.asyncio.Redis.from_url(
            url, retry=AsyncRetry(NoBackoff(), 0), **connection_options(socket_timeout_ms)
        )
        self.connections: AsyncConnectionStack | AsyncPoolConnections = AsyncConnectionStack(
            self.client.connection_pool
        )

    async def arun(self, call: ScriptCall) -> Any:
        client = self.client
        return await adrive(
            run_script(call), self._send if sends_directly(client) else client.execute_command
        )

    async def _send(self, *command: Any) -> Any:
        """`RedisStore._send` on the asyncio client."""
        connections = self.connections
        connection = await connections.acquire()
        try:
            await connection.send_packed_command(_packed(connection, command))
            return await connection.read_response()
        finally:
            await connections.release(connection)

    async def acheck(self, require_noeviction: bool) -> ServerReport:
        return await adrive(check_server(require_noeviction), self.client.execute_command)

    async def aclose(self) -> None:
        await self.connections.close()
        await self.client.aclose()


def _wall_clock_us() -> int:
    return time.time_ns() // 1_000


class MemoryStore:
    """The embedded ``memory://`` store: the reference algorithms, in this process only.

    For development and for tests of user apps: it is thread-safe, but every process
    has its own buckets. Keys expire like Redis keys (PX), swept as writes accumulate.
    """

    _SWEEP_EVERY = 10_000

    def __init__(self, clock_us: Callable[[], int] = _wall_clock_us) -> None:
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
            reply, writes = run_reference(call, states, now)
            for write in writes or ():
                self._data[call.keys[write.index]] = (write.value, now + write.ttl_ms * 1_000)
                self._writes += 1
            if self._writes >= self._SWEEP_EVERY:
                self._sweep(now)
        return [
            int(reply.allowed),
            reply.time_seconds,
            reply.time_microseconds,
            reply.remaining,
            reply.retry_after_seconds,
            reply.reset_seconds,
        ]

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
