"""Sentinel for Flask: a Flask extension (``init_app``, ``app.extensions["sentinel"]``),
the ``@rate_limited`` view decorator and the ``routes`` middleware (SPEC §5)."""

from ._config import CONFIG_FILE_KEY, CONFIG_KEY
from ._decorator import rate_limited
from ._extension import Sentinel
from ._guard import EXTENSION_KEY
from ._translate import RateLimiterUnavailable, RateLimitExceeded

__all__ = [
    "CONFIG_FILE_KEY",
    "CONFIG_KEY",
    "EXTENSION_KEY",
    "RateLimitExceeded",
    "RateLimiterUnavailable",
    "Sentinel",
    "rate_limited",
]
