"""Translation between Starlette and the core: request in, response out, nothing else.

Every rule of SPEC §4 (statuses, Retry-After, RateLimit fields, the device cookie) is
decided by `sentinel_core`; this module only moves values into Starlette's types.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.requests import HTTPConnection
from starlette.responses import Response

from sentinel_core.adapter import Cookie, Outcome, RequestView

ADMITTED = "sentinel.admitted"
"""The ASGI scope key where the middleware records the endpoint ids it admitted."""


def request_view(request: HTTPConnection, route: str | None) -> RequestView:
    """The core's view of ``request``.

    Headers are Starlette's case-insensitive `Headers`; the peer is the ASGI ``client``
    host only (a trusted-proxy middleware such as uvicorn's ``--proxy-headers`` is
    what may rewrite it, never Sentinel reading ``X-Forwarded-For``).
    """
    client = request.scope.get("client")
    return RequestView(
        method=request.scope["method"],
        route=route,
        headers=request.headers,
        cookies=request.cookies,
        peer=client[0] if client else None,
        native=request,
    )


def denial_response(outcome: Outcome) -> Response:
    """The 401/429/503 response of a denied request: the outcome's status, headers
    (Content-Type included) and problem+json body, byte for byte."""
    response = Response(outcome.body, status_code=outcome.status)
    response.raw_headers.extend(raw_headers(outcome.headers, None))
    return response


def raw_headers(
    headers: Iterable[tuple[str, str]], cookie: Cookie | None
) -> list[tuple[bytes, bytes]]:
    """``headers`` and the device cookie as ``Set-Cookie``, as ASGI pairs."""
    pairs = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers]
    if cookie is not None:
        pairs.append((b"set-cookie", cookie.header_value().encode("latin-1")))
    return pairs
