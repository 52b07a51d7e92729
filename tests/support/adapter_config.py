"""What every adapter's HTTP suite shares: the SPEC §2 configuration and bearer tokens."""

from __future__ import annotations

import time
from typing import Any

import jwt

JWT_KEY = "test-jwt-key-0123456789abcdef-0123456789"
COOKIE_SECRET = "test-cookie-secret-0123456789abcdef-0123"
ANONYMOUS_TWO_A_MINUTE = {
    "algorithm": "token_bucket",
    "rate": "2/minute",
    "identity": "anonymous",
    "fail_mode": "closed",
    # one device's worth per network, so a test from one address meets it
    "network_rate": "2/minute",
    "network_burst": 2,
}
"""An anonymous policy (no token needed) that a test exhausts in three requests."""


def spec_config(redis_url: str, **overrides: Any) -> dict[str, Any]:
    """The three policies of SPEC §2, small enough to exhaust in a test.

    ``resumint.tailor``: tenant token bucket, fail-open (emergency 2/second);
    ``pdftalk.ingest``: tenant sliding window, fail-closed;
    ``auth.login``: anonymous token bucket, fail-closed.
    """
    config: dict[str, Any] = {
        "redis_url": redis_url,
        # generous: a loaded CI machine must not turn an answer into a redis_timeout;
        # dead-port tests are refused at once whatever the budget
        "socket_timeout_ms": 1000,
        "jwt": {"algorithms": ["HS256"], "key": JWT_KEY},
        "anonymous": {"cookie_secret": COOKIE_SECRET, "secure": False},
        "breaker": {"failure_threshold": 3, "open_seconds": 30},
        "policies": {
            "resumint.tailor": {
                "algorithm": "token_bucket",
                "rate": "1/minute",
                "burst": 3,
                "fail_mode": "open",
                "fallback_rate": "2/second",
            },
            "pdftalk.ingest": {
                "algorithm": "sliding_window",
                "rate": "3/minute",
                "fail_mode": "closed",
            },
            "auth.login": dict(ANONYMOUS_TWO_A_MINUTE),
        },
    }
    config.update(overrides)
    return config


def five_a_minute_login(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with ``auth.login`` at "5/minute" a device and the network's default
    (ten devices' worth): issue 26's login that a client dropping its cookies got 50
    times a minute."""
    login = {"algorithm": "token_bucket", "rate": "5/minute", "identity": "anonymous"}
    policies = {**config["policies"], "auth.login": {**login, "fail_mode": "closed"}}
    return {**config, "policies": policies}


def bearer(tenant: str, *, key: str = JWT_KEY, expires_in: int = 300, **claims: Any) -> str:
    """An ``Authorization`` header value with a valid HS256 token for ``tenant``."""
    payload = {"sub": tenant, "exp": int(time.time()) + expires_in, **claims}
    return "Bearer " + jwt.encode(payload, key, algorithm="HS256")
