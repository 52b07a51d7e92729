"""One asyncio Redis store per running event loop, closed when that loop shuts down.

A `redis.asyncio` connection belongs to the event loop that opened it, and Django runs
async code on more than one loop: an ASGI server has one long-lived loop, but under
WSGI (and with the test `Client`) every async view runs in a fresh loop that
``async_to_sync`` creates and closes per request. A single shared async store would
hand one loop's connections to another. So the Django adapter keeps one store per
(loop, Redis URL, timeout), shared by every Sentinel instance built for that URL.

Closing: each store is paired with a suspended async generator whose ``finally``
closes the store. Event loops close every live async generator when they shut down
(``asyncio.run``, ``asyncio.Runner`` and asgiref all call ``shutdown_asyncgens``), so
the store's connections are closed inside their own loop, and the entry is dropped.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass

from sentinel_core.adapter import AsyncStore

_Key = tuple[asyncio.AbstractEventLoop, str, int]


@dataclass(frozen=True, slots=True)
class _Entry:
    store: AsyncStore
    closer: AsyncGenerator[None, None]


_lock = threading.Lock()
_entries: dict[_Key, _Entry] = {}


def store_for(url: str, socket_timeout_ms: int, open_store: Callable[[], AsyncStore]) -> AsyncStore:
    """The running loop's store for ``url``, opened with ``open_store`` (which must do no
    I/O) on the loop's first use.

    Raises:
        RuntimeError: called outside a running event loop.
    """
    key = (asyncio.get_running_loop(), url, socket_timeout_ms)
    entry = _entries.get(key)
    if entry is not None:
        return entry.store
    store = open_store()
    closer = _close_at_shutdown(key, store)
    # Nothing above awaits, so no other task of this loop can have added the entry.
    with _lock:
        _entries[key] = _Entry(store, closer)
    _start(closer)
    return store


def _start(closer: AsyncGenerator[None, None]) -> None:
    """Run ``closer`` to its ``yield`` without awaiting: its first step registers it with
    the running loop's async-generator hooks, and it awaits nothing before yielding."""
    step = closer.asend(None)
    try:
        step.send(None)
    except StopIteration:
        return
    raise RuntimeError("the store closer awaited before its first yield")


async def _close_at_shutdown(key: _Key, store: AsyncStore) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:
        with _lock:
            _entries.pop(key, None)
        await store.aclose()


def live_store_count() -> int:
    """How many loop stores are open (for tests: they must not outlive their loops)."""
    with _lock:
        return len(_entries)
