"""The identity sections of a configuration: ``jwt`` (tenants) and ``anonymous``
(device cookies). Secrets are checked for length, public keys parsed, and every
allowed algorithm matched with a key of its own family and strength at load time."""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sentinel_core.config._reader import Section
from sentinel_core.errors import ConfigError

MIN_SECRET_BYTES = 32
MAX_COOKIE_AGE_SECONDS = 400 * 86_400
"""RFC 6265bis caps a cookie's lifetime at 400 days (browsers do); longer ages also
overflow the frameworks' expiry dates."""
_COOKIE_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
"""RFC 6265's cookie-name: an RFC 2616 token (no separators, spaces or controls)."""
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
    jwks: JwksConfig | None = None


@dataclass(frozen=True, slots=True)
class JwksConfig:
    """Where to fetch verification keys, and how often (see `identity._jwks`)."""

    url: str
    refresh_seconds: int = 60
    cache_seconds: int = 300
    timeout_ms: int = 2000


@dataclass(frozen=True, slots=True)
class AnonymousConfig:
    cookie_secret: str
    previous_cookie_secrets: tuple[str, ...] = ()
    cookie_name: str = "sentinel_device"
    cookie_max_age_seconds: int = 31_536_000
    secure: bool = True


def _secret(section: Section, key: str, env_key: str) -> str | None:
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
    if _secret_bytes(value, path) < MIN_SECRET_BYTES:
        raise ConfigError(path, f"secrets must be at least {MIN_SECRET_BYTES} bytes long")
    return value


def _secret_bytes(value: str, path: str) -> int:
    """The UTF-8 length of a secret; a secret that is not text (a lone surrogate, as
    Python decodes an environment variable's undecodable bytes) is refused."""
    try:
        return len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise ConfigError(path, "secrets must be valid UTF-8 text") from None


def _public_key(section: Section) -> str | None:
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


def _parse_jwt_key(section: Section, kid: str | None) -> JwtKey:
    secret = _secret(section, "key", "key_env")
    public = _public_key(section)
    if secret is not None and public is not None:
        raise ConfigError(section.path("key"), "a key is either an HMAC secret or a public key")
    if secret is None and public is None:
        raise ConfigError(
            section.path("key"), "missing key (key, key_env, public_key or public_key_file)"
        )
    return JwtKey(kid, secret or public or "", is_public_key=public is not None)


def parse_jwt(section: Section) -> JwtConfig:
    algorithms_path = section.path("algorithms")
    algorithms = section.raw("algorithms") if section.has("algorithms") else ["HS256"]
    if not isinstance(algorithms, (list, tuple)) or not algorithms:
        raise ConfigError(algorithms_path, "expected a non-empty list of algorithm names")
    for name in algorithms:
        if not isinstance(name, str) or name not in _HMAC_ALGORITHMS | _PUBLIC_KEY_ALGORITHMS:
            raise ConfigError(algorithms_path, f"unsupported algorithm {name!r}")
    jwks = _parse_jwks(section)
    if not section.has("algorithms") and jwks is not None:
        algorithms = ["RS256"]  # what providers publishing a JWKS sign with by default
    keys: list[JwtKey] = []
    if section.has("keys"):
        entries = section.raw("keys")
        if not isinstance(entries, (list, tuple)) or not entries:
            raise ConfigError(section.path("keys"), "expected a non-empty list of key tables")
        for index, entry in enumerate(entries):
            if not isinstance(entry, Mapping):
                raise ConfigError(section.path(f"keys.{index}"), "expected a table/mapping")
            key_section = Section(entry, section.path(f"keys.{index}"))
            kid = key_section.text("kid")
            keys.append(_parse_jwt_key(key_section, kid))
            key_section.finish()
    if any(section.has(name) for name in ("key", "key_env", "public_key", "public_key_file")):
        keys.append(_parse_jwt_key(section, None))
    if not keys and jwks is None:
        raise ConfigError(
            section.path("key"),
            "missing key (key, key_env, public_key, public_key_file, keys or jwks_url)",
        )
    kids = [key.kid for key in keys if key.kid is not None]
    if len(kids) != len(set(kids)):
        raise ConfigError(section.path("keys"), "each kid may name one key only")
    _check_jwt_keys(algorithms, keys, algorithms_path, jwks=jwks is not None)
    config = JwtConfig(
        algorithms=tuple(algorithms),
        keys=tuple(keys),
        audience=section.text("audience"),
        issuer=section.text("issuer"),
        leeway_seconds=section.integer("leeway_seconds", 0, minimum=0, maximum=3600),
        jwks=jwks,
    )
    section.finish()
    return config


_MIN_RSA_BITS = 2048
_EC_CURVE_NAMES = {"ES256": "secp256r1", "ES384": "secp384r1", "ES512": "secp521r1"}


def _check_jwt_keys(
    algorithms: Sequence[str], keys: Sequence[JwtKey], path: str, *, jwks: bool
) -> None:
    """Every allowlisted algorithm has a key of its own family, strong enough for it
    (RFC 7518: an HMAC secret at least as long as the hash, RSA of 2048 bits or more).
    With a JWKS the public-key algorithms' keys come from it; HMAC secrets never do."""
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
        elif jwks:
            continue
        elif name.startswith(("RS", "PS")) and not rsa_keys:
            raise ConfigError(path, f"{name} needs an RSA public key among the keys")
        elif name in _EC_CURVE_NAMES and _EC_CURVE_NAMES[name] not in curves:
            raise ConfigError(
                path, f"{name} needs an EC public key on {_EC_CURVE_NAMES[name]} among the keys"
            )


_LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


def _parse_jwks(section: Section) -> JwksConfig | None:
    """``jwks_url`` and its timings. HTTPS only, except plain HTTP to a loopback host (a
    local provider or a sidecar): keys fetched in clear text could be swapped in transit."""
    names = ("jwks_refresh_seconds", "jwks_cache_seconds", "jwks_timeout_ms")
    if not section.has("jwks_url"):
        for name in names:
            if section.has(name):
                raise ConfigError(section.path(name), "applies with jwks_url only")
        return None
    url = section.text("jwks_url")
    assert url is not None
    path = section.path("jwks_url")
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError as exc:
        raise ConfigError(path, f"not a URL: {exc}") from None
    if not parts.hostname:
        raise ConfigError(path, f"expected https://host/..., got {url!r}")
    if parts.scheme != "https" and not (
        parts.scheme == "http" and parts.hostname in _LOOPBACK_HOSTS
    ):
        raise ConfigError(path, "must be https:// (plain http only to a loopback host)")
    return JwksConfig(
        url=url,
        refresh_seconds=section.integer("jwks_refresh_seconds", 60, maximum=86_400),
        cache_seconds=section.integer("jwks_cache_seconds", 300, maximum=7 * 86_400),
        timeout_ms=section.integer("jwks_timeout_ms", 2000, maximum=30_000),
    )


def _cookie_name(section: Section) -> str:
    name = section.text("cookie_name", "sentinel_device") or "sentinel_device"
    if not _COOKIE_TOKEN.fullmatch(name):
        raise ConfigError(
            section.path("cookie_name"),
            f"{name!r} is not a cookie name: letters, digits and !#$%&'*+-.^_`|~ only",
        )
    return name


def parse_anonymous(section: Section) -> AnonymousConfig:
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
            if not isinstance(value, str) or _secret_bytes(value, path) < MIN_SECRET_BYTES:
                raise ConfigError(
                    path, f"secrets must be strings of at least {MIN_SECRET_BYTES} bytes"
                )
            previous.append(value)
    config = AnonymousConfig(
        cookie_secret=secret,
        previous_cookie_secrets=tuple(previous),
        cookie_name=_cookie_name(section),
        cookie_max_age_seconds=section.integer(
            "cookie_max_age_seconds", 31_536_000, maximum=MAX_COOKIE_AGE_SECONDS
        ),
        secure=section.boolean("secure", True),
    )
    section.finish()
    return config
