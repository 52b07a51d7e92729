"""The contract app on Django: ``settings.SENTINEL`` and ``ROOT_URLCONF`` overridden for
the test, the system checks as its startup, the test ``Client`` as the server."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import django
from django.conf import settings
from django.core.checks import ERROR, run_checks
from django.test import Client, override_settings
from prometheus_client import CollectorRegistry

from sentinel_django import get_sentinel
from tests.contract.harness import (
    Refused,
    Reply,
    in_threads,
    lower_headers,
    routes_for,
    spell_angles,
)

MIDDLEWARE = ["sentinel_django.middleware.SentinelMiddleware"]

if not settings.configured:
    # The Django suite's settings, so that whichever suite is collected first configures
    # Django the same way (settings are configured once per process).
    _spec = importlib.util.spec_from_file_location(
        "contract_django_settings", Path(__file__).parents[1] / "django/djproject/settings.py"
    )
    assert _spec is not None
    assert _spec.loader is not None
    _module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_module)
    settings.configure(**{name: getattr(_module, name) for name in dir(_module) if name.isupper()})
    django.setup()


class DjangoClient:
    def __init__(self, config: Mapping[str, Any]) -> None:
        self._settings = override_settings(
            SENTINEL={
                **routes_for(config, spell_angles),
                "identify": "tests.contract.harness.contract_user",
            },
            ROOT_URLCONF="tests.contract.django_urls",
            MIDDLEWARE=MIDDLEWARE,
            SENTINEL_METRICS_REGISTRY=CollectorRegistry(),
            DEBUG=True,
        )
        self._settings.enable()
        errors = [m for m in run_checks(tags=["sentinel"]) if m.level >= ERROR]
        if errors:
            self.close()
            raise Refused("; ".join(f"{m.id}: {m.msg}" for m in errors))
        self._http = Client(raise_request_exception=False)
        # Loaded now, as a server's handler loads it when it starts: the test client's
        # loads on its first request, and two threads racing there (`concurrently`)
        # would both add the middleware's process_view, which would run twice.
        self._http.handler.load_middleware()
        self.core = get_sentinel()

    def request(self, method: str, path: str, *, headers: Mapping[str, str] | None = None) -> Reply:
        response = self._http.generic(
            method, path, headers=dict(headers or {}), REMOTE_ADDR="203.0.113.7"
        )
        body = b"".join(response.streaming_content) if response.streaming else response.content
        response.close()
        cookies = [morsel.OutputString() for morsel in response.cookies.values()]
        return Reply(response.status_code, lower_headers(list(response.items())), body, cookies)

    def concurrently(
        self, requests: Sequence[tuple[str, str]], *, headers: Mapping[str, str] | None = None
    ) -> list[Reply]:
        return in_threads(self, requests, headers)

    def close(self) -> None:
        self._settings.disable()


class DjangoFactory:
    name = "django"

    def build(self, config: Mapping[str, Any]) -> DjangoClient:
        return DjangoClient(config)
