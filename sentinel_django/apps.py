"""The Django app: registers the system checks and builds Sentinel without network I/O."""

from __future__ import annotations

import contextlib

from django.apps import AppConfig  # type: ignore[import-untyped]
from django.core.exceptions import ImproperlyConfigured  # type: ignore[import-untyped]


class SentinelAppConfig(AppConfig):  # type: ignore[misc]
    name = "sentinel_django"
    label = "sentinel"
    verbose_name = "Sentinel rate limiting"

    def ready(self) -> None:
        """Register the checks, keep Django's per-request record of Sentinel's denials
        out of the logs (`.request_log`), and build the instance from ``settings.SENTINEL``.

        Building loads the configuration and the plugins, and opens no connection: the
        Redis check runs before the first guarded request (and in ``check --deploy``).
        An invalid configuration does not stop ``ready``: the ``sentinel.E001`` system
        check reports it with its key path, and loading the middleware raises it.
        """
        from . import checks, conf, request_log

        checks.register_checks()
        request_log.install()
        with contextlib.suppress(ImproperlyConfigured):
            conf.runtime()
