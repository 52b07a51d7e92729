"""Where a request is guarded: after Starlette's own routing, on the route it picked
(issue 23). A method the route does not answer gets its 405 uncharged, one no entry
names is served uncharged; a mounted app,
a plain route of an included router and a router shared by two apps are each guarded
on the route the router picked, once, by the app's own Sentinel."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI
from prometheus_client import CollectorRegistry
from starlette.requests import Request
from starlette.responses import PlainTextResponse

from sentinel_fastapi import Sentinel
from tests.fastapi.conftest import client as http_client
from tests.fastapi.conftest import lifespan, serve
from tests.support.default_route import DEFAULT_ID, OWN_ID, default_route_config, policy_names


def guarded_app(config: dict[str, object]) -> FastAPI:
    app = FastAPI()
    Sentinel(config, registry=CollectorRegistry()).init_app(app)
    return app


async def plain(request: Request) -> PlainTextResponse:
    return PlainTextResponse("plain")


async def test_a_method_the_route_does_not_answer_gets_its_405_uncharged(redis_url: str) -> None:
    app = guarded_app(default_route_config(redis_url))

    @app.get("/items")
    async def items() -> list[int]:
        return [1]

    async with serve(app) as http:
        refused = [await http.post("/items") for _ in range(3)]
        served = [await http.get("/items") for _ in range(3)]

    assert [r.status_code for r in refused] == [405] * 3
    assert all("RateLimit" not in r.headers for r in refused)
    # The 405s spent nothing of the default's two per minute.
    assert [r.status_code for r in served] == [200, 200, 429]


async def test_a_method_without_an_entry_of_a_guarded_route_is_served_uncharged(
    redis_url: str,
) -> None:
    config = default_route_config(redis_url, **{"GET /items": OWN_ID})
    del config["routes"]["*"]
    app = guarded_app(config)

    @app.api_route("/items", methods=["GET", "POST"])
    async def items() -> list[int]:
        return [1]

    async with serve(app) as http:
        posted = [await http.post("/items") for _ in range(6)]
        got = await http.get("/items")

    assert [r.status_code for r in posted] == [200] * 6
    assert all("RateLimit" not in r.headers for r in posted)
    assert policy_names(got.headers["RateLimit-Policy"]) == [OWN_ID]


async def test_a_mounted_app_pays_the_default_on_the_mount(redis_url: str) -> None:
    sub = FastAPI()

    @sub.get("/status")
    async def status() -> str:
        return "up"

    app = guarded_app(default_route_config(redis_url))
    app.mount("/sub", sub)
    async with serve(app) as http:
        responses = [await http.get("/sub/status") for _ in range(3)]

    assert [r.status_code for r in responses] == [200, 200, 429]
    assert policy_names(responses[0].headers["RateLimit-Policy"]) == [DEFAULT_ID]


async def test_a_plain_route_of_an_included_router_is_guarded_under_its_prefix(
    redis_url: str,
) -> None:
    router = APIRouter()
    router.add_route("/plain", plain, methods=["GET"])
    app = guarded_app(default_route_config(redis_url, **{"GET /v1/plain": OWN_ID}))
    app.include_router(router, prefix="/v1")
    async with serve(app) as http:
        response = await http.get("/v1/plain")

    assert response.status_code == 200
    assert policy_names(response.headers["RateLimit-Policy"]) == [OWN_ID]


async def test_a_router_shared_by_two_apps_is_guarded_once_by_each_apps_sentinel(
    redis_url: str,
) -> None:
    router = APIRouter()

    @router.get("/items")
    async def items() -> list[int]:
        return [1]

    first = guarded_app(default_route_config(redis_url))
    second = guarded_app(default_route_config(redis_url, **{"GET /items": OWN_ID}))
    for app in (first, second):
        app.include_router(router)
    async with lifespan(first), lifespan(second):

        @first.get("/late")
        async def late() -> str:  # the first app's guards are placed again
            return "late"

        async with http_client(first) as one, http_client(second) as two:
            firsts = [await one.get("/items") for _ in range(3)]
            seconds = [await two.get("/items", headers={"X-Client": "b"}) for _ in range(6)]

    assert [r.status_code for r in firsts] == [200, 200, 429]
    assert policy_names(firsts[0].headers["RateLimit-Policy"]) == [DEFAULT_ID]
    # Each of the second app's requests paid its own id once, the first app's nothing.
    assert [r.status_code for r in seconds] == [200] * 5 + [429]
    assert policy_names(seconds[0].headers["RateLimit-Policy"]) == [OWN_ID]
