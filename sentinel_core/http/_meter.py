"""Units a request reports while it runs (SPEC §2 ``settle``): `sentinel_core.settle`.

The admission of a request guarded by a ``settle`` policy opens a `Meter` and makes it
the current one (a context variable) for the handler; `settle` adds to it; the
completion closes it and settles what it counted. The variable is copied into the
threads and tasks a handler runs in (Starlette's thread pool, asgiref's), and a
streamed body that a server iterates elsewhere re-enters it around each chunk
(`metered`), so a stream can report as it goes.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from contextvars import ContextVar
from typing import TypeVar

from sentinel_core._models import check_units

T = TypeVar("T")

OUTSIDE = (
    "sentinel_core.settle() reports the units of a request guarded by a policy with "
    "`settle = true`, while its handler or its streamed body runs; there is no such "
    "request here (outside a request, reserve with Sentinel.reserve and settle the "
    "Reservation)"
)


_LOCK = threading.Lock()
"""Every meter's: a report and the end of its request never interleave. One for all, so
that no request allocates one; each holder only adds or reads one number."""


class Meter:
    """The units one request reported: None until it reports, then their sum."""

    __slots__ = ("closed", "units")

    def __init__(self) -> None:
        self.closed = False
        self.units: int | None = None

    def add(self, units: int) -> bool:
        """Count ``units``; False once the request is over."""
        with _LOCK:
            if self.closed:
                return False
            self.units = units if self.units is None else self.units + units
            return True

    def close(self) -> int | None:
        """End the request's reporting: what it reported, None if nothing."""
        with _LOCK:
            self.closed = True
            return self.units


CURRENT: ContextVar[Meter | None] = ContextVar("sentinel_settle_meter", default=None)


def settle(units: int) -> None:
    """Report ``units`` used by the current request, for its ``settle`` policies: once
    the response is over, they are charged instead of the reservation (``cost``).
    Several calls add up (a stream may report as it goes); a request that reports
    nothing stays charged at its reservation.

    Raises:
        TypeError: ``units`` is not an int (a float, a string, a bool).
        ValueError: ``units`` is negative.
        RuntimeError: no request guarded by a settle policy is running here.
    """
    used = check_units(units)
    meter = CURRENT.get()
    if meter is None or not meter.add(used):
        raise RuntimeError(OUTSIDE)


def open_meter() -> Meter:
    """The meter of the request being admitted, made current: the one an earlier
    admission of the same request opened (an adapter may admit in two steps), or new."""
    meter = CURRENT.get()
    if meter is None or meter.closed:
        meter = Meter()
        CURRENT.set(meter)
    return meter


def metered(content: Iterable[T], meter: Meter | None) -> Iterator[T]:
    """``content``, each chunk made with ``meter`` current: a streamed body iterated
    where the admission's context is not (a server's thread)."""
    iterator = iter(content)
    while True:
        token = CURRENT.set(meter)
        try:
            chunk = next(iterator, _END)
        finally:
            CURRENT.reset(token)
        if chunk is _END:
            return
        yield chunk  # type: ignore[misc]


async def ametered(content: AsyncIterable[T], meter: Meter | None) -> AsyncIterator[T]:
    """`metered` for an async streamed body."""
    iterator = aiter(content)
    while True:
        token = CURRENT.set(meter)
        try:
            chunk = await anext(iterator, _END)
        finally:
            CURRENT.reset(token)
        if chunk is _END:
            return
        yield chunk  # type: ignore[misc]


_END = object()
