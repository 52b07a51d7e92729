"""``lua/settle.lua`` and the admission of settle policies agree with their references.

Like tests/test_parity.py (whose harness this reuses): Hypothesis draws a policy, prior
states (in debt, full, stale, corrupt, of another type) and settlements; the real
script runs on a private redis-server, and the reference, fed the states the keys held
just before and the ``TIME`` the script returned, must predict its reply and writes.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from hypothesis import example, given
from hypothesis import strategies as st

from sentinel_core._models import MICRO, Algorithm, Rate
from sentinel_core.decision._calendar import Calendars
from sentinel_core.store._redis import RedisStore
from sentinel_core.store._reference import WRONG_TYPE, Mode, window_state
from sentinel_core.store._reference_settle import Settled
from sentinel_core.store._scripts import (
    ScriptCall,
    bucket_parameters,
    capacity_us,
    debt_horizon,
    run_settle_reference,
)
from tests.support.redis_server import RedisServer
from tests.test_parity import (
    GARBAGE_STATES,
    KEYS,
    PARITY_SETTINGS,
    Case,
    check_one_call,
    server_time_us,
    snapshot,
)

RATES = st.builds(
    Rate, st.sampled_from([1, 2, 3, 7, 1_000, 10_000]), st.sampled_from([1, 60, 3_600])
)


@pytest.fixture(scope="module")
def store(redis_server: RedisServer) -> Iterator[RedisStore]:
    store = RedisStore(redis_server.url, 1_000)
    yield store
    store.close()


@pytest.fixture(scope="module")
def client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis_server.client()
    yield client
    client.close()


def inject(client: redis.Redis, key: str, state: str | None) -> None:
    client.delete(key)
    if state == "WRONG_TYPE":
        client.rpush(key, "not a bucket")
    elif state is not None:
        client.set(key, state)


def check_settlement(store: RedisStore, client: redis.Redis, call: ScriptCall) -> None:
    """Run the settlement ``call`` on Redis and hold its writes against the reference."""
    before = snapshot(client, call.keys)
    now = int(store.run(call))
    after = snapshot(client, call.keys)
    _, writes = run_settle_reference(call, before.values, now)
    written = {write.index: write for write in writes}
    elapsed_ms = after.time_us // 1_000 - before.time_us // 1_000
    for index, value in enumerate(before.values):
        write = written.get(index)
        if write is None:
            if after.values[index] is None and value is not None:
                assert 0 <= before.pttls[index] <= elapsed_ms + 1  # expired on its own
            else:
                assert after.values[index] == value, f"{value} at {now}"
            continue
        if after.values[index] is None:  # a TTL of a millisecond can run out before we look
            assert elapsed_ms + 1 >= write.ttl_ms
            continue
        assert after.values[index] == write.value, f"{value} at {now}"
        assert 0 <= after.pttls[index] <= write.ttl_ms
        assert write.ttl_ms - after.pttls[index] <= elapsed_ms + 1


@st.composite
def token_bucket_settlements(draw: st.DrawFn) -> tuple[tuple[int, ...], list[int]]:
    """(the settle call's ARGV over two keys, each key's TAT offset from the clock)."""
    args: list[int] = [int(Settled.TOKEN_BUCKET)]
    offsets = []
    for _ in range(2):
        rate, burst = draw(RATES), draw(st.integers(1, 8))
        reserved = draw(st.integers(1, burst))
        inc = bucket_parameters(Algorithm.TOKEN_BUCKET, rate, burst, reserved)[0]
        bound = burst // reserved * inc + capacity_us(rate, burst)
        horizon = debt_horizon(rate, burst)
        delta = draw(st.one_of(st.integers(-inc, bound), st.sampled_from([-inc, 0, bound])))
        args += (delta, bound, horizon)
        offsets.append(
            draw(
                st.one_of(
                    st.integers(-horizon, 2 * horizon),
                    st.sampled_from([0, 1, bound, horizon, horizon + 1, -(10**6)]),
                )
            )
        )
    return tuple(args), offsets


@PARITY_SETTINGS
@given(
    settlement=token_bucket_settlements(),
    garbage=st.one_of(st.none(), st.sampled_from([*GARBAGE_STATES, "WRONG_TYPE"])),
)
def test_token_bucket_settlements_match_the_reference(
    store: RedisStore,
    client: redis.Redis,
    settlement: tuple[tuple[int, ...], list[int]],
    garbage: str | None,
) -> None:
    args, offsets = settlement
    now = server_time_us(client)
    for key, offset in zip(KEYS[:2], offsets, strict=True):
        inject(client, key, None if offset < 0 else str(now + offset))
    if garbage is not None:
        inject(client, KEYS[1], garbage.format(now=now, index=0, limit=3, phase=0))
    check_settlement(store, client, ScriptCall(Algorithm.TOKEN_BUCKET, KEYS[:2], args, True))


@st.composite
def window_settlements(draw: st.DrawFn) -> tuple[tuple[int, ...], list[tuple[int, int, int]]]:
    """(the settle call's ARGV over two keys, each key's (current, previous, windows ago))."""
    args: list[int] = [int(Settled.SLIDING_WINDOW)]
    states = []
    for _ in range(2):
        limit, period = draw(st.integers(1, 8)), draw(st.sampled_from([1, 60, 3_600]))
        ceiling = 2 * limit
        args += (draw(st.integers(-limit, ceiling)), period * MICRO, ceiling)
        counts = st.integers(0, ceiling + 1)
        ago = st.one_of(st.integers(-2, 3), st.sampled_from([-9, 5, 9, 10]))
        states.append((draw(counts), draw(counts), draw(ago)))
    return tuple(args), states


@PARITY_SETTINGS
@given(
    settlement=window_settlements(),
    garbage=st.one_of(st.none(), st.sampled_from([*GARBAGE_STATES, "WRONG_TYPE"])),
)
def test_sliding_window_settlements_match_the_reference(
    store: RedisStore,
    client: redis.Redis,
    settlement: tuple[tuple[int, ...], list[tuple[int, int, int]]],
    garbage: str | None,
) -> None:
    args, states = settlement
    now = server_time_us(client)
    for i, (current, previous, ago) in enumerate(states):
        index = now // args[3 * i + 2] - ago
        inject(client, KEYS[i], window_state(current, previous, max(0, index)))
    if garbage is not None:
        index = now // args[5]
        text = garbage.format(now=now, index=index, limit=3, phase=index % 10)
        inject(client, KEYS[1], text)
    check_settlement(store, client, ScriptCall(Algorithm.SLIDING_WINDOW, KEYS[:2], args, True))


@PARITY_SETTINGS
@given(
    limit=st.integers(1, 8),
    delta=st.integers(-10, 20),
    count=st.integers(0, 20),
    period=st.sampled_from([-1, 0, 1]),
    garbage=st.one_of(st.none(), st.sampled_from(["", "x:1", "3:", "WRONG_TYPE"])),
)
@example(limit=1, delta=1, count=0, period=0, garbage="WRONG_TYPE")  # on every run
def test_quota_settlements_match_the_reference(
    store: RedisStore,
    client: redis.Redis,
    limit: int,
    delta: int,
    count: int,
    period: int,
    garbage: str | None,
) -> None:
    table = Calendars().boundaries("day", "UTC")
    now = server_time_us(client)
    at = next(j for j in range(len(table) - 1) if table[j] <= now < table[j + 1])
    inject(client, KEYS[0], garbage or f"{count}:{table[at + period]}")
    ceiling = 2 * limit
    call = ScriptCall(Algorithm.QUOTA, KEYS[:1], (3, min(delta, ceiling), ceiling, *table), True)
    if garbage == "WRONG_TYPE":
        with pytest.raises(Exception, match="WRONGTYPE"):
            store.run(call)
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            run_settle_reference(call, [WRONG_TYPE], now)
        return
    check_settlement(store, client, call)


def test_a_quota_settlement_outside_its_period_table_is_an_error_reply(
    store: RedisStore, client: redis.Redis
) -> None:
    call = ScriptCall(Algorithm.QUOTA, KEYS[:1], (3, 1, 2, 0, 1), True)
    with pytest.raises(Exception, match="outside the period table"):
        store.run(call)
    with pytest.raises(redis.ResponseError, match="outside the period table"):
        run_settle_reference(call, [None], 5)


@st.composite
def debt_admissions(draw: st.DrawFn) -> tuple[Case, ScriptCall, list[int]]:
    """A settle policy's admission over one key or two in debt (or not), any mode (one
    token bucket's key: the set without cost and burst, answered by a `OneKeyReply`)."""
    algorithm = draw(st.sampled_from([Algorithm.TOKEN_BUCKET, Algorithm.SLIDING_WINDOW]))
    rate, burst = draw(RATES), draw(st.integers(1, 8))
    if algorithm is Algorithm.SLIDING_WINDOW:  # a window's limit is its rate's count
        rate = Rate(burst, rate.period_seconds)
    cost = draw(st.integers(1, burst))
    keys = draw(st.sampled_from([1, 2]))
    params = bucket_parameters(algorithm, rate, burst, cost, settle=True, alone=keys == 1)
    mode = draw(st.sampled_from([Mode.DECIDE, Mode.DECIDE, Mode.PEEK, Mode.RESET]))
    spread = debt_horizon(rate, burst) if algorithm is Algorithm.TOKEN_BUCKET else 2 * burst + 1
    levels = draw(st.lists(st.integers(0, spread + 1), min_size=keys, max_size=keys))
    call = ScriptCall(algorithm, KEYS[:keys], (int(mode), *params * keys))
    return Case(algorithm, rate, burst, cost), call, levels


@PARITY_SETTINGS
@given(admission=debt_admissions())
def test_admissions_of_buckets_in_debt_match_the_reference(
    store: RedisStore, client: redis.Redis, admission: tuple[Case, ScriptCall, list[int]]
) -> None:
    case, call, levels = admission
    now = server_time_us(client)
    for key, level in zip(call.keys, levels, strict=True):
        if call.algorithm is Algorithm.TOKEN_BUCKET:
            inject(client, key, str(now + level))
        else:
            inject(client, key, window_state(level, level // 2, now // call.args[2]))
    reply = check_one_call(store, client, case, call)
    assert reply.remaining >= 0
