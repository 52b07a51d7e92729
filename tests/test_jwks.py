"""JWKS keys (SPEC §2 ``jwt.jwks_url``) against a local HTTP server serving a JWKS:
when Sentinel fetches (first use, expiry, an unknown ``kid`` at most once per
``jwks_refresh_seconds``), when it does not (a valid cached set, after a failure), and
what a provider that is down or slow costs a request (a 401 for an unknown key within
the fetch timeout, never a 500). Timing rules run on an injected monotonic clock."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sentinel_core import ConfigError, load_config
from sentinel_core.identity._jwks import JwksKeys
from sentinel_core.identity._jwt import AuthError, JwtVerifier
from tests.support.event_loop import loop_ticks
from tests.support.http import make_sentinel, request_view
from tests.support.jwks_server import NEW_KEY, OLD_KEY, JwksServer, jwk, signed
from tests.support.redis_server import free_port
from tests.support.tokens import HS_SECRET, ec_private_key, rsa_private_key
from tests.test_breaker import FakeClock

OLD, NEW = OLD_KEY, NEW_KEY
ENDPOINT = "api.search"


@pytest.fixture
def jwks() -> Iterator[JwksServer]:
    server = JwksServer()
    server.publish({"old": OLD})
    yield server
    server.close()


def keys(url: str, clock: FakeClock, **timing: int) -> JwksKeys:
    options = {"refresh_seconds": 30, "cache_seconds": 300, "timeout_ms": 2000, **timing}
    return JwksKeys(url, clock=clock, **options)


def config(url: str, **jwt: Any) -> dict[str, Any]:
    return {
        "redis_url": "memory://",
        "jwt": {"jwks_url": url, "jwks_refresh_seconds": 30, **jwt},
        "policies": {
            ENDPOINT: {"algorithm": "token_bucket", "rate": "100/second", "fail_mode": "closed"}
        },
    }


# --- when the key set is fetched -----------------------------------------------------


def test_a_valid_key_set_is_never_fetched_again_for_a_known_kid(jwks: JwksServer) -> None:
    clock = FakeClock()
    published = keys(jwks.url, clock)
    assert published.key("old") is not None
    for _ in range(5):
        clock.advance(59)  # well past refresh_seconds, within cache_seconds
        assert published.key("old") is not None
    assert jwks.fetches == 1


def test_an_expired_key_set_is_fetched_again(jwks: JwksServer) -> None:
    clock = FakeClock()
    published = keys(jwks.url, clock, cache_seconds=300)
    published.key("old")
    clock.advance(300)
    jwks.publish({"new": NEW})
    assert published.key("old") is None  # withdrawn from the set now served
    assert published.key("new") is not None
    assert jwks.fetches == 2


def test_an_unknown_kid_refreshes_at_most_once_per_refresh_seconds(jwks: JwksServer) -> None:
    clock = FakeClock()
    published = keys(jwks.url, clock, refresh_seconds=30)
    published.key("old")
    jwks.publish({"old": OLD, "new": NEW})
    assert published.key("new") is not None  # rotated in: one refresh
    for kid in ("invented-1", "invented-2", "invented-3"):
        assert published.key(kid) is None
    assert jwks.fetches == 2  # that refresh was this period's
    clock.advance(29)
    assert published.key("invented-4") is None
    assert jwks.fetches == 2
    clock.advance(1)
    assert published.key("invented-5") is None
    assert jwks.fetches == 3


def test_a_failed_fetch_keeps_the_known_keys_and_waits_before_trying_again(
    jwks: JwksServer, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    published = keys(jwks.url, clock, refresh_seconds=30, cache_seconds=60)
    published.key("old")
    jwks.fail(503)
    clock.advance(60)  # the set expired: fetched again, which fails
    with caplog.at_level(logging.WARNING, logger="sentinel"):
        assert published.key("old") is not None  # stale, but the best known
    assert "JWKS fetch from" in caplog.text
    assert published.key("new") is None
    clock.advance(29)
    assert published.key("old") is not None
    assert jwks.fetches == 2
    jwks.publish({"new": NEW})
    clock.advance(1)
    assert published.key("new") is not None
    assert jwks.fetches == 3
    assert published.key("old") is None  # now unknown: this period's one refresh
    assert jwks.fetches == 4


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (200, b"not json"),
        (200, b"[1, 2]"),
        (200, b'{"keys": []}'),
        (200, b'{"keys": [{"kty": "RSA"}]}'),
        (200, b"[" * 100_000),
        (404, b"{}"),
        (302, b""),
    ],
)
def test_whatever_the_endpoint_serves_a_lookup_raises_nothing(
    jwks: JwksServer, status: int, body: bytes
) -> None:
    jwks.fail(status, body)
    assert keys(jwks.url, FakeClock()).key("old") is None


def test_only_sound_public_keys_are_kept(jwks: JwksServer) -> None:
    weak = {"kty": "RSA", "kid": "weak", "n": "sXch", "e": "AQAB"}
    secret = {"kty": "oct", "kid": "secret", "k": "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0"}
    private = {**jwk("private", OLD), **_private_numbers(OLD)}
    jwks.publish({"ec": ec_private_key("jwks")}, weak=weak, secret=secret, private=private)
    published = keys(jwks.url, FakeClock())
    assert published.key("ec") is not None
    assert [published.key(kid) for kid in ("weak", "secret", "private")] == [None] * 3


def _private_numbers(key: Any) -> dict[str, Any]:
    from jwt.algorithms import RSAAlgorithm

    full: dict[str, Any] = RSAAlgorithm.to_jwk(key, as_dict=True)
    return {name: full[name] for name in ("d", "p", "q", "dp", "dq", "qi")}


def test_an_answer_that_is_not_http_is_a_failed_fetch(jwks: JwksServer) -> None:
    jwks.garble()
    assert keys(jwks.url, FakeClock()).key("old") is None


def test_nothing_listening_is_a_failed_fetch() -> None:
    url = f"http://127.0.0.1:{free_port()}/jwks.json"
    assert keys(url, FakeClock()).key("old") is None


def test_a_stalled_endpoint_costs_at_most_the_fetch_timeout(jwks: JwksServer) -> None:
    jwks.stall()
    started = time.monotonic()
    assert keys(jwks.url, FakeClock(), timeout_ms=200).key("old") is None
    assert time.monotonic() - started < 2


# --- what a fetch may cost (issue 26) ---------------------------------------------------


@pytest.mark.parametrize("headers_too", [False, True], ids=["body", "status_line"])
def test_a_server_trickling_bytes_cannot_hold_a_fetch_past_its_timeout(
    jwks: JwksServer, caplog: pytest.LogCaptureFixture, headers_too: bool
) -> None:
    """One byte every 0.3 s: each read returns in time, so a per-read timeout never
    fires (issue 26: 20 s with a 1 s timeout). The fetch's whole budget does."""
    jwks.drip(0.3, headers_too=headers_too)
    published = keys(jwks.url, FakeClock(), timeout_ms=1000)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="sentinel"):
        assert published.key("old") is None
        elapsed = time.monotonic() - started
        _wait_for(lambda: "JWKS fetch from" in caplog.text)  # the fetch itself ended too
    assert 0.9 <= elapsed < 1.5
    assert "no answer within 1000 ms" in caplog.text


@pytest.mark.parametrize("declare_length", [True, False], ids=["declared", "streamed"])
def test_a_huge_document_is_never_read_whole(
    jwks: JwksServer, caplog: pytest.LogCaptureFixture, declare_length: bool
) -> None:
    """Issue 26: a 200 MB document was read whole (448 MB peak) before the parse
    failed. A declared length past the limit is refused unread, a streamed body at the
    limit; the server manages to send a few socket buffers' worth, not 200 MB."""
    jwks.flood(200 * 1024 * 1024, declare_length=declare_length)
    with caplog.at_level(logging.WARNING, logger="sentinel"):
        assert keys(jwks.url, FakeClock()).key("old") is None
        _wait_for(lambda: "JWKS fetch from" in caplog.text)
    assert "more than 1048576" in caplog.text
    assert jwks.sent < 16 * 1024 * 1024


def test_a_document_within_the_limit_is_read(jwks: JwksServer) -> None:
    published = JwksKeys(
        jwks.url, refresh_seconds=30, cache_seconds=300, timeout_ms=2000, max_bytes=4096
    )
    assert published.key("old") is not None
    jwks.publish({"old": OLD}, padding={"kid": "pad", "kty": "oct", "k": "A" * 5000})
    assert (
        JwksKeys(
            jwks.url, refresh_seconds=30, cache_seconds=300, timeout_ms=2000, max_bytes=4096
        ).key("old")
        is None
    )


async def test_a_lookup_on_an_event_loop_never_waits_for_a_fetch(jwks: JwksServer) -> None:
    """Issue 26: a stalled provider held the event loop (an unrelated /health took
    20 s). On the loop's thread `key` starts the fetch and answers with what is known;
    `prefetch` waits for it off the loop, at most the timeout."""
    jwks.stall()
    published = keys(jwks.url, FakeClock(), timeout_ms=600)
    started = time.monotonic()
    assert published.key("old") is None
    assert time.monotonic() - started < 0.2
    async with loop_ticks() as ticks:
        await published.prefetch("old")  # the fetch in flight: awaited, at most 0.6 s
    assert 0.5 <= time.monotonic() - started < 1.2
    assert ticks.count >= 10  # the loop kept running meanwhile
    jwks.release()
    jwks.publish({"old": OLD})
    assert jwks.fetches == 1


async def test_aguard_fetches_the_keys_off_the_event_loop(jwks: JwksServer) -> None:
    sentinel = make_sentinel(config(jwks.url, jwks_timeout_ms=800))
    jwks.stall()
    started = time.monotonic()
    async with loop_ticks() as ticks:
        view = request_view(headers={"Authorization": signed(OLD, "old")})
        outcome = await sentinel.aguard(ENDPOINT, view)
    assert outcome.status == 401  # no key within the timeout
    assert time.monotonic() - started < 1.5
    assert ticks.count >= 15
    jwks.release()


def test_two_different_keys_under_one_kid_are_both_refused(
    jwks: JwksServer, caplog: pytest.LogCaptureFixture
) -> None:
    jwks.publish_jwks([jwk("dup", OLD), jwk("dup", NEW), jwk("new", NEW), jwk("new", NEW)])
    published = keys(jwks.url, FakeClock())
    with caplog.at_level(logging.WARNING, logger="sentinel"):
        assert published.key("dup") is None
    assert "publishes different keys under kid 'dup': neither is used" in caplog.text
    assert published.key("new") is not None  # the same key twice is one key


def test_a_key_verifies_only_the_algorithm_it_names(jwks: JwksServer) -> None:
    """Issue 26: a key labelled RS512 verified an RS256 token."""
    jwks.publish_jwks([{**jwk("old", OLD), "alg": "RS512"}, jwk("new", NEW)])
    sentinel = make_sentinel(config(jwks.url, algorithms=["RS256", "RS512"]))

    def status(key: Any, kid: str, algorithm: str) -> int:
        headers = {"Authorization": signed(key, kid, algorithm=algorithm)}
        return sentinel.guard(ENDPOINT, request_view(headers=headers)).status

    assert status(OLD, "old", "RS256") == 401
    assert status(OLD, "old", "RS512") == 200
    assert (status(NEW, "new", "RS256"), status(NEW, "new", "RS512")) == (200, 200)


def test_keys_that_cannot_verify_here_are_ignored(jwks: JwksServer) -> None:
    jwks.publish_jwks(
        [
            {**jwk("old", OLD), "alg": 256},  # an alg that is no name
            {**jwk("enc", NEW), "use": "enc"},  # for encryption
            {"kid": "broken", "kty": "RSA"},  # no modulus: PyJWT refuses it
            {
                "kid": "okp",
                "kty": "OKP",
                "crv": "Ed25519",
                "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo",
            },
            jwk("new", NEW),
        ]
    )
    published = keys(jwks.url, FakeClock())
    assert [published.key(kid) for kid in ("old", "enc", "broken", "okp")] == [None] * 4
    assert published.key("new") is not None


def test_an_https_provider_that_refuses_the_connection_is_a_failed_fetch() -> None:
    url = f"https://127.0.0.1:{free_port()}/jwks.json"
    assert keys(url, FakeClock()).key("old") is None


async def test_the_async_path_fetches_as_the_rules_allow(jwks: JwksServer) -> None:
    from tests.support.tokens import bearer, claims, hs256, mint

    sentinel = make_sentinel(config(jwks.url))

    async def status(authorization: str) -> int:
        headers = {"Authorization": authorization}
        return (await sentinel.aguard(ENDPOINT, request_view(headers=headers))).status

    token = signed(OLD, "old")
    assert [await status(token), await status(token)] == [200, 200]  # then remembered
    no_kid = "Bearer " + mint(claims("tenant-a"), OLD, "RS256")
    assert [await status("x"), await status(bearer(hs256())), await status(no_kid)] == [401] * 3
    assert jwks.fetches == 1  # none of these looks a key up
    stranger = signed(rsa_private_key("stranger"), "stranger")
    assert [await status(stranger), await status(stranger)] == [401, 401]
    assert jwks.fetches == 2  # one refresh for the unknown kid, not two


async def test_the_async_path_without_a_jwks_fetches_nothing() -> None:
    settings = config("unused")
    settings["jwt"] = {"key": HS_SECRET}
    from tests.support.tokens import bearer, hs256

    outcome = await make_sentinel(settings).aguard(
        ENDPOINT, request_view(headers={"Authorization": bearer(hs256())})
    )
    assert outcome.status == 200


def _wait_for(condition: Any, seconds: float = 5) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


# --- tokens verified with JWKS keys, through the HTTP layer ----------------------------


def test_a_key_rotation_is_picked_up_without_a_restart(jwks: JwksServer) -> None:
    sentinel = make_sentinel(config(jwks.url))
    before = sentinel.guard(ENDPOINT, request_view(headers={"Authorization": signed(OLD, "old")}))
    jwks.publish({"old": OLD, "new": NEW})
    after = sentinel.guard(ENDPOINT, request_view(headers={"Authorization": signed(NEW, "new")}))
    assert (before.status, after.status) == (200, 200)
    assert jwks.fetches == 2


def test_a_token_naming_an_unknown_key_is_401_and_costs_one_fetch_at_most(
    jwks: JwksServer,
) -> None:
    sentinel = make_sentinel(config(jwks.url))
    stranger = rsa_private_key("stranger")
    statuses = [
        sentinel.guard(
            ENDPOINT, request_view(headers={"Authorization": signed(stranger, f"kid-{n}")})
        ).status
        for n in range(5)
    ]
    assert statuses == [401] * 5
    assert jwks.fetches == 2  # the first load, then one refresh for an unknown kid


def test_a_provider_down_from_the_start_is_401_never_500(jwks: JwksServer) -> None:
    jwks.fail(500)
    sentinel = make_sentinel(config(jwks.url))
    outcome = sentinel.guard(ENDPOINT, request_view(headers={"Authorization": signed(OLD, "old")}))
    assert outcome.status == 401


def test_a_provider_going_down_leaves_known_keys_working(jwks: JwksServer) -> None:
    sentinel = make_sentinel(config(jwks.url))
    token = {"Authorization": signed(OLD, "old", sub="other")}
    assert sentinel.guard(ENDPOINT, request_view(headers=token)).status == 200
    jwks.fail(503)
    fresh_token = {"Authorization": signed(OLD, "old", sub="another")}
    assert sentinel.guard(ENDPOINT, request_view(headers=fresh_token)).status == 200


def test_a_withdrawn_key_stops_verifying_even_remembered_tokens(jwks: JwksServer) -> None:
    clock = FakeClock()
    loaded = load_config(config(jwks.url, jwks_cache_seconds=60))
    assert loaded.jwt is not None
    verifier = JwtVerifier(loaded.jwt, monotonic=clock)
    token = signed(OLD, "old")
    assert verifier.tenant_from_authorization(token) == "tenant-a"
    assert verifier.tenant_from_authorization(token) == "tenant-a"  # remembered
    jwks.publish({"new": NEW})
    clock.advance(60)
    with pytest.raises(AuthError):
        verifier.tenant_from_authorization(token)


def test_static_keys_and_a_jwks_work_side_by_side(jwks: JwksServer) -> None:
    sentinel = make_sentinel(
        config(jwks.url, algorithms=["HS256", "RS256"], key=HS_SECRET, jwks_timeout_ms=500)
    )
    from tests.support.tokens import bearer, hs256

    assert sentinel.guard(ENDPOINT, request_view(headers={"Authorization": bearer(hs256())}))
    hs = sentinel.guard(ENDPOINT, request_view(headers={"Authorization": bearer(hs256())}))
    rs = sentinel.guard(ENDPOINT, request_view(headers={"Authorization": signed(OLD, "old")}))
    assert (hs.status, rs.status) == (200, 200)


# --- configuration ---------------------------------------------------------------------


def test_jwks_configuration_defaults() -> None:
    loaded = load_config(config("https://idp.example/.well-known/jwks.json"))
    assert loaded.jwt is not None
    assert loaded.jwt.jwks is not None
    assert loaded.jwt.algorithms == ("RS256",)
    assert loaded.jwt.keys == ()
    jwks = loaded.jwt.jwks
    assert (jwks.refresh_seconds, jwks.cache_seconds, jwks.timeout_ms) == (30, 300, 2000)


@pytest.mark.parametrize(
    ("jwt", "path", "message"),
    [
        ({"jwks_url": "http://idp.example/jwks"}, "jwt.jwks_url", "must be https://"),
        ({"jwks_url": "file:///etc/passwd"}, "jwt.jwks_url", "expected https://host"),
        ({"jwks_url": "https://idp.example:99999/"}, "jwt.jwks_url", "not a URL"),
        ({"jwks_url": "https://[::1/"}, "jwt.jwks_url", "not a URL"),
        ({"jwks_timeout_ms": 0}, "jwt.jwks_timeout_ms", "between 1 and 30000"),
        ({"algorithms": ["HS256"]}, "jwt.algorithms", "HS256 needs an HMAC secret"),
    ],
)
def test_jwks_configuration_errors(jwt: dict[str, Any], path: str, message: str) -> None:
    settings = config("https://idp.example/jwks")
    settings["jwt"].update(jwt)
    with pytest.raises(ConfigError, match=message) as caught:
        load_config(settings)
    assert caught.value.path == path


@pytest.mark.parametrize("name", ["jwks_refresh_seconds", "jwks_cache_seconds", "jwks_timeout_ms"])
def test_jwks_timings_without_a_jwks_url_are_errors(name: str) -> None:
    settings = config("unused")
    settings["jwt"] = {"key": HS_SECRET, name: 10}
    with pytest.raises(ConfigError, match="applies with jwks_url only") as caught:
        load_config(settings)
    assert caught.value.path == f"jwt.{name}"


@pytest.mark.parametrize(
    "url", ["http://localhost:8080/jwks", "http://127.0.0.1/jwks", "http://[::1]:1/jwks"]
)
def test_plain_http_is_accepted_for_a_loopback_provider(url: str) -> None:
    assert load_config(config(url)).jwt is not None


def test_start_up_fetches_the_keys_so_no_request_waits(jwks: JwksServer) -> None:
    sentinel = make_sentinel(config(jwks.url))
    sentinel.startup()
    assert jwks.fetches == 1
    sentinel.startup()  # a valid set is not fetched again
    outcome = sentinel.guard(ENDPOINT, request_view(headers={"Authorization": signed(OLD, "old")}))
    assert (outcome.status, jwks.fetches) == (200, 1)


async def test_async_start_up_fetches_the_keys_too(jwks: JwksServer) -> None:
    sentinel = make_sentinel(config(jwks.url))
    await sentinel.astartup()
    assert jwks.fetches == 1


def test_a_provider_down_at_start_up_delays_the_next_attempt(
    jwks: JwksServer, caplog: pytest.LogCaptureFixture
) -> None:
    jwks.fail(503)
    sentinel = make_sentinel(config(jwks.url))
    with caplog.at_level(logging.WARNING, logger="sentinel"):
        sentinel.startup()
    assert "JWKS fetch from" in caplog.text
    jwks.publish({"old": OLD})
    sentinel.startup()  # within jwks_refresh_seconds of the failure: no new attempt
    outcome = sentinel.guard(ENDPOINT, request_view(headers={"Authorization": signed(OLD, "old")}))
    assert (outcome.status, jwks.fetches) == (401, 1)


def test_start_up_without_a_jwt_section_fetches_nothing() -> None:
    settings = config("unused")
    del settings["jwt"]
    assert make_sentinel(settings).startup() is not None  # the memory store's report
