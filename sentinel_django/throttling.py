"""``SentinelThrottle``: Django REST framework's throttle idiom on Sentinel's lifecycle.

A view names its endpoint id in ``sentinel_endpoint``; the throttle admits the request
on it (once: an id the middleware or a decorator already admitted is not charged
again). DRF answers a throttled request with its own 429; the middleware replaces that
with Sentinel's answer (SPEC §4: 429 or 503, problem+json, Retry-After), so the
throttle needs ``SentinelMiddleware``, which also adds the RateLimit fields and
completes the request.

```python
class Export(APIView):
    throttle_classes = [SentinelThrottle]
    sentinel_endpoint = "reports.export"
```
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured  # type: ignore[import-untyped]
from rest_framework.throttling import BaseThrottle  # type: ignore[import-untyped]

from . import conf
from ._lifecycle import admit, passage_of, unpaid
from ._translate import DRF_AUTHENTICATED


class SentinelThrottle(BaseThrottle):  # type: ignore[misc]
    """Throttle a DRF view with the policy its ``sentinel_endpoint`` attribute names."""

    def __init__(self) -> None:
        self._wait: float | None = None

    def allow_request(self, request: Any, view: Any) -> bool:
        endpoint_id = getattr(view, "sentinel_endpoint", None)
        if not isinstance(endpoint_id, str):
            raise ImproperlyConfigured(
                f"{type(view).__name__}: SentinelThrottle needs a sentinel_endpoint attribute"
            )
        native = request._request
        passage = passage_of(native)
        if not passage.middleware:
            raise ImproperlyConfigured(
                "SentinelThrottle needs sentinel_django.middleware.SentinelMiddleware"
            )
        setattr(native, DRF_AUTHENTICATED, True)  # request.user is DRF's user now
        runtime = conf.runtime()
        if not runtime.enabled:  # SPEC §2: served untouched
            return True
        charged = unpaid(passage, runtime.throttled(type(view), endpoint_id))
        refused = admit(native, passage, runtime, charged) if charged.endpoints else None
        if refused is None:
            return True
        retry_after = refused.get("Retry-After")
        self._wait = float(retry_after) if retry_after is not None else None
        passage.refusal = refused
        return False

    def wait(self) -> float | None:
        """Seconds until the request could be admitted, as the denial's Retry-After."""
        return self._wait
