"""``python manage.py sentinel check|peek|reset|usage``: the ``sentinel`` commands on
``settings.SENTINEL``. The commands are `sentinel_core.cli`'s; this one only hands the
setting over.

No system checks run first: ``peek``/``reset``/``usage`` must work on a support
machine without the app's JWT secret, which the configuration check (``sentinel.E001``)
would require; ``check`` runs Sentinel's own system checks and reports their errors.
"""

from __future__ import annotations

import argparse
from typing import Any, ClassVar

from django.core import checks  # type: ignore[import-untyped]
from django.core.management.base import BaseCommand  # type: ignore[import-untyped]

from sentinel_core import ConfigError
from sentinel_core.cli import add_app_commands, run

from ... import conf

PROG = "manage.py sentinel"


class Command(BaseCommand):  # type: ignore[misc]
    help = "Sentinel's operator tools on settings.SENTINEL: check, peek, reset, usage."
    requires_system_checks: ClassVar[list[str]] = []

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_app_commands(
            parser, prog=PROG, source=f"settings.{conf.SETTING}", app_problems=_app_problems
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            options["config"] = conf.load_settings()
        except ConfigError as error:
            self.stdout.write(f"{PROG}: settings.{conf.SETTING}: {error}")
            raise SystemExit(2) from None
        code = run(argparse.Namespace(**options))
        if code:
            raise SystemExit(code)


def _app_problems() -> list[str]:
    """The errors of Sentinel's system checks (views and ``routes`` against the URL
    patterns, endpoints that cannot be guarded): ``check`` reports them itself, since
    this command skips the system checks."""
    return [
        f"{message.id}: {message.msg}"
        for message in checks.run_checks(tags=["sentinel"])
        if message.is_serious()
    ]
