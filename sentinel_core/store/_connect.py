"""Which store a ``redis_url`` names: the stores of each `StoreKind` of `store._url`."""

from __future__ import annotations

from sentinel_core.store._cluster import (
    AsyncClusterStore,
    AsyncSentinelManagedStore,
    ClusterStore,
    SentinelManagedStore,
)
from sentinel_core.store._fleet import FleetStore
from sentinel_core.store._redis import AsyncRedisStore, AsyncStore, RedisStore, SyncStore
from sentinel_core.store._url import StoreKind, resolve


def open_sync_store(url: str, socket_timeout_ms: int) -> SyncStore:
    return open_redis_store(url, socket_timeout_ms)


def open_fleet_store(url: str, socket_timeout_ms: int) -> FleetStore:
    """A blocking store of its own for the fleet heartbeat (a Redis URL, not memory://)."""
    return open_redis_store(url, socket_timeout_ms)


def open_redis_store(url: str, socket_timeout_ms: int) -> RedisStore | ClusterStore:
    kind, url = resolve(url)
    if kind is StoreKind.CLUSTER:
        return ClusterStore(url, socket_timeout_ms)
    if kind is StoreKind.SENTINEL:
        return SentinelManagedStore(url, socket_timeout_ms)
    return RedisStore(url, socket_timeout_ms)


def open_async_store(url: str, socket_timeout_ms: int) -> AsyncStore:
    kind, url = resolve(url)
    if kind is StoreKind.CLUSTER:
        return AsyncClusterStore(url, socket_timeout_ms)
    if kind is StoreKind.SENTINEL:
        return AsyncSentinelManagedStore(url, socket_timeout_ms)
    return AsyncRedisStore(url, socket_timeout_ms)
