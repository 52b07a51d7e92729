"""Translation between Starlette and the core: request in, response out, nothing else.

Every rule of SPEC §4 (statuses, Retry-After, RateLimit fields, the device cookie) is
decided by `sentinel_core`; this module only moves values into Starlette's types.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from starlette.authentication import SimpleUser
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import HTTPConnection
from starlette.responses import Response

from sentinel_core import Decision
from sentinel_core.adapter import Cookie, Outcome, RequestView

ADMITTED = "sentinel.admitted"
"""The ASGI scope key where the route guard records the endpoint ids it admitted."""


def request_view(request: HTTPConnection, route: str | None) -> RequestView:
    """The core's view of ``request``, read from its ASGI scope.

    Headers are Starlette's case-insensitive `Headers` over the scope's own list (what
    ``request.headers`` would build); the peer is the ASGI ``client`` host only (a
    trusted-proxy middleware such as uvicorn's ``--proxy-headers`` is what may rewrite
    it, never Sentinel reading ``X-Forwarded-For``). ``request`` itself is the view's
    ``native`` (what plugins and ``identify`` are given) and parses the cookies if a
    policy reads them.
    """
    scope = request.scope
    client = scope.get("client")
    # Positional (method, route, headers, cookies, peer, native): keywords cost twice.
    return RequestView(
        scope["method"],
        route,
        Headers(scope=scope),
        LazyCookies(request),
        client[0] if client else None,
        request,
    )


class LazyCookies(Mapping[str, str]):
    """The request's cookies, parsed only when read: tenant policies never read them."""

    __slots__ = ("_request",)

    def __init__(self, request: HTTPConnection) -> None:
        self._request = request

    def __getitem__(self, name: str) -> str:
        return self._request.cookies[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._request.cookies)

    def __len__(self) -> int:
        return len(self._request.cookies)


def starlette_user(request: HTTPConnection) -> str | None:
    """The default ``identify``: the ``identity`` of the user Starlette's
    ``AuthenticationMiddleware`` authenticated (``request.user``), None without one.

    Raises:
        TypeError: the app's user class does not implement ``identity``.
    """
    user = request.scope.get("user")
    if user is None or not user.is_authenticated:
        return None
    try:
        identity: str = user.identity
    except NotImplementedError:
        # Older Starlette releases (0.46, which FastAPI 0.115 installs, among them) left
        # `identity` unimplemented on their own SimpleUser; newer ones answer its username.
        if isinstance(user, SimpleUser):
            return user.username
        raise TypeError(
            f"{type(user).__name__} does not implement `identity` (Starlette's BaseUser "
            "declares it): implement it, or pass Sentinel(config, identify=...)"
        ) from None
    return identity


class RateLimitExceeded(HTTPException):
    """A denial (429, or 503 when the limiter is unavailable), raised to the handler
    the app registered with ``app.exception_handler(RateLimitExceeded)`` (SPEC §5).

    ``decision`` is the `sentinel_core.Decision`; ``status_code``, ``detail`` and
    ``headers`` (Retry-After and the RateLimit fields) are Starlette's usual fields.
    Whatever the handler returns gains those headers.
    """

    def __init__(self, decision: Decision, status_code: int, headers: Mapping[str, str]) -> None:
        detail = "rate limit exceeded" if status_code == 429 else "rate limiter unavailable"
        super().__init__(status_code, detail, dict(headers))
        self.decision = decision


def denial_exception(outcome: Outcome) -> RateLimitExceeded | None:
    """The exception an app's handler renders for a denial decided by a policy; None
    for a refusal without a decision (a 401), which stays Sentinel's own."""
    if outcome.decision is None:
        return None
    return RateLimitExceeded(outcome.decision, outcome.status, dict(denial_headers(outcome)))


def denial_headers(outcome: Outcome) -> list[tuple[str, str]]:
    """A denial's headers but its Content-Type: what an app's own rendering gains."""
    return [(name, value) for name, value in outcome.headers if name != "Content-Type"]


def handled_denial(response: Any, outcome: Outcome) -> Response:
    """The response an app's handler returned for a denial, with the denial's headers."""
    if not isinstance(response, Response):
        raise TypeError(
            f"the RateLimitExceeded handler returned {type(response).__name__}, not a Response"
        )
    for name, value in denial_headers(outcome):
        response.headers[name] = value
    return response


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
    pairs = [
        (_RAW_NAMES.get(name) or name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in headers
    ]
    if cookie is not None:
        pairs.append((b"set-cookie", cookie.header_value().encode("latin-1")))
    return pairs


_RAW_NAMES = {name: name.lower().encode("latin-1") for name in ("RateLimit-Policy", "RateLimit")}
"""The fields every allowed response carries, as ASGI names, encoded once."""
