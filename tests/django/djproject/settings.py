"""Settings for the Django suite; each test swaps ``SENTINEL`` with ``override_settings``."""

SECRET_KEY = "django-tests-only-0123456789abcdef0123456789abcdef"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "localhost"]
USE_TZ = True
DATABASES = {
    # Shared in-memory SQLite (Django opens SQLite with uri=True): the users of the
    # per-user tests, seen by every thread; created by those tests only (users_db).
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": "file:sentinel-django-tests?mode=memory&cache=shared",
    }
}
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.sessions",
    "rest_framework.authtoken",
    "sentinel_django",
]
MIDDLEWARE = ["sentinel_django.middleware.SentinelMiddleware"]
ROOT_URLCONF = "djproject.urls"
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": [],
    "UNAUTHENTICATED_USER": None,
}
ROUTES = {
    "POST items/<int:pk>": "pdftalk.ingest",
    "GET items/<int:pk>": "resumint.tailor",
    "POST async-items/<int:pk>": "pdftalk.ingest",
    "POST v1/ingest": "pdftalk.ingest",
    "POST v1/cbv-class": "pdftalk.ingest",
    "POST v1/cbv-handler": "pdftalk.ingest",
}
"""The middleware's routes: undecorated views, and decorated ones (one token only)."""

SENTINEL = {
    "redis_url": "memory://",
    "policies": {
        "pdftalk.ingest": {"algorithm": "sliding_window", "rate": "3/minute", "fail_mode": "closed"}
    },
}
"""A valid placeholder until a test installs the SPEC §2 configuration."""
