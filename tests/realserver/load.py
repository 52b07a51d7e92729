"""A real HTTP load client over loopback: asyncio tasks sharing one httpx client.

It runs on an event loop in a thread of its own, so a test can kill, pause or restart
Redis while the load goes on and then read what every request got and when. Each
request opens a new connection (no keep-alive), so the kernel spreads the requests over
all the worker processes of the server instead of pinning a connection to one of them.
The load is bounded: by the requests it is given, by ``max_requests`` and by
``max_seconds``, whichever comes first.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cache

import httpx

from tests.support.tokens import claims, mint

_TICK = 0.01
TRANSPORT_ERROR = 0
"""The status of a request that got no HTTP answer (refused, reset, timed out)."""


@dataclass(frozen=True)
class Request:
    path: str
    tenant: str


@dataclass(frozen=True)
class Reply:
    path: str
    tenant: str
    status: int
    start: float
    """`time.monotonic()` when the request was sent."""
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


@cache
def _authorization(tenant: str) -> str:
    return f"Bearer {mint(claims(tenant, ttl=3600))}"


class Load:
    """POSTs ``requests`` to ``base_url`` from ``concurrency`` tasks until they run out,
    `stop` is called, or a bound is reached."""

    def __init__(
        self,
        base_url: str,
        requests: Iterable[Request],
        *,
        concurrency: int,
        max_requests: int = 20_000,
        max_seconds: float = 60.0,
        timeout: float = 10.0,
    ) -> None:
        self._base_url = base_url
        self._requests: Iterator[Request] = itertools.islice(requests, max_requests)
        self._concurrency = concurrency
        self._max_seconds = max_seconds
        self._timeout = timeout
        self._replies: list[Reply] = []
        self._stalls: list[tuple[float, float]] = []
        """(when, seconds late) of each tick of the event loop that came late"""
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="realserver-load", daemon=True)

    def start(self) -> Load:
        self._thread.start()
        return self

    def stop(self) -> list[Reply]:
        """Stop sending, wait for the requests in flight, and return every reply."""
        self._stopping.set()
        return self.wait()

    def wait(self) -> list[Reply]:
        """Wait until the load has ended by itself; every reply."""
        self._thread.join(self._max_seconds + self._timeout + 5)
        assert not self._thread.is_alive(), "the load client did not stop"
        return self.replies()

    def replies(self) -> list[Reply]:
        with self._lock:
            return list(self._replies)

    def stalled(self, reply: Reply) -> float:
        """Seconds this client was stalled (not running its event loop) while ``reply``
        was awaited."""
        with self._lock:
            return sum(late for at, late in self._stalls if reply.start <= at < reply.end)

    def wait_for(self, match: Callable[[Reply], bool], timeout: float) -> Reply | None:
        """The first reply (by send time) that ``match``es, waiting up to ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            found = sorted((reply for reply in self.replies() if match(reply)), key=_by_start)
            if found or time.monotonic() > deadline or not self._thread.is_alive():
                return found[0] if found else None
            time.sleep(0.05)

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        limits = httpx.Limits(max_connections=self._concurrency, max_keepalive_connections=0)
        deadline = time.monotonic() + self._max_seconds
        async with httpx.AsyncClient(
            base_url=self._base_url, limits=limits, timeout=self._timeout
        ) as client:
            ticker = asyncio.create_task(self._tick())
            await asyncio.gather(
                *(self._worker(client, deadline) for _ in range(self._concurrency))
            )
            ticker.cancel()

    async def _tick(self) -> None:
        """Notes when this client was not running: on a loaded machine a process can wait
        for a core for a long time, and a reply read late is not a slow answer."""
        while True:
            before = time.monotonic()
            await asyncio.sleep(_TICK)
            late = time.monotonic() - before - _TICK
            if late > _TICK:
                with self._lock:
                    self._stalls.append((before, late))

    async def _worker(self, client: httpx.AsyncClient, deadline: float) -> None:
        while not self._stopping.is_set() and time.monotonic() < deadline:
            request = next(self._requests, None)  # one thread: the tasks take turns
            if request is None:
                return
            headers = {"Authorization": _authorization(request.tenant)}
            start = time.monotonic()
            try:
                status = (await client.post(request.path, headers=headers)).status_code
            except httpx.TransportError:
                status = TRANSPORT_ERROR
            reply = Reply(request.path, request.tenant, status, start, time.monotonic())
            with self._lock:
                self._replies.append(reply)


def _by_start(reply: Reply) -> float:
    return reply.start


def run(base_url: str, requests: Iterable[Request], *, concurrency: int) -> list[Reply]:
    """Send every request of ``requests`` (bounded as `Load` is) and return the replies."""
    return Load(base_url, requests, concurrency=concurrency).start().wait()


def percentile(values: Iterable[float], fraction: float) -> float:
    """The nearest-rank percentile (``fraction`` in (0, 1]) of non-empty ``values``."""
    ordered = sorted(values)
    assert ordered, "no values"
    return ordered[max(1, math.ceil(len(ordered) * fraction)) - 1]
