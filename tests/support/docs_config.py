"""The ``CONFIG`` the adapters' guide (docs/adapters.md) assumes, for the tests that run
its snippets: ``reports.export`` and ``api.default``, anonymous (no token needed, the
test clients keep the device cookie), and ``routes["*"]``."""

from __future__ import annotations

from typing import Any

from tests.support.adapter_config import ANONYMOUS_TWO_A_MINUTE, COOKIE_SECRET


def guide_config(redis_url: str) -> dict[str, Any]:
    anonymous = dict(ANONYMOUS_TWO_A_MINUTE)
    return {
        "redis_url": redis_url,
        "socket_timeout_ms": 1000,
        "anonymous": {"cookie_secret": COOKIE_SECRET, "secure": False},
        "policies": {"reports.export": anonymous, "api.default": anonymous},
        "routes": {"*": "api.default"},
    }
