"""The Flask suite's fixtures: the ``make_app(config)`` factory and Redis helpers.

`make_app(config)` builds the app of `tests.flask.apps` (every way a route can be
guarded), initialises Sentinel on it and closes the app's Redis connections after the
test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from flask import Flask
from prometheus_client import CollectorRegistry

from sentinel_flask import Sentinel
from tests.flask.apps import MakeApp, register_views
from tests.support.redis_admin import RedisAdmin
from tests.support.redis_server import free_port


@pytest.fixture
def make_app() -> Iterator[MakeApp]:
    """``make_app(config, *, views=register_views, sentinel=None, **flask_config)``:
    a Flask app with ``config`` as ``app.config["SENTINEL"]`` (None: unset) and
    Sentinel initialised after the views are registered. Each app gets its own
    metrics registry; its Redis connections are closed after the test."""
    apps: list[Flask] = []

    def make(
        config: dict[str, Any] | None,
        *,
        views: Callable[[Flask], None] | None = register_views,
        sentinel: Sentinel | None = None,
        **flask_config: Any,
    ) -> Flask:
        app = Flask(f"test_app_{len(apps)}")
        app.config.update(TESTING=True, **flask_config)
        if config is not None:
            app.config["SENTINEL"] = config
        if views is not None:
            views(app)
        apps.append(app)
        (sentinel or Sentinel(registry=CollectorRegistry())).init_app(app)
        return app

    yield make
    for app in apps:
        core = app.extensions.get("sentinel")
        if core is not None:
            core.close()


@pytest.fixture
def dead_redis_url() -> str:
    """A Redis URL nothing listens on: every call is a connection error."""
    return f"redis://127.0.0.1:{free_port()}/0"


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[RedisAdmin]:
    """The store under test, seen whole (every primary of a cluster), emptied for this test."""
    admin = RedisAdmin(redis_url)
    yield admin
    admin.close()
