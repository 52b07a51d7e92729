"""Local denials are exact (SPEC §3): every denial a process answers by itself is one the
store would have given at that instant, under random traffic from several processes
and threads on one bucket of a real redis-server.

How each local denial is checked: every process records the store's ``TIME`` of every
admission it got, and the wall-clock window (before, after) of every denial it
answered locally (``time.time_ns``: the clock Redis ``TIME`` reads on this host). The
store's bucket is a pure function of its admissions, so the reference algorithm
replays them; a local denial is then evaluated against the most favourable state the
store could have held during its window: the admissions made before the window opened,
refilled until the window closed. That state must deny.
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

from sentinel_core import Sentinel, TenantIdentity
from sentinel_core.store._scripts import ScriptCall, run_reference
from tests.support.local_flood import run_schedule

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
}
Plan = list[list[list[int]]]


def config(url: str) -> dict[str, Any]:
    return {"redis_url": url, "socket_timeout_ms": 10_000, "policies": POLICIES}


@pytest.fixture(scope="module")
def pool() -> Iterator[ProcessPoolExecutor]:
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(PROCESSES, mp_context=context) as executor:
        yield executor


def bucket_call(url: str, endpoint_id: str, tenant: str) -> ScriptCall:
    sentinel = Sentinel(config(url), registry=CollectorRegistry(), entry_points=False)
    policy = sentinel.engine.policy(endpoint_id)
    return sentinel.engine.script_call(policy, TenantIdentity(tenant))


def replay(call: ScriptCall, admitted_at: list[int]) -> list[tuple[int, str]]:
    """The bucket's state after each admission, (TIME, state), in the store's order."""
    states: list[tuple[int, str]] = []
    state = None
    for now in sorted(admitted_at):
        reply, writes = run_reference(call, [state], now)
        assert reply.allowed, "the replay disagrees with an admission the store made"
        assert writes is not None
        state = writes[0].value
        states.append((now, state))
    return states


def state_before(states: list[tuple[int, str]], instant: int) -> str | None:
    earlier = [state for now, state in states if now < instant]
    return earlier[-1] if earlier else None


pauses = st.lists(st.integers(min_value=0, max_value=40), min_size=3, max_size=20)
schedules = st.lists(
    st.lists(pauses, min_size=1, max_size=3), min_size=PROCESSES, max_size=PROCESSES
)


def check_plan(url: str, pool: ProcessPoolExecutor, endpoint_id: str, plan: Plan) -> int:
    """Run ``plan`` (per process, per thread, the pauses in ms before each request) on a
    fresh bucket, check every local denial against the replayed store; how many."""
    tenant = f"flood-{uuid.uuid4()}"
    futures = [
        pool.submit(run_schedule, config(url), endpoint_id, tenant, threads) for threads in plan
    ]
    admitted: list[int] = []
    local: list[tuple[int, int]] = []
    for future in futures:
        process_admitted, process_local, _ = future.result(timeout=120)
        admitted += process_admitted
        local += process_local
    call = bucket_call(url, endpoint_id, tenant)
    states = replay(call, admitted)
    for before, after in local:
        reply, _ = run_reference(call, [state_before(states, before)], after)
        assert not reply.allowed, f"a local denial in [{before}, {after}] the store would admit"
    return len(local)


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
    flood = [[[2] * 40] * 3] * PROCESSES  # 3 threads per process, a request every 2 ms
    assert check_plan(redis_url, pool, endpoint_id, flood) > 0


@pytest.mark.parametrize("endpoint_id", list(POLICIES))
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
