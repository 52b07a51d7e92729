"""The network-facing top-level settings: ``exempt`` (tenants and client networks never
limited) and ``trusted_proxies`` (the peers whose forwarding headers are believed).

Networks are parsed strictly: ``10.0.0.1/8`` (host bits set) is refused as a likely typo
rather than silently widened. Exempt tenant ids are secrets of a kind (they name
customers): no error message and no repr ever shows one.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from sentinel_core.config._reader import Section
from sentinel_core.errors import ConfigError

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

MAX_NETWORKS = 1024
"""Each request is compared with every listed network: keep the lists short."""


@dataclass(frozen=True, slots=True)
class ExemptConfig:
    """Who is never limited: tenant ids (compared as `TenantIdentity` hashes at run
    time, never shown) and client networks."""

    tenants: frozenset[str] = field(default=frozenset(), repr=False)
    networks: tuple[Network, ...] = ()

    def __repr__(self) -> str:
        return f"ExemptConfig(tenants=<{len(self.tenants)} hidden>, networks={self.networks!r})"


def parse_exempt(section: Section) -> ExemptConfig:
    tenants: set[str] = set()
    if section.has("tenants"):
        path = section.path("tenants")
        values = section.raw("tenants")
        if not isinstance(values, (list, tuple)):
            raise ConfigError(path, "expected a list of tenant ids")
        for index, value in enumerate(values):
            if not isinstance(value, str) or not value:
                # The value itself is not echoed: it may be a customer's id.
                raise ConfigError(f"{path}.{index}", "expected a non-empty string")
            tenants.add(value)
    networks = parse_networks(section, "networks") if section.has("networks") else ()
    section.finish()
    return ExemptConfig(frozenset(tenants), networks)


def parse_networks(section: Section, key: str) -> tuple[Network, ...]:
    """A list of CIDR networks (a bare address is a /32 or /128) at ``section.key``."""
    path = section.path(key)
    values = section.raw(key)
    if not isinstance(values, (list, tuple)):
        raise ConfigError(path, 'expected a list of CIDR networks, e.g. ["10.0.0.0/8"]')
    if len(values) > MAX_NETWORKS:
        raise ConfigError(path, f"at most {MAX_NETWORKS} networks")
    networks: list[Network] = []
    for index, value in enumerate(values):
        networks.append(_network(value, f"{path}.{index}"))
    return tuple(networks)


def _network(value: object, path: str) -> Network:
    if not isinstance(value, str):
        raise ConfigError(path, f"expected a CIDR network string, got {value!r}")
    try:
        return ipaddress.ip_network(value.strip())
    except ValueError:
        pass
    try:
        loose = ipaddress.ip_network(value.strip(), strict=False)
    except ValueError:
        raise ConfigError(path, f"not a CIDR network: {value!r}") from None
    raise ConfigError(path, f"{value!r} has host bits set; did you mean {str(loose)!r}?")
