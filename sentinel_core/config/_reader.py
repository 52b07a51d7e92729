"""Reading one table of a configuration: the strict, key-path-naming primitives that
`_config` and `_config_identity` build on."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from sentinel_core._models import Rate
from sentinel_core.errors import ConfigError

_UNIT_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}
# ASCII digits only (``\d`` would accept any Unicode digit), and no trailing newline.
_RATE_RE = re.compile(r"[ \t]*([0-9]+)[ \t]*/[ \t]*(second|minute|hour|day)[ \t]*")
_MAX_RATE_DIGITS = 16
"""2**53 has 16 digits: longer counts can only be too large (and would make `int` slow)."""


class Section:
    """A mapping being read; remembers which keys were used so leftovers are errors."""

    def __init__(self, data: Mapping[str, Any], path: str) -> None:
        self._data = data
        self._path = path
        self._used: set[str] = set()

    @property
    def location(self) -> str:
        """This section's own key path (``""`` for the root)."""
        return self._path

    def path(self, key: str) -> str:
        return f"{self._path}.{key}" if self._path else key

    def names(self) -> list[str]:
        return list(self._data)

    def has(self, key: str) -> bool:
        return key in self._data

    def raw(self, key: str) -> Any:
        self._used.add(key)
        return self._data[key]

    def text(self, key: str, default: str | None = None, *, required: bool = False) -> str | None:
        if key not in self._data:
            if required:
                raise ConfigError(self.path(key), "missing key")
            return default
        value = self.raw(key)
        if not isinstance(value, str) or not value:
            raise ConfigError(self.path(key), f"expected a non-empty string, got {value!r}")
        return value

    def integer(
        self, key: str, default: int, *, minimum: int = 1, maximum: int | None = None
    ) -> int:
        if key not in self._data:
            return default
        value = self.raw(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(self.path(key), f"expected an integer, got {value!r}")
        if value < minimum or (maximum is not None and value > maximum):
            bounds = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
            raise ConfigError(self.path(key), f"must be {bounds}, got {value}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        if key not in self._data:
            return default
        value = self.raw(key)
        if not isinstance(value, bool):
            raise ConfigError(self.path(key), f"expected true or false, got {value!r}")
        return value

    def section(self, key: str) -> Section | None:
        if key not in self._data:
            return None
        value = self.raw(key)
        if not isinstance(value, Mapping):
            raise ConfigError(self.path(key), f"expected a table/mapping, got {value!r}")
        return Section(value, self.path(key))

    def finish(self) -> None:
        for key in self._data:
            if key not in self._used:
                raise ConfigError(self.path(str(key)), "unknown key")


def parse_rate(text: object, path: str) -> Rate:
    """Parse ``"N/second|minute|hour|day"`` into a `Rate` with a positive integer count."""
    match = _RATE_RE.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise ConfigError(path, f'expected "N/second|minute|hour|day" with integer N, got {text!r}')
    if len(match.group(1).lstrip("0")) > _MAX_RATE_DIGITS:
        raise ConfigError(path, "the count is too large: past 2**53 where Lua stops being exact")
    count = int(match.group(1))
    if count < 1:
        raise ConfigError(path, f"the count must be at least 1, got {text!r}")
    return Rate(count, _UNIT_SECONDS[match.group(2)])
