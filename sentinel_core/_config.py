"""Strict configuration loading (SPEC §2).

Every value is checked when the configuration is loaded, never on the hot path: unknown
keys, wrong types, rates that do not parse, and integer arithmetic that would stop being
exact inside Lua (whose numbers are doubles: exact only below 2**53) are all
`ConfigError`s naming the full key path.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ._cluster import CLUSTER_SCHEME, SENTINEL_SCHEME, parse_hosts, parse_sentinel_url
from ._connect import SCHEMES
from ._errors import ConfigError
from ._models import MICRO, Algorithm, FailMode, IdentityKind, Policy, Rate

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised by the Python 3.10 tox environment
    import tomli as tomllib

LUA_EXACT_LIMIT = 2**53
"""Integers at or above this stop being exact in Lua's double-precision numbers."""

MIN_SECRET_BYTES = 32

NETWORK_SHARE = 10
"""Default network bucket of an anonymous policy: this many devices' limits."""

_UNIT_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}
# ASCII digits only (``\d`` would accept any Unicode digit), and no trailing newline.
_RATE_RE = re.compile(r"[ \t]*([0-9]+)[ \t]*/[ \t]*(second|minute|hour|day)[ \t]*")
_MAX_RATE_DIGITS = 16
"""2**53 has 16 digits: longer counts can only be too large (and would make `int` slow)."""
_HMAC_ALGORITHMS = frozenset({"HS256", "HS384", "HS512"})
_PUBLIC_KEY_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512"}
)


@dataclass(frozen=True, slots=True)
class JwtKey:
    """One verification key. ``kid`` selects it when a token names its key."""

    kid: str | None
    material: str
    """An HMAC secret, or a PEM-encoded public key."""
    is_public_key: bool


@dataclass(frozen=True, slots=True)
class JwtConfig:
    algorithms: tuple[str, ...]
    keys: tuple[JwtKey, ...]
    audience: str | None = None
    issuer: str | None = None
    leeway_seconds: int = 0


@dataclass(frozen=True, slots=True)
class AnonymousConfig:
    cookie_secret: str
    previous_cookie_secrets: tuple[str, ...] = ()
    cookie_name: str = "sentinel_device"
    cookie_max_age_seconds: int = 31_536_000
    secure: bool = True


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


def load_config(
    source: Mapping[str, Any] | str | os.PathLike[str] | SentinelConfig,
) -> SentinelConfig:
    """Load and validate a configuration from a mapping or a TOML file's ``[sentinel]`` table.

    Raises:
        ConfigError: naming the key path of the first problem found.
    """
    if isinstance(source, SentinelConfig):
        return source
    if isinstance(source, (str, os.PathLike)):
        return _load_toml(Path(source))
    if not isinstance(source, Mapping):
        raise ConfigError("", f"expected a mapping or a TOML path, got {type(source).__name__}")
    return _parse(_Section(source, ""))


def _load_toml(path: Path) -> SentinelConfig:
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError("", f"cannot read {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("", f"{path} is not valid TOML: {exc}") from exc
    table = document.get("sentinel")
    if not isinstance(table, Mapping):
        raise ConfigError("sentinel", f"{path} has no [sentinel] table")
    return _parse(_Section(table, ""))


class _Section:
    """A mapping being read; remembers which keys were used so leftovers are errors."""

    def __init__(self, data: Mapping[str, Any], path: str) -> None:
        self._data = data
        self._path = path
        self._used: set[str] = set()

    @property
    def location(self) -> str:
        """This section's own key path (``""`` for the root)."""
        return self._path

    def path(self, key: str) -> str:
        return f"{self._path}.{key}" if self._path else key

    def names(self) -> list[str]:
        return list(self._data)

    def has(self, key: str) -> bool:
        return key in self._data

    def raw(self, key: str) -> Any:
        self._used.add(key)
        return self._data[key]

    def text(self, key: str, default: str | None = None, *, required: bool = False) -> str | None:
        if key not in self._data:
            if required:
                raise ConfigError(self.path(key), "missing key")
            return default
        value = self.raw(key)
        if not isinstance(value, str) or not value:
            raise ConfigError(self.path(key), f"expected a non-empty string, got {value!r}")
        return value

    def integer(
        self, key: str, default: int, *, minimum: int = 1, maximum: int | None = None
    ) -> int:
        if key not in self._data:
            return default
        value = self.raw(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(self.path(key), f"expected an integer, got {value!r}")
        if value < minimum or (maximum is not None and value > maximum):
            bounds = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
            raise ConfigError(self.path(key), f"must be {bounds}, got {value}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        if key not in self._data:
            return default
        value = self.raw(key)
        if not isinstance(value, bool):
            raise ConfigError(self.path(key), f"expected true or false, got {value!r}")
        return value

    def section(self, key: str) -> _Section | None:
        if key not in self._data:
            return None
        value = self.raw(key)
        if not isinstance(value, Mapping):
            raise ConfigError(self.path(key), f"expected a table/mapping, got {value!r}")
        return _Section(value, self.path(key))

    def finish(self) -> None:
        for key in self._data:
            if key not in self._used:
                raise ConfigError(self.path(str(key)), "unknown key")


def parse_rate(text: object, path: str) -> Rate:
    """Parse ``"N/second|minute|hour|day"`` into a `Rate` with a positive integer count."""
    match = _RATE_RE.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise ConfigError(path, f'expected "N/second|minute|hour|day" with integer N, got {text!r}')
    if len(match.group(1).lstrip("0")) > _MAX_RATE_DIGITS:
        raise ConfigError(path, "the count is too large: past 2**53 where Lua stops being exact")
    count = int(match.group(1))
    if count < 1:
        raise ConfigError(path, f"the count must be at least 1, got {text!r}")
    return Rate(count, _UNIT_SECONDS[match.group(2)])


def _parse(root: _Section) -> SentinelConfig:
    redis_url = root.text("redis_url", required=True)
    assert redis_url is not None
    if not redis_url.startswith(SCHEMES):
        raise ConfigError("redis_url", f"unsupported scheme in {redis_url!r}")
    if redis_url.startswith(CLUSTER_SCHEME):
        parse_hosts(redis_url, CLUSTER_SCHEME)
    elif redis_url.startswith(SENTINEL_SCHEME):
        parse_sentinel_url(redis_url)
    socket_timeout_ms = root.integer("socket_timeout_ms", 20, maximum=60_000)
    require_noeviction = root.boolean("require_noeviction", True)
    jwt_section = root.section("jwt")
    jwt = _parse_jwt(jwt_section) if jwt_section is not None else None
    anonymous_section = root.section("anonymous")
    anonymous = _parse_anonymous(anonymous_section) if anonymous_section is not None else None
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
    )


def _secret(section: _Section, key: str, env_key: str) -> str | None:
    """Read a secret given inline (``key``) or by environment variable name (``env_key``)."""
    if section.has(key) and section.has(env_key):
        raise ConfigError(section.path(key), f"give either {key} or {env_key}, not both")
    if section.has(env_key):
        name = section.text(env_key)
        assert name is not None
        value = os.environ.get(name)
        if not value:
            raise ConfigError(section.path(env_key), f"environment variable {name} is not set")
        path = section.path(env_key)
    elif section.has(key):
        value = section.text(key)
        path = section.path(key)
    else:
        return None
    assert value is not None
    if len(value.encode()) < MIN_SECRET_BYTES:
        raise ConfigError(path, f"secrets must be at least {MIN_SECRET_BYTES} bytes long")
    return value


def _public_key(section: _Section) -> str | None:
    if section.has("public_key") and section.has("public_key_file"):
        raise ConfigError(section.path("public_key"), "give either public_key or public_key_file")
    if section.has("public_key_file"):
        file_path = section.text("public_key_file")
        assert file_path is not None
        try:
            pem = Path(file_path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(
                section.path("public_key_file"), f"cannot read: {exc.strerror}"
            ) from exc
        path = section.path("public_key_file")
    elif section.has("public_key"):
        pem = section.text("public_key") or ""
        path = section.path("public_key")
    else:
        return None
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    try:
        load_pem_public_key(pem.encode())
    except ValueError as exc:
        raise ConfigError(path, "not a PEM-encoded public key") from exc
    return pem


def _parse_jwt_key(section: _Section, kid: str | None) -> JwtKey:
    secret = _secret(section, "key", "key_env")
    public = _public_key(section)
    if secret is not None and public is not None:
        raise ConfigError(section.path("key"), "a key is either an HMAC secret or a public key")
    if secret is None and public is None:
        raise ConfigError(
            section.path("key"), "missing key (key, key_env, public_key or public_key_file)"
        )
    return JwtKey(kid, secret or public or "", is_public_key=public is not None)


def _parse_jwt(section: _Section) -> JwtConfig:
    algorithms_path = section.path("algorithms")
    algorithms = section.raw("algorithms") if section.has("algorithms") else ["HS256"]
    if not isinstance(algorithms, (list, tuple)) or not algorithms:
        raise ConfigError(algorithms_path, "expected a non-empty list of algorithm names")
    for name in algorithms:
        if not isinstance(name, str) or name not in _HMAC_ALGORITHMS | _PUBLIC_KEY_ALGORITHMS:
            raise ConfigError(algorithms_path, f"unsupported algorithm {name!r}")
    keys: list[JwtKey] = []
    if section.has("keys"):
        entries = section.raw("keys")
        if not isinstance(entries, (list, tuple)) or not entries:
            raise ConfigError(section.path("keys"), "expected a non-empty list of key tables")
        for index, entry in enumerate(entries):
            if not isinstance(entry, Mapping):
                raise ConfigError(section.path(f"keys.{index}"), "expected a table/mapping")
            key_section = _Section(entry, section.path(f"keys.{index}"))
            kid = key_section.text("kid")
            keys.append(_parse_jwt_key(key_section, kid))
            key_section.finish()
    if any(section.has(name) for name in ("key", "key_env", "public_key", "public_key_file")):
        keys.append(_parse_jwt_key(section, None))
    if not keys:
        raise ConfigError(
            section.path("key"), "missing key (key, key_env, public_key, public_key_file or keys)"
        )
    kids = [key.kid for key in keys if key.kid is not None]
    if len(kids) != len(set(kids)):
        raise ConfigError(section.path("keys"), "each kid may name one key only")
    _check_jwt_keys(algorithms, keys, algorithms_path)
    config = JwtConfig(
        algorithms=tuple(algorithms),
        keys=tuple(keys),
        audience=section.text("audience"),
        issuer=section.text("issuer"),
        leeway_seconds=section.integer("leeway_seconds", 0, minimum=0, maximum=3600),
    )
    section.finish()
    return config


_MIN_RSA_BITS = 2048
_EC_CURVE_NAMES = {"ES256": "secp256r1", "ES384": "secp384r1", "ES512": "secp521r1"}


def _check_jwt_keys(algorithms: Sequence[str], keys: Sequence[JwtKey], path: str) -> None:
    """Every allowlisted algorithm has a key of its own family, strong enough for it
    (RFC 7518: an HMAC secret at least as long as the hash, RSA of 2048 bits or more)."""
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    secrets = [key.material.encode() for key in keys if not key.is_public_key]
    if any(secret.lstrip().startswith((b"-----BEGIN", b"ssh-")) for secret in secrets):
        # A public key used as an HMAC secret lets anyone sign tokens: refuse it outright.
        raise ConfigError(path, "an HMAC secret must not be a public key; use public_key")
    public = [load_pem_public_key(key.material.encode()) for key in keys if key.is_public_key]
    if any(not isinstance(key, (rsa.RSAPublicKey, ec.EllipticCurvePublicKey)) for key in public):
        raise ConfigError(path, "public keys must be RSA or EC (P-256, P-384, P-521) keys")
    rsa_keys = [key for key in public if isinstance(key, rsa.RSAPublicKey)]
    if any(key.key_size < _MIN_RSA_BITS for key in rsa_keys):
        raise ConfigError(path, f"RSA public keys must have at least {_MIN_RSA_BITS} bits")
    curves = {key.curve.name for key in public if isinstance(key, ec.EllipticCurvePublicKey)}
    for name in algorithms:
        if name in _HMAC_ALGORITHMS:
            if not secrets:
                raise ConfigError(path, f"{name} needs an HMAC secret among the keys")
            minimum = int(name[2:]) // 8
            if any(len(secret) < minimum for secret in secrets):
                raise ConfigError(path, f"{name} needs HMAC secrets of at least {minimum} bytes")
        elif name.startswith(("RS", "PS")) and not rsa_keys:
            raise ConfigError(path, f"{name} needs an RSA public key among the keys")
        elif name in _EC_CURVE_NAMES and _EC_CURVE_NAMES[name] not in curves:
            raise ConfigError(
                path, f"{name} needs an EC public key on {_EC_CURVE_NAMES[name]} among the keys"
            )


def _parse_anonymous(section: _Section) -> AnonymousConfig:
    secret = _secret(section, "cookie_secret", "cookie_secret_env")
    if secret is None:
        raise ConfigError(
            section.path("cookie_secret"), "missing key (cookie_secret or cookie_secret_env)"
        )
    previous: list[str] = []
    if section.has("previous_cookie_secrets"):
        values = section.raw("previous_cookie_secrets")
        path = section.path("previous_cookie_secrets")
        if not isinstance(values, (list, tuple)):
            raise ConfigError(path, "expected a list of secrets")
        for value in values:
            if not isinstance(value, str) or len(value.encode()) < MIN_SECRET_BYTES:
                raise ConfigError(
                    path, f"secrets must be strings of at least {MIN_SECRET_BYTES} bytes"
                )
            previous.append(value)
    config = AnonymousConfig(
        cookie_secret=secret,
        previous_cookie_secrets=tuple(previous),
        cookie_name=section.text("cookie_name", "sentinel_device") or "sentinel_device",
        cookie_max_age_seconds=section.integer("cookie_max_age_seconds", 31_536_000),
        secure=section.boolean("secure", True),
    )
    section.finish()
    return config


def _parse_breaker(section: _Section) -> BreakerConfig:
    config = BreakerConfig(
        failure_threshold=section.integer("failure_threshold", 5, maximum=1_000_000),
        open_seconds=section.integer("open_seconds", 30, maximum=86_400),
        half_open_max_probes=section.integer("half_open_max_probes", 1, maximum=1_000),
    )
    section.finish()
    return config


def _parse_policies(section: _Section, anonymous: AnonymousConfig | None) -> dict[str, Policy]:
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


def _choice(section: _Section, key: str, enum_type: Any, default: Any = None) -> Any:
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


def _parse_policy(section: _Section, endpoint_id: str, anonymous: AnonymousConfig | None) -> Policy:
    algorithm: Algorithm = _choice(section, "algorithm", Algorithm)
    if not section.has("rate"):
        raise ConfigError(section.path("rate"), "missing key")
    rate = parse_rate(section.raw("rate"), section.path("rate"))
    fail_mode: FailMode = _choice(section, "fail_mode", FailMode)
    identity: IdentityKind = _choice(section, "identity", IdentityKind, IdentityKind.TENANT)
    if identity is IdentityKind.ANONYMOUS and anonymous is None:
        raise ConfigError(section.path("identity"), "anonymous policies need the anonymous section")
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
    if cost > burst:
        raise ConfigError(
            section.path("cost"), f"cost {cost} exceeds the limit {burst}: never admitted"
        )
    network_rate, network_burst = _parse_network(section, algorithm, identity, rate, burst, cost)
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
    )
    section.finish()
    _check_exact(algorithm, rate, burst, cost, section, "rate", "burst")
    if network_rate is not None and network_burst is not None:
        _check_exact(
            algorithm, network_rate, network_burst, cost, section, "network_rate", "network_burst"
        )
    return policy


def _parse_network(
    section: _Section,
    algorithm: Algorithm,
    identity: IdentityKind,
    rate: Rate,
    burst: int,
    cost: int,
) -> tuple[Rate | None, int | None]:
    """The network bucket of an anonymous policy: the limit every device behind one IPv4
    address or IPv6 /64 shares (a NAT, an office). Default: NETWORK_SHARE devices' worth."""
    if identity is not IdentityKind.ANONYMOUS:
        for key in ("network_rate", "network_burst"):
            if section.has(key):
                raise ConfigError(section.path(key), "applies to anonymous policies only")
        return None, None
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
    return network_rate, network_burst


def _check_exact(
    algorithm: Algorithm,
    rate: Rate,
    burst: int,
    cost: int,
    section: _Section,
    rate_key: str,
    burst_key: str,
) -> None:
    """Refuse parameters whose Lua arithmetic could exceed 2**53 (see the scripts' headers)."""
    period = rate.period_seconds
    if algorithm is Algorithm.TOKEN_BUCKET:
        # refill = elapsed_us * count // period, elapsed capped at the time to fill.
        capacity_term = burst * MICRO * period
        largest = capacity_term + rate.count
        # blame the term that dominates: a huge burst, or a huge refill count
        dominant_burst = section.has(burst_key) and capacity_term >= rate.count
        key = burst_key if dominant_burst else rate_key
    else:
        # the estimate compares (current + cost) * window_us against limit * window_us.
        largest = (burst + cost) * period * MICRO
        key = rate_key
    if largest >= LUA_EXACT_LIMIT:
        raise ConfigError(
            section.path(key),
            f"too large: its integer arithmetic reaches {largest}, past 2**53 where Lua stops "
            "being exact; use a shorter unit or a smaller count",
        )


def _parse_routes(section: _Section, policies: Mapping[str, Policy]) -> dict[str, str]:
    routes: dict[str, str] = {}
    for key in section.names():
        path = section.path(str(key))
        endpoint_id = section.raw(key)
        parts = key.split(None, 1) if isinstance(key, str) else []
        if len(parts) != 2 or not parts[0].isalpha():
            raise ConfigError(path, 'expected "METHOD template", e.g. "POST /v1/ingest"')
        if not isinstance(endpoint_id, str) or endpoint_id not in policies:
            raise ConfigError(path, f"unknown endpoint id {endpoint_id!r}: no policy declares it")
        method, template = parts[0].upper(), parts[1].strip()
        routes[f"{method} /{template.lstrip('/')}"] = endpoint_id
    return routes
