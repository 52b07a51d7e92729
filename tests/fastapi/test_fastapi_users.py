"""Per-user limits from the app's own auth (Starlette's ``AuthenticationMiddleware``, an
API key through ``identify``), the anonymous fallback, and denials rendered by the app's
``exception_handler(RateLimitExceeded)`` (SPEC §2 ``identity: "user"``, SPEC §5)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CollectorRegistry
from starlette.authentication import (
    AuthCredentials,
    AuthenticationBackend,
    BaseUser,
    SimpleUser,
)
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection

from sentinel_core import Decision, DecisionReason
from sentinel_fastapi import RateLimitExceeded, Sentinel, rate_limited
from sentinel_fastapi._translate import starlette_user
from tests.fastapi.conftest import client, lifespan
from tests.support.docs import snippets
from tests.support.users import USER_POLICY, api_key_user, user_config


class TokenBackend(AuthenticationBackend):
    """``Authorization: Token <username>``: the simplest backend an app would write."""

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, BaseUser] | None:
        scheme, _, name = conn.headers.get("authorization", "").partition(" ")
        if scheme != "Token" or not name:
            return None
        return AuthCredentials(["authenticated"]), SimpleUser(name)


def user_app(config: dict[str, Any], **options: Any) -> FastAPI:
    app = FastAPI()
    sentinel = Sentinel(config, registry=CollectorRegistry(), entry_points=False, **options)
    sentinel.init_app(app)
    app.add_middleware(AuthenticationMiddleware, backend=TokenBackend())

    @app.get("/search")
    @rate_limited(USER_POLICY)
    async def search(request: Request) -> dict[str, str]:
        user = request.user
        return {"user": user.display_name if user.is_authenticated else ""}

    @app.get("/tenant")
    @rate_limited("pdftalk.ingest")
    async def tenant() -> dict[str, bool]:
        return {"ok": True}

    return app


async def statuses(http: Any, times: int, **headers: str) -> list[int]:
    return [(await http.get("/search", headers=headers)).status_code for _ in range(times)]


async def test_starlette_users_each_get_their_own_limit(redis_url: str) -> None:
    app = user_app(user_config(redis_url))
    async with lifespan(app), client(app) as http:
        alice = await statuses(http, 4, authorization="Token alice")
        bob = await statuses(http, 1, authorization="Token bob")
        first = await http.get("/search", headers={"authorization": "Token carol"})

    assert alice == [200, 200, 200, 429]
    assert bob == [200]
    assert first.json() == {"user": "carol"}
    assert "set-cookie" not in first.headers  # a user is no device
    assert first.headers["ratelimit"].startswith(f'"{USER_POLICY}";r=2;')


async def test_without_a_user_the_request_is_an_anonymous_client_never_a_401(
    redis_url: str,
) -> None:
    app = user_app(user_config(redis_url))
    async with lifespan(app), client(app) as http:
        first = await http.get("/search")
        rest = await statuses(http, 3)  # the same device, its cookie kept by the client
        http.cookies.clear()  # a new device: the network has one left of its 4
        other_device = await http.get("/search")
        last = await http.get("/search")

    assert first.status_code == 200
    assert "sentinel_device=" in first.headers["set-cookie"]
    assert rest == [200, 200, 429]  # the device's 3
    assert other_device.status_code == 200
    assert last.status_code == 429  # the network's 4 are spent


async def test_an_api_key_names_the_user_through_identify(redis_url: str) -> None:
    app = user_app(user_config(redis_url), identify=lambda request: api_key_user(request.headers))
    async with lifespan(app), client(app) as http:
        acme = await statuses(http, 4, **{"x-api-key": "key-of-acme-0123"})
        globex = await statuses(http, 1, **{"x-api-key": "key-of-globex-45"})
        # Starlette's user is not what identify reads: this is an anonymous client
        unknown = await http.get(
            "/search", headers={"x-api-key": "nope", "authorization": "Token x"}
        )

    assert acme == [200, 200, 200, 429]
    assert globex == [200]
    assert "sentinel_device=" in unknown.headers["set-cookie"]


def without_auth_middleware(config: dict[str, Any]) -> FastAPI:
    app = FastAPI()
    Sentinel(config, registry=CollectorRegistry(), entry_points=False).init_app(app)

    @app.get("/search")
    @rate_limited(USER_POLICY)
    async def search() -> dict[str, bool]:
        return {"ok": True}

    return app


async def test_an_app_without_authentication_middleware_limits_everyone_as_anonymous(
    redis_url: str,
) -> None:
    app = without_auth_middleware(user_config(redis_url))
    async with lifespan(app), client(app) as http:
        response = await http.get("/search", headers={"authorization": "Token alice"})
    assert "sentinel_device=" in response.headers["set-cookie"]


# --- denials rendered by the app -----------------------------------------------------------


async def test_the_apps_handler_renders_a_429_with_the_decision_and_the_headers(
    redis_url: str,
) -> None:
    app = user_app(user_config(redis_url))
    seen: list[RateLimitExceeded] = []

    @app.exception_handler(RateLimitExceeded)
    async def too_many(request: Request, exc: RateLimitExceeded) -> JSONResponse:
        seen.append(exc)
        decision: Decision = exc.decision
        return JSONResponse(
            {"error": "slow down", "retry_in": decision.retry_after_seconds},
            status_code=exc.status_code,
        )

    async with lifespan(app), client(app) as http:
        await statuses(http, 3, authorization="Token alice")
        denied = await http.get("/search", headers={"authorization": "Token alice"})

    assert denied.status_code == 429
    assert denied.headers["content-type"] == "application/json"
    (exc,) = seen
    assert exc.decision.reason is DecisionReason.RATE_LIMITED
    assert exc.decision.endpoint_id == USER_POLICY
    assert denied.json() == {"error": "slow down", "retry_in": exc.decision.retry_after_seconds}
    assert denied.headers["retry-after"] == str(exc.decision.retry_after_seconds)
    assert denied.headers["ratelimit"].startswith(f'"{USER_POLICY}";r=0;')
    assert denied.headers["ratelimit-policy"].startswith(f'"{USER_POLICY}";q=3;')
    assert exc.headers is not None
    assert exc.headers["Retry-After"] == denied.headers["retry-after"]
    assert exc.detail == "rate limit exceeded"


async def test_a_sync_handler_renders_a_503_and_a_401_stays_sentinels(
    dead_redis_url: str,
) -> None:
    app = user_app(user_config(dead_redis_url))

    @app.exception_handler(RateLimitExceeded)
    def unavailable(request: Request, exc: RateLimitExceeded) -> PlainTextResponse:
        return PlainTextResponse(f"{exc.status_code} {exc.decision.reason}", exc.status_code)

    async with lifespan(app), client(app) as http:
        denied = await http.get("/search", headers={"authorization": "Token alice"})
        refused = await http.get("/tenant")

    assert (denied.status_code, denied.text) == (503, "503 fail_closed")
    assert denied.headers["content-type"].startswith("text/plain")
    assert refused.status_code == 401  # no decision: Sentinel's own problem+json
    assert refused.headers["content-type"] == "application/problem+json"


async def test_a_handler_must_return_a_response(redis_url: str) -> None:
    app = user_app(user_config(redis_url))

    @app.exception_handler(RateLimitExceeded)
    async def wrong(request: Request, exc: RateLimitExceeded) -> Any:
        return {"not": "a response"}

    async with lifespan(app), client(app) as http:
        await statuses(http, 3, authorization="Token alice")
        with pytest.raises(TypeError, match="returned dict, not a Response"):
            await http.get("/search", headers={"authorization": "Token alice"})


async def test_without_a_handler_the_denial_is_spec_4s(redis_url: str) -> None:
    app = user_app(user_config(redis_url))
    async with lifespan(app), client(app) as http:
        await statuses(http, 3, authorization="Token zed")
        denied = await http.get("/search", headers={"authorization": "Token zed"})
    assert denied.status_code == 429
    assert denied.headers["content-type"] == "application/problem+json"
    assert denied.json()["detail"] == "rate limit exceeded"


# --- docs/users.md, run as written -------------------------------------------------------


def docs_config(redis_url: str) -> dict[str, Any]:
    config = user_config(redis_url)
    config["policies"]["api.search"] = config["policies"].pop(USER_POLICY)
    return config


async def test_the_docs_starlette_example_and_handler_run_as_written(redis_url: str) -> None:
    namespace: dict[str, Any] = {"config": docs_config(redis_url)}
    for block in snippets("users.md", "FastAPI and Starlette: `AuthenticationMiddleware`"):
        exec(block, namespace)
    app: FastAPI = namespace["app"]
    async with lifespan(app), client(app) as http:
        token = {"authorization": "Token alice"}
        alice = [await http.get("/search", headers=token) for _ in range(4)]
        for block in snippets("users.md", "FastAPI: `app.exception_handler(RateLimitExceeded)`"):
            exec(block, namespace)
        handled = await http.get("/search", headers=token)

    assert [r.status_code for r in alice] == [200, 200, 200, 429]
    assert alice[0].json() == {"user": "alice"}
    assert handled.status_code == 429
    assert handled.json()["error"] == "slow down"
    assert int(handled.headers["retry-after"]) == handled.json()["retry_in"]
    assert handled.headers["ratelimit"].startswith('"api.search";r=0;')


def test_the_docs_api_key_lookup_names_an_account() -> None:
    namespace: dict[str, Any] = {}
    (block,) = snippets("users.md", "API keys")
    exec(block, namespace)
    lookup = namespace["api_key_account"]
    key = next(iter(namespace["API_KEYS"]))
    assert lookup(HTTPConnection({"type": "http", "headers": [(b"x-api-key", key.encode())]}))
    assert lookup(HTTPConnection({"type": "http", "headers": []})) is None


class _OldSimpleUser(SimpleUser):
    """Starlette's SimpleUser as releases before ``identity`` was implemented have it
    (0.46, which FastAPI 0.115 installs): the base class's property raises."""

    @property
    def identity(self) -> str:
        raise NotImplementedError


class _NamelessUser(BaseUser):
    """An app's user class that implements everything but ``identity``."""

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def display_name(self) -> str:
        return "someone"


def _connection(user: BaseUser) -> HTTPConnection:
    return HTTPConnection({"type": "http", "headers": [], "user": user})


def test_starlettes_own_user_is_its_username_on_releases_without_identity() -> None:
    assert starlette_user(_connection(_OldSimpleUser("alice"))) == "alice"
    assert starlette_user(_connection(SimpleUser("alice"))) == "alice"


def test_a_user_class_without_identity_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match="_NamelessUser does not implement `identity`"):
        starlette_user(_connection(_NamelessUser()))
