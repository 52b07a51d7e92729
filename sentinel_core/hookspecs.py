"""Sentinel's plugin hooks (pluggy project ``sentinel``).

Third-party plugins register through the ``sentinel`` entry-point group::

    [project.entry-points.sentinel]
    my_plugin = "my_package.sentinel_plugin"

and implement any of the hooks below with ``@sentinel_core.hookimpl``. The built-in
metrics and structured logs are plugins on `sentinel_decision` like any other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from ._breaker import BreakerState
    from ._keys import Identity
    from ._models import Decision, Policy

PROJECT_NAME = "sentinel"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec(firstresult=True)
def sentinel_identify(request: Any, policy: Policy) -> str | Identity | None:
    """Return a custom identity for ``request`` under ``policy``, or None to pass.

    Called by the HTTP layer before the built-in identity (JWT ``sub`` for tenant
    policies, device cookie AND client IP for anonymous ones); the first non-None
    result wins and the built-in identity is skipped. A string is treated as a tenant
    id (hashed before it reaches any key, log or label), e.g. an API key::

        @hookimpl
        def sentinel_identify(request, policy):
            return request.headers.get("x-api-key")

    ``request`` is Sentinel's framework-neutral `RequestView`. Raise nothing for
    malformed input: return None and let the built-in identity answer.
    """


@hookspec(firstresult=True)
def sentinel_resolve_policy(endpoint_id: str, identity: Identity, policy: Policy) -> Policy | None:
    """Return the policy to apply to ``identity`` on ``endpoint_id``, or None to keep ``policy``.

    For tiered limits: return e.g. ``dataclasses.replace(policy, rate=..., burst=...)``
    for a "pro" tier. The returned policy's arithmetic is not re-validated; build it
    with `sentinel_core.load_config` limits in mind. Called once per decision, on the
    hot path: keep it to a dictionary lookup.
    """


@hookspec
def sentinel_decision(decision: Decision, request: Any) -> None:
    """Observe a decision after it was made; return values are ignored.

    ``request`` is the `RequestView` of the HTTP request, or None for decisions made
    through `Sentinel.evaluate` outside a web request. Called on the hot path of every
    guarded request: do no I/O here (queue it). Auth failures produce no decision and
    never reach this hook.
    """


@hookspec
def sentinel_breaker_transition(previous: BreakerState, current: BreakerState) -> None:
    """Observe a circuit-breaker transition (e.g. CLOSED -> OPEN) of one Sentinel instance."""
