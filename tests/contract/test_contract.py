"""SPEC §4 and §5 (with §2's exemptions and trusted proxies) as one table, run through
every adapter's app factory.

Each row is a sequence of requests to the contract app (`harness.ENDPOINTS`) and what
every response must carry: statuses, RateLimit fields, Retry-After, the problem body,
the device cookie. The same rows run on a real Redis and on ``memory://``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from sentinel_core.testing import ratelimit_headers
from tests.contract.conftest import Build
from tests.contract.harness import DENIAL_VIEW, USER_HEADER, Refused, Reply
from tests.support.adapter_config import COOKIE_SECRET, JWT_KEY, bearer
from tests.support.http import script_calls
from tests.support.redis_server import RedisServer, free_port
from tests.support.tcp_proxy import TcpProxy

QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded"
UNAVAILABLE = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
AUTH = {"Authorization": bearer("tenant-a", expires_in=3600)}


def bucket(burst: int, **fields: Any) -> dict[str, Any]:
    return {
        "algorithm": "token_bucket",
        "rate": "1/minute",
        "burst": burst,
        "fail_mode": "closed",
    } | fields


POLICIES: dict[str, Any] = {
    "small": bucket(2),
    "large": bucket(5),
    "device": bucket(2, identity="anonymous", network_rate="1/minute", network_burst=20),
    "failures": bucket(2, count=[401, 403, "5xx"]),
    "slot": {"algorithm": "concurrency", "limit": 1, "fail_mode": "closed"},
    "user": bucket(2, identity="user", network_rate="1/minute", network_burst=20),
    "usage": {
        "algorithm": "sliding_window",
        "rate": "100/day",
        "cost": 10,
        "fail_mode": "closed",
        "settle": True,
    },
    "usage.count": {
        "algorithm": "sliding_window",
        "rate": "100/day",
        "cost": 10,
        "fail_mode": "closed",
        "settle": True,
        "count": ["4xx"],
    },
}


def contract_config(redis_url: str, **top: Any) -> dict[str, Any]:
    """Small tenant and anonymous buckets; routes in FastAPI's spelling (each factory
    spells them its framework's way)."""
    return {
        "redis_url": redis_url,
        "socket_timeout_ms": 1000,
        "jwt": {"algorithms": ["HS256"], "key": JWT_KEY},
        "anonymous": {"cookie_secret": COOKIE_SECRET, "secure": False},
        "policies": POLICIES,
        "routes": {
            "POST /same/{item_id}": "small",
            "POST /different/{item_id}": "large",
            "GET /routed/{item_id}": "small",
            "GET /stream": "small",
        },
    } | top


@dataclass(frozen=True)
class Row:
    """Requests sent in order (method, path, headers) and the statuses they get."""

    name: str
    requests: list[tuple[str, str, Mapping[str, str]]]
    statuses: list[int]
    check: Callable[[list[Reply]], None] = lambda replies: None
    config: dict[str, Any] = field(default_factory=dict)


def members(reply: Reply, field: str = "state") -> list[str]:
    """The policy names of the reply's ``RateLimit`` (``"state"``) or ``RateLimit-Policy``
    (``"policy"``) field, in order."""
    return list(ratelimit_headers(reply.headers)[field])


def remaining(reply: Reply) -> int:
    """``r`` of the response's one RateLimit member."""
    (state,) = ratelimit_headers(reply.headers)["state"].values()
    r = state["r"]
    assert isinstance(r, int)
    return r


def problem(reply: Reply) -> dict[str, Any]:
    assert reply.header("content-type") == "application/problem+json"
    body: dict[str, Any] = json.loads(reply.body)
    assert body["status"] == reply.status
    return body


def allowed_then_limited(replies: list[Reply]) -> None:
    first, limited = replies[0], replies[-1]
    assert first.header("ratelimit-policy") is not None
    assert first.header("retry-after") is None
    assert int(limited.header("retry-after") or 0) >= 1
    assert limited.header("ratelimit") is not None
    assert problem(limited) == {
        "type": QUOTA_EXCEEDED,
        "title": "Too Many Requests",
        "status": 429,
        "detail": "rate limit exceeded",
        "violated-policies": [members(limited)[0]],
    }
    assert all(not reply.set_cookies for reply in replies)


def charged_once(replies: list[Reply]) -> None:
    allowed_then_limited(replies)
    assert members(replies[0]) == ["small"]
    assert members(replies[0], "policy") == ["small"]
    assert remaining(replies[0]) == 1


def both_apply(replies: list[Reply]) -> None:
    assert members(replies[0]) == ["small", "large"]
    assert members(replies[0], "policy") == ["small", "large"]
    assert members(replies[-1]) == ["small"]


def unauthorized(replies: list[Reply]) -> None:
    (reply,) = replies
    assert (reply.header("www-authenticate") or "").startswith("Bearer")
    assert problem(reply)["title"] == "Unauthorized"
    assert reply.header("ratelimit") is None


def invalid_token(replies: list[Reply]) -> None:
    unauthorized(replies)
    assert 'error="invalid_token"' in (replies[0].header("www-authenticate") or "")


def cookie_on_allowed_only(replies: list[Reply]) -> None:
    first, second, limited = replies
    (cookie,) = first.set_cookies
    assert cookie.startswith("sentinel_device=")
    assert "HttpOnly" in cookie
    assert "SameSite=Lax" in cookie
    assert not second.set_cookies  # the client sent the cookie back: same device
    assert not limited.set_cookies
    assert members(second) == ["device"]


def no_cookie_on_an_inner_refusal(replies: list[Reply]) -> None:
    for reply in replies:
        assert not reply.set_cookies
        assert members(reply) == ["device"]


def unavailable(replies: list[Reply]) -> None:
    (reply,) = replies
    assert problem(reply) == {
        "type": UNAVAILABLE,
        "title": "Service Unavailable",
        "status": 503,
        "detail": "rate limiter unavailable",
    }
    assert reply.header("ratelimit") is None


def never_guarded(replies: list[Reply]) -> None:
    assert all(reply.header("ratelimit") is None for reply in replies)


def streamed(replies: list[Reply]) -> None:
    assert [reply.body for reply in replies[:2]] == [b"abc", b"abc"]
    assert members(replies[0]) == ["small"]


def counted(replies: list[Reply]) -> None:
    assert members(replies[0]) == ["failures"]
    # r is what the check found left after this request, were it counted: successes
    # leave it unchanged, each counted failure takes one.
    assert [remaining(reply) for reply in replies[:6]] == [1] * 5 + [0]
    allowed_then_limited(replies)


def headers_off(replies: list[Reply]) -> None:
    assert replies[0].header("ratelimit") is None
    assert replies[0].header("ratelimit-policy") is None
    assert replies[-1].header("ratelimit") is None
    assert int(replies[-1].header("retry-after") or 0) >= 1


def exempt(replies: list[Reply]) -> None:
    """Let through without a word about limits: no RateLimit field, no cookie."""
    never_guarded(replies)
    assert all(reply.header("ratelimit-policy") is None for reply in replies)
    assert all(not reply.set_cookies for reply in replies)


def per_user(replies: list[Reply]) -> None:
    """A user's own bucket, no device cookie; without a user, an anonymous device."""
    assert int(replies[2].header("retry-after") or 0) >= 1
    assert members(replies[2]) == ["user"]
    assert remaining(replies[3]) == 1  # bob's own bucket
    assert all(not reply.set_cookies for reply in replies[:4])
    assert any("sentinel_device=" in cookie for cookie in replies[4].set_cookies)


def rendered_by_the_app(replies: list[Reply]) -> None:
    """The app's own body for the 429, with Sentinel's headers; the 401 stays Sentinel's."""
    limited, unauthorized = replies[2], replies[3]
    assert limited.header("content-type") == "application/json"
    assert json.loads(limited.body) == {"rendered": "rate_limited", "endpoint": "small"}
    assert int(limited.header("retry-after") or 0) >= 1
    assert remaining(limited) == 0
    assert members(limited, "policy") == ["small"]
    assert problem(unauthorized)["status"] == 401


def _forwarded(*clients: str) -> list[Any]:
    """One login per client address, in ``X-Forwarded-For`` (the device cookie kept)."""
    return [("POST", "/login", {"X-Forwarded-For": client}) for client in clients]


PEER_NETWORK = "203.0.113.0/24"
"""Where every factory's requests come from (the transport's peer)."""


def _times(method: str, path: str, n: int, headers: Mapping[str, str] = AUTH) -> list[Any]:
    return [(method, path, headers)] * n


def layered(replies: list[Reply]) -> None:
    """Both limits listed; the hour limit (2) binds before the minute limit (3)."""
    assert members(replies[0], "policy") == ["small/minute", "small/hour"]
    assert [members(reply) for reply in replies[:2]] == [["small/hour"]] * 2
    assert int(replies[-1].header("retry-after") or 0) >= 1


ROWS = [
    Row(
        "a user policy limits each user, and a request without one as an anonymous client",
        [
            *[("GET", "/user", {USER_HEADER: "alice"})] * 3,
            ("GET", "/user", {USER_HEADER: "bob"}),
            ("GET", "/user", {}),
        ],
        [200, 200, 429, 200, 200],
        per_user,
    ),
    Row(
        "a denial the app renders itself keeps Sentinel's headers",
        [*[("POST", "/decorated", AUTH)] * 3, ("POST", "/decorated", {})],
        [200, 200, 429, 401],
        rendered_by_the_app,
        config={"denial_view": DENIAL_VIEW},
    ),
    Row("decorated", _times("POST", "/decorated", 3), [200, 200, 429], allowed_then_limited),
    Row(
        "decorator and route naming one id charge it once",
        _times("POST", "/same/1", 3),
        [200, 200, 429],
        charged_once,
    ),
    Row(
        "decorator and route naming different ids both apply",
        _times("POST", "/different/1", 3),
        [200, 200, 429],
        both_apply,
    ),
    Row(
        "routes match the template, not the URL",
        [("GET", f"/routed/{i}", AUTH) for i in range(3)],
        [200, 200, 429],
        allowed_then_limited,
    ),
    Row(
        "HEAD pays on the GET entry",
        [*_times("HEAD", "/routed/1", 2), ("GET", "/routed/2", AUTH)],
        [200, 200, 429],
    ),
    Row(
        "layered limits: the smaller binds",
        _times("POST", "/decorated", 3),
        [200, 200, 429],
        layered,
        config={
            "policies": POLICIES
            | {
                "small": {
                    "algorithm": "token_bucket",
                    "rates": ["3/minute", "2/hour"],
                    "fail_mode": "closed",
                }
            }
        },
    ),
    Row("missing token", _times("POST", "/decorated", 1, {}), [401], unauthorized),
    Row(
        "malformed token",
        _times("POST", "/decorated", 1, {"Authorization": "Bearer not.a.token"}),
        [401],
        invalid_token,
    ),
    Row(
        "device cookie on allowed responses only",
        _times("POST", "/login", 3, {}),
        [200, 200, 429],
        cookie_on_allowed_only,
    ),
    Row(
        "no device cookie on an inner guard's 429 or 401",
        [("GET", "/inner/429", {}), ("GET", "/inner/401", {})],
        [429, 401],
        no_cookie_on_an_inner_refusal,
    ),
    Row("never guarded", _times("GET", "/open", 4), [200] * 4, never_guarded),
    Row(
        "count: only the listed statuses consume, and a spent bucket denies before the handler",
        [
            *_times("POST", "/count/200", 4),
            *_times("POST", "/count/401", 3),
            ("POST", "/count/200", AUTH),
        ],
        [200, 200, 200, 200, 401, 401, 429, 429],
        counted,
    ),
    Row(
        "count: a status class, and a handler that raises counting as 500",
        [("POST", "/count/503", AUTH), ("POST", "/raise", AUTH), ("POST", "/count/200", AUTH)],
        [503, 500, 429],
    ),
    Row(
        "count: the framework's own HTTP exception counts by its status",
        _times("POST", "/refuse", 3),
        [403, 403, 429],
    ),
    Row(
        "a concurrency lease goes back whatever the handler raises",
        [("GET", f"/slot/{kind}", AUTH) for kind in (1, 2, 1, 2)],
        [500, 403, 500, 403],
    ),
    Row("streamed body", _times("GET", "/stream", 3), [200, 200, 429], streamed),
    Row(
        "RateLimit fields off",
        _times("POST", "/decorated", 3),
        [200, 200, 429],
        headers_off,
        {"headers": {"ratelimit": False}},
    ),
    Row(
        "an exempt tenant is never limited",
        _times("POST", "/decorated", 3),
        [200, 200, 200],
        exempt,
        {"exempt": {"tenants": ["tenant-a"]}},
    ),
    Row(
        "an exempt network needs no token and is never limited",
        _times("POST", "/decorated", 3, {}) + _times("POST", "/login", 3, {}),
        [200] * 6,
        exempt,
        {"exempt": {"networks": [PEER_NETWORK]}},
    ),
    Row(
        "X-Forwarded-For from an untrusted peer is ignored",
        _forwarded("198.51.100.1", "198.51.100.2", "198.51.100.3"),
        [200, 200, 429],
        config={"trusted_proxies": ["192.0.2.0/24"]},
    ),
    Row(
        "X-Forwarded-For from a trusted proxy names the client",
        # The device's bucket is per network: each forwarded client starts its own, and
        # what a client writes left of its own address moves it nowhere.
        _forwarded(
            "198.51.100.1",
            "198.51.100.2",
            "198.51.100.3",
            "6.6.6.6, 198.51.100.3",
            "7.7.7.7, 198.51.100.3",
        ),
        [200, 200, 200, 200, 429],
        config={"trusted_proxies": [PEER_NETWORK]},
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.name)
@pytest.mark.parametrize("store", ["redis", "memory"])
def test_contract(build: Build, request: pytest.FixtureRequest, row: Row, store: str) -> None:
    url = request.getfixturevalue("redis_url") if store == "redis" else "memory://"
    client = build(contract_config(url, **row.config))

    replies = [
        client.request(method, path, headers=headers) for method, path, headers in row.requests
    ]

    assert [reply.status for reply in replies] == row.statuses
    row.check(replies)


def test_a_store_failure_on_a_fail_closed_policy_is_a_503(build: Build) -> None:
    client = build(contract_config(f"redis://127.0.0.1:{free_port()}/0"))

    replies = [client.request("POST", "/decorated", headers=AUTH)]

    assert [reply.status for reply in replies] == [503]
    unavailable(replies)


def test_a_store_failure_the_app_renders_is_its_503(build: Build) -> None:
    config = contract_config(f"redis://127.0.0.1:{free_port()}/0", denial_view=DENIAL_VIEW)
    reply = build(config).request("GET", "/user", headers={USER_HEADER: "alice"})

    assert reply.status == 503
    assert json.loads(reply.body) == {"rendered": "fail_closed", "endpoint": "user"}
    assert reply.header("ratelimit") is None


@pytest.mark.parametrize(
    ("routes", "named"),
    [
        ({"POST /sme/{item_id}": "small"}, r"POST /sme/"),
        ({"POST /same/{item_id}": "small", "post same/{item_id}": "large"}, r"post same/"),
    ],
    ids=["unmatched", "duplicate"],
)
def test_routes_entries_that_cannot_apply_are_refused_at_startup(
    build: Build, routes: dict[str, str], named: str
) -> None:
    with pytest.raises(Refused, match=named):
        build(contract_config("memory://", routes=routes))


def test_a_flood_on_a_spent_count_policy_is_denied_locally(
    build: Build, redis_server: RedisServer, redis_url: str
) -> None:
    client = build(contract_config(redis_url))
    spent = [client.request("POST", "/count/401", headers=AUTH) for _ in range(2)]
    admin = redis_server.client()
    before = script_calls(admin)

    flood = [client.request("POST", "/count/401", headers=AUTH) for _ in range(200)]

    calls = script_calls(admin) - before
    admin.close()
    assert [reply.status for reply in spent] == [401, 401]
    assert {reply.status for reply in flood} == {429}
    # One call for the first denial; a local denial renewed ahead of its end may add one
    # on a slow machine (the bucket's wait is a minute, local_denials_ms a second).
    assert calls <= 3, f"200 denied checks cost {calls} script calls"


@pytest.fixture
def silent_redis(redis_server: RedisServer) -> Iterator[TcpProxy]:
    """A Redis that accepts connections and never answers."""
    with TcpProxy(redis_server.port, "blackhole") as proxy:
        yield proxy


def test_a_count_policy_waits_on_a_silent_redis_only_until_the_breaker_opens(
    build: Build, silent_redis: TcpProxy
) -> None:
    config = contract_config(
        silent_redis.url, socket_timeout_ms=200, breaker={"failure_threshold": 2}
    )
    client = build(config)
    first = [client.request("POST", "/count/401", headers=AUTH) for _ in range(2)]

    started = time.perf_counter()
    short = [client.request("POST", "/count/401", headers=AUTH) for _ in range(10)]
    elapsed = time.perf_counter() - started

    assert [reply.status for reply in first + short] == [503] * 12
    assert elapsed < 0.2, f"10 requests with the breaker open took {elapsed:.2f} s"
