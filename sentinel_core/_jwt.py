"""Tenant identity from a bearer JWT, verified with PyJWT (SPEC §4).

The tenant is the ``sub`` of a token that passed every check: an allowlisted algorithm
(never ``none``), a key of the algorithm's kind (an HMAC algorithm is never verified
with a public key: the classic algorithm-confusion attack), ``exp`` and ``sub``
present, and ``aud``/``iss`` when configured. Every failure is an `AuthError` carrying
its RFC 6750 error code; nothing else escapes, whatever the client sends.
"""

from __future__ import annotations

from typing import Any

import jwt

from ._config import JwtConfig, JwtKey
from ._errors import SentinelError

_HMAC_PREFIX = "HS"


class AuthError(SentinelError):
    """A request carries no usable bearer token. Maps to 401 with ``WWW-Authenticate``.

    ``error`` is the RFC 6750 error code (``invalid_request`` or ``invalid_token``), or
    None when no credentials were sent at all (RFC 6750 §3.1: no error code then).
    """

    def __init__(self, error: str | None, description: str) -> None:
        self.error = error
        self.description = description
        super().__init__(description)


class JwtVerifier:
    def __init__(self, config: JwtConfig) -> None:
        self._config = config
        self._algorithms = list(config.algorithms)
        self._by_kid = {key.kid: key for key in config.keys if key.kid is not None}
        self._keys = config.keys

    def tenant_from_authorization(self, authorization: str | None) -> str:
        """The validated ``sub`` of the bearer token in an ``Authorization`` header value.

        Raises:
            AuthError: for a missing header, another scheme, or any invalid token.
        """
        if authorization is None or not authorization.strip():
            raise AuthError(None, "bearer token required")
        scheme, _, token = authorization.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token or " " in token:
            raise AuthError("invalid_request", "expected `Authorization: Bearer <token>`")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise AuthError("invalid_token", "malformed token") from None
        algorithm = header.get("alg")
        if not isinstance(algorithm, str) or algorithm not in self._algorithms:
            raise AuthError("invalid_token", "token algorithm not allowed")
        for key in self._candidate_keys(header, algorithm):
            try:
                claims = jwt.decode(
                    token,
                    key.material,
                    algorithms=[algorithm],
                    audience=self._config.audience,
                    issuer=self._config.issuer,
                    leeway=self._config.leeway_seconds,
                    options={
                        "require": ["exp", "sub"],
                        "verify_aud": self._config.audience is not None,
                    },
                )
            except jwt.InvalidSignatureError:
                continue
            except jwt.ExpiredSignatureError:
                raise AuthError("invalid_token", "token expired") from None
            except jwt.PyJWTError as exc:
                raise AuthError("invalid_token", _describe(exc)) from None
            return _subject(claims)
        raise AuthError("invalid_token", "token signature invalid")

    def _candidate_keys(self, header: dict[str, Any], algorithm: str) -> list[JwtKey]:
        """Keys of the algorithm's kind; the one the ``kid`` names when it names one."""
        wants_public = not algorithm.startswith(_HMAC_PREFIX)
        kid = header.get("kid")
        if isinstance(kid, str) and kid in self._by_kid:
            keys: tuple[JwtKey, ...] | list[JwtKey] = [self._by_kid[kid]]
        else:
            keys = self._keys
        return [key for key in keys if key.is_public_key is wants_public]


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
