"""SPEC §4's table, as `Sentinel.guard` answers it: status, headers and problem bodies.

Allowed requests carry ``RateLimit-Policy``/``RateLimit`` in the IETF httpapi draft's
structured-field syntax; 429s carry an integer ``Retry-After`` for both algorithms and
the quota-exceeded problem type; store failures are 503s with the
temporary-reduced-capacity type, with ``Retry-After`` once the breaker is open. Decided
on the private Redis (and a dead port for outages).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from sentinel_core import Sentinel
from sentinel_core.adapter import Cookie, Outcome
from sentinel_core.http import _outcome as outcome_module
from sentinel_core.http._outcome import (
    QUOTA_EXCEEDED,
    TEMPORARY_REDUCED_CAPACITY,
    ratelimit_headers,
)
from sentinel_core.identity._keys import tenant_identity
from sentinel_core.testing import ratelimit_headers as parse_fields
from tests.support.http import header, make_sentinel, request_view
from tests.support.redis_server import free_port
from tests.support.tokens import COOKIE_SECRET, HS_SECRET, bearer, hs256

ENDPOINT = "api.write"


def config(redis_url: str, policy: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {
        "redis_url": redis_url,
        "socket_timeout_ms": 200,
        "jwt": {"key": HS_SECRET},
        "anonymous": {"cookie_secret": COOKIE_SECRET},
        "policies": {ENDPOINT: policy},
        **top,
    }


def token_bucket(**fields: Any) -> dict[str, Any]:
    return {
        "algorithm": "token_bucket",
        "rate": "1/minute",
        "burst": 3,
        "fail_mode": "closed",
    } | fields


def sliding_window(**fields: Any) -> dict[str, Any]:
    return {"algorithm": "sliding_window", "rate": "3/minute", "fail_mode": "closed"} | fields


@pytest.fixture
def make(redis_url: str) -> Iterator[Any]:
    created: list[Sentinel] = []

    def factory(policy: dict[str, Any], url: str = redis_url, **top: Any) -> Sentinel:
        created.append(make_sentinel(config(url, policy, **top)))
        return created[-1]

    yield factory
    for sentinel in created:
        sentinel.close()


def call(sentinel: Sentinel, tenant: str = "tenant-a", **view: Any) -> Outcome:
    headers = {"Authorization": bearer(hs256(tenant))}
    return sentinel.guard(ENDPOINT, request_view(headers=headers, **view))


def parsed(outcome: Outcome) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The (name, q, w, pk) and (name, r, t, pk) of the outcome's one-member RateLimit
    fields, parsed as structured fields (pk as bytes)."""
    fields = parse_fields(outcome.headers)
    ((name, policy),) = fields["policy"].items()
    ((state_name, state),) = fields["state"].items()
    assert set(policy) == {"q", "w", "pk"}, outcome.headers
    assert set(state) == {"r", "t", "pk"}, outcome.headers
    return (name, policy["q"], policy["w"], policy["pk"]), (state_name, *state.values())


def problem(outcome: Outcome) -> dict[str, Any]:
    assert header(outcome.headers, "Content-Type") == "application/problem+json"
    body: dict[str, Any] = json.loads(outcome.body)
    assert body["status"] == outcome.status
    return body


def retry_after(outcome: Outcome) -> int:
    value = header(outcome.headers, "Retry-After")
    assert value is not None
    assert value.isdigit(), value
    assert int(value) >= 1
    return int(value)


# --- allowed ----------------------------------------------------------------------------


def test_allowed_token_bucket_responses_describe_quota_and_what_is_left(make: Any) -> None:
    sentinel = make(token_bucket(rate="5/second", burst=10))
    outcomes = [call(sentinel) for _ in range(3)]
    assert [(o.allowed, o.status) for o in outcomes] == [(True, 200)] * 3
    policies, states = zip(*(parsed(o) for o in outcomes), strict=True)
    # q is the burst; w the seconds a token bucket takes to refill from empty (10 / 5/s).
    assert {p[:3] for p in policies} == {(ENDPOINT, 10, 2)}
    assert [s[1] for s in states] == [9, 8, 7]
    assert all(1 <= s[2] <= 2 for s in states)
    # One partition key for one tenant, the same in both fields; another tenant's differs.
    assert len({p[3] for p in policies} | {s[3] for s in states}) == 1
    assert len(policies[0][3]) == 12
    assert parsed(call(sentinel, "tenant-b"))[0][3] != policies[0][3]


def test_allowed_sliding_window_responses_describe_the_window(make: Any) -> None:
    sentinel = make(sliding_window(rate="4/minute"))
    (policy, state) = parsed(call(sentinel))
    assert policy[:3] == (ENDPOINT, 4, 60)
    assert state[1] == 3
    assert 1 <= state[2] <= 60


def test_the_partition_key_is_not_the_bucket_keys_hash(make: Any, redis_url: str) -> None:
    import redis

    outcome = call(make(token_bucket()))
    pk = parsed(outcome)[0][3].hex()
    client = redis.Redis.from_url(redis_url)
    try:
        (key,) = client.keys("*")
    finally:
        client.close()
    assert pk not in key.decode()


# --- 429 --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "longest_wait"),
    [(token_bucket(), 60), (sliding_window(), 120)],
    ids=["token_bucket", "sliding_window"],
)
def test_rate_limited_is_429_with_retry_after_and_the_quota_exceeded_problem(
    make: Any, policy: dict[str, Any], longest_wait: int
) -> None:
    sentinel = make(policy)
    assert all(call(sentinel).allowed for _ in range(3))
    denied = call(sentinel)
    assert (denied.allowed, denied.status, denied.cookie) == (False, 429, None)
    assert retry_after(denied) <= longest_wait
    assert problem(denied) == {
        "type": QUOTA_EXCEEDED,
        "title": "Too Many Requests",
        "status": 429,
        "detail": "rate limit exceeded",
        "violated-policies": [ENDPOINT],
    }
    assert parsed(denied)[1][1] == 0
    assert denied.decision is not None
    assert denied.decision.reason == "rate_limited"


def test_a_token_bucket_429_asks_for_the_time_one_token_takes(make: Any) -> None:
    sentinel = make(token_bucket(rate="1/minute", burst=1))
    assert call(sentinel).allowed
    # The bucket is empty: one token at 1/minute is 60 s away (less the ms elapsed).
    assert retry_after(call(sentinel)) in (59, 60)


@pytest.mark.parametrize(
    "policy",
    [
        sliding_window(rate="3/hour"),
        sliding_window(rate="3/minute"),
        token_bucket(rate="3/minute", burst=3),
        {"algorithm": "sliding_window", "rates": ["3/minute", "4/hour"], "fail_mode": "closed"},
        {"algorithm": "token_bucket", "rates": ["3/minute", "4/hour"], "fail_mode": "closed"},
    ],
    ids=["sliding_hour", "sliding_minute", "token_bucket", "layered_sliding", "layered_bucket"],
)
@pytest.mark.parametrize("store", ["redis", "memory"])
def test_on_every_denial_t_is_never_less_than_retry_after(
    make: Any, redis_url: str, policy: dict[str, Any], store: str
) -> None:
    """SPEC §4: a client that waits ``t`` is not denied again for the same reason. A
    full sliding window ends before it admits again (the previous window still weighs),
    which made ``t=2144`` beside ``Retry-After: 3344``."""
    sentinel = make(policy, redis_url if store == "redis" else "memory://")
    assert all(call(sentinel).allowed for _ in range(3))
    denials = [call(sentinel) for _ in range(3)]  # the store's, then this process's own
    assert [outcome.status for outcome in denials] == [429] * 3
    for outcome in denials:
        (state,) = parse_fields(outcome.headers)["state"].values()
        assert state["t"] >= retry_after(outcome)
    peeked = sentinel.peek(ENDPOINT, "tenant-a")
    assert peeked.retry_after_seconds is not None
    assert peeked.reset_seconds >= peeked.retry_after_seconds


# --- 503 --------------------------------------------------------------------------------


def test_fail_closed_on_a_dead_redis_is_503_then_retry_after_once_the_breaker_opens(
    make: Any,
) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    sentinel = make(token_bucket(), dead, breaker={"failure_threshold": 2, "open_seconds": 30})
    first, second, third = (call(sentinel) for _ in range(3))
    assert [o.status for o in (first, second, third)] == [503, 503, 503]
    assert [o.decision.reason for o in (first, second, third) if o.decision] == [
        "fail_closed",
        "fail_closed",
        "circuit_open",
    ]
    assert header(first.headers, "Retry-After") is None  # the breaker is still closed
    assert retry_after(second) == 30  # this failure opened it
    assert 1 <= retry_after(third) <= 30
    for outcome in (first, second, third):
        assert problem(outcome) == {
            "type": TEMPORARY_REDUCED_CAPACITY,
            "title": "Service Unavailable",
            "status": 503,
            "detail": "rate limiter unavailable",
        }
        assert header(outcome.headers, "RateLimit") is None
        assert header(outcome.headers, "RateLimit-Policy") is None


def test_fail_open_on_a_dead_redis_describes_the_emergency_bucket(make: Any) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    # One request a minute: the emergency bucket holds one token, refilled in 60 s.
    policy = token_bucket(rate="100/second", fail_mode="open", fallback_rate="1/minute")
    sentinel = make(policy, dead)
    first, second = call(sentinel), call(sentinel)
    assert (first.status, second.status) == (200, 429)
    policy_fields, state = parsed(first)
    assert policy_fields[:3] == (ENDPOINT, 1, 60)
    assert state[1] == 0
    assert first.decision is not None
    assert first.decision.reason == "redis_connection_error"
    assert second.decision is not None
    assert second.decision.reason == "emergency_local_limit"
    assert retry_after(second) in (59, 60)
    assert parsed(second)[0][:3] == (ENDPOINT, 1, 60)
    assert problem(second)["type"] == QUOTA_EXCEEDED


def test_no_cookie_is_set_on_429_or_503(make: Any) -> None:
    anonymous = token_bucket(identity="anonymous", burst=1, network_burst=1)
    limited = make(anonymous)
    assert limited.guard(ENDPOINT, request_view()).cookie is not None
    assert limited.guard(ENDPOINT, request_view()).status == 429
    assert limited.guard(ENDPOINT, request_view()).cookie is None
    down = make(anonymous, f"redis://127.0.0.1:{free_port()}/0")
    outcome = down.guard(ENDPOINT, request_view())
    assert (outcome.status, outcome.cookie) == (503, None)


# --- configuration switches ------------------------------------------------------------


def test_headers_ratelimit_false_turns_the_ratelimit_fields_off_but_not_retry_after(
    make: Any,
) -> None:
    sentinel = make(token_bucket(burst=1), headers={"ratelimit": False})
    allowed, denied = call(sentinel), call(sentinel)
    assert (allowed.status, allowed.headers) == (200, ())
    assert denied.status == 429
    assert retry_after(denied) >= 1
    assert header(denied.headers, "RateLimit") is None
    assert header(denied.headers, "RateLimit-Policy") is None


def test_a_shadow_policy_lets_would_be_denials_through_without_telling_the_client(
    make: Any,
) -> None:
    sentinel = make(token_bucket(burst=1, shadow=True))
    first, second = call(sentinel), call(sentinel)
    assert [(o.allowed, o.status) for o in (first, second)] == [(True, 200), (True, 200)]
    assert second.decision is not None
    assert (second.decision.would_allow, second.decision.reason) == (False, "rate_limited")
    assert second.headers == ()


@pytest.mark.parametrize("secure", [True, False])
def test_the_device_cookie_is_httponly_samesite_lax_and_secure_per_config(
    make: Any, secure: bool
) -> None:
    sentinel = make(
        token_bucket(identity="anonymous"),
        anonymous={
            "cookie_secret": COOKIE_SECRET,
            "secure": secure,
            "cookie_name": "dev",
            "cookie_max_age_seconds": 86400,
        },
    )
    cookie = sentinel.guard(ENDPOINT, request_view()).cookie
    assert cookie is not None
    assert (cookie.name, cookie.max_age, cookie.secure, cookie.http_only, cookie.same_site) == (
        "dev",
        86400,
        secure,
        True,
        "Lax",
    )
    attributes = cookie.header_value().split("; ")
    assert attributes[0] == f"dev={cookie.value}"
    assert {"HttpOnly", "SameSite=Lax", "Max-Age=86400", "Path=/"} <= set(attributes)
    assert ("Secure" in attributes) is secure


def test_cookie_header_value_has_exactly_the_given_attributes() -> None:
    cookie = Cookie("n", "v1.a.b", 10, secure=True)
    assert cookie.header_value() == "n=v1.a.b; Max-Age=10; Path=/; HttpOnly; SameSite=Lax; Secure"


def test_the_401_challenge_carries_the_rfc6750_error(make: Any) -> None:
    sentinel = make(token_bucket())
    expired = sentinel.guard(
        ENDPOINT, request_view(headers={"Authorization": bearer(hs256(ttl=-60))})
    )
    assert expired.status == 401
    assert header(expired.headers, "WWW-Authenticate") == (
        'Bearer error="invalid_token", error_description="token expired"'
    )
    assert problem(expired)["title"] == "Unauthorized"
    missing = sentinel.guard(ENDPOINT, request_view())
    assert header(missing.headers, "WWW-Authenticate") == "Bearer"


@pytest.mark.parametrize("endpoint_id", ['odd"name\\x', "café.ünïcode", "100%"])
def test_policy_names_are_valid_structured_field_strings(endpoint_id: str) -> None:
    policy_config = config("memory://", token_bucket())
    policy_config["policies"] = {endpoint_id: token_bucket()}
    sentinel = make_sentinel(policy_config)
    outcome = sentinel.guard(endpoint_id, request_view(headers={"Authorization": bearer(hs256())}))
    assert outcome.decision is not None
    for _, value in ratelimit_headers(outcome.decision):
        assert value.isascii()
    name = parsed(outcome)[0][0]
    if endpoint_id.isascii():
        assert name == endpoint_id
    else:
        assert name == "caf%C3%A9.%C3%BCn%C3%AFcode"


# --- asyncio ----------------------------------------------------------------------------


async def test_aguard_answers_like_guard(redis_url: str) -> None:
    sentinel = make_sentinel(config(redis_url, token_bucket(burst=2)))
    try:
        view = request_view(headers={"Authorization": bearer(hs256("async-tenant"))})
        outcomes = [await sentinel.aguard(ENDPOINT, view) for _ in range(3)]
        unauthorized = await sentinel.aguard(ENDPOINT, request_view())
    finally:
        await sentinel.aclose()
    assert [o.status for o in outcomes] == [200, 200, 429]
    assert retry_after(outcomes[2]) >= 1
    assert parsed(outcomes[0])[1][1] == 1
    assert unauthorized.status == 401


async def test_without_a_jwks_there_is_no_key_to_prefetch() -> None:
    """Asyncio admissions await the JWKS prefetch only when keys come from a JWKS; the
    prefetch itself does nothing without one (no jwt section, or keys configured)."""
    policy = {"algorithm": "token_bucket", "rate": "5/second", "fail_mode": "closed"}
    for jwt in (None, {"key": HS_SECRET}):
        extra = {} if jwt is None else {"jwt": jwt}
        sentinel = make_sentinel({"redis_url": "memory://", "policies": {"ep": policy}, **extra})
        assert not sentinel.http.prefetches
        await sentinel.http.aprefetch_keys(request_view(headers={"authorization": "Bearer x"}))


def test_each_tenant_keeps_its_own_identity_once_the_kept_tenants_are_forgotten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(outcome_module, "_TENANTS_KEPT", 2)
    sentinel = make_sentinel(config("memory://", token_bucket()))
    tenants = ["tenant-a", "tenant-b", "tenant-c", "tenant-d", "tenant-a"]

    decisions = [call(sentinel, tenant).decision for tenant in tenants]

    hashes = [decision.identity_hash for decision in decisions if decision is not None]
    assert hashes == [tenant_identity(tenant).hash for tenant in tenants]
