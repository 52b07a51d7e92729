"""Assertions every real-server scenario makes about its replies."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from tests.realserver.load import TRANSPORT_ERROR, Reply
from tests.realserver.servers import AppServer


def admitted(replies: Iterable[Reply]) -> list[Reply]:
    return [reply for reply in replies if 200 <= reply.status < 300]


def assert_answered(replies: list[Reply], *, allowed: set[int]) -> None:
    """Every request got an HTTP answer, each one a decision-table row: never a 500 nor
    a dropped connection."""
    statuses = Counter(reply.status for reply in replies)
    assert statuses[TRANSPORT_ERROR] == 0, f"requests without an answer: {statuses}"
    assert set(statuses) <= allowed, f"unexpected statuses: {statuses}"


def assert_counted(server: AppServer, before: Counter[str], replies: list[Reply]) -> None:
    """``sentinel_decisions_total`` summed over every worker adds up to the responses:
    one allowed decision per 2xx, one denied per 429 or 503."""
    after = server.metrics.decisions()
    passed = len(admitted(replies))
    denied = sum(reply.status in (429, 503) for reply in replies)
    assert (after["true"] - before["true"], after["false"] - before["false"]) == (passed, denied)
