"""Verification keys from an identity provider's JWKS document (SPEC §2 ``jwt.jwks_url``).

PyJWT's `PyJWKClient` fetches and parses the document (no JWK parsing here); this
module decides *when* it may, because a request must never turn into an unbounded
wait or a flood of fetches:

- the key set is fetched at start-up (`load`) or else at the first use, then kept
  ``cache_seconds``; while it is valid a known ``kid`` costs no fetch, and an expired
  set is fetched again;
- an unknown ``kid`` (a key rotated in) refreshes a valid set at most once per
  ``refresh_seconds``, whatever tokens arrive: a client inventing ``kid`` values cannot
  make Sentinel hammer the provider;
- after a failed fetch, nothing is fetched for ``refresh_seconds``;
- a fetch is bounded by ``timeout_ms``; concurrent callers wait for the one in flight
  rather than start their own;
- a failed fetch (provider down, garbage served) keeps the keys already known, stale
  or not, and logs a warning: tokens signed with a known key still verify, tokens
  naming an unknown key are answered 401, never 500.

Only RSA (2048 bits or more) and EC public keys are kept: an HMAC (``oct``) key or a
private key published in a JWKS is ignored, so the document can never make a token
verify with a shared secret. Tokens must name their key with a ``kid``, as every
provider's do (PyJWT keeps only the keys that have one).

The fetch is blocking I/O on the request path of the request that triggers it; in an
asyncio server it holds the event loop for at most ``timeout_ms``, at most once per
``refresh_seconds``.
"""

from __future__ import annotations

import http.client
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa

logger = logging.getLogger("sentinel")

MIN_RSA_BITS = 2048

PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey


class JwksKeys:
    """The public keys of one JWKS URL, by ``kid``, refreshed under the rules above.

    Args:
        url: the JWKS document's URL (validated by the config loader).
        refresh_seconds: least time between two fetch attempts.
        cache_seconds: how long a fetched key set is valid.
        timeout_ms: connect and read budget of one fetch.
        clock: a monotonic clock, injectable for tests.
    """

    def __init__(
        self,
        url: str,
        *,
        refresh_seconds: int,
        cache_seconds: int,
        timeout_ms: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # PyJWKClient's own caches are off: this class keeps the keys and decides when
        # to fetch (its cooldown only follows successful fetches, and is PyJWT >= 2.10).
        self._client = jwt.PyJWKClient(
            url, cache_keys=False, cache_jwk_set=False, timeout=timeout_ms / 1000
        )
        self._url = url
        self._refresh_seconds = refresh_seconds
        self._cache_seconds = cache_seconds
        self._clock = clock
        self._keys: dict[str, PublicKey] = {}
        self._fetched_at: float | None = None
        self._failed_at: float | None = None
        self._kid_refreshed_at: float | None = None
        self._lock = threading.Lock()

    def key(self, kid: str) -> PublicKey | None:
        """The public key named ``kid``, fetching the set first when the rules allow."""
        key = self._keys.get(kid)
        if key is not None and self._valid(self._clock()):
            return key
        with self._lock:  # one fetch at a time; the others then find its result
            now = self._clock()
            if self._may_fetch(now, kid):
                self._fetch(now)
        return self._keys.get(kid)

    def load(self) -> None:
        """Fetch the key set now unless a valid one is cached or a fetch just failed:
        at start-up, so that the first requests wait for nothing."""
        with self._lock:
            now = self._clock()
            if not self._valid(now) and self._elapsed(self._failed_at, now):
                self._fetch(now)

    def _valid(self, now: float) -> bool:
        return self._fetched_at is not None and now - self._fetched_at < self._cache_seconds

    def _may_fetch(self, now: float, kid: str) -> bool:
        """Whether looking up ``kid`` may fetch the set now (the rules above)."""
        if not self._elapsed(self._failed_at, now):
            return False
        if not self._valid(now):
            return True
        if kid in self._keys or not self._elapsed(self._kid_refreshed_at, now):
            return False
        self._kid_refreshed_at = now
        return True

    def _elapsed(self, since: float | None, now: float) -> bool:
        return since is None or now - since >= self._refresh_seconds

    def _fetch(self, now: float) -> None:
        try:
            jwks = self._client.get_signing_keys()
        # PyJWT wraps URL errors (and, since 2.10, HTTP protocol errors); a body that is
        # not JSON, a socket reset while reading, or absurd nesting reach us as they are.
        except (
            jwt.PyJWTError,
            ValueError,
            OSError,
            http.client.HTTPException,
            RecursionError,
        ) as exc:
            logger.warning(
                "JWKS fetch from %s failed (%s: %s); keeping the %d keys known, next "
                "attempt in %d s at the earliest",
                self._url,
                type(exc).__name__,
                exc,
                len(self._keys),
                self._refresh_seconds,
            )
            self._failed_at = now
            return
        fresh: dict[str, PublicKey] = {}
        for jwk in jwks:  # PyJWT keeps the signing keys that have a kid
            key = _public(jwk.key)
            if key is not None:
                fresh[str(jwk.key_id)] = key
        self._keys = fresh
        self._fetched_at, self._failed_at = now, None


def _public(key: Any) -> PublicKey | None:
    """``key`` when it can verify tokens here: an RSA public key of sound size or an EC
    public key; None for a secret, a private key or any other kind."""
    if isinstance(key, rsa.RSAPublicKey) and key.key_size >= MIN_RSA_BITS:
        return key
    if isinstance(key, ec.EllipticCurvePublicKey):
        return key
    return None
