"""FastAPI over ASGI: exempt tenants and networks cost the store nothing, and the ASGI
``client`` forwards for others only when it is a trusted proxy (repeated header lines
included, which Starlette keeps apart)."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from tests.fastapi.apps import MakeApp, Probe
from tests.fastapi.conftest import serve
from tests.fastapi.test_fastapi_http import Decisions
from tests.support.adapter_config import bearer, five_a_minute_login
from tests.support.exemptions import (
    EXEMPT_PROXY,
    EXEMPT_TENANT,
    PROXY,
    UNREADABLE_FORWARDING,
    UNTRUSTED,
    exemptions_config,
    store_untouched,
    valkey,
)
from tests.support.jwks_server import NEW_KEY, OLD_KEY, JwksServer, rotation_jwt, signed


def loop_time() -> float:
    return time.monotonic()


def assert_exempt(response: httpx.Response) -> None:
    """The handler ran (an exempt request is let through, not answered by Sentinel),
    and the response says nothing about limits."""
    assert response.status_code == 200
    assert response.json() == {"ingested": "yes"}
    assert "ratelimit" not in response.headers
    assert "ratelimit-policy" not in response.headers


async def test_an_exempt_tenant_never_reaches_the_store(
    make_app: MakeApp, redis_url: str, probe: Probe
) -> None:
    decisions = Decisions()
    app = make_app(exemptions_config(redis_url), plugins=[decisions])
    async with serve(app) as http:
        with store_untouched(redis_url):
            responses = [
                await http.post("/v1/ingest", headers={"Authorization": bearer(EXEMPT_TENANT)})
                for _ in range(6)  # twice the policy's limit of 3
            ]
        limited = [
            (await http.post("/v1/ingest", headers={"Authorization": bearer("acme")})).status_code
            for _ in range(4)
        ]

    for response in responses:
        assert_exempt(response)
    assert probe.calls["ingest"] == 6 + 3
    assert limited == [200, 200, 200, 429]
    assert [d.endpoint_id for d in decisions.seen] == ["pdftalk.ingest"] * 4


async def test_an_exempt_network_needs_no_token_and_never_reaches_the_store(
    make_app: MakeApp, redis_url: str
) -> None:
    app = make_app(exemptions_config(redis_url))
    async with serve(app, peer=("198.51.100.20", 4000)) as http:
        with store_untouched(redis_url):
            exempt = [await http.post("/v1/ingest") for _ in range(5)]
    async with serve(app, peer=(UNTRUSTED, 4000)) as http:
        outside = await http.post("/v1/ingest")

    for response in exempt:
        assert_exempt(response)
    assert outside.status_code == 401


@pytest.mark.security
async def test_a_forwarded_exempt_network_counts_only_through_the_trusted_proxy(
    make_app: MakeApp, redis_url: str
) -> None:
    app = make_app(exemptions_config(redis_url))
    forwarded = {"X-Forwarded-For": "198.51.100.7"}
    async with serve(app, peer=(PROXY, 4000)) as http:
        via_proxy = await http.post("/v1/ingest", headers=forwarded)
    async with serve(app, peer=(UNTRUSTED, 4000)) as http:
        spoofed = await http.post("/v1/ingest", headers=forwarded)

    assert_exempt(via_proxy)
    assert spoofed.status_code == 401


@pytest.mark.security
@pytest.mark.parametrize("unreadable", UNREADABLE_FORWARDING)
async def test_an_unreadable_forwarding_header_never_inherits_an_exempt_proxys_exemption(
    make_app: MakeApp, redis_url: str, unreadable: str
) -> None:
    app = make_app(exemptions_config(redis_url, exempt=EXEMPT_PROXY))
    async with serve(app, peer=(PROXY, 4000)) as http:
        honest = [
            (
                await http.post(
                    "/v1/ingest",
                    headers={"Authorization": bearer("acme"), "X-Forwarded-For": "203.0.113.7"},
                )
            ).status_code
            for _ in range(4)
        ]
        garbled = [
            (
                await http.post(
                    "/v1/ingest",
                    headers={
                        "Authorization": bearer("mallory"),
                        **UNREADABLE_FORWARDING[unreadable],
                    },
                )
            ).status_code
            for _ in range(8)
        ]
    assert honest == [200, 200, 200, 429]
    assert garbled == [200, 200, 200] + [429] * 5  # limited, not 8 of 8


async def logins(http: httpx.AsyncClient, forwarded_for: list[str]) -> list[int]:
    """One login per forwarded address, each from a new device (no cookie kept)."""
    statuses = []
    for address in forwarded_for:
        http.cookies.clear()
        response = await http.post("/auth/login", headers={"X-Forwarded-For": address})
        statuses.append(response.status_code)
    return statuses


@pytest.mark.security
async def test_a_client_that_drops_its_cookies_gets_one_devices_limit_not_the_networks(
    make_app: MakeApp, redis_url: str
) -> None:
    """Issue 26: every cookie-less request was a fresh device, so only the network bucket
    (ten devices' worth) bound it: 50 of a "5/minute" login. They share the network's
    new devices bucket, sized like one device's."""
    app = make_app(five_a_minute_login(exemptions_config(redis_url)))
    async with serve(app, peer=(UNTRUSTED, 4000)) as http:
        statuses = await logins(http, [UNTRUSTED] * 12)
    assert statuses == [200] * 5 + [429] * 7


@pytest.mark.security
async def test_a_spoofed_forwarded_for_is_ignored_from_an_untrusted_peer(
    make_app: MakeApp, redis_url: str
) -> None:
    spoofed = ["192.0.2.101", "192.0.2.102", "192.0.2.103"]
    async with serve(make_app(exemptions_config(redis_url)), peer=(UNTRUSTED, 4000)) as http:
        statuses = await logins(http, spoofed)
    # The network bucket (2/minute) is the peer's, whatever the header says.
    assert statuses == [200, 200, 429]


async def test_a_forwarded_for_is_honoured_from_a_trusted_proxy(
    make_app: MakeApp, redis_url: str
) -> None:
    async with serve(make_app(exemptions_config(redis_url)), peer=(PROXY, 4000)) as http:
        distinct = await logins(http, ["192.0.2.101", "192.0.2.102", "192.0.2.103"])
        # The client is the rightmost untrusted hop: what it wrote further left is ignored.
        one_client = await logins(
            http, ["1.1.1.1, 192.0.2.200", "2.2.2.2, 192.0.2.200", "3.3.3.3,192.0.2.200"]
        )
    assert distinct == [200, 200, 200]
    assert one_client == [200, 200, 429]


@pytest.mark.security
async def test_a_forwarded_for_sent_on_two_lines_is_read_whole(
    make_app: MakeApp, redis_url: str
) -> None:
    """A client's own ``X-Forwarded-For`` line and the proxy's appended line: the
    client is the proxy's (rightmost) entry, not the first line's."""
    async with serve(make_app(exemptions_config(redis_url)), peer=(PROXY, 4000)) as http:
        statuses = []
        for spoof in ("1.1.1.1", "2.2.2.2", "3.3.3.3"):
            http.cookies.clear()
            headers = [("X-Forwarded-For", spoof), ("X-Forwarded-For", "192.0.2.200")]
            statuses.append((await http.post("/auth/login", headers=headers)).status_code)
    assert statuses == [200, 200, 429]


async def test_a_jwks_key_rotation_is_picked_up_without_a_restart(
    make_app: MakeApp, redis_url: str
) -> None:
    with JwksServer() as jwks:
        jwks.publish({"old": OLD_KEY})
        app = make_app(exemptions_config(redis_url, jwt=rotation_jwt(jwks.url)))
        async with serve(app) as http:
            before = await http.post(
                "/v1/ingest", headers={"Authorization": signed(OLD_KEY, "old")}
            )
            jwks.publish({"old": OLD_KEY, "new": NEW_KEY})
            after = await http.post("/v1/ingest", headers={"Authorization": signed(NEW_KEY, "new")})
            jwks.fail(503)  # the provider goes down: a key it never published is a 401
            stranger = await http.post(
                "/v1/ingest", headers={"Authorization": signed(NEW_KEY, "x")}
            )
    assert (before.status_code, after.status_code, stranger.status_code) == (200, 200, 401)


def slow(jwks: JwksServer, provider: str) -> None:
    if provider == "trickling":
        jwks.drip(0.3)  # one byte every 0.3 s: every read returns in time
    else:
        jwks.stall()


@pytest.mark.parametrize("provider", ["trickling", "stalled"])
async def test_a_slow_key_server_holds_startup_at_most_the_timeout(
    make_app: MakeApp, redis_url: str, provider: str
) -> None:
    """Issue 26: a key server sending one byte every 0.5 s held FastAPI's startup for
    20 s with a 1 s ``jwks_timeout_ms``."""
    with JwksServer() as jwks:
        jwks.publish({"old": OLD_KEY})
        slow(jwks, provider)
        jwt_section = {**rotation_jwt(jwks.url), "jwks_timeout_ms": 1000}
        app = make_app(exemptions_config(redis_url, jwt=jwt_section))
        started = loop_time()
        async with serve(app) as http:
            startup = loop_time() - started
            health = await http.get("/health")
        jwks.release()
    assert startup < 1.8
    assert health.status_code == 200


@pytest.mark.parametrize("provider", ["trickling", "stalled"])
async def test_a_slow_key_server_never_blocks_the_event_loop(
    make_app: MakeApp, redis_url: str, provider: str
) -> None:
    """Issue 26: a token naming a key rotated in made a fetch on the event loop, and an
    unrelated ``/health`` waited 20 s for it. The request awaits the fetch off the
    loop (at most the timeout), and ``/health`` answers meanwhile."""
    with JwksServer() as jwks:
        jwks.publish({"old": OLD_KEY})
        jwt_section = {**rotation_jwt(jwks.url), "jwks_timeout_ms": 1000}
        app = make_app(exemptions_config(redis_url, jwt=jwt_section))
        async with serve(app) as http:  # the start-up fetch is answered at once
            jwks.publish({"old": OLD_KEY, "new": NEW_KEY})
            slow(jwks, provider)
            started = loop_time()
            guarded = asyncio.create_task(
                http.post("/v1/ingest", headers={"Authorization": signed(NEW_KEY, "new")})
            )
            await asyncio.sleep(0.1)  # the guarded request is waiting for the new key
            health = await http.get("/health")
            health_took = loop_time() - started
            denied = await guarded
            took = loop_time() - started
        jwks.release()
    assert health.status_code == 200
    assert health_took < 0.6
    assert denied.status_code == 401  # no key within the timeout: never a 500
    assert 0.9 <= took < 1.8
    assert jwks.fetches == 2


async def test_a_valkey_url_names_the_same_store(make_app: MakeApp, redis_url: str) -> None:
    app = make_app(exemptions_config(valkey(redis_url)))
    async with serve(app) as http:
        statuses = [
            (await http.post("/v1/ingest", headers={"Authorization": bearer("acme")})).status_code
            for _ in range(4)
        ]
    assert statuses == [200, 200, 200, 429]
