"""Sentinel for Flask: a Flask extension (``init_app``, ``app.extensions["sentinel"]``),
the ``@rate_limited`` view decorator, the ``routes`` middleware and ``@exempt``, which
leaves a view out of the ``routes["*"]`` default (SPEC §5)."""

from ._config import CONFIG_FILE_KEY, CONFIG_KEY
from ._decorator import exempt, rate_limited
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
    "exempt",
    "rate_limited",
]
