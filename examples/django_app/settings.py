"""Sentinel on Django: the three policies of the quick start, in a minimal project.

Run it (``memory://`` store, this process only)::

    cd examples/django_app
    python manage.py runserver

or on Redis (which must have ``maxmemory-policy noeviction`` and a bounded
``maxmemory``; guarded requests fail with the check's message otherwise, and
``python manage.py check --deploy`` reports it before you deploy)::

    SENTINEL_REDIS_URL=redis://127.0.0.1:6379/0 python manage.py runserver

and behind a real server, from this folder: ``gunicorn -w 4 wsgi:application``.

Then, with a development token::

    TOKEN=$(python manage.py token tenant-42)
    for i in $(seq 25); do
      curl -s -o /dev/null -w "%{http_code}\\n" -X POST localhost:8000/v1/tailor \\
        -H "Authorization: Bearer $TOKEN"
    done

``POST /v1/tailor`` (tenant token bucket, fail-open; an async view) and
``POST /v1/ingest`` (tenant sliding window, fail-closed; a class-based view) are
decorated; ``POST /v1/login`` (anonymous: device cookie and client IP) is guarded by the
``routes`` of the middleware. Secrets come from ``SENTINEL_JWT_KEY`` and
``SENTINEL_COOKIE_SECRET``; the defaults are for development only.
``SENTINEL_SOCKET_TIMEOUT_MS`` (default 20) and ``SENTINEL_BREAKER_OPEN_SECONDS``
(default 30) set the budget of a Redis call and the breaker's quarantine;
``SENTINEL_FALLBACK_RATE`` (default 2/second), ``SENTINEL_FALLBACK_SCOPE`` (``process``,
the default, or ``fleet``) and ``SENTINEL_FLEET_HEARTBEAT_SECONDS`` (default 5) the
fail-open allowance of ``/v1/tailor``.
"""

from __future__ import annotations

import os

DEV_JWT_KEY = "dev-only-jwt-key-change-me-0123456789abcdef"
DEV_COOKIE_SECRET = "dev-only-cookie-secret-change-me-0123456789"

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "dev-only-django-secret-key-change-me-0123456789")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["localhost", "127.0.0.1"]
ROOT_URLCONF = "urls"
USE_TZ = True

INSTALLED_APPS = ["sentinel_django"]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Early: a denied request costs one Redis call and nothing else.
    "sentinel_django.middleware.SentinelMiddleware",
    "django.middleware.common.CommonMiddleware",
]
# A bearer-token API: no sessions, no CSRF middleware (no cookie authenticates a request;
# the device cookie only identifies an anonymous client for rate limiting).

SENTINEL = {
    "redis_url": os.environ.get("SENTINEL_REDIS_URL", "memory://"),
    "socket_timeout_ms": int(os.environ.get("SENTINEL_SOCKET_TIMEOUT_MS", "20")),
    "breaker": {"open_seconds": int(os.environ.get("SENTINEL_BREAKER_OPEN_SECONDS", "30"))},
    "fleet_heartbeat_seconds": int(os.environ.get("SENTINEL_FLEET_HEARTBEAT_SECONDS", "5")),
    "jwt": {"algorithms": ["HS256"], "key": os.environ.get("SENTINEL_JWT_KEY", DEV_JWT_KEY)},
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
    # Route templates as urls.py spells them (no leading slash needed).
    "routes": {"POST v1/login": "auth.login"},
}
