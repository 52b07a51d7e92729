"""The policies that are neither a token bucket nor a sliding window (SPEC §2):
``concurrency`` (requests in flight, held by leases) and ``quota`` (requests per
calendar day, ISO week or month of a time zone)."""

from __future__ import annotations

import re
import zoneinfo
from typing import Any

from sentinel_core._models import Algorithm, FailMode, IdentityKind, Policy, Rate
from sentinel_core.config._fleet import parse_fallback_scope
from sentinel_core.config._reader import Section, parse_rate
from sentinel_core.errors import ConfigError

LEASE_OR_QUOTA = (Algorithm.CONCURRENCY, Algorithm.QUOTA)
_QUOTA_RATE = re.compile(r"[ \t]*([0-9]{1,15})[ \t]*/[ \t]*(day|week|month)[ \t]*")
_NOMINAL_SECONDS = {"day": 86_400, "week": 7 * 86_400, "month": 31 * 86_400}
"""A period's longest length: the `Rate` a quota policy reports (the script counts the
calendar's real periods)."""
_MAX_LIMIT = 1_000_000
_MAX_LEASE_SECONDS = 86_400


_HOST_ZONES = frozenset({"localtime", "posixrules", "Factory"})
"""Files of a zone database that are not zones of a place: ``localtime`` and
``posixrules`` are whatever the host is set to (processes on two hosts would count
different periods in one bucket), ``Factory`` is a placeholder."""


def _check_zone(zone: str, path: str) -> None:
    """An IANA time zone every host reads alike, or a ConfigError."""
    if zone in _HOST_ZONES or zone.startswith("right/"):
        raise ConfigError(
            path,
            f"{zone!r} is not a time zone every host reads alike (right/ zones count leap "
            "seconds, which Redis TIME does not): expected an IANA name such as "
            "'Europe/Berlin' or 'UTC'",
        )
    try:
        zoneinfo.ZoneInfo(zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ConfigError(
            path,
            f"unknown time zone {zone!r}: expected an IANA name such as 'Europe/Berlin' "
            "(install the tzdata package where the system has no zone database)",
        ) from None


def parse_lease_or_quota(section: Section, endpoint_id: str, algorithm: Algorithm) -> Policy:
    """A concurrency or quota policy; both limit tenants only."""
    fail_mode = _fail_mode(section)
    if section.has("identity") and section.raw("identity") != IdentityKind.TENANT.value:
        raise ConfigError(
            section.path("identity"), f"{algorithm.value} policies limit tenants only"
        )
    common: dict[str, Any] = {
        "endpoint_id": endpoint_id,
        "algorithm": algorithm,
        "fail_mode": fail_mode,
        "version": section.integer("version", 1, maximum=2**53 - 1),
        "shadow": section.boolean("shadow", False),
        "fallback_scope": parse_fallback_scope(section, algorithm, fail_mode),
    }
    if algorithm is Algorithm.CONCURRENCY:
        policy = _concurrency(section, fail_mode, common)
    else:
        policy = _quota(section, fail_mode, common)
    section.finish()
    return policy


def _fail_mode(section: Section) -> FailMode:
    if not section.has("fail_mode"):
        raise ConfigError(section.path("fail_mode"), "missing key")
    value = section.raw("fail_mode")
    if value not in ("open", "closed"):
        raise ConfigError(section.path("fail_mode"), f"expected 'open' or 'closed', got {value!r}")
    return FailMode(value)


def _concurrency(section: Section, fail_mode: FailMode, common: dict[str, Any]) -> Policy:
    if section.has("settle"):
        raise ConfigError(
            section.path("settle"),
            "concurrency policies count requests in flight, not units used: settle applies "
            "to token_bucket, sliding_window and quota policies",
        )
    if section.has("rate"):
        raise ConfigError(
            section.path("rate"), "concurrency policies take `limit` (requests in flight)"
        )
    if not section.has("limit"):
        raise ConfigError(section.path("limit"), "missing key: requests in flight at once")
    limit = section.integer("limit", 1, maximum=_MAX_LIMIT)
    lease_seconds = section.integer("lease_seconds", 60, maximum=_MAX_LEASE_SECONDS)
    fallback_limit = None
    if section.has("fallback_rate"):
        raise ConfigError(
            section.path("fallback_rate"),
            "concurrency policies fail open with `fallback_limit` (in flight per process)",
        )
    if fail_mode is FailMode.OPEN:
        if not section.has("fallback_limit"):
            raise ConfigError(
                section.path("fallback_limit"),
                "missing key: fail-open needs a fallback_limit (in flight per process)",
            )
        fallback_limit = section.integer("fallback_limit", 1, maximum=_MAX_LIMIT)
    elif section.has("fallback_limit"):
        raise ConfigError(section.path("fallback_limit"), "applies to fail_mode open only")
    return Policy(
        rate=Rate(limit, lease_seconds),
        burst=limit,
        lease_seconds=lease_seconds,
        fallback_limit=fallback_limit,
        **common,
    )


def _quota(section: Section, fail_mode: FailMode, common: dict[str, Any]) -> Policy:
    if not section.has("rate"):
        raise ConfigError(section.path("rate"), "missing key")
    text = section.raw("rate")
    match = _QUOTA_RATE.fullmatch(text) if isinstance(text, str) else None
    if match is None or int(match.group(1)) < 1:
        raise ConfigError(
            section.path("rate"),
            f'expected "N/day|week|month" with an integer N from 1 to 15 digits, got {text!r}',
        )
    count, calendar = int(match.group(1)), match.group(2)
    zone = section.text("timezone", "UTC")
    assert zone is not None
    _check_zone(zone, section.path("timezone"))
    fallback_rate = None
    if fail_mode is FailMode.OPEN:
        if not section.has("fallback_rate"):
            raise ConfigError(
                section.path("fallback_rate"), "missing key: fail-open needs a fallback_rate"
            )
        fallback_rate = parse_rate(section.raw("fallback_rate"), section.path("fallback_rate"))
    elif section.has("fallback_rate"):
        raise ConfigError(section.path("fallback_rate"), "applies to fail_mode open only")
    cost = section.integer("cost", 1)
    if cost > count:
        raise ConfigError(
            section.path("cost"), f"cost {cost} exceeds the limit {count}: never admitted"
        )
    return Policy(
        rate=Rate(count, _NOMINAL_SECONDS[calendar]),
        burst=count,
        fallback_rate=fallback_rate,
        cost=cost,
        calendar=calendar,
        timezone=zone,
        settle=section.boolean("settle", False),
        **common,
    )
