"""A local identity provider's JWKS endpoint: ``http.server`` in a thread on a free
loopback port, serving whatever key set (or failure) the test publishes, and counting
the fetches it answers."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from tests.support.tokens import mint, rsa_private_key


class JwksServer:
    """``publish`` keys, or make the endpoint ``fail`` (a status or a raw body) or
    ``stall`` (hold every answer until ``release``); ``fetches`` counts requests."""

    def __init__(self) -> None:
        self.fetches = 0
        self.sent = 0
        """Bytes a `drip` or `flood` answer wrote before the client went away."""
        self._stream: Callable[[Any], None] | None = None
        self._body = b'{"keys": []}'
        self._status = 200
        self._raw: bytes | None = None
        self._stalled = threading.Event()
        self._stalled.set()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.fetches += 1
                server._stalled.wait(timeout=10)
                if server._stream is not None:
                    with contextlib.suppress(OSError):  # the client hung up: done
                        server._stream(self.wfile)
                    return
                if server._raw is not None:
                    self.wfile.write(server._raw)  # not HTTP at all
                    return
                self.send_response(server._status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(server._body)))
                self.end_headers()
                with contextlib.suppress(OSError):  # a client that refused it unread
                    self.wfile.write(server._body)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: the test output is not the place for an access log."""

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}/.well-known/jwks.json"

    def publish(self, keys: dict[str, Any], **extra: dict[str, Any]) -> None:
        """Serve the public halves of ``keys`` (kid -> private key), plus raw JWKs."""
        self.publish_jwks([jwk(kid, key) for kid, key in keys.items()] + list(extra.values()))

    def publish_jwks(self, jwks: list[dict[str, Any]]) -> None:
        """Serve exactly these JWKs (duplicates and all)."""
        self._status, self._body = 200, json.dumps({"keys": jwks}).encode()
        self._raw, self._stream = None, None

    def fail(self, status: int = 503, body: bytes = b"unavailable") -> None:
        self._status, self._body, self._raw, self._stream = status, body, None, None

    def garble(self, raw: bytes = b"SSH-2.0-OpenSSH\r\n\r\n") -> None:
        """Answer with bytes that are not an HTTP response."""
        self._raw, self._stream = raw, None

    def drip(self, interval: float, *, headers_too: bool = False) -> None:
        """Answer the published key set one byte every ``interval`` seconds (its status
        line and headers too with ``headers_too``): each read returns in time, the
        whole never does."""
        head = (
            f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(self._body)}\r\n\r\n"
        ).encode()
        body = self._body

        def stream(out: Any) -> None:
            if not headers_too:
                out.write(head)
                out.flush()
            for byte in (head if headers_too else b"") + body:
                out.write(bytes([byte]))
                out.flush()
                self.sent += 1
                time.sleep(interval)

        self._stream = stream

    def flood(self, size: int, *, declare_length: bool) -> None:
        """Answer a ``size``-byte document (a JSON string), with or without its
        ``Content-Length``, counting what was written before the client hung up."""
        chunk = b"x" * 65536

        def stream(out: Any) -> None:
            out.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
            if declare_length:
                out.write(f"Content-Length: {size}\r\n".encode())
            out.write(b"Connection: close\r\n\r\n")
            out.write(b'{"keys": "')
            while self.sent < size:
                out.write(chunk)
                self.sent += len(chunk)

        self._stream = stream

    def stall(self) -> None:
        self._stalled.clear()

    def release(self) -> None:
        self._stalled.set()

    def __enter__(self) -> JwksServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self.release()
        self._http.shutdown()
        self._http.server_close()


OLD_KEY, NEW_KEY = rsa_private_key("jwks-old"), rsa_private_key("jwks-new")
"""The provider's signing key before and after a rotation."""


def rotation_jwt(url: str) -> dict[str, Any]:
    """A ``jwt`` section trusting the JWKS at ``url`` only."""
    return {"algorithms": ["RS256"], "jwks_url": url, "jwks_timeout_ms": 1000}


def jwk(kid: str, private_key: Any) -> dict[str, Any]:
    """The public JWK of ``private_key`` (RSA or EC), as PyJWT writes it, named ``kid``."""
    algorithm = RSAAlgorithm if isinstance(private_key, rsa.RSAPrivateKey) else ECAlgorithm
    public: dict[str, Any] = algorithm.to_jwk(private_key.public_key(), as_dict=True)
    return {**public, "kid": kid, "use": "sig"}


def signed(private_key: Any, kid: str, sub: str = "tenant-a", algorithm: str = "RS256") -> str:
    """An ``Authorization`` value with a token for ``sub`` signed by ``private_key``."""
    payload = {"sub": sub, "exp": int(time.time()) + 300}
    return "Bearer " + mint(payload, private_key, algorithm, kid=kid)
