"""Auto-pipelining on a real Redis Cluster: one batch per node, redirections followed,
and a failover seen by the batches (the slots read again after a node fails)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable

import pytest

from sentinel_core import Decision, DecisionReason, Sentinel, TenantIdentity
from tests.cluster.conftest import MakeSentinel
from tests.conftest import make_config
from tests.support.race import (
    ENDPOINTS,
    assert_processes_admit_exactly_the_burst,
    race_coroutines_in_process,
)
from tests.support.redis_cluster import FAILURE_REASONS, RedisCluster

pytestmark = pytest.mark.cluster

ONE = {"algorithm": "token_bucket", "rate": "1/day", "burst": 1, "fail_mode": "closed"}


def _sentinel(make_sentinel: MakeSentinel, url: str, timeout_ms: int = 2000) -> Sentinel:
    config = make_config(url, one=ONE)
    config["socket_timeout_ms"] = timeout_ms
    return make_sentinel(config)


async def test_a_batch_over_every_primary_gets_each_tenant_its_verdict(
    make_sentinel: MakeSentinel, cluster_url: str
) -> None:
    sentinel = _sentinel(make_sentinel, cluster_url)
    tenants = [f"tenant-{index % 30}" for index in range(60)]
    try:
        await sentinel.acheck()
        decisions = await asyncio.gather(*(sentinel.aevaluate("one", t) for t in tenants))
    finally:
        await sentinel.aclose()
    admitted = Counter(t for t, d in zip(tenants, decisions, strict=True) if d.allowed)
    assert admitted == dict.fromkeys(set(tenants), 1)
    assert {d.reason for d in decisions} == {DecisionReason.ALLOWED, DecisionReason.RATE_LIMITED}


def _move_slot(cluster: RedisCluster, slot: int, source_port: int, target_port: int) -> None:
    """Hand an empty slot from one primary to another, as a resharding does."""
    primaries = {node.port: node.client() for node in cluster.primaries()}
    source, target = primaries[source_port], primaries[target_port]
    source_id, target_id = (
        source.execute_command("CLUSTER", "MYID"),
        target.execute_command("CLUSTER", "MYID"),
    )
    target.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
    source.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
    target.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
    source.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
    for client in primaries.values():
        if client is not source and client is not target:
            client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)


@pytest.mark.slow
async def test_a_batch_sent_to_a_slot_that_moved_is_redirected(
    make_sentinel: MakeSentinel, fresh_cluster: RedisCluster
) -> None:
    sentinel = _sentinel(make_sentinel, fresh_cluster.url)
    policy = sentinel.policy("one")
    key = TenantIdentity("moving").bucket_keys(policy)[0]
    owner = fresh_cluster.node_for_key(key)
    other = next(node for node in fresh_cluster.primaries() if node.port != owner.port)
    slot = int(owner.client().execute_command("CLUSTER", "KEYSLOT", key))
    try:
        await sentinel.acheck()  # the client has read the slots: the move is news to it
        _move_slot(fresh_cluster, slot, owner.port, other.port)
        # The first decision goes alone (another slot); the two of "moving" are batched
        # to the node that no longer owns their slot.
        decisions = await asyncio.gather(
            sentinel.aevaluate("one", "elsewhere"),
            sentinel.aevaluate("one", "moving"),
            sentinel.aevaluate("one", "moving"),
        )
    finally:
        await sentinel.aclose()
    assert [d.reason for d in decisions[1:]].count(DecisionReason.ALLOWED) == 1
    assert {d.reason for d in decisions[1:]} == {
        DecisionReason.ALLOWED,
        DecisionReason.RATE_LIMITED,
    }
    assert other.client().exists(key) == 1, "decided where the slot now lives"


async def _decide_together(sentinel: Sentinel, endpoint: str, tenant: str) -> list[Decision]:
    """Three decisions in one turn: the first alone, the others in a batch."""
    calls: list[Awaitable[Decision]] = [sentinel.aevaluate(endpoint, tenant) for _ in range(3)]
    return list(await asyncio.gather(*calls))


@pytest.mark.slow
async def test_batches_follow_a_failover_and_resume(
    make_sentinel: MakeSentinel, fresh_cluster: RedisCluster
) -> None:
    config = make_config(
        fresh_cluster.url,
        hot={"algorithm": "token_bucket", "rate": "1/day", "burst": 1000, "fail_mode": "closed"},
    )
    config["breaker"] = {"failure_threshold": 3, "open_seconds": 1}
    config["socket_timeout_ms"] = 200
    sentinel = make_sentinel(config)
    key = TenantIdentity("tenant-hot").bucket_keys(sentinel.policy("hot"))[0]
    try:
        warm = await _decide_together(sentinel, "hot", "tenant-hot")
        assert all(d.allowed for d in warm)
        await asyncio.sleep(0.2)  # let the replica acknowledge the warm-up writes
        victim = fresh_cluster.node_for_key(key)
        victim.stop()
        stopped = time.monotonic()
        failures: Counter[DecisionReason] = Counter()
        while True:
            assert time.monotonic() - stopped < 60, "no recovery"
            decisions = await _decide_together(sentinel, "hot", "tenant-hot")
            if all(d.reason is DecisionReason.ALLOWED for d in decisions):
                break
            failures.update(d.reason for d in decisions if d.reason is not DecisionReason.ALLOWED)
            await asyncio.sleep(0.05)
    finally:
        await sentinel.aclose()
    assert failures, "the outage was never observed"
    assert set(failures) <= FAILURE_REASONS
    assert fresh_cluster.node_for_key(key).port != victim.port
    assert decisions[-1].remaining <= 1000 - 6, "the promoted replica kept the warm state"


@pytest.mark.parametrize("endpoint_id", ENDPOINTS)
def test_three_processes_of_twenty_pipelined_coroutines_admit_exactly_the_burst(
    cluster_url: str, endpoint_id: str
) -> None:
    processes, coroutines = 3, 20
    assert_processes_admit_exactly_the_burst(
        race_coroutines_in_process,
        (cluster_url, endpoint_id, coroutines),
        processes,
        processes * coroutines,
    )
