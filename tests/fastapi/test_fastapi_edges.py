"""FastAPI edges: reserved and ``**kwargs`` signatures, headers turned off, routes the
index does not know (404s, host routes, routes added after startup) and the OpenAPI
document's caching."""

from __future__ import annotations

import inspect
import textwrap
from typing import Any

import pytest
from fastapi import FastAPI, HTTPException
from prometheus_client import CollectorRegistry
from starlette.requests import Request

from sentinel_core import Decision, RequestView, hookimpl
from sentinel_fastapi import Sentinel, rate_limited
from sentinel_fastapi._translate import request_view
from tests.fastapi.apps import MakeApp
from tests.fastapi.conftest import client, lifespan, serve
from tests.support.adapter_config import bearer, spec_config

AUTH = {"Authorization": bearer("acme")}


class Recorder:
    """A plugin that keeps the request view of every decision."""

    def __init__(self) -> None:
        self.views: list[RequestView] = []

    @hookimpl
    def sentinel_decision(self, decision: Decision, request: Any) -> None:
        self.views.append(request)


@pytest.mark.parametrize("name", ["sentinel_request__"])
def test_a_handler_using_a_parameter_name_sentinel_injects_is_refused(name: str) -> None:
    namespace: dict[str, Any] = {}
    exec(f"async def handler({name}: int) -> None: ...", namespace)

    with pytest.raises(TypeError, match="reserved by Sentinel"):
        rate_limited("pdftalk.ingest")(namespace["handler"])


def test_the_hidden_parameter_goes_before_a_handlers_var_keyword() -> None:
    async def handler(doc_id: int, **extra: Any) -> None: ...

    parameters = list(
        inspect.signature(rate_limited("pdftalk.ingest")(handler)).parameters.values()
    )

    assert [p.name for p in parameters] == [
        "doc_id",
        "sentinel_request__",
        "extra",
    ]
    assert parameters[-1].kind is inspect.Parameter.VAR_KEYWORD


async def test_middleware_with_ratelimit_headers_off_still_limits_and_adds_nothing(
    make_app: MakeApp, redis_url: str
) -> None:
    config = spec_config(
        redis_url,
        headers={"ratelimit": False},
        routes={"GET /v1/items/{item_id}": "resumint.tailor"},
    )
    async with serve(make_app(config)) as http:
        responses = [await http.get("/v1/items/7", headers=AUTH) for _ in range(4)]

    assert [r.status_code for r in responses] == [200, 200, 200, 429]
    assert responses[0].json() == {"item_id": "7"}
    assert not any(name.lower().startswith("ratelimit") for name in responses[0].headers)


async def test_middleware_leaves_a_path_no_route_matches_to_the_router(
    make_app: MakeApp, redis_url: str
) -> None:
    config = spec_config(redis_url, routes={"GET /v1/items/{item_id}": "resumint.tailor"})
    async with serve(make_app(config)) as http:
        missing = [await http.get("/v1/nowhere", headers=AUTH) for _ in range(4)]
        item = await http.get("/v1/items/1", headers=AUTH)

    assert [r.status_code for r in missing] == [404] * 4
    assert "RateLimit" not in missing[0].headers
    # The 404s spent nothing of the tenant's burst of 3.
    assert item.status_code == 200
    assert item.headers["RateLimit"].startswith('"resumint.tailor";r=2;')


async def test_a_host_route_is_served_untouched_beside_guarded_routes(redis_url: str) -> None:
    sub = FastAPI()

    @sub.get("/status")
    async def status() -> dict[str, str]:
        return {"host": "api"}

    app = FastAPI()
    Sentinel(
        spec_config(redis_url, routes={"GET /items": "resumint.tailor"}),
        registry=CollectorRegistry(),
    ).init_app(app)

    @app.get("/items")
    async def items() -> list[int]:
        return [1]

    app.host("api.example.com", sub)
    async with lifespan(app), client(app) as http:
        hosted = await http.get("/status", headers={"Host": "api.example.com", **AUTH})
        guarded = await http.get("/items", headers=AUTH)

    assert hosted.status_code == 200
    assert hosted.json() == {"host": "api"}
    assert "RateLimit" not in hosted.headers
    assert guarded.headers["RateLimit"].startswith('"resumint.tailor"')


async def test_a_decorated_route_added_after_startup_is_guarded_on_its_template(
    redis_url: str,
) -> None:
    recorder = Recorder()
    sentinel = Sentinel(spec_config(redis_url), registry=CollectorRegistry(), plugins=[recorder])
    app = FastAPI()
    sentinel.init_app(app)
    async with lifespan(app), client(app) as http:

        @app.post("/late/{doc_id}")
        @rate_limited("pdftalk.ingest")
        async def late(doc_id: int) -> dict[str, int]:
            return {"doc_id": doc_id}

        responses = [await http.post(f"/late/{i}", headers=AUTH) for i in range(4)]

    assert [r.status_code for r in responses] == [200, 200, 200, 429]
    assert responses[0].json() == {"doc_id": 0}
    assert [view.route for view in recorder.views] == ["/late/{doc_id}"] * 4


def test_the_openapi_document_is_built_once_and_then_reused(make_app: MakeApp) -> None:
    app = make_app(spec_config("memory://"))

    first = app.openapi()
    first["info"]["x-marker"] = "kept"

    assert app.openapi() is first
    assert app.openapi()["info"]["x-marker"] == "kept"
    assert "429" in first["paths"]["/v1/tailor"]["post"]["responses"]


def test_an_app_without_guarded_operations_gets_no_problem_schema() -> None:
    app = FastAPI()
    Sentinel(spec_config("memory://"), registry=CollectorRegistry()).init_app(app)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    document = app.openapi()

    assert "SentinelProblem" not in document.get("components", {}).get("schemas", {})
    assert set(document["paths"]["/health"]["get"]["responses"]) == {"200"}


def test_an_annotation_naming_a_type_defined_later_stays_a_string() -> None:
    # A module whose handler names a class defined further down: at decoration time
    # the name cannot be evaluated yet, so the annotation is kept as written.
    module = textwrap.dedent(
        """
        from __future__ import annotations

        @rate_limited("pdftalk.ingest")
        async def handler(body: Later) -> None: ...

        class Later: ...
        """
    )
    namespace: dict[str, Any] = {"rate_limited": rate_limited}
    exec(module, namespace)

    parameters = inspect.signature(namespace["handler"]).parameters
    assert parameters["body"].annotation == "Later"
    assert "sentinel_request__" in parameters


async def test_a_handler_that_raises_hands_its_lease_back_to_a_client_that_re_raises() -> None:
    config = spec_config("memory://")
    config["policies"]["slots"] = {"algorithm": "concurrency", "limit": 1, "fail_mode": "closed"}
    app = FastAPI()
    Sentinel(config, registry=CollectorRegistry(), entry_points=False).init_app(app)

    @app.get("/boom")
    @rate_limited("slots")
    def boom() -> None:
        raise RuntimeError("the handler failed")

    @app.get("/forbidden")
    @rate_limited("slots")
    async def forbidden() -> None:
        raise HTTPException(403)

    async with serve(app) as http:  # httpx's ASGI transport re-raises the exception
        for _ in range(2):
            with pytest.raises(RuntimeError, match="the handler failed"):
                await http.get("/boom", headers=AUTH)
        statuses = [(await http.get("/forbidden", headers=AUTH)).status_code for _ in range(2)]

    assert statuses == [403, 403]


def test_the_request_view_reads_cookies_only_when_asked_and_like_a_mapping() -> None:
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/",
        "headers": [(b"cookie", b"a=1; b=2")],
        "client": ("127.0.0.1", 1),
    }
    view = request_view(Request(scope), "/")

    assert dict(view.cookies) == {"a": "1", "b": "2"}
    assert len(view.cookies) == 2
    assert view.cookies["b"] == "2"
