"""Django's own record of each denied request, dropped: Sentinel's record stands for it.

Django logs every 4xx response at WARNING on ``django.request``. During a flood of
denials that is one line per denied request, exactly the flood SPEC §7 keeps out of the
logs: Sentinel writes at most one record per endpoint, identity and reason per second,
counting the rest in its ``suppressed`` field. So the app installs `DeniedRequestFilter`
on ``django.request``, and it drops the records of the 429s and 503s Sentinel itself
answered on a decision. Every other record passes: the app's own 429s and 503s, and
Sentinel's 401s, which Sentinel does not log.

The denied requests are remembered in a weak set: nothing is added to Django's request
object, and a request is forgotten once Django is done with it.
"""

from __future__ import annotations

import logging
import weakref

from django.http import HttpRequest  # type: ignore[import-untyped]

from sentinel_core.adapter import Outcome

LOGGER = "django.request"

_denied: weakref.WeakSet[HttpRequest] = weakref.WeakSet()


def mark_denied(request: HttpRequest, denial: Outcome) -> None:
    """Note that Sentinel answered ``request`` with ``denial``, when Sentinel logs it: a
    decision's 429 or 503. A 401 (no usable credentials) makes no decision and no
    Sentinel record, so Django's record of it is kept."""
    if denial.decision is not None:
        _denied.add(request)


class DeniedRequestFilter(logging.Filter):
    """Drops ``django.request`` records about responses Sentinel denied."""

    def filter(self, record: logging.LogRecord) -> bool:
        # A record without a request (None is never in a weak set) passes.
        return getattr(record, "request", None) not in _denied


def install() -> None:
    """Add the filter to ``django.request``, once however often the app is readied."""
    logger = logging.getLogger(LOGGER)
    if not any(isinstance(existing, DeniedRequestFilter) for existing in logger.filters):
        logger.addFilter(DeniedRequestFilter())
