"""The request lifecycle in Flask's hooks: admission in ``before_request``, response
fields in ``after_request``, completion when the response is closed.

``before_request`` admits the request once on every endpoint id it pays for (the
core's rule: ``@rate_limited`` ids and the ``routes`` entry together). The decorator
only checks that this happened. Completion runs in ``teardown_request`` with the final
status (500 when the view raised and Flask propagated the exception), except for a
streamed body, which completes when the WSGI server closes it, once it is sent.

A body whose length is declared up front is not waited for, even when Werkzeug hands
it over as an iterator: that is how every ``HTTPException``'s page reaches
``after_request`` (``abort(401)``, ``abort(response)``, the 500 of a view that raised;
Flask runs the exception as a WSGI app). Waiting for those to be closed would leave
their completion to the client: Flask's test client never closes a response it is
not asked to, so a counted 401 would never be counted and a concurrency lease would
be held until it expired. Nor is a body passed through to the server as it is
(``send_file``'s file): Werkzeug never runs the close callbacks of such a response, in
any server, so its completion would never come. A view's own body of a declared length
is waited for when the request has a ``settle`` policy, since the body may report what
it used (a download of known size reporting its bytes).
"""

from __future__ import annotations

from flask import Flask, Request, Response, g
from werkzeug.routing import Rule
from werkzeug.wsgi import ClosingIterator

import sentinel_core
from sentinel_core.adapter import PASS_THROUGH, SERVER_ERROR, Admission, Endpoint

from ._translate import (
    add_denial_headers,
    decorate_response,
    denial_error,
    denial_response,
    handles,
    request_view,
)

EXTENSION_KEY = "sentinel"
_ADMISSION = "_sentinel_admission"
_ADMITTED = "_sentinel_admitted"
_STATUS = "_sentinel_status"
_DENIAL = "_sentinel_denial"


def core_of(app: Flask) -> sentinel_core.Sentinel:
    """The core Sentinel that `init_app` stored on ``app``.

    Raises:
        RuntimeError: `Sentinel.init_app` was never called for ``app``.
    """
    core = app.extensions.get(EXTENSION_KEY)
    if not isinstance(core, sentinel_core.Sentinel):
        raise RuntimeError(
            f"sentinel_flask: no Sentinel on app {app.name!r}; call Sentinel(app) or "
            "sentinel.init_app(app) before serving requests"
        )
    return core


class Route:
    """What one URL rule pays for on one method, worked out at its first request."""

    __slots__ = ("admitted", "endpoints", "rule", "template")

    def __init__(self, rule: Rule, endpoints: tuple[Endpoint, ...]) -> None:
        self.rule = rule
        """The rule itself: kept alive, its ``id()`` is the table's key."""
        self.template = rule.rule
        self.endpoints = endpoints
        self.admitted = tuple(endpoint.endpoint_id for endpoint in endpoints)
        """The ids a request of this route is admitted on (what the decorators check)."""


def admit_request(
    app: Flask, core: sentinel_core.Sentinel, native: Request, route: Route
) -> Response | None:
    """Admit ``native``, the current request of ``app``, on ``route``'s endpoints: the
    denial response, or None (the admission waits on `flask.g` for `finish_response`).

    Raises:
        RateLimitExceeded, RateLimiterUnavailable: a policy denied the request; Flask
            hands it to the app's ``errorhandler(429)`` / ``(503)``, or answers the
            exception's own SPEC §4 response.
    """
    admission = core.admit(request_view(native, route.template), route.endpoints)
    # `flask.g` resolved once: each access through the proxy costs a context lookup.
    state = g._get_current_object()
    denial = admission.denial
    if denial is not None:
        response = denial_response(app, denial)
        if denial.decision is None or not handles(app, denial.status):
            return response  # a 401 (no decision), or no handler of the app's would take it
        setattr(state, _DENIAL, denial)
        raise denial_error(denial.decision, response)
    setattr(state, _ADMISSION, admission)
    setattr(state, _ADMITTED, route.admitted)
    return None


def pass_through() -> None:
    """``before_request`` of an app whose Sentinel has ``enabled = false``: the request
    counts as admitted on every id, and nothing is decided."""
    setattr(g._get_current_object(), _ADMITTED, PASS_THROUGH)


def require_admitted(endpoint_id: str) -> None:
    """Raise unless ``before_request`` admitted this request on ``endpoint_id``: failing
    the request beats serving it unguarded."""
    if endpoint_id not in g._get_current_object().get(_ADMITTED, ()):
        raise RuntimeError(
            f"sentinel_flask: {endpoint_id!r}: this request did not pass Sentinel; call "
            "Sentinel(app) or sentinel.init_app(app)"
        )


def finish_response(response: Response) -> Response:
    """``after_request``: the admission's fields on ``response``, and its completion
    once the server closes the response."""
    state = g._get_current_object()
    admission: Admission | None = state.get(_ADMISSION)
    if admission is None:
        denial = state.pop(_DENIAL, None)
        if denial is not None:
            add_denial_headers(response, denial)
        return response
    decorate_response(response, admission)
    if response.is_streamed and not _not_waited_for(response, admission):
        state.pop(_ADMISSION)
        response.call_on_close(lambda: admission.complete(response.status_code))
    else:
        setattr(state, _STATUS, response.status_code)
    return response


def _not_waited_for(response: Response, admission: Admission) -> bool:
    """Whether a streamed body completes at teardown, before it is sent: passed through
    (a file), or of a length declared up front, unless the view itself wrote it for a
    request that reports units (a download of known size reporting its bytes as it
    streams: settled once sent). A WSGI app's body, an HTTPException's page among them,
    reaches ``after_request`` as Werkzeug's `ClosingIterator`."""
    if response.direct_passthrough:
        return True
    if "Content-Length" not in response.headers:
        return False
    return admission.meter is None or isinstance(response.response, ClosingIterator)


def complete(error: BaseException | None) -> None:
    """``teardown_request``: complete the admission with the response's status, or as
    a 500 when the view's exception propagated (no response)."""
    state = g._get_current_object()
    admission: Admission | None = state.pop(_ADMISSION, None)
    if admission is not None:
        admission.complete(SERVER_ERROR if error is not None else state.get(_STATUS, SERVER_ERROR))
