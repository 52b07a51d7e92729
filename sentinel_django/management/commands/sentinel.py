"""``python manage.py sentinel check|peek|reset|usage``: the ``sentinel`` commands on
``settings.SENTINEL``. The commands are `sentinel_core.cli`'s; this one only hands the
setting over.

No system checks run first: ``check`` is the check, and ``peek``/``reset``/``usage``
must work on a support machine without the app's JWT secret, which the configuration
check (``sentinel.E001``) would require.
"""

from __future__ import annotations

import argparse
from typing import Any, ClassVar

from django.core.management.base import BaseCommand  # type: ignore[import-untyped]

from sentinel_core import ConfigError
from sentinel_core.cli import add_app_commands, run

from ... import conf

PROG = "manage.py sentinel"


class Command(BaseCommand):  # type: ignore[misc]
    help = "Sentinel's operator tools on settings.SENTINEL: check, peek, reset, usage."
    requires_system_checks: ClassVar[list[str]] = []

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_app_commands(parser, prog=PROG, source=f"settings.{conf.SETTING}")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            options["config"] = conf.load_settings()
        except ConfigError as error:
            self.stdout.write(f"{PROG}: settings.{conf.SETTING}: {error}")
            raise SystemExit(2) from None
        code = run(argparse.Namespace(**options))
        if code:
            raise SystemExit(code)
