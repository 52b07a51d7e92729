"""Sentinel for Django: settings, system checks, middleware and ``@rate_limited``.

```python
INSTALLED_APPS += ["sentinel_django"]
MIDDLEWARE += ["sentinel_django.middleware.SentinelMiddleware"]
SENTINEL = {...}  # SPEC §2

from sentinel_django import exempt, rate_limited
```
"""

from .conf import get_sentinel
from .decorators import exempt, rate_limited

__all__ = ["exempt", "get_sentinel", "rate_limited"]
