"""A FastAPI app guarded by Sentinel: the three policies of the quick start.

Run it::

    uvicorn examples.fastapi_app:app                                 # memory:// store
    SENTINEL_REDIS_URL=redis://127.0.0.1:6380/0 uvicorn examples.fastapi_app:app

then, with a token for tenant ``acme`` signed with the development key below::

    TOKEN=$(python -c 'from examples.fastapi_app import dev_token; print(dev_token("acme"))')
    curl -i -X POST localhost:8000/v1/tailor -H "Authorization: Bearer $TOKEN"

- ``POST /v1/tailor``: tenant token bucket, 5/second with bursts of 20, fail-open
  (2/second per process while Redis is down);
- ``POST /v1/ingest``: tenant sliding window, 10/minute, fail-closed (503 while Redis
  is down), guarded through the ``routes`` table rather than a decorator;
- ``POST /auth/login``: anonymous token bucket, 5/minute per device cookie and per IP.

Secrets come from ``SENTINEL_JWT_KEY`` and ``SENTINEL_COOKIE_SECRET``; the defaults are
for development only.
``SENTINEL_SOCKET_TIMEOUT_MS`` (default 20) and ``SENTINEL_BREAKER_OPEN_SECONDS``
(default 30) set the budget of a Redis call and the breaker's quarantine;
``SENTINEL_FALLBACK_RATE`` (default 2/second), ``SENTINEL_FALLBACK_SCOPE`` (``process``,
the default, or ``fleet``) and ``SENTINEL_FLEET_HEARTBEAT_SECONDS`` (default 5) the
fail-open allowance of ``/v1/tailor``.
"""

from __future__ import annotations

import os
import time
from typing import Any

import jwt
from fastapi import FastAPI
from pydantic import BaseModel

from sentinel_fastapi import Sentinel, rate_limited

DEV_JWT_KEY = "dev-only-jwt-key-change-me-0123456789abcdef"
DEV_COOKIE_SECRET = "dev-only-cookie-secret-change-me-0123456789"


def dev_token(tenant: str, *, expires_in: int = 3600) -> str:
    """A bearer token for ``tenant`` signed with the development key (for trying the app)."""
    claims = {"sub": tenant, "exp": int(time.time()) + expires_in}
    return jwt.encode(claims, os.environ.get("SENTINEL_JWT_KEY", DEV_JWT_KEY), algorithm="HS256")


def sentinel_config() -> dict[str, Any]:
    """The configuration, from the environment with development defaults."""
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
            # Browsers only send Secure cookies over HTTPS; the dev server is plain HTTP.
            "secure": os.environ.get("SENTINEL_COOKIE_SECURE", "0") == "1",
        },
        "policies": {
            "resumint.tailor": {
                "algorithm": "token_bucket",
                "rate": "5/second",
                "burst": 20,
                "fail_mode": "open",
                "fallback_rate": os.environ.get("SENTINEL_FALLBACK_RATE", "2/second"),
                "fallback_scope": os.environ.get("SENTINEL_FALLBACK_SCOPE", "process"),
            },
            "pdftalk.ingest": {
                "algorithm": "sliding_window",
                "rate": "10/minute",
                "fail_mode": "closed",
            },
            "auth.login": {
                "algorithm": "token_bucket",
                "rate": "5/minute",
                "identity": "anonymous",
                "fail_mode": "closed",
            },
        },
        "routes": {"POST /v1/ingest": "pdftalk.ingest"},
    }


class Tailored(BaseModel):
    job: str
    resume: str


def create_app() -> FastAPI:
    sentinel = Sentinel(sentinel_config())
    app = FastAPI(title="Sentinel FastAPI example")
    sentinel.init_app(app)

    @app.post("/v1/tailor", response_model=Tailored)
    @rate_limited("resumint.tailor")
    async def tailor(job: str = "engineer") -> Tailored:
        """Tailor a resume to a job (tenant token bucket, fail-open)."""
        return Tailored(job=job, resume=f"A resume tailored to: {job}.")

    @app.post("/v1/ingest")
    async def ingest() -> dict[str, str]:
        """Ingest a PDF (tenant sliding window, fail-closed; guarded by ``routes``)."""
        return {"status": "ingested"}

    @app.post("/auth/login")
    @rate_limited("auth.login")
    def login() -> dict[str, str]:
        """Log in (anonymous: device cookie and IP). A sync handler: it runs in a thread."""
        return {"status": "welcome"}

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    return app


app = create_app()
