"""Strict configuration loading (SPEC §2).

Every value is checked when the configuration is loaded, never on the hot path: unknown
keys, wrong types, rates that do not parse, and integer arithmetic that would stop being
exact inside Lua (whose numbers are doubles: exact only below 2**53) are all
`ConfigError`s naming the full key path. This module reads the top level, the breaker,
the policies and the routes; `_config_identity` reads ``jwt`` and ``anonymous``, and
`_config_reader` holds the primitives both use.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from sentinel_core._models import MICRO, Algorithm, FailMode, IdentityKind, Policy, Rate
from sentinel_core.config._count import parse_count
from sentinel_core.config._fleet import (
    FLEET_HEARTBEAT_SECONDS,
    MAX_FLEET_HEARTBEAT_SECONDS,
    parse_fallback_scope,
)
from sentinel_core.config._identity import (
    AnonymousConfig,
    JwtConfig,
    parse_anonymous,
    parse_jwt,
)
from sentinel_core.config._layers import parse_network_rates, parse_rates
from sentinel_core.config._limits import LEASE_OR_QUOTA, parse_lease_or_quota
from sentinel_core.config._network import ExemptConfig, Network, parse_exempt, parse_networks
from sentinel_core.config._reader import Section, parse_rate
from sentinel_core.config._routes import parse_route_key
from sentinel_core.errors import ConfigError
from sentinel_core.store._scripts import debt_horizon
from sentinel_core.store._url import resolve

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised by the Python 3.10 tox environment
    import tomli as tomllib

LUA_EXACT_LIMIT = 2**53
"""Integers at or above this stop being exact in Lua's double-precision numbers."""
LUA_TIME_BOUND_US = 4_102_444_800 * MICRO
"""Redis TIME until 2100-01-01, in microseconds: the scripts add durations to it."""

NETWORK_SHARE = 10
"""Default network bucket of an anonymous policy: this many devices' limits."""


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    failure_threshold: int = 5
    open_seconds: int = 30
    half_open_max_probes: int = 1


@dataclass(frozen=True, slots=True)
class SentinelConfig:
    """A validated configuration. Build it with `load_config`."""

    redis_url: str
    policies: Mapping[str, Policy]
    socket_timeout_ms: int = 20
    require_noeviction: bool = True
    jwt: JwtConfig | None = None
    anonymous: AnonymousConfig | None = None
    breaker: BreakerConfig = field(default_factory=BreakerConfig)
    ratelimit_headers: bool = True
    routes: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    local_denials_ms: int = 1000
    """How long at most a process answers a bucket's denials itself (SPEC §3); 0: never."""
    exempt: ExemptConfig = field(default_factory=ExemptConfig)
    trusted_proxies: tuple[Network, ...] = ()
    enabled: bool = True
    """False: every guard passes requests through, never contacting the store (SPEC §2)."""
    opentelemetry: bool = False
    """Record decisions through OpenTelemetry's global providers too (SPEC §7)."""
    fleet_heartbeat_seconds: int = FLEET_HEARTBEAT_SECONDS
    """How often each process announces itself for ``fallback_scope: "fleet"`` policies."""


def load_config(
    source: Mapping[str, Any] | str | os.PathLike[str] | SentinelConfig,
) -> SentinelConfig:
    """Load and validate a configuration from a mapping or a TOML file's ``[sentinel]`` table.

    Raises:
        ConfigError: naming the key path of the first problem found.
    """
    if isinstance(source, SentinelConfig):
        return source
    return _parse(Section(read_table(source), ""))


def read_table(source: Mapping[str, Any] | str | os.PathLike[str]) -> Mapping[str, Any]:
    """The configuration as a mapping, not yet validated: ``source`` itself, or a TOML
    file's ``[sentinel]`` table.

    Raises:
        ConfigError: an unreadable file, a file that is not TOML or has no table, or a
            ``source`` that is neither a mapping nor a path.
    """
    if isinstance(source, (str, os.PathLike)):
        return _read_toml(Path(source))
    if not isinstance(source, Mapping):
        raise ConfigError("", f"expected a mapping or a TOML path, got {type(source).__name__}")
    return source


def _read_toml(path: Path) -> Mapping[str, Any]:
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError("", f"cannot read {path}: {exc.strerror}") from exc
    except UnicodeDecodeError:
        raise ConfigError("", f"{path} is not UTF-8 text, so not a TOML file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("", f"{path} is not valid TOML: {exc}") from exc
    table = document.get("sentinel")
    if not isinstance(table, Mapping):
        raise ConfigError("sentinel", f"{path} has no [sentinel] table")
    return table


def _parse(root: Section) -> SentinelConfig:
    enabled = root.boolean("enabled", True)
    redis_url = root.text("redis_url", required=True)
    assert redis_url is not None
    resolve(redis_url, root.path("redis_url"))
    socket_timeout_ms = root.integer("socket_timeout_ms", 20, maximum=60_000)
    require_noeviction = root.boolean("require_noeviction", True)
    local_denials_ms = root.integer("local_denials_ms", 1000, minimum=0, maximum=86_400_000)
    fleet_heartbeat_seconds = root.integer(
        "fleet_heartbeat_seconds", FLEET_HEARTBEAT_SECONDS, maximum=MAX_FLEET_HEARTBEAT_SECONDS
    )
    jwt_section = root.section("jwt")
    jwt = parse_jwt(jwt_section) if jwt_section is not None else None
    anonymous_section = root.section("anonymous")
    anonymous = parse_anonymous(anonymous_section) if anonymous_section is not None else None
    breaker_section = root.section("breaker")
    breaker = _parse_breaker(breaker_section) if breaker_section is not None else BreakerConfig()
    headers = root.section("headers")
    ratelimit_headers = True
    if headers is not None:
        ratelimit_headers = headers.boolean("ratelimit", True)
        headers.finish()
    policies_section = root.section("policies")
    if policies_section is None:
        raise ConfigError("policies", "missing key: declare at least one endpoint policy")
    policies = _parse_policies(policies_section, anonymous)
    routes_section = root.section("routes")
    routes = _parse_routes(routes_section, policies) if routes_section is not None else {}
    exempt_section = root.section("exempt")
    exempt = parse_exempt(exempt_section) if exempt_section is not None else ExemptConfig()
    proxies = parse_networks(root, "trusted_proxies") if root.has("trusted_proxies") else ()
    opentelemetry = root.boolean("opentelemetry", False)
    if opentelemetry:
        _require_opentelemetry(root.path("opentelemetry"))
    root.finish()
    return SentinelConfig(
        redis_url=redis_url,
        policies=MappingProxyType(policies),
        socket_timeout_ms=socket_timeout_ms,
        require_noeviction=require_noeviction,
        jwt=jwt,
        anonymous=anonymous,
        breaker=breaker,
        ratelimit_headers=ratelimit_headers,
        routes=MappingProxyType(routes),
        local_denials_ms=local_denials_ms,
        exempt=exempt,
        trusted_proxies=proxies,
        enabled=enabled,
        opentelemetry=opentelemetry,
        fleet_heartbeat_seconds=fleet_heartbeat_seconds,
    )


def _require_opentelemetry(path: str) -> None:
    """Refuse ``opentelemetry = true`` where ``opentelemetry-api`` is not installed."""
    try:
        import opentelemetry.metrics
        import opentelemetry.trace  # noqa: F401
    except ImportError:
        raise ConfigError(
            path,
            "needs opentelemetry-api, which is not installed: install the extra "
            "(pip install 'sentinel-ratelimit[otel]')",
        ) from None


def _parse_breaker(section: Section) -> BreakerConfig:
    config = BreakerConfig(
        failure_threshold=section.integer("failure_threshold", 5, maximum=1_000_000),
        open_seconds=section.integer("open_seconds", 30, maximum=86_400),
        half_open_max_probes=section.integer("half_open_max_probes", 1, maximum=1_000),
    )
    section.finish()
    return config


def _parse_policies(section: Section, anonymous: AnonymousConfig | None) -> dict[str, Policy]:
    policies: dict[str, Policy] = {}
    for endpoint_id in section.names():
        if (
            not isinstance(endpoint_id, str)
            or not endpoint_id
            or any(c.isspace() for c in endpoint_id)
        ):
            raise ConfigError(
                section.path(str(endpoint_id)), "endpoint ids are non-empty and have no spaces"
            )
        entry = section.section(endpoint_id)
        assert entry is not None
        policies[endpoint_id] = _parse_policy(entry, endpoint_id, anonymous)
    if not policies:
        raise ConfigError(section.location, "declare at least one endpoint policy")
    return policies


def _choice(section: Section, key: str, enum_type: Any, default: Any = None) -> Any:
    if not section.has(key):
        if default is None:
            raise ConfigError(section.path(key), "missing key")
        return default
    value = section.raw(key)
    try:
        return enum_type(value)
    except ValueError:
        allowed = " or ".join(repr(member.value) for member in enum_type)
        raise ConfigError(section.path(key), f"expected {allowed}, got {value!r}") from None


def _parse_policy(section: Section, endpoint_id: str, anonymous: AnonymousConfig | None) -> Policy:
    algorithm: Algorithm = _choice(section, "algorithm", Algorithm)
    if algorithm in LEASE_OR_QUOTA:
        return parse_lease_or_quota(section, endpoint_id, algorithm)
    fail_mode: FailMode = _choice(section, "fail_mode", FailMode)
    identity: IdentityKind = _choice(section, "identity", IdentityKind, IdentityKind.TENANT)
    rate, layers = parse_rates(section)
    if identity is not IdentityKind.TENANT and anonymous is None:
        # A user policy limits requests without a user as anonymous clients.
        raise ConfigError(
            section.path("identity"), f"{identity.value} policies need the anonymous section"
        )
    if algorithm is Algorithm.TOKEN_BUCKET:
        burst = section.integer("burst", rate.count)
    elif section.has("burst"):
        raise ConfigError(section.path("burst"), "burst applies to token_bucket policies only")
    else:
        burst = rate.count
    fallback_rate = None
    if section.has("fallback_rate"):
        if fail_mode is not FailMode.OPEN:
            raise ConfigError(section.path("fallback_rate"), "applies to fail_mode open only")
        fallback_rate = parse_rate(section.raw("fallback_rate"), section.path("fallback_rate"))
    elif fail_mode is FailMode.OPEN:
        raise ConfigError(
            section.path("fallback_rate"), "missing key: fail-open needs a fallback_rate"
        )
    cost = section.integer("cost", 1)
    smallest = min((burst, *(layer.count for layer in layers)))
    if cost > smallest:
        raise ConfigError(
            section.path("cost"), f"cost {cost} exceeds the limit {smallest}: never admitted"
        )
    network_rate, network_burst, network_layers = _parse_network(
        section, algorithm, identity, (rate, *layers), burst, cost
    )
    policy = Policy(
        endpoint_id=endpoint_id,
        algorithm=algorithm,
        rate=rate,
        burst=burst,
        fail_mode=fail_mode,
        fallback_rate=fallback_rate,
        identity=identity,
        version=section.integer("version", 1, maximum=LUA_EXACT_LIMIT - 1),
        shadow=section.boolean("shadow", False),
        cost=cost,
        network_rate=network_rate,
        network_burst=network_burst,
        layers=layers,
        network_layers=network_layers,
        count=parse_count(section.raw("count"), section.path("count"))
        if section.has("count")
        else None,
        fallback_scope=parse_fallback_scope(section, algorithm, fail_mode),
        settle=section.boolean("settle", False),
    )
    section.finish()
    limits = [(rate, burst, "rate", "burst")]
    limits += [(layer, layer.count, "rates", "rates") for layer in layers]
    if network_rate is not None and network_burst is not None:
        limits.append((network_rate, network_burst, "network_rate", "network_burst"))
    limits += [(layer, layer.count, "network_rates", "network_rates") for layer in network_layers]
    for limit, capacity, rate_key, burst_key in limits:
        _check_exact(policy, limit, capacity, section, rate_key, burst_key)
    return policy


def _parse_network(
    section: Section,
    algorithm: Algorithm,
    identity: IdentityKind,
    rates: tuple[Rate, ...],
    burst: int,
    cost: int,
) -> tuple[Rate | None, int | None, tuple[Rate, ...]]:
    """The network bucket of an anonymous policy (and of a user policy's anonymous
    fallback): the limit every device behind one IPv4 address or IPv6 /64 shares (a NAT,
    an office), with one limit per layer of a layered policy. Default: NETWORK_SHARE
    devices' worth."""
    if identity is IdentityKind.TENANT:
        for key in ("network_rate", "network_burst", "network_rates"):
            if section.has(key):
                raise ConfigError(section.path(key), "applies to anonymous and user policies only")
        return None, None, ()
    if len(rates) > 1:
        network = parse_network_rates(section, rates, NETWORK_SHARE)
        smallest = min(layer.count for layer in network)
        if cost > smallest:
            raise ConfigError(
                section.path("network_rates"),
                f"the network limit {smallest} is below the cost {cost}",
            )
        return network[0], network[0].count, network[1:]
    if section.has("network_rates"):
        raise ConfigError(section.path("network_rates"), "applies with rates; give network_rate")
    rate = rates[0]
    if section.has("network_rate"):
        network_rate = parse_rate(section.raw("network_rate"), section.path("network_rate"))
        default_burst = network_rate.count
    else:
        network_rate = Rate(rate.count * NETWORK_SHARE, rate.period_seconds)
        default_burst = burst * NETWORK_SHARE
    if algorithm is Algorithm.TOKEN_BUCKET:
        network_burst = section.integer("network_burst", default_burst)
    elif section.has("network_burst"):
        raise ConfigError(section.path("network_burst"), "applies to token_bucket policies only")
    else:
        network_burst = network_rate.count
    if cost > network_burst:
        key = "network_burst" if section.has("network_burst") else "network_rate"
        raise ConfigError(
            section.path(key), f"the network limit {network_burst} is below the cost {cost}"
        )
    return network_rate, network_burst, ()


def _check_exact(
    policy: Policy,
    rate: Rate,
    burst: int,
    section: Section,
    rate_key: str,
    burst_key: str,
) -> None:
    """Refuse parameters whose Lua arithmetic could exceed 2**53 (see the scripts' headers)."""
    period, cost = rate.period_seconds, policy.cost
    if policy.algorithm is Algorithm.TOKEN_BUCKET:
        # GCRA: TIME plus the time an empty bucket takes to fill (token_bucket.lua); a
        # settle policy's TAT reaches twice its debt horizon at most (settle.lua).
        inc = -(-cost * period * MICRO // rate.count)
        largest = LUA_TIME_BOUND_US + burst // cost * inc
        if policy.settle:
            largest = LUA_TIME_BOUND_US + 2 * debt_horizon(rate, burst)
        key = burst_key if section.has(burst_key) else rate_key
    else:
        # the estimate compares (current + cost) * window_us against limit * window_us;
        # a settle policy's counts reach twice the limit, and weigh against it.
        largest = ((4 if policy.settle else 1) * burst + cost) * period * MICRO
        key = rate_key
    if largest >= LUA_EXACT_LIMIT:
        raise ConfigError(
            section.path(key),
            f"too large: its integer arithmetic reaches {largest}, past 2**53 where Lua stops "
            "being exact; use a shorter unit or a smaller count",
        )


def _parse_routes(section: Section, policies: Mapping[str, Policy]) -> dict[str, str]:
    routes: dict[str, str] = {}
    originals: dict[str, str] = {}
    for key in section.names():
        path = section.path(str(key))
        endpoint_id = section.raw(key)
        canonical = parse_route_key(key)
        if canonical is None:
            raise ConfigError(
                path, 'expected "METHOD template", e.g. "POST /v1/ingest", or "*" (the default)'
            )
        if not isinstance(endpoint_id, str) or endpoint_id not in policies:
            raise ConfigError(path, f"unknown endpoint id {endpoint_id!r}: no policy declares it")
        if canonical in routes:
            raise ConfigError(
                path, f"duplicate of routes entry {originals[canonical]!r} (both are {canonical!r})"
            )
        routes[canonical] = endpoint_id
        originals[canonical] = str(key)
    return routes
