"""``flask sentinel check|peek|reset|usage``: Sentinel's operator commands on the app's
own configuration (``app.config["SENTINEL"]`` or its TOML file), registered by
``init_app``. The commands are the ``sentinel`` CLI's, run by `sentinel_core.cli`:
this module only hands the configuration over, and passes the arguments through (so
``flask sentinel peek --help`` is the command's own help)."""

from __future__ import annotations

from collections.abc import Callable

import click
from flask import Flask, current_app
from flask.cli import AppGroup

from sentinel_core import ConfigError, UnknownEndpointError
from sentinel_core.cli import app_main

from ._config import config_source, describe_source

PROG = "flask sentinel"
_COMMANDS = {
    "check": "Validate the configuration and check its Redis server.",
    "peek": "Print the decision an identity's next request would get, consuming nothing.",
    "reset": "Refill an identity's buckets of an endpoint (a quota: its current period).",
    "usage": "Print tenants' consumption of a quota period or their leases in flight.",
}


def sentinel_commands(validate: Callable[[Flask], None]) -> AppGroup:
    """The ``sentinel`` command group of one app's ``flask`` command line; ``check``
    also runs ``validate(app)`` (`Sentinel.validate`: the views' endpoint ids, the
    ``routes`` entries against the app's rules)."""
    group = AppGroup("sentinel", help="Sentinel's operator tools on this app's configuration.")
    for name, text in _COMMANDS.items():
        runner = _runner(name, validate)
        command = click.argument("arguments", nargs=-1, type=click.UNPROCESSED)(runner)
        group.command(
            name,
            help=f"{text} Run `{PROG} {name} --help` for its arguments.",
            context_settings={"ignore_unknown_options": True},
            add_help_option=False,
        )(command)
    return group


def _runner(name: str, validate: Callable[[Flask], None]) -> Callable[[tuple[str, ...]], None]:
    def run(arguments: tuple[str, ...]) -> None:
        app: Flask = current_app._get_current_object()  # type: ignore[attr-defined]

        def problems() -> list[str]:
            try:
                validate(app)
            except (UnknownEndpointError, ConfigError) as exc:
                return [str(exc)]
            return []

        code = app_main(
            [name, *arguments],
            config=config_source(app),
            source=describe_source(app),
            prog=PROG,
            app_problems=problems,
        )
        click.get_current_context().exit(code)

    return run
