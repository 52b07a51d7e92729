"""``enabled = false`` in FastAPI (SPEC §2): the dependency idiom and the lifespan pass
through too, with no store ever contacted (the contract suite covers the decorator and
``routes``)."""

from __future__ import annotations

from fastapi import Depends, FastAPI
from prometheus_client import CollectorRegistry

from sentinel_core import BreakerState
from sentinel_fastapi import Sentinel, rate_limit
from tests.fastapi.conftest import client, lifespan
from tests.support.adapter_config import spec_config
from tests.support.redis_server import free_port


async def test_a_dependency_passes_through_and_startup_never_contacts_redis() -> None:
    config = spec_config(f"redis://127.0.0.1:{free_port()}/0", enabled=False)
    sentinel = Sentinel(config, registry=CollectorRegistry(), entry_points=False)
    app = FastAPI()
    sentinel.init_app(app)

    @app.post("/export", dependencies=[Depends(rate_limit("pdftalk.ingest"))])
    async def export() -> dict[str, bool]:
        return {"ok": True}

    async with lifespan(app), client(app) as http:
        responses = [await http.post("/export") for _ in range(5)]

    assert [response.status_code for response in responses] == [200] * 5
    assert not any("ratelimit" in response.headers for response in responses)
    assert sentinel.breaker_state is BreakerState.CLOSED
    assert sentinel._async_store is None  # never opened
