"""Exact capacity across workers: every worker decides against the same Redis buckets, so
concurrent requests for one tenant are admitted exactly as one process would admit
them, however they are spread over the processes and threads of the server."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

import pytest

from tests.realserver.checks import admitted, assert_answered, assert_counted
from tests.realserver.figures import record
from tests.realserver.load import Request, run
from tests.realserver.servers import INGEST, TAILOR, AppServer, Deployment, Tuning

pytestmark = [pytest.mark.slow, pytest.mark.realserver]

TENANTS = 8
PER_TENANT = 30
WINDOW_LIMIT = 10  # pdftalk.ingest: 10/minute, a sliding window
BURST, REFILL_PER_SECOND = 20, 5  # resumint.tailor: token bucket
BURST_REQUESTS = 60


def test_exact_capacity_across_workers(
    serve: Callable[[Tuning], AppServer], deployment: Deployment
) -> None:
    server = serve(Tuning(socket_timeout_ms=2000))  # a loaded machine is no outage
    before, pids_before = server.metrics.decisions(), server.metrics.decisions_by_process()

    # Interleaved: each tenant's requests are in flight together, on different workers.
    window = run(
        server.base_url,
        [Request(INGEST, f"cap-{t}") for _ in range(PER_TENANT) for t in range(TENANTS)],
        concurrency=deployment.concurrency,
    )
    start = time.monotonic()
    burst = run(
        server.base_url,
        [Request(TAILOR, "cap-burst")] * BURST_REQUESTS,
        concurrency=deployment.concurrency,
    )
    burst_seconds = time.monotonic() - start

    assert_answered(window + burst, allowed={deployment.ingest_status, 200, 429})
    per_tenant = Counter(reply.tenant for reply in admitted(window))
    assert per_tenant == {f"cap-{t}": WINDOW_LIMIT for t in range(TENANTS)}
    # A token bucket refills while the burst is sent: at most that much more.
    burst_admitted = len(admitted(burst))
    assert BURST <= burst_admitted <= BURST + int(REFILL_PER_SECOND * burst_seconds)
    assert_counted(server, before, window + burst)
    # The workers shared the load: several processes decided, none decided all.
    spread = {
        pid: count - pids_before.get(pid, 0)
        for pid, count in server.metrics.decisions_by_process().items()
    }
    deciding = sorted((count for count in spread.values() if count), reverse=True)
    assert len(deciding) >= 2, spread

    record(
        deployment.name,
        "capacity",
        window_admitted_per_tenant=sorted(set(per_tenant.values())),
        window_requests=len(window),
        burst_admitted=burst_admitted,
        burst_requests=BURST_REQUESTS,
        burst_seconds=round(burst_seconds, 3),
        decisions_per_worker=deciding,
    )
