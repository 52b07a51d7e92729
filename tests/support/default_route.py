"""What the adapters' ``routes["*"]`` tests share (SPEC §5, issue 27): a configuration
whose default is an anonymous policy (no token needed), and another policy that
decorators and a ``routes`` entry name."""

from __future__ import annotations

from typing import Any

from sentinel_core.testing import ratelimit_headers
from tests.support.adapter_config import spec_config

DEFAULT_ID = "auth.login"
"""``routes["*"]``: two requests per minute per client."""
OWN_ID = "own.limit"
"""What decorated and routed views name instead: five per minute per client."""


def default_route_config(redis_url: str, **routes: str) -> dict[str, Any]:
    config = spec_config(redis_url, routes={"*": DEFAULT_ID, **routes})
    config["policies"][OWN_ID] = {
        "algorithm": "token_bucket",
        "rate": "5/minute",
        "identity": "anonymous",
        "fail_mode": "closed",
        "network_rate": "5/minute",
        "network_burst": 5,
    }
    return config


def policy_names(ratelimit_policy: str | None) -> list[str]:
    """The quota names a ``RateLimit-Policy`` field lists (empty when absent)."""
    return list(ratelimit_headers({"RateLimit-Policy": ratelimit_policy or ""})["policy"])
