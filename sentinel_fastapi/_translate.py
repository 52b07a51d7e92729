"""Translation between Starlette and the core: request in, response out, nothing else.

Every rule of SPEC §4 (statuses, Retry-After, RateLimit headers, the device cookie) is
decided by `sentinel_core`; this module only moves the `Outcome`'s fields into
Starlette's types, for the decorator and the middleware alike.
"""

from __future__ import annotations

from starlette.requests import HTTPConnection
from starlette.responses import Response

from sentinel_core import Outcome, RequestView


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
    response.raw_headers.extend(raw_headers(outcome))
    return response


def raw_headers(outcome: Outcome) -> list[tuple[bytes, bytes]]:
    """The outcome's headers, and its device cookie as ``Set-Cookie``, as ASGI pairs."""
    pairs = [
        (name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in outcome.headers
    ]
    if outcome.cookie is not None:
        pairs.append((b"set-cookie", outcome.cookie.header_value().encode("latin-1")))
    return pairs


def add_to_response(response: Response, outcome: Outcome) -> None:
    """Add an allowed outcome's RateLimit headers and cookie to the handler's response.

    Appended, not set: a route guarded twice (decorator and ``routes``) reports both
    policies, which the RateLimit header fields allow as list members.
    """
    response.raw_headers.extend(raw_headers(outcome))
