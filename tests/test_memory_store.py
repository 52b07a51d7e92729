"""The embedded ``memory://`` store: keys live until their TTL on the injected clock, and
expired keys are swept once enough writes have accumulated, so memory stays bounded."""

from __future__ import annotations

from sentinel_core import load_config
from sentinel_core._models import MICRO
from sentinel_core.identity._keys import TenantIdentity
from sentinel_core.store._redis import MemoryStore
from sentinel_core.store._reference import ScriptReply
from sentinel_core.store._scripts import ScriptCall, script_args

POLICY = load_config(
    {
        "redis_url": "memory://",
        "policies": {
            "api.read": {
                "algorithm": "token_bucket",
                "rate": "1/second",
                "burst": 2,
                "fail_mode": "closed",
            }
        },
    }
).policies["api.read"]


class Clock:
    """Unix microseconds, moved by the test."""

    def __init__(self) -> None:
        self.now = 1_700_000_000 * MICRO

    def __call__(self) -> int:
        return self.now


def call_for(tenant: str) -> ScriptCall:
    return ScriptCall(
        POLICY.algorithm, TenantIdentity(tenant).bucket_keys(POLICY), script_args(POLICY)
    )


def read(call: ScriptCall, raw: object) -> ScriptReply:
    return ScriptReply.read(raw, call.algorithm, call.args, POLICY.cost, POLICY.burst)


def test_a_bucket_reads_back_until_its_ttl_and_then_starts_full_again() -> None:
    clock = Clock()
    store = MemoryStore(clock_us=clock)
    call = call_for("tenant-a")
    (key,) = call.keys

    replies = [read(call, store.run(call)) for _ in range(3)]
    assert [reply.allowed for reply in replies] == [1, 1, 0]
    assert store.get(key) is not None
    assert store.get("sentinel:v1:{unknown}:api.read:1") is None

    clock.now += 60 * MICRO  # far past the time a 2-token bucket takes to refill

    assert store.get(key) is None
    fresh = read(call, store.run(call))
    assert fresh.allowed == 1
    assert fresh.remaining == 1  # remaining: a full burst of 2, less this request


def test_expired_keys_are_swept_once_enough_writes_accumulate() -> None:
    clock = Clock()
    store = MemoryStore(clock_us=clock)
    for index in range(MemoryStore._SWEEP_EVERY - 1):
        store.run(call_for(f"tenant-{index}"))
    assert len(store._data) == MemoryStore._SWEEP_EVERY - 1

    clock.now += 60 * MICRO  # every bucket so far has expired
    store.run(call_for("latecomer"))  # the write that triggers the sweep

    assert list(store._data) == list(call_for("latecomer").keys)
