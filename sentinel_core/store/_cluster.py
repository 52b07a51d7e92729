"""Stores for deployments that outgrow one Redis: Redis Cluster and Redis Sentinel.

``redis+cluster://host:port[,host:port...]`` runs on redis-py's ``RedisCluster``
(sync and asyncio). Every script call's keys share one hash tag, so ``EVALSHA`` is
routed to the primary owning that slot; ``MOVED``/``ASK`` redirections are redis-py's
business. ``SCRIPT LOAD`` goes to every primary, so a ``NOSCRIPT`` on any node (a
promoted replica has an empty script cache) is recovered by the same one-reload rule as
on a single server. The start-up check runs on every primary.

``redis+sentinel://host:port[,host:port...]/service[/db]`` runs on redis-py's
``Sentinel``: the primary is discovered through the Sentinels and rediscovered after a
failover, and otherwise behaves as a single server.

redis-py's cluster client raises ``RedisClusterException`` (not a ``RedisError``) when
it cannot reach the cluster or a slot is uncovered mid-failover: the store boundary
(`sentinel_core.store._errors`) makes it a `StoreUnavailableError` like any other.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import redis.asyncio.cluster
import redis.asyncio.sentinel
import redis.cluster
import redis.sentinel
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

from sentinel_core.store._errors import translated
from sentinel_core.store._fleet import announce
from sentinel_core.store._pipelining import ClusterAutoPipeline
from sentinel_core.store._protocol import (
    Check,
    ServerReport,
    adrive,
    arun_script,
    check_server,
    drive,
    run_script,
)
from sentinel_core.store._redis import AsyncRedisStore, RedisStore, connection_options
from sentinel_core.store._scripts import ScriptCall
from sentinel_core.store._url import CLUSTER_SCHEME, parse_hosts, parse_sentinel_url


def _merge(reports: list[tuple[str, ServerReport]]) -> ServerReport:
    return ServerReport(
        tuple(
            Check(f"{node} {check.name}", check.ok, check.detail)
            for node, report in reports
            for check in report.checks
        )
    )


def _cluster_options(socket_timeout_ms: int) -> dict[str, Any]:
    options = connection_options(socket_timeout_ms)
    options.pop("retry_on_error")
    return options


class ClusterStore:
    """A blocking store on `redis.cluster.RedisCluster`; connects on first use."""

    def __init__(self, url: str, socket_timeout_ms: int) -> None:
        hosts = parse_hosts(url, CLUSTER_SCHEME)
        self._nodes = [redis.cluster.ClusterNode(h, p) for h, p in hosts]  # type: ignore[no-untyped-call]
        self._options = _cluster_options(socket_timeout_ms)
        self._client: redis.cluster.RedisCluster | None = None

    @property
    def client(self) -> redis.cluster.RedisCluster:
        if self._client is None:
            with translated():
                self._client = redis.cluster.RedisCluster(
                    startup_nodes=self._nodes, retry=Retry(NoBackoff(), 0), **self._options
                )
        return self._client

    def run(self, call: ScriptCall) -> Any:
        with translated():
            return run_script(call, self.client.execute_command)

    def check(self, require_noeviction: bool) -> ServerReport:
        with translated():
            client = self.client
            return _merge(
                [
                    (
                        node.name,
                        drive(
                            check_server(require_noeviction),
                            partial(client.execute_command, target_nodes=node),
                        ),
                    )
                    for node in client.get_primaries()  # type: ignore[no-untyped-call]
                ]
            )

    def announce(self, keys: Sequence[str], member: str, lifetime_ms: int) -> list[int]:
        """The fleet heartbeat (its keys share one slot)."""
        with translated():
            return drive(announce(keys, member, lifetime_ms), self.client.execute_command)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


class AsyncClusterStore:
    """A non-blocking store on `redis.asyncio.cluster.RedisCluster`; script calls are
    auto-pipelined, one pipeline per node (`_pipelining`)."""

    def __init__(self, url: str, socket_timeout_ms: int) -> None:
        nodes = [
            redis.asyncio.cluster.ClusterNode(host, port)
            for host, port in parse_hosts(url, CLUSTER_SCHEME)
        ]
        self.client = redis.asyncio.cluster.RedisCluster(
            startup_nodes=nodes,
            retry=AsyncRetry(NoBackoff(), 0),
            **_cluster_options(socket_timeout_ms),
        )
        self.pipeline = ClusterAutoPipeline(self.client)

    async def arun(self, call: ScriptCall) -> Any:
        with translated():
            return await arun_script(call, self.pipeline.execute)

    async def acheck(self, require_noeviction: bool) -> ServerReport:
        with translated():
            await self.client.initialize()
            reports = []
            for node in self.client.get_primaries():
                execute = partial(self.client.execute_command, target_nodes=node)
                reports.append((node.name, await adrive(check_server(require_noeviction), execute)))
            return _merge(reports)

    async def aclose(self) -> None:
        await self.pipeline.aclose()
        await self.client.aclose()


def _sentinel_setup(
    url: str, socket_timeout_ms: int
) -> tuple[list[tuple[str, int]], str, dict[str, Any], dict[str, Any]]:
    """(sentinels, service, Sentinel client options, primary connection options)."""
    sentinels, service, db = parse_sentinel_url(url)
    options = connection_options(socket_timeout_ms)
    timeouts = {key: options[key] for key in ("socket_timeout", "socket_connect_timeout")}
    return sentinels, service, {"sentinel_kwargs": timeouts, **timeouts}, {"db": db, **options}


class SentinelManagedStore(RedisStore):
    """A blocking store on the primary that Redis Sentinel currently designates."""

    def __init__(self, url: str, socket_timeout_ms: int) -> None:
        sentinels, service, sentinel_options, options = _sentinel_setup(url, socket_timeout_ms)
        sentinel = redis.sentinel.Sentinel(sentinels, **sentinel_options)
        self.client = sentinel.master_for(service, retry=Retry(NoBackoff(), 0), **options)


class AsyncSentinelManagedStore(AsyncRedisStore):
    """A non-blocking store on the primary that Redis Sentinel currently designates."""

    def _connect(self, url: str, socket_timeout_ms: int) -> redis.asyncio.Redis:
        sentinels, service, sentinel_options, options = _sentinel_setup(url, socket_timeout_ms)
        self._sentinel = redis.asyncio.sentinel.Sentinel(sentinels, **sentinel_options)
        client: redis.asyncio.Redis = self._sentinel.master_for(
            service, retry=AsyncRetry(NoBackoff(), 0), **options
        )
        return client

    async def aclose(self) -> None:
        """Close the primary's connections and those to the Sentinels (discovery)."""
        await super().aclose()
        for client in self._sentinel.sentinels:
            await client.aclose()
