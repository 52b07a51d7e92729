"""Sentinel's own idle-connection stacks, over the connections of a redis-py pool.

A decision is one command and one reply. Handing it a connection through redis-py's
``ConnectionPool`` costs more than the round trip to a nearby Redis: a lock, the
pool's observability and event hooks, and a staleness test that reads the socket
(measured on the reference machine: ~20 µs sync, ~60 µs asyncio, against ~35 µs for
the whole round trip on a raw socket). A stack of idle connections needs none of it:
``deque.pop`` and ``deque.append`` are atomic, so threads share it without a lock.

What the pool's bookkeeping protects is kept, more cheaply:

- **staleness**: a reused connection whose peer closed it (Redis restarted, a
  ``timeout`` or ``CLIENT KILL``) is reconnected before the command is sent, so a
  restart costs no decision (a dead pooled connection would count as a Redis failure
  toward the breaker, once per connection);
- **fork safety**: a child process never uses its parent's sockets;
- **close**: every connection the stack made is disconnected.

Connections come from the pool's ``make_connection``, so the URL's options (TLS, unix
sockets, credentials, database, timeouts) and the connection class stay redis-py's.
A connection whose command failed was already disconnected by redis-py (timeouts,
connection errors, a cancelled read); it reconnects when next used.
"""

from __future__ import annotations

import os
import select
import threading
from collections import deque
from typing import Any

import redis
import redis.asyncio


def _peer_closed_or_spoke(connection: Any) -> bool:
    """Whether an idle sync connection's socket is readable: between two commands, a
    reply can't be pending, so readable means the peer closed it (or is talking out of
    turn); either way it must not carry the next command."""
    sock = connection._sock
    return sock is not None and bool(select.select((sock,), (), (), 0)[0])


def _async_peer_closed(connection: Any) -> bool:
    """`_peer_closed_or_spoke` for an asyncio connection: the event loop has already
    read the socket, so the stream reader knows whether the peer closed it."""
    reader = getattr(connection, "_reader", None)
    return reader is not None and reader.at_eof()


class ConnectionStack:
    """Idle connections of one `redis.ConnectionPool`, shared by threads."""

    def __init__(self, pool: redis.ConnectionPool) -> None:
        self._pool = pool
        self._idle: deque[Any] = deque()
        self._made: list[Any] = []
        self._made_lock = threading.Lock()
        self._pid = os.getpid()

    def acquire(self) -> Any:
        if self._pid != os.getpid():
            self._forget_parent_connections()
        try:
            connection = self._idle.pop()
        except IndexError:
            return self._make()
        if _peer_closed_or_spoke(connection):
            connection.disconnect()  # the next send reconnects
        return connection

    def release(self, connection: Any) -> None:
        self._idle.append(connection)

    def close(self) -> None:
        """Disconnect every connection made here; idle ones reconnect if used again."""
        with self._made_lock:
            made = list(self._made)
        for connection in made:
            connection.disconnect()

    def _make(self) -> Any:
        connection = self._pool.make_connection()
        with self._made_lock:
            self._made.append(connection)
        return connection

    def _forget_parent_connections(self) -> None:
        """In a forked child: drop the parent's connections without touching their
        sockets (redis-py's ``disconnect`` leaves another process's socket alone too)."""
        with self._made_lock:
            self._idle = deque()
            self._made = []
            self._pid = os.getpid()


class AsyncConnectionStack:
    """Idle connections of one `redis.asyncio.ConnectionPool`, for one event loop."""

    def __init__(self, pool: redis.asyncio.ConnectionPool) -> None:
        self._pool: Any = pool  # typed in some redis-py releases, not in others
        self._idle: deque[Any] = deque()
        self._made: list[Any] = []

    async def acquire(self) -> Any:
        try:
            connection = self._idle.pop()
        except IndexError:
            connection = self._pool.make_connection()
            self._made.append(connection)
            return connection
        if _async_peer_closed(connection):
            await connection.disconnect()  # the next send reconnects
        return connection

    async def release(self, connection: Any) -> None:
        self._idle.append(connection)

    async def close(self) -> None:
        for connection in list(self._made):
            await connection.disconnect()


class PoolConnections:
    """The pool itself, behind the stack's interface: for pools whose own bookkeeping
    matters, such as Redis Sentinel's, which drops connections to a demoted primary."""

    def __init__(self, pool: redis.ConnectionPool) -> None:
        self._pool = pool

    def acquire(self) -> Any:
        return self._pool.get_connection()

    def release(self, connection: Any) -> None:
        self._pool.release(connection)

    def close(self) -> None:
        """The client's own close disconnects the pool."""


class AsyncPoolConnections:
    """`PoolConnections` for an asyncio pool."""

    def __init__(self, pool: redis.asyncio.ConnectionPool) -> None:
        self._pool = pool

    async def acquire(self) -> Any:
        return await self._pool.get_connection()  # type: ignore[no-untyped-call]

    async def release(self, connection: Any) -> None:
        await self._pool.release(connection)

    async def close(self) -> None:
        """The client's own close disconnects the pool."""
