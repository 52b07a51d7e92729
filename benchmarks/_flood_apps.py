"""The apps `bench_flood.py` serves with 4 workers: one per limiter, the same routes each.

Every app has three routes:

* ``/limited``: the handler behind the limiter, ``10/minute`` for one identity (the
  flood's target);
* ``/bare``: the same handler, no limiter (the stack's own cost);
* ``/evalsha``: the same handler awaiting one bare ``EVALSHA`` of ``return 1`` (the
  in-stack floor: one Redis round trip inside this framework and server);
* ``/refused``: the same handler answering 429, no limiter (what a refusal costs the
  framework and server by themselves: Django, for one, logs every 4xx response).

Chosen by environment variables, because the servers import the app themselves:
``FLOOD_KIND`` (``sentinel``, ``flask-limiter``, ``slowapi``, ``django-ratelimit``;
``sentinel-unobserved``: Flask, Sentinel's built-in metrics and log unregistered) and
``FLOOD_REDIS`` (the private redis-server's URL). Logging goes to stderr at INFO, as an
app that keeps its libraries' INFO records would have it: the benchmark counts lines.
"""

# No `from __future__ import annotations`: FastAPI reads the handlers' annotations at
# runtime, and `Request` is imported inside the factory.
import logging
import os
import time
from typing import Any

import jwt

SECRET = "flood-benchmark-secret-of-32-bytes!"
RATE = "10/minute"
DJANGO_RATE = "10/m"  # django-ratelimit's spelling
ONE = "return 1"


def token() -> str:
    """The flooding tenant's bearer token (Sentinel's tenant identity is the JWT ``sub``)."""
    return jwt.encode({"sub": "flooder", "exp": int(time.time()) + 86_400}, SECRET, "HS256")


def sentinel_config() -> dict[str, Any]:
    return {
        "redis_url": os.environ["FLOOD_REDIS"],
        # generous: a loaded 2-core box must not turn a slow call into a 503
        "socket_timeout_ms": 1_000,
        "jwt": {"key": SECRET},
        "policies": {"flood": {"algorithm": "token_bucket", "rate": RATE, "fail_mode": "closed"}},
    }


def _logging() -> str:
    logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
    return os.environ.get("FLOOD_KIND", "sentinel")


def flask_app() -> Any:
    """Flask (gunicorn -w 4): Sentinel or Flask-Limiter."""
    import redis
    from flask import Flask

    kind = _logging()
    app = Flask(__name__)
    client = redis.Redis.from_url(os.environ["FLOOD_REDIS"])
    sha = client.script_load(ONE)

    def handler() -> str:
        return "ok"

    if kind.startswith("sentinel"):
        import sentinel_flask

        app.config["SENTINEL"] = sentinel_config()
        extension = sentinel_flask.Sentinel(app)
        if kind == "sentinel-unobserved":
            manager = extension.get_core(app).plugin_manager
            for name in ("sentinel.metrics", "sentinel.logging"):
                manager.unregister(name=name)
        limited = sentinel_flask.rate_limited("flood")(handler)
    else:
        from flask_limiter import Limiter
        from flask_limiter.util import get_remote_address

        limiter = Limiter(get_remote_address, app=app, storage_uri=os.environ["FLOOD_REDIS"])
        limited = limiter.limit(RATE)(handler)

    def evalsha() -> str:
        client.evalsha(sha, 0)
        return "ok"

    def refused() -> tuple[str, int]:
        return "ok", 429

    app.add_url_rule("/limited", "limited", limited)
    app.add_url_rule("/bare", "bare", handler)
    app.add_url_rule("/evalsha", "evalsha", evalsha)
    app.add_url_rule("/refused", "refused", refused)
    return app


def fastapi_app() -> Any:
    """FastAPI (uvicorn --workers 4): Sentinel or slowapi."""
    import redis.asyncio
    from fastapi import FastAPI, Request, Response

    kind = _logging()
    client = redis.asyncio.Redis.from_url(os.environ["FLOOD_REDIS"])
    app = FastAPI()

    @app.get("/bare")
    async def bare() -> str:
        return "ok"

    @app.get("/evalsha")
    async def evalsha() -> str:
        await client.eval(ONE, 0)  # EVALSHA after the first call (redis-py's script cache)
        return "ok"

    @app.get("/refused")
    async def refused() -> Response:
        return Response('"ok"', status_code=429, media_type="application/json")

    if kind == "sentinel":
        import sentinel_fastapi

        sentinel = sentinel_fastapi.Sentinel(sentinel_config())
        sentinel.init_app(app)

        @app.get("/limited")
        @sentinel_fastapi.rate_limited("flood")
        async def limited() -> str:
            return "ok"

    else:
        from slowapi import Limiter, _rate_limit_exceeded_handler
        from slowapi.errors import RateLimitExceeded
        from slowapi.util import get_remote_address

        limiter = Limiter(key_func=get_remote_address, storage_uri=os.environ["FLOOD_REDIS"])
        app.state.limiter = limiter
        app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)  # type: ignore[arg-type]

        @app.get("/limited")
        @limiter.limit(RATE)
        async def limited(request: Request) -> str:
            return "ok"

    return app


def django_app() -> Any:
    """Django (gunicorn -w 4): Sentinel or django-ratelimit (on django-redis)."""
    import django
    from django.conf import settings
    from django.core.wsgi import get_wsgi_application

    kind = _logging()
    sentinel = kind == "sentinel"
    settings.configure(
        DEBUG=False,
        SECRET_KEY=SECRET,
        ALLOWED_HOSTS=["*"],
        ROOT_URLCONF="benchmarks._flood_django_urls",
        INSTALLED_APPS=["sentinel_django"] if sentinel else [],
        MIDDLEWARE=[],
        SENTINEL=sentinel_config(),
        CACHES={
            "default": {
                "BACKEND": "django_redis.cache.RedisCache",
                "LOCATION": os.environ["FLOOD_REDIS"],
            }
        },
        LOGGING_CONFIG=None,
    )
    django.setup()
    return get_wsgi_application()
