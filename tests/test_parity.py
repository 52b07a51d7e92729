"""The Lua scripts and their pure-Python references agree, decision for decision.

Hypothesis draws a policy and a sequence of operations (script calls over one or two
keys, and prior states injected with SET, fresh, stale, from the future or corrupt). For
every call the real script runs on a private redis-server; the reference is then fed
the states the keys held just before and the ``TIME`` the script returned, and must
predict the reply exactly, the state written and its TTL.

Keys can expire on their own between the reads and the call (a token bucket's TTL can
be one millisecond). The scripts are built so that expiry changes nothing: a state that
has outlived its TTL decides exactly like an absent key. The parity check relies on
that, and the last tests check it on the references directly, with Retry-After's
promise: at ``now + retry_after`` the same states admit.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sentinel_core._models import MICRO, Algorithm
from sentinel_core.store._redis import RedisStore
from sentinel_core.store._reference import ScriptReply
from sentinel_core.store._scripts import ScriptCall, run_reference
from tests.support.redis_server import RedisServer

KEYS = ("parity:{t}:device-a", "parity:{t}:ip", "parity:{t}:device-b")
KEY_SETS = [(0,), (1,), (0, 1), (2, 1)]
"""Single buckets, and the anonymous AND: two devices behind one shared IP bucket."""

GARBAGE_STATES = [
    # Templates of corrupt states that would be an empty bucket if they were parsed
    # leniently ({now}: the server's clock; {start}: the current window's start).
    "",
    "garbage",
    "0:{now}\n",  # Lua's $ is the end of the string; Python's $ also takes a final newline
    " 0:{now}",
    "0:{now} ",
    "-0:{now}",
    "0.0:{now}",
    "0:{now}:0",
    "0:+{now}",
    "\u0663:{now}",  # a Unicode digit: Lua's %d does not take it, so Python may not either
    "{limit}:0:{start}\n",
    "{limit}:{limit}:{start}:",
    "{limit}:0",
    "\u0663:{limit}:{start}",
    "{limit}:\u0663:{start}",
    "{limit}:0:-{start}",
]

PARITY_SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# -- policies ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """A script's arguments, with the scale of its time (for drawing timestamps)."""

    algorithm: Algorithm
    args: tuple[int, ...]
    span_us: int
    """A token bucket's full refill time, or a sliding window's length."""
    limit: int


@st.composite
def token_bucket_cases(draw: st.DrawFn) -> Case:
    burst = draw(st.integers(1, 8))
    count = draw(st.sampled_from([1, 2, 3, 7, 1_000, 10_000]))
    period = draw(st.sampled_from([1, 60, 3_600]))
    cost = draw(st.integers(1, burst))
    fill_us = -(-burst * MICRO * period // count)
    return Case(
        Algorithm.TOKEN_BUCKET, (burst * MICRO, count, period, cost * MICRO), fill_us, burst
    )


@st.composite
def sliding_window_cases(draw: st.DrawFn) -> Case:
    limit = draw(st.integers(1, 8))
    window_us = draw(st.sampled_from([1, 60, 3_600])) * MICRO
    cost = draw(st.integers(1, limit))
    return Case(Algorithm.SLIDING_WINDOW, (limit, window_us, cost), window_us, limit)


cases = st.one_of(token_bucket_cases(), sliding_window_cases())


# -- states, drawn relative to the clock they will be used with --------------------------


@dataclass(frozen=True)
class StateSpec:
    """A bucket state to inject, materialised once the server's clock is known."""

    garbage: str | None = None
    first: int = 0
    """Token bucket: micro-tokens. Sliding window: the current window's count."""
    second: int = 0
    """Sliding window: the previous window's count (unused by the token bucket)."""
    windows_ago: int = 0
    offset_us: int = 0

    def render(self, case: Case, now_us: int) -> str:
        if self.garbage is not None:
            start = now_us // case.span_us * case.span_us
            return self.garbage.format(now=now_us, start=start, limit=case.limit)
        if case.algorithm is Algorithm.TOKEN_BUCKET:
            last = max(0, now_us - self.windows_ago * case.span_us + self.offset_us)
            return f"{self.first}:{last}"
        window = case.span_us
        start = now_us // window * window - self.windows_ago * window + self.offset_us
        return f"{self.first}:{self.second}:{max(0, start)}"


def state_specs(case: Case) -> st.SearchStrategy[StateSpec]:
    if case.algorithm is Algorithm.TOKEN_BUCKET:
        capacity = case.args[0]
        tokens = st.one_of(
            st.integers(0, capacity),
            st.sampled_from([0, case.args[3] - 1, case.args[3], capacity, capacity + 1]),
        )
        structured = st.builds(
            StateSpec,
            first=tokens,
            # 0: last refill just now (+/- offset); 1..3: one or more full refills ago
            windows_ago=st.integers(0, 3),
            offset_us=st.one_of(
                st.integers(-case.span_us, case.span_us),  # includes the future: TIME went back
                st.integers(-2_000, 2_000),
            ),
        )
    else:
        counts = st.integers(0, case.limit + 1)
        structured = st.builds(
            StateSpec,
            first=counts,
            second=counts,
            # the current window, the previous one, stale ones, and a future one
            windows_ago=st.integers(-1, 3),
            offset_us=st.one_of(st.just(0), st.just(0), st.integers(-case.span_us, case.span_us)),
        )
    return st.one_of(structured, st.builds(StateSpec, garbage=st.sampled_from(GARBAGE_STATES)))


@dataclass(frozen=True)
class Call:
    key_set: tuple[int, ...]


@dataclass(frozen=True)
class Inject:
    key: int
    state: StateSpec


Operation = Call | Inject


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Case, list[Operation]]:
    case = draw(cases)
    calls = st.builds(Call, st.sampled_from(KEY_SETS))
    injects = st.builds(Inject, st.integers(0, len(KEYS) - 1), state_specs(case))
    operations = draw(st.lists(st.one_of(calls, calls, calls, injects), min_size=1, max_size=24))
    return case, operations


# -- the server ----------------------------------------------------------------------------


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


@dataclass(frozen=True)
class Snapshot:
    """What the keys of one call held, read atomically with the server's clock."""

    time_us: int
    values: list[str | None]
    pttls: list[int]


def snapshot(client: redis.Redis, keys: Sequence[str]) -> Snapshot:
    pipe = client.pipeline(transaction=True)
    pipe.time()
    for key in keys:
        pipe.get(key)
        pipe.pttl(key)
    (seconds, micros), *rest = pipe.execute()
    values = [None if raw is None else raw.decode() for raw in rest[0::2]]
    return Snapshot(seconds * MICRO + micros, values, [int(t) for t in rest[1::2]])


def server_time_us(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * MICRO + int(micros)


# -- the parity check ----------------------------------------------------------------------


def check_one_call(store: RedisStore, client: redis.Redis, call: ScriptCall) -> ScriptReply:
    """Run ``call`` on Redis and hold its reply and writes against the reference."""
    before = snapshot(client, call.keys)
    raw = store.run(call)
    after = snapshot(client, call.keys)

    reply = ScriptReply.from_raw(raw)
    expected, writes = run_reference(call, before.values, reply.now_us)
    assert reply == expected, f"states {before.values} at {reply.now_us}"
    elapsed_ms = after.time_us // 1_000 - before.time_us // 1_000

    if writes is None:  # a denial writes nothing: same value, and no TTL extension
        for index, value in enumerate(before.values):
            if after.values[index] is None and value is not None:
                # expired on its own meanwhile (an expired state decides like no state)
                assert 0 <= before.pttls[index] <= elapsed_ms + 1
                continue
            assert after.values[index] == value
            if before.pttls[index] < 0:
                assert after.pttls[index] == before.pttls[index]
            else:
                assert 0 <= after.pttls[index] <= before.pttls[index]
        return reply

    assert [write.index for write in writes] == list(range(len(call.keys)))
    for write in writes:
        value, pttl = after.values[write.index], after.pttls[write.index]
        if value is None:  # a TTL of a millisecond or so can run out before we look
            assert pttl == -2
            assert elapsed_ms + 1 >= write.ttl_ms
            continue
        assert value == write.value
        assert 0 <= pttl <= write.ttl_ms  # 0: in its last millisecond, still there
        assert write.ttl_ms - pttl <= elapsed_ms + 1  # the script set the reference's TTL
    return reply


def run_scenario(
    store: RedisStore, client: redis.Redis, case: Case, operations: Sequence[Operation]
) -> list[ScriptReply]:
    client.flushall()
    replies = []
    for operation in operations:
        if isinstance(operation, Inject):
            # no TTL: the state stays until a call replaces it, however stale it gets
            state = operation.state.render(case, server_time_us(client))
            client.set(KEYS[operation.key], state)
        else:
            keys = tuple(KEYS[index] for index in operation.key_set)
            call = ScriptCall(case.algorithm, keys, case.args)
            replies.append(check_one_call(store, client, call))
    return replies


@PARITY_SETTINGS
@given(scenario=scenarios())
def test_lua_matches_reference_on_generated_sequences(
    store: RedisStore, client: redis.Redis, scenario: tuple[Case, list[Operation]]
) -> None:
    case, operations = scenario
    run_scenario(store, client, case, operations)


@PARITY_SETTINGS
@given(
    case=token_bucket_cases(),
    calls=st.lists(st.sampled_from(KEY_SETS), min_size=4, max_size=30),
)
def test_token_bucket_parity_on_fast_refilling_buckets(
    store: RedisStore, client: redis.Redis, case: Case, calls: list[tuple[int, ...]]
) -> None:
    # 1000+ tokens per second: refills happen between two calls, denials too
    fast = Case(case.algorithm, (*case.args[:1], 2_000, 1, case.args[3]), case.span_us, case.limit)
    run_scenario(store, client, fast, [Call(key_set) for key_set in calls])


@PARITY_SETTINGS
@given(case=sliding_window_cases(), calls=st.lists(st.sampled_from(KEY_SETS), max_size=30))
def test_sliding_window_parity_on_full_windows(
    store: RedisStore, client: redis.Redis, case: Case, calls: list[tuple[int, ...]]
) -> None:
    # start from full current windows (denials) with a full previous window on the IP
    full = StateSpec(first=case.limit, second=case.limit)
    previous = StateSpec(first=case.limit, windows_ago=1)
    operations: list[Operation] = [Inject(0, full), Inject(1, previous)]
    operations += [Call(key_set) for key_set in calls]
    run_scenario(store, client, case, operations)


def test_sequence_exhausts_then_denies_on_both_scripts(
    store: RedisStore, client: redis.Redis
) -> None:
    """A deterministic anchor: burst 3 at one per hour admits three, then denies."""
    for case in (
        Case(Algorithm.TOKEN_BUCKET, (3 * MICRO, 1, 3_600, MICRO), 3 * 3_600 * MICRO, 3),
        Case(Algorithm.SLIDING_WINDOW, (3, 3_600 * MICRO, 1), 3_600 * MICRO, 3),
    ):
        replies = run_scenario(store, client, case, [Call((0, 1))] * 5)
        assert [reply.allowed for reply in replies] == [True, True, True, False, False]
        assert [reply.remaining for reply in replies[:3]] == [2, 1, 0]
        assert all(reply.retry_after_seconds >= 1 for reply in replies[3:])


def test_denial_by_one_bucket_leaves_the_other_untouched(
    store: RedisStore, client: redis.Redis
) -> None:
    """The anonymous AND: the IP bucket is empty, so the device bucket is not charged."""
    for case in (
        Case(Algorithm.TOKEN_BUCKET, (2 * MICRO, 1, 3_600, MICRO), 2 * 3_600 * MICRO, 2),
        Case(Algorithm.SLIDING_WINDOW, (2, 3_600 * MICRO, 1), 3_600 * MICRO, 2),
    ):
        replies = run_scenario(store, client, case, [Call((2, 1)), Call((2, 1)), Call((0, 1))])
        assert [reply.allowed for reply in replies] == [True, True, False]
        assert client.exists(KEYS[0]) == 0


# -- properties of the references (pure, no Redis) -----------------------------------------

NOW = st.integers(1_600_000_000 * MICRO, 2_000_000_000 * MICRO)


@st.composite
def reference_situations(draw: st.DrawFn) -> tuple[ScriptCall, list[str | None], int]:
    case = draw(cases)
    now = draw(NOW)
    specs = draw(st.lists(st.one_of(st.none(), state_specs(case)), min_size=1, max_size=2))
    states = [None if spec is None else spec.render(case, now) for spec in specs]
    keys = tuple(f"k{index}" for index in range(len(states)))
    return ScriptCall(case.algorithm, keys, case.args), states, now


@settings(max_examples=200, deadline=None)
@given(situation=reference_situations())
def test_retry_after_is_never_earlier_than_the_bucket_can_admit(
    situation: tuple[ScriptCall, list[str | None], int],
) -> None:
    call, states, now = situation
    reply, writes = run_reference(call, states, now)
    if reply.allowed:
        assert reply.retry_after_seconds == 0
        assert writes is not None
        return
    assert writes is None
    assert reply.retry_after_seconds >= 1
    later, _ = run_reference(call, states, now + reply.retry_after_seconds * MICRO)
    assert later.allowed, f"still denied {reply.retry_after_seconds}s later: {states}"


@settings(max_examples=200, deadline=None)
@given(situation=reference_situations())
def test_a_state_past_its_ttl_decides_like_an_absent_key(
    situation: tuple[ScriptCall, list[str | None], int],
) -> None:
    call, states, now = situation
    _, writes = run_reference(call, states, now)
    if writes is None:
        return
    written: list[str | None] = [write.value for write in writes]
    for write in writes:
        # Redis drops the key once its TTL is over: at now + ttl or any time after
        expired = now + write.ttl_ms * 1_000
        without: list[str | None] = list(written)
        without[write.index] = None
        assert run_reference(call, written, expired) == run_reference(call, without, expired)


@settings(max_examples=200, deadline=None)
@given(case=cases, now=NOW)
def test_an_empty_key_is_a_full_bucket(case: Case, now: int) -> None:
    call = ScriptCall(case.algorithm, ("k",), case.args)
    cost = case.args[3] // MICRO if case.algorithm is Algorithm.TOKEN_BUCKET else case.args[2]
    reply, writes = run_reference(call, [None], now)
    assert reply.allowed
    assert reply.remaining == case.limit - cost
    assert writes is not None
    assert writes[0].ttl_ms >= 1


@PARITY_SETTINGS
@given(data=st.data())
def test_per_key_parameter_sets_match_the_reference(
    store: RedisStore, client: redis.Redis, data: st.DataObject
) -> None:
    # The anonymous AND: a device bucket and a larger network bucket, one set each.
    kind = data.draw(st.sampled_from([token_bucket_cases, sliding_window_cases]))
    device, network = data.draw(kind()), data.draw(kind())
    keys = ("parity:{per-key}:device", "parity:{per-key}:network")
    client.delete(*keys)
    call = ScriptCall(device.algorithm, keys, device.args + network.args)
    for _ in range(data.draw(st.integers(1, 12))):
        check_one_call(store, client, call)
