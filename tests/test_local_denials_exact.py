"""Local denials are exact (SPEC §3): every denial a process answers by itself is one the
store would have given at that instant, under random traffic from several processes
and threads on one bucket of a real redis-server.

How each local denial is checked: every process records the store's ``TIME`` of every
admission it got, and the instant each denial it answered locally was decided at (the
local denials run on ``time.time_ns`` in these processes: the clock Redis ``TIME`` reads
on this host). The store's bucket is a pure function of its admissions, so the
reference algorithm replays them; each local denial is evaluated by the reference at
its instant, on the admissions the store had made before it. That must deny.

(Not at the end of the call that answered it: a loaded machine can deschedule a thread
for milliseconds between the decision and its return, and a bucket refilling in the
meantime does not make the decision wrong.)
"""

from __future__ import annotations

import multiprocessing
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from sentinel_core import Sentinel
from sentinel_core.store._scripts import run_reference
from tests.support.local_flood import Admission, LocalDenial, run_schedule

pytestmark = pytest.mark.slow

PROCESSES = 2
POLICIES = {
    # waits of tens of milliseconds: the bucket refills many times within one example
    "flood.token_bucket": {
        "algorithm": "token_bucket",
        "rate": "20/second",
        "burst": 3,
        "fail_mode": "closed",
    },
    "flood.sliding_window": {
        "algorithm": "sliding_window",
        "rate": "10/second",
        "fail_mode": "closed",
    },
    # three devices behind one network: the network bucket denies before a device's
    "flood.anonymous": {
        "algorithm": "token_bucket",
        "rate": "20/second",
        "burst": 3,
        "identity": "anonymous",
        "network_rate": "30/second",
        "network_burst": 4,
        "fail_mode": "closed",
    },
}
Plan = list[list[list[tuple[int, int]]]]


def config(url: str) -> dict[str, Any]:
    return {
        "redis_url": url,
        "socket_timeout_ms": 10_000,
        "anonymous": {"cookie_secret": "c" * 32},
        "policies": POLICIES,
    }


@pytest.fixture(scope="module")
def pool() -> Iterator[ProcessPoolExecutor]:
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(PROCESSES, mp_context=context) as executor:
        yield executor


Snapshot = tuple[int, dict[str, str]]
"""The store's TIME of an admission, and every bucket's state right after it."""


def replay(admitted: list[Admission]) -> list[Snapshot]:
    """The store's buckets after each admission, in the store's order (its TIME)."""
    states: dict[str, str] = {}
    snapshots: list[Snapshot] = []
    for now, call in sorted(admitted, key=lambda admission: admission[0]):
        reply, writes = run_reference(call, [states.get(key) for key in call.keys], now)
        assert reply.allowed, "the replay disagrees with an admission the store made"
        assert writes is not None
        for write in writes:
            states[call.keys[write.index]] = write.value
        snapshots.append((now, dict(states)))
    return snapshots


def states_before(snapshots: list[Snapshot], instant: int) -> dict[str, str]:
    earlier = [states for now, states in snapshots if now < instant]
    return earlier[-1] if earlier else {}


def check_plan(url: str, pool: ProcessPoolExecutor, endpoint_id: str, plan: Plan) -> int:
    """Run ``plan`` (per process, per thread: (pause in ms, device) before each request)
    on fresh buckets, check every local denial against the replayed store; how many."""
    name = f"flood-{uuid.uuid4()}"
    futures = [
        pool.submit(run_schedule, config(url), endpoint_id, name, threads) for threads in plan
    ]
    admitted: list[Admission] = []
    local: list[LocalDenial] = []
    for future in futures:
        process_admitted, process_local = future.result(timeout=120)
        admitted += process_admitted
        local += process_local
    snapshots = replay(admitted)
    for instant, call in local:
        states = states_before(snapshots, instant)
        reply, _ = run_reference(call, [states.get(key) for key in call.keys], instant)
        assert not reply.allowed, f"a local denial at {instant} the store would admit"
    return len(local)


pauses = st.lists(
    st.tuples(st.integers(min_value=0, max_value=40), st.integers(min_value=0, max_value=2)),
    min_size=3,
    max_size=20,
)
schedules = st.lists(
    st.lists(pauses, min_size=1, max_size=3), min_size=PROCESSES, max_size=PROCESSES
)


@pytest.mark.parametrize("endpoint_id", list(POLICIES))
@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=schedules)
def test_every_local_denial_is_one_the_store_would_have_given(
    redis_url: str, pool: ProcessPoolExecutor, endpoint_id: str, plan: Plan
) -> None:
    check_plan(redis_url, pool, endpoint_id, plan)


@pytest.mark.parametrize("endpoint_id", list(POLICIES))
def test_a_flood_from_every_process_and_thread_is_answered_locally_and_exactly(
    redis_url: str, pool: ProcessPoolExecutor, endpoint_id: str
) -> None:
    # 3 threads per process, a request every 2 ms, each thread its own device
    flood = [[[(2, device)] * 40 for device in range(3)]] * PROCESSES
    assert check_plan(redis_url, pool, endpoint_id, flood) > 0


@pytest.mark.parametrize("endpoint_id", ["flood.token_bucket", "flood.sliding_window"])
def test_once_retry_after_has_passed_the_next_request_is_admitted(
    redis_url: str, endpoint_id: str
) -> None:
    sentinel = Sentinel(config(redis_url), registry=CollectorRegistry(), entry_points=False)
    tenant = f"patient-{uuid.uuid4()}"
    try:
        decision = sentinel.evaluate(endpoint_id, tenant)
        while decision.allowed:
            decision = sentinel.evaluate(endpoint_id, tenant)
        local = sentinel.evaluate(endpoint_id, tenant)
        assert local.local
        assert local.retry_after_seconds is not None
        # Redis TIME is the store's clock: only real time refills the bucket
        time.sleep(local.retry_after_seconds)
        assert sentinel.evaluate(endpoint_id, tenant).allowed
    finally:
        sentinel.close()
