"""The framework-neutral HTTP layer (SPEC §4): request view in, outcome out.

Adapters build a `RequestView` from their framework's request, call
`Sentinel.guard`/`aguard`, and translate the `Outcome` back: a denial becomes a
response with the outcome's status, headers and problem+json body; an allowance lets
the handler run and adds the outcome's headers and cookie to its response. Every rule
of SPEC §4 (statuses, Retry-After, RateLimit headers, problem types, 401s) lives here.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sentinel_core._memo import Memo
from sentinel_core._models import (
    MICRO,
    STORE_VERDICTS,
    Algorithm,
    Decision,
    DecisionReason,
    IdentityKind,
    Policy,
    frozen_builder,
)
from sentinel_core._plugins import Hooks
from sentinel_core.config._schema import SentinelConfig
from sentinel_core.errors import ConfigError, UnknownEndpointError
from sentinel_core.identity._anonymous import NEW_DEVICES, DeviceCookies, client_network
from sentinel_core.identity._client_address import ClientAddresses
from sentinel_core.identity._exempt import Exemptions
from sentinel_core.identity._jwt import AuthError, JwtVerifier
from sentinel_core.identity._keys import (
    AnonymousIdentity,
    Identity,
    TenantIdentity,
    anonymous_key_secret,
    tenant_identity,
)
from sentinel_core.resilience._emergency import emergency_capacity_micro

PROBLEM_JSON = "application/problem+json"
QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded"
TEMPORARY_REDUCED_CAPACITY = (
    "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
)
_TOO_MANY = frozenset({DecisionReason.RATE_LIMITED, DecisionReason.EMERGENCY_LOCAL_LIMIT})
_SF_SAFE = re.compile(r"[\x20-\x7e]*")
_SF_PRINTABLE = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) != "%")
_PARTITION_KEY_BYTES = 12
_TENANTS_KEPT = 4_096


@dataclass(slots=True)  # not frozen: every request builds one, and frozen costs 2x to build
class RequestView:
    """What Sentinel needs of a request, whatever the framework (nothing in Sentinel
    changes it).

    ``headers`` must be case-insensitive (every framework's own header mapping is);
    ``peer`` is the transport's peer address only (ASGI ``client``, WSGI
    ``REMOTE_ADDR``), never a forwarding header. ``native`` is the framework's request
    object, for plugins.
    """

    method: str
    route: str | None
    headers: Mapping[str, str]
    cookies: Mapping[str, str]
    peer: str | None
    native: Any = None


@dataclass(frozen=True, slots=True)
class Cookie:
    """The anonymous device cookie to set on an allowed response."""

    name: str
    value: str
    max_age: int
    secure: bool
    http_only: bool = True
    same_site: str = "Lax"
    path: str = "/"

    def set_cookie_arguments(self) -> dict[str, Any]:
        """Keyword arguments for ``set_cookie`` of Werkzeug's and Django's responses."""
        return {
            "key": self.name,
            "value": self.value,
            "max_age": self.max_age,
            "path": self.path,
            "secure": self.secure,
            "httponly": self.http_only,
            "samesite": self.same_site,
        }

    def header_value(self) -> str:
        """The ``Set-Cookie`` header value, for adapters that set raw headers."""
        parts = [f"{self.name}={self.value}", f"Max-Age={self.max_age}", f"Path={self.path}"]
        parts += ["HttpOnly"] if self.http_only else []
        parts += [f"SameSite={self.same_site}"]
        parts += ["Secure"] if self.secure else []
        return "; ".join(parts)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What to do with a request. When ``allowed``, run the handler and add ``headers``
    and ``cookie`` to its response; otherwise answer ``status``/``headers``/``body``."""

    allowed: bool
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes = b""
    cookie: Cookie | None = None
    decision: Decision | None = None
    media_type: str = PROBLEM_JSON


build_outcome = frozen_builder(Outcome)
"""`Outcome`, built as fast as a plain class (one per request)."""

EXEMPT = Outcome(True, 200, ())
"""The outcome of an exempt request: run the handler, add nothing, and charge nothing
for this endpoint id (callers guarding several ids go on with the next one)."""


@dataclass(frozen=True, slots=True)
class Prepared:
    """A request whose identity is known and may now be decided."""

    identity: Identity
    cookie: Cookie | None


build_prepared = frozen_builder(Prepared)
"""`Prepared`, built as fast as a plain class (one per request)."""


class HttpLayer:
    """Identity resolution and outcome mapping for one configuration."""

    def __init__(
        self,
        config: SentinelConfig,
        hooks: Hooks,
        *,
        on_exempt: Callable[[str], None] = lambda endpoint_id: None,
        identify: Callable[[Any], object] | None = None,
    ) -> None:
        self._config = config
        self._identify_user = identify
        self._hooks = hooks
        self._clients = ClientAddresses(config.trusted_proxies)
        self._exemptions = Exemptions(config.exempt, hooks.exempt, on_exempt)
        self._jwt = JwtVerifier(config.jwt) if config.jwt is not None else None
        self._tenants: Memo[str, Prepared] = Memo(_TENANTS_KEPT)
        """Tenant -> its prepared request, for the most active tenants (immutable, so
        shared by their requests)."""
        self._exempts_nobody = not config.exempt.tenants and not config.exempt.networks
        """No configured exemption: a tenant request needs neither its client address
        nor an exemption check, unless a plugin identifies or exempts."""
        self.prefetches = config.jwt is not None and config.jwt.jwks is not None
        """Whether asyncio code must await `aprefetch_keys` before `prepare` (keys from a
        JWKS); without one there is nothing to fetch, and no coroutine to make."""
        self._cookies = DeviceCookies(config.anonymous) if config.anonymous is not None else None
        self._policy_fields = {
            endpoint_id: fields
            for endpoint_id, policy in config.policies.items()
            if (fields := _windowed_policy_field(policy)) is not None
        }
        """Endpoint id -> its configured policy, its field name and the start of its
        ``RateLimit-Policy`` value (all but ``pk``), made once: what every allowed
        response repeats."""

    async def aprefetch_keys(self, request: RequestView) -> None:
        """In asyncio servers, before `prepare`: the JWKS fetch this request's token
        may need, awaited off the event loop, so that `prepare` never blocks it."""
        if self._jwt is not None:
            await self._jwt.aprefetch(request.headers.get("authorization"))

    def load_keys(self) -> None:
        """Fetch the JWKS keys now (start-up), so that no request waits for them."""
        if self._jwt is not None:
            self._jwt.load_keys()

    def validate_endpoint(self, endpoint_id: str) -> Policy:
        """Check at startup that ``endpoint_id`` can be guarded over HTTP.

        Raises:
            UnknownEndpointError: no policy declares it.
            ConfigError: a tenant policy without the ``jwt`` section and without a
                plugin implementing `sentinel_identify` to supply identities instead;
                a user policy without an ``identify`` callable.
        """
        policy = self._config.policies.get(endpoint_id)
        if policy is None:
            raise UnknownEndpointError(endpoint_id)
        if policy.identity is IdentityKind.USER and self._identify_user is None:
            raise ConfigError(
                f"policies.{endpoint_id}.identity",
                "a user policy needs the adapter's identify callable, which names the "
                "request's user (Sentinel(identify=fn))",
            )
        if (
            policy.identity is IdentityKind.TENANT
            and self._jwt is None
            and not self._hooks.implements_identify()
        ):
            raise ConfigError(
                "jwt", f"missing section: tenant policy {endpoint_id!r} needs it over HTTP"
            )
        return policy

    def prepare(self, policy: Policy, request: RequestView) -> Prepared | Outcome:
        """The request's identity, the 401 outcome of a tenant request without one, or
        `EXEMPT` for a request that must not be limited (see `identity._exempt`).

        A plugin's `sentinel_identify` answer comes first; then the policy's built-in
        identity. Raises nothing for anything a client can send.
        """
        hooks = self._hooks
        if (
            policy.identity is IdentityKind.TENANT
            and self._exempts_nobody
            and not (hooks.identifies or hooks.exempts)
        ):
            return self._tenant(request)  # the usual case: the bearer token alone
        # An unreadable forwarding header: limited as the proxy's address, never exempt.
        client, unreadable = self._clients.resolve(request.peer, request.headers)
        exempt = self._exemptions.by_request(request, policy, None if unreadable else client)
        if exempt is None:
            prepared = self._identify(policy, request, client)
            if not isinstance(prepared, Prepared) or not self._exemptions.by_identity(
                prepared.identity
            ):
                return prepared
        elif not exempt:
            return self._identify(policy, request, client)
        self._exemptions.count(policy)
        return EXEMPT

    def _identify(
        self, policy: Policy, request: RequestView, client: str | None
    ) -> Prepared | Outcome:
        custom = _custom_identity(self._hooks.identify(request, policy))
        if custom is not None:
            return Prepared(custom, None)
        if policy.identity is IdentityKind.ANONYMOUS:
            return self._anonymous(request, client)
        if policy.identity is IdentityKind.USER:
            user = self._user(request)
            if user is None:  # no authenticated user: limited like an anonymous client
                return self._anonymous(request, client)
            return build_prepared(tenant_identity(user), None)
        return self._tenant(request)

    def _tenant(self, request: RequestView) -> Prepared | Outcome:
        """The tenant of the request's bearer token, or the 401 of a request without a
        valid one."""
        if self._jwt is None:
            # Tenant identity came from a plugin that had none for this request.
            return unauthorized(AuthError(None, "credentials required"))
        try:
            tenant = self._jwt.tenant_from_authorization(request.headers.get("authorization"))
        except AuthError as error:
            return unauthorized(error)
        prepared = self._tenants.get(tenant)
        if prepared is None:
            prepared = self._tenants.keep(tenant, build_prepared(tenant_identity(tenant), None))
        return prepared

    def _user(self, request: RequestView) -> str | None:
        """The id of the user the application authenticated (``identify``), hashed
        into a key like a tenant's; None (or ``""``) when there is none."""
        identify = self._identify_user
        user = None if identify is None else identify(request.native)
        if user is None or user == "":
            return None
        if not isinstance(user, str):
            raise TypeError(f"identify must return a str or None, not {type(user).__name__}")
        return user

    def outcome(self, decision: Decision, cookie: Cookie | None) -> Outcome:
        """SPEC §4's table for a decision.

        Allowed: the RateLimit headers and the cookie to add to the handler's response.
        Rate limited: 429, ``Retry-After``, RateLimit headers, quota-exceeded problem.
        Store failure: 503, ``Retry-After`` while the breaker is OPEN, no RateLimit
        headers (there is no quota to describe), temporary-reduced-capacity problem.
        A new device cookie is never set on a denial: the client would get a fresh
        identity for free on every refused request.
        """
        headers = self._ratelimit_headers(decision)
        if decision.allowed:
            # Positional (Outcome's field order): a third cheaper than keywords.
            return build_outcome(True, 200, tuple(headers), b"", cookie, decision)
        status = 429 if decision.reason in _TOO_MANY else 503
        if decision.retry_after_seconds is not None:
            headers.insert(0, ("Retry-After", str(max(1, decision.retry_after_seconds))))
        headers.append(("Content-Type", PROBLEM_JSON))
        body = _denial_body(status, decision.endpoint_id)
        return build_outcome(False, status, tuple(headers), body, decision=decision)

    def _ratelimit_headers(self, decision: Decision) -> list[tuple[str, str]]:
        """The RateLimit headers a decision warrants: none when turned off, for a shadow
        policy (a dry run stays invisible to clients) or for a store failure denial."""
        if not self._config.ratelimit_headers or decision.shadow:
            return []
        if decision.reason in STORE_VERDICTS:
            compiled = self._policy_fields.get(decision.endpoint_id)
            if compiled is None or compiled[0] is not decision.policy:  # a plugin's tier
                return ratelimit_headers(decision)
            _, name, policy_field = compiled
            return _windowed_headers(
                decision, name, policy_field, _partition_key(decision.identity_hash)
            )
        if decision.allowed or decision.reason is DecisionReason.EMERGENCY_LOCAL_LIMIT:
            return ratelimit_headers(decision, emergency=True)
        return []

    def _anonymous(self, request: RequestView, client: str | None) -> Prepared:
        """The device of a genuine cookie; without one, the network's "new devices"
        bucket (SPEC §2) and the device minted for the allowed response's cookie: a
        client that drops its cookies gets one device's limit per network, not the
        network's, and one that keeps them its device's limit, first request included."""
        assert self._cookies is not None  # the config loader requires the section
        settings = self._cookies.config
        device_id = self._cookies.verify(request.cookies.get(settings.cookie_name))
        secret = anonymous_key_secret(settings.cookie_secret, settings.previous_cookie_secrets)
        if device_id is not None:
            return Prepared(AnonymousIdentity(device_id, client_network(client), secret), None)
        minted, value = self._cookies.mint()
        cookie = Cookie(
            settings.cookie_name, value, settings.cookie_max_age_seconds, settings.secure
        )
        identity = AnonymousIdentity(NEW_DEVICES, client_network(client), secret, minted)
        return Prepared(identity, cookie)


@functools.lru_cache(maxsize=4096)
def _denial_body(status: int, endpoint_id: str) -> bytes:
    """The problem+json body of a 429 or 503 on ``endpoint_id``: the same bytes for
    every denial of an endpoint, so made once (a flood answers thousands per second)."""
    body: dict[str, Any]
    if status == 429:
        body = {
            "type": QUOTA_EXCEEDED,
            "title": "Too Many Requests",
            "status": status,
            "detail": "rate limit exceeded",
            "violated-policies": [endpoint_id],
        }
    else:
        body = {
            "type": TEMPORARY_REDUCED_CAPACITY,
            "title": "Service Unavailable",
            "status": status,
            "detail": "rate limiter unavailable",
        }
    return json.dumps(body).encode()


def unauthorized(error: AuthError) -> Outcome:
    """401 with an RFC 6750 challenge (error code only when credentials were sent)."""
    challenge = "Bearer"
    if error.error is not None:
        challenge += f' error="{error.error}", error_description="{error.description}"'
    body = {
        "type": "about:blank",
        "title": "Unauthorized",
        "status": 401,
        "detail": error.description,
    }
    headers = (("WWW-Authenticate", challenge), ("Content-Type", PROBLEM_JSON))
    return Outcome(False, 401, headers, json.dumps(body).encode())


def ratelimit_headers(decision: Decision, *, emergency: bool = False) -> list[tuple[str, str]]:
    """``RateLimit-Policy`` and ``RateLimit`` in the syntax of the IETF httpapi RateLimit
    header fields draft (-12): structured-field lists ``"name";q=..;w=..;pk=:..:`` and
    ``"name";r=..;t=..;pk=:..:``.

    ``pk``, the partition key, is a truncated hash of the identity's hash: it tells a
    client which quota it draws from without echoing an identity. With ``emergency``,
    the quota described is the per-process emergency bucket that applies while Redis
    is unavailable (one second of ``fallback_rate``), not the policy's own.
    """
    policy = decision.policy
    name = _field_name(decision.endpoint_id)
    pk = _partition_key(decision.identity_hash)
    if policy.algorithm is Algorithm.CONCURRENCY or (
        policy.algorithm is Algorithm.QUOTA and not emergency
    ):
        return _unwindowed_headers(decision, name, pk, emergency)
    if policy.layers and not emergency:
        return _layered_headers(decision, pk)
    if emergency and policy.fallback_rate is not None:
        rate = policy.fallback_rate
        capacity = emergency_capacity_micro(rate) // MICRO
        quota, window = capacity, max(1, -(-capacity * rate.period_seconds // rate.count))
    else:
        quota, window = policy.limit, _window_seconds(policy)
    return _windowed_headers(decision, name, f"{name};q={quota};w={window};pk=:", pk)


def _windowed_policy_field(policy: Policy) -> tuple[Policy, str, str] | None:
    """A policy with one window, its field name and its ``RateLimit-Policy`` value up to
    ``pk=:`` (the partition key is the identity's); None for the others (layered limits,
    concurrency, calendar quotas), whose fields `ratelimit_headers` makes."""
    if policy.layers or policy.algorithm in (Algorithm.CONCURRENCY, Algorithm.QUOTA):
        return None
    name = _field_name(policy.endpoint_id)
    return policy, name, f"{name};q={policy.limit};w={_window_seconds(policy)};pk=:"


def _windowed_headers(
    decision: Decision, name: str, policy_field: str, pk: str
) -> list[tuple[str, str]]:
    """The RateLimit fields of one window, the ``RateLimit-Policy`` value up to ``pk``
    given."""
    return [
        ("RateLimit-Policy", f"{policy_field}{pk}:"),
        ("RateLimit", f"{name};r={decision.remaining};t={decision.reset_seconds};pk=:{pk}:"),
    ]


def _unwindowed_headers(
    decision: Decision, name: str, pk: str, emergency: bool
) -> list[tuple[str, str]]:
    """Concurrency: ``qu="concurrent-requests"`` and no window (a lease is held until
    the request ends); while failing open, the per-process ``fallback_limit``. Quota: no
    ``w`` either (calendar periods differ in length); ``t`` counts to the next boundary.
    A failing-open quota policy describes its emergency bucket like any other."""
    policy = decision.policy
    if policy.algorithm is Algorithm.CONCURRENCY:
        quota = policy.fallback_limit if emergency else policy.limit
        return [
            ("RateLimit-Policy", f'{name};q={quota};qu="concurrent-requests";pk=:{pk}:'),
            ("RateLimit", f"{name};r={decision.remaining};pk=:{pk}:"),
        ]
    return [
        ("RateLimit-Policy", f"{name};q={policy.limit};pk=:{pk}:"),
        ("RateLimit", f"{name};r={decision.remaining};t={decision.reset_seconds};pk=:{pk}:"),
    ]


# The two caches below hold what every response of an active identity repeats: a flood
# of denials asks for the same few values thousands of times a second.


@functools.lru_cache(maxsize=4096)
def _partition_key(identity_hash: str) -> str:
    """``pk``: base64 of a truncated hash of ``identity_hash`` (never the identity)."""
    digest = hashlib.sha256(b"sentinel-pk:" + identity_hash.encode()).digest()
    return base64.b64encode(digest[:_PARTITION_KEY_BYTES]).decode()


@functools.lru_cache(maxsize=1024)
def _field_name(endpoint_id: str) -> str:
    """``endpoint_id`` as a structured-field String, quotes included."""
    return f'"{_sf_string_content(endpoint_id)}"'


def _sf_string_content(text: str) -> str:
    """``text`` as the inside of a structured-field String (RFC 8941 §3.3.3): printable
    ASCII only (anything else percent-encoded), with ``"`` and ``\\`` escaped."""
    if not _SF_SAFE.fullmatch(text):
        text = urllib.parse.quote(text, safe=_SF_PRINTABLE)
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _window_seconds(policy: Policy, limit: int = 0) -> int:
    """The sliding window's length, or the time a token bucket takes to refill fully
    (of the policy's ``limit``-th limit)."""
    rate, capacity = policy.limits[limit] if limit else (policy.rate, policy.burst)
    if policy.algorithm is Algorithm.SLIDING_WINDOW:
        return rate.period_seconds
    return max(1, -(-capacity * rate.period_seconds // rate.count))


_UNITS = {1: "second", 60: "minute", 3_600: "hour", 86_400: "day"}


def _layered_headers(decision: Decision, pk: str) -> list[tuple[str, str]]:
    """Layered limits: ``RateLimit-Policy`` lists every limit, each named
    ``"<endpoint id>/<unit>"``; ``RateLimit`` reports the one closest to binding."""
    policy = decision.policy
    names = [
        f'"{_sf_string_content(f"{decision.endpoint_id}/{_UNITS[rate.period_seconds]}")}"'
        for rate, _ in policy.limits
    ]
    items = [
        f"{name};q={capacity};w={_window_seconds(policy, index)};pk=:{pk}:"
        for index, (name, (_, capacity)) in enumerate(zip(names, policy.limits, strict=True))
    ]
    name = names[decision.limit_index]
    return [
        ("RateLimit-Policy", ", ".join(items)),
        ("RateLimit", f"{name};r={decision.remaining};t={decision.reset_seconds};pk=:{pk}:"),
    ]


def _custom_identity(custom: object) -> Identity | None:
    """A plugin's `sentinel_identify` answer as an `Identity` (``""`` counts as none)."""
    if custom is None or custom == "":
        return None
    if isinstance(custom, str):
        return tenant_identity(custom)
    if isinstance(custom, (TenantIdentity, AnonymousIdentity)):
        return custom
    raise TypeError(
        "sentinel_identify must return a str, a TenantIdentity, an AnonymousIdentity or "
        f"None, not {type(custom).__name__}"
    )
