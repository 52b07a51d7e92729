"""The Django suite: Django configured from ``djproject.settings``, Sentinel per test.

Django is configured here (``settings.configure`` + ``django.setup``) rather than by
pytest-django: the suite needs no database, and configuring Django only when this
directory is collected keeps it out of the other adapters' suites.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import django
import pytest
from django.conf import settings
from django.test import override_settings
from django.test.utils import setup_test_environment, teardown_test_environment
from django_harness import Configure, Http, LoopRunner
from djproject import settings as test_settings

from tests.support.adapter_config import spec_config
from tests.support.redis_server import free_port

if not settings.configured:
    settings.configure(
        **{name: getattr(test_settings, name) for name in dir(test_settings) if name.isupper()}
    )
    django.setup()


@pytest.fixture(scope="session", autouse=True)
def _django_test_environment() -> Iterator[None]:
    setup_test_environment()
    yield
    teardown_test_environment()


@pytest.fixture
def configure(redis_url: str) -> Iterator[Configure]:
    """Install a SPEC §2 configuration (on our private Redis unless ``redis_url`` is
    given) as ``settings.SENTINEL`` for the rest of the test; returns the mapping."""
    with contextlib.ExitStack() as stack:

        def apply(**overrides: Any) -> dict[str, Any]:
            overrides.setdefault("routes", test_settings.ROUTES)
            # No test here is about timeouts: a generous budget keeps a loaded machine's
            # slow reply from turning into a fail-closed 503.
            overrides.setdefault("socket_timeout_ms", 1000)
            config = spec_config(overrides.pop("redis_url", redis_url), **overrides)
            stack.enter_context(override_settings(SENTINEL=config))
            return config

        yield apply


@pytest.fixture
def dead_redis_url() -> str:
    """A Redis URL where nothing listens: every call is a connection error."""
    return f"redis://127.0.0.1:{free_port()}/0"


@pytest.fixture(params=["sync", "async"])
def http(request: pytest.FixtureRequest) -> Iterator[Http]:
    """Each test twice: sync views through ``Client``, async views through ``AsyncClient``."""
    if request.param == "sync":
        yield Http("sync", None)
        return
    runner = LoopRunner()
    try:
        yield Http("async", runner)
    finally:
        runner.close()
