"""`ratelimit_headers`: a response's RateLimit fields as plain Python values (SPEC §9)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sentinel_core.testing._structured import BareItem, parse_list

_FIELDS = {"ratelimit-policy": "policy", "ratelimit": "state"}
_REQUIRED = {"policy": "q", "state": "r"}
"""The one parameter each field's members must have (the IETF RateLimit draft)."""
_COUNTS = ("q", "w", "r", "t")
"""Parameters that, where present, must be non-negative Integers."""


def ratelimit_headers(
    headers: Mapping[Any, Any] | Iterable[tuple[Any, Any]],
) -> dict[str, dict[str, dict[str, BareItem]]]:
    """Parse a response's ``RateLimit-Policy`` and ``RateLimit`` fields.

    Args:
        headers: the response's headers: any mapping of names to values (a test
            client's response headers, a dict), or (name, value) pairs, ``str`` or
            ``bytes`` (raw ASGI headers). Names are case-insensitive; a field given on
            several lines is read as their values joined with ``", "``, as HTTP does.

    Returns:
        ``{"policy": {name: {"q": ..., "w": ..., ...}}, "state": {name: {"r": ...,
        "t": ..., ...}}}``: each field's members by policy name, with their parameters
        (Integers as `int`, Byte Sequences such as ``pk`` as `bytes`, Strings and Tokens
        as `str`). A field that is absent gives an empty dict.

    Raises:
        ValueError: a field is not a valid Structured Field List (RFC 9651); a member
            is not a policy name (a String or Token) with parameters; a name appears
            twice in one field; ``q`` (policy) or ``r`` (state) is missing; or ``q``,
            ``w``, ``r`` or ``t`` is not a non-negative Integer.

    Example::

        fields = ratelimit_headers(response.headers)
        assert fields["state"]["api.search"]["r"] == 0
    """
    lines: dict[str, list[str]] = {}
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    for name, value in pairs:
        key = _FIELDS.get(_text(name).lower())
        if key is not None and _text(value).strip(" "):  # an empty line adds no member
            lines.setdefault(key, []).append(_text(value))
    return {key: _members(key, ", ".join(lines.get(key, ()))) for key in _REQUIRED}


def _text(value: str | bytes) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


def _members(key: str, value: str) -> dict[str, dict[str, BareItem]]:
    field = "RateLimit-Policy" if key == "policy" else "RateLimit"
    members: dict[str, dict[str, BareItem]] = {}
    for item in parse_list(value):
        name = item.value
        if not isinstance(name, str):
            raise ValueError(f"{field}: a member is not a policy name: {name!r}")
        if name in members:
            raise ValueError(f"{field}: {name!r} appears twice")
        if _REQUIRED[key] not in item.parameters:
            raise ValueError(f"{field}: {name!r} has no {_REQUIRED[key]!r} parameter")
        for parameter in _COUNTS:
            count = item.parameters.get(parameter, 0)
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise ValueError(
                    f"{field}: {name!r} has {parameter}={count!r}, not a non-negative integer"
                )
        members[name] = dict(item.parameters)
    return members
