"""Minting JWTs for the tests: good ones, and every kind of bad one.

Keys are generated once per test run with `cryptography` (never checked in). Tokens
that PyJWT refuses to produce (``alg: none``, an HS256 token whose HMAC secret is a
public key's PEM) are assembled by hand, byte for byte as an attacker would.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from functools import cache
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

HS_SECRET = "test-secret-0123456789-abcdefghijklmnopqrstuvwxyz-ABCDEFGHIJKLMNOP"
"""64 bytes: long enough for HS512 too."""
OTHER_HS_SECRET = "another-secret-0123456789-abcdefghijklmnopqrstuvwxyz-ABCDEFGHIJKL"
COOKIE_SECRET = "cookie-secret-0123456789-abcdefghijklmnopqrstuvwxyz"
OLD_COOKIE_SECRET = "old-cookie-secret-0123456789-abcdefghijklmnopqrstuvwxyz"


@cache
def rsa_private_key(name: str = "default") -> rsa.RSAPrivateKey:
    """A 2048-bit RSA key; ``name`` gives distinct keys (e.g. for rotation)."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@cache
def ec_private_key(name: str = "default", curve: str = "P-256") -> ec.EllipticCurvePrivateKey:
    curves: dict[str, ec.EllipticCurve] = {
        "P-256": ec.SECP256R1(),
        "P-384": ec.SECP384R1(),
        "P-521": ec.SECP521R1(),
    }
    return ec.generate_private_key(curves[curve])


def public_pem(private_key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> str:
    return (
        private_key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def claims(sub: str | None = "tenant-a", *, ttl: int = 300, **extra: Any) -> dict[str, Any]:
    """A payload with ``sub`` and ``exp`` (``ttl`` seconds from now) plus ``extra``."""
    payload: dict[str, Any] = {"exp": int(time.time()) + ttl, **extra}
    if sub is not None:
        payload["sub"] = sub
    return payload


def mint(
    payload: dict[str, Any],
    key: Any = HS_SECRET,
    algorithm: str = "HS256",
    *,
    kid: str | None = None,
) -> str:
    headers = {"kid": kid} if kid is not None else None
    return jwt.encode(payload, key, algorithm=algorithm, headers=headers)


def hs256(sub: str | None = "tenant-a", **extra: Any) -> str:
    return mint(claims(sub, **extra))


def bearer(token: str) -> str:
    return f"Bearer {token}"


def _segment(data: dict[str, Any]) -> str:
    raw = json.dumps(data, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def forge_alg_none(payload: dict[str, Any]) -> str:
    """``{"alg": "none"}`` and an empty signature: the unsigned-token attack."""
    return f"{_segment({'alg': 'none', 'typ': 'JWT'})}.{_segment(payload)}."


def forge_hmac(payload: dict[str, Any], secret: bytes, algorithm: str = "HS256") -> str:
    """An HS* token signed with arbitrary bytes as the HMAC secret.

    With a server's public key PEM as ``secret`` this is the algorithm-confusion attack:
    the public key is public, so anyone can compute this signature.
    """
    digest = {"HS256": hashlib.sha256, "HS384": hashlib.sha384, "HS512": hashlib.sha512}
    signing_input = f"{_segment({'alg': algorithm, 'typ': 'JWT'})}.{_segment(payload)}"
    signature = hmac.new(secret, signing_input.encode(), digest[algorithm]).digest()
    return f"{signing_input}.{base64.urlsafe_b64encode(signature).decode().rstrip('=')}"
