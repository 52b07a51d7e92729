"""Auto-pipelining for the asyncio stores: the script calls of one event-loop turn go to
Redis together, on one connection (one per node of a cluster), each caller getting its
own reply.

redis-py sends a command on a connection of its own and waits for the reply: 64
concurrent decisions are 64 writes, 64 reads and 64 wake-ups on both sides. Here a
command that finds nothing in flight goes at once, alone, from its caller's task (a
process under light load pays nothing for the pipeline: no timer, no extra hop). While
something is in flight, a caller queues its command and awaits a future; the first
command queued in a turn starts a flush task, which runs in the next turn, once every
coroutine that was ready in this one has queued its own. The flush writes the batch in
one write and reads the replies in order, handing each to its caller as it arrives:

- a reply error (NOSCRIPT, WRONGTYPE, a script's error) is its caller's alone: the
  conversation (`_protocol.run_script`) reloads and retries for that caller only, and
  its retry joins whatever batch is open then;
- every reply is due within the connection's socket timeout of the write, as it would
  be alone on its connection: a reply that has not come by then fails as a timeout,
  with the replies after it (in flight on the same connection, now closed); a broken
  connection fails the replies still in flight on it, never those already read, nor
  those on other connections (other batches, other nodes of a cluster);
- a caller cancelled before the write is not sent; one cancelled after it gets nothing,
  and the flush reads on, so the connection stays in step.

Public redis-py APIs only: a pool's ``get_connection``/``release``, a cluster node's
``acquire_connection``/``release``, a connection's ``pack_command``,
``send_packed_command``, ``send_command`` and ``read_response``.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import redis.asyncio
import redis.asyncio.cluster
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import (
    AskError,
    ClusterDownError,
    RedisClusterException,
    RedisError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

Command = tuple[Any, ...]
Queued = tuple[Command, "asyncio.Future[Any]"]

REDIRECTIONS = (AskError, TryAgainError, ClusterDownError)
"""Cluster replies that say "not here, not now" (MOVED is an AskError): the command did
not run, and redis-py's cluster client sends it again where the slot now lives."""


def _fail(batch: Sequence[Queued], error: BaseException) -> None:
    """Every caller of ``batch`` still waiting gets ``error`` (its own copy: each caller
    raises it in its own task, with its own traceback)."""
    for _, future in batch:
        if not future.done():
            future.set_exception(copy.copy(error))


async def _arrived(
    connection: AbstractConnection, future: asyncio.Future[Any], reply: Any, deadline: float
) -> None:
    """Hand ``reply`` to its caller; ``None`` past the deadline is no reply but a read
    that outlived its timeout (what ``read_response`` answers then)."""
    if reply is None and asyncio.get_running_loop().time() >= deadline:
        await connection.disconnect(nowait=True)  # replies may still come: out of step
        raise RedisTimeoutError("no reply within the socket timeout")
    if future.done():  # its caller was cancelled after the write: the reply is dropped
        return
    if isinstance(reply, ResponseError):
        future.set_exception(reply)
    else:
        future.set_result(reply)


async def exchange(connection: AbstractConnection, batch: Sequence[Queued]) -> None:
    """Write ``batch`` on ``connection`` in one write and hand each reply to its caller.

    A broken or late connection fails every caller still in flight on it, and its error
    is raised after that.
    """
    loop = asyncio.get_running_loop()
    sent: list[Queued] = []
    packed: list[bytes] = []
    for item in batch:
        try:
            packed.extend(connection.pack_command(*item[0]))
        except RedisError as exc:  # a value redis-py cannot encode: that caller's alone
            item[1].set_exception(exc)
        else:
            sent.append(item)
    try:
        await connection.send_packed_command(packed)
        budget = connection.socket_timeout
        deadline = loop.time() + budget if budget else math.inf
        for item in sent:
            future = item[1]
            try:
                left = deadline - loop.time()
                reply = await connection.read_response(timeout=max(left, 0.0) if budget else None)
            except ResponseError as exc:  # the connection is fine: the error is the reply
                reply = exc
            # In a function of its own: after a read that timed out, Python 3.11 traces no
            # more lines of this frame (coverage would miss them).
            await _arrived(connection, future, reply, deadline)
    except BaseException as exc:  # the callers that have no reply yet get the error
        closed = RedisConnectionError("the connection closed with the command in flight")
        _fail(sent, exc if isinstance(exc, Exception) else closed)
        raise


class _AutoPipeline:
    """Collects the commands of one event-loop turn. ``direct(*command)`` sends a command
    alone, ``send(batch)`` a batch (failing its callers on error, or raising)."""

    def __init__(
        self,
        direct: Callable[..., Awaitable[Any]],
        send: Callable[[list[Queued]], Awaitable[None]],
    ) -> None:
        self._direct = direct
        self._send = send
        self._open: list[Queued] | None = None
        self._flushes: set[asyncio.Task[None]] = set()
        self._busy = 0
        """Commands sent alone and batches being sent, not yet answered."""

    def execute(self, *command: Any) -> Awaitable[Any]:
        """Queue ``command`` in this turn's batch: its reply, or its error, when read.
        With nothing in flight, the command goes at once, alone, from its caller's task."""
        if not self._busy and self._open is None:
            self._busy += 1  # now, not when awaited: the next command sees it in flight
            return self._alone(command)
        return self._queue(command)

    def _queue(self, command: Command) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        batch = self._open
        if batch is None:
            batch = self._open = []
            flush = loop.create_task(self._flush(batch))
            self._flushes.add(flush)
            flush.add_done_callback(functools.partial(self._flushed, batch))
        batch.append((command, future))
        return future

    def _flushed(self, batch: list[Queued], flush: asyncio.Task[None]) -> None:
        self._flushes.discard(flush)
        if self._open is batch:  # cancelled before it ran (the store closed, or its loop)
            self._open = None
        _fail(batch, RedisConnectionError("the store closed with the command unsent"))

    async def _alone(self, command: Command) -> Any:
        try:
            return await self._direct(*command)
        finally:
            self._busy -= 1

    async def _flush(self, batch: list[Queued]) -> None:
        self._open = None  # what is queued from now on goes in the next batch
        live = [item for item in batch if not item[1].done()]  # not cancelled meanwhile
        self._busy += 1
        try:
            await self._send(live)
        except asyncio.CancelledError:  # the store is closing
            _fail(live, RedisConnectionError("the store closed with the command in flight"))
            raise
        except Exception as exc:  # a bug, or what broke a connection: the callers raise it
            _fail(live, exc)
        finally:
            self._busy -= 1

    async def aclose(self) -> None:
        """Cancel the batches in flight (their callers get a connection error)."""
        flushes = list(self._flushes)
        for flush in flushes:
            flush.cancel()
        await asyncio.gather(*flushes, return_exceptions=True)


class AutoPipeline(_AutoPipeline):
    """One batch per turn on one connection of a `redis.asyncio.Redis`'s pool."""

    def __init__(self, client: Callable[[], redis.asyncio.Redis]) -> None:
        super().__init__(self._alone_on_pool, self._send_on_pool)
        self._client = client
        """The store's client, looked up at each call (a store may be handed a new one)."""

    async def _alone_on_pool(self, *command: Any) -> Any:
        """One command on a connection of the pool, as the sync store sends it
        (`RedisStore.execute` says why not through ``execute_command``); the
        connection's own send and read close it on any failure, cancellation included."""
        pool = self._client().connection_pool
        connection = await pool.get_connection()  # type: ignore[no-untyped-call]
        try:
            await connection.send_command(*command)
            return await connection.read_response()
        finally:
            await pool.release(connection)

    async def _send_on_pool(self, batch: list[Queued]) -> None:
        pool = self._client().connection_pool
        connection = await pool.get_connection()  # type: ignore[no-untyped-call]
        try:
            await exchange(connection, batch)
        finally:
            await pool.release(connection)


class ClusterAutoPipeline(_AutoPipeline):
    """One batch per turn, split by node: each node's share on one of its connections,
    the nodes' shares concurrently. A command without a key (``SCRIPT LOAD``, which goes
    to every primary, an ``EVALSHA`` of no key) is not batched."""

    def __init__(self, client: redis.asyncio.cluster.RedisCluster) -> None:
        super().__init__(client.execute_command, self._send_by_node)
        self._client = client

    def execute(self, *command: Any) -> Awaitable[Any]:
        if command[0] != "EVALSHA" or not command[2]:  # no key: no node to batch it for
            return self._client.execute_command(*command)
        if not self._busy and self._open is None:
            self._busy += 1
            return self._alone(command)
        return self._redirectable(command)

    async def _redirectable(self, command: Command) -> Any:
        try:
            return await self._queue(command)
        except REDIRECTIONS:  # the slot moved (it did not run): redis-py's client follows
            return await self._client.execute_command(*command)  # it, and learns the move

    async def _send_by_node(self, batch: list[Queued]) -> None:
        client = self._client
        await client.initialize()  # connects once; after that a no-op
        shares: dict[str, tuple[redis.asyncio.cluster.ClusterNode, list[Queued]]] = {}
        for item in batch:
            node = client.get_node_from_key(item[0][3])  # EVALSHA sha numkeys key ...
            assert node is not None  # a primary, or SlotNotCoveredError
            shares.setdefault(node.name, (node, []))[1].append(item)
        await asyncio.gather(*(self._send_to(node, share) for node, share in shares.values()))

    async def _send_to(self, node: redis.asyncio.cluster.ClusterNode, share: list[Queued]) -> None:
        try:
            connection = node.acquire_connection()
            try:
                await node.disconnect_if_needed(connection)
                await exchange(connection, share)
            finally:
                node.release(connection)
        except (RedisConnectionError, RedisTimeoutError) as exc:
            _fail(share, exc)
            await self._refresh(node)

    async def _refresh(self, node: redis.asyncio.cluster.ClusterNode) -> None:
        """A node failed: read the cluster's slots again, as redis-py's own client does
        after a connection error (the replica promoted in its place, if any)."""
        manager = self._client.nodes_manager
        manager.move_node_to_end_of_cached_nodes(node.name)
        # Still unreachable: the next batch's failure tries again.
        with contextlib.suppress(RedisError, RedisClusterException):
            await manager.initialize(last_failed_node_name=node.name)
