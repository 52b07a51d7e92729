"""A policy's ``count`` (SPEC §2): the response statuses that consume its quota.

``[401, 403]`` names statuses, ``["4xx"]`` a whole class; both may be mixed. Parsed at
load into the set of statuses, so the completion step only tests membership.
"""

from __future__ import annotations

import re
from typing import Any

from sentinel_core.errors import ConfigError

_CLASS = re.compile(r"[1-5]xx", re.IGNORECASE)


def parse_count(value: Any, path: str) -> frozenset[int]:
    """The statuses ``value`` names.

    Raises:
        ConfigError: not a non-empty list of statuses (100-599) and classes ("4xx").
    """
    if not isinstance(value, list) or not value:
        raise ConfigError(
            path, 'expected a non-empty list of statuses or classes, e.g. [401, "5xx"]'
        )
    statuses: set[int] = set()
    for index, item in enumerate(value):
        if isinstance(item, str) and _CLASS.fullmatch(item):
            first = int(item[0]) * 100
            statuses.update(range(first, first + 100))
        elif isinstance(item, int) and not isinstance(item, bool) and 100 <= item <= 599:
            statuses.add(item)
        else:
            raise ConfigError(
                f"{path}[{index}]", f'expected a status 100-599 or a class like "4xx", got {item!r}'
            )
    return frozenset(statuses)
