"""``redis_url``: which store a URL names, and whether it parses completely (SPEC §2).

`SCHEMES` is the one table of schemes: an alias (``valkey://`` for ``redis://``) is one
line naming the scheme redis-py understands. A URL that does not parse completely (host,
port range, database, options) is a `ConfigError` at load naming the part, never a
silent default nor an error at the first connection: redis-py falls back to db 0 for a
database it cannot read (``/²``), and refuses other parts (a port ``27301:6379``, a
``?db=²``, an ``ssl_*`` option on a plain ``redis://``) only when it builds the first
connection, with a bare ``ValueError`` or ``TypeError``.

Numbers are ASCII digits only: ``str.isdigit`` also accepts ``²`` and ``٦``, which
``int`` then refuses or reads as another number. The cluster and Sentinel stores read
their hosts with `parse_hosts` and `parse_sentinel_url`, so what the loader accepted is
what they connect to.
"""

from __future__ import annotations

import enum
import ipaddress
import re
from urllib.parse import parse_qsl

from sentinel_core.errors import ConfigError


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

CLUSTER_SCHEME = "redis+cluster://"
SENTINEL_SCHEME = "redis+sentinel://"

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
and retries are Sentinel's (``socket_timeout_ms``), not the URL's. The ``ssl_*`` ones
only on a TLS URL (``rediss://``, ``valkeys://``): redis-py refuses them elsewhere."""

_MAX_PORT = 65_535
_DIGITS = re.compile(r"[0-9]+")
_NOT_IN_A_HOST = re.compile(r"[\x00-\x20\x7f%/?#@\[\]]")


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
        _check_redis_url(canonical_scheme, rest, path)
    elif kind is StoreKind.CLUSTER:
        parse_hosts(canonical, CLUSTER_SCHEME, path)
    else:
        parse_sentinel_url(canonical, path)
    return kind, canonical


def _check_redis_url(scheme: str, rest: str, path: str) -> None:
    rest, hash_sign, _ = rest.partition("#")
    if hash_sign:
        raise ConfigError(path, "a fragment (#...) has no meaning in a Redis URL")
    rest, _, query = rest.partition("?")
    netloc, _, database = rest.partition("/")
    if scheme == "unix":
        if netloc or not database:
            raise ConfigError(path, "expected unix:///path/to/redis.sock")
        _check_query(query, path, tls=False, path_database=None)
        return
    host_port = netloc.rpartition("@")[2]  # as redis-py reads it: the last @ ends userinfo
    if not host_port or host_port.startswith(":"):
        raise ConfigError(path, "no host in the URL; expected redis://host[:port][/db]")
    _host_and_port(host_port, path, port_required=False)
    if database and not _DIGITS.fullmatch(database):
        raise ConfigError(path, f"the database must be a number, got {database!r}")
    _check_query(query, path, tls=scheme == "rediss", path_database=database or None)


def _host_and_port(entry: str, path: str, *, port_required: bool) -> tuple[str, int | None]:
    """``host[:port]`` or ``[IPv6][:port]`` as (host, port): the host a name or an
    address, the port (required or not) ASCII digits from 1 to 65535."""
    if entry.startswith("["):
        address, bracket, after = entry[1:].partition("]")
        try:
            ipaddress.IPv6Address(address)
        except ValueError:
            raise ConfigError(path, f"{entry!r} is not a bracketed IPv6 address") from None
        if not bracket or (after and not after.startswith(":")):
            raise ConfigError(path, f"{entry!r} is not a bracketed IPv6 address")
        host, has_port, port = address, bool(after), after[1:]
    else:
        host, colon, port = entry.partition(":")
        has_port = bool(colon)
        if _NOT_IN_A_HOST.search(host):
            raise ConfigError(path, f"{host!r} is not a host name")
    if not has_port:
        if port_required:
            raise ConfigError(path, f"expected host:port in {entry!r}")
        return host, None
    if not _DIGITS.fullmatch(port) or not 1 <= int(port) <= _MAX_PORT:
        raise ConfigError(path, f"the port must be a number from 1 to {_MAX_PORT}, got {port!r}")
    return host, int(port)


def _check_query(query: str, path: str, *, tls: bool, path_database: str | None) -> None:
    try:
        options = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise ConfigError(path, f"the query {query!r} does not parse") from None
    seen: set[str] = set()
    for name, value in options:
        if name not in QUERY_OPTIONS:
            allowed = ", ".join(QUERY_OPTIONS)
            raise ConfigError(path, f"unknown option {name!r} (allowed: {allowed})")
        if name in seen:
            raise ConfigError(path, f"the option {name!r} is given twice")
        seen.add(name)
        if name.startswith("ssl_") and not tls:
            raise ConfigError(
                path, f"the option {name!r} needs a TLS URL (rediss:// or valkeys://)"
            )
        choices = QUERY_OPTIONS[name]
        valid = (
            _DIGITS.fullmatch(value) is not None
            if name == "db"
            else (value.lower() in choices if choices is not None else bool(value))
        )
        if not valid:
            raise ConfigError(path, f"invalid value {value!r} for the option {name!r}")
        if name == "db" and path_database is not None:
            raise ConfigError(
                path, f"the database is given twice: /{path_database} and ?db={value}"
            )


def parse_hosts(url: str, scheme: str, path: str = "redis_url") -> list[tuple[str, int]]:
    """The ``host:port`` list of a ``redis+cluster://`` or ``redis+sentinel://`` URL
    (with the scheme given); a cluster URL has nothing after its hosts but a ``/``.

    Raises:
        ConfigError: a host without a port, a bad port, or anything else in the URL.
    """
    rest = url[len(scheme) :]
    netloc = re.split(r"[/?#]", rest, maxsplit=1)[0]
    after = rest[len(netloc) :]
    if scheme == CLUSTER_SCHEME and after not in ("", "/"):
        raise ConfigError(
            path,
            f"nothing may follow the hosts of a cluster URL (Redis Cluster has database 0 "
            f"only), got {after!r}",
        )
    hosts = []
    for entry in filter(None, netloc.split(",")):
        host, port = _host_and_port(entry, path, port_required=True)
        if not host:
            raise ConfigError(path, f"expected host:port in {entry!r}")
        assert port is not None  # port_required
        hosts.append((host, port))
    if not hosts:
        raise ConfigError(path, f"no host:port in {url!r}")
    return hosts


def parse_sentinel_url(url: str, path: str = "redis_url") -> tuple[list[tuple[str, int]], str, int]:
    """``redis+sentinel://h:p[,h:p]/service[/db]`` → (sentinels, service name, db).

    Raises:
        ConfigError: the URL is not of that form.
    """
    hosts = parse_hosts(url, SENTINEL_SCHEME, path)
    rest = url[len(SENTINEL_SCHEME) :]
    service_path = rest.partition("/")[2]
    parts = [part for part in service_path.split("/") if part]
    if (
        not parts
        or len(parts) > 2
        or any(mark in service_path for mark in "?#")
        or (len(parts) == 2 and not _DIGITS.fullmatch(parts[1]))
    ):
        raise ConfigError(path, "expected redis+sentinel://host:port[,host:port]/service[/db]")
    return hosts, parts[0], int(parts[1]) if len(parts) == 2 else 0
