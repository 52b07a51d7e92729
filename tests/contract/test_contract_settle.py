"""``sentinel_core.settle(units)`` in a request, through every adapter (SPEC §2
``settle``), for each algorithm that settles (a token bucket of 100 a day, a sliding
window of 100 a day, a quota of 100 a month; each reserves ``cost`` 10): the units a
handler reports are charged after the response, instead of the reservation, from sync
and async handlers, from streamed bodies (each chunk reports), from a handler that
raises, and after ``count``; an excess goes into debt, at most one capacity below
empty, with an exact Retry-After; bad units are the handler's own error (a 500) and
charge nothing; a store that fails at settlement fails no response.

What a request left is read from the next request's RateLimit ``r``: the limit of 100,
less what earlier requests were charged, less this request's reservation. The
buckets refill slowly (one unit in 864 s at the fastest), so the milliseconds a test
takes never move an integer it checks; where time must pass, the ``memory://`` store's
clock is frozen and moved (`sentinel_clock`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sentinel_core.cli._main import main
from sentinel_core.testing import SentinelClock
from tests.contract.conftest import Build
from tests.contract.harness import MIDWAY, RAISED, Client, Reply
from tests.contract.test_contract import AUTH, contract_config, remaining
from tests.support.redis_server import RedisServer

DAY = 86_400
TENANT = "tenant-a"  # the `sub` of AUTH's token
ALGORITHMS: dict[str, dict[str, Any]] = {
    "token_bucket": {"algorithm": "token_bucket", "rate": "100/day", "burst": 100},
    "sliding_window": {"algorithm": "sliding_window", "rate": "100/day"},
    "quota": {"algorithm": "quota", "rate": "100/month"},
}
COUNTED = ("token_bucket", "sliding_window")
"""The algorithms that take ``count`` (a quota counts every admitted request)."""
REPORTING = ("POST /report/{units}", "POST /report-bad/{kind}", "POST /report-midway/{units}")
"""The undecorated endpoints that report, which ``routes`` guard with ``usage``."""


@pytest.fixture(params=["redis", "memory"])
def url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("redis_url")) if request.param == "redis" else "memory://"


@pytest.fixture(params=list(ALGORITHMS))
def algorithm(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def settle_config(url: str, algorithm: str, **top: Any) -> dict[str, Any]:
    """The contract config with its settle policies (``usage``, and ``usage.count``
    unless a quota: quotas take no ``count``) of ``algorithm``, and the reporting
    endpoints routed to ``usage``."""
    config = contract_config(url)
    policy = {**ALGORITHMS[algorithm], "cost": 10, "fail_mode": "closed", "settle": True}
    policies = {**config["policies"], "usage": policy}
    if algorithm in COUNTED:
        policies["usage.count"] = {**policy, "count": ["4xx"]}
    routes = {**config["routes"], **dict.fromkeys(REPORTING, "usage")}
    return contract_config(url, policies=policies, routes=routes) | top


def send(build: Build, url: str, algorithm: str, *requests: tuple[str, str]) -> list[Reply]:
    client = build(settle_config(url, algorithm))
    return [client.request(method, path, headers=AUTH) for method, path in requests]


def shown(algorithm: str, charged: int) -> int:
    """What RateLimit ``r`` shows once ``charged`` units are (the request's own
    reservation included): the units left, which a token bucket (GCRA) tells in whole
    requests of its cost, rounded down."""
    left = 100 - charged
    return left - left % 10 if algorithm == "token_bucket" else left


def metric(client: Client, name: str = "sentinel_units_total") -> float:
    value = client.core.registry.get_sample_value(name, {"endpoint_id": "usage"})
    return 0.0 if value is None else value


# -- refund and excess, from every kind of handler --------------------------------------------


@pytest.mark.parametrize("path", ["/usage", "/usage-sync", "/report"])
def test_the_units_a_handler_reports_are_charged(
    build: Build, url: str, algorithm: str, path: str
) -> None:
    """``/report`` is guarded through ``routes``, the others by the decorator."""
    replies = send(
        build,
        url,
        algorithm,
        ("POST", f"{path}/25"),
        ("POST", f"{path}/13"),
        ("POST", f"{path}/0"),
        ("POST", "/usage/10"),
    )
    assert [reply.status for reply in replies] == [200] * 4
    # the headers leave before the body: they tell the reservation
    charged = [0, 25, 25 + 13, 25 + 13]
    assert [remaining(reply) for reply in replies] == [shown(algorithm, c + 10) for c in charged]


@pytest.mark.parametrize("path", ["/usage-stream", "/usage-astream", "/usage-download"])
def test_a_streamed_body_reports_as_it_goes(
    build: Build, url: str, algorithm: str, path: str
) -> None:
    replies = send(build, url, algorithm, ("GET", f"{path}/4"), ("POST", "/usage/0"))
    assert [reply.status for reply in replies] == [200, 200]
    assert replies[0].body == b"abc"
    assert [remaining(reply) for reply in replies] == [90, shown(algorithm, 12 + 10)]


def test_a_raising_handler_is_charged_what_it_reported(
    build: Build, url: str, algorithm: str
) -> None:
    replies = send(build, url, algorithm, ("POST", "/usage-raise/7"), ("POST", "/usage/0"))
    assert [reply.status for reply in replies] == [500, 200]
    assert remaining(replies[1]) == shown(algorithm, 7 + 10)


@pytest.mark.parametrize("algorithm", COUNTED)
def test_count_applies_first(build: Build, url: str, algorithm: str) -> None:
    """200 is not counted: the reservation is refunded; 404 is, at the 7 reported."""
    replies = send(
        build,
        url,
        algorithm,
        ("POST", "/usage-count/200"),
        ("POST", "/usage-count/404"),
        ("POST", "/usage-count/200"),
    )
    assert [reply.status for reply in replies] == [200, 404, 200]
    assert [remaining(reply) for reply in replies] == [90, 90, shown(algorithm, 7 + 10)]


def test_units_total_counts_what_each_request_used(build: Build, url: str, algorithm: str) -> None:
    """Reported units; the reservation of a request that reported nothing; nothing for a
    denial, nor for a request whose status ``count`` does not count."""
    client = build(settle_config(url, algorithm))
    for method, path in [
        ("POST", "/usage/25"),
        ("POST", "/report/3"),
        ("GET", "/usage-stream/2"),
        ("POST", "/usage-count/404"),
        ("POST", "/usage-count/200"),
        ("POST", "/usage-raise/1"),
        ("GET", "/stream"),  # "small", no settle policy
    ]:
        assert client.request(method, path, headers=AUTH).status in (200, 404, 500)
    assert metric(client) == 25 + 3 + 6 + 1
    assert (
        client.core.registry.get_sample_value(
            "sentinel_units_total", {"endpoint_id": "usage.count"}
        )
        == 7
    )
    assert metric(client, "sentinel_unsettled_units_total") == 0


# -- a monthly quota: what the usage API and `sentinel usage` report ---------------------------

QUOTA_TOML = """
[sentinel]
redis_url = "{url}"

[sentinel.policies.usage]
algorithm = "quota"
rate = "100/month"
cost = 10
settle = true
fail_mode = "closed"
"""


def spend_a_month_s_quota(build: Build, url: str) -> Client:
    """25, 3 (through ``routes``), 0, 4 a chunk of 3, and exactly the reservation."""
    client = build(settle_config(url, "quota"))
    replies = [
        client.request(method, path, headers=AUTH)
        for method, path in [
            ("POST", "/usage/25"),
            ("POST", "/report/3"),
            ("POST", "/usage-sync/0"),
            ("GET", "/usage-astream/4"),
            ("POST", "/usage/10"),
        ]
    ]
    assert [reply.status for reply in replies] == [200] * 5
    return client


def test_a_monthly_quota_counts_the_units_reported(build: Build, url: str) -> None:
    client = spend_a_month_s_quota(build, url)
    usage = client.core.usage("usage", TENANT)
    assert (usage.limit, usage.used) == (100, 25 + 3 + 0 + 12 + 10)
    assert usage.period_start is not None
    assert usage.period_start.day == 1
    assert metric(client) == 50


def test_sentinel_usage_reports_the_units_reported(
    build: Build, redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spend_a_month_s_quota(build, redis_url)
    config = tmp_path / "sentinel.toml"
    config.write_text(QUOTA_TOML.format(url=redis_url), encoding="utf-8")
    capsys.readouterr()

    assert main(["usage", str(config), "usage", TENANT, "--json"]) == 0

    document = json.loads(capsys.readouterr().out)
    assert (document["calendar"], document["limit"]) == ("month", 100)
    (row,) = document["tenants"]
    assert (row["tenant"], row["used"], row["remaining"]) == (TENANT, 50, 50)


# -- debt: bounded, with an exact Retry-After --------------------------------------------------


def retry_after(reply: Reply) -> int:
    assert reply.status == 429
    return int(reply.header("retry-after") or 0)


def test_a_token_bucket_s_debt_stops_one_capacity_below_empty(build: Build, url: str) -> None:
    """A million units on a bucket of 100 that refills one unit in 864 s: the bucket
    stops 100 below empty, so the next request (10) waits for 110 units, not a
    million and ten; the metric still counts the million used."""
    client = build(settle_config(url, "token_bucket"))
    assert client.request("POST", "/usage/1000000", headers=AUTH).status == 200
    denied = client.request("POST", "/report/0", headers=AUTH)
    assert retry_after(denied) == 110 * 864
    assert remaining(denied) == 0
    assert client.core.peek("usage", TENANT).retry_after_seconds == 110 * 864
    assert metric(client) == 1_000_000


def test_the_token_bucket_admits_at_its_retry_after(
    build: Build, sentinel_clock: SentinelClock
) -> None:
    client = build(settle_config("memory://", "token_bucket"))
    client.request("POST", "/usage/1000000", headers=AUTH)
    assert retry_after(client.request("POST", "/usage/0", headers=AUTH)) == 95_040

    sentinel_clock.advance(95_039)
    late = client.request("POST", "/usage/0", headers=AUTH)
    sentinel_clock.advance(1)
    admitted = client.request("POST", "/usage/0", headers=AUTH)

    assert retry_after(late) == 1
    assert (admitted.status, remaining(admitted)) == (200, 0)


def test_a_sliding_window_s_debt_stops_at_twice_the_limit(build: Build, url: str) -> None:
    """Counted as 200 in this window (not the million used): 10 more fit once it weighs
    90 in the next, (1 - 90 / 200) of a day into it."""
    client = build(settle_config(url, "sliding_window"))
    client.request("POST", "/usage/1000000", headers=AUTH)
    denied = client.request("POST", "/usage/0", headers=AUTH)
    elapsed = time.time() % DAY  # windows are aligned on the epoch
    assert abs(retry_after(denied) - (2 * DAY - elapsed - DAY * 90 / 200)) <= 2


def test_the_sliding_window_admits_at_its_retry_after(
    build: Build, sentinel_clock: SentinelClock
) -> None:
    client = build(settle_config("memory://", "sliding_window"))
    client.request("POST", "/usage/1000000", headers=AUTH)
    wait = retry_after(client.request("POST", "/usage/0", headers=AUTH))

    sentinel_clock.advance(wait - 1)
    late = client.request("POST", "/usage/0", headers=AUTH)
    sentinel_clock.advance(1)
    admitted = client.request("POST", "/usage/0", headers=AUTH)

    assert retry_after(late) == 1
    assert admitted.status == 200


def test_a_quota_s_debt_stops_at_twice_the_limit_until_the_month_ends(
    build: Build, url: str
) -> None:
    client = build(settle_config(url, "quota"))
    client.request("POST", "/usage/1000000", headers=AUTH)
    denied = client.request("POST", "/report/0", headers=AUTH)
    usage = client.core.usage("usage", TENANT)
    assert usage.used == 200
    assert usage.period_end is not None
    assert abs(retry_after(denied) - (usage.period_end.timestamp() - time.time())) <= 2


def test_the_next_month_starts_from_zero(build: Build, sentinel_clock: SentinelClock) -> None:
    client = build(settle_config("memory://", "quota"))
    client.request("POST", "/usage/1000000", headers=AUTH)
    wait = retry_after(client.request("POST", "/usage/0", headers=AUTH))
    start = client.core.usage("usage", TENANT).period_start

    sentinel_clock.advance(wait - 1)
    late = client.request("POST", "/usage/0", headers=AUTH)
    sentinel_clock.advance(1)
    admitted = client.request("POST", "/usage/7", headers=AUTH)

    assert retry_after(late) == 1
    assert (admitted.status, remaining(admitted)) == (200, 90)
    usage = client.core.usage("usage", TENANT)
    assert usage.used == 7
    assert usage.period_start != start


# -- bad units: the application's own error ----------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "error", "message"),
    [
        (1, TypeError, "units must be an int"),
        (2, TypeError, "units must be an int"),
        (3, TypeError, "units must be an int"),
        (4, ValueError, "0 or more, got -1"),
    ],
    ids=["float", "str", "bool", "negative"],
)
def test_bad_units_are_the_handler_s_500_and_charge_nothing(
    build: Build, url: str, algorithm: str, kind: int, error: type[Exception], message: str
) -> None:
    """The handler reported 3, then a bad value: the call raised in the handler (the
    framework's 500) and counted nothing; the request is charged the 3."""
    RAISED.clear()
    client = build(settle_config(url, algorithm))
    failed = client.request("POST", f"/report-bad/{kind}", headers=AUTH)
    after = client.request("POST", "/report/0", headers=AUTH)
    assert failed.status == 500  # FastAPI's own 500 carries no RateLimit fields
    assert (after.status, remaining(after)) == (200, shown(algorithm, 3 + 10))
    (raised,) = RAISED
    assert type(raised) is error
    assert message in str(raised)
    assert metric(client) == 3


@pytest.mark.parametrize("guard", ["small", None], ids=["plain policy", "unguarded"])
def test_settle_without_a_settle_policy_is_a_runtime_error(
    build: Build, url: str, guard: str | None
) -> None:
    """After a settle request on the same thread (a WSGI server's): its meter is
    closed, so nothing reported now lands on it."""
    RAISED.clear()
    config = settle_config(url, "sliding_window")
    config["routes"]["POST /report-bad/{kind}"] = guard
    config["routes"] = {key: value for key, value in config["routes"].items() if value}
    client = build(config)
    settled = client.request("POST", "/report/5", headers=AUTH)
    failed = client.request("POST", "/report-bad/1", headers=AUTH)
    after = client.request("POST", "/report/0", headers=AUTH)
    assert [settled.status, failed.status, after.status] == [200, 500, 200]
    (raised,) = RAISED
    assert type(raised) is RuntimeError
    assert "guarded by a policy with `settle = true`" in str(raised)
    assert "there is no such request here" in str(raised)
    assert remaining(after) == 100 - 5 - 10
    assert metric(client) == 5


# -- a race: requests at once on one bucket end where the arithmetic says ---------------------

RACE: dict[str, dict[str, Any]] = {
    # cost 1: a token bucket's `r` then tells every unit (see `shown`)
    "token_bucket": {"algorithm": "token_bucket", "rate": "1000/day", "burst": 1000, "cost": 1},
    "sliding_window": {"algorithm": "sliding_window", "rate": "1000/day", "cost": 10},
    "quota": {"algorithm": "quota", "rate": "1000/month", "cost": 10},
}
RACERS = 36
HANDLERS = [
    ("POST", "/usage", 1),  # (method, path, how many times the handler reports)
    ("POST", "/usage-sync", 1),
    ("GET", "/usage-astream", 3),
    ("POST", "/report", 1),
]


def test_racing_requests_end_where_the_arithmetic_says(
    build: Build, url: str, algorithm: str
) -> None:
    """Requests at once (a WSGI server's threads, an ASGI server's tasks), each reporting
    its own units (0 to 22 a call, refunds and excesses) from sync and async handlers
    and streams: the bucket ends at exactly their sum, no request's units landing on
    another's meter."""
    config = settle_config(url, algorithm)
    config["policies"]["usage"] = {**RACE[algorithm], "fail_mode": "closed", "settle": True}
    client = build(config)
    racers = [(HANDLERS[i % 4], i % 23) for i in range(RACERS)]

    requests = [(method, f"{path}/{units}") for (method, path, _), units in racers]
    replies = client.concurrently(requests, headers=AUTH)

    assert [reply.status for reply in replies] == [200] * RACERS
    spent = sum(units * calls for (_, _, calls), units in racers)
    assert metric(client) == spent
    if algorithm == "quota":
        assert client.core.usage("usage", TENANT).used == spent
    else:
        left = client.core.peek("usage", TENANT).remaining + RACE[algorithm]["cost"]
        assert left == 1000 - spent


# -- a store that fails at settlement ---------------------------------------------------------


@pytest.fixture
def doomed_redis() -> Iterator[RedisServer]:
    """A private redis-server that ``/report-midway`` handlers stop, once they reported."""
    server = RedisServer().start()
    MIDWAY.append(server.stop)
    yield server
    MIDWAY.clear()
    server.close()


def test_a_store_failure_at_settlement_fails_no_response(
    build: Build, doomed_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The reservation was made; the store stops while the handler runs: the response
    is the handler's 200, the bucket keeps the reservation (10), and the difference
    (25 - 10) is counted as unsettled and logged once."""
    client = build(settle_config(doomed_redis.url, "token_bucket"))
    with caplog.at_level(logging.WARNING, logger="sentinel"):
        reply = client.request("POST", "/report-midway/25", headers=AUTH)
    assert (reply.status, json.loads(reply.body)) == (200, {"units": 25})
    assert remaining(reply) == 90
    assert metric(client, "sentinel_unsettled_units_total") == 15
    assert metric(client) == 10
    (record,) = [r for r in caplog.records if "settlement on usage" in r.getMessage()]
    assert "25 units used, 10 reserved stay charged" in record.getMessage()
