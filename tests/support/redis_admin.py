"""Direct inspection of the store behind a test's ``redis_url``, one server or a cluster.

The adapter suites check Redis itself (no keys after a 401, raw identities never in a
key, connections closed at shutdown, the start-up check run once). On a cluster a
plain client sees one node only, and redis-py's cluster client sends ``DBSIZE`` and
``KEYS`` to a single node: `RedisAdmin` asks every primary instead and adds up their
answers, so a test reads the whole store whichever ``--redis-store`` it runs on.
"""

from __future__ import annotations

from typing import Any

import redis

from sentinel_core.store._url import CLUSTER_SCHEME, parse_hosts


class RedisAdmin:
    """Admin commands on every primary of the store at ``url`` (``redis://`` or
    ``redis+cluster://``): counts are summed, listings concatenated."""

    def __init__(self, url: str) -> None:
        if url.startswith(CLUSTER_SCHEME):
            self.nodes = [_client(*address) for address in _primaries(url)]
        else:
            self.nodes = [redis.Redis.from_url(url, socket_timeout=5)]

    def dbsize(self) -> int:
        return sum(int(node.dbsize()) for node in self.nodes)

    def keys(self, pattern: str = "*") -> list[Any]:
        return [key for node in self.nodes for key in node.keys(pattern)]

    def client_list(self) -> list[dict[str, str]]:
        return [client for node in self.nodes for client in node.client_list()]

    def info(self, section: str) -> dict[str, Any]:
        """``INFO section`` of the store: numeric fields summed over the primaries, at
        every depth (``cmdstat_evalsha: {calls: ...}``); other fields the first's."""
        return _summed([node.info(section) for node in self.nodes])

    def config_resetstat(self) -> None:
        for node in self.nodes:
            node.config_resetstat()

    def flushall(self) -> None:
        for node in self.nodes:
            node.flushall()

    def close(self) -> None:
        for node in self.nodes:
            node.close()


def _client(host: str, port: int) -> redis.Redis:
    return redis.Redis(host=host, port=port, socket_timeout=5)


def _primaries(url: str) -> list[tuple[str, int]]:
    """The cluster's serving primaries, as the first answering startup node sees them
    (``CLUSTER NODES``: cheaper than a cluster client, which also loads ``COMMAND``)."""
    for host, port in parse_hosts(url, CLUSTER_SCHEME):
        seed = _client(host, port)
        try:
            nodes: dict[str, dict[str, Any]] = seed.execute_command("CLUSTER NODES")
        except redis.ConnectionError:
            continue
        finally:
            seed.close()
        return [
            (address.rsplit(":", 1)[0], int(address.rsplit(":", 1)[1]))
            for address, node in nodes.items()
            if "master" in node["flags"] and "fail" not in node["flags"] and node["slots"]
        ]
    raise redis.ConnectionError(f"no startup node of {url} answers")


def _summed(reports: list[dict[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for report in reports:
        for name, value in report.items():
            if name not in merged:
                merged[name] = value
            elif isinstance(value, dict):
                merged[name] = _summed([merged[name], value])
            elif isinstance(value, int | float) and not isinstance(value, bool):
                merged[name] += value
    return merged
