"""Reserve, then settle (SPEC §2 ``settle``, §3 ``reserve``): usage known after the work.

Through the facade, on ``memory://`` and a real redis-server (and the cluster with
``--redis-store=cluster``). The buckets refill slowly (per day, per month) so that the
milliseconds a test takes never move an integer it checks; where time must pass (a
debt paid off) the memory store runs on an injected clock and the test moves it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from sentinel_core import BreakerState, ConfigError, DecisionReason, Reservation, Sentinel
from tests.support.race import run_processes
from tests.support.redis_server import RedisServer, free_port

DAY = 86_400
TENANT = "acme"


def token_bucket(**fields: Any) -> dict[str, Any]:
    return {
        "algorithm": "token_bucket",
        "rate": "100/day",
        "burst": 100,
        "cost": 10,
        "fail_mode": "closed",
        "settle": True,
        **fields,
    }


def sliding_window(**fields: Any) -> dict[str, Any]:
    return {
        "algorithm": "sliding_window",
        "rate": "100/day",
        "cost": 10,
        "fail_mode": "closed",
        "settle": True,
        **fields,
    }


def quota(**fields: Any) -> dict[str, Any]:
    return {
        "algorithm": "quota",
        "rate": "100/month",
        "cost": 10,
        "fail_mode": "closed",
        "settle": True,
        **fields,
    }


POLICIES = {
    "llm.tb": token_bucket(),
    "llm.sw": sliding_window(),
    "llm.quota": quota(),
    "llm.layered": {
        **sliding_window(rates=["100/day", "80/hour"], cost=1),
        "algorithm": "token_bucket",
    },
    "llm.small": token_bucket(cost=1),
    "plain": {"algorithm": "token_bucket", "rate": "100/day", "fail_mode": "closed"},
}
del POLICIES["llm.layered"]["rate"]


class Clock:
    """A monotonic clock the test moves (the memory store's and the limiters')."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def build(url: str, policies: dict[str, Any] = POLICIES, **options: Any) -> Sentinel:
    config = {"redis_url": url, "socket_timeout_ms": 2_000, "policies": policies}
    config.update(options.pop("config", {}))
    return Sentinel(config, registry=CollectorRegistry(), entry_points=False, **options)


@pytest.fixture(params=["memory", "redis"])
def store_url(request: pytest.FixtureRequest) -> str:
    """``memory://``, or the private redis-server (the cluster with --redis-store=cluster)."""
    if request.param == "memory":
        return "memory://"
    url: str = request.getfixturevalue("redis_url")
    return url


@pytest.fixture
async def make(store_url: str) -> AsyncIterator[Callable[..., Sentinel]]:
    built: list[Sentinel] = []

    def make(policies: dict[str, Any] = POLICIES, **options: Any) -> Sentinel:
        sentinel = build(store_url, policies, **options)
        built.append(sentinel)
        return sentinel

    yield make
    for sentinel in built:
        sentinel.close()
        await sentinel.aclose()


@pytest.fixture
def sentinel(make: Callable[..., Sentinel]) -> Sentinel:
    return make()


def remaining(sentinel: Sentinel, endpoint_id: str, tenant: Any = TENANT) -> int:
    """The units left: a quota's through ``usage``, the others' through ``peek`` (which
    tells what would be left after one more request of the policy's cost)."""
    if sentinel.policy(endpoint_id).algorithm.value == "quota":
        return sentinel.usage(endpoint_id, tenant).remaining
    return sentinel.peek(endpoint_id, tenant).remaining + sentinel.policy(endpoint_id).cost


def units(
    sentinel: Sentinel, name: str = "sentinel_units_total", endpoint: str = "llm.tb"
) -> float:
    value = sentinel.registry.get_sample_value(name, {"endpoint_id": endpoint})
    return 0.0 if value is None else value


# -- refund, excess, exact --------------------------------------------------------------------


@pytest.mark.parametrize("endpoint_id", ["llm.small", "llm.sw", "llm.quota"])
def test_a_settlement_refunds_what_was_reserved_and_not_used(
    sentinel: Sentinel, endpoint_id: str
) -> None:
    reservation = sentinel.reserve(endpoint_id, TENANT, units=10)
    assert reservation.decision.allowed
    assert reservation.reserved == 10
    assert remaining(sentinel, endpoint_id) == 90
    reservation.settle(3)
    assert remaining(sentinel, endpoint_id) == 97


@pytest.mark.parametrize("endpoint_id", ["llm.small", "llm.sw", "llm.quota"])
def test_a_settlement_charges_the_excess(sentinel: Sentinel, endpoint_id: str) -> None:
    sentinel.reserve(endpoint_id, TENANT, units=10).settle(25)
    assert remaining(sentinel, endpoint_id) == 75
    sentinel.reserve(endpoint_id, TENANT, units=10).settle(0)
    assert remaining(sentinel, endpoint_id) == 75


def test_a_token_bucket_settles_to_the_microsecond(sentinel: Sentinel) -> None:
    """The cost-1 twin sees every unit: 100 - 25 - 3 left, after a refund and an excess."""
    sentinel.reserve("llm.small", TENANT, units=10).settle(25)
    sentinel.reserve("llm.small", TENANT, units=10).settle(3)
    assert remaining(sentinel, "llm.small") == 72
    assert units(sentinel, endpoint="llm.small") == 28


def test_settling_zero_refunds_the_whole_reservation(sentinel: Sentinel) -> None:
    for _ in range(20):  # far more than the bucket holds, each refunded in full
        reservation = sentinel.reserve("llm.small", TENANT, units=100)
        assert reservation.decision.allowed
        reservation.settle(0)
    assert remaining(sentinel, "llm.small") == 100


def test_an_exact_reservation_costs_no_second_script_call(redis_server: RedisServer) -> None:
    client = redis_server.client()
    client.flushall()
    sentinel = build(redis_server.url)
    try:
        sentinel.reserve("llm.tb", TENANT).settle(1)  # loads the scripts, connects
        client.config_resetstat()
        sentinel.reserve("llm.tb", TENANT).settle(10)
        assert client.info("commandstats")["cmdstat_evalsha"]["calls"] == 1
        sentinel.reserve("llm.tb", TENANT).settle(11)
        assert client.info("commandstats")["cmdstat_evalsha"]["calls"] == 3
    finally:
        sentinel.close()
        client.close()


def test_layered_rates_are_settled_together(sentinel: Sentinel) -> None:
    """Refunded in both layers: the second (80) binds at 75 (74 after one more); the
    first, unrefunded, would have bound at 50."""
    reservation = sentinel.reserve("llm.layered", TENANT, units=50)
    assert reservation.decision.allowed
    reservation.settle(5)
    decision = sentinel.peek("llm.layered", TENANT)
    assert (decision.limit, decision.remaining) == (80, 74)
    sentinel.reserve("llm.layered", TENANT, units=10).settle(90)  # 95: the hour's in debt
    decision = sentinel.peek("llm.layered", TENANT)
    assert (decision.limit, decision.remaining, decision.allowed) == (80, 0, False)
    assert sentinel.reserve("llm.layered", TENANT, units=1).decision.allowed is False


# -- debt --------------------------------------------------------------------------------------


@pytest.mark.parametrize("endpoint_id", ["llm.tb", "llm.sw", "llm.quota"])
def test_an_excess_beyond_what_remains_puts_the_bucket_in_debt_and_denies(
    sentinel: Sentinel, endpoint_id: str
) -> None:
    sentinel.reserve(endpoint_id, TENANT).settle(150)
    denied = sentinel.reserve(endpoint_id, TENANT)
    assert not denied.decision.allowed
    assert denied.decision.reason is DecisionReason.RATE_LIMITED
    assert denied.decision.remaining == 0
    assert denied.decision.retry_after_seconds is not None
    denied.settle(0)  # nothing was reserved: nothing to settle
    if endpoint_id == "llm.quota":
        assert sentinel.usage(endpoint_id, TENANT).used == 150


def test_the_token_bucket_debt_stops_one_capacity_below_empty(sentinel: Sentinel) -> None:
    """100/day, cost 10: one unit refills in 864 s. Empty for a request of 10 is 100
    units ahead, debt one capacity (100) more: the next request waits for 110 units."""
    first, second = sentinel.reserve("llm.tb", TENANT), sentinel.reserve("llm.tb", TENANT)
    first.settle(10**12)
    second.settle(10**12)  # already at the bound: no further
    decision = sentinel.reserve("llm.tb", TENANT).decision
    assert decision.retry_after_seconds == 110 * 864
    assert decision.reset_seconds >= decision.retry_after_seconds


def test_the_sliding_window_debt_stops_at_twice_the_limit(sentinel: Sentinel) -> None:
    """Counted as 200 in this window (not the 10**12 used): 10 more fit once it weighs
    90 in the next, (1 - 90 / 200) of a day into it."""
    sentinel.reserve("llm.sw", TENANT).settle(10**12)
    decision = sentinel.reserve("llm.sw", TENANT).decision
    elapsed = time.time() % DAY  # windows are aligned on the epoch; TIME is this clock
    expected = 2 * DAY - elapsed - DAY * 90 / 200
    assert decision.retry_after_seconds is not None
    assert abs(decision.retry_after_seconds - expected) <= 2


def test_the_quota_debt_stops_at_twice_the_limit(sentinel: Sentinel) -> None:
    sentinel.reserve("llm.quota", TENANT).settle(10**12)
    assert sentinel.usage("llm.quota", TENANT).used == 200


@pytest.mark.parametrize("endpoint_id", ["llm.tb", "llm.sw"])
def test_retry_after_under_debt_is_exact(endpoint_id: str) -> None:
    """Denied a second before Retry-After, admitted at it: the memory store's clock moved."""
    clock = Clock()
    sentinel = build("memory://", clock=clock)
    sentinel.reserve(endpoint_id, TENANT).settle(170)
    retry_after = sentinel.reserve(endpoint_id, TENANT).decision.retry_after_seconds
    assert retry_after is not None
    assert retry_after > DAY // 2
    clock.advance(retry_after - 1)
    late = sentinel.reserve(endpoint_id, TENANT).decision
    assert not late.allowed
    assert late.retry_after_seconds == 1
    clock.advance(1)
    assert sentinel.reserve(endpoint_id, TENANT).decision.allowed


def test_a_quota_in_debt_is_denied_until_the_period_ends(sentinel: Sentinel) -> None:
    sentinel.reserve("llm.quota", TENANT).settle(130)
    with sentinel.reserve("llm.quota", TENANT) as denied:  # left unsettled: charged nothing
        decision = denied.decision
    assert not decision.allowed
    assert decision.retry_after_seconds == decision.reset_seconds
    assert sentinel.usage("llm.quota", TENANT).used == 130
    assert units(sentinel, endpoint="llm.quota") == 130


def test_a_refund_lifts_this_process_s_local_denial(sentinel: Sentinel) -> None:
    held = sentinel.reserve("llm.tb", TENANT, units=100)
    assert not sentinel.reserve("llm.tb", TENANT).decision.allowed  # remembered locally
    held.settle(0)
    assert sentinel.reserve("llm.tb", TENANT).decision.allowed


# -- the reservation object ------------------------------------------------------------------


def test_a_reservation_settles_once(sentinel: Sentinel) -> None:
    reservation = sentinel.reserve("llm.tb", TENANT)
    reservation.settle(4)
    with pytest.raises(RuntimeError, match="already settled"):
        reservation.settle(4)


async def test_an_async_reservation_settles_once(sentinel: Sentinel) -> None:
    reservation = await sentinel.areserve("llm.small", TENANT, units=20)
    assert reservation.decision.remaining == 80
    await reservation.asettle(5)
    with pytest.raises(RuntimeError, match="already settled"):
        await reservation.asettle(5)
    assert (await sentinel.apeek("llm.small", TENANT)).remaining == 95 - 1


def test_a_reservation_left_unsettled_stays_charged_as_reserved(sentinel: Sentinel) -> None:
    with sentinel.reserve("llm.small", TENANT, units=30) as reservation:
        assert isinstance(reservation, Reservation)
    with pytest.raises(RuntimeError, match="already settled"):
        reservation.settle(1)
    with pytest.raises(ZeroDivisionError), sentinel.reserve("llm.small", TENANT, units=5):
        _ = 1 / 0
    assert remaining(sentinel, "llm.small") == 65
    assert units(sentinel, endpoint="llm.small") == 35


async def test_a_settled_reservation_leaves_its_context_as_settled(sentinel: Sentinel) -> None:
    async with await sentinel.areserve("llm.small", TENANT, units=30) as reservation:
        await reservation.asettle(2)
    assert (await sentinel.apeek("llm.small", TENANT)).remaining == 98 - 1
    assert units(sentinel, endpoint="llm.small") == 2


@pytest.mark.parametrize("bad", [1.0, 2.5, "3", True, False, None])
def test_units_of_another_type_are_a_type_error(sentinel: Sentinel, bad: Any) -> None:
    reservation = sentinel.reserve("llm.tb", TENANT)
    with pytest.raises(TypeError, match="units must be an int"):
        reservation.settle(bad)
    reservation.settle(10)  # a refused call settled nothing


async def test_negative_units_are_a_value_error(sentinel: Sentinel) -> None:
    reservation = await sentinel.areserve("llm.tb", TENANT)
    with pytest.raises(ValueError, match="0 or more, got -1"):
        await reservation.asettle(-1)
    with pytest.raises(TypeError):
        await reservation.asettle(1.5)  # type: ignore[arg-type]


def test_a_reservation_names_units_a_bucket_can_hold(sentinel: Sentinel) -> None:
    with pytest.raises(ValueError, match="from 1 to the limit 100"):
        sentinel.reserve("llm.tb", TENANT, units=0)
    with pytest.raises(ValueError, match="from 1 to the limit 80"):
        sentinel.reserve("llm.layered", TENANT, units=81)
    with pytest.raises(TypeError, match="not float"):
        sentinel.reserve("llm.tb", TENANT, units=1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'plain' is not a settle policy"):
        sentinel.reserve("plain", TENANT)


async def test_an_async_reservation_checks_its_policy_too(sentinel: Sentinel) -> None:
    with pytest.raises(ValueError, match="not a settle policy"):
        await sentinel.areserve("plain", TENANT)


def test_an_anonymous_reservation_settles_device_and_network() -> None:
    secret = "s" * 32
    sentinel = build(
        "memory://",
        {"anon": token_bucket(identity="anonymous", cost=1, network_burst=100)},
        config={"anonymous": {"cookie_secret": secret}},
    )
    identity = sentinel.anonymous_identity("203.0.113.9", "a" * 22)
    sentinel.reserve("anon", identity, units=40).settle(50)
    assert remaining(sentinel, "anon", identity) == 50  # both at 50
    other = sentinel.anonymous_identity("203.0.113.9", "b" * 22)
    assert remaining(sentinel, "anon", other) == 50  # the shared network's bucket


# -- failures: counted and logged, never raised -----------------------------------------------


def test_a_settlement_the_store_refuses_is_counted_and_logged_never_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = RedisServer().start()
    sentinel = build(server.url, config={"breaker": {"failure_threshold": 2}})
    try:
        held = [sentinel.reserve("llm.tb", TENANT) for _ in range(3)]
        server.stop()
        with caplog.at_level(logging.WARNING, logger="sentinel"):
            held[0].settle(4)  # refused: 6 units unsettled
            held[1].settle(25)  # refused: 15 more
            held[2].settle(10)  # exact: nothing to send
        assert units(sentinel, "sentinel_unsettled_units_total") == 21
        assert units(sentinel) == 30
        records = [r for r in caplog.records if "settlement on llm.tb" in r.getMessage()]
        assert len(records) == 1  # one per endpoint per second
        assert "4 units used, 10 reserved stay charged" in records[0].getMessage()
    finally:
        sentinel.close()
        server.close()


async def test_a_settlement_skipped_by_an_open_breaker_is_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = RedisServer().start()
    sentinel = build(server.url, config={"breaker": {"failure_threshold": 2}})
    try:
        held = await sentinel.areserve("llm.tb", TENANT)
        second = await sentinel.areserve("llm.tb", TENANT)
        server.stop()
        with caplog.at_level(logging.WARNING, logger="sentinel"):
            await held.asettle(12)  # refused: 2 units unsettled (no verdict on the breaker)
            for _ in range(2):  # two decisions fail: the breaker opens
                failed = await sentinel.areserve("llm.tb", TENANT)
                assert failed.decision.reason is DecisionReason.FAIL_CLOSED
            await second.asettle(0)  # no call: 10 more, logged within the same second
            await failed.asettle(50)  # the store never charged it: nothing to settle
        assert units(sentinel, "sentinel_unsettled_units_total") == 12
        assert units(sentinel) == 20
        records = [r for r in caplog.records if "settlement on llm.tb" in r.getMessage()]
        assert len(records) == 1
        assert "12 units used, 10 reserved stay charged" in records[0].getMessage()
        assert sentinel.breaker_state is BreakerState.OPEN
    finally:
        sentinel.close()
        await sentinel.aclose()
        server.close()


def test_the_open_breaker_is_named_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    server = RedisServer().start()
    sentinel = build(server.url, config={"breaker": {"failure_threshold": 1}})
    try:
        held = sentinel.reserve("llm.tb", TENANT)
        server.stop()
        assert sentinel.reserve("llm.tb", TENANT).decision.reason is DecisionReason.FAIL_CLOSED
        with caplog.at_level(logging.WARNING, logger="sentinel"):
            held.settle(3)
        assert (
            "settlement on llm.tb not made (the circuit breaker is open): "
            "3 units used, 10 reserved stay charged"
        ) in caplog.text
    finally:
        sentinel.close()
        server.close()


# -- configuration ---------------------------------------------------------------------------


def test_settle_is_a_boolean_of_three_algorithms() -> None:
    with pytest.raises(ConfigError, match=r"policies\.c\.settle: concurrency policies count"):
        build(
            "memory://",
            {"c": {"algorithm": "concurrency", "limit": 2, "fail_mode": "closed", "settle": True}},
        )
    with pytest.raises(ConfigError, match=r"policies\.t\.settle"):
        build("memory://", {"t": token_bucket(settle="yes")})
    sentinel = build("memory://", {"t": token_bucket(settle=False)})
    assert sentinel.policy("t").settle is False


def test_settle_policies_keep_their_arithmetic_below_2_to_the_53() -> None:
    with pytest.raises(ConfigError, match=r"policies\.t\.burst: too large"):
        build("memory://", {"t": token_bucket(rate="1/day", burst=25_000, cost=1)})
    build("memory://", {"t": token_bucket(rate="1/day", burst=25_000, cost=1, settle=False)})
    with pytest.raises(ConfigError, match=r"policies\.w\.rate: too large"):
        build("memory://", {"w": sliding_window(rate="50000/day", cost=1)})
    build("memory://", {"w": sliding_window(rate="50000/day", cost=1, settle=False)})


# -- races: exactly where the arithmetic says -------------------------------------------------

RACERS = 40


def used_by(racer: int) -> int:
    return racer % 23  # 0 to 22 against a reservation of 10: refunds and excesses


@pytest.mark.parametrize("endpoint_id", ["llm.small", "llm.sw", "llm.quota"])
def test_racing_threads_end_where_the_arithmetic_says(
    make: Callable[..., Sentinel], endpoint_id: str
) -> None:
    policies = {**POLICIES, "llm.sw": sliding_window(rate="1000/day", cost=1)}
    policies["llm.small"] = token_bucket(rate="1000/day", burst=1000, cost=1)
    policies["llm.quota"] = quota(rate="1000/month", cost=1)
    sentinel = make(policies)

    def racer(index: int) -> bool:
        reservation = sentinel.reserve(endpoint_id, TENANT, units=10)
        reservation.settle(used_by(index))
        return reservation.decision.allowed

    with ThreadPoolExecutor(max_workers=16) as pool:
        admitted = list(pool.map(racer, range(RACERS)))
    assert all(admitted)
    spent = sum(used_by(index) for index in range(RACERS))
    if endpoint_id == "llm.quota":
        assert sentinel.usage(endpoint_id, TENANT).used == spent
    else:
        assert remaining(sentinel, endpoint_id) == 1000 - spent


@pytest.mark.parametrize("endpoint_id", ["llm.small", "llm.sw"])
async def test_racing_coroutines_end_where_the_arithmetic_says(
    make: Callable[..., Sentinel], endpoint_id: str
) -> None:
    policies = {**POLICIES, "llm.sw": sliding_window(rate="1000/day", cost=1)}
    policies["llm.small"] = token_bucket(rate="1000/day", burst=1000, cost=1)
    sentinel = make(policies)

    async def racer(index: int) -> bool:
        reservation = await sentinel.areserve(endpoint_id, TENANT, units=10)
        await asyncio.sleep(0)  # the others reserve meanwhile
        await reservation.asettle(used_by(index))
        return reservation.decision.allowed

    admitted = await asyncio.gather(*(racer(index) for index in range(RACERS)))
    assert all(admitted)
    spent = sum(used_by(index) for index in range(RACERS))
    assert (await sentinel.apeek(endpoint_id, TENANT)).remaining + 1 == 1000 - spent


def settle_in_threads(url: str, endpoint_id: str, start: Any, results: Any) -> None:
    """A process's racers (`run_processes` target): 8 threads, 2 reservations each,
    settled at `used_by` their index; reports whether each was admitted."""
    policies = {endpoint_id: token_bucket(rate="1000/day", burst=1000, cost=1)}
    if endpoint_id == "llm.sw":
        policies = {endpoint_id: sliding_window(rate="1000/day", cost=1)}
    try:
        sentinel = build(url, policies)
        start.wait()

        def racer(index: int) -> bool:
            reservation = sentinel.reserve(endpoint_id, TENANT, units=10)
            reservation.settle(used_by(index))
            return reservation.decision.allowed

        with ThreadPoolExecutor(max_workers=8) as pool:
            results.put(list(pool.map(racer, range(16))))
        sentinel.close()
    except BaseException as exc:
        results.put(repr(exc))
        raise


@pytest.mark.slow
@pytest.mark.parametrize("endpoint_id", ["llm.small", "llm.sw"])
def test_racing_processes_end_where_the_arithmetic_says(redis_url: str, endpoint_id: str) -> None:
    reports = run_processes(settle_in_threads, (redis_url, endpoint_id), 3)
    assert all(admitted for report in reports for admitted in report)
    spent = 3 * sum(used_by(index) for index in range(16))
    policies = {endpoint_id: token_bucket(rate="1000/day", burst=1000, cost=1)}
    if endpoint_id == "llm.sw":
        policies = {endpoint_id: sliding_window(rate="1000/day", cost=1)}
    sentinel = build(redis_url, policies)
    try:
        assert remaining(sentinel, endpoint_id) == 1000 - spent
    finally:
        sentinel.close()


def test_a_shadow_denial_charged_nothing_and_settles_nothing(sentinel: Sentinel) -> None:
    sentinel = build(sentinel.config.redis_url, {"s": token_bucket(shadow=True)})
    try:
        sentinel.reserve("s", TENANT).settle(150)  # into debt
        shadowed = sentinel.reserve("s", TENANT)
        assert shadowed.decision.allowed  # shadow mode never denies
        assert not shadowed.decision.would_allow
        shadowed.settle(40)  # the store charged nothing: nothing to settle
        assert units(sentinel, endpoint="s") == 150
    finally:
        sentinel.close()


def test_a_fail_open_reservation_the_store_never_saw_settles_nothing() -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    policies = {"open": token_bucket(fail_mode="open", fallback_rate="10/second")}
    sentinel = build(dead, policies, config={"socket_timeout_ms": 50})
    try:
        reservation = sentinel.reserve("open", TENANT)
        assert reservation.decision.allowed
        assert reservation.decision.reason is DecisionReason.REDIS_CONNECTION_ERROR
        reservation.settle(99)
        assert units(sentinel, endpoint="open") == 0
        assert units(sentinel, "sentinel_unsettled_units_total", "open") == 0
    finally:
        sentinel.close()
