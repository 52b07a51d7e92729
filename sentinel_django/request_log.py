"""Django's own record of each denied request, dropped: Sentinel's record stands for it.

Django logs every 4xx response at WARNING on ``django.request``. During a flood of
denials that is one line per denied request, exactly the flood SPEC §7 keeps out of the
logs: Sentinel writes at most one record per endpoint, identity and reason per second,
counting the rest in its ``suppressed`` field. So the app installs `DeniedRequestFilter`
on ``django.request``, and it drops the records of the responses Sentinel itself
refused. Every other record passes, the app's own 429s and 503s included.

The denied requests are remembered in a weak set: nothing is added to Django's request
object, and a request is forgotten once Django is done with it.
"""

from __future__ import annotations

import logging
import weakref

from django.http import HttpRequest  # type: ignore[import-untyped]

LOGGER = "django.request"

_denied: weakref.WeakSet[HttpRequest] = weakref.WeakSet()


def mark_denied(request: HttpRequest) -> None:
    """Note that Sentinel answered ``request`` with a denial."""
    _denied.add(request)


class DeniedRequestFilter(logging.Filter):
    """Drops ``django.request`` records about responses Sentinel denied."""

    def filter(self, record: logging.LogRecord) -> bool:
        request = getattr(record, "request", None)
        return not (isinstance(request, HttpRequest) and request in _denied)


def install() -> None:
    """Add the filter to ``django.request``, once however often the app is readied."""
    logger = logging.getLogger(LOGGER)
    if not any(isinstance(existing, DeniedRequestFilter) for existing in logger.filters):
        logger.addFilter(DeniedRequestFilter())
