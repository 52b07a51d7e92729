"""Redis killed, then paused, under a steady load: what every worker answers meanwhile,
and how soon the server is whole again.

The load alternates a fail-closed endpoint (``/v1/ingest``) and a fail-open one
(``/v1/tailor``), each request for a fresh tenant, so with Redis up everything is
admitted and whatever is denied during an outage is the outage's doing. The clock here
is the real one: the servers are other processes, the outage a real signal to a real
redis-server.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from tests.realserver.checks import admitted, assert_answered, assert_counted
from tests.realserver.figures import milliseconds, record
from tests.realserver.load import Load, Reply, Request, percentile
from tests.realserver.servers import INGEST, TAILOR, AppServer, Deployment, Tuning
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.slow, pytest.mark.realserver]

TUNING = Tuning(socket_timeout_ms=500, open_seconds=2)
BUDGET = TUNING.socket_timeout_ms / 1000
MARGIN = 0.45
"""Seconds past the socket budget that a request may take end to end on a loaded
machine (HTTP, the server, the client), on top of any time the load client itself was
measured not running; less than the budget, so a request that waited for Redis twice
fails the test."""
FAILURE_THRESHOLD = 5  # the examples keep the default breaker threshold
FALLBACK_BURST, FALLBACK_PER_SECOND = 2, 2  # resumint.tailor: fallback_rate 2/second
STEADY = 0.8
"""Seconds of load before the outage, and again once every worker must have recovered."""
OUTAGE = 2.0
PAUSE = FAILURE_THRESHOLD * (BUDGET + 0.3) + 1.0
"""Long enough for a worker that decides one request at a time to spend its
``FAILURE_THRESHOLD`` budgets on a loaded machine (the breaker opens), then to
short-circuit for a second."""


def _mixed(prefix: str) -> Iterator[Request]:
    for i in itertools.count():
        yield Request(INGEST if i % 2 == 0 else TAILOR, f"{prefix}-{i}")


def _between(replies: list[Reply], start: float, end: float) -> list[Reply]:
    """The replies to requests sent at or after ``start`` and answered by ``end``."""
    return [reply for reply in replies if reply.start >= start and reply.end <= end]


def _on(path: str, replies: list[Reply]) -> list[Reply]:
    return [reply for reply in replies if reply.path == path]


def _slow(replies: list[Reply], since: float) -> str:
    """The slowest replies, for a failure message."""
    slowest = sorted(replies, key=lambda reply: reply.seconds, reverse=True)[:10]
    return "\n".join(
        f"{r.path} {r.status} sent at +{r.start - since:.3f}s took {r.seconds:.3f}s"
        for r in slowest
    )


def _redis_up(replies: list[Reply], until: float) -> dict[str, float]:
    """Latency figures of the requests answered before the outage: what this machine
    adds to any request, for reading the outage's figures."""
    seconds = [reply.seconds for reply in replies if reply.end < until]
    return {
        "redis_up_p50_ms": milliseconds(percentile(seconds, 0.5)),
        "redis_up_p99_ms": milliseconds(percentile(seconds, 0.99)),
    }


def _under_load(
    serve: Callable[[Tuning], AppServer], prefix: str
) -> tuple[AppServer, Counter[str], Load]:
    """The server, its decisions so far, and a load that has run steadily for a while."""
    server = serve(TUNING)
    before = server.metrics.decisions()
    concurrency = server.deployment.concurrency
    load = Load(server.base_url, _mixed(prefix), concurrency=concurrency).start()
    time.sleep(STEADY)
    return server, before, load


def _recover(load: Load, server: AppServer, since: float) -> float:
    """Seconds from ``since`` (Redis answering again) to the first admitted fail-closed
    request sent after it, within the breaker's quarantine; then, once every breaker's
    quarantine has certainly run out, one more steady second in which every fail-closed
    request is admitted, whichever worker it reaches. The load is stopped."""
    first = load.wait_for(
        lambda reply: reply.path == INGEST and reply.start >= since and 200 <= reply.status < 300,
        timeout=TUNING.open_seconds + 10,
    )
    assert first is not None, f"no request admitted after Redis came back:\n{server.log()}"
    assert first.end - since <= TUNING.open_seconds + 1.5
    healed = since + TUNING.open_seconds + 1.0
    time.sleep(max(0.0, healed + STEADY - time.monotonic()))
    steady = _on(INGEST, [reply for reply in load.stop() if reply.start >= healed])
    assert steady, "no request in the steady second after the recovery"
    assert {reply.status for reply in steady} == {server.deployment.ingest_status}
    return first.end - since


def test_redis_killed_mid_load(
    serve: Callable[[Tuning], AppServer], redis: RedisServer, deployment: Deployment
) -> None:
    server, before, load = _under_load(serve, "killed")
    stopping = time.monotonic()
    redis.stop()
    killed = time.monotonic()
    time.sleep(OUTAGE)
    restarting = time.monotonic()
    redis.start()  # the same port: the workers' clients reconnect to it
    back = time.monotonic()
    recovery = _recover(load, server, back)
    replies = load.replies()

    assert_answered(replies, allowed={deployment.ingest_status, 200, 429, 503})
    outage = _between(replies, killed, restarting)
    closed, opened = _on(INGEST, outage), _on(TAILOR, outage)
    # Fail-closed: every request denied, each within the socket budget.
    assert closed, "no fail-closed request during the outage"
    assert {reply.status for reply in closed} == {503}
    p99 = percentile((reply.seconds for reply in closed), 0.99)
    assert p99 <= BUDGET + MARGIN
    # Fail-open: admitted, but never more than each process's emergency bucket allows.
    bound = deployment.processes * (FALLBACK_BURST + FALLBACK_PER_SECOND * (restarting - killed))
    passed = len(admitted(opened))
    assert 0 < passed <= bound
    assert Counter(reply.status for reply in opened).keys() == {200, 429}
    assert_counted(server, before, replies)

    record(
        deployment.name,
        "redis_killed",
        **_redis_up(replies, stopping),
        outage_seconds=round(restarting - killed, 3),
        fail_closed_requests=len(closed),
        fail_closed_503_p99_ms=milliseconds(p99),
        fail_closed_503_max_ms=milliseconds(max(reply.seconds for reply in closed)),
        fail_open_requests=len(opened),
        fail_open_admitted=passed,
        fail_open_bound=int(bound),
        recovery_seconds=round(recovery, 3),
        redis_restart_seconds=round(back - restarting, 3),
    )


def test_redis_paused_mid_load(
    serve: Callable[[Tuning], AppServer], redis: RedisServer, deployment: Deployment
) -> None:
    server, before, load = _under_load(serve, "paused")
    redis.pause()
    paused = time.monotonic()
    try:
        time.sleep(PAUSE)
        breakers = server.metrics.breaker_states()
        resuming = time.monotonic()
    finally:
        redis.resume()
    recovery = _recover(load, server, resuming)
    replies = load.replies()

    assert_answered(replies, allowed={deployment.ingest_status, 200, 429, 503})
    hung = [reply for reply in replies if paused <= reply.start <= resuming]
    # Every request is answered within the socket budget: none hangs with Redis.
    slowest = max(reply.seconds for reply in hung)
    late = [reply for reply in hung if reply.seconds > BUDGET + MARGIN + load.stalled(reply)]
    assert not late, _slow(late, paused)
    closed = _on(INGEST, _between(replies, paused, resuming))
    assert {reply.status for reply in closed} == {503}
    # The budget was spent on Redis only until each worker's breaker opened: from then
    # on the breaker answers at once, without waiting for Redis.
    timed_out = [reply for reply in hung if reply.seconds >= BUDGET * 0.8]
    assert timed_out, "no request waited for the paused Redis"
    last_second = [reply.seconds for reply in hung if reply.start >= resuming - 1.0]
    waited = [seconds for seconds in last_second if seconds >= BUDGET * 0.8]
    assert len(waited) * 2 < len(last_second), _slow(hung, paused)
    assert len(breakers) == deployment.processes
    assert 0 not in breakers.values(), f"a worker's breaker stayed closed: {breakers}"
    assert_counted(server, before, replies)

    record(
        deployment.name,
        "redis_paused",
        **_redis_up(replies, paused),
        pause_seconds=round(resuming - paused, 3),
        requests=len(hung),
        p99_ms=milliseconds(percentile((reply.seconds for reply in hung), 0.99)),
        max_ms=milliseconds(slowest),
        client_stalled_max_ms=milliseconds(max(load.stalled(reply) for reply in hung)),
        fail_closed_503_p99_ms=milliseconds(percentile((r.seconds for r in closed), 0.99)),
        waited_for_redis=len(timed_out),
        last_second_requests=len(last_second),
        last_second_waited_for_redis=len(waited),
        last_second_median_ms=milliseconds(statistics.median(last_second)),
        recovery_seconds=round(recovery, 3),
    )
