"""The ``CONFIG`` the adapters' guide (docs/adapters.md) assumes, for the tests that run
its snippets: ``reports.export`` and ``api.default``, anonymous (no token needed, the
test clients keep the device cookie), and ``routes["*"]``."""

from __future__ import annotations

from typing import Any

from tests.support.adapter_config import COOKIE_SECRET


def guide_config(redis_url: str) -> dict[str, Any]:
    anonymous = {
        "algorithm": "token_bucket",
        "rate": "2/minute",
        "identity": "anonymous",
        "fail_mode": "closed",
        "network_rate": "2/minute",
        "network_burst": 2,
    }
    return {
        "redis_url": redis_url,
        "socket_timeout_ms": 1000,
        "anonymous": {"cookie_secret": COOKIE_SECRET, "secure": False},
        "policies": {"reports.export": anonymous, "api.default": anonymous},
        "routes": {"*": "api.default"},
    }
