"""Calendar quotas (SPEC §2 ``algorithm: "quota"``): N requests per day, ISO week or
month of a time zone, counted in the period that Redis TIME falls in.

The calendar arithmetic (month ends, leap days, DST changes) is tested on the period
tables themselves, then through whole decisions on the memory store with an injected
clock, then on a real redis-server, whose TIME cannot be moved: there the script is fed
tables built for a DST change and shifted so that TIME lands where the test needs it.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from datetime import date, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from sentinel_core import ConfigError, Decision, DecisionReason, Sentinel, load_config
from sentinel_core._models import MICRO
from sentinel_core.decision._calendar import Calendars, boundary_us, locate, period_table
from sentinel_core.errors import StoreError, StoreUnavailableError
from sentinel_core.identity._keys import tenant_identity
from sentinel_core.store._redis import MemoryStore, RedisStore
from sentinel_core.store._reference import ScriptReply
from sentinel_core.store._reference_extra import quota
from sentinel_core.store._scripts import ScriptCall, run_reference
from tests.support.redis_server import free_port

HOUR_US = 3_600 * MICRO
DAY_US = 24 * HOUR_US
UTC = timezone.utc


def at(zone: str, *fields: int) -> int:
    """Unix microseconds of a wall-clock time in ``zone`` (first occurrence)."""
    local = datetime(*fields, tzinfo=ZoneInfo(zone))  # type: ignore[misc]
    return (local - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def policy_config(url: str = "memory://", **policy: Any) -> dict[str, Any]:
    return {
        "redis_url": url,
        "socket_timeout_ms": 2000,
        "policies": {
            "plan.calls": {"algorithm": "quota", "rate": "3/month", "fail_mode": "closed", **policy}
        },
    }


# -- the calendar ---------------------------------------------------------------------------


def lengths_h(table: tuple[int, ...]) -> list[float]:
    return [(b - a) / HOUR_US for a, b in itertools.pairwise(table)]


def test_month_ends_roll_over_to_the_first_including_the_year() -> None:
    table = period_table("month", "UTC", at("UTC", 2026, 12, 31, 23, 59, 59))
    assert table == tuple(
        at("UTC", *day) for day in ((2026, 11, 1), (2026, 12, 1), (2027, 1, 1), (2027, 2, 1))
    )
    assert lengths_h(table) == [30 * 24, 31 * 24, 31 * 24]


def test_february_has_29_days_in_a_leap_year_and_28_otherwise() -> None:
    leap = period_table("month", "UTC", at("UTC", 2028, 2, 29, 12))
    assert lengths_h(leap)[1] == 29 * 24
    common = period_table("month", "UTC", at("UTC", 2027, 2, 28, 12))
    assert lengths_h(common)[1] == 28 * 24
    day = period_table("day", "UTC", at("UTC", 2028, 2, 29, 12))
    assert day[1:3] == (at("UTC", 2028, 2, 29), at("UTC", 2028, 3, 1))


def test_dst_days_in_berlin_last_23_and_25_hours() -> None:
    spring = period_table("day", "Europe/Berlin", at("Europe/Berlin", 2026, 3, 29, 12))
    assert lengths_h(spring) == [24, 23, 24]
    autumn = period_table("day", "Europe/Berlin", at("Europe/Berlin", 2026, 10, 25, 12))
    assert lengths_h(autumn) == [24, 25, 24]
    # the month holding the spring change is an hour short of 31 days
    march = period_table("month", "Europe/Berlin", at("Europe/Berlin", 2026, 3, 15))
    assert lengths_h(march)[1] == 31 * 24 - 1
    # boundaries are local midnights: 23:00 UTC in winter, 22:00 UTC in summer
    assert march[1] == at("UTC", 2026, 2, 28, 23)
    assert march[2] == at("UTC", 2026, 3, 31, 22)


def test_iso_weeks_start_on_monday_and_the_dst_week_is_167_hours() -> None:
    sunday = at("America/New_York", 2026, 3, 8, 12)  # DST begins that night at 02:00
    table = period_table("week", "America/New_York", sunday)
    assert table[1] == at("America/New_York", 2026, 3, 2)  # a Monday
    assert lengths_h(table) == [168, 167, 168]


def test_a_day_whose_midnight_is_skipped_starts_when_the_day_begins() -> None:
    # Santiago moves from -04 to -03 at 00:00 on 2026-09-06: no midnight that day.
    table = period_table("day", "America/Santiago", at("America/Santiago", 2026, 9, 6, 12))
    assert table[1] == at("UTC", 2026, 9, 6, 4)  # 01:00 -03, the first instant of the 6th
    assert lengths_h(table) == [24, 23, 24]


def test_a_midnight_that_happens_twice_starts_the_day_at_its_first_occurrence() -> None:
    # Havana moves back from -04 to -05 at 01:00 on 2026-11-01: 00:00 to 01:00 happens
    # twice; the day begins at the first midnight (04:00 UTC) and lasts 25 hours.
    first_midnight = at("UTC", 2026, 11, 1, 4)
    in_the_repeat = at("UTC", 2026, 11, 1, 5, 30)  # 00:30 on the wall, the second time
    table = period_table("day", "America/Havana", in_the_repeat)
    assert table[1] == first_midnight
    assert locate(table, in_the_repeat) == (table[1], table[2])
    assert lengths_h(table) == [24, 25, 24]


def test_locate_finds_the_period_or_nothing() -> None:
    table = (10, 20, 30, 40)
    assert locate(table, 10) == (10, 20)
    assert locate(table, 39) == (30, 40)
    assert locate(table, 40) is None
    assert locate(table, 9) is None


def test_tables_are_rebuilt_only_when_the_clock_leaves_the_current_period() -> None:
    now = [at("UTC", 2026, 1, 31, 23)]
    calendars = Calendars(lambda: now[0])
    first = calendars.boundaries("day", "UTC")
    now[0] += HOUR_US // 2
    assert calendars.boundaries("day", "UTC") is first
    now[0] += HOUR_US  # February 1st
    second = calendars.boundaries("day", "UTC")
    assert second[1] == at("UTC", 2026, 2, 1) == first[2]


def test_boundary_us_is_exact_for_far_dates() -> None:
    assert boundary_us(date(2200, 1, 1), ZoneInfo("UTC")) == 7_258_118_400 * MICRO


# -- configuration -----------------------------------------------------------------------


def test_a_quota_policy_loads_with_its_calendar_and_zone() -> None:
    policy = load_config(policy_config(timezone="Europe/Berlin", cost=2)).policies["plan.calls"]
    assert (policy.limit, policy.calendar, policy.timezone, policy.cost) == (
        3,
        "month",
        "Europe/Berlin",
        2,
    )
    assert load_config(policy_config()).policies["plan.calls"].timezone == "UTC"


@pytest.mark.parametrize(
    ("policy", "path", "message"),
    [
        ({"rate": "10/hour"}, "rate", 'expected "N/day|week|month"'),
        ({"rate": "0/day"}, "rate", 'expected "N/day|week|month"'),
        ({"rate": 5}, "rate", 'expected "N/day|week|month"'),
        ({"rate": "1234567890123456/day"}, "rate", "15 digits"),
        ({"timezone": "Mars/Olympus"}, "timezone", "unknown time zone"),
        ({"timezone": "../etc/passwd"}, "timezone", "unknown time zone"),
        ({"timezone": "localtime"}, "timezone", "not a time zone every host reads alike"),
        ({"timezone": "posixrules"}, "timezone", "not a time zone every host reads alike"),
        ({"timezone": "Factory"}, "timezone", "not a time zone every host reads alike"),
        ({"timezone": "right/UTC"}, "timezone", "right/ zones count leap seconds"),
        ({"timezone": ""}, "timezone", "non-empty string"),
        ({"cost": 4}, "cost", "exceeds the limit 3"),
        ({"fail_mode": "open"}, "fallback_rate", "fail-open needs a fallback_rate"),
        ({"fallback_rate": "1/second"}, "fallback_rate", "fail_mode open only"),
        ({"identity": "anonymous"}, "identity", "limit tenants only"),
        ({"burst": 3}, "burst", "unknown key"),
        ({"fail_mode": "maybe"}, "fail_mode", "expected 'open' or 'closed'"),
    ],
)
def test_quota_config_errors_name_their_key(
    policy: dict[str, Any], path: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as raised:
        load_config(policy_config(**policy))
    assert raised.value.path == f"policies.plan.calls.{path}"


@pytest.mark.parametrize("missing", ["rate", "fail_mode"])
def test_quota_config_needs_rate_and_fail_mode(missing: str) -> None:
    config = policy_config()
    del config["policies"]["plan.calls"][missing]
    with pytest.raises(ConfigError, match="missing key") as raised:
        load_config(config)
    assert raised.value.path == f"policies.plan.calls.{missing}"


# -- whole decisions on the memory store, with an injected clock -----------------------------


class Harness:
    """A Sentinel whose calendar and memory store share one injected clock."""

    def __init__(self, start_us: int, **policy: Any) -> None:
        self.now = start_us
        self.sentinel = Sentinel(
            policy_config(**policy), registry=CollectorRegistry(), entry_points=False
        )
        self.sentinel._engine.calendars = Calendars(lambda: self.now)
        self.store = MemoryStore(lambda: self.now)

    def decide(self, tenant: str = "acme") -> Decision:
        """What `Sentinel.evaluate` does, on this harness's store."""
        attempt = self.sentinel._engine.begin(
            self.sentinel.endpoint("plan.calls"), tenant_identity(tenant)
        )
        with attempt:
            try:
                reply = self.store.run(attempt.call)
            except StoreError as exc:
                return attempt.failed(exc)
            return attempt.succeeded(reply)


def test_a_month_quota_resets_at_the_first_of_the_month_in_its_zone() -> None:
    harness = Harness(at("Europe/Berlin", 2026, 1, 31, 23, 59, 58), timezone="Europe/Berlin")
    decisions = [harness.decide() for _ in range(4)]
    assert [d.allowed for d in decisions] == [True, True, True, False]
    assert [d.remaining for d in decisions] == [2, 1, 0, 0]
    assert decisions[0].reset_seconds == 2
    assert decisions[3].retry_after_seconds == 2
    harness.now = at("Europe/Berlin", 2026, 2, 1)  # 23:00 UTC on January 31st
    fresh = harness.decide()
    assert fresh.allowed
    assert fresh.remaining == 2
    assert fresh.reset_seconds == 28 * 86_400  # February 2026, no DST change in it


def test_a_leap_day_is_counted_in_february_and_february_ends_after_it() -> None:
    harness = Harness(at("UTC", 2028, 2, 28, 12), rate="1/month")
    assert harness.decide().reset_seconds == 36 * 3_600  # 12 h of the 28th, the 29th
    harness.now = at("UTC", 2028, 2, 29, 23, 59, 59)
    denied = harness.decide()
    assert not denied.allowed
    assert denied.retry_after_seconds == 1
    harness.now = at("UTC", 2028, 3, 1)
    assert harness.decide().allowed


def test_the_dst_day_quota_lasts_23_hours_and_t_counts_to_its_end() -> None:
    harness = Harness(at("Europe/Berlin", 2026, 3, 29), rate="2/day", timezone="Europe/Berlin")
    first = harness.decide()
    assert first.reset_seconds == 23 * 3_600
    harness.now += 22 * HOUR_US  # 23:00 local: an hour before the next midnight
    assert harness.decide().allowed
    denied = harness.decide()
    assert denied.retry_after_seconds == 3_600
    harness.now += HOUR_US
    assert harness.decide().allowed


def test_tenants_and_periods_are_counted_apart() -> None:
    harness = Harness(at("UTC", 2026, 6, 1), rate="1/week")
    assert harness.decide("a").allowed
    assert harness.decide("b").allowed
    assert not harness.decide("a").allowed
    harness.now = at("UTC", 2026, 6, 8)  # the next Monday
    assert harness.decide("a").allowed


def test_a_state_from_a_newer_period_keeps_counting_when_time_goes_back() -> None:
    # A failover to a replica whose clock is behind: TIME falls back across a boundary.
    table = (0, 100, 200, 300)
    reply, writes = quota("2:200", 150, limit=3, cost=1, boundaries=table)
    assert reply.allowed
    assert reply.remaining == 0
    assert reply.reset_seconds == 1  # the newer period's end, 150 us away
    assert writes is not None
    assert writes[0].value == "3:200"
    denied, none = quota("3:200", 150, limit=3, cost=1, boundaries=table)
    assert not denied.allowed
    assert none is None
    # an older period's state counts for nothing; a malformed one too
    assert quota("3:0", 150, 3, 1, table)[0].remaining == 2
    assert quota("junk", 150, 3, 1, table)[0].remaining == 2


def test_a_time_outside_the_table_is_a_store_failure_decided_by_the_fail_mode() -> None:
    harness = Harness(at("UTC", 2026, 5, 10))
    harness.sentinel._engine.calendars = Calendars(lambda: at("UTC", 2026, 1, 10))
    decision = harness.decide()
    assert not decision.allowed
    assert decision.reason is DecisionReason.FAIL_CLOSED


def test_failing_open_uses_the_emergency_bucket_and_describes_it() -> None:
    config = policy_config(
        f"redis://127.0.0.1:{free_port()}/0", fail_mode="open", fallback_rate="2/second"
    )
    config["socket_timeout_ms"] = 50
    sentinel = Sentinel(config, registry=CollectorRegistry(), entry_points=False)
    decision = sentinel.evaluate("plan.calls", "acme")
    assert decision.allowed
    assert decision.reason is DecisionReason.REDIS_CONNECTION_ERROR
    headers = dict(sentinel.http.outcome(decision, None).headers)
    assert headers["RateLimit-Policy"].startswith('"plan.calls";q=2;w=1;')
    sentinel.close()


def test_quota_headers_count_to_the_period_end_without_a_window() -> None:
    harness = Harness(at("UTC", 2026, 5, 31, 23))
    headers = dict(harness.sentinel.http.outcome(harness.decide(), None).headers)
    assert headers["RateLimit-Policy"].startswith('"plan.calls";q=3;pk=:')
    assert headers["RateLimit"].startswith('"plan.calls";r=2;t=3600;pk=:')


def test_reading_usage_counts_nothing() -> None:
    harness = Harness(at("UTC", 2026, 5, 10, 8), rate="5/day", timezone="Asia/Tokyo")
    harness.decide()
    harness.decide()
    call = harness.sentinel._engine.calendars.usage_call(
        harness.sentinel.policy("plan.calls"), tenant_identity("acme")
    )
    for _ in range(2):
        reply = ScriptReply.from_raw(harness.store.run(call))
        assert 2**53 - 1 - reply.remaining == 2
    assert harness.decide().remaining == 2


# -- on a real redis-server ---------------------------------------------------------------


@pytest.fixture
def store(redis_url: str) -> Iterator[RedisStore]:
    store = RedisStore(redis_url, 2_000)
    yield store
    store.close()


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def server_time_us(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * MICRO + int(micros)


def shifted(table: tuple[int, ...], index: int, lands_at: int, offset: int) -> tuple[int, ...]:
    """``table`` moved so that boundary ``index`` sits ``offset`` us before ``lands_at``."""
    delta = lands_at - offset - table[index]
    return tuple(boundary + delta for boundary in table)


def run_on_redis(
    store: RedisStore, client: redis.Redis, key: str, args: tuple[int, ...]
) -> ScriptReply:
    """Run the quota script and check reply and write against the reference twin."""
    before = client.get(key)
    call = ScriptCall(load_config(policy_config()).policies["plan.calls"].algorithm, (key,), args)
    reply = ScriptReply.from_raw(store.run(call))
    expected, writes = run_reference(
        call, [None if before is None else before.decode()], reply.now_us
    )
    assert reply == expected
    after = client.get(key)
    assert after == (before if writes is None else writes[0].value.encode())
    return reply


def test_the_dst_day_on_redis_counts_to_its_own_end(store: RedisStore, client: redis.Redis) -> None:
    berlin = period_table("day", "Europe/Berlin", at("Europe/Berlin", 2026, 3, 29, 12))
    now = server_time_us(client)
    table = shifted(berlin, 1, now, HOUR_US)  # TIME is an hour into the 23-hour day
    replies = [run_on_redis(store, client, "k", (2, 1, *table)) for _ in range(3)]
    assert [r.allowed for r in replies] == [True, True, False]
    assert replies[2].retry_after_seconds in range(22 * 3_600 - 5, 22 * 3_600 + 1)
    ttl = client.pttl("k")
    assert 22 * 3_600_000 - 5_000 < ttl <= 22 * 3_600_000


def test_redis_time_alone_decides_when_a_period_ends(
    store: RedisStore, client: redis.Redis
) -> None:
    day = DAY_US
    now = server_time_us(client)
    table = (now - 2 * day, now - day, now + 300_000, now + 300_000 + day)
    assert run_on_redis(store, client, "k", (1, 1, *table)).allowed
    assert not run_on_redis(store, client, "k", (1, 1, *table)).allowed
    deadline = time.monotonic() + 5
    while server_time_us(client) < table[2] and time.monotonic() < deadline:
        time.sleep(0.05)  # Redis TIME cannot be injected: wait for it to cross
    reply = run_on_redis(store, client, "k", (1, 1, *table))
    assert reply.allowed
    assert reply.reset_seconds == 86_400


def test_state_of_a_newer_period_on_redis(store: RedisStore, client: redis.Redis) -> None:
    now = server_time_us(client)
    table = (now - DAY_US, now - 10, now + DAY_US, now + 2 * DAY_US)
    client.set("k", f"1:{table[2]}")
    reply = run_on_redis(store, client, "k", (2, 1, *table))
    assert reply.allowed
    assert reply.remaining == 0
    assert reply.reset_seconds > 86_400


def test_time_outside_the_table_on_redis_is_an_error_reply(
    store: RedisStore, client: redis.Redis
) -> None:
    now = server_time_us(client)
    call = ScriptCall(
        load_config(policy_config()).policies["plan.calls"].algorithm,
        ("k",),
        (3, 1, now + DAY_US, now + 2 * DAY_US, now + 3 * DAY_US),
    )
    with pytest.raises(StoreUnavailableError, match="outside the period table"):
        store.run(call)
    assert client.get("k") is None


@pytest.mark.parametrize("zone", ["UTC", "Pacific/Chatham", "America/St_Johns"])
def test_reset_counts_to_the_real_next_boundary_on_redis(redis_url: str, zone: str) -> None:
    sentinel = Sentinel(
        policy_config(redis_url, rate="2/day", timezone=zone),
        registry=CollectorRegistry(),
        entry_points=False,
    )
    try:
        decision = sentinel.evaluate("plan.calls", "acme")
        next_midnight = period_table("day", zone, time.time_ns() // 1_000)[2]
        expected = -(-(next_midnight - time.time_ns() // 1_000) // MICRO)
        assert abs(decision.reset_seconds - expected) <= 2
        usage = sentinel.usage("plan.calls", "acme")
        assert (usage.used, usage.limit, usage.remaining) == (1, 2, 1)
        assert usage.period_start is not None
        assert usage.period_end is not None
        assert usage.period_start.hour == 0
        assert usage.period_start.tzinfo == ZoneInfo(zone)
        assert usage.period_end - usage.period_start == timedelta(days=1)
    finally:
        sentinel.close()


@st.composite
def quota_situations(draw: st.DrawFn) -> tuple[int, int, list[int], int, str | None]:
    """(limit, cost, boundary offsets from TIME in us, which boundary, stored state)."""
    limit = draw(st.integers(1, 50))
    cost = draw(st.integers(-1, limit))  # -1: a reset
    lengths = draw(st.lists(st.integers(2 * MICRO, 40 * DAY_US), min_size=3, max_size=5))
    into = draw(st.integers(MICRO, lengths[1] - MICRO))  # TIME sits inside period 1
    offsets = [-lengths[0] - into, -into]
    for length in lengths[1:]:
        offsets.append(offsets[-1] + length)
    stored = draw(st.sampled_from(["none", "junk", *(str(i) for i in range(len(offsets)))]))
    count = draw(st.integers(0, limit + 3))
    return limit, cost, offsets, count, stored


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(situation=quota_situations())
def test_the_quota_script_matches_its_reference(
    store: RedisStore, client: redis.Redis, situation: tuple[int, int, list[int], int, str]
) -> None:
    limit, cost, offsets, count, stored = situation
    now = server_time_us(client)
    table = tuple(now + offset for offset in offsets)
    client.delete("k")
    if stored == "junk":
        client.set("k", "not:a:state")
    elif stored != "none":
        client.set("k", f"{count}:{table[int(stored)]}")
    run_on_redis(store, client, "k", (limit, cost, *table))


def test_a_sentinel_on_an_injected_clock_moves_its_quota_periods_with_it() -> None:
    now = [1_000.0]
    sentinel = Sentinel(
        policy_config(rate="1/day"),
        registry=CollectorRegistry(),
        entry_points=False,
        clock=lambda: now[0],
    )
    first = sentinel.evaluate("plan.calls", "acme")
    assert first.allowed
    assert not sentinel.evaluate("plan.calls", "acme").allowed
    now[0] += first.reset_seconds + 1  # past the next midnight, by the injected clock
    assert sentinel.evaluate("plan.calls", "acme").allowed
    now[0] += 40 * 86_400  # a month and more later: the table follows the clock
    assert sentinel.evaluate("plan.calls", "acme").reason is DecisionReason.ALLOWED
