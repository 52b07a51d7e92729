"""``sentinel peek CONFIG ENDPOINT_ID TENANT`` and ``sentinel reset CONFIG ENDPOINT_ID
TENANT``: the facade's `Sentinel.peek` / `Sentinel.reset` from a shell (SPEC §8), for
support and tests. Peek consumes nothing; reset refills the tenant's buckets (a quota's
current period starts again from 0).

An anonymous policy's buckets belong to one device AND one network: TENANT is then the
client's IP address and ``--device`` its device cookie (or device id); without it the
command says so and exits 2, rather than touching a bucket no request ever uses.

Exit codes: 0 success, 1 the store is unreachable, 2 a configuration error or an
endpoint or identity that peek/reset does not apply to.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from prometheus_client import CollectorRegistry

from sentinel_core._models import Algorithm, IdentityKind
from sentinel_core._sentinel import Sentinel
from sentinel_core.cli import _console as console
from sentinel_core.cli._source import admin_config
from sentinel_core.errors import ConfigError, StoreError, UnknownEndpointError
from sentinel_core.identity._keys import Identity

ADMIN_TIMEOUT_MS = 2_000


def add_admin_commands(commands: Any, *, config_argument: bool = True) -> None:
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
        if config_argument:
            console.add_config_argument(parser)
        parser.add_argument("endpoint_id", metavar="ENDPOINT_ID")
        parser.add_argument(
            "tenant",
            metavar="TENANT",
            help="the tenant id (a user policy: the user id); for an anonymous client, "
            "its IP address",
        )
        parser.add_argument(
            "--device",
            metavar="COOKIE",
            help="an anonymous client (anonymous policies, a user policy's clients without a "
            "user): its device cookie (the value, or the device id after 'v1.')",
        )
        parser.add_argument(
            "--redis",
            metavar="URL",
            type=console.redis_url,
            help="use this server instead of redis_url",
        )
        parser.set_defaults(command=run_admin, action=name)


def run_admin(args: argparse.Namespace) -> int:
    command = f"{console.prog(args)} {args.action}"
    try:
        config = admin_config(args.config, args.endpoint_id)
    except UnknownEndpointError as exc:
        console.say(f"{command}: {exc}")
        return console.EXIT_USAGE
    except ConfigError as error:
        console.say(f"{command}: configuration error: {error}")
        return console.EXIT_USAGE
    url = args.redis or config.redis_url
    config = dataclasses.replace(config, redis_url=url, socket_timeout_ms=ADMIN_TIMEOUT_MS)
    sentinel = Sentinel(config, registry=CollectorRegistry(), entry_points=False)
    policy = sentinel.policy(args.endpoint_id)
    who = console.shown(args.tenant)
    try:
        identity = _identity(sentinel, args)
        if args.action == "reset":
            sentinel.reset(args.endpoint_id, identity)
            refilled = (
                "count in the current period is 0 again"
                if policy.algorithm is Algorithm.QUOTA
                else "buckets are full again"
            )
            console.say(f"{command}: {args.endpoint_id}: {who}'s {refilled}")
            return console.EXIT_OK
        decision = sentinel.peek(args.endpoint_id, identity)
    except ValueError as exc:
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


def _identity(sentinel: Sentinel, args: argparse.Namespace) -> str | Identity:
    """TENANT (a tenant or user id), or the anonymous client named by its address and
    ``--device``: always for an anonymous policy, and for a user policy's anonymous
    fallback (a client with no authenticated user) when ``--device`` is given.

    Raises:
        ValueError: what is missing or wrong, as the message to print.
    """
    kind = sentinel.policy(args.endpoint_id).identity
    if args.device is not None:
        if kind is IdentityKind.TENANT:
            raise ValueError(
                f"--device applies to anonymous and user policies; {args.endpoint_id!r} "
                "is a tenant policy"
            )
        return sentinel.anonymous_identity(args.tenant, args.device)
    if kind is IdentityKind.ANONYMOUS:
        raise ValueError(
            f"{args.endpoint_id!r} is an anonymous policy: its buckets belong to one device "
            "AND one network; give the client's IP address as TENANT and its device cookie "
            "with --device"
        )
    return str(args.tenant)
