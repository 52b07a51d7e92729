"""The request lifecycle in Flask's hooks: admission in ``before_request``, response
fields in ``after_request``, completion when the response is closed.

``before_request`` admits the request once on every endpoint id it pays for (the
core's rule: ``@rate_limited`` ids and the ``routes`` entry together). The decorator
only checks that this happened. Completion runs when the request is torn down (Flask's
``request_tearing_down`` signal) with the final status (500 when the view raised and
Flask propagated the exception), except for a streamed body, which completes when the
WSGI server closes it, once it is sent. Most requests owe no completion at all (no
``count``, ``settle`` or concurrency policy): an app connects to the signal at the
first request that does, so the others pay for no teardown step of Sentinel's.

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

from typing import Any

from flask import Flask, Response, g, request_tearing_down
from werkzeug.routing import Rule
from werkzeug.wsgi import ClosingIterator

import sentinel_core
from sentinel_core.adapter import PASS_THROUGH, SERVER_ERROR, Admission, Endpoint, Outcome

from ._translate import (
    add_denial_headers,
    decorate_response,
    denial_error,
    denial_response,
    handles,
)

EXTENSION_KEY = "sentinel"
ADMISSION = "_sentinel_admission"
"""Where on `flask.g` the request's `Admission` waits for ``after_request``."""
ADMITTED = "_sentinel_admitted"
"""Where on `flask.g` the endpoint ids the request was admitted on wait for the views'
decorators, which check theirs is among them before the view runs."""
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


def deny(app: Flask, denial: Outcome) -> Response:
    """The response of a denied admission (``before_request`` returns it), or the
    exception that carries it to the app's error handler for its status.

    Raises:
        RateLimitExceeded, RateLimiterUnavailable: a policy denied the request; Flask
            hands it to the app's ``errorhandler(429)`` / ``(503)``, or answers the
            exception's own SPEC §4 response.
    """
    response = denial_response(app, denial)
    if denial.decision is None or not handles(app, denial.status):
        return response  # a 401 (no decision), or no handler of the app's would take it
    setattr(g._get_current_object(), _DENIAL, denial)
    raise denial_error(denial.decision, response)


def pass_through() -> None:
    """``before_request`` of an app whose Sentinel has ``enabled = false``: the request
    counts as admitted on every id, and nothing is decided."""
    setattr(g._get_current_object(), ADMITTED, PASS_THROUGH)


def not_admitted(endpoint_id: str) -> RuntimeError:
    """The error of a decorated view whose request did not pass Sentinel: failing the
    request beats serving it unguarded."""
    return RuntimeError(
        f"sentinel_flask: {endpoint_id!r}: this request did not pass Sentinel; call "
        "Sentinel(app) or sentinel.init_app(app)"
    )


def finish_response(response: Response) -> Response:
    """``after_request``: the admission's fields on ``response``, and its completion
    once the server closes the response."""
    state = vars(g._get_current_object())  # see `complete`
    admission: Admission | None = state.get(ADMISSION)
    if admission is None:
        denial = state.pop(_DENIAL, None)
        if denial is not None:
            add_denial_headers(response, denial)
        return response
    status = response.status_code
    decorate_response(response, admission, status)
    if not admission.owes_completion:
        return response
    if response.is_streamed and not _not_waited_for(response, admission):
        del state[ADMISSION]
        response.call_on_close(lambda: admission.complete(response.status_code))
    else:
        state[_STATUS] = status
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


def complete(sender: Flask, exc: BaseException | None = None, **extra: Any) -> None:
    """``request_tearing_down``: complete the admission with the response's status, or
    as a 500 when the view's exception propagated (no response)."""
    # The namespace's own dict: `g.pop` and `g.get` are Python-level wrappers of it.
    state = vars(g._get_current_object())
    admission: Admission | None = state.pop(ADMISSION, None)
    if admission is not None:
        admission.complete(SERVER_ERROR if exc is not None else state.get(_STATUS, SERVER_ERROR))


def complete_on_teardown(app: Flask) -> None:
    """Complete ``app``'s admissions when their request is torn down, from now on."""
    request_tearing_down.connect(complete, app, weak=False)
