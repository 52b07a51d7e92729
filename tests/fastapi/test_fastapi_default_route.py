"""``routes["*"]`` and ``@exempt`` in FastAPI (SPEC §5, issue 27): every route no other
entry and no decorator or dependency guards is charged to the default; ``@exempt``
operations, FastAPI's own documentation pages and unrouted requests are not; a
decorated, dependency-guarded or routed operation pays for its own id only."""

from __future__ import annotations

from fastapi import APIRouter, Depends, FastAPI
from prometheus_client import CollectorRegistry

from sentinel_fastapi import Sentinel, exempt, rate_limit, rate_limited
from tests.fastapi.conftest import serve
from tests.support.default_route import DEFAULT_ID, OWN_ID, default_route_config, policy_names


def build(redis_url: str) -> FastAPI:
    sentinel = Sentinel(
        default_route_config(redis_url, **{"GET /routed": OWN_ID}), registry=CollectorRegistry()
    )
    app = FastAPI()
    sentinel.init_app(app)

    @app.get("/plain")
    async def plain() -> str:
        return "plain"

    @app.get("/other")
    def other() -> str:
        return "other"

    @app.get("/health")
    @exempt
    async def health() -> str:
        return "ok"

    @exempt
    @app.get("/exempt-above")
    async def exempt_above() -> str:
        return "ok"

    @app.get("/decorated")
    @rate_limited(OWN_ID)
    async def decorated() -> str:
        return "decorated"

    @app.get("/routed")
    async def routed() -> str:
        return "routed"

    router = APIRouter(dependencies=[Depends(rate_limit(OWN_ID))])

    @router.get("/depends")
    async def depends() -> str:
        return "depends"

    app.include_router(router)
    return app


async def test_the_default_guards_every_undecorated_route_and_shares_one_bucket(
    redis_url: str,
) -> None:
    async with serve(build(redis_url)) as http:
        responses = [await http.get(path) for path in ("/plain", "/other", "/plain")]
    assert [r.status_code for r in responses] == [200, 200, 429]
    assert policy_names(responses[0].headers.get("RateLimit-Policy")) == [DEFAULT_ID]


async def test_exempt_operations_and_404s_are_never_charged(redis_url: str) -> None:
    async with serve(build(redis_url)) as http:
        for path in ("/health", "/exempt-above", "/nowhere", "/docs", "/openapi.json"):
            responses = [await http.get(path) for _ in range(4)]
            assert {r.status_code for r in responses} == {404 if path == "/nowhere" else 200}
            assert all("RateLimit" not in r.headers for r in responses), path
        assert [(await http.get("/plain")).status_code for _ in range(3)] == [200, 200, 429]


async def test_a_decorated_dependency_guarded_or_routed_operation_pays_for_its_own_id_only(
    redis_url: str,
) -> None:
    async with serve(build(redis_url)) as http:
        for path in ("/decorated", "/depends", "/routed"):
            response = await http.get(path)
            assert policy_names(response.headers["RateLimit-Policy"]) == [OWN_ID], path
        for _ in range(2):
            await http.get("/plain")
        assert (await http.get("/plain")).status_code == 429
        assert (await http.get("/decorated")).status_code == 200


def test_the_openapi_document_lists_the_defaults_responses(redis_url: str) -> None:
    app = build(redis_url)
    paths = app.openapi()["paths"]
    assert "429" in paths["/plain"]["get"]["responses"]
    assert "429" not in paths["/health"]["get"]["responses"]
