"""Every kind of view ``@rate_limited`` guards, the middleware, settings changes, and the
once-only start-up check, through Django's test clients on a real redis-server."""

from __future__ import annotations

import json
import threading
from typing import Any

import django
import pytest
import redis
from asgiref.sync import iscoroutinefunction
from django.apps import apps
from django.test import AsyncClient, Client, override_settings
from django_harness import Configure, Http, LoopRunner, PeerAsyncClient

import sentinel_django
from sentinel_core import Sentinel, StartupError, UnknownEndpointError
from sentinel_core.store._scripts import all_scripts
from sentinel_django import _loops, conf, rate_limited
from sentinel_django._runtime import RECHECK_SECONDS
from sentinel_django.middleware import SentinelMiddleware
from tests.support.adapter_config import bearer
from tests.support.contended_lock import ContendedLock
from tests.support.redis_admin import RedisAdmin
from tests.support.redis_server import RedisServer

SYNC_INGEST_VIEWS = {
    "/v1/ingest": "function",
    "/v1/cbv-method": "cbv-method-decorator",
    "/v1/cbv-class": "cbv-class",
    "/v1/cbv-handler": "cbv-handler",
    "/v1/cbv-direct": "cbv-method-direct",
    "/v1/drf-class": "drf-class",
    "/v1/drf-handler": "drf-handler",
}
ASYNC_INGEST_VIEWS = {
    "/async/ingest": "async",
    "/async/cbv-class": "async-cbv-class",
    "/async/cbv-method": "async-cbv-method-decorator",
    "/async/cbv-direct": "async-cbv-method-direct",
}
if django.VERSION >= (5, 0):  # method_decorator keeps async methods async from 5.0 on
    ASYNC_INGEST_VIEWS["/async/cbv-handler"] = "async-cbv-handler"


def _redis(url: str) -> RedisAdmin:
    return RedisAdmin(url)


def _command_calls(url: str, command: str) -> int:
    client = _redis(url)
    try:
        stats = client.info("commandstats").get(f"cmdstat_{command}", {})
        return int(stats.get("calls", 0))
    finally:
        client.close()


def _assert_exhausts_at_three(responses: list[Any], view: str) -> None:
    assert [r.status_code for r in responses] == [200, 200, 200, 429]
    assert json.loads(responses[0].content)["view"] == view
    assert responses[0]["RateLimit-Policy"].startswith('"pdftalk.ingest";q=3')
    assert responses[3]["Content-Type"] == "application/problem+json"
    assert int(responses[3]["Retry-After"]) >= 1


@pytest.mark.parametrize(("path", "view"), list(SYNC_INGEST_VIEWS.items()))
def test_sync_view_kinds_are_guarded_with_the_blocking_store(
    configure: Configure, path: str, view: str
) -> None:
    configure()
    client = Client()
    auth = bearer("acme")
    responses = [client.post(path, headers={"Authorization": auth}) for _ in range(4)]

    _assert_exhausts_at_three(responses, view)
    assert _loops.live_store_count() == 0  # no asyncio store, no async_to_sync


@pytest.mark.parametrize(("path", "view"), list(ASYNC_INGEST_VIEWS.items()))
async def test_async_view_kinds_are_guarded_with_the_asyncio_store(
    configure: Configure, path: str, view: str
) -> None:
    configure()
    client = AsyncClient()
    auth = bearer("acme")
    responses = [await client.post(path, headers={"Authorization": auth}) for _ in range(4)]

    _assert_exhausts_at_three(responses, view)
    assert _loops.live_store_count() == 1  # this loop's asyncio store decided


@pytest.mark.parametrize("path", list(ASYNC_INGEST_VIEWS))
def test_async_views_under_the_sync_client_close_each_loop_store(
    configure: Configure, path: str
) -> None:
    """WSGI-style: every request runs the async view in a loop of its own."""
    configure()
    client = Client()
    auth = bearer("acme")
    statuses = []
    for _ in range(4):
        statuses.append(client.post(path, headers={"Authorization": auth}).status_code)
        assert _loops.live_store_count() == 0  # closed when its loop shut down

    assert statuses == [200, 200, 200, 429]


def test_loop_stores_close_when_their_loop_shuts_down(configure: Configure) -> None:
    configure()
    runner = LoopRunner()
    client = PeerAsyncClient()
    try:
        response = runner.run(client.post("/async/ingest", headers={"Authorization": bearer("a")}))
        assert response.status_code == 200
        assert _loops.live_store_count() == 1
    finally:
        runner.close()

    assert _loops.live_store_count() == 0


def test_middleware_guards_an_undecorated_route_by_its_template(
    http: Http, configure: Configure
) -> None:
    configure()
    prefix = "/items" if http.flavor == "sync" else "/async-items"
    auth = bearer("acme")
    responses = [http.post(f"{prefix}/{pk}", Authorization=auth) for pk in (1, 2, 3, 4)]

    assert [r.status_code for r in responses] == [200, 200, 200, 429]
    assert responses[0]["RateLimit-Policy"].startswith('"pdftalk.ingest";')
    assert json.loads(responses[1].content)["view"].endswith("item 2")
    assert responses[3]["Content-Type"] == "application/problem+json"
    # ASGI: process_view is awaited on the loop with the asyncio store, not sent to a thread
    assert _loops.live_store_count() == (1 if http.flavor == "async" else 0)


def test_middleware_is_sync_and_async_capable() -> None:
    def sync_handler(request: Any) -> Any:
        return None

    async def async_handler(request: Any) -> Any:
        return None

    sync_middleware = SentinelMiddleware(sync_handler)
    async_middleware = SentinelMiddleware(async_handler)

    assert SentinelMiddleware.sync_capable
    assert SentinelMiddleware.async_capable
    assert not iscoroutinefunction(sync_middleware)
    assert not iscoroutinefunction(sync_middleware.process_view)
    assert iscoroutinefunction(async_middleware)
    assert iscoroutinefunction(async_middleware.process_view)


def test_middleware_leaves_unrouted_paths_alone(configure: Configure) -> None:
    configure()

    unguarded = Client().get("/open")

    assert unguarded.status_code == 200
    assert "RateLimit" not in unguarded


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH", "OPTIONS", "BREW"])
def test_a_function_view_is_guarded_on_every_method_its_routes_do_not_name(
    configure: Configure, method: str
) -> None:
    # A function view answers every method with one body: a method with no entry of its
    # own pays every entry of the route (here POST's ingest and GET's tailor).
    configure()
    client = Client()

    anonymous = client.generic(method, "/items/1")
    authorized = client.generic(method, "/items/1", headers={"Authorization": bearer("acme")})

    assert anonymous.status_code == 401
    assert authorized.status_code == 200
    assert authorized["RateLimit-Policy"].startswith('"pdftalk.ingest";')
    assert '"resumint.tailor";' in authorized["RateLimit-Policy"]


def test_a_method_a_function_view_route_does_not_name_is_limited_with_it(
    configure: Configure,
) -> None:
    configure()
    client = Client()
    auth = {"Authorization": bearer("acme")}

    posted = [client.post("/async-items/1", headers=auth).status_code for _ in range(3)]
    put = client.put("/async-items/1", headers=auth)

    assert posted == [200, 200, 200]
    assert put.status_code == 429, "PUT reaches the view POST is limited on: limited too"


def test_a_class_based_view_answers_405_to_a_method_it_does_not_define_uncharged(
    configure: Configure,
) -> None:
    configure(routes={"POST v1/cbv-direct": "pdftalk.ingest"})

    put = Client().put("/v1/cbv-direct", headers={"Authorization": bearer("acme")})

    assert put.status_code == 405
    assert "RateLimit" not in put


def test_middleware_guards_head_with_the_get_route(configure: Configure) -> None:
    configure()
    client = Client()
    auth = bearer("acme")
    head = client.head("/items/7", headers={"Authorization": auth})
    unauthorized = client.head("/items/7")

    assert head.status_code == 200
    assert head["RateLimit-Policy"].startswith('"resumint.tailor";')
    assert unauthorized.status_code == 401


@pytest.mark.parametrize("path", ["/v1/ingest", "/v1/cbv-class", "/v1/cbv-handler"])
def test_middleware_defers_to_a_decorator_naming_the_same_endpoint(
    http: Http, configure: Configure, path: str
) -> None:
    """The route is in ``routes`` and its view (function, class, or handler method) is
    decorated with the same endpoint: one token a request."""
    configure()
    auth = bearer("acme")
    responses = [http.post(path, Authorization=auth) for _ in range(4)]

    assert [r.status_code for r in responses] == [200, 200, 200, 429]
    assert responses[0]["RateLimit"].count('"pdftalk.ingest"') == 1


def test_middleware_and_decorator_on_different_endpoints_both_apply(
    configure: Configure,
) -> None:
    configure(routes={"POST v1/tailor": "pdftalk.ingest"})  # the view guards resumint.tailor
    client = Client()
    auth = bearer("acme")
    responses = [client.post("/v1/tailor", headers={"Authorization": auth}) for _ in range(4)]

    assert [r.status_code for r in responses] == [200, 200, 200, 429]
    assert '"resumint.tailor"' in responses[0]["RateLimit"]
    assert '"pdftalk.ingest"' in responses[0]["RateLimit"]
    assert responses[3]["RateLimit"].count('"') == 2  # the denial keeps its own header only


def test_override_settings_changing_a_policy_takes_effect(configure: Configure) -> None:
    config = configure()
    client = Client()
    assert client.post("/v1/ingest", headers={"Authorization": bearer("a")}).status_code == 200

    stricter = {**config["policies"]["pdftalk.ingest"], "rate": "1/minute"}
    policies = {**config["policies"], "pdftalk.ingest": stricter}
    with override_settings(SENTINEL={**config, "policies": policies}):
        auth = bearer("b")
        first = client.post("/v1/ingest", headers={"Authorization": auth})
        second = client.post("/v1/ingest", headers={"Authorization": auth})

    assert first.status_code == 200
    assert first["RateLimit-Policy"].startswith('"pdftalk.ingest";q=1')
    assert second.status_code == 429
    restored = client.post("/v1/ingest", headers={"Authorization": bearer("c")})
    assert restored["RateLimit-Policy"].startswith('"pdftalk.ingest";q=3')


def test_startup_check_runs_once_before_the_first_guarded_request(
    configure: Configure, redis_url: str
) -> None:
    configure()
    admin = _redis(redis_url)
    admin.config_resetstat()
    primaries = len(admin.nodes)
    admin.close()
    results: list[int] = []

    def send() -> None:
        client = Client()
        response = client.post("/v1/tailor", headers={"Authorization": bearer("acme")})
        results.append(response.status_code)

    threads = [threading.Thread(target=send) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(results) == [200, 200, 200, 429, 429, 429]
    # INFO server + INFO memory, and each script: once (on each primary of a cluster)
    assert _command_calls(redis_url, "info") == 2 * primaries
    assert _command_calls(redis_url, "script|load") == len(all_scripts()) * primaries


def test_app_ready_builds_sentinel_without_network_io(configure: Configure, redis_url: str) -> None:
    configure()
    admin = _redis(redis_url)
    before = int(admin.info("stats")["total_connections_received"])
    apps.get_app_config("sentinel").ready()
    built = conf._runtime
    after = int(admin.info("stats")["total_connections_received"])
    admin.close()

    assert built is not None
    assert after == before  # the admin client's connection was already counted


def test_a_runtime_built_while_waiting_for_the_lock_is_not_built_again(
    configure: Configure,
) -> None:
    """The check under the lock: a thread that found no runtime, then waited while
    another built one, returns that one (deterministically: `_build` called with the
    runtime already there, as that thread gets past the lock)."""
    configure()
    first = conf.runtime()

    assert conf._build() is first


def test_a_startup_check_run_while_waiting_for_the_lock_is_not_run_again(
    configure: Configure, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two first requests: the second waits while the first runs the check, then finds
    it done (the thread handshake makes the order certain, not a likely race)."""
    configure()
    runtime = conf.runtime()
    lock = ContendedLock()
    monkeypatch.setattr(runtime, "_lock", lock)
    checking, finish = threading.Event(), threading.Event()
    checks: list[str] = []
    startup = runtime.sentinel.startup

    def slow_startup() -> None:
        checks.append(threading.current_thread().name)
        checking.set()
        assert finish.wait(10)
        startup()

    monkeypatch.setattr(runtime.sentinel, "startup", slow_startup)
    first = threading.Thread(target=runtime.ensure_started, name="first")
    second = threading.Thread(target=runtime.ensure_started, name="second")
    first.start()
    assert checking.wait(10)  # the first request runs the check, holding the lock
    second.start()
    assert lock.contended.wait(10)  # the second waits for it
    finish.set()
    first.join(10)
    second.join(10)

    assert checks == ["first"]


def test_unfit_redis_fails_every_guarded_request_with_the_check_message(
    configure: Configure, lru_redis_server: RedisServer
) -> None:
    configure(redis_url=lru_redis_server.url)
    client = Client()
    with pytest.raises(StartupError, match="maxmemory-policy is allkeys-lru"):
        client.post("/v1/tailor", headers={"Authorization": bearer("acme")})
    loads = _command_calls(lru_redis_server.url, "script|load")
    with pytest.raises(StartupError, match="maxmemory-policy is allkeys-lru"):
        client.post("/v1/ingest", headers={"Authorization": bearer("acme")})

    assert _command_calls(lru_redis_server.url, "script|load") == loads  # not re-checked
    assert client.get("/open").status_code == 200  # unguarded views still serve


def test_a_redis_fixed_after_an_unfit_start_is_checked_again_and_serves(
    configure: Configure,
) -> None:
    server = RedisServer(policy="allkeys-lru").start()
    try:
        configure(redis_url=server.url)
        now = [100.0]
        conf.runtime().clock = lambda: now[0]
        client = Client()
        auth = {"Authorization": bearer("acme")}
        with pytest.raises(StartupError, match="allkeys-lru"):
            client.post("/v1/ingest", headers=auth)
        with redis.Redis.from_url(server.url) as admin:
            admin.config_set("maxmemory-policy", "noeviction")
        now[0] += RECHECK_SECONDS - 0.5
        with pytest.raises(StartupError, match="allkeys-lru"):  # not checked again yet
            client.post("/v1/ingest", headers=auth)
        now[0] += 0.5
        fixed = client.post("/v1/ingest", headers=auth)
    finally:
        server.close()

    assert fixed.status_code == 200


async def test_unfit_redis_fails_async_guarded_requests_too(
    configure: Configure, lru_redis_server: RedisServer
) -> None:
    configure(redis_url=lru_redis_server.url)
    with pytest.raises(StartupError, match="allkeys-lru"):
        await AsyncClient().post("/async/ingest", headers={"Authorization": bearer("acme")})


def test_unreachable_redis_at_startup_is_checked_at_first_contact(configure: Configure) -> None:
    server = RedisServer().start()
    try:
        server.stop()
        configure(redis_url=server.url)
        client = Client()
        auth = bearer("acme")
        down = client.post("/v1/ingest", headers={"Authorization": auth})
        server.start()
        up = client.post("/v1/ingest", headers={"Authorization": auth})
        info_calls = _command_calls(server.url, "info")
    finally:
        server.close()

    assert down.status_code == 503
    assert up.status_code == 200
    assert info_calls == 2  # the deferred start-up check ran at the first contact


def test_unknown_endpoint_id_on_a_view_fails_loudly_at_request_time(
    configure: Configure,
) -> None:
    configure()
    with override_settings(ROOT_URLCONF="djproject.bad_urls"):
        client = Client()
        with pytest.raises(UnknownEndpointError):
            client.get("/unknown-function")


def test_get_sentinel_is_the_instance_built_from_settings(configure: Configure) -> None:
    configure()
    sentinel = sentinel_django.get_sentinel()
    decision = sentinel.evaluate("pdftalk.ingest", "worker-tenant")

    assert isinstance(sentinel, Sentinel)
    assert sentinel is sentinel_django.get_sentinel()
    assert decision.allowed
    assert decision.limit == 3


def test_rate_limited_rejects_what_is_not_a_view() -> None:
    with pytest.raises(TypeError, match="needs a view"):
        rate_limited("pdftalk.ingest")(42)

    class NoDispatch:
        pass

    with pytest.raises(TypeError, match="has no dispatch"):
        rate_limited("pdftalk.ingest")(NoDispatch)


def test_a_decorated_callable_without_a_request_is_a_type_error(configure: Configure) -> None:
    configure()
    guarded = rate_limited("pdftalk.ingest")(lambda value: value)

    with pytest.raises(TypeError, match="HttpRequest"):
        guarded("not a request")


def test_decorator_records_endpoint_ids_for_the_checks() -> None:
    from djproject import views

    assert views.ingest.sentinel_endpoints == ("pdftalk.ingest",)  # type: ignore[attr-defined]
    assert views.IngestClassDecorated.sentinel_endpoints == ("pdftalk.ingest",)  # type: ignore[attr-defined]
    stacked = rate_limited("auth.login")(views.tailor)
    assert stacked.sentinel_endpoints == ("resumint.tailor", "auth.login")
