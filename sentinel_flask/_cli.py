"""``flask sentinel check|peek|reset|usage``: Sentinel's operator commands on the app's
own configuration (``app.config["SENTINEL"]`` or its TOML file), registered by
``init_app``. The commands are the ``sentinel`` CLI's, run by `sentinel_core.cli`:
this module only hands the configuration over, and passes the arguments through (so
``flask sentinel peek --help`` is the command's own help)."""

from __future__ import annotations

from collections.abc import Callable

import click
from flask import current_app
from flask.cli import AppGroup

from sentinel_core.cli import app_main

from ._config import config_source, describe_source

PROG = "flask sentinel"
_COMMANDS = {
    "check": "Validate the configuration and check its Redis server.",
    "peek": "Print the decision an identity's next request would get, consuming nothing.",
    "reset": "Refill an identity's buckets of an endpoint (a quota: its current period).",
    "usage": "Print tenants' consumption of a quota period or their leases in flight.",
}


def sentinel_commands() -> AppGroup:
    """The ``sentinel`` command group of one app's ``flask`` command line."""
    group = AppGroup("sentinel", help="Sentinel's operator tools on this app's configuration.")
    for name, text in _COMMANDS.items():
        command = click.argument("arguments", nargs=-1, type=click.UNPROCESSED)(_runner(name))
        group.command(
            name,
            help=f"{text} Run `{PROG} {name} --help` for its arguments.",
            context_settings={"ignore_unknown_options": True},
            add_help_option=False,
        )(command)
    return group


def _runner(name: str) -> Callable[[tuple[str, ...]], None]:
    def run(arguments: tuple[str, ...]) -> None:
        app = current_app
        code = app_main(
            [name, *arguments], config=config_source(app), source=describe_source(app), prog=PROG
        )
        click.get_current_context().exit(code)

    return run
