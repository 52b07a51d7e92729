"""Sentinel's plugin hooks (pluggy project ``sentinel``): their reference documentation.

Third-party plugins register through the ``sentinel`` entry-point group::

    [project.entry-points.sentinel]
    my_plugin = "my_package.sentinel_plugin"

or are passed to ``Sentinel(config, plugins=[...])``, and implement any of the hooks
below with ``@sentinel_core.hookimpl``, taking any subset of the hook's parameters by
name. A hookimpl whose name matches no hook here is refused when Sentinel starts. The
built-in Prometheus metrics and structured logs are plugins on `sentinel_decision`
like any other.

All hooks run on the request path, in the request's thread or event loop: keep them
to in-memory work. Exceptions raised by a hook propagate to the caller (a 500 in a web
app): a plugin must not raise for anything a client can send.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from sentinel_core._models import Decision, Policy
    from sentinel_core.identity._keys import Identity
    from sentinel_core.resilience._breaker import BreakerState

PROJECT_NAME = "sentinel"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec(firstresult=True)
def sentinel_identify(request: Any, policy: Policy) -> str | Identity | None:
    """Return a custom identity for ``request`` under ``policy``, or None to pass.

    Called by the HTTP layer (`Sentinel.guard`) before the built-in identity (the JWT
    ``sub`` for tenant policies, device cookie AND client IP for anonymous ones); the
    first non-None result wins and the built-in identity is skipped, so no 401 is sent
    for a request a plugin identified. A string is a tenant id (hashed before it
    reaches any key, log or label; ``""`` counts as None), e.g. an API key::

        @hookimpl
        def sentinel_identify(request, policy):
            return request.headers.get("x-api-key")  # validate it in real code

    A `TenantIdentity` or `AnonymousIdentity` may be returned as well. ``request`` is
    Sentinel's framework-neutral `RequestView` (``request.native`` is the framework's
    own request). Never trust a client-chosen value as an identity without verifying
    it: whatever this hook returns decides whose quota a request spends. Raise nothing
    for malformed input: return None and let the built-in identity answer.

    With only plugin identities (no ``jwt`` section), a tenant request that no plugin
    identifies is answered 401.
    """


@hookspec(firstresult=True)
def sentinel_resolve_policy(endpoint_id: str, identity: Identity, policy: Policy) -> Policy | None:
    """Return the policy to apply to ``identity`` on ``endpoint_id``, or None to keep ``policy``.

    For tiered limits: return e.g. ``dataclasses.replace(policy, rate=Rate(100, 1),
    burst=200)`` for a "pro" tier. The returned policy must keep ``endpoint_id``
    (bucket keys and metric labels are named by it; anything else is a ValueError), and
    its arithmetic is not re-validated: stay within what `sentinel_core.load_config`
    accepts. Tiers share one bucket per identity and endpoint, so a tenant that changes
    tier keeps its state; bump ``version`` to give a tier fresh buckets.

    Called once per decision (HTTP or `Sentinel.evaluate`), after identification and
    before the Redis call: keep it to a dictionary lookup. ``identity`` exposes only its
    ``hash`` and, for a tenant, ``tenant`` (the raw id: never log it).
    """


@hookspec(firstresult=True)
def sentinel_exempt(request: Any, policy: Policy) -> bool | None:
    """Return True to exempt ``request`` from ``policy``, False to refuse any exemption,
    or None to let the configuration's ``exempt`` section decide.

    An exempt request never reaches the store: no Redis call, no decision (so
    `sentinel_decision` is not called), no RateLimit headers; it is counted in
    ``sentinel_exempt_total{endpoint_id}``. The first non-None answer is final: True
    exempts even a request without credentials, False keeps a listed tenant or network
    limited (e.g. on an endpoint no one may bypass)::

        @hookimpl
        def sentinel_exempt(request, policy):
            if policy.endpoint_id == "auth.login":
                return False  # nobody bypasses the login limit
            return None

    Called once per guarded endpoint of an HTTP request, before identification, with
    the framework-neutral `RequestView` (``request.native`` is the framework's request).
    Exempting on a client-chosen value (a header, a query parameter) hands the bypass to
    every client: verify what you rely on.
    """


@hookspec
def sentinel_decision(decision: Decision, request: Any) -> None:
    """Observe a decision after it was made; return values are ignored.

    ``decision`` is the `Decision` (reason, endpoint id, limit, remaining, latency, the
    policy applied); ``request`` is the `RequestView` of the HTTP request, or None for
    decisions made through `Sentinel.evaluate` outside a web request.
    ``decision.identity_hash`` is the only form of the identity available, by design.

    Called on the hot path of every decided request, including shadow-mode would-be
    denials (``decision.shadow`` with ``decision.would_allow`` false): do no I/O here
    (queue it). Auth failures produce no decision and never reach this hook.
    """


@hookspec
def sentinel_breaker_transition(previous: BreakerState, current: BreakerState) -> None:
    """Observe a circuit-breaker transition of one Sentinel instance.

    ``previous`` and ``current`` are `BreakerState` members (CLOSED -> OPEN after the
    failure threshold, OPEN -> HALF_OPEN when the quarantine has elapsed, HALF_OPEN ->
    CLOSED or OPEN with the probe's result). Called outside the breaker's lock, in the
    thread or task whose Redis call caused the transition, once per transition.
    """
