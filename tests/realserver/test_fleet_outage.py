"""Fleet-wide fail-open under real servers (SPEC §2 ``fallback_scope``): four worker
processes, Redis SIGKILLed under a steady load of the fail-open endpoint.

With ``fallback_scope = "fleet"`` the four workers together admit about
``fallback_rate`` per second plus one second's burst, not four times that; with the
default ``"process"`` each worker still admits the whole ``fallback_rate``. The count
comes from the workers' own metrics (every request their emergency limiters admitted),
so a request that was in flight when Redis died is counted too.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator

import pytest

from tests.realserver.checks import admitted, assert_answered
from tests.realserver.figures import record
from tests.realserver.load import Load, Request
from tests.realserver.servers import DEPLOYMENTS, TAILOR, AppServer, Deployment, Tuning
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.slow, pytest.mark.realserver]

FOUR_WORKERS = [d for d in DEPLOYMENTS if d.processes == 4]
FALLBACK_PER_SECOND = 8
"""resumint.tailor's fallback_rate here: 2 a second per worker when four share it."""
HEARTBEAT = 1
STEADY = 0.5
OUTAGE = 3.0
FLEET_KEY = "sentinel:fleet:{fleet}:resumint.tailor"


def _tailor(prefix: str) -> Iterator[Request]:
    for i in itertools.count():
        yield Request(TAILOR, f"{prefix}-{i}")


def _wait_for_the_fleet(redis: RedisServer, server: AppServer) -> None:
    """Every worker has announced itself, then beaten again: each knows all four."""
    client = redis.client()
    deadline = time.monotonic() + 30
    while client.zcard(FLEET_KEY) < server.deployment.processes:
        assert time.monotonic() < deadline, f"the workers did not all announce:\n{server.log()}"
        time.sleep(0.1)
    assert client.zcard(FLEET_KEY) == server.deployment.processes
    assert 0 < client.pttl(FLEET_KEY) <= 3 * HEARTBEAT * 1000
    client.close()
    time.sleep(2 * HEARTBEAT + 0.5)


@pytest.mark.parametrize("deployment", FOUR_WORKERS, ids=[d.name for d in FOUR_WORKERS])
@pytest.mark.parametrize("scope", ["fleet", "process"])
def test_redis_killed_the_fleet_shares_one_fallback_rate(
    serve: Callable[[Tuning], AppServer],
    redis: RedisServer,
    deployment: Deployment,
    scope: str,
) -> None:
    tuning = Tuning(
        socket_timeout_ms=500,
        fallback_rate=f"{FALLBACK_PER_SECOND}/second",
        fallback_scope=scope,
        fleet_heartbeat_seconds=HEARTBEAT,
    )
    server = serve(tuning)
    if scope == "fleet":
        _wait_for_the_fleet(redis, server)
    before = server.metrics.fail_open_admissions("resumint.tailor")
    load = Load(server.base_url, _tailor(scope), concurrency=deployment.concurrency).start()
    time.sleep(STEADY)
    redis.stop()  # SIGKILL
    killed = time.monotonic()
    time.sleep(OUTAGE)
    replies = load.stop()
    ended = time.monotonic()

    assert_answered(replies, allowed={200, 429})
    during = [reply for reply in replies if reply.start >= killed]
    assert {reply.status for reply in during} == {200, 429}, "admitted, then limited"
    after = server.metrics.fail_open_admissions("resumint.tailor")
    per_worker = {pid: after[pid] - before.get(pid, 0) for pid in after}
    total = sum(per_worker.values())
    assert len(admitted(during)) <= total, "every 2xx of the outage was an emergency admission"
    seconds = ended - killed
    one_fleet = FALLBACK_PER_SECOND * seconds + FALLBACK_PER_SECOND  # rate x t + 1 s burst
    processes = deployment.processes
    if scope == "fleet":
        assert 0 < total <= one_fleet, per_worker
        assert max(per_worker.values()) <= one_fleet / processes + 1, per_worker
    else:
        # Per process, unchanged: each worker its own fallback_rate, so more than one
        # fleet's worth in all (the load keeps every worker busy), never more than four.
        assert one_fleet < total <= processes * one_fleet, per_worker
    record(
        deployment.name,
        f"redis_killed_fallback_scope_{scope}",
        fallback_rate_per_second=FALLBACK_PER_SECOND,
        outage_seconds=round(seconds, 3),
        fail_open_admitted=total,
        fail_open_admitted_per_worker=sorted(per_worker.values()),
        fleet_bound=round(one_fleet, 1),
        requests=len(during),
    )
