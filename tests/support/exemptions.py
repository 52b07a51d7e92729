"""What the exemption and trusted-proxy suites of every adapter share: the configuration
and a count of the commands the store has run."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.support.adapter_config import spec_config
from tests.support.redis_admin import RedisAdmin

EXEMPT_TENANT = "vip-tenant"
EXEMPT_NETWORK = "198.51.100.0/24"
"""Exempt client network (TEST-NET-2); `PROXY` forwards for clients in it too."""
PROXY = "192.0.2.10"
"""The trusted proxy's address (TEST-NET-1)."""
UNTRUSTED = "203.0.113.99"
"""A peer nobody trusts, sending the same forwarding headers as the proxy."""


EXEMPT_PROXY = {"tenants": [EXEMPT_TENANT], "networks": [EXEMPT_NETWORK, f"{PROXY}/32"]}
"""An ``exempt`` section whose networks hold the trusted proxy itself (its own health
checks, say): issue 26's bypass, where an unreadable header fell back to that address."""

UNREADABLE_FORWARDING = {
    "padded_past_8_KiB": {"X-Forwarded-For": "6.6.6.6, " * 1024 + "203.0.113.66"},
    "broken_forwarded": {"Forwarded": 'for="203.0.113.66'},
    "mismatched": {"Forwarded": "for=203.0.113.66", "X-Forwarded-For": "203.0.113.67"},
}
"""What a client makes of the headers the proxy forwards (it writes their left part)
so that they cannot be read: they must never make the request exempt."""


def exemptions_config(redis_url: str, **overrides: Any) -> dict[str, Any]:
    """SPEC §2's policies with an exempt tenant and network and one trusted proxy."""
    settings: dict[str, Any] = {
        "exempt": {"tenants": [EXEMPT_TENANT], "networks": [EXEMPT_NETWORK]},
        "trusted_proxies": [f"{PROXY}/32"],
        **overrides,
    }
    return spec_config(redis_url, **settings)


_BACKGROUND = frozenset({"cmdstat_info", "cmdstat_replconf", "cmdstat_ping"})
"""What the store runs whoever asks: ``INFO`` (our own question), and what a cluster's
nodes send each other (replicas' ``REPLCONF ACK`` every second, ``PING``)."""


def valkey(redis_url: str) -> str:
    """``redis_url`` with its scheme spelled the Valkey way (``valkey+cluster://``...)."""
    return "valkey" + redis_url.removeprefix("redis")


@contextmanager
def store_untouched(redis_url: str) -> Iterator[None]:
    """Assert that the store behind ``redis_url`` (every primary of a cluster) runs no
    command for any client while the block runs: ``INFO commandstats`` before and after,
    read by one admin connection (a new one would discover the cluster again)."""
    admin = RedisAdmin(redis_url)
    try:
        before = _commands(admin)
        yield
        assert _commands(admin) == before
    finally:
        admin.close()


def _commands(admin: RedisAdmin) -> dict[str, int]:
    stats = admin.info("commandstats")
    return {
        name: int(value["calls"])
        for name, value in stats.items()
        if name.startswith("cmdstat_") and name not in _BACKGROUND
    }
