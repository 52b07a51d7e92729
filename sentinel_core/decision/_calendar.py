"""Calendar periods of quota policies: days, ISO weeks (from Monday) and months, in an
IANA time zone.

How a decision finds its period without a second round trip: Redis TIME decides what is
counted, but Redis knows no time zone rules, so the process turns the zone's calendar
(month lengths, leap days, DST) into a short table of period boundaries in unix
microseconds (UTC) and sends it with the script call: the start of the previous period,
of the current one and of the two after it, by the process's own clock. The script
counts in the period of the table that holds TIME. The process clock only chooses which
boundaries to send: it may be off from Redis TIME by up to a whole period before the
table stops holding TIME, and then the script answers an error (a store failure, decided
by the fail mode), never a guess. A table is built once per policy and period (a few
microseconds of `zoneinfo`) and reused until the process's clock leaves its current
period.

A period starts at local midnight. On a day whose midnight does not exist (a DST change
at 00:00), it starts at the instant the day begins, as `zoneinfo` maps a skipped time
with the offset in force before the change; a midnight that happens twice starts the
day at its first occurrence.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from datetime import date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from sentinel_core._models import Policy
from sentinel_core.identity._keys import Identity
from sentinel_core.store._reference_extra import QUOTA_RESET
from sentinel_core.store._scripts import ScriptCall

CALENDARS = ("day", "week", "month")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)
USAGE_LIMIT = 2**53 - 1
"""The limit a usage read sends: above any count, exact in Lua."""


def wall_clock_us() -> int:
    return time.time_ns() // 1_000


def period_start(day: date, calendar: str) -> date:
    """The first day of the period that holds ``day``."""
    if calendar == "week":
        return day - timedelta(days=day.weekday())
    if calendar == "month":
        return day.replace(day=1)
    return day


def next_start(start: date, calendar: str) -> date:
    """The first day of the period after the one starting on ``start``."""
    if calendar == "month":
        return (start.replace(day=28) + timedelta(days=4)).replace(day=1)
    return start + timedelta(days=7 if calendar == "week" else 1)


def previous_start(start: date, calendar: str) -> date:
    """The first day of the period before the one starting on ``start``."""
    if calendar == "month":
        return (start - timedelta(days=1)).replace(day=1)
    return start - timedelta(days=7 if calendar == "week" else 1)


def boundary_us(day: date, zone: ZoneInfo) -> int:
    """The instant ``day`` begins in ``zone``, in unix microseconds (exact: no floats)."""
    midnight = datetime(day.year, day.month, day.day, tzinfo=zone)
    return (midnight - _EPOCH) // _MICROSECOND


def local_time(now_us: int, zone: ZoneInfo) -> datetime:
    return (_EPOCH + timedelta(microseconds=now_us)).astimezone(zone)


def period_table(calendar: str, zone_name: str, now_us: int) -> tuple[int, ...]:
    """Four boundaries: the previous, current and two next periods' starts at ``now_us``."""
    zone = ZoneInfo(zone_name)
    start = period_start(local_time(now_us, zone).date(), calendar)
    days = [previous_start(start, calendar), start, next_start(start, calendar)]
    days.append(next_start(days[-1], calendar))
    return tuple(boundary_us(day, zone) for day in days)


def locate(boundaries: Sequence[int], now_us: int) -> tuple[int, int] | None:
    """The (start, end) of the table's period that holds ``now_us``, if one does."""
    for start, end in itertools.pairwise(boundaries):
        if start <= now_us < end:
            return start, end
    return None


class Calendars:
    """Period tables per (calendar, time zone), rebuilt when the clock leaves the table's
    current period. A lost race only builds a table twice."""

    def __init__(self, clock_us: Callable[[], int] = wall_clock_us) -> None:
        self.clock_us = clock_us
        self._tables: dict[tuple[str, str], tuple[int, ...]] = {}

    def boundaries(self, calendar: str, zone_name: str) -> tuple[int, ...]:
        now = self.clock_us()
        table = self._tables.get((calendar, zone_name))
        if table is None or not table[1] <= now < table[2]:
            table = self._tables[(calendar, zone_name)] = period_table(calendar, zone_name, now)
        return table

    def quota_call(self, policy: Policy, identity: Identity) -> ScriptCall:
        """The quota script call that decides one request of ``identity``."""
        return self._call(policy, identity, policy.burst, policy.cost)

    def usage_call(self, policy: Policy, identity: Identity) -> ScriptCall:
        """A call that counts nothing and whose ``remaining`` is `USAGE_LIMIT` less the
        period's count: the script caps ``remaining`` at 0, so the policy's own limit
        would hide a count above it (a limit lowered mid-period)."""
        return self._call(policy, identity, USAGE_LIMIT, 0)

    def reset_call(self, policy: Policy, identity: Identity) -> ScriptCall:
        """A call that writes the current period's count as 0 (`Sentinel.reset`)."""
        return self._call(policy, identity, policy.burst, QUOTA_RESET)

    def _call(self, policy: Policy, identity: Identity, limit: int, cost: int) -> ScriptCall:
        assert policy.calendar is not None
        table = self.boundaries(policy.calendar, policy.timezone)
        return ScriptCall(policy.algorithm, identity.bucket_keys(policy), (limit, cost, *table))
