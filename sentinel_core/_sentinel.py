"""`Sentinel`: the framework-neutral facade (SPEC §3) the adapters build on.

It owns one configuration, one circuit breaker, one emergency limiter and the stores;
`evaluate` (threads) and `aevaluate` (asyncio) are the thin I/O shells around the
decision engine.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from redis.exceptions import RedisError

from ._breaker import CircuitBreaker
from ._config import SentinelConfig, load_config
from ._emergency import EmergencyLimiter
from ._engine import DecisionEngine
from ._keys import Identity, TenantIdentity
from ._models import Decision
from ._plugins import Hooks, make_plugin_manager
from ._protocol import ServerReport
from ._stores import MEMORY_URL, AsyncRedisStore, AsyncStore, MemoryStore, RedisStore, SyncStore


class Sentinel:
    """Rate limiting decisions for the policies of one configuration.

    Args:
        config: a mapping, a path to a TOML file with a ``[sentinel]`` table, or a
            loaded `SentinelConfig`.
        registry: the ``prometheus_client.CollectorRegistry`` for the metrics; the
            default registry when None.
        plugins: plugin objects registered besides the entry-point plugins.
        entry_points: load plugins from the ``sentinel`` entry-point group.
    """

    def __init__(
        self,
        config: Mapping[str, Any] | str | os.PathLike[str] | SentinelConfig,
        *,
        registry: Any = None,
        plugins: Iterable[object] = (),
        entry_points: bool = True,
    ) -> None:
        self.config = load_config(config)
        self.registry = registry
        self.hooks = Hooks(make_plugin_manager(plugins, entry_points=entry_points))
        breaker = self.config.breaker
        self.breaker = CircuitBreaker(
            breaker.failure_threshold,
            breaker.open_seconds,
            half_open_max_probes=breaker.half_open_max_probes,
            on_transition=self.hooks.breaker_transition,
        )
        self.engine = DecisionEngine(
            self.config.policies, self.breaker, EmergencyLimiter(), self.hooks
        )
        self._memory = MemoryStore() if self.config.redis_url.startswith(MEMORY_URL) else None
        self._sync_store: SyncStore | None = self._memory
        self._async_store: AsyncStore | None = self._memory

    @property
    def store(self) -> SyncStore:
        """The blocking store, connected on first use."""
        if self._sync_store is None:
            self._sync_store = RedisStore(self.config.redis_url, self.config.socket_timeout_ms)
        return self._sync_store

    @property
    def async_store(self) -> AsyncStore:
        """The asyncio store, connected on first use (inside the running event loop)."""
        if self._async_store is None:
            self._async_store = AsyncRedisStore(
                self.config.redis_url, self.config.socket_timeout_ms
            )
        return self._async_store

    def check(self) -> ServerReport:
        """Run the startup check and load the scripts.

        Raises:
            StartupError: Redis is reachable but unfit (eviction policy, maxmemory, ...).
            redis.exceptions.RedisError: Redis is unreachable.
        """
        report = self.store.check(self.config.require_noeviction)
        report.raise_for_problems()
        return report

    async def acheck(self) -> ServerReport:
        """`check` on the asyncio store."""
        report = await self.async_store.acheck(self.config.require_noeviction)
        report.raise_for_problems()
        return report

    def evaluate(self, endpoint_id: str, identity: str | Identity, request: Any = None) -> Decision:
        """Decide one request of ``identity`` (a tenant id, or an `Identity`) on ``endpoint_id``."""
        attempt = self.engine.begin(endpoint_id, _identity(identity), request)
        if attempt.permit is None:
            return attempt.short_circuit()
        with attempt:
            try:
                reply = self.store.run(attempt.call)
            except RedisError as exc:
                return attempt.failed(exc)
            return attempt.succeeded(reply)

    async def aevaluate(
        self, endpoint_id: str, identity: str | Identity, request: Any = None
    ) -> Decision:
        """`evaluate` for asyncio code: the same rules, on the asyncio store."""
        attempt = self.engine.begin(endpoint_id, _identity(identity), request)
        if attempt.permit is None:
            return attempt.short_circuit()
        with attempt:
            try:
                reply = await self.async_store.arun(attempt.call)
            except RedisError as exc:
                return attempt.failed(exc)
            return attempt.succeeded(reply)

    def close(self) -> None:
        if self._sync_store is not None:
            self._sync_store.close()

    async def aclose(self) -> None:
        if self._async_store is not None:
            await self._async_store.aclose()


def _identity(identity: str | Identity) -> Identity:
    return TenantIdentity(identity) if isinstance(identity, str) else identity
