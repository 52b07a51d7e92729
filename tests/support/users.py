"""What every adapter's per-user suite shares: a user policy, small enough to exhaust."""

from __future__ import annotations

from typing import Any

from tests.support.adapter_config import spec_config

USER_POLICY = "api.user"
API_KEYS = {"key-of-acme-0123": "acme", "key-of-globex-45": "globex"}
"""An app's API keys and the accounts they belong to (what an ``identify`` looks up)."""


def user_config(redis_url: str, **overrides: Any) -> dict[str, Any]:
    """SPEC §2's configuration plus ``api.user``: 3 requests a minute per user; a request
    without a user is an anonymous client, 3 per device and 4 per network a minute."""
    config = spec_config(redis_url, **overrides)
    config["policies"][USER_POLICY] = {
        "algorithm": "sliding_window",
        "rate": "3/minute",
        "network_rate": "4/minute",
        "identity": "user",
        "fail_mode": "closed",
    }
    return config


def api_key_user(headers: Any) -> str | None:
    """The account an ``X-API-Key`` header names, None for a missing or unknown key."""
    key = headers.get("x-api-key")
    return None if key is None else API_KEYS.get(key)
