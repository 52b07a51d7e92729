"""Startup through the ASGI lifespan: the app's own lifespan still runs, bad endpoint ids
and unfit Redis servers stop startup with a message, an unreachable Redis does not."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from sentinel_core import ConfigError
from sentinel_fastapi import Sentinel, rate_limited
from tests.fastapi.apps import MakeApp, Probe
from tests.fastapi.conftest import LifespanFailed, lifespan, serve
from tests.support.adapter_config import bearer, spec_config
from tests.support.redis_admin import RedisAdmin
from tests.support.redis_server import RedisServer


def app_with(sentinel: Sentinel, path: str, endpoint_id: str) -> FastAPI:
    app = FastAPI()
    sentinel.init_app(app)

    @app.post(path)
    @rate_limited(endpoint_id)
    async def handler() -> None:
        raise AssertionError("must not run")  # pragma: no cover

    return app


async def test_the_apps_own_lifespan_still_runs_and_its_state_reaches_requests(
    make_app: MakeApp, redis_url: str, probe: Probe
) -> None:
    state: dict[str, Any] = {}
    async with serve(make_app(spec_config(redis_url)), state=state) as http:
        during = list(probe.events)
        response = await http.post("/v1/ingest", headers={"Authorization": bearer("acme")})

    assert during == ["app startup"]
    assert probe.events == ["app startup", "app shutdown"]
    assert state == {"greeting": "from the app's lifespan"}
    assert response.status_code == 200


async def test_decorated_route_with_an_unknown_endpoint_id_stops_startup(redis_url: str) -> None:
    app = app_with(
        Sentinel(spec_config(redis_url), registry=CollectorRegistry()), "/v1/oops", "no.such"
    )

    with pytest.raises(LifespanFailed) as failure:
        async with lifespan(app):
            pass  # pragma: no cover

    message = str(failure.value)
    assert "StartupError" in message
    assert "route POST /v1/oops uses endpoint id 'no.such'" in message


async def test_tenant_policy_without_a_jwt_section_stops_startup(redis_url: str) -> None:
    config = spec_config(redis_url)
    del config["jwt"]
    app = app_with(Sentinel(config, registry=CollectorRegistry()), "/v1/ingest", "pdftalk.ingest")

    with pytest.raises(
        LifespanFailed, match=r"route POST /v1/ingest uses endpoint id 'pdftalk.ingest'.*jwt"
    ):
        async with lifespan(app):
            pass  # pragma: no cover


async def test_routes_entry_that_matches_no_route_stops_startup(
    make_app: MakeApp, redis_url: str
) -> None:
    app = make_app(spec_config(redis_url, routes={"POST /v1/ingset": "pdftalk.ingest"}))

    with pytest.raises(LifespanFailed, match=r"'POST /v1/ingset' -> 'pdftalk.ingest'"):
        async with lifespan(app):
            pass  # pragma: no cover


def test_routes_entry_with_an_unknown_endpoint_id_is_a_config_error(redis_url: str) -> None:
    with pytest.raises(ConfigError, match=r"routes\.POST /v1/docs/\{doc_id\}: unknown endpoint id"):
        Sentinel(spec_config(redis_url, routes={"POST /v1/docs/{doc_id}": "no.such"}))


async def test_redis_with_an_eviction_policy_stops_startup_with_the_checks_message(
    make_app: MakeApp, lru_redis_server: RedisServer, probe: Probe
) -> None:
    app = make_app(spec_config(lru_redis_server.url))

    with pytest.raises(LifespanFailed) as failure:
        async with lifespan(app):
            pass  # pragma: no cover

    assert "Redis is not fit for Sentinel: eviction policy: maxmemory-policy is allkeys-lru" in str(
        failure.value
    )
    assert probe.events == []


async def test_unreachable_redis_logs_an_error_and_the_app_starts(
    make_app: MakeApp, dead_redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="sentinel"):
        async with serve(make_app(spec_config(dead_redis_url))) as http:
            response = await http.post("/v1/tailor", headers={"Authorization": bearer("acme")})

    assert response.status_code == 200  # fail-open: the emergency limiter admits it
    assert any("unreachable" in record.getMessage() for record in caplog.records)


async def test_sentinel_closes_its_redis_connections_at_shutdown(
    make_app: MakeApp, redis_url: str
) -> None:
    monitor = RedisAdmin(redis_url)
    baseline = len(monitor.client_list())
    async with serve(make_app(spec_config(redis_url))) as http:
        await http.post("/v1/ingest", headers={"Authorization": bearer("acme")})
        during = len(monitor.client_list())
    # The server drops a closed connection when its event loop reads the FIN, a moment
    # after the client closed it (a CLIENT LIST in between still lists it): wait for that.
    for _ in range(1000):  # at most about 5 s
        if len(monitor.client_list()) <= baseline:
            break
        await asyncio.sleep(0.005)
    after = len(monitor.client_list())
    monitor.close()

    assert during > baseline
    assert after == baseline


def test_init_app_refuses_a_second_sentinel_and_a_started_app(redis_url: str) -> None:
    app = FastAPI()
    Sentinel(spec_config(redis_url), registry=CollectorRegistry()).init_app(app)
    with pytest.raises(RuntimeError, match="already has a Sentinel"):
        Sentinel(spec_config(redis_url), registry=CollectorRegistry()).init_app(app)

    started = FastAPI()
    started.middleware_stack = started.build_middleware_stack()
    routed = spec_config(redis_url, routes={"POST /v1/ingest": "pdftalk.ingest"})
    with pytest.raises(RuntimeError, match="before the app starts"):
        Sentinel(routed, registry=CollectorRegistry()).init_app(started)


async def test_sentinel_loads_its_configuration_from_a_toml_path(tmp_path: Path) -> None:
    path = tmp_path / "sentinel.toml"
    path.write_text(
        '[sentinel]\nredis_url = "memory://"\n'
        '[sentinel.anonymous]\ncookie_secret = "a-cookie-secret-of-at-least-32-bytes!!"\n'
        "secure = false\n"
        '[sentinel.policies."auth.login"]\nalgorithm = "token_bucket"\nrate = "1/minute"\n'
        'identity = "anonymous"\nfail_mode = "closed"\n',
        encoding="utf-8",
    )
    app = FastAPI()
    Sentinel(path, registry=CollectorRegistry()).init_app(app)

    @app.post("/login")
    @rate_limited("auth.login")
    async def login() -> dict[str, str]:
        return {"login": "ok"}

    async with serve(app) as http:
        statuses = [(await http.post("/login")).status_code for _ in range(2)]

    assert statuses == [200, 429]
