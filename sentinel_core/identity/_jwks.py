"""Verification keys from an identity provider's JWKS document (SPEC §2 ``jwt.jwks_url``).

This module decides *when* the document may be fetched, and bounds *what a fetch
costs*, because a request must never turn into an unbounded wait, a flood of fetches or
a blocked event loop:

- the key set is fetched at start-up (`load`) or else at the first use, then kept
  ``cache_seconds``; while it is valid a known ``kid`` costs no fetch, and an expired
  set is fetched again;
- an unknown ``kid`` (a key rotated in) refreshes a valid set at most once per
  ``refresh_seconds``, whatever tokens arrive: a client inventing ``kid`` values cannot
  make Sentinel hammer the provider;
- after a failed fetch, nothing is fetched for ``refresh_seconds``;
- one fetch at a time, in its own daemon thread; callers wait for it at most
  ``timeout_ms`` (then go on with the keys known), and a caller on an event loop never
  waits at all: asyncio code awaits `prefetch` first, off the loop;
- the fetch itself ends within ``timeout_ms`` in total (a timer shuts its socket down:
  a server sending one byte every half second cannot hold it longer), reads at most
  `MAX_DOCUMENT_BYTES` (a bigger document is refused unread), and follows no redirect;
- a failed fetch (provider down, slow, garbage served) keeps the keys already known,
  stale or not, and logs a warning: tokens signed with a known key still verify, tokens
  naming an unknown key are answered 401, never 500.

PyJWT parses each key (`jwt.PyJWK`); its `PyJWKClient` is not used for the fetch, which
reads the whole body with a per-read timeout only. Only RSA (2048 bits or more) and EC
public keys are kept: an HMAC (``oct``) key or a private key published in a JWKS is
ignored, so the document can never make a token verify with a shared secret. Tokens
must name their key with a ``kid``, as every provider's do. Two different keys
published under one ``kid`` are both refused (which one signed is ambiguous), and a key
that names its ``alg`` verifies tokens of that algorithm only.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import http.client
import json
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa

logger = logging.getLogger("sentinel")

MIN_RSA_BITS = 2048
MAX_DOCUMENT_BYTES = 1 << 20
"""The largest JWKS document read (providers publish a few kilobytes)."""

PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey


class PublishedKey(NamedTuple):
    """A usable key of the document, and the one algorithm it names (``alg``), if any."""

    key: PublicKey
    algorithm: str | None


class JwksError(Exception):
    """A fetch that produced no key set (the warning says why)."""


class JwksKeys:
    """The public keys of one JWKS URL, by ``kid``, refreshed under the rules above.

    Args:
        url: the JWKS document's URL (validated by the config loader).
        refresh_seconds: least time between two fetch attempts.
        cache_seconds: how long a fetched key set is valid.
        timeout_ms: the whole budget of one fetch, and the longest any caller waits.
        clock: a monotonic clock, injectable for tests.
        max_bytes: the largest document read.
    """

    def __init__(
        self,
        url: str,
        *,
        refresh_seconds: int,
        cache_seconds: int,
        timeout_ms: int,
        clock: Callable[[], float] = time.monotonic,
        max_bytes: int = MAX_DOCUMENT_BYTES,
    ) -> None:
        self._url = url
        self._refresh_seconds = refresh_seconds
        self._cache_seconds = cache_seconds
        self._timeout = timeout_ms / 1000
        self._max_bytes = max_bytes
        self._clock = clock
        self._keys: dict[str, PublishedKey] = {}
        self._fetched_at: float | None = None
        self._failed_at: float | None = None
        self._kid_refreshed_at: float | None = None
        self._lock = threading.Lock()  # held for bookkeeping only, never during I/O
        self._inflight: concurrent.futures.Future[None] | None = None

    def key(self, kid: str) -> PublishedKey | None:
        """The key named ``kid``, after the fetch the rules allow (waited for at most
        ``timeout_ms``; not at all on an event loop's thread)."""
        found = self._keys.get(kid)
        if found is not None and self._valid(self._clock()):
            return found
        fetch = self._start(kid)
        if fetch is not None and not _on_event_loop():
            concurrent.futures.wait([fetch], timeout=self._timeout)
        return self._keys.get(kid)

    async def prefetch(self, kid: str) -> None:
        """The fetch `key` would wait for, awaited off the event loop (at most
        ``timeout_ms``): asyncio code calls it first, so that `key` never fetches."""
        if kid in self._keys and self._valid(self._clock()):
            return
        fetch = self._start(kid)
        if fetch is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(fetch)), self._timeout)

    def load(self) -> None:
        """Fetch the key set now unless a valid one is cached or a fetch just failed:
        at start-up, so that the first requests wait for nothing."""
        fetch = self._start(None)
        if fetch is not None:
            concurrent.futures.wait([fetch], timeout=self._timeout)

    def _valid(self, now: float) -> bool:
        return self._fetched_at is not None and now - self._fetched_at < self._cache_seconds

    def _start(self, kid: str | None) -> concurrent.futures.Future[None] | None:
        """The fetch in flight, or a new one when looking up ``kid`` (None: loading)
        may fetch now; None when no fetch is due."""
        with self._lock:
            if self._inflight is not None:
                return self._inflight
            now = self._clock()
            if not self._may_fetch(now, kid):
                return None
            fetch = self._inflight = concurrent.futures.Future()
        worker = threading.Thread(
            target=self._fetch, args=(now, fetch), name="sentinel-jwks", daemon=True
        )
        worker.start()
        return fetch

    def _may_fetch(self, now: float, kid: str | None) -> bool:
        """Whether looking up ``kid`` (None: loading) may fetch the set now."""
        if not self._elapsed(self._failed_at, now):
            return False
        if not self._valid(now):
            return True
        if kid is None or kid in self._keys or not self._elapsed(self._kid_refreshed_at, now):
            return False
        self._kid_refreshed_at = now
        return True

    def _elapsed(self, since: float | None, now: float) -> bool:
        return since is None or now - since >= self._refresh_seconds

    def _fetch(self, now: float, done: concurrent.futures.Future[None]) -> None:
        done.set_running_or_notify_cancel()
        try:
            fresh = self._parse(download(self._url, self._timeout, self._max_bytes))
        except (JwksError, OSError, http.client.HTTPException, ValueError, RecursionError) as exc:
            logger.warning(
                "JWKS fetch from %s failed (%s: %s); keeping the %d keys known, next "
                "attempt in %d s at the earliest",
                self._url,
                type(exc).__name__,
                exc,
                len(self._keys),
                self._refresh_seconds,
            )
            with self._lock:
                self._failed_at, self._inflight = now, None
        else:
            with self._lock:
                self._keys, self._inflight = fresh, None
                self._fetched_at, self._failed_at = now, None
        done.set_result(None)

    def _parse(self, body: bytes) -> dict[str, PublishedKey]:
        document = json.loads(body)
        entries = document.get("keys") if isinstance(document, dict) else None
        if not isinstance(entries, list):
            raise JwksError('expected a JSON object with a "keys" list')
        fresh: dict[str, PublishedKey] = {}
        seen: dict[str, dict[str, Any]] = {}
        ambiguous: set[str] = set()
        for entry in entries:
            published = _signing_key(entry)
            if published is None:
                continue
            kid = entry["kid"]
            if kid in seen and seen[kid] != entry:
                ambiguous.add(kid)
            seen[kid] = entry
            fresh[kid] = published
        for kid in sorted(ambiguous):
            del fresh[kid]
            logger.warning(
                "JWKS from %s publishes different keys under kid %r: neither is used",
                self._url,
                kid,
            )
        if not fresh:
            raise JwksError("the document has no usable signing key")
        return fresh


def _signing_key(entry: object) -> PublishedKey | None:
    """A JWK of the document as a key that verifies tokens here: a public RSA key of
    sound size or EC key, for signatures, named by a ``kid``; None for anything else."""
    if not isinstance(entry, dict) or not isinstance(entry.get("kid"), str):
        return None
    if entry.get("use", "sig") != "sig":
        return None
    algorithm = entry.get("alg")
    if algorithm is not None and not isinstance(algorithm, str):
        return None
    try:
        key = jwt.PyJWK(entry).key
    except jwt.PyJWTError:
        return None
    if isinstance(key, rsa.RSAPublicKey) and key.key_size >= MIN_RSA_BITS:
        return PublishedKey(key, algorithm)
    if isinstance(key, ec.EllipticCurvePublicKey):
        return PublishedKey(key, algorithm)
    return None


def download(url: str, timeout: float, max_bytes: int) -> bytes:
    """The body of a ``GET url`` answered 200, within ``timeout`` seconds in total and
    ``max_bytes``, or an exception (`JwksError`, `OSError`, `http.client.HTTPException`).

    Every socket operation times out after ``timeout``, and a timer shuts the socket
    down when the whole budget is spent, whatever the server trickles meanwhile.
    """
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    connection: http.client.HTTPConnection
    if parts.scheme == "https":
        context = ssl.create_default_context()
        connection = http.client.HTTPSConnection(host, port, timeout=timeout, context=context)
    else:
        connection = http.client.HTTPConnection(host, port, timeout=timeout)
    expired = threading.Event()
    timer = threading.Timer(timeout, _cut, (connection, expired))
    timer.daemon = True
    timer.start()
    try:
        connection.request("GET", target, headers={"Accept": "application/json"})
        response = connection.getresponse()
        if response.status != 200:
            raise JwksError(f"answered HTTP {response.status}")
        length = response.getheader("Content-Length", "")
        if length.isascii() and length.isdigit() and int(length) > max_bytes:
            raise JwksError(f"the document is {int(length)} bytes, more than {max_bytes}")
        body = response.read(max_bytes + 1)
        if len(body) > max_bytes:
            raise JwksError(f"the document is more than {max_bytes} bytes")
    except (OSError, http.client.HTTPException) as exc:
        if expired.is_set():
            raise JwksError(f"no answer within {round(timeout * 1000)} ms") from exc
        raise
    finally:
        timer.cancel()
        connection.close()
    if expired.is_set():
        raise JwksError(f"no answer within {round(timeout * 1000)} ms")
    return body


def _cut(connection: http.client.HTTPConnection, expired: threading.Event) -> None:
    """The whole budget is spent: wake whatever read is blocked, ending the fetch."""
    expired.set()
    # No socket yet (still connecting, bounded by its own timeout): nothing to wake.
    with contextlib.suppress(OSError, AttributeError):
        connection.sock.shutdown(socket.SHUT_RDWR)


def _on_event_loop() -> bool:
    """Whether this thread is running an asyncio event loop (which must never wait)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
