"""Sentinel on Flask: the three policies of the quick start, on an app factory.

Run it (``memory://`` store, this process only)::

    flask --app examples.flask_app run

or on Redis (which must have ``maxmemory-policy noeviction`` and a bounded
``maxmemory``; the app refuses to start otherwise)::

    SENTINEL_REDIS_URL=redis://127.0.0.1:6379/0 flask --app examples.flask_app run

Then, with a development token::

    TOKEN=$(flask --app examples.flask_app token tenant-42)
    for i in $(seq 25); do
      curl -s -o /dev/null -w "%{http_code}\\n" -X POST localhost:5000/v1/tailor \\
        -H "Authorization: Bearer $TOKEN"
    done

``POST /v1/tailor`` (tenant token bucket, fail-open) and ``POST /v1/ingest`` (tenant
sliding window, fail-closed) are decorated; ``POST /v1/login`` (anonymous: device cookie
and client IP) is guarded by the ``routes`` middleware. Secrets come from
``SENTINEL_JWT_KEY`` and ``SENTINEL_COOKIE_SECRET``; the defaults are for development
only.
``SENTINEL_SOCKET_TIMEOUT_MS`` (default 20) and ``SENTINEL_BREAKER_OPEN_SECONDS``
(default 30) set the budget of a Redis call and the breaker's quarantine;
``SENTINEL_FALLBACK_RATE`` (default 2/second), ``SENTINEL_FALLBACK_SCOPE`` (``process``,
the default, or ``fleet``) and ``SENTINEL_FLEET_HEARTBEAT_SECONDS`` (default 5) the
fail-open allowance of ``/v1/tailor``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

import click
import jwt
from flask import Blueprint, Flask

from sentinel_flask import Sentinel, rate_limited

DEV_JWT_KEY = "dev-only-jwt-key-change-me-0123456789abcdef"
DEV_COOKIE_SECRET = "dev-only-cookie-secret-change-me-0123456789"

sentinel = Sentinel()
api = Blueprint("api", __name__)


def sentinel_config() -> dict[str, Any]:
    """The configuration, from the environment (with development defaults)."""
    return {
        "redis_url": os.environ.get("SENTINEL_REDIS_URL", "memory://"),
        "socket_timeout_ms": int(os.environ.get("SENTINEL_SOCKET_TIMEOUT_MS", "20")),
        "breaker": {"open_seconds": int(os.environ.get("SENTINEL_BREAKER_OPEN_SECONDS", "30"))},
        "fleet_heartbeat_seconds": int(os.environ.get("SENTINEL_FLEET_HEARTBEAT_SECONDS", "5")),
        "jwt": {
            "algorithms": ["HS256"],
            "key": os.environ.get("SENTINEL_JWT_KEY", DEV_JWT_KEY),
        },
        "anonymous": {
            "cookie_secret": os.environ.get("SENTINEL_COOKIE_SECRET", DEV_COOKIE_SECRET),
            # Browsers keep Secure cookies on http://localhost too.
            "secure": True,
        },
        "policies": {
            "pdftalk.ingest": {
                "algorithm": "sliding_window",
                "rate": "10/minute",
                "fail_mode": "closed",
            },
            "resumint.tailor": {
                "algorithm": "token_bucket",
                "rate": "5/second",
                "burst": 20,
                "fail_mode": "open",
                "fallback_rate": os.environ.get("SENTINEL_FALLBACK_RATE", "2/second"),
                "fallback_scope": os.environ.get("SENTINEL_FALLBACK_SCOPE", "process"),
            },
            "auth.login": {
                "algorithm": "token_bucket",
                "rate": "5/minute",
                "identity": "anonymous",
                "fail_mode": "closed",
            },
        },
        "routes": {"POST /v1/login": "auth.login"},
    }


@api.post("/v1/tailor")
@rate_limited("resumint.tailor")
def tailor() -> dict[str, Any]:
    """Tailor a résumé (tenant token bucket: bursts of 20, 5 a second after)."""
    return {"tailored": True}


@api.post("/v1/ingest")
@rate_limited("pdftalk.ingest")
def ingest() -> dict[str, Any]:
    """Ingest a PDF (tenant sliding window: 10 a minute)."""
    return {"ingested": True}


@api.post("/v1/login")
def login() -> dict[str, Any]:
    """Log in (guarded by ``routes``: 5 a minute per device, also charged to its network)."""
    return {"logged_in": True}


@api.get("/health")
def health() -> dict[str, Any]:
    """Not rate limited."""
    return {"status": "ok"}


@click.command("token")
@click.argument("tenant")
def token_command(tenant: str) -> None:
    """Print a one-hour development bearer token for TENANT."""
    key = os.environ.get("SENTINEL_JWT_KEY", DEV_JWT_KEY)
    claims = {"sub": tenant, "exp": int(time.time()) + 3600}
    click.echo(jwt.encode(claims, key, algorithm="HS256"))


def create_app(config: Mapping[str, Any] | None = None) -> Flask:
    """The app; ``config`` replaces the environment's configuration (tests, demos)."""
    app = Flask(__name__)
    app.config["SENTINEL"] = sentinel_config() if config is None else config
    app.register_blueprint(api)
    app.cli.add_command(token_command)
    sentinel.init_app(app)
    # Every view is registered: check them now rather than on the first request.
    sentinel.validate(app)
    return app


app = create_app()
