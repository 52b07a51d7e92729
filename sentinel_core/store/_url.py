"""``redis_url``: which store a URL names, and whether it parses completely (SPEC §2).

`SCHEMES` is the one table of schemes: an alias (``valkey://`` for ``redis://``) is one
line naming the scheme redis-py understands. A URL that does not parse completely (host,
port range, database, options) is a `ConfigError` at load, never a silent default:
redis-py falls back to localhost:6379 db 0 for parts it cannot read, and refuses other
parts only when the first connection is made.
"""

from __future__ import annotations

import enum
from urllib.parse import parse_qsl, urlsplit

from sentinel_core.errors import ConfigError
from sentinel_core.store._cluster import (
    CLUSTER_SCHEME,
    parse_hosts,
    parse_sentinel_url,
)


class StoreKind(enum.Enum):
    REDIS = "a single Redis server"
    CLUSTER = "Redis Cluster"
    SENTINEL = "a primary discovered through Redis Sentinel"
    MEMORY = "the embedded memory store"


SCHEMES: dict[str, tuple[StoreKind, str]] = {
    "redis": (StoreKind.REDIS, "redis"),
    "rediss": (StoreKind.REDIS, "rediss"),
    "unix": (StoreKind.REDIS, "unix"),
    "redis+cluster": (StoreKind.CLUSTER, "redis+cluster"),
    "redis+sentinel": (StoreKind.SENTINEL, "redis+sentinel"),
    "memory": (StoreKind.MEMORY, "memory"),
    # Valkey (the Linux Foundation's fork of Redis 7.2) speaks the same protocol.
    "valkey": (StoreKind.REDIS, "redis"),
    "valkeys": (StoreKind.REDIS, "rediss"),
    "valkey+cluster": (StoreKind.CLUSTER, "redis+cluster"),
    "valkey+sentinel": (StoreKind.SENTINEL, "redis+sentinel"),
}
"""scheme -> (the store it names, the scheme redis-py and the stores are given)."""

QUERY_OPTIONS: dict[str, tuple[str, ...] | None] = {
    "db": None,  # digits, checked below
    "client_name": None,
    "ssl_cert_reqs": ("none", "optional", "required"),
    "ssl_check_hostname": ("true", "false", "yes", "no", "1", "0"),
    "ssl_ca_certs": None,
    "ssl_ca_path": None,
    "ssl_certfile": None,
    "ssl_keyfile": None,
}
"""The query options a ``redis://`` URL may carry (None: any non-empty text). Timeouts
and retries are Sentinel's (``socket_timeout_ms``), not the URL's."""

_MAX_PORT = 65_535


def resolve(url: str, path: str = "redis_url") -> tuple[StoreKind, str]:
    """(the store ``url`` names, the URL with its canonical scheme), or a ConfigError.

    Raises:
        ConfigError: an unknown scheme or a URL that does not parse completely.
    """
    scheme, separator, rest = url.partition("://")
    entry = SCHEMES.get(scheme.lower()) if separator else None
    if entry is None:
        known = ", ".join(f"{name}://" for name in SCHEMES)
        raise ConfigError(path, f"unsupported scheme in {url!r}; expected one of {known}")
    kind, canonical_scheme = entry
    canonical = f"{canonical_scheme}://{rest}"
    if kind is StoreKind.MEMORY:
        if rest:
            raise ConfigError(path, f"memory:// takes nothing after the scheme, got {url!r}")
    elif kind is StoreKind.REDIS:
        _check_redis_url(canonical, path)
    else:
        for host in rest.split("/", 1)[0].split(","):
            check_port(host, path)
        if kind is StoreKind.CLUSTER:
            parse_hosts(canonical, CLUSTER_SCHEME)
        else:
            parse_sentinel_url(canonical)
    return kind, canonical


def _check_redis_url(url: str, path: str) -> None:
    parts = urlsplit(url)
    if parts.fragment:
        raise ConfigError(path, "a fragment (#...) has no meaning in a Redis URL")
    if parts.scheme == "unix":
        if not parts.path or parts.path == "/":
            raise ConfigError(path, "expected unix:///path/to/redis.sock")
        _check_query(parts.query, path)
        return
    if not parts.hostname:
        raise ConfigError(path, "no host in the URL; expected redis://host[:port][/db]")
    check_port(parts.netloc, path)
    database = parts.path.lstrip("/")
    if database and not database.isdigit():
        raise ConfigError(path, f"the database must be a number, got {database!r}")
    _check_query(parts.query, path)


def check_port(netloc: str, path: str) -> None:
    """A ``host[:port]`` whose port, when given, is a number from 1 to 65535."""
    host_port = netloc.rpartition("@")[2]
    if host_port.endswith("]") or ":" not in host_port:
        return  # no port: redis-py's default 6379
    port = host_port.rpartition(":")[2]
    if not port.isdigit() or not 1 <= int(port) <= _MAX_PORT:
        raise ConfigError(path, f"the port must be a number from 1 to {_MAX_PORT}, got {port!r}")


def _check_query(query: str, path: str) -> None:
    try:
        options = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise ConfigError(path, f"the query {query!r} does not parse") from None
    for name, value in options:
        if name not in QUERY_OPTIONS:
            allowed = ", ".join(QUERY_OPTIONS)
            raise ConfigError(path, f"unknown option {name!r} (allowed: {allowed})")
        choices = QUERY_OPTIONS[name]
        valid = (
            value.isdigit()
            if name == "db"
            else (value.lower() in choices if choices is not None else bool(value))
        )
        if not valid:
            raise ConfigError(path, f"invalid value {value!r} for the option {name!r}")
