"""A spike on a healthy Redis is never a 503: hundreds of requests in flight per worker,
more than any connection pool default (redis-py's is 100), are all decided by Redis.

Each request is a fresh tenant on the fail-closed sliding window, so every one of them
must be admitted: a 503 here can only be the limiter failing under its own load.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.realserver.checks import assert_counted
from tests.realserver.figures import record
from tests.realserver.load import Request, run
from tests.realserver.servers import (
    INGEST,
    ROOT,
    AppServer,
    Deployment,
    Tuning,
    gunicorn,
    uvicorn,
    warm_up,
)
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.slow, pytest.mark.realserver]

PER_WORKER = 300
SPIKES = (
    Deployment("fastapi-uvicorn-w1", uvicorn(1), ROOT, processes=1, concurrency=300),
    Deployment("fastapi-uvicorn-w4", uvicorn(4), ROOT, processes=4, concurrency=400),
    Deployment(
        "flask-gunicorn-w1-threads300",
        gunicorn("examples.flask_app:app", "-w", "1", "--threads", "300"),
        ROOT,
        processes=1,
        concurrency=300,
    ),
)


@pytest.mark.parametrize("deployment", SPIKES, ids=[spike.name for spike in SPIKES])
def test_a_spike_on_a_healthy_redis_gets_no_503(
    deployment: Deployment, redis: RedisServer, tmp_path: Path
) -> None:
    # A loaded machine is no outage: the budget is wide, the pool is what is tested.
    server = AppServer(deployment, str(redis.url), Tuning(socket_timeout_ms=2000), tmp_path)
    try:
        server.start()
        warm_up(server)
        before = server.metrics.decisions()
        requests = [Request(INGEST, f"spike-{i}") for i in range(3 * deployment.concurrency)]
        replies = run(server.base_url, requests, concurrency=deployment.concurrency)
        statuses = Counter(reply.status for reply in replies)

        assert statuses == {deployment.ingest_status: len(requests)}, server.log()
        assert_counted(server, before, replies)
        assert set(server.metrics.breaker_states().values()) == {0}
        record(deployment.name, "spike", requests=len(requests), statuses=dict(statuses))
    finally:
        server.close()
