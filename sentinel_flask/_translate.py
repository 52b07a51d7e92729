"""Flask request in, Flask response out: the only place the adapter touches either.

SPEC §4 lives in `sentinel_core.http._outcome`; this module only moves values across the
boundary. The client address is WSGI ``REMOTE_ADDR`` (``request.remote_addr``) and
nothing else: no forwarding header is ever read here (an app behind a trusted proxy
applies Werkzeug's ``ProxyFix``, which rewrites ``REMOTE_ADDR`` itself).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import Any

from flask import Flask, Request, Response
from werkzeug.datastructures import EnvironHeaders
from werkzeug.exceptions import HTTPException, ServiceUnavailable, TooManyRequests

from sentinel_core import Decision
from sentinel_core.adapter import Admission, Outcome, RequestView


class HeaderMapping(Mapping[str, str]):
    """The request's headers as the read-only, case-insensitive ``Mapping`` the core
    expects, read straight from the WSGI environ.

    Werkzeug's `EnvironHeaders` looks up names case-insensitively over the same environ
    but iterates ``(name, value)`` pairs, so it is not a ``Mapping``; and a lookup
    through it (``get`` calling ``__getitem__`` calling ``_get_key``) costs three times
    the environ read the core's one or two lookups per request need.
    """

    __slots__ = ("_environ",)

    def __init__(self, environ: dict[str, Any]) -> None:
        self._environ = environ

    def __getitem__(self, name: str) -> str:
        value: str = self._environ[_environ_key(name)]
        return value

    def get(self, name: str, default: Any = None) -> Any:
        return self._environ.get(_environ_key(name), default)

    def __iter__(self) -> Iterator[str]:
        return iter(EnvironHeaders(self._environ).keys())

    def __len__(self) -> int:
        return len(EnvironHeaders(self._environ))


@functools.lru_cache(maxsize=64)  # the few names the core and plugins read, per request
def _environ_key(name: str) -> str:
    """Where WSGI puts header ``name`` (as `EnvironHeaders` reads it)."""
    key = name.upper().replace("-", "_")
    return key if key in _UNPREFIXED else "HTTP_" + key


_UNPREFIXED = frozenset({"CONTENT_TYPE", "CONTENT_LENGTH"})
"""The two headers WSGI keeps without the ``HTTP_`` prefix (PEP 3333)."""


class CookieMapping(Mapping[str, str]):
    """The request's cookies, parsed only when read: tenant policies never read them,
    and Werkzeug's cookie parsing is a measurable part of a guarded request."""

    __slots__ = ("_request",)

    def __init__(self, request: Request) -> None:
        self._request = request

    def __getitem__(self, name: str) -> str:
        return self._request.cookies[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._request.cookies)

    def __len__(self) -> int:
        return len(self._request.cookies)


def request_view(request: Request, route: str | None) -> RequestView:
    """What the core needs of ``request``; ``route`` is the matched rule's template."""
    # Positional: a frozen dataclass's keyword call costs twice as much, per request.
    return RequestView(
        request.method,
        route,
        HeaderMapping(request.environ),
        CookieMapping(request),
        request.remote_addr,
        request,
    )


def denial_response(app: Flask, outcome: Outcome) -> Response:
    """A denied outcome (401, 429, 503) as ``app``'s response class; its headers carry
    the problem+json ``Content-Type``."""
    return app.response_class(outcome.body, status=outcome.status, headers=list(outcome.headers))


class RateLimitExceeded(TooManyRequests):
    """A 429 decided by a policy, raised so the app's ``@app.errorhandler(429)`` renders it
    (SPEC §5); ``decision`` is the `sentinel_core.Decision`. Unhandled, it answers SPEC
    §4's problem+json response. Whatever a handler returns gains the denial's headers."""

    def __init__(self, decision: Decision, response: Response) -> None:
        super().__init__("rate limit exceeded", response)
        self.decision = decision


class RateLimiterUnavailable(ServiceUnavailable):
    """A 503 (the store failed and the policy fails closed), for ``@app.errorhandler(503)``;
    ``decision`` is the `sentinel_core.Decision`, as on `RateLimitExceeded`."""

    def __init__(self, decision: Decision, response: Response) -> None:
        super().__init__("rate limiter unavailable", response)
        self.decision = decision


def denial_error(decision: Decision, response: Response) -> HTTPException:
    """The exception that carries a policy's denial to the app's error handlers."""
    if response.status_code == 429:
        return RateLimitExceeded(decision, response)
    return RateLimiterUnavailable(decision, response)


def handles(app: Flask, status: int) -> bool:
    """Whether an error handler of ``app`` or of one of its blueprints is registered for
    ``status`` (429 or 503) or for a class of its exception (``HTTPException``,
    ``Exception``). Without one the denial is answered as is: an exception Flask
    would only turn back into the same response costs a flood of denials for nothing."""
    error_class = RateLimitExceeded if status == 429 else RateLimiterUnavailable
    for handlers in app.error_handler_spec.values():
        if handlers.get(status) or any(
            cls in error_class.__mro__ for cls in handlers.get(None, ())
        ):
            return True
    return False


def add_denial_headers(response: Response, outcome: Outcome) -> None:
    """A denial's Retry-After and RateLimit fields on the response an error handler made
    (set, not added: the unhandled denial's own response has them already)."""
    for name, value in outcome.headers:
        if name != "Content-Type":
            response.headers[name] = value


def decorate_response(response: Response, admission: Admission, status: int) -> None:
    """Add an admission's RateLimit fields and device cookie to ``response`` (whose
    status is ``status``)."""
    add = response.headers.add
    for name, value in admission.headers(status):
        add(name, value)
    cookie = admission.cookie(status)
    if cookie is not None:
        response.set_cookie(**cookie.set_cookie_arguments())
