"""``sentinel peek CONFIG ENDPOINT_ID TENANT`` and ``sentinel reset CONFIG ENDPOINT_ID
TENANT``: the facade's `Sentinel.peek` / `Sentinel.reset` from a shell (SPEC §8), for
support and tests. Peek consumes nothing; reset refills the tenant's buckets.

Exit codes: 0 success, 1 the store is unreachable, 2 a configuration error or an
endpoint that peek/reset does not apply to.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from prometheus_client import CollectorRegistry

from sentinel_core._sentinel import Sentinel
from sentinel_core.cli import _console as console
from sentinel_core.config._schema import load_config
from sentinel_core.errors import ConfigError, StoreError, UnknownEndpointError

ADMIN_TIMEOUT_MS = 2_000


def add_admin_commands(commands: Any) -> None:
    for name, text in (
        (
            "peek",
            "print the decision TENANT's next request on ENDPOINT_ID would get, consuming nothing",
        ),
        ("reset", "refill TENANT's buckets of ENDPOINT_ID (support, tests)"),
    ):
        parser = commands.add_parser(
            name,
            help=text,
            description=f"{text[0].upper()}{text[1:]}. Exit 0 on success, 1 when the store "
            "is unreachable, 2 for a configuration error or an endpoint it does not apply to.",
        )
        parser.add_argument("config", metavar="CONFIG", help="path to the TOML configuration")
        parser.add_argument("endpoint_id", metavar="ENDPOINT_ID")
        parser.add_argument("tenant", metavar="TENANT")
        parser.add_argument(
            "--redis",
            metavar="URL",
            type=console.redis_url,
            help="use this server instead of redis_url",
        )
        parser.set_defaults(command=run_admin, action=name)


def run_admin(args: argparse.Namespace) -> int:
    command = f"sentinel {args.action}"
    try:
        config = load_config(args.config)
    except ConfigError as error:
        console.say(f"{command}: configuration error: {error}")
        return console.EXIT_USAGE
    url = args.redis or config.redis_url
    config = dataclasses.replace(config, redis_url=url, socket_timeout_ms=ADMIN_TIMEOUT_MS)
    sentinel = Sentinel(config, registry=CollectorRegistry(), entry_points=False)
    try:
        if args.action == "reset":
            sentinel.reset(args.endpoint_id, args.tenant)
            tenant = console.shown(args.tenant)
            console.say(f"{command}: {args.endpoint_id}: {tenant}'s buckets are full again")
            return console.EXIT_OK
        decision = sentinel.peek(args.endpoint_id, args.tenant)
    except (UnknownEndpointError, ValueError) as exc:
        console.say(f"{command}: {exc}")
        return console.EXIT_USAGE
    except StoreError as exc:
        console.say(f"{command}: cannot reach {console.redact_url(url)}: {console.describe(exc)}")
        return console.EXIT_FAILED
    finally:
        sentinel.close()
    verdict = "allowed" if decision.would_allow else "rate_limited"
    retry = (
        ""
        if decision.retry_after_seconds is None
        else (f", retry after {decision.retry_after_seconds}s")
    )
    console.say(
        f"{command}: {args.endpoint_id}: {verdict} "
        f"({decision.remaining} of {decision.limit} would remain, full in "
        f"{decision.reset_seconds}s{retry})"
    )
    return console.EXIT_OK
