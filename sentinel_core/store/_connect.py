"""Which store a ``redis_url`` names: the one place schemes map to store classes."""

from __future__ import annotations

from sentinel_core.store._cluster import (
    CLUSTER_SCHEME,
    SENTINEL_SCHEME,
    AsyncClusterStore,
    AsyncSentinelManagedStore,
    ClusterStore,
    SentinelManagedStore,
)
from sentinel_core.store._redis import AsyncRedisStore, AsyncStore, RedisStore, SyncStore

SCHEMES = ("redis://", "rediss://", "unix://", CLUSTER_SCHEME, SENTINEL_SCHEME, "memory://")


def open_sync_store(url: str, socket_timeout_ms: int) -> SyncStore:
    if url.startswith(CLUSTER_SCHEME):
        return ClusterStore(url, socket_timeout_ms)
    if url.startswith(SENTINEL_SCHEME):
        return SentinelManagedStore(url, socket_timeout_ms)
    return RedisStore(url, socket_timeout_ms)


def open_async_store(url: str, socket_timeout_ms: int) -> AsyncStore:
    if url.startswith(CLUSTER_SCHEME):
        return AsyncClusterStore(url, socket_timeout_ms)
    if url.startswith(SENTINEL_SCHEME):
        return AsyncSentinelManagedStore(url, socket_timeout_ms)
    return AsyncRedisStore(url, socket_timeout_ms)
