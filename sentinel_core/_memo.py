"""`Memo`: what the request path keeps per tenant, bounded the cheapest way.

A memo of per-tenant values that are immutable and cheap to rebuild (a tenant's
prepared request, its decision's script call) needs no eviction order: when it is full
it is emptied, which costs each active tenant one rebuild, and lookups stay a plain
``dict.get`` (an LRU's bookkeeping would cost every hit more than a rare rebuild).
"""

from __future__ import annotations

from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Memo(dict[K, V]):
    """A dict of at most ``size`` entries, emptied when full. Read it with ``get``;
    add with `keep`. Safe to share between threads: a lost race builds a value twice."""

    __slots__ = ("size",)

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def keep(self, key: K, value: V) -> V:
        """Hold ``value`` under ``key`` (emptying the memo first when full); ``value``."""
        if len(self) >= self.size:
            self.clear()
        self[key] = value
        return value
