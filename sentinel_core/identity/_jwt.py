"""Tenant identity from a bearer JWT, verified with PyJWT (SPEC §4).

The tenant is the ``sub`` of a token that passed every check: an allowlisted algorithm
(never ``none``), a key of the algorithm's own family (an HMAC algorithm is never
verified with a public key: the classic algorithm-confusion attack; an RS* token never
meets an EC key), ``exp`` and ``sub`` present, and ``aud``/``iss`` when configured.
Every failure is an `AuthError` carrying its RFC 6750 error code; nothing else escapes,
whatever the client sends.

Keys are parsed once, here, so a request pays for one signature check, not for PEM
parsing. A token's ``kid`` selects its key: a known ``kid`` is checked against that key
only; an unknown one against the keys configured without a ``kid`` (an issuer that
labels its keys while the configuration does not); no ``kid`` against every key of the
family. That bounds the work an attacker can make one request cost.

With ``jwks_url``, a ``kid`` the configuration does not name is looked up in the
provider's JWKS (`identity._jwks`: cached, refreshed at most once per
``jwks_refresh_seconds``); a key the JWKS no longer publishes stops verifying, and the
tokens verified with it verify again (and fail). A published key that names its
``alg`` verifies that algorithm only. asyncio code awaits `JwtVerifier.aprefetch`
first, so that no fetch ever runs on the event loop.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from sentinel_core.config._identity import JwtConfig, JwtKey
from sentinel_core.errors import SentinelError
from sentinel_core.identity._jwks import JwksKeys

MAX_TOKEN_LENGTH = 8192
"""Longer bearer values are refused before any parsing (no IdP issues such tokens)."""

_B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
"""The syntax of a bearer token (RFC 6750 §2.1); anything else is a malformed request."""
_JWS_COMPACT = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")
"""Three base64url segments: the only shape a signed JWT has (RFC 7515 §7.1)."""

_EC_CURVES: dict[str, type[ec.EllipticCurve]] = {
    "ES256": ec.SECP256R1,
    "ES384": ec.SECP384R1,
    "ES512": ec.SECP521R1,
}


class AuthError(SentinelError):
    """A request carries no usable bearer token. Maps to 401 with ``WWW-Authenticate``.

    ``error`` is the RFC 6750 error code (``invalid_request`` for a malformed
    ``Authorization`` header, ``invalid_token`` for a token that does not verify), or
    None when no bearer credentials were sent at all (no header, or another scheme such
    as Basic: RFC 6750 §3.1 says to send no error code then).
    """

    def __init__(self, error: str | None, description: str) -> None:
        self.error = error
        self.description = description
        super().__init__(description)


@dataclass(frozen=True, slots=True)
class _Key:
    """A configured key, parsed: HMAC secret bytes or a `cryptography` public key."""

    kid: str | None
    family: str
    material: Any
    published: bool = False
    """Taken from the JWKS: tokens verified with it stay valid only while it is there."""
    algorithm: str | None = None
    """The one algorithm the key names (a JWK's ``alg``): it verifies no other."""


def _family(algorithm: str) -> str:
    if algorithm.startswith("HS"):
        return "hmac"
    if algorithm.startswith(("RS", "PS")):
        return "rsa"
    return "ec"


def _parse_key(key: JwtKey) -> _Key:
    if not key.is_public_key:
        return _Key(key.kid, "hmac", key.material.encode())
    return _public_key(key.kid, load_pem_public_key(key.material.encode()))


def _public_key(kid: str | None, public: Any) -> _Key:
    if isinstance(public, rsa.RSAPublicKey):
        return _Key(kid, "rsa", public)
    if isinstance(public, ec.EllipticCurvePublicKey):
        return _Key(kid, "ec", public)
    # The config loader accepts only RSA and EC keys; anything else can match nothing.
    return _Key(kid, "unsupported", public)


@dataclass(frozen=True, slots=True)
class _Verified:
    """What a verified token proved that does not depend on the time of use."""

    subject: str
    expires: int
    not_before: int | None
    """The later of ``nbf`` and ``iat``, when present: the token is not valid before."""
    published_kid: str | None = None
    """The JWKS key it verified with, if any: when the provider stops publishing it
    (revoked), the token must verify again."""


class JwtVerifier:
    """Verifies bearer tokens against one `JwtConfig`.

    A token that verified once is remembered (up to ``cache_size`` of them, oldest
    forgotten first): a client sends the same token with every request until it
    expires, and the signature, ``aud`` and ``iss`` of a given token string cannot
    change. Only its time claims can, so they are checked again at every use against
    ``clock``. Tokens that fail are never remembered, so nobody can fill the cache
    without tokens the issuer signed. The cache is keyed by the ``Authorization`` value
    as sent, so a remembered token costs one dictionary lookup, no parsing.
    """

    def __init__(
        self,
        config: JwtConfig,
        *,
        cache_size: int = 4096,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._algorithms = frozenset(config.algorithms)
        self._keys = tuple(_parse_key(key) for key in config.keys)
        self._by_kid = {key.kid: key for key in self._keys if key.kid is not None}
        self._unnamed = tuple(key for key in self._keys if key.kid is None)
        jwks = config.jwks
        self._jwks = (
            None
            if jwks is None
            else JwksKeys(
                jwks.url,
                refresh_seconds=jwks.refresh_seconds,
                cache_seconds=jwks.cache_seconds,
                timeout_ms=jwks.timeout_ms,
                clock=monotonic,
            )
        )
        # PyJWT's own default for ``aud``: a token that names an audience is refused when
        # none is configured (it was minted for some other service).
        self._options: dict[str, Any] = {"require": ["exp", "sub"]}
        self._cache_size = cache_size
        self._clock = clock
        self._verified: dict[str, _Verified] = {}
        self._lock = threading.Lock()

    def load_keys(self) -> None:
        """Fetch the JWKS keys now when ``jwks_url`` is configured (see `JwksKeys.load`)."""
        if self._jwks is not None:
            self._jwks.load()

    async def aprefetch(self, authorization: str | None) -> None:
        """In asyncio code, before `tenant_from_authorization`: the JWKS fetch that
        verifying this header may need, awaited off the event loop (see `JwksKeys`)."""
        if self._jwks is not None:
            kid = self._jwks_kid(authorization)
            if kid is not None:
                await self._jwks.prefetch(kid)

    def _jwks_kid(self, authorization: str | None) -> str | None:
        """The ``kid`` verifying this header would look up in the JWKS, if any."""
        verified = self._verified.get(authorization) if authorization is not None else None
        if verified is not None:
            return verified.published_kid
        try:
            header = _unverified_header(_bearer_token(authorization))
        except AuthError:
            return None  # answered 401 before any key is looked up
        kid = header.get("kid")
        if header.get("alg") not in self._algorithms or not isinstance(kid, str):
            return None
        return None if kid in self._by_kid else kid

    def tenant_from_authorization(self, authorization: str | None) -> str:
        """The validated ``sub`` of the bearer token in an ``Authorization`` header value.

        Raises:
            AuthError: for a missing header, another scheme, or any invalid token.
        """
        # Looked up by the raw header value, before any parsing: a header value seen
        # with a verified token is the same token. Any other value (unseen, malformed,
        # or refused before) goes through every format check and the signature.
        verified = self._verified.get(authorization) if authorization is not None else None
        if verified is not None and verified.published_kid is not None:
            assert self._jwks is not None  # only a JWKS key sets published_kid
            if self._jwks.key(verified.published_kid) is None:
                verified = None  # its key was withdrawn: verify again (and fail)
        if verified is None:
            verified = self._verify(_bearer_token(authorization))
            assert authorization is not None  # _bearer_token refuses a missing header
            self._remember(authorization, verified)
        now, leeway = self._clock(), self._config.leeway_seconds
        if verified.expires <= now - leeway:
            raise AuthError("invalid_token", "token expired")
        if verified.not_before is not None and verified.not_before > now + leeway:
            raise AuthError("invalid_token", "token not yet valid")
        return verified.subject

    def _verify(self, token: str) -> _Verified:
        header = _unverified_header(token)
        algorithm = header.get("alg")
        if not isinstance(algorithm, str) or algorithm not in self._algorithms:
            raise AuthError("invalid_token", "token algorithm not allowed")
        for key in self._candidate_keys(header.get("kid"), algorithm):
            try:
                claims = jwt.decode(
                    token,
                    key.material,
                    algorithms=[algorithm],
                    audience=self._config.audience,
                    issuer=self._config.issuer,
                    leeway=self._config.leeway_seconds,
                    options=self._options,  # type: ignore[arg-type]
                )
            except jwt.InvalidSignatureError:
                continue
            except jwt.ExpiredSignatureError:
                raise AuthError("invalid_token", "token expired") from None
            except jwt.PyJWTError as exc:
                raise AuthError("invalid_token", _describe(exc)) from None
            # PyJWT has just checked that these claims are integers (or convert to one).
            starts = [int(claims[name]) for name in ("nbf", "iat") if name in claims]
            return _Verified(
                _subject(claims),
                int(claims["exp"]),
                max(starts, default=None),
                key.kid if key.published else None,
            )
        raise AuthError("invalid_token", "token signature invalid")

    def _remember(self, authorization: str, verified: _Verified) -> None:
        if self._cache_size <= 0:
            return
        with self._lock:
            if len(self._verified) >= self._cache_size:
                del self._verified[next(iter(self._verified))]  # dicts keep insertion order
            self._verified[authorization] = verified

    def _candidate_keys(self, kid: object, algorithm: str) -> list[_Key]:
        """The keys a token may be checked against (see the module docstring)."""
        if isinstance(kid, str) and kid in self._by_kid:
            keys: tuple[_Key, ...] = (self._by_kid[kid],)
        elif isinstance(kid, str) and self._jwks is not None and (published := self._jwks.key(kid)):
            key = _public_key(kid, published.key)
            keys = (dataclasses.replace(key, published=True, algorithm=published.algorithm),)
        elif kid is not None:
            keys = self._unnamed
        else:
            keys = self._keys
        family = _family(algorithm)
        curve = _EC_CURVES.get(algorithm)
        return [
            key
            for key in keys
            if key.family == family
            and key.algorithm in (None, algorithm)
            and (curve is None or isinstance(key.material.curve, curve))
        ]


def _bearer_token(authorization: str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` header value (RFC 6750 §2.1)."""
    if authorization is None or not authorization.strip():
        raise AuthError(None, "bearer token required")
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        raise AuthError(None, "bearer token required")
    token = token.strip(" ")
    if not token or not _B64TOKEN.fullmatch(token):
        raise AuthError("invalid_request", "expected `Authorization: Bearer <token>`")
    if len(token) > MAX_TOKEN_LENGTH or not _JWS_COMPACT.fullmatch(token):
        raise AuthError("invalid_token", "malformed token")
    return token


def _unverified_header(token: str) -> dict[str, Any]:
    """The JOSE header, to pick the algorithm and key; PyJWT checks it again on decode.

    Parsed here rather than with ``jwt.get_unverified_header``, which would decode and
    validate every segment a second time (a third of the verification cost).
    """
    segment = token.partition(".")[0]
    try:
        header = json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    except (ValueError, RecursionError):  # binascii.Error and JSON/UTF-8 errors are ValueErrors
        header = None
    if not isinstance(header, dict):
        raise AuthError("invalid_token", "malformed token")
    return header


def _subject(claims: dict[str, Any]) -> str:
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject:
        raise AuthError("invalid_token", "token has no usable sub claim")
    return subject


def _describe(exc: jwt.PyJWTError) -> str:
    if isinstance(exc, jwt.ImmatureSignatureError):
        return "token not yet valid"
    if isinstance(exc, jwt.InvalidAudienceError):
        return "token audience not accepted"
    if isinstance(exc, jwt.InvalidIssuerError):
        return "token issuer not accepted"
    if isinstance(exc, jwt.MissingRequiredClaimError):
        return f"token lacks the {exc.claim} claim"
    return "invalid token"
