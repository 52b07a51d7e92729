"""``sentinel usage CONFIG ENDPOINT_ID TENANT...``: what each tenant has used of a quota
policy's current period (or holds of a concurrency policy's leases), for billing
exports. It reads the store without counting anything; ``--json`` prints one document.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry

from sentinel_core._models import Algorithm, Policy
from sentinel_core._sentinel import Sentinel
from sentinel_core.cli._console import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    add_config_argument,
    describe,
    prog,
    redact_url,
    redis_url,
    say,
    shown,
)
from sentinel_core.cli._source import admin_config
from sentinel_core.config._limits import LEASE_OR_QUOTA
from sentinel_core.decision._usage import Usage
from sentinel_core.errors import ConfigError, StoreError, UnknownEndpointError

USAGE_TIMEOUT_MS = 2_000


def add_usage_command(commands: Any, *, config_argument: bool = True) -> None:
    usage = commands.add_parser(
        "usage",
        help="print tenants' consumption of a quota period (billing exports)",
        description="Read, without counting, what each TENANT has used of ENDPOINT_ID's "
        "current calendar period (quota policies) or holds in flight (concurrency "
        "policies). Exit 0 on success, 1 when the store is unreachable, 2 for a "
        "configuration error or an endpoint that is neither.",
    )
    if config_argument:
        add_config_argument(usage)
    usage.add_argument("endpoint_id", metavar="ENDPOINT_ID")
    usage.add_argument("tenants", metavar="TENANT", nargs="+")
    usage.add_argument("--json", action="store_true", help="print one JSON document")
    usage.add_argument(
        "--redis", metavar="URL", type=redis_url, help="read this server instead of redis_url"
    )
    usage.set_defaults(command=run_usage)


def run_usage(args: argparse.Namespace) -> int:
    command = f"{prog(args)} usage"
    try:
        config = admin_config(args.config, args.endpoint_id)
    except UnknownEndpointError:
        return _not_read(command, args.endpoint_id, "no policy")
    except ConfigError as error:
        say(f"{command}: configuration error: {error}")
        return EXIT_USAGE
    policy = config.policies[args.endpoint_id]
    if policy.algorithm not in LEASE_OR_QUOTA:
        return _not_read(command, args.endpoint_id, f"a {policy.algorithm.value} policy")
    url = args.redis or config.redis_url
    config = dataclasses.replace(config, redis_url=url, socket_timeout_ms=USAGE_TIMEOUT_MS)
    sentinel = Sentinel(config, registry=CollectorRegistry(), entry_points=False)
    try:
        rows = [(tenant, sentinel.usage(args.endpoint_id, tenant)) for tenant in args.tenants]
    except StoreError as exc:
        say(f"{command}: cannot reach {redact_url(url)}: {describe(exc)}")
        return EXIT_FAILED
    finally:
        sentinel.close()
    if args.json:
        say(json.dumps(_document(policy, rows), indent=2))
    else:
        _print_table(command, policy, rows)
    return EXIT_OK


def _not_read(command: str, endpoint_id: str, what: str) -> int:
    say(f"{command}: {endpoint_id!r} is {what}; usage reads quota and concurrency policies")
    return EXIT_USAGE


def _describe(policy: Policy) -> str:
    if policy.algorithm is Algorithm.QUOTA:
        units = ", units settled by usage" if policy.settle else ""
        return f"quota {policy.limit}/{policy.calendar}{units}, periods in {policy.timezone}"
    return f"concurrency {policy.limit} in flight"


def _document(policy: Policy, rows: list[tuple[str, Usage]]) -> dict[str, Any]:
    return {
        "endpoint_id": policy.endpoint_id,
        "algorithm": policy.algorithm.value,
        "limit": policy.limit,
        "calendar": policy.calendar,
        "timezone": policy.timezone if policy.calendar else None,
        "settle": policy.settle,
        "tenants": [
            {
                "tenant": tenant,
                "used": usage.used,
                "remaining": usage.remaining,
                "period_start": _iso(usage.period_start),
                "period_end": _iso(usage.period_end),
            }
            for tenant, usage in rows
        ],
    }


def _iso(instant: datetime | None) -> str | None:
    return None if instant is None else instant.isoformat()


def _print_table(command: str, policy: Policy, rows: list[tuple[str, Usage]]) -> None:
    say(f"{command}: {policy.endpoint_id} ({_describe(policy)})")
    rows = [(shown(tenant), usage) for tenant, usage in rows]
    width = max(len("tenant"), *(len(tenant) for tenant, _ in rows))
    period = "  period" if policy.calendar else ""
    say(f"  {'tenant':<{width}}  {'used':>10}  {'remaining':>10}{period}")
    for tenant, usage in rows:
        span = ""
        if usage.period_start is not None and usage.period_end is not None:
            span = f"  {usage.period_start.isoformat()} .. {usage.period_end.isoformat()}"
        say(f"  {tenant:<{width}}  {usage.used:>10}  {usage.remaining:>10}{span}")
