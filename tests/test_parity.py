"""The Lua scripts and their pure-Python references agree, decision for decision.

Hypothesis draws a policy and a sequence of operations (script calls over one or two
keys, in the modes decide, peek and reset, and prior states injected with SET: fresh,
stale, from the future, corrupt or of another type). For
every call the real script runs on a private redis-server; the reference is then fed
the states the keys held just before and the ``TIME`` the script returned, and must
predict the reply exactly, the state written and its TTL. A one-key call's integer
reply (a token bucket's `OneKeyReply`, a sliding window's admission: what Sentinel sends
such a call for) leaves ``TIME`` out: its ``TIME`` is the instant, between two reads of
the server's clock around the call, at which the reference gives that reply and those
writes; one-key calls are also sent with the full parameter set, whose array reply
carries it.

Keys can expire on their own between the reads and the call (a token bucket's TTL can
be one millisecond). The scripts are built so that expiry changes nothing: a state that
has outlived its TTL decides exactly like an absent key. The parity check relies on
that, and the last tests check it on the references directly, with Retry-After's
promise: at ``now + wait_us`` the same states admit, and not a microsecond sooner.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pytest
import redis
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from sentinel_core._models import MICRO, Algorithm, Rate
from sentinel_core.store._redis import RedisStore
from sentinel_core.store._reference import (
    WRONG_TYPE,
    Mode,
    OneKeyReply,
    ScriptReply,
    State,
    Write,
    window_state,
)
from sentinel_core.store._scripts import ScriptCall, bucket_parameters, run_reference
from tests.support.redis_server import RedisServer

KEYS = ("parity:{t}:device-a", "parity:{t}:ip", "parity:{t}:device-b")
KEY_SETS = [(0,), (1,), (0, 1), (2, 1)]
"""Single buckets, and the anonymous AND: two devices behind one shared IP bucket."""

GARBAGE_STATES = [
    # Templates of corrupt states that would decide differently if they were parsed
    # leniently ({now}: the server's clock; {index}: the current window's index).
    "",
    "garbage",
    "{now}\n",  # Lua's $ is the end of the string; Python's $ also takes a final newline
    " {now}",
    "{now} ",
    "-{now}",
    "{now}.0",
    "0x{now}",
    "+{now}",
    "1e30",
    "9" * 400,  # a TAT far in the future: a full bucket
    "\u0663{now}",  # a Unicode digit: Lua's %d does not take it, so Python may not either
    "0:{now}",  # the token bucket's former layout
    "{limit}:0:{index}",  # the sliding window's former layout
    # the sliding window's "<current + 1><previous><digits - 1><index mod 10>"
    "1{limit}0{phase}\n",
    "0{limit}0{phase}",  # a leading zero: Redis would not store it as an integer
    "+1{limit}0{phase}",
    "1{limit}0{phase}.0",
    "\u06631{limit}0{phase}",
    "{limit}0{phase}",  # no digit left for the current count
    "{limit}9{phase}",  # more digits for the previous count than there are
    "99",
    "1" + "9" * 30 + "0{phase}",  # counts above the limit count as the limit
    "9" * 30 + "00{phase}",
    "1" + "0" * 8 + "{limit}0{phase}",  # zeros before a count
    "1" + "0" * 11 + "{limit}0{phase}",  # 15 digits: the script splits it by arithmetic
    "1" + "0" * 12 + "{limit}0{phase}",  # 16: past 2^53 for some, split as a string
    "2" + "0" * 11 + "{limit}0{phase}",
    "2" + "0" * 12 + "{limit}0{phase}",
]

_WINDOW_LIKE = re.compile(r"[1-9][0-9]*[0-9][0-9]")
"""What a sliding window reads as its state (``lua/sliding_window.lua``'s pattern)."""

PARITY_SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# -- policies ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One bucket's policy: its algorithm, rate, capacity and cost."""

    algorithm: Algorithm
    rate: Rate
    limit: int
    """A token bucket's burst, or a sliding window's limit per window."""
    cost: int

    @property
    def params(self) -> tuple[int, ...]:
        """The bucket's full parameter set."""
        return bucket_parameters(self.algorithm, self.rate, self.limit, self.cost)

    @property
    def span_us(self) -> int:
        """A token bucket's time from empty to full, or a sliding window's length (the
        scale of its time, for drawing timestamps)."""
        if self.algorithm is Algorithm.TOKEN_BUCKET:
            inc, tau, _, _ = self.params
            return tau + inc
        return self.rate.period_seconds * MICRO

    def call(
        self, keys: tuple[str, ...], mode: Mode = Mode.DECIDE, *, full: bool = False
    ) -> ScriptCall:
        """A call over ``keys`` as Sentinel makes it (one key: the lean set, whose reply a
        token bucket makes a `OneKeyReply`), or with every set ``full``."""
        alone = len(keys) == 1 and not full
        own = bucket_parameters(self.algorithm, self.rate, self.limit, self.cost, alone=alone)
        if full and len(keys) == 1 and self.algorithm is Algorithm.SLIDING_WINDOW:
            own = (*own, self.limit)  # the ceiling: a one-key window's array reply
        return ScriptCall(self.algorithm, keys, (int(mode), *own * len(keys)))

    def read(self, call: ScriptCall, raw: object) -> ScriptReply:
        """The reply ``raw`` to ``call``, as the decision reads it."""
        return ScriptReply.read(raw, call.algorithm, call.args, self.cost, self.limit)


@st.composite
def token_bucket_cases(draw: st.DrawFn) -> Case:
    burst = draw(st.integers(1, 8))
    count = draw(st.sampled_from([1, 2, 3, 7, 1_000, 10_000]))
    period = draw(st.sampled_from([1, 60, 3_600]))
    cost = draw(st.integers(1, burst))
    return Case(Algorithm.TOKEN_BUCKET, Rate(count, period), burst, cost)


@st.composite
def sliding_window_cases(draw: st.DrawFn) -> Case:
    limit = draw(st.integers(1, 8))
    period = draw(st.sampled_from([1, 60, 3_600]))
    cost = draw(st.integers(1, limit))
    return Case(Algorithm.SLIDING_WINDOW, Rate(limit, period), limit, cost)


cases = st.one_of(token_bucket_cases(), sliding_window_cases())


# -- states, drawn relative to the clock they will be used with --------------------------


@dataclass(frozen=True)
class StateSpec:
    """A bucket state to inject, materialised once the server's clock is known."""

    garbage: str | None = None
    wrong_type: bool = False
    """A list instead of a string: GET fails with WRONGTYPE."""
    first: int = 0
    """Sliding window: the current window's count (unused by the token bucket)."""
    second: int = 0
    """Sliding window: the previous window's count (unused by the token bucket)."""
    windows_ago: int = 0
    offset_us: int = 0
    """Token bucket: the TAT's offset from the clock."""

    def render(self, case: Case, now_us: int) -> str:
        if self.garbage is not None:
            index = now_us // case.span_us
            return self.garbage.format(now=now_us, index=index, limit=case.limit, phase=index % 10)
        if case.algorithm is Algorithm.TOKEN_BUCKET:
            return str(max(0, now_us + self.offset_us))
        index = now_us // case.span_us - self.windows_ago
        return window_state(self.first, self.second, max(0, index))


def state_specs(case: Case) -> st.SearchStrategy[StateSpec]:
    if case.algorithm is Algorithm.TOKEN_BUCKET:
        inc, tau, _, _ = case.params
        structured = st.builds(
            StateSpec,
            offset_us=st.one_of(
                st.integers(-2 * case.span_us, 2 * case.span_us),  # includes beyond empty
                st.sampled_from([-1, 0, 1, tau - 1, tau, tau + 1, tau + inc, tau + inc + 1]),
                st.integers(-2_000, 2_000),
            ),
        )
    else:
        counts = st.integers(0, case.limit + 1)
        structured = st.builds(
            StateSpec,
            first=counts,
            second=counts,
            # the current window, the previous one, stale ones, and future ones (the
            # state keeps the index's last digit: ten windows away reads as this one)
            windows_ago=st.one_of(st.integers(-2, 3), st.sampled_from([-9, 5, 6, 9, 10, 11])),
        )
    return st.one_of(
        structured,
        st.builds(StateSpec, garbage=st.sampled_from(GARBAGE_STATES)),
        st.just(StateSpec(wrong_type=True)),
    )


@dataclass(frozen=True)
class Call:
    key_set: tuple[int, ...]
    mode: Mode = Mode.DECIDE
    full: bool = False
    """Send a one-key call's full parameter set (its reply: the array)."""


@dataclass(frozen=True)
class Inject:
    key: int
    state: StateSpec


Operation = Call | Inject

MODES = st.sampled_from([Mode.DECIDE, Mode.DECIDE, Mode.DECIDE, Mode.PEEK, Mode.RESET])


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Case, list[Operation]]:
    case = draw(cases)
    calls = st.builds(Call, st.sampled_from(KEY_SETS), MODES, st.booleans())
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
    values: list[State]
    pttls: list[int]


def snapshot(client: redis.Redis, keys: Sequence[str]) -> Snapshot:
    pipe = client.pipeline(transaction=True)
    pipe.time()
    for key in keys:
        pipe.get(key)
        pipe.pttl(key)
    (seconds, micros), *rest = pipe.execute(raise_on_error=False)
    values = [_state(raw) for raw in rest[0::2]]
    return Snapshot(seconds * MICRO + micros, values, [int(t) for t in rest[1::2]])


def _state(raw: bytes | Exception | None) -> State:
    if isinstance(raw, redis.ResponseError):
        assert str(raw).startswith("WRONGTYPE")
        return WRONG_TYPE
    assert not isinstance(raw, Exception)
    return None if raw is None else raw.decode()


def server_time_us(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * MICRO + int(micros)


# -- the parity check ----------------------------------------------------------------------


def check_one_call(
    store: RedisStore, client: redis.Redis, case: Case, call: ScriptCall
) -> ScriptReply:
    """Run ``call`` of ``case`` on Redis and hold its reply and writes against the reference."""
    before = snapshot(client, call.keys)
    raw = store.run(call)
    after = snapshot(client, call.keys)

    if isinstance(raw, int):
        now = time_of(call, raw, before, after)
        expected, writes = run_reference(call, before.values, now)
        assert raw == expected, f"states {before.values} at {now}"
        reply = case.read(call, raw)
    else:
        reply = ScriptReply(*raw)
        expected, writes = run_reference(call, before.values, reply.now_us)
        assert reply == expected, f"states {before.values} at {reply.now_us}"
    elapsed_ms = after.time_us // 1_000 - before.time_us // 1_000

    if writes is None:  # a denial or a peek writes nothing: same value, no TTL extension
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


def time_of(call: ScriptCall, raw: OneKeyReply, before: Snapshot, after: Snapshot) -> int:
    """The ``TIME`` the integer reply ``raw`` to ``call`` was made at, which it leaves out:
    the first instant between the two snapshots at which the reference gives this reply
    and writes what the keys hold (or held: a TTL of a millisecond can run out)."""
    for now in range(before.time_us, after.time_us + 1):
        expected, writes = run_reference(call, before.values, now)
        held = all(after.values[write.index] in (None, write.value) for write in writes or ())
        if expected == raw and held:
            return now
    raise AssertionError(
        f"no instant from {before.time_us} to {after.time_us} gives {raw}: {before.values}"
    )


def run_scenario(
    store: RedisStore, client: redis.Redis, case: Case, operations: Sequence[Operation]
) -> list[ScriptReply]:
    client.flushall()
    replies = []
    for operation in operations:
        if isinstance(operation, Inject):
            key = KEYS[operation.key]
            client.delete(key)
            if operation.state.wrong_type:
                client.rpush(key, "not a bucket")
                continue
            # no TTL: the state stays until a call replaces it, however stale it gets
            client.set(key, operation.state.render(case, server_time_us(client)))
        else:
            keys = tuple(KEYS[index] for index in operation.key_set)
            call = case.call(keys, operation.mode, full=operation.full)
            replies.append(check_one_call(store, client, case, call))
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
    # 2000 tokens per second: refills happen between two calls, denials too
    fast = Case(case.algorithm, Rate(2_000, 1), case.limit, case.cost)
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


TOKEN_BUCKET_3_PER_3H = Case(Algorithm.TOKEN_BUCKET, Rate(1, 3_600), 3, 1)
SLIDING_WINDOW_3_PER_H = Case(Algorithm.SLIDING_WINDOW, Rate(3, 3_600), 3, 1)


def test_sequence_exhausts_then_denies_on_both_scripts(
    store: RedisStore, client: redis.Redis
) -> None:
    """A deterministic anchor: burst 3 at one per hour admits three, then denies (over
    two keys, and over one: a token bucket's `OneKeyReply`, read back)."""
    for case, key_set in itertools.product(
        (TOKEN_BUCKET_3_PER_3H, SLIDING_WINDOW_3_PER_H), ((0, 1), (0,))
    ):
        replies = run_scenario(store, client, case, [Call(key_set)] * 5)
        assert [reply.allowed for reply in replies] == [1, 1, 1, 0, 0]
        assert [reply.remaining for reply in replies[:3]] == [2, 1, 0]
        assert all(reply.retry_after_seconds >= 1 for reply in replies[3:])
        assert all(reply.wait_us > 0 for reply in replies[3:])


def test_peek_writes_nothing_and_reset_refills(store: RedisStore, client: redis.Redis) -> None:
    for case in (TOKEN_BUCKET_3_PER_3H, SLIDING_WINDOW_3_PER_H):
        spend = [Call((0,))] * 3
        peeks = run_scenario(store, client, case, [*spend, Call((0,), Mode.PEEK)])
        assert peeks[-1].allowed == 0
        value, ttl = client.get(KEYS[0]), client.pttl(KEYS[0])
        again = check_one_call(store, client, case, case.call((KEYS[0],), Mode.PEEK))
        assert again.allowed == 0
        assert client.get(KEYS[0]) == value
        assert 0 <= ttl - client.pttl(KEYS[0]) <= 50
        check_one_call(store, client, case, case.call((KEYS[0],), Mode.RESET))
        after = [check_one_call(store, client, case, case.call((KEYS[0],))) for _ in range(4)]
        assert [reply.allowed for reply in after] == [1, 1, 1, 0]


def test_denial_by_one_bucket_leaves_the_other_untouched(
    store: RedisStore, client: redis.Redis
) -> None:
    """The anonymous AND: the IP bucket is empty, so the device bucket is not charged."""
    for case in (
        Case(Algorithm.TOKEN_BUCKET, Rate(1, 3_600), 2, 1),
        Case(Algorithm.SLIDING_WINDOW, Rate(2, 3_600), 2, 1),
    ):
        replies = run_scenario(store, client, case, [Call((2, 1)), Call((2, 1)), Call((0, 1))])
        assert [reply.allowed for reply in replies] == [1, 1, 0]
        assert replies[2].binding == 2  # the IP bucket denied
        assert client.exists(KEYS[0]) == 0


# -- properties of the references (pure, no Redis) -----------------------------------------

NOW = st.integers(1_600_000_000 * MICRO, 2_000_000_000 * MICRO)
Situation = tuple[Case, ScriptCall, list[State], int]
"""A policy, a call of it, the states of its keys, and the clock."""


def decide(
    case: Case, call: ScriptCall, states: Sequence[State], now: int
) -> tuple[ScriptReply, list[Write] | None]:
    """The reference's reply to ``call`` (read, as the decision reads it) and its writes."""
    raw, writes = run_reference(call, states, now)
    return case.read(call, raw), writes


@st.composite
def reference_situations(draw: st.DrawFn) -> Situation:
    case = draw(cases)
    now = draw(NOW)
    specs = draw(st.lists(st.one_of(st.none(), state_specs(case)), min_size=1, max_size=2))
    states: list[State] = [
        None if spec is None else WRONG_TYPE if spec.wrong_type else spec.render(case, now)
        for spec in specs
    ]
    keys = tuple(f"k{index}" for index in range(len(states)))
    return case, case.call(keys), states, now


def _from_this_clock(spec: StateSpec | None, case: Case) -> bool:
    """Whether this clock could have written ``spec`` (allowing TIME to have gone back by
    up to one window). A value from further ahead is a data error: read as a full bucket
    now, it becomes a real one once TIME catches up, so another bucket's Retry-After
    cannot account for it."""
    if spec is None or spec.wrong_type:
        return True
    if spec.garbage is not None:
        # A garbage value that reads as a window state with a fixed last digit ("9" *
        # 400) is, to a sliding window, a window up to nine ahead of whatever the clock
        # says: as time passes it may read as the next window, which no wait foresees.
        fixed_window = "{phase}" not in spec.garbage and _WINDOW_LIKE.fullmatch(spec.garbage)
        return case.algorithm is Algorithm.TOKEN_BUCKET or not fixed_window
    if case.algorithm is Algorithm.TOKEN_BUCKET:
        return spec.offset_us <= case.span_us
    # A window state outlives its window by one window at most (its TTL); one kept
    # longer (injected without a TTL) is read by its index's last digit, so some
    # windows later it would pass for the next window: not a state Redis can hold.
    return -1 <= spec.windows_ago <= 3


@st.composite
def clock_situations(draw: st.DrawFn) -> Situation:
    case = draw(cases)
    now = draw(NOW)
    specs = draw(st.lists(st.one_of(st.none(), state_specs(case)), min_size=1, max_size=2))
    assume(all(_from_this_clock(spec, case) for spec in specs))
    states: list[State] = [
        None if spec is None else WRONG_TYPE if spec.wrong_type else spec.render(case, now)
        for spec in specs
    ]
    keys = tuple(f"k{index}" for index in range(len(states)))
    return case, case.call(keys), states, now


@settings(max_examples=300, deadline=None)
@given(situation=clock_situations())
def test_the_wait_is_exactly_when_the_buckets_admit_again(
    situation: Situation,
) -> None:
    case, call, states, now = situation
    reply, writes = decide(case, call, states, now)
    if reply.allowed:
        assert reply.wait_us == reply.retry_after_seconds == 0
        assert writes is not None
        return
    assert writes is None
    assert reply.wait_us >= 1
    assert reply.retry_after_seconds == -(-reply.wait_us // MICRO)
    later, _ = decide(case, call, states, now + reply.wait_us)
    assert later.allowed, f"still denied {reply.wait_us} us later: {states}"
    sooner, _ = decide(case, call, states, now + reply.wait_us - 1)
    assert not sooner.allowed, f"admitted before {reply.wait_us} us: {states}"


@settings(max_examples=300, deadline=None)
@given(situation=reference_situations())
def test_retry_after_stays_within_the_policy_horizon(
    situation: Situation,
) -> None:
    """Whatever a bucket holds (garbage, a TAT or a window far in the future), a denial
    never asks for more than one request's refill time or three windows (two, plus the
    wait for a window ahead of TIME)."""
    case, call, states, now = situation
    reply, _ = decide(case, call, states, now)
    inc_or_window = call.args[1] if call.algorithm is Algorithm.TOKEN_BUCKET else call.args[2]
    horizon = inc_or_window if call.algorithm is Algorithm.TOKEN_BUCKET else 3 * inc_or_window
    assert reply.wait_us <= horizon


@settings(max_examples=200, deadline=None)
@given(situation=reference_situations())
def test_a_state_past_its_ttl_decides_like_an_absent_key(
    situation: Situation,
) -> None:
    _, call, states, now = situation
    _, writes = run_reference(call, states, now)
    if writes is None:
        return
    written: list[State] = [write.value for write in writes]
    for write in writes:
        # Redis drops the key once its TTL is over: at now + ttl or any time after
        expired = now + write.ttl_ms * 1_000
        without: list[State] = list(written)
        without[write.index] = None
        assert run_reference(call, written, expired) == run_reference(call, without, expired)


@settings(max_examples=200, deadline=None)
@given(case=cases, now=NOW)
def test_an_empty_key_is_a_full_bucket(case: Case, now: int) -> None:
    reply, writes = decide(case, case.call(("k",)), [None], now)
    assert reply.allowed
    assert reply.remaining == case.limit - case.cost
    assert writes is not None
    assert writes[0].ttl_ms >= 1
    assert decide(case, case.call(("k",)), [WRONG_TYPE], now) == (reply, writes)
    assert repr(WRONG_TYPE) == "WRONG_TYPE"


@settings(max_examples=300, deadline=None)
@given(situation=reference_situations(), mode=MODES)
def test_a_one_key_reply_reads_as_the_full_reply(situation: Situation, mode: Mode) -> None:
    """A `OneKeyReply` (a one-key call without cost and burst) says everything the array
    of the same call with them says, but TIME: read with the policy's cost and burst, it
    is that array with ``now_us`` 0, and the writes are the same."""
    case, _, states, now = situation
    lean, full = case.call(("k",), mode), case.call(("k",), mode, full=True)
    raw, writes = run_reference(lean, states[:1], now)
    array, full_writes = run_reference(full, states[:1], now)
    assert isinstance(array, ScriptReply)
    window = case.algorithm is Algorithm.SLIDING_WINDOW
    # A token bucket's one key always answers an integer; a window's when it admits.
    assert isinstance(raw, int) == (not window or (array.allowed and mode is not Mode.RESET))
    if not isinstance(raw, int):
        assert case.read(lean, raw) == array
    elif window:  # the time to the window's end, in whole ms, and its whole seconds
        reset_ms = -(-array.reset_us // 1_000)
        assert case.read(lean, raw) == array._replace(now_us=0, reset_us=reset_ms * 1_000)
        assert case.read(lean, raw).reset_seconds == array.reset_seconds
    else:
        assert case.read(lean, raw) == array._replace(now_us=0)
    assert writes == full_writes


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
    call = ScriptCall(device.algorithm, keys, (0, *device.params, *network.params))
    for _ in range(data.draw(st.integers(1, 12))):
        check_one_call(store, client, device, call)


@pytest.mark.parametrize(
    ("current", "previous"),
    [
        (0, 3_000_000_000),  # a ten-digit previous count, the state still below 10^15
        (1_000_000_000, 3_000_000_000),  # a state of 22 digits: written as a string
        (4_000_000_000, 0),
    ],
)
def test_sliding_window_parity_on_counts_of_ten_digits(
    store: RedisStore, client: redis.Redis, current: int, previous: int
) -> None:
    limit = 5_000_000_000  # per second: (limit + cost) x window stays below 2^53
    case = Case(Algorithm.SLIDING_WINDOW, Rate(limit, 1), limit, 1)
    operations: list[Operation] = [
        Inject(0, StateSpec(first=current, second=previous)),
        *[Call((0,))] * 3,
    ]
    replies = run_scenario(store, client, case, operations)
    assert all(reply.allowed for reply in replies)
