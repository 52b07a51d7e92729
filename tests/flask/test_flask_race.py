"""Real threads through the Flask test client against one bucket: never one extra pass."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest
from flask import Flask

from sentinel_flask import rate_limited
from tests.flask.apps import MakeApp
from tests.support.adapter_config import bearer, spec_config

THREADS = 16
REQUESTS_PER_THREAD = 6
BURST = 40

POLICIES: dict[str, dict[str, Any]] = {
    "token_bucket": {"algorithm": "token_bucket", "rate": "1/hour", "burst": BURST},
    "sliding_window": {"algorithm": "sliding_window", "rate": f"{BURST}/hour"},
}


def race_views(app: Flask) -> None:
    @app.post("/race")
    @rate_limited("race.burst")
    def race() -> str:
        return "ok"


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", sorted(POLICIES))
def test_sixteen_threads_get_exactly_the_burst_through(
    make_app: MakeApp, redis_url: str, algorithm: str
) -> None:
    config = spec_config(redis_url)
    # Refill is one request an hour: nothing refills while the race runs.
    config["policies"] = {"race.burst": {**POLICIES[algorithm], "fail_mode": "closed"}}
    app = make_app(config, views=race_views)
    authorization = {"Authorization": bearer("racing-tenant")}
    start = threading.Barrier(THREADS)
    results: list[int] = []
    lock = threading.Lock()

    def worker() -> None:
        client = app.test_client()  # each thread its own client
        start.wait()
        codes = [
            client.post("/race", headers=authorization).status_code
            for _ in range(REQUESTS_PER_THREAD)
        ]
        with lock:
            results.extend(codes)

    threads = [threading.Thread(target=worker) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert not any(thread.is_alive() for thread in threads)
    assert Counter(results) == {200: BURST, 429: THREADS * REQUESTS_PER_THREAD - BURST}
