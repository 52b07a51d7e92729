"""A lock that says when a second thread starts waiting for it: the deterministic way to
test the check a double-checked lock repeats once it is acquired."""

from __future__ import annotations

import threading


class ContendedLock:
    """Use in place of a ``threading.Lock`` held with ``with``; ``contended`` is set when
    a thread finds it held and starts waiting."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.contended = threading.Event()

    def __enter__(self) -> None:
        if not self._lock.acquire(blocking=False):
            self.contended.set()
            self._lock.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self._lock.release()
