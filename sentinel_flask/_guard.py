"""The one check the decorator and the ``routes`` middleware share.

A request is guarded by calling the app's core Sentinel with a `RequestView`. A denial
is answered at once; an allowed outcome is kept on `flask.g` until ``after_request``
adds its headers and cookie to whatever response the request ends with (the view's,
or an error handler's after ``abort``), so both entry points decorate responses in
exactly one place.
"""

from __future__ import annotations

from flask import Flask, Response, current_app, g, request

import sentinel_core

from ._translate import decorate_response, denial_response, request_view

EXTENSION_KEY = "sentinel"
_OUTCOMES = "_sentinel_outcomes"


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


def guard_request(endpoint_id: str) -> Response | None:
    """Decide the current request on ``endpoint_id``: the denial response, or None
    (allowed; the outcome waits on `flask.g` for `finish_response`)."""
    core = core_of(current_app)
    native = request._get_current_object()  # type: ignore[attr-defined]
    outcome = core.guard(endpoint_id, request_view(native))
    if not outcome.allowed:
        return denial_response(outcome)
    outcomes = g.get(_OUTCOMES)
    if outcomes is None:
        setattr(g, _OUTCOMES, [outcome])
    else:
        outcomes.append(outcome)
    return None


def finish_response(response: Response) -> Response:
    """``after_request``: add the allowed outcomes' headers and cookie to ``response``.

    Denials never reach here with an outcome: only allowed outcomes are kept, which is
    also what makes the anonymous cookie appear on allowed responses only.
    """
    for outcome in g.pop(_OUTCOMES, ()):
        decorate_response(response, outcome)
    return response
