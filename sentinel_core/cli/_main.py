"""The ``sentinel`` command line (SPEC §8): ``sentinel check``, ``sentinel demo`` and
``sentinel usage`` (in `_usage`), ``sentinel peek`` and ``sentinel reset`` (in `_admin`).

`app_main` and `add_app_commands` serve the same ``check``, ``peek``, ``reset`` and
``usage`` to an app's own command line (``flask sentinel``, ``manage.py sentinel``),
with the configuration the app hands over instead of a CONFIG file.

``check`` runs the same start-up check an adapter runs, but prints every line of it
instead of stopping at the first problem. ``demo`` sends requests through
`Sentinel.guard`, exactly as an adapter does, and prints each outcome as a table row:
two tenants' bursts on a token bucket and a sliding window, then a fail-closed and a
fail-open endpoint while Redis is unreachable.

Exit codes: 0 success, 1 a check failed or Redis is unreachable, 2 a usage or
configuration error.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry

from sentinel_core._sentinel import Sentinel
from sentinel_core.cli._admin import add_admin_commands
from sentinel_core.cli._console import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    add_config_argument,
    bounded_int,
    describe,
    prog,
    redact_url,
    redis_url,
    say,
    source,
)
from sentinel_core.cli._demo import run_demo
from sentinel_core.cli._usage import add_usage_command
from sentinel_core.config._schema import SentinelConfig, load_config
from sentinel_core.errors import ConfigError, StoreError
from sentinel_core.store._protocol import Check

AppProblems = Callable[[], Sequence[str]]
"""What an app's own ``check`` finds wrong in the app: one message per problem."""

CHECK_TIMEOUT_MS = 2_000
MAX_TIMEOUT_MS = 60_000
"""The largest --timeout-ms, as for socket_timeout_ms in a configuration."""
"""The check waits longer than a request would: a slow link should fail on its own line
("cannot reach"), not look like a dead server."""
_BUILTIN_PLUGINS = ("sentinel.metrics", "sentinel.logging")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``sentinel`` command; returns the exit code."""
    return run(_parser().parse_args(argv))


def app_main(
    argv: Sequence[str],
    *,
    config: Mapping[str, Any] | str,
    source: str,
    prog: str,
    app_problems: AppProblems | None = None,
) -> int:
    """Run ``check``, ``peek``, ``reset`` or ``usage`` on an app's configuration (what
    ``flask sentinel`` hands over); returns the exit code. ``source`` names the
    configuration in messages, ``prog`` the command, and ``app_problems`` what ``check``
    finds wrong in the app itself (see `add_app_commands`)."""
    parser = argparse.ArgumentParser(prog=prog, description=_APP_DESCRIPTION)
    add_app_commands(parser, prog=prog, config=config, source=source, app_problems=app_problems)
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # --help (0) or a usage error (2): argparse has said why
        return EXIT_OK if stop.code in (0, None) else EXIT_USAGE
    return run(args)


def add_app_commands(
    parser: argparse.ArgumentParser,
    *,
    prog: str,
    config: Mapping[str, Any] | str | None = None,
    source: str | None = None,
    app_problems: AppProblems | None = None,
) -> None:
    """Add ``check``, ``peek``, ``reset`` and ``usage`` to ``parser``, without their
    CONFIG argument: they read ``config`` (set ``args.config`` before `run` when it
    is only known later, as Django's settings are). ``check`` also reports what
    ``app_problems()`` finds wrong in the app (a view naming an endpoint id no policy
    declares, a ``routes`` entry no route answers), and exits 2 when it finds anything.

    The commands' parsers are plain argparse ones whatever ``parser`` is (Django's
    ``CommandParser`` turns a usage error into a ``CommandError`` exiting 1): a usage
    error prints the command's usage and exits 2, as ``sentinel`` does."""
    commands = parser.add_subparsers(
        title="commands",
        required=True,
        metavar="COMMAND",
        parser_class=argparse.ArgumentParser,
    )
    _add_check(commands, config_argument=False)
    add_admin_commands(commands, config_argument=False)
    add_usage_command(commands, config_argument=False)
    parser.set_defaults(config=config, source=source, prog=prog, app_problems=app_problems)


def run(args: argparse.Namespace) -> int:
    """Run the command ``args`` were parsed for; returns the exit code."""
    command: Callable[[argparse.Namespace], int] = args.command
    try:
        return command(args)
    except BrokenPipeError:  # `sentinel demo | head`: the reader is gone, stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED


_APP_DESCRIPTION = (
    "Sentinel's operator tools on this app's configuration: check it and its Redis "
    "server, peek at or reset an identity's buckets, read quota usage."
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sentinel",
        description="Tenant-aware, endpoint-aware distributed rate limiting: operator tools.",
    )
    commands = parser.add_subparsers(title="commands", required=True, metavar="COMMAND")
    _add_check(commands, config_argument=True)
    demo = commands.add_parser(
        "demo",
        help="show bursts being limited and Redis failures being handled",
        description="Send requests through Sentinel and print each outcome: two tenants' "
        "bursts limited on a token bucket and a sliding window (memory:// unless --redis), "
        "then a fail-closed and a fail-open endpoint with Redis unreachable.",
    )
    demo.add_argument(
        "--redis", metavar="URL", type=redis_url, help="run the bursts on this Redis server"
    )
    demo.set_defaults(command=run_demo)
    add_admin_commands(commands)
    add_usage_command(commands)
    return parser


def _add_check(commands: Any, *, config_argument: bool) -> None:
    check = commands.add_parser(
        "check",
        help="validate a configuration and the Redis server it names",
        description="Validate the configuration (CONFIG: a TOML file with a [sentinel] "
        "table) and check its Redis server: version, noeviction, bounded maxmemory, script "
        "load. Exit 0 when every check passes, 1 when one fails or Redis is unreachable, 2 "
        "for a configuration error.",
    )
    if config_argument:
        add_config_argument(check)
    check.add_argument(
        "--redis", metavar="URL", type=redis_url, help="check this server instead of redis_url"
    )
    check.add_argument(
        "--timeout-ms",
        type=bounded_int(MAX_TIMEOUT_MS),
        default=CHECK_TIMEOUT_MS,
        help=f"connect and read timeout per Redis call (default {CHECK_TIMEOUT_MS})",
    )
    check.set_defaults(command=run_check)


# ---------------------------------------------------------------- sentinel check


def run_check(args: argparse.Namespace) -> int:
    """``sentinel check``: one PASS/FAIL line per check, then a verdict."""
    say(f"{prog(args)} check: {source(args)}")
    try:
        config = load_config(args.config)
    except ConfigError as error:
        _report(Check("config", False, str(error)))
        say(f"result: FAIL (configuration error at {error.path or source(args)})")
        return EXIT_USAGE
    url = args.redis or config.redis_url
    config = dataclasses.replace(config, redis_url=url, socket_timeout_ms=args.timeout_ms)
    origin = "--redis" if args.redis else "redis_url"
    _report(Check("config", True, f"{_config_summary(config)}; {origin} {redact_url(url)}"))
    app_problems: AppProblems | None = getattr(args, "app_problems", None)
    if app_problems is not None:
        problems = app_problems()
        for problem in problems:
            _report(Check("app", False, problem))
        if problems:
            say(f"result: FAIL (the app: {len(problems)} {_plural(len(problems), 'problem')})")
            return EXIT_USAGE
        _report(Check("app", True, "every view's and routes entry's endpoint id is guardable"))
    try:
        sentinel = Sentinel(config, registry=CollectorRegistry())
    except Exception as exc:  # a third-party plugin failed to load: say which, then stop
        _report(Check("plugins", False, f"loading the 'sentinel' entry points: {exc!r}"))
        say("result: FAIL")
        return EXIT_FAILED
    _report(Check("plugins", True, _plugin_summary(sentinel)))
    if not config.enabled:
        say(
            f"  {'off':<4}  {'limiting':<22}  enabled is false: every guard passes requests through"
        )
        if not args.redis:  # the guards never contact it; --redis asks for it anyway
            sentinel.close()
            say("result: PASS (limiting is off; Redis not contacted)")
            return EXIT_OK
    try:
        report = sentinel.store.check(config.require_noeviction)
    except StoreError as exc:
        _report(Check("redis", False, f"cannot reach {redact_url(url)}: {describe(exc)}"))
        say("result: FAIL (Redis unreachable)")
        return EXIT_FAILED
    finally:
        sentinel.close()
    for check in report.checks:
        _report(check)
    if not config.require_noeviction:
        say(f"  {'skip':<4}  {'eviction, maxmemory':<22}  require_noeviction is false")
    failed = [check for check in report.checks if not check.ok]
    if failed:
        say(f"result: FAIL ({len(failed)} of {len(report.checks)} server checks failed)")
        return EXIT_FAILED
    say("result: PASS")
    return EXIT_OK


def _report(check: Check) -> None:
    say(f"  {'PASS' if check.ok else 'FAIL'}  {check.name:<22}  {check.detail}")


def _config_summary(config: SentinelConfig) -> str:
    policies, routes = len(config.policies), len(config.routes)
    return (
        f"{policies} {_plural(policies, 'policy', 'policies')}, {routes} {_plural(routes, 'route')}"
    )


def _plugin_summary(sentinel: Sentinel) -> str:
    names = [
        str(name)
        for name, _ in sentinel.plugin_manager.list_name_plugin()
        if name not in _BUILTIN_PLUGINS
    ]
    return f"{len(names)} from entry points" + (f": {', '.join(sorted(names))}" if names else "")


def _plural(count: int, singular: str, plural: str | None = None) -> str:
    return singular if count == 1 else plural or singular + "s"
